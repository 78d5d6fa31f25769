"""The gateway hole (issue 32): a POST is repeated only when the service itself said it did not act.

Envoy, Istio and cloud load balancers answer 503 on their own (text/plain, no ``Retry-After``) when
the upstream connection resets after the request was forwarded: by then the service may have
started the execution or applied the resume. A busy service answers 503 in its own JSON error shape,
usually with ``Retry-After``. So a kickoff or a resume is repeated only after 429, or 503 with
``Retry-After`` or the service's JSON error body; after a gateway's own 503, a 502 or a 504 the
outcome is unknown: the POST is never repeated and the task fails without retry
(``CrewOutcomeUnknownError``), saying an execution may be running.

Hook-level tests check the request counts against the live local service; DAG runs
(``airflow dags test``, tests/integration/dags/post_rule_dags.py) check that the task fails once,
without using its retries, with one execution started (or one resume applied) at the service.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from airflow_provider_crew.exceptions import CrewOutcomeUnknownError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.models import ResumeStatus
from airflow_provider_crew.status import CrewState
from airflow_provider_crew.testing import LocalCrewService
from airflow_provider_crew.testing.dag_runs import (
    DagRun,
    airflow_env,
    crew_connections_env,
    dags_test,
    migrate_db,
)

pytestmark = pytest.mark.integration

DAGS = Path(__file__).parent / "dags"
RESEARCH_INPUTS = {"topic": "gateways", "current_year": "2026"}
# Short back-off; a budget that a busy service's three Retry-After: 1 fit in, and that ends a
# client's repeats of a gateway 503 (were it to repeat them) within seconds, not minutes.
RETRY_DELAY, RETRY_BUDGET = 0.2, 10
EVERY_KICKOFF = 50  # fires on every kickoff a run could send, retries and task tries included
HUMAN_WEBHOOK_TOKEN = "human-hook-token-post-rule"


def said(text: str) -> str:
    """The output as flowing text (Airflow 3.0 prints errors in boxed, wrapped tracebacks)."""
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", text).split())


# -- hook level: what is sent, and what is raised ------------------------------------------------


@pytest.fixture
def connect(crew_service: LocalCrewService, monkeypatch: pytest.MonkeyPatch):
    def install(conn_id: str = "crew_default", crew: str | None = None) -> CrewHook:
        env = crew_service.connection_env(
            conn_id, crew=crew, retry_delay=RETRY_DELAY, retry_budget=RETRY_BUDGET
        )
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return CrewHook(conn_id)

    return install


def paused_review(crew_service: LocalCrewService, hook: CrewHook) -> tuple[str, str]:
    """Kick off the review crew and wait for its pause; returns (kickoff id, paused task id)."""
    webhook = {
        "url": crew_service.webhooks.url_for("human"),
        "authentication": {"strategy": "bearer", "token": HUMAN_WEBHOOK_TOKEN},
    }
    kickoff_id = hook.kickoff({"topic": "gateways"}, human_input_webhook=webhook)
    (note,) = crew_service.webhooks.wait_for_count("human", 1)
    assert hook.get_status(kickoff_id).state is CrewState.WAITING_FOR_HUMAN_INPUT
    return kickoff_id, note.json["task_id"]


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_kickoff_the_gateway_passed_on_is_sent_once_and_is_outcome_unknown(crew_service, connect, status):
    crew_service.faults.gateway("kickoff", count=EVERY_KICKOFF, status=status)

    with pytest.raises(CrewOutcomeUnknownError) as caught:
        connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 1
    assert len(crew_service.executions) == 1  # the gateway passed it on: it started, once
    assert crew_service.faults.counts == {f"gateway_{status}": 1}
    message = str(caught.value)
    assert "POST /kickoff" in message and "outcome is unknown" in message
    assert "an execution may have started" in message and "not repeated" in message
    assert crew_service.org_token not in message


def test_a_kickoff_refused_with_no_healthy_upstream_is_not_repeated_either(crew_service, connect):
    # The gateway's 503 looks the same whether it passed the request on or not (text, no
    # Retry-After): the client cannot tell them apart, so it reports an unknown outcome.
    crew_service.faults.gateway("kickoff", count=EVERY_KICKOFF, after=False)

    with pytest.raises(CrewOutcomeUnknownError) as caught:
        connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 1
    assert crew_service.executions == {}
    assert "may have started" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [(503, 1), (503, None), (429, 1), (429, None)],
    ids=["503-retry-after", "503-json-body-only", "429-retry-after", "429-bare"],
)
def test_a_busy_service_still_gets_its_kickoff_repeated(crew_service, connect, status, retry_after):
    # The service's own answer: its JSON error body, with or without Retry-After. It did not act.
    crew_service.faults.error(status, count=3, endpoint="kickoff", retry_after=retry_after)

    kickoff_id = connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 4
    assert crew_service.counters["responses"]["kickoff"] == {str(status): 3, "200": 1}
    assert list(crew_service.executions) == [kickoff_id]


def test_a_resume_the_gateway_passed_on_is_applied_once_and_is_outcome_unknown(crew_service, connect):
    hook = connect("crew_review", crew="review")
    kickoff_id, task_id = paused_review(crew_service, hook)
    crew_service.faults.gateway("resume", count=EVERY_KICKOFF)

    with pytest.raises(CrewOutcomeUnknownError) as caught:
        hook.resume(kickoff_id, task_id, "ship it", True)

    assert crew_service.request_count("resume") == 1
    final = crew_service.wait_for_state(kickoff_id)
    assert [(f["feedback"], f["is_approve"]) for f in final["feedback"]] == [("ship it", True)]
    assert final["state"] == "SUCCESS"  # the approval went through behind the gateway's 503
    message = str(caught.value)
    assert "POST /resume" in message and "outcome is unknown" in message
    assert f"the feedback may have been applied to execution {kickoff_id}" in message
    assert "not repeated" in message


def test_a_resume_refused_by_a_busy_service_is_repeated_and_applied_once(crew_service, connect):
    hook = connect("crew_review", crew="review")
    kickoff_id, task_id = paused_review(crew_service, hook)
    crew_service.faults.unavailable(count=2, endpoint="resume", retry_after=0.05)

    assert hook.resume(kickoff_id, task_id, "ship it", True).status is ResumeStatus.RESUMED

    assert crew_service.request_count("resume") == 3
    feedback = crew_service.wait_for_state(kickoff_id)["feedback"]
    assert [(f["feedback"], f["is_approve"]) for f in feedback] == [("ship it", True)]


def test_a_status_get_behind_a_gateway_503_is_still_retried(crew_service, connect):
    hook = connect()
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.gateway("status", count=1)

    assert hook.get_status(kickoff_id).raw["kickoff_id"] == kickoff_id

    assert crew_service.request_count("status") == 2
    assert crew_service.faults.counts == {"gateway_503": 1}


# -- DAG runs: the task fails once, without retry; one execution, one resume ------------------


@pytest.fixture(scope="module")
def post_rule_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow-home-post-rule")
    migrate_db(airflow_env(home, DAGS))
    return home


def run(home: Path, crew_service: LocalCrewService, dag_id: str, *, check: bool = False) -> DagRun:
    env = airflow_env(home, DAGS)
    env.update(
        crew_connections_env(
            crew_service,
            human_webhook_url=crew_service.webhooks.url_for("human"),
            human_webhook_token=HUMAN_WEBHOOK_TOKEN,
        )
    )
    # The connections as users deploy them, HTTP retries on (a busy service's 503s are repeated).
    for conn_id, crew in (("crew_default", None), ("crew_review", "review")):
        env.update(
            crew_service.connection_env(
                conn_id, crew=crew, retry_delay=RETRY_DELAY, retry_budget=RETRY_BUDGET
            )
        )
    return dags_test(dag_id, env, check=check)


def tries(result: DagRun, task_id: str) -> tuple[int, int]:
    """(the task's try number, the tries Airflow archived for a retry) in this run."""
    with sqlite3.connect(result.home / "airflow.db", timeout=30) as db:
        (try_number,) = db.execute(
            "SELECT try_number FROM task_instance WHERE dag_id=? AND run_id=? AND task_id=?",
            (result.dag_id, result.run_id, task_id),
        ).fetchone()
        (archived,) = db.execute(
            "SELECT count(*) FROM task_instance_history WHERE dag_id=? AND run_id=? AND task_id=?",
            (result.dag_id, result.run_id, task_id),
        ).fetchone()
    return try_number, archived


def assert_failed_once_without_retry(result: DagRun, task_id: str, endpoint: str, if_unknown: str) -> None:
    output = said(result.stdout)
    assert result.state == "failed", result.stdout[-4000:]
    assert result.task_states()[(task_id, -1)] == "failed"  # failed, not up_for_retry: retries=2 unused
    assert tries(result, task_id) == (1, 0), "the task was tried more than once"
    assert f"POST /{endpoint}" in output and "the outcome is unknown" in output
    assert if_unknown in output and "Failing without retry" in output


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_kickoff_behind_a_gateway_that_passed_it_on_fails_once_with_one_execution(
    post_rule_home, crew_service, status
):
    crew_service.faults.gateway("kickoff", count=EVERY_KICKOFF, status=status)

    result = run(post_rule_home, crew_service, f"post_rule_kickoff_gateway_{status}")

    assert crew_service.request_count("kickoff") == 1, result.stdout[-4000:]
    assert len(crew_service.executions) == 1  # started once, behind the gateway, and never again
    assert_failed_once_without_retry(result, "kickoff", "kickoff", "an execution may have started")
    assert f"HTTP {status}" in said(result.stdout)


def test_a_kickoff_to_a_busy_service_is_repeated_and_succeeds_in_one_try(post_rule_home, crew_service):
    crew_service.faults.unavailable(count=3, endpoint="kickoff", retry_after=1)

    result = run(post_rule_home, crew_service, "post_rule_kickoff_busy_503", check=True)

    assert result.state == "success"
    assert result.task_states() == {("kickoff", -1): "success"}
    assert tries(result, "kickoff") == (1, 0)
    assert crew_service.request_count("kickoff") == 4  # three refusals, repeated by the client
    (kickoff_id,) = crew_service.executions
    assert result.xcom("kickoff") == kickoff_id
    assert crew_service.faults.counts == {"error_503": 3}


def test_a_resume_behind_a_gateway_that_passed_it_on_is_applied_once_and_fails_once(
    post_rule_home, crew_service
):
    crew_service.faults.gateway("resume", count=EVERY_KICKOFF)

    result = run(post_rule_home, crew_service, "post_rule_resume_gateway")

    assert result.task_states()[("kickoff", -1)] == "success", result.stdout[-4000:]
    assert crew_service.request_count("kickoff") == 1
    assert crew_service.request_count("resume") == 1, result.stdout[-4000:]
    (kickoff_id,) = crew_service.executions
    final = crew_service.wait_for_state(kickoff_id)
    assert [(f["feedback"], f["is_approve"]) for f in final["feedback"]] == [("ship it", True)]
    assert_failed_once_without_retry(result, "resume", "resume", "the feedback may have been applied")
