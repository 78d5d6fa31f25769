"""Operators over real HTTP against the local crew service, called directly (no scheduler)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_crew._compat import AirflowFailException
from airflow_provider_crew.exceptions import (
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewKickoffNotRecordedError,
    CrewOutcomeUnknownError,
    CrewTransportError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.operators import paid_post
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator
from airflow_provider_crew.status import CrewState

pytestmark = pytest.mark.integration


class FakeTI:
    def __init__(self, pulls: dict | None = None, try_number: int = 1, max_tries: int = 0) -> None:
        self.xcom: dict[str, object] = {}
        self.pulls = pulls or {}
        # As Airflow sets them for a task with retries=0: try 2 is a retry (a reset by the scheduler,
        # a heartbeat timeout); after a clear of try n, max_tries is n and try n + 1 starts anew.
        self.try_number = try_number
        self.max_tries = max_tries

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value", **_):
        return self.pulls.get((task_ids, key))


def test_validate_inputs_names_missing_and_unknown_keys_and_starts_nothing(crew_service, crew_connection):
    op = CrewKickoffOperator(task_id="k", inputs={"topic": "x", "year": "2026"}, deferrable=False)
    with pytest.raises(CrewConfigurationError) as caught:
        op.execute({"ti": FakeTI()})
    message = str(caught.value)
    assert "missing ['current_year']" in message and "unknown ['year']" in message
    assert "Nothing was started" in message
    assert crew_service.request_count("kickoff") == 0


def test_kickoff_waits_blocking_and_pushes_output_status_and_id(crew_service, crew_connection):
    op = CrewKickoffOperator(
        task_id="k", inputs={"topic": "ops", "current_year": "2026"}, deferrable=False, poll_interval=0.1
    )
    ti = FakeTI()
    kickoff_id = op.execute({"ti": ti})
    assert ti.xcom["kickoff_id"] == kickoff_id
    assert ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]
    assert ti.xcom["status"]["state"] == "SUCCESS"


def test_resume_of_an_execution_that_is_not_paused_says_its_current_state(crew_service, crew_connection):
    kickoff_id = CrewHook().kickoff({"topic": "x", "current_year": "2026"})
    crew_service.wait_for_state(kickoff_id)
    op = CrewResumeOperator(
        task_id="r",
        kickoff_id=kickoff_id,
        crew_task_id="research_task",
        human_feedback="ok",
        is_approve=True,
        carry_over_webhooks=False,
    )
    with pytest.raises(
        CrewBadRequestError,
        match=f"{kickoff_id} could not be resumed: it is not waiting for human input \\(current state: SUCCESS",
    ) as caught:
        op.execute({"ti": FakeTI()})
    # A retry would find it so again, and must not take a later pause for the one answered.
    assert isinstance(caught.value, AirflowFailException) and "Failing without retry" in str(caught.value)


def test_resume_carries_over_the_kickoffs_webhooks_and_keeps_explicit_ones(
    crew_service, crew_webhooks, monkeypatch
):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="review"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUMAN_HOOK",
        json.dumps(
            {
                "conn_type": "http",
                "host": crew_webhooks.url_for("human"),
                "login": "reviewer",
                "password": "basic-s3cret",
            }
        ),
    )
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "t", "audience": "a"},
        human_input_webhook_conn_id="human_hook",
        task_webhook_url=crew_webhooks.url_for("task"),
        crew_webhook_url=crew_webhooks.url_for("kickoff-crew"),
        deferrable=False,
        poll_interval=0.1,
    )
    ti = FakeTI()
    kickoff_id = kickoff.execute({"ti": ti})
    assert ti.xcom["human_input"]["execution_id"] == kickoff_id
    assert crew_webhooks.wait_for_count("human", 1)[0].authorization.startswith("Basic ")

    resume = CrewResumeOperator(
        task_id="approve",
        kickoff_id=kickoff_id,
        kickoff_task_id="kickoff",
        crew_task_id=ti.xcom["human_input"]["task_id"],
        is_approve=True,
        crew_webhook_url=crew_webhooks.url_for("resume-crew"),
        deferrable=False,
        poll_interval=0.1,
    )
    resume_ti = FakeTI(pulls={("kickoff", "webhooks"): ti.xcom["webhooks"]})
    assert resume.execute({"ti": resume_ti}) == kickoff_id

    assert crew_service.executions[kickoff_id]["webhooks"] == {
        "task": crew_webhooks.url_for("task"),  # carried over from the kickoff
        "step": None,
        "crew": crew_webhooks.url_for("resume-crew"),  # given explicitly: wins
    }
    crew_webhooks.wait_for_count("resume-crew", 1)
    assert crew_webhooks.of_kind("kickoff-crew") == []
    assert resume_ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]


# -- a retry's record of the execution (the task state store, Airflow 3.3+) -------------------------


class FakeStateStore:
    """The task state store, whose writes of ``failing_key`` fail ``failures`` times after the first
    ``succeeding`` (an overloaded API server, or one that no longer counts this try as running)."""

    def __init__(
        self, failures: int = 0, failing_key: str = paid_post.KICKOFF_RECORD_KEY, succeeding: int = 0
    ) -> None:
        self.values: dict[str, object] = {}
        self.retentions: dict[str, object] = {}
        self.failures = failures
        self.failing_key = failing_key
        self.succeeding = succeeding
        self.attempts = 0

    def get(self, key: str) -> object:
        return self.values.get(key)

    def set(self, key: str, value: object, *, retention: object = None) -> None:
        self.retentions[key] = retention
        if key == self.failing_key:
            self.attempts += 1
            if self.succeeding < self.attempts <= self.succeeding + self.failures:
                raise RuntimeError("API_SERVER_ERROR: timed out")
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


class XComDownTI(FakeTI):
    """A task instance whose XCom pushes fail, as they do while Airflow's API server is swamped."""

    def xcom_push(self, key: str, value: object) -> None:
        raise RuntimeError("API_SERVER_ERROR: timed out")


def _kickoff_operator(
    store: FakeStateStore, monkeypatch: pytest.MonkeyPatch, **kwargs
) -> CrewKickoffOperator:
    op = CrewKickoffOperator(
        task_id="k",
        inputs={"topic": "ops", "current_year": "2026"},
        **{"deferrable": False, "poll_interval": 0.1, **kwargs},
    )
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    return op


def test_the_execution_is_recorded_for_retries_before_xcom_and_a_retry_reattaches(
    crew_service, crew_connection, monkeypatch
):
    store = FakeStateStore()
    first_try = _kickoff_operator(store, monkeypatch)
    with pytest.raises(RuntimeError, match="API_SERVER_ERROR"):
        first_try.execute({"ti": XComDownTI()})  # the first XCom push after the kickoff fails
    [kickoff_id] = crew_service.executions
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == kickoff_id

    retry = _kickoff_operator(store, monkeypatch)
    ti = FakeTI(try_number=2)
    assert retry.execute({"ti": ti}) == kickoff_id
    assert crew_service.request_count("kickoff") == 1
    # The retry tells downstream tasks about the execution again (a new try starts with no XCom),
    # with the time of the first try's kickoff: a sensor downstream counts its 404 grace from it.
    assert ti.xcom["webhooks"]["kickoff_id"] == kickoff_id and ti.xcom["kickoff_id"] == kickoff_id
    kicked_off_at = store.values[paid_post.KICKOFF_RECORD_KEY]["epoch_seconds"]
    assert ti.xcom["kicked_off_at"] == {"kickoff_id": kickoff_id, "epoch_seconds": kicked_off_at}
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["state"] == "sent"
    # Kept after the end: a try Airflow fails after it finished leaves the execution to its retry.
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == kickoff_id


def test_a_retry_reattaching_to_a_record_of_1_0_publishes_its_claims_time(
    crew_service, crew_connection, monkeypatch
):
    # 1.0 kept the id alone under the record's key, and its claim, with the time, under a key of its own.
    store = FakeStateStore()
    kickoff_id = _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": FakeTI()})
    store.values[paid_post.KICKOFF_RECORD_KEY] = {"kickoff_id": kickoff_id, "max_tries": 0}
    store.values[paid_post.LEGACY_KICKOFF_CLAIM_KEY] = {
        "try_number": 1,
        "epoch_seconds": 12.5,
        "max_tries": 0,
    }
    ti = FakeTI(try_number=2)
    assert _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": ti}) == kickoff_id
    assert ti.xcom["kicked_off_at"] == {"kickoff_id": kickoff_id, "epoch_seconds": 12.5}
    assert crew_service.request_count("kickoff") == 1


def test_a_retry_after_a_1_0_claim_without_an_id_starts_nothing(crew_service, crew_connection, monkeypatch):
    store = FakeStateStore()
    store.values[paid_post.LEGACY_KICKOFF_CLAIM_KEY] = {"try_number": 1, "epoch_seconds": 0, "max_tries": 0}
    with pytest.raises(CrewOutcomeUnknownError, match="Try 1 of this task set out to start"):
        _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": FakeTI(try_number=2)})
    assert crew_service.request_count("kickoff") == 0


def test_a_try_stopped_during_its_kickoff_after_an_earlier_failed_execution_is_not_sent_again(
    crew_service, crew_connection, monkeypatch
):
    """Try 1's execution FAILED; try 2 is stopped during POST /kickoff; try 3 must not read try 1's
    FAILED record as leave to start another: try 2's may be running."""
    store = FakeStateStore()
    first = _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": FakeTI()})
    real_get_status, real_kickoff = CrewHook.get_status, CrewHook.kickoff

    def failed_first(self, kickoff_id, **kwargs):
        status = real_get_status(self, kickoff_id, **kwargs)
        return status.model_copy(update={"state": CrewState.FAILED}) if kickoff_id == first else status

    def stopped_mid_request(self, *args, **kwargs):
        raise KeyboardInterrupt("the try was stopped during POST /kickoff")

    monkeypatch.setattr(CrewHook, "get_status", failed_first)
    monkeypatch.setattr(CrewHook, "kickoff", stopped_mid_request)
    with pytest.raises(KeyboardInterrupt):
        _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": FakeTI(try_number=2)})
    monkeypatch.setattr(CrewHook, "kickoff", real_kickoff)
    with pytest.raises(CrewOutcomeUnknownError, match="Try 2 of this task set out to start a crew execution"):
        _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": FakeTI(try_number=3)})
    assert crew_service.request_count("kickoff") == 1


def test_a_retry_after_a_finished_try_airflow_failed_reattaches_and_a_cleared_task_starts_anew(
    crew_service, crew_connection, monkeypatch
):
    # Airflow can fail a try that had finished (its heartbeat late on an overloaded Airflow): the
    # retry must not start a second execution. A cleared task (max_tries raised) starts anew.
    store = FakeStateStore()
    first = _kickoff_operator(store, monkeypatch).execute({"ti": FakeTI()})
    retry = _kickoff_operator(store, monkeypatch).execute({"ti": FakeTI(try_number=2)})
    assert retry == first and crew_service.request_count("kickoff") == 1
    cleared = _kickoff_operator(store, monkeypatch).execute({"ti": FakeTI(try_number=3, max_tries=2)})
    assert cleared != first and crew_service.request_count("kickoff") == 2
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == cleared


def test_a_dag_edited_between_two_tries_still_reattaches_and_records_expire(
    crew_service, crew_connection, monkeypatch
):
    # retries=3 when try 1 ran (max_tries 3), then the DAG was edited to retries=1: the retry is still
    # a retry of the same run (Airflow changes max_tries only when it clears), so it reattaches.
    store = FakeStateStore()
    first = _kickoff_operator(store, monkeypatch, retries=3).execute({"ti": FakeTI(max_tries=3)})
    retry = _kickoff_operator(store, monkeypatch, retries=1).execute(
        {"ti": FakeTI(try_number=2, max_tries=3)}
    )
    assert retry == first and crew_service.request_count("kickoff") == 1
    # Every record is kept for the wait's timeout plus a week, then expires.
    from datetime import timedelta

    assert store.retentions[paid_post.KICKOFF_RECORD_KEY] == timedelta(hours=24, days=7)


def test_a_failed_record_is_written_again_while_the_api_recovers(crew_service, crew_connection, monkeypatch):
    store = FakeStateStore(failures=2, succeeding=1)  # the claim is written, then "sent" fails twice
    op = _kickoff_operator(store, monkeypatch, wait_for_completion=False)
    kickoff_id = op.execute({"ti": FakeTI()})
    assert store.attempts == 4 and crew_service.request_count("kickoff") == 1
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == kickoff_id
    assert list(crew_service.executions) == [kickoff_id]


def test_an_execution_that_cannot_be_recorded_fails_the_task_without_retry_naming_it(
    crew_service, crew_connection, monkeypatch
):
    store = FakeStateStore(failures=1_000, succeeding=1)
    op = _kickoff_operator(store, monkeypatch)
    monkeypatch.setattr(paid_post.PaidPost, "patience", 2.5)
    with pytest.raises(CrewKickoffNotRecordedError) as caught:
        op.execute({"ti": FakeTI()})
    [kickoff_id] = crew_service.executions
    assert isinstance(caught.value, AirflowFailException)  # no retry, which would start a second one
    assert f"Crew execution {kickoff_id} started" in str(caught.value)
    assert f"CrewStatusSensor(kickoff_id={kickoff_id!r})" in str(caught.value)
    assert store.attempts >= 3 and crew_service.request_count("kickoff") == 1
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["state"] == "claimed"  # a retry sends nothing


def test_a_try_airflow_no_longer_runs_starts_nothing(crew_service, crew_connection, monkeypatch):
    # Once Airflow has reset the task instance, its API refuses the old try's writes (404): the claim
    # written just before POST /kickoff fails, and that try starts no execution.
    store = FakeStateStore(failures=1)
    with pytest.raises(CrewError, match=r"POST /kickoff was not sent.*API_SERVER_ERROR.*sends nothing"):
        _kickoff_operator(store, monkeypatch).execute({"ti": FakeTI()})
    assert crew_service.request_count("kickoff") == 0


def test_a_retry_after_an_unrecorded_claim_starts_nothing_and_fails_without_retry(
    crew_service, crew_connection, monkeypatch
):
    # Try 1 was stopped during POST /kickoff: the service may have started an execution. The retry
    # cannot tell, so it starts none (nothing twice) and says what to do.
    store = FakeStateStore()
    store.values[paid_post.KICKOFF_RECORD_KEY] = {
        "state": "claimed",
        "try_number": 1,
        "epoch_seconds": 0,
        "max_tries": 0,
    }
    op = _kickoff_operator(store, monkeypatch, wait_for_completion=False, meta={"job": "nightly"})
    with pytest.raises(CrewOutcomeUnknownError) as caught:
        op.execute({"ti": FakeTI(try_number=2)})
    message = str(caught.value)
    assert isinstance(caught.value, AirflowFailException)
    assert "Try 1 of this task set out to start a crew execution" in message
    assert "{'job': 'nightly'}" in message and "Clear the task to start a new execution" in message
    assert crew_service.request_count("kickoff") == 0
    # A cleared task (max_tries raised) starts anew: the claim belongs to the earlier run.
    kickoff_id = op.execute({"ti": FakeTI(try_number=3, max_tries=2)})
    assert list(crew_service.executions) == [kickoff_id]


def test_a_refused_kickoff_drops_its_claim_so_that_its_retry_sends_it(
    crew_service, crew_connection, monkeypatch
):
    crew_service.faults.error(422, count=1, endpoint="kickoff", retry_after=None)
    store = FakeStateStore()
    with pytest.raises(CrewError, match="422"):
        _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute({"ti": FakeTI()})
    assert paid_post.KICKOFF_RECORD_KEY not in store.values  # refused: nothing started
    kickoff_id = _kickoff_operator(store, monkeypatch, wait_for_completion=False).execute(
        {"ti": FakeTI(try_number=2)}
    )
    assert list(crew_service.executions) == [kickoff_id]


class ResultPushDownTI(FakeTI):
    """A task instance whose last XCom push (the result) fails, as a swamped Airflow's can."""

    def xcom_push(self, key: str, value: object) -> None:
        if key == "result":
            raise RuntimeError("API_SERVER_ERROR: timed out")
        super().xcom_push(key, value)


def test_a_try_failing_after_the_execution_succeeded_leaves_it_to_the_retry(
    crew_service, crew_connection, monkeypatch
):
    store = FakeStateStore()
    with pytest.raises(RuntimeError, match="API_SERVER_ERROR"):
        _kickoff_operator(store, monkeypatch).execute({"ti": ResultPushDownTI()})
    [kickoff_id] = crew_service.executions
    assert (
        store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == kickoff_id
    )  # not forgotten before the end

    ti = FakeTI(try_number=2)
    assert _kickoff_operator(store, monkeypatch).execute({"ti": ti}) == kickoff_id
    assert crew_service.request_count("kickoff") == 1
    assert ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]


# -- a wait the trigger may end (no worker at the task's end) ---------------------------------------


def test_the_trigger_ends_the_task_only_where_nothing_needs_a_worker_at_its_end(monkeypatch):
    from airflow.sdk import Asset

    from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
    from airflow_provider_crew.operators import wait as task_module
    from airflow_provider_crew.review.result import CrewReviewResultOperator
    from airflow_provider_crew.review.round import CrewReviewRoundOperator

    monkeypatch.setattr(task_module, "running_in_process_test", lambda: False)
    monkeypatch.setattr(task_module, "task_success_listeners", lambda: False)
    plain = CrewKickoffOperator(task_id="k", inputs={})
    assert plain._trigger_success_outcomes() == ["succeeded", "paused"]
    failing = CrewKickoffOperator(task_id="f", inputs={}, on_human_input="fail")
    assert failing._trigger_success_outcomes() == ["succeeded"]  # the pause fails it, on a worker
    called_back = CrewKickoffOperator(task_id="c", inputs={}, on_success_callback=lambda context: None)
    assert called_back._trigger_success_outcomes() == []  # Airflow runs no success callback for it
    with_outlets = CrewKickoffOperator(task_id="o", inputs={}, outlets=[Asset("s3://bucket/crew")])
    assert with_outlets._trigger_success_outcomes() == []
    # The worker runs a post_execute hook after execute_complete, and leaves return_value out
    # without do_xcom_push: a trigger ending the task would do neither.
    hooked = CrewKickoffOperator(task_id="h", inputs={}, post_execute=lambda context, result: None)
    assert hooked._trigger_success_outcomes() == []

    class Audited(CrewKickoffOperator):
        def post_execute(self, context, result=None):
            pass

    assert Audited(task_id="a", inputs={})._trigger_success_outcomes() == []
    assert CrewKickoffOperator(task_id="x", inputs={}, do_xcom_push=False)._trigger_success_outcomes() == []
    if AIRFLOW_V_3_1_PLUS:  # the review needs human-in-the-loop
        review = {"kickoff_id": "k", "round_task_ids": ["round_1"]}
        assert (
            CrewReviewRoundOperator(task_id="r", round_number=1, **review)._trigger_success_outcomes() == []
        )
        assert CrewReviewResultOperator(task_id="result", **review)._trigger_success_outcomes() == [
            "succeeded"
        ]
    monkeypatch.setattr(task_module, "task_success_listeners", lambda: True)  # e.g. OpenLineage's
    assert plain._trigger_success_outcomes() == []
    monkeypatch.setattr(task_module, "task_success_listeners", lambda: False)
    monkeypatch.setattr(task_module, "running_in_process_test", lambda: True)  # dag.test() keeps no XCom
    assert plain._trigger_success_outcomes() == []


SLOW_CREW = {
    "name": "slow",
    "inputs": ["topic", "current_year"],
    "pending_seconds": 0.01,
    "step_seconds": 10,
    "tasks": [{"name": "long_task", "agent": "Worker", "steps": 1}],
}


@pytest.mark.crew_service(SLOW_CREW)
def test_a_kickoff_the_trigger_may_end_keeps_its_record_for_a_retry(
    crew_service, crew_connection, monkeypatch
):
    from airflow.providers.common.compat.sdk import TaskDeferred

    from airflow_provider_crew.operators import wait as task_module

    monkeypatch.setattr(task_module, "running_in_process_test", lambda: False)
    monkeypatch.setattr(task_module, "task_success_listeners", lambda: False)
    store = FakeStateStore()
    op = _kickoff_operator(store, monkeypatch, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": FakeTI()})
    [kickoff_id] = crew_service.executions
    kwargs = deferred.value.trigger.serialize()[1]
    assert (kwargs["ends_task_when_finished"], kwargs["ends_task_when_paused"]) == (True, True)
    # Kept while deferred and after the trigger ends the task: a retry reattaches to it; a cleared
    # task (its first try) drops it and starts anew.
    assert store.values[paid_post.KICKOFF_RECORD_KEY]["kickoff_id"] == kickoff_id
    # The wait's timeout stops the execution (stop_crew), so nothing is left to reattach to.
    timeout = {"outcome": "timeout", "kickoff_id": kickoff_id, "message": "Timed out", "record": None}
    with pytest.raises(Exception, match="Timed out"):
        op.execute_complete({"ti": FakeTI()}, timeout)
    assert crew_service.stops == [kickoff_id]
    assert paid_post.KICKOFF_RECORD_KEY not in store.values


# -- a resume is answered once (issue: nothing paid twice) ------------------------------------------


@pytest.fixture
def paused(crew_service, crew_connection, crew_webhooks, monkeypatch):
    """A review crew's execution paused on its draft, as the kickoff task left it: (id, human_input)."""
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="review"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUMAN_HOOK", json.dumps({"conn_type": "http", "password": "t0ken-for-the-hook"})
    )
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "t", "audience": "a"},
        human_input_webhook_url=crew_webhooks.url_for("human"),
        human_input_webhook_conn_id="human_hook",
        deferrable=False,
        poll_interval=0.1,
    )
    ti = FakeTI()
    kickoff_id = kickoff.execute({"ti": ti})
    return kickoff_id, ti.xcom["human_input"]


class CutOff(Exception):
    """The try ends after POST /resume went through: an execution_timeout, a lost worker."""


def _reject(
    kickoff_id: str, pause: dict, monkeypatch: pytest.MonkeyPatch, *, cut_off: bool
) -> CrewResumeOperator:
    op = CrewResumeOperator(
        task_id="reject",
        kickoff_id=kickoff_id,
        kickoff_task_id="kickoff",
        crew_task_id=pause["task_id"],
        human_feedback="Shorter, please",
        is_approve=False,
        carry_over_webhooks=False,
        deferrable=False,
        poll_interval=0.1,
        retries=1,
    )
    if cut_off:
        monkeypatch.setattr(op, "_wait", lambda *args, **kwargs: (_ for _ in ()).throw(CutOff()))
    return op


def _resume_ti(pause: dict, try_number: int = 1) -> FakeTI:
    return FakeTI(pulls={("kickoff", "human_input"): pause}, try_number=try_number)


@pytest.mark.parametrize("store", ["task state store", "none (Airflow 3.0-3.2)"])
@pytest.mark.parametrize("retry_finds", ["the crew redoing the task", "the crew paused again"])
def test_a_retry_of_a_resume_whose_answer_went_through_follows_the_execution(
    crew_service, paused, monkeypatch, store, retry_finds
):
    kickoff_id, pause = paused
    kept = FakeStateStore() if store == "task state store" else None
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: kept)
    with pytest.raises(CutOff):
        _reject(kickoff_id, pause, monkeypatch, cut_off=True).execute({"ti": _resume_ti(pause)})
    assert len(crew_service.executions[kickoff_id]["feedback"]) == 1
    if retry_finds == "the crew paused again":
        crew_service.wait_for_state(kickoff_id, "PAUSED", timeout=30)

    ti = _resume_ti(pause, try_number=2)
    assert _reject(kickoff_id, pause, monkeypatch, cut_off=False).execute({"ti": ti}) == kickoff_id

    # Not sent again: one accepted /resume, one redo; the retry waited for the redone draft.
    assert len(crew_service.executions[kickoff_id]["feedback"]) == 1
    assert crew_service.request_count("resume") == 1
    assert ti.xcom["human_input"]["task_output"] != pause["task_output"]
    assert ti.xcom["resume"]["status"] == "retrying"
    if kept is not None:
        assert kept.values[CrewResumeOperator.ANSWER_KEY]["state"] == "sent"


@pytest.mark.parametrize("store", ["task state store", "none (Airflow 3.0-3.2)"])
def test_a_retry_of_a_resume_that_never_reached_the_service_sends_it(
    crew_service, paused, monkeypatch, store
):
    kickoff_id, pause = paused
    kept = FakeStateStore() if store == "task state store" else None
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: kept)
    # Try 1 failed before its POST (nothing recorded, the execution still paused on the same draft).
    ti = _resume_ti(pause, try_number=2)
    assert _reject(kickoff_id, pause, monkeypatch, cut_off=False).execute({"ti": ti}) == kickoff_id
    assert len(crew_service.executions[kickoff_id]["feedback"]) == 1
    assert ti.xcom["resume"]["status"] == "retrying"


def test_a_resume_that_never_reached_the_service_drops_its_claim_and_its_retry_sends_it_once(
    crew_service, paused, monkeypatch
):
    kickoff_id, pause = paused
    kept = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: kept)
    real_resume = CrewHook.resume

    def refused(self, *args, **kwargs):
        raise CrewTransportError("POST /resume failed after 4 attempt(s): ConnectionError: refused")

    monkeypatch.setattr(CrewHook, "resume", refused)
    with pytest.raises(CrewTransportError):
        _reject(kickoff_id, pause, monkeypatch, cut_off=False).execute({"ti": _resume_ti(pause)})
    assert CrewResumeOperator.ANSWER_KEY not in kept.values  # nothing reached the service: no claim left

    monkeypatch.setattr(CrewHook, "resume", real_resume)
    ti = _resume_ti(pause, try_number=2)
    assert _reject(kickoff_id, pause, monkeypatch, cut_off=False).execute({"ti": ti}) == kickoff_id
    assert crew_service.request_count("resume") == 1 and ti.xcom["resume"]["status"] == "retrying"


def test_a_retry_that_finds_a_resume_stopped_mid_request_and_cannot_tell_sends_nothing(
    crew_service, paused, monkeypatch
):
    """Try 1 was stopped during POST /resume ("sending" kept); the crew waits on the same task, and
    with a literal kickoff_id nothing says which output the feedback is about: it may be the redo."""
    kickoff_id, pause = paused
    kept = FakeStateStore()
    kept.values[CrewResumeOperator.ANSWER_KEY] = {
        "kickoff_id": kickoff_id,
        "state": "sending",
        "try_number": 1,
        "max_tries": 0,
    }
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: kept)
    op = CrewResumeOperator(
        task_id="reject",
        kickoff_id=kickoff_id,
        crew_task_id=pause["task_id"],
        human_feedback="Shorter, please",
        is_approve=False,
        carry_over_webhooks=False,
        deferrable=False,
    )
    with pytest.raises(CrewOutcomeUnknownError, match="Try 1 of this task set out to send this feedback"):
        op.execute({"ti": FakeTI(try_number=2)})
    assert crew_service.request_count("resume") == 0


def test_a_try_airflow_already_failed_sends_no_feedback(crew_service, paused, monkeypatch):
    # The record written before POST /resume is a fence: Airflow refuses it for a try it has failed.
    kickoff_id, pause = paused
    refusing = FakeStateStore(failures=1, failing_key=CrewResumeOperator.ANSWER_KEY)
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: refusing)
    with pytest.raises(CrewError, match=r"POST /resume to crew execution .* was not sent.*API_SERVER_ERROR"):
        _reject(kickoff_id, pause, monkeypatch, cut_off=False).execute({"ti": _resume_ti(pause)})
    assert crew_service.request_count("resume") == 0
