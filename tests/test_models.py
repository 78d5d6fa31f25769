"""Every status shape of docs/contract.md ("Status record: how it is read") parses to one state and output."""

from __future__ import annotations

import logging

import pytest

from airflow_provider_crew import models
from airflow_provider_crew.models import (
    CrewState,
    CrewStatus,
    KickoffRequest,
    ResumeResult,
    ResumeStatus,
    ServiceError,
    parse_inputs_response,
)


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


def test_unknown_state_counts_as_running_and_is_logged_once(caplog):
    models._unknown_states_logged.discard("teleporting")
    with caplog.at_level(logging.WARNING, logger="airflow_provider_crew.models"):
        first = CrewStatus.from_response({"state": "TELEPORTING"})
        CrewStatus.from_response({"state": "TELEPORTING"})
    assert first.state is CrewState.RUNNING
    assert [r.getMessage() for r in caplog.records].count(
        "Unknown crew execution state 'TELEPORTING'; treating it as still running."
    ) == 1


@pytest.mark.parametrize(
    ("record", "output"),
    [
        ({"state": "SUCCESS", "result": "plain text", "result_json": {"a": 1}}, {"a": 1}),
        ({"state": "SUCCESS", "result": "plain text", "result_json": None}, "plain text"),
        ({"state": "SUCCESS", "result": {"output": "nested", "tasks": []}}, "nested"),
        ({"state": "SUCCESS", "result": "", "last_executed_task": {"output": "from last task"}}, "from last task"),
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
        ({"completed": 2, "total": 5, "current": "write", "current_agent": "Writer"}, (2, 5, "write", "Writer")),
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


@pytest.mark.parametrize("body", [{"inputs": "topic"}, 42, {"inputs": [{"required": True}]}])
def test_unrecognised_inputs_shapes_are_rejected(body):
    with pytest.raises(ValueError, match="unrecognised"):
        parse_inputs_response(body)


def test_resume_result_accepts_upper_case_and_keeps_unknown_fields():
    result = ResumeResult.model_validate({"status": "COMPLETED", "message": "done", "extra": 1})
    assert result.status is ResumeStatus.COMPLETED


def test_kickoff_request_wire_form_uses_contract_names_and_hides_secrets_in_repr():
    request = KickoffRequest.model_validate(
        {
            "inputs": {"topic": "x"},
            "step_webhook_url": "https://h.test/step",
            "human_input_webhook": {
                "url": "https://h.test/human",
                "authentication": {"strategy": "basic", "username": "rev", "password": "pw-s3cret"},
            },
        }
    )
    assert "pw-s3cret" not in repr(request)
    assert request.to_wire() == {
        "inputs": {"topic": "x"},
        "stepWebhookUrl": "https://h.test/step",
        "humanInputWebhook": {
            "url": "https://h.test/human",
            "authentication": {"strategy": "basic", "username": "rev", "password": "pw-s3cret"},
        },
    }


@pytest.mark.parametrize(
    ("body", "text", "described"),
    [
        ({"error": "Unauthorized", "message": "Invalid or missing bearer token"}, "",
         "Unauthorized: Invalid or missing bearer token"),
        ({"detail": "Not Found"}, "", "Not Found"),
        (None, "<html>500</html>", "no error message"),
        (None, "upstream connect error", "upstream connect error"),
    ],
)
def test_service_error_bodies_of_every_shape(body, text, described):
    assert ServiceError.from_body(body, text).describe() == described
