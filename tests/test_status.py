"""Every status shape of docs/contract.md ("Status record: how it is read") parses to one state and output."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_crew import status
from airflow_provider_crew.status import CrewState, CrewStatus


@pytest.mark.parametrize(
    ("record", "state"),
    [
        ({"state": "PENDING"}, CrewState.PENDING),
        ({"state": "STARTED"}, CrewState.RUNNING),
        ({"state": "RUNNING", "status": "Running task 2 of 5"}, CrewState.RUNNING),
        ({"state": "SUCCESS", "result": "done"}, CrewState.SUCCEEDED),
        ({"state": "FAILED", "error": "boom"}, CrewState.FAILED),
        ({"state": "PAUSED", "status": "Pending Human Input"}, CrewState.WAITING_FOR_HUMAN_INPUT),
        ({"state": "REVOKED"}, CrewState.FAILED),
        ({"status": "running"}, CrewState.RUNNING),
        ({"status": "completed", "result": "x"}, CrewState.SUCCEEDED),
        ({"status": "error", "error": "bad"}, CrewState.FAILED),
        ({"status": "Pending Human Input"}, CrewState.WAITING_FOR_HUMAN_INPUT),
        ({"state": "success"}, CrewState.SUCCEEDED),  # case-insensitive
        ({"state": "FAILURE"}, CrewState.FAILED),
        ({"state": "", "status": "COMPLETED", "result": "x"}, CrewState.SUCCEEDED),  # empty state: use status
    ],
)
def test_state_is_read_from_state_then_status_case_insensitively(record, state):
    assert CrewStatus.from_response(record).state is state


@pytest.mark.parametrize("record", [{"state": "QUARANTINED"}, {"state": "teleporting"}, {}, {"state": 3}])
def test_an_unknown_state_counts_as_running_and_says_it_is_unknown_without_logging(record, caplog):
    """Reading logs nothing: the wait that reads the record warns once in its own log (tests/waiting)."""
    with caplog.at_level(logging.DEBUG):
        parsed = CrewStatus.from_response(record)
    assert parsed.state is CrewState.RUNNING and parsed.state_known is False
    assert parsed.raw == record and parsed.describe() == (parsed.raw_state or "running")
    assert caplog.records == []


@pytest.mark.parametrize(
    "word", ["PENDING", "started", "RUNNING", "in progress", "SUCCESS", "REVOKED", "PAUSED"]
)
def test_a_known_state_says_so(word):
    assert CrewStatus.from_response({"state": word}).state_known is True
    assert status.known_state(word) is CrewStatus.from_response({"state": word}).state


def test_a_status_built_in_code_counts_as_known():
    assert CrewStatus(state=CrewState.RUNNING).state_known is True
    assert status.known_state("QUARANTINED") is None


@pytest.mark.parametrize(
    ("record", "output"),
    [
        ({"state": "SUCCESS", "result": "plain text", "result_json": {"a": 1}}, {"a": 1}),
        ({"state": "SUCCESS", "result": "plain text", "result_json": None}, "plain text"),
        ({"state": "SUCCESS", "result": {"output": "nested", "tasks": []}}, "nested"),
        (
            {"state": "SUCCESS", "result": "", "last_executed_task": {"output": "from last task"}},
            "from last task",
        ),
        ({"status": "completed", "result": "old form"}, "old form"),
    ],
)
def test_final_output_prefers_structured_then_result_then_last_task(record, output):
    assert CrewStatus.from_response(record).output == output


def test_output_is_only_read_once_finished():
    assert CrewStatus.from_response({"state": "RUNNING", "result": "partial"}).output is None


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        (
            {"completed": 2, "total": 5, "current": "write", "current_agent": "Writer"},
            (2, 5, "write", "Writer"),
        ),
        ({"completed_tasks": 1, "total_tasks": 3}, (1, 3, None, None)),
    ],
)
def test_progress_both_forms(progress, expected):
    parsed = CrewStatus.from_response({"state": "RUNNING", "progress": progress}).progress
    assert (parsed.completed, parsed.total, parsed.current_task, parsed.current_agent) == expected


def test_paused_task_id_and_output_come_from_the_last_executed_task():
    status = CrewStatus.from_response(
        {
            "state": "PAUSED",
            "status": "Pending Human Input",
            "last_executed_task": {"task_id": "draft_task", "name": "draft_task", "output": "a draft"},
        }
    )
    assert (status.paused_task_id, status.paused_task_output) == ("draft_task", "a draft")


def test_failed_status_keeps_the_error_and_the_raw_record_whole():
    record = {"state": "FAILED", "error": "agent crashed", "usage_metrics": {"total_tokens": 3}, "extra": [1]}
    status = CrewStatus.from_response(record)
    assert status.error == "agent crashed"
    assert status.raw == record


def test_describe_is_one_line_with_task_n_of_m_agent_and_last_step():
    status = CrewStatus.from_response(
        {
            "state": "RUNNING",
            "status": "Working",
            "progress": {"completed": 1, "total": 3, "current": "draft_task", "current_agent": "Writer"},
            "last_step": {"agent": "Writer", "thought": "I should   outline first"},
        }
    )
    assert status.describe() == (
        "RUNNING (Working) - task 2 of 3 'draft_task' by Writer - last step: Writer: I should outline first"
    )


def test_status_that_is_not_an_object_is_rejected():
    with pytest.raises(ValueError, match="not a JSON object"):
        CrewStatus.from_response(["SUCCESS"])


def test_usage_is_given_in_common_ais_usage_xcom_shape():
    record = {
        "state": "SUCCESS",
        "usage_metrics": {
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "successful_requests": 4,
            "total_tokens": 150,
        },
    }
    assert CrewStatus.from_response(record).usage == {
        "requests": 4,
        "input_tokens": 120,
        "output_tokens": 30,
        "total_tokens": 150,
        "tool_calls": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "cost": None,
    }
    partial = CrewStatus.from_response({"state": "SUCCESS", "usage_metrics": {"prompt_tokens": 7}}).usage
    assert partial is not None and (partial["input_tokens"], partial["total_tokens"]) == (7, 7)


@pytest.mark.parametrize("metrics", [None, "many", {}, {"total_tokens": "12"}, {"prompt_tokens": True}])
def test_no_usage_without_token_counts(metrics):
    assert CrewStatus.from_response({"state": "SUCCESS", "usage_metrics": metrics}).usage is None
