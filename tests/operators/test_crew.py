"""Operators: bad input fails at DAG parse naming the parameter; events are validated; XCom is right.

The real path (kickoff, wait, resume over HTTP inside real DAG runs) is in tests/integration.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from datetime import timedelta
from unittest import mock

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewError,
    CrewExecutionFailedError,
    CrewExecutionNotFoundError,
    CrewExecutionTimeoutError,
)
from airflow_provider_crew.operators import paid_post
from airflow_provider_crew.operators.crew import CrewKickoffOperator

KICKOFF_ID = "0b6f3c1e-0000-4000-8000-000000000001"


class FakeTI:
    def __init__(self) -> None:
        self.xcom: dict[str, object] = {}
        self.pulled: list[dict] = []

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, **kwargs):
        self.pulled.append(kwargs)
        return self.xcom.get(f"pull:{kwargs.get('key')}")


def kickoff(**kwargs) -> CrewKickoffOperator:
    return CrewKickoffOperator(task_id="kickoff", **({"inputs": {"topic": "x"}} | kwargs))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": ["topic"]}, "inputs must be a mapping of input name to value"),
        ({"inputs": "topic=x"}, "inputs must be a mapping"),
        ({"task_webhook_url": "ftp://h.test/t"}, "task_webhook_url must be an absolute http"),
        ({"step_webhook_url": "hooks.example.test/step"}, "step_webhook_url must be an absolute http"),
        ({"crew_webhook_url": "file:///tmp/x"}, "crew_webhook_url must be an absolute http"),
        (
            {"human_input_webhook_url": "https://h.test/human"},
            "human_input_webhook_url needs human_input_webhook_conn_id",
        ),
        (
            {"human_input_webhook_url": "mailto:x@y", "human_input_webhook_conn_id": "c"},
            "human_input_webhook_url must be",
        ),
        (  # refused when the DAG is parsed, not after GET /inputs at task start
            {
                "human_input_webhook_url": "https://h.test/human",
                "human_input_webhook_conn_id": "crew_webhook_receiver",
            },
            "the webhook receiver builds each run's address itself",
        ),
        ({"poll_interval": 0}, "poll_interval must be greater than 0"),
        ({"poll_interval": -1}, "poll_interval must be greater than 0"),
        ({"max_poll_interval": "fast"}, "max_poll_interval must be a number of seconds"),
        ({"timeout": timedelta(0)}, "timeout must be greater than 0"),
        (
            {"on_human_input": "ignore"},
            "on_human_input='ignore' is not known; use one of 'return', 'fail', 'wait'",
        ),
    ],
)
def test_kickoff_bad_input_fails_at_parse_naming_the_parameter(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        kickoff(**kwargs)


@pytest.mark.parametrize("value", ["false", 0, "no"])
def test_stop_crew_takes_true_false_or_none_on_every_task_that_has_it(value):
    from airflow_provider_crew.operators.resume import CrewResumeOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    message = rf"stop_crew must be True, False or None .*got {value!r}"
    with pytest.raises(CrewConfigurationError, match=message):
        kickoff(stop_crew=value)
    with pytest.raises(CrewConfigurationError, match=message):
        CrewResumeOperator(task_id="r", kickoff_id="k-1", crew_task_id="t", is_approve=True, stop_crew=value)
    with pytest.raises(CrewConfigurationError, match=message):
        CrewStatusSensor(task_id="s", kickoff_id="k-1", stop_crew=value)
    for given in (True, False, None):
        assert kickoff(stop_crew=given).stop_crew is given


def test_templated_and_xcom_values_are_validated_at_task_start_not_parse():
    op = kickoff(inputs="{{ params.inputs }}", task_webhook_url="{{ var.value.hook }}")
    assert op.inputs == "{{ params.inputs }}"
    op.inputs = ["rendered", "to", "a", "list"]
    with pytest.raises(CrewConfigurationError, match="inputs must be a mapping"):
        op.execute({"ti": FakeTI()})


def test_deferrable_defaults_to_the_deployment_setting(monkeypatch):
    import importlib

    import airflow_provider_crew.operators.crew as module

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert importlib.reload(module).CrewKickoffOperator(task_id="k", inputs={}).deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert importlib.reload(module).CrewKickoffOperator(task_id="k", inputs={}).deferrable is False


def event(status: str, record: dict | None = None, message: str = "m") -> dict:
    return {"outcome": status, "kickoff_id": KICKOFF_ID, "message": message, "record": record}


def test_execute_complete_pushes_output_and_status_and_returns_the_kickoff_id():
    op, ti = kickoff(), FakeTI()
    record = {"state": "SUCCESS", "result": "text", "result_json": {"answer": 42}}
    assert op.execute_complete({"ti": ti}, event("succeeded", record)) == KICKOFF_ID
    assert ti.xcom["result"] == {"answer": 42}
    assert ti.xcom["status"] == {"state": "SUCCESS"}  # the output is stored once, in result


def test_execute_complete_on_pause_hands_the_paused_task_downstream():
    op, ti = kickoff(), FakeTI()
    record = {
        "state": "PAUSED",
        "status": "Pending Human Input",
        "last_executed_task": {"task_id": "draft_task", "output": "draft v1"},
    }
    assert op.execute_complete({"ti": ti}, event("paused", record)) == KICKOFF_ID
    assert ti.xcom["human_input"] == {
        "execution_id": KICKOFF_ID,
        "task_id": "draft_task",
        "task_output": "draft v1",
    }


def test_execute_complete_on_pause_fails_without_retry_when_asked_to():
    from airflow_provider_crew._compat import AirflowFailException
    from airflow_provider_crew.exceptions import CrewExecutionPausedError

    op, ti = kickoff(on_human_input="fail"), FakeTI()
    record = {"state": "PAUSED", "last_executed_task": {"task_id": "draft_task", "output": "o"}}
    with pytest.raises(
        CrewExecutionPausedError, match="paused for human input on task 'draft_task'"
    ) as raised:
        op.execute_complete({"ti": ti}, event("paused", record))
    assert isinstance(raised.value, AirflowFailException)  # no retry, so no second execution
    assert KICKOFF_ID in str(raised.value) and "stays paused" in str(raised.value)
    assert ti.xcom["human_input"]["task_id"] == "draft_task"  # what paused, for whoever resumes it


@pytest.mark.parametrize(
    ("evt", "error", "message"),
    [
        (
            event("failed", {"state": "FAILED", "error": "Agent crashed"}),
            CrewExecutionFailedError,
            f"Crew execution {KICKOFF_ID} ended FAILED: Agent crashed",
        ),
        (event("failed", {"state": "REVOKED"}), CrewExecutionFailedError, "ended REVOKED"),
        (
            event("not_found", None, "not found after grace"),
            CrewExecutionNotFoundError,
            "not found after grace",
        ),
        (event("timeout", None, "Timed out waiting"), CrewExecutionTimeoutError, "Timed out waiting"),
        (event("error", None, "401 bad token"), CrewError, "401 bad token"),
        (
            {"status": "weird", "kickoff_id": KICKOFF_ID, "message": ""},
            CrewError,
            "Malformed crew status event",
        ),
        (None, CrewError, "Expected a crew status event"),
    ],
)
def test_execute_complete_fails_clearly(evt, error, message):
    with pytest.raises(error, match=message):
        kickoff().execute_complete({"ti": FakeTI()}, evt)


class StateStore(dict):
    """The task state store (Airflow 3.3+), in memory."""

    def set(self, key: str, value: object, *, retention: object = None) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        self.pop(key, None)


@pytest.mark.parametrize(
    ("evt", "kept"), [(event("failed", {"state": "FAILED"}), False), (event("succeeded"), True)]
)
def test_a_failed_execution_is_forgotten_for_the_retry_and_any_other_end_keeps_it(monkeypatch, evt, kept):
    records = {
        paid_post.KICKOFF_RECORD_KEY: {"kickoff_id": KICKOFF_ID, "state": "sent", "max_tries": None},
        paid_post.LEGACY_KICKOFF_CLAIM_KEY: {"try_number": 1, "max_tries": None},  # 1.0's claim goes too
    }
    store = StateStore(records)
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    with nullcontext() if kept else pytest.raises(CrewExecutionFailedError):
        kickoff().execute_complete({"ti": FakeTI()}, evt)
    assert store == (records if kept else {})


def test_kickoff_without_waiting_returns_the_id_and_pushes_it(crew_conn):
    op, ti = kickoff(wait_for_completion=False, validate_inputs=False), FakeTI()
    with mock.patch("airflow_provider_crew.hooks.crew.CrewHook.kickoff", return_value=KICKOFF_ID) as start:
        assert op.execute({"ti": ti}) == KICKOFF_ID
    start.assert_called_once()
    assert ti.xcom["kickoff_id"] == KICKOFF_ID
    assert ti.xcom["webhooks"] == {
        "kickoff_id": KICKOFF_ID,
        "task_webhook_url": None,
        "step_webhook_url": None,
        "crew_webhook_url": None,
    }


@pytest.mark.crew_service(faults=[{"kind": "status_404", "count": 5}])
def test_kickoff_pushes_its_time_and_its_wait_counts_the_404_grace_from_it(crew_service, crew_connection):
    op, ti = kickoff(inputs={"topic": "x", "current_year": "2026"}, deferrable=True), FakeTI()
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:  # the read before deferring met the queued 404
        op.execute({"ti": ti})
    record = ti.xcom["kicked_off_at"]
    assert record["kickoff_id"] == ti.xcom["kickoff_id"]
    assert crew_service.faults.counts["status_404"] >= 1 and crew_service.request_count("kickoff") == 1
    assert before <= record["epoch_seconds"] <= time.time()
    assert deferred.value.trigger.serialize()[1]["not_found_deadline"] == record["epoch_seconds"] + 60
