"""CrewHook over real HTTP against the local crew service.

The real-HTTP counterpart of tests/hooks/test_crew.py: the same contract, retry rules and status
path handling, but every request goes through a socket to ``LocalCrewService`` and every claim is
checked against what the service itself recorded (request counters, executions, feedback history).
Waits poll a condition under a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_provider_crew.connection_form import StatusPathStyle
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewNotFoundError,
    CrewOutcomeUnknownError,
    CrewRateLimitedError,
    CrewServerError,
    CrewValidationError,
)
from airflow_provider_crew.hooks.client.request import LEARNED_STATUS_PATHS
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.models import ResumeStatus
from airflow_provider_crew.status import CrewState, CrewStatus
from airflow_provider_crew.testing import wait_until
from tests.conftest import close_shared_sessions, loop_session

pytestmark = pytest.mark.integration

RESEARCH_INPUTS = {"topic": "tidal energy", "current_year": "2026"}
WRONG_TOKEN = "wrong-token-7c1e5d0a"
HUMAN_WEBHOOK_TOKEN = "human-hook-token-91b2"
FAST = {"retry_delay": 0.05}  # back-off stays short; Retry-After from the service still wins


@pytest.fixture
def connect(crew_service, monkeypatch):
    """Install an ``AIRFLOW_CONN_*`` for ``crew_service`` and return a CrewHook on it."""

    def install(
        conn_id: str = "crew_default",
        *,
        token: str = "org",
        crew: str | None = None,
        password: str | None = None,
        **extra: object,
    ) -> CrewHook:
        extra = {**FAST, **extra}
        if password is None:
            env = crew_service.connection_env(conn_id, token, crew, **extra)
        else:  # a token the service does not know
            conn = crew_service.connection_dict(token, crew, **extra)
            conn["password"] = password
            env = {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return CrewHook(conn_id)

    return install


def wait_for_terminal(hook: CrewHook, kickoff_id: str, timeout: float = 10.0) -> CrewStatus:
    """Poll through the hook itself until the execution is finished (deadline, no bare sleeps)."""

    def finished() -> CrewStatus | None:
        status = hook.get_status(kickoff_id)
        return status if status.is_terminal else None

    return wait_until(finished, timeout=timeout, interval=0.02)


def human_webhook(crew_service) -> dict[str, object]:
    return {
        "url": crew_service.webhooks.url_for("human"),
        "authentication": {"strategy": "bearer", "token": HUMAN_WEBHOOK_TOKEN},
    }


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the contract ---------------------------------------------------------------------------------


def test_get_inputs(crew_service, connect):
    assert connect().get_inputs() == ["topic", "current_year"]
    assert connect("crew_review", crew="review").get_inputs() == ["topic", "audience"]

    assert crew_service.request_count("inputs") == 2
    assert crew_service.counters["by_crew"]["review"]["inputs"] == 1


def test_kickoff_and_get_status_until_success(crew_service, connect):
    hook = connect()

    kickoff_id = hook.kickoff(RESEARCH_INPUTS, meta={"run": "r1"})
    status = wait_for_terminal(hook, kickoff_id)

    assert status.state is CrewState.SUCCEEDED
    assert status.raw_state == "SUCCESS"
    execution = crew_service.executions[kickoff_id]
    assert execution["inputs"] == RESEARCH_INPUTS
    assert execution["meta"] == {"run": "r1"}
    assert execution["token_kind"] == "org"
    assert status.output == execution["result"]
    assert status.output.startswith("reporting_task by Reporting Analyst (attempt 1)")
    assert crew_service.request_count("kickoff") == 1
    assert crew_service.request_count("status") >= 1


def test_wrong_token_is_an_authentication_error_that_does_not_quote_the_token(crew_service, connect):
    hook = connect(password=WRONG_TOKEN)

    with pytest.raises(CrewAuthenticationError) as inputs_error:
        hook.get_inputs()
    with pytest.raises(CrewAuthenticationError) as kickoff_error:
        hook.kickoff(RESEARCH_INPUTS)

    for error in (inputs_error.value, kickoff_error.value):
        assert error.http_status == 401
        assert error.service_message == "Invalid or missing bearer token"
        assert WRONG_TOKEN not in str(error)
        assert crew_service.org_token not in str(error)
    assert crew_service.counters["auth"]["invalid"] == 2
    assert crew_service.executions == {}
    # 401 is not retryable: one request each.
    assert crew_service.request_count("inputs") == 1
    assert crew_service.request_count("kickoff") == 1


def test_user_token_works(crew_service, connect):
    hook = connect(token="user")

    assert hook.config.token == crew_service.user_token
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    assert wait_for_terminal(hook, kickoff_id).state is CrewState.SUCCEEDED

    assert crew_service.executions[kickoff_id]["token_kind"] == "user"
    assert crew_service.counters["auth"]["user"] >= 2
    assert crew_service.counters["auth"]["org"] == 0


def test_missing_inputs_is_a_validation_error_naming_them(crew_service, connect):
    with pytest.raises(CrewValidationError) as caught:
        connect().kickoff({"topic": "tides"})

    assert caught.value.http_status == 422
    assert caught.value.missing_inputs == ["current_year"]
    assert caught.value.service_message == "Missing required inputs"
    assert "current_year" in str(caught.value)
    assert crew_service.executions == {}


def test_unknown_kickoff_id_is_not_found(crew_service, connect):
    hook = connect()
    unknown = str(uuid.uuid4())

    with pytest.raises(CrewNotFoundError) as caught:
        hook.get_status(unknown)

    assert caught.value.http_status == 404
    assert unknown in str(caught.value)
    # auto style: both forms were tried, and a pair of 404s teaches nothing.
    assert crew_service.counters["status_paths"] == {"contract": 1, "deployed": 1}
    assert LEARNED_STATUS_PATHS == {}


# -- human input and resume -----------------------------------------------------------------------


def test_resume_approve_completes_with_the_feedback_as_context(crew_service, connect):
    hook = connect("crew_review", crew="review")
    hooks = crew_service.webhooks

    kickoff_id = hook.kickoff({"topic": "tides"}, human_input_webhook=human_webhook(crew_service))
    (note,) = hooks.wait_for_count("human", 1)

    assert note.authorization == f"Bearer {HUMAN_WEBHOOK_TOKEN}"
    assert note.json["execution_id"] == kickoff_id
    paused = hook.get_status(kickoff_id)
    assert paused.state is CrewState.WAITING_FOR_HUMAN_INPUT
    assert paused.paused_task_id == note.json["task_id"]
    assert paused.paused_task_output == note.json["task_output"]

    result = hook.resume(kickoff_id, paused.paused_task_id, "looks good", True)

    assert result.status is ResumeStatus.RESUMED
    final = wait_for_terminal(hook, kickoff_id)
    assert final.state is CrewState.SUCCEEDED
    execution = crew_service.executions[kickoff_id]
    assert [(f["feedback"], f["is_approve"], f["task_name"]) for f in execution["feedback"]] == [
        ("looks good", True, "draft_task")
    ]
    assert execution["attempts"]["draft_task"] == 1
    assert final.output.startswith("publish_task by Editor")
    assert "feedback: looks good" in final.output
    assert crew_service.request_count("resume") == 1


def test_resume_reject_retries_the_task_with_the_feedback_then_approve(crew_service, connect):
    hook = connect("crew_review", crew="review")
    hooks = crew_service.webhooks
    kickoff_id = hook.kickoff({"topic": "tides"}, human_input_webhook=human_webhook(crew_service))
    first = hooks.wait_for_count("human", 1)[0]
    assert "(attempt 1)" in first.json["task_output"]

    rejected = hook.resume(kickoff_id, first.json["task_id"], "add numbers", False)

    assert rejected.status is ResumeStatus.RETRYING
    second = hooks.wait_for_count("human", 2)[1]
    # The retried draft carries the feedback: the service re-ran the task with it as context.
    assert second.json["task_id"] == first.json["task_id"]
    assert second.json["task_output"].startswith("draft_task by Writer (attempt 2)")
    assert "feedback: add numbers" in second.json["task_output"]
    paused_again = hook.get_status(kickoff_id)
    assert paused_again.state is CrewState.WAITING_FOR_HUMAN_INPUT
    assert "feedback: add numbers" in paused_again.paused_task_output

    approved = hook.resume(kickoff_id, paused_again.paused_task_id, "ship it", True)

    assert approved.status is ResumeStatus.RESUMED
    final = wait_for_terminal(hook, kickoff_id)
    assert final.state is CrewState.SUCCEEDED
    execution = crew_service.executions[kickoff_id]
    assert [(f["feedback"], f["is_approve"], f["attempt"]) for f in execution["feedback"]] == [
        ("add numbers", False, 1),
        ("ship it", True, 2),
    ]
    assert execution["attempts"]["draft_task"] == 2
    draft = next(task for task in execution["tasks"] if task["name"] == "draft_task")
    assert draft["attempt"] == 2 and "feedback: add numbers" in draft["output"]
    assert "feedback: add numbers" in final.output and "feedback: ship it" in final.output
    assert crew_service.request_count("kickoff") == 1
    assert crew_service.request_count("resume") == 2


def test_resume_of_an_execution_that_is_not_paused_is_a_bad_request(crew_service, connect):
    hook = connect()
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.wait_for_state(kickoff_id)

    with pytest.raises(CrewBadRequestError) as caught:
        hook.resume(kickoff_id, "research_task", "too late", True)

    assert caught.value.http_status == 400
    assert "not waiting for human input" in str(caught.value)
    assert crew_service.executions[kickoff_id]["feedback"] == []
    with pytest.raises(CrewNotFoundError):
        hook.resume(str(uuid.uuid4()), "research_task", "who?", True)
    # 400 and 404 are answers, not transient failures: one request each.
    assert crew_service.request_count("resume") == 2


# -- retry rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_get_is_retried_after_429_and_503(crew_service, connect, status):
    crew_service.faults.error(status, count=2, endpoint="inputs", retry_after=0.05)

    assert connect().get_inputs() == ["topic", "current_year"]

    assert crew_service.request_count("inputs") == 3
    assert crew_service.counters["responses"]["inputs"] == {str(status): 2, "200": 1}


def test_retry_after_from_the_service_wins_over_the_connection_delay(crew_service, connect):
    crew_service.faults.unavailable(count=1, endpoint="inputs", retry_after=0.4)
    hook = connect()

    started = time.monotonic()
    hook.get_inputs()

    assert time.monotonic() - started >= 0.4  # retry_delay is 0.05: only Retry-After explains this
    assert crew_service.request_count("inputs") == 2


def test_rate_limiting_is_retried_until_the_retry_budget_is_used(crew_service, connect):
    crew_service.faults.rate_limit(count=None, endpoint="inputs", retry_after=0.01)

    with pytest.raises(CrewRateLimitedError) as caught:
        connect(retry_limit=0, retry_budget=0.5).get_inputs()

    assert caught.value.http_status == 429
    assert "retry_budget of 0.5 s is used up" in str(caught.value)
    assert crew_service.request_count("inputs") >= 3  # retry_limit=0 does not stop 429 retries


def test_a_burst_of_100_rate_limits_costs_no_task_retry_and_no_duplicate_kickoff(
    crew_service, monkeypatch, caplog
):
    """100 mapped kickoff tasks, 25 running at a time, meet 100 answers of 429 (Retry-After: 1).

    Default connection settings. Each task does what CrewKickoffOperator does: GET /inputs, then
    POST /kickoff. Every request gets 429 until the burst is spent, so the 100 answers fall on the
    first 25 calls: one of them meets at least 4 in a row, more than the 3 retries a count-only
    policy allowed (issue: 14 of 60 such tasks needed an Airflow retry).
    """
    for name, value in crew_service.connection_env("crew_default").items():
        monkeypatch.setenv(name, value)
    crew_service.faults.rate_limit(count=100, endpoint="*", retry_after=1)
    topics = [f"topic {n:03d}" for n in range(100)]

    def mapped_task(topic: str) -> str:
        hook = CrewHook()  # one hook per task, as each task instance builds its own
        assert hook.get_inputs() == ["topic", "current_year"]
        return hook.kickoff({"topic": topic, "current_year": "2026"})

    with (
        caplog.at_level(logging.WARNING, logger="airflow_provider_crew.hooks.client.retry"),
        ThreadPoolExecutor(max_workers=25) as pool,
    ):
        kickoff_ids = list(pool.map(mapped_task, topics))  # a task that would fail raises here

    assert crew_service.faults.counts == {"error_429": 100}
    assert len(set(kickoff_ids)) == 100
    assert crew_service.counters["responses"]["kickoff"].get("200") == 100
    assert sorted(crew_service.executions[k]["inputs"]["topic"] for k in kickoff_ids) == topics  # each once
    attempts = [
        int(n) for n in re.findall(r"answered 429; retrying in [\d.]+ s \(next attempt (\d+)", caplog.text)
    ]
    assert max(attempts) >= 5  # some call was answered 429 at least 4 times in a row, and still went through


def test_get_gives_up_on_a_failing_gateway_after_the_retry_limit(crew_service, connect):
    crew_service.faults.error(502, count=None, endpoint="inputs", retry_after=None)

    with pytest.raises(CrewServerError) as caught:
        connect(retry_limit=2).get_inputs()

    assert caught.value.http_status == 502
    assert crew_service.request_count("inputs") == 3  # one try and two retries


def test_status_get_is_retried_after_503(crew_service, connect):
    hook = connect(status_path_style="contract")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.unavailable(count=1, endpoint="status", retry_after=0.05)

    assert hook.get_status(kickoff_id).raw["kickoff_id"] == kickoff_id

    assert crew_service.request_count("status") == 2
    assert crew_service.counters["responses"]["status"] == {"503": 1, "200": 1}


@pytest.mark.parametrize("status", [429, 503])
def test_kickoff_is_repeated_only_when_the_service_said_it_did_not_act(crew_service, connect, status):
    crew_service.faults.error(status, count=1, endpoint="kickoff", retry_after=0.05)

    kickoff_id = connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 2
    assert crew_service.counters["responses"]["kickoff"] == {str(status): 1, "200": 1}
    assert list(crew_service.executions) == [kickoff_id]


def test_kickoff_without_faults_is_sent_once(crew_service, connect):
    connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 1
    assert len(crew_service.executions) == 1


def test_kickoff_still_unavailable_after_the_retry_budget_starts_nothing(crew_service, connect):
    crew_service.faults.unavailable(count=None, endpoint="kickoff", retry_after=0.01)

    with pytest.raises(CrewServerError) as caught:
        connect(retry_budget=0.3).kickoff(RESEARCH_INPUTS)

    assert caught.value.http_status == 503
    assert "may have started" not in str(caught.value)  # the service said it did not act
    assert crew_service.request_count("kickoff") >= 2
    assert crew_service.executions == {}


def test_kickoff_whose_answer_is_lost_is_never_repeated(crew_service, connect):
    """The key guarantee: the service started an execution and reset the connection instead of
    answering. The hook cannot know whether it worked, so it must not send the kickoff again."""
    crew_service.faults.drop_after("kickoff")

    with pytest.raises(CrewOutcomeUnknownError) as caught:
        connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 1
    assert len(crew_service.executions) == 1
    assert crew_service.counters["responses"]["kickoff"] == {"dropped": 1}
    assert crew_service.faults.counts == {"drop_after": 1}
    message = str(caught.value)
    assert "POST /kickoff" in message and "may have started" in message and "not repeated" in message
    assert crew_service.org_token not in message


def test_kickoff_reset_before_it_was_read_is_also_outcome_unknown(crew_service, connect):
    """The service resets the connection without acting. The client cannot tell a reset before
    the request was read from one after (both are 'connection aborted' once the request bytes
    left), so the hook conservatively reports an unknown outcome and does not repeat: at worst a
    kickoff that surely did not run is reported as 'check the service', never started twice."""
    crew_service.faults.drop_before("kickoff")

    with pytest.raises(CrewOutcomeUnknownError) as caught:
        connect().kickoff(RESEARCH_INPUTS)

    assert "Connection aborted" in str(caught.value)
    assert crew_service.request_count("kickoff") == 1
    assert crew_service.executions == {}
    assert crew_service.faults.counts == {"drop_before": 1}


def test_kickoff_behind_a_failing_gateway_is_outcome_unknown(crew_service, connect):
    # 502/504: a proxy may have passed the request on, so a repeat is not safe either.
    crew_service.faults.error(502, count=1, endpoint="kickoff", retry_after=None)

    with pytest.raises(CrewOutcomeUnknownError):
        connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 1


@pytest.mark.parametrize("kind", ["drop_before", "drop_after"])
def test_get_is_retried_after_a_dropped_connection(crew_service, connect, kind):
    crew_service.faults.add({"kind": kind, "endpoint": "inputs", "count": 1})

    assert connect().get_inputs() == ["topic", "current_year"]

    assert crew_service.request_count("inputs") == 2
    assert crew_service.counters["responses"]["inputs"] == {"dropped": 1, "200": 1}


def test_html_500_is_a_server_error_without_the_html(crew_service, connect):
    crew_service.faults.html_500(count=1, endpoint="inputs")

    with pytest.raises(CrewServerError) as caught:
        connect().get_inputs()

    message = str(caught.value)
    assert caught.value.http_status == 500
    assert "GET /inputs answered 500" in message
    for html in ("<", "DOCTYPE", "nginx", "Internal Server Error</"):
        assert html not in message
    assert crew_service.request_count("inputs") == 1  # 500 is not retried


# -- status path styles ---------------------------------------------------------------------------


@pytest.mark.crew_service(status_path="deployed")
def test_auto_style_learns_the_deployed_form(crew_service, connect):
    hook = connect(status_path_style="auto")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)

    hook.get_status(kickoff_id)

    assert crew_service.counters["status_paths"] == {"contract": 1, "deployed": 1}
    assert LEARNED_STATUS_PATHS == {crew_service.base_url: StatusPathStyle.DEPLOYED}

    hook.get_status(kickoff_id)
    connect("crew_other", status_path_style="auto").get_status(kickoff_id)  # learned process-wide

    assert crew_service.counters["status_paths"] == {"contract": 1, "deployed": 3}
    assert crew_service.request_count("status") == 4


@pytest.mark.crew_service(status_path="contract")
def test_contract_style_against_a_contract_service(crew_service, connect):
    hook = connect(status_path_style="contract")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)

    for _ in range(3):
        hook.get_status(kickoff_id)

    assert crew_service.counters["status_paths"] == {"contract": 3, "deployed": 0}
    assert LEARNED_STATUS_PATHS == {}  # fixed styles learn nothing


@pytest.mark.crew_service(status_path="contract")
def test_deployed_style_against_a_contract_only_service_is_not_found(crew_service, connect):
    hook = connect(status_path_style="deployed")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)

    with pytest.raises(CrewNotFoundError) as caught:
        hook.get_status(kickoff_id)

    assert f"GET /status/{kickoff_id}" in str(caught.value)
    assert crew_service.counters["status_paths"] == {"contract": 0, "deployed": 1}


@pytest.mark.crew_service(faults=[{"kind": "status_404", "count": 2}])
def test_fresh_execution_answers_404_first_then_its_status(crew_service, connect):
    hook = connect(status_path_style="contract")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)

    for _ in range(2):
        with pytest.raises(CrewNotFoundError):
            hook.get_status(kickoff_id)
    status = hook.get_status(kickoff_id)

    assert status.raw["kickoff_id"] == kickoff_id
    assert crew_service.counters["responses"]["status"] == {"404": 2, "200": 1}
    assert crew_service.faults.counts == {"status_404": 2}


@pytest.mark.crew_service(faults=[{"kind": "status_404", "count": 2}])
def test_fresh_execution_404s_in_auto_style_cost_two_requests_each(crew_service, connect):
    # In auto mode a 404 on the contract form makes the hook try the deployed form too, so each
    # poll of a still-hidden execution consumes two of its 404s.
    hook = connect(status_path_style="auto")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)

    with pytest.raises(CrewNotFoundError):
        hook.get_status(kickoff_id)
    hook.get_status(kickoff_id)

    assert crew_service.counters["status_paths"] == {"contract": 2, "deployed": 1}
    assert LEARNED_STATUS_PATHS == {crew_service.base_url: StatusPathStyle.CONTRACT}


# -- test_connection ------------------------------------------------------------------------------


def test_test_connection_ok_starts_nothing(crew_service, connect):
    ok, message = connect().test_connection()

    assert ok is True
    assert message.startswith(
        f"OK: the crew at {crew_service.base_url} expects inputs ['topic', 'current_year']"
    )
    assert "organization token" in message
    assert crew_service.request_count("health") == 1
    assert crew_service.request_count("inputs") == 1
    assert crew_service.request_count("kickoff") == 0


def test_test_connection_bad_token(crew_service, connect):
    ok, message = connect(password=WRONG_TOKEN).test_connection()

    assert ok is False
    assert message.startswith("Bad token")
    assert "401" in message
    assert WRONG_TOKEN not in message


def test_test_connection_unreachable(monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DOWN", json.dumps({"conn_type": "crew", "host": url, "password": "tok-abcdef"})
    )

    started = time.monotonic()
    ok, message = CrewHook("crew_down").test_connection()

    assert ok is False
    assert message.startswith("Unreachable")
    assert "after 1 attempt(s)" in message  # the button tries once
    assert "tok-abcdef" not in message
    assert time.monotonic() - started < 5


# -- aget_status (the trigger's path) ------------------------------------------------------------


@pytest.fixture
async def async_hook(connect):
    """A hook for async tests; the loop's shared aiohttp session is closed when the test ends."""
    hook = connect(status_path_style="contract")
    yield hook
    session = loop_session()
    await close_shared_sessions()
    assert session is None or session.closed


async def test_aget_status_reads_the_same_record_as_get_status(crew_service, async_hook):
    kickoff_id = async_hook.kickoff(RESEARCH_INPUTS)
    crew_service.wait_for_state(kickoff_id)

    status = await async_hook.aget_status(kickoff_id)

    assert status.state is CrewState.SUCCEEDED
    assert status.output == crew_service.executions[kickoff_id]["result"]
    assert status == async_hook.get_status(kickoff_id)


async def test_aget_status_retries_503_then_answers(crew_service, async_hook):
    kickoff_id = async_hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.unavailable(count=1, endpoint="status", retry_after=0.05)

    status = await async_hook.aget_status(kickoff_id)

    assert status.raw["kickoff_id"] == kickoff_id
    assert crew_service.request_count("status") == 2
    assert crew_service.counters["responses"]["status"] == {"503": 1, "200": 1}


async def test_aget_status_retries_a_dropped_connection(crew_service, async_hook):
    kickoff_id = async_hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.drop_after("status")

    status = await async_hook.aget_status(kickoff_id)

    assert status.raw["kickoff_id"] == kickoff_id
    assert crew_service.counters["responses"]["status"] == {"dropped": 1, "200": 1}


async def test_aget_status_errors_are_typed(crew_service, async_hook, connect):
    with pytest.raises(CrewNotFoundError):
        await async_hook.aget_status(str(uuid.uuid4()))

    bad = connect("crew_bad", password=WRONG_TOKEN, status_path_style="contract")
    with pytest.raises(CrewAuthenticationError) as caught:
        await bad.aget_status(str(uuid.uuid4()))
    assert WRONG_TOKEN not in str(caught.value)
    assert crew_service.request_count("status") == 2


@pytest.mark.crew_service(status_path="deployed")
async def test_aget_status_learns_the_deployed_form(crew_service, connect):
    hook = connect(status_path_style="auto")
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    try:
        await hook.aget_status(kickoff_id)
        await hook.aget_status(kickoff_id)
    finally:
        await close_shared_sessions()

    assert crew_service.counters["status_paths"] == {"contract": 1, "deployed": 2}
    assert LEARNED_STATUS_PATHS == {crew_service.base_url: StatusPathStyle.DEPLOYED}
