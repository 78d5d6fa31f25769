"""CrewHumanReviewOperator: parse-time checks, the request text, each step of the review loop.

The real loop (api-server, scheduler, triggerer, REST answers) is in tests/e2e.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from unittest import mock

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.exceptions import CrewBadRequestError, CrewConfigurationError, CrewError
from airflow_provider_crew.models import CrewStatus, ResumeResult
from airflow_provider_crew.operators import human_review
from airflow_provider_crew.operators.human_review import (
    XCOM_REVIEW_HISTORY,
    XCOM_REVIEW_REQUEST,
    CrewHumanReviewOperator,
    CrewReviewTimeoutError,
)

KICKOFF_ID = "0b6f3c1e-0000-4000-8000-000000000001"
TASK_ID = "f253f8b5-7aa3-5716-be72-c3c845d3e87b"
OUTPUT = "draft_task by Writer (attempt 1): A draft about AI\ninputs: topic=AI"

needs_3_1 = pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="CrewHumanReviewOperator needs Airflow 3.1+")


class FakeTI:
    """XCom in a dict, keyed like Airflow keys it for one task (survives deferrals within a try)."""

    def __init__(self) -> None:
        self.id = uuid.uuid4()
        self.map_index = -1
        self.xcom: dict[str, object] = {}
        self.other: dict[tuple[str, str], object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str, key: str, map_indexes: int | None = None):
        if task_ids == "review":
            return self.xcom.get(key)
        return self.other.get((task_ids, key))


def paused_record(output: str = OUTPUT, attempt: int = 1) -> dict:
    return {
        "state": "PAUSED",
        "status": "Pending Human Input",
        "progress": {"completed": 1, "total": 3, "current": "draft_task", "current_agent": "Writer"},
        "last_executed_task": {"task_id": TASK_ID, "name": "draft_task", "agent": "Writer", "output": output},
        "attempt": attempt,
    }


def crew_event(record: dict, status: str = "paused") -> dict:
    return {"status": status, "kickoff_id": KICKOFF_ID, "message": "m", "record": record}


def answer(option: str, feedback: str | None = None, user: str = "Ana", timedout: bool = False) -> dict:
    return {
        "chosen_options": [option],
        "params_input": {} if feedback is None else {"feedback": feedback},
        "responded_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "responded_by_user": None if timedout else {"id": user.lower(), "name": user},
        "timedout": timedout,
    }


def operator(**kwargs) -> CrewHumanReviewOperator:
    return CrewHumanReviewOperator(
        task_id="review", kickoff_id=KICKOFF_ID, inputs={"topic": "AI", "audience": "engineers"}, **kwargs
    )


@pytest.fixture(autouse=True)
def crew_not_paused_yet(request, monkeypatch):
    """Before deferring, the wait reads the status once; here the crew has not paused again yet.

    Tests that talk to the local crew service (``crew_connection``) get the real read instead.
    """
    if "crew_connection" in request.fixturenames:
        return
    from airflow_provider_crew.exceptions import CrewNotFoundError
    from airflow_provider_crew.operators import _wait

    hook = mock.Mock()
    hook.get_status.side_effect = CrewNotFoundError("not visible yet", endpoint="GET /x/status", status_code=404)
    monkeypatch.setattr(_wait, "CrewHook", mock.Mock(return_value=hook))


@pytest.fixture
def parked(monkeypatch):
    """Record what would go to Airflow's human-in-the-loop API instead of needing a supervisor."""
    calls: list[dict] = []
    monkeypatch.setattr(
        "airflow.sdk.execution_time.hitl.upsert_hitl_detail", lambda **kwargs: calls.append(kwargs)
    )
    return calls


def park_exception() -> type[BaseException]:
    if AIRFLOW_V_3_3_PLUS:
        from airflow.sdk.exceptions import TaskAwaitingInput

        return TaskAwaitingInput
    from airflow.providers.common.compat.sdk import TaskDeferred

    return TaskDeferred


# -- parse time -----------------------------------------------------------------------------------


@pytest.mark.skipif(AIRFLOW_V_3_1_PLUS, reason="the 3.0 refusal only shows on Airflow 3.0")
def test_airflow_3_0_refuses_at_dag_parse_naming_3_1():
    from airflow.providers.common.compat.sdk import AirflowOptionalProviderFeatureException

    with pytest.raises(AirflowOptionalProviderFeatureException, match=r"needs Airflow 3\.1\+"):
        operator()


def test_module_imports_on_every_airflow_3():
    # The HITL modules raise on import below 3.1; the operator module must still import (lazy imports).
    assert human_review.CrewHumanReviewOperator.__name__ == "CrewHumanReviewOperator"


@needs_3_1
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kickoff_id": ""}, "kickoff_id is empty"),
        ({"approve_on_timeout": True}, "approve_on_timeout=True needs a response_timeout"),
        ({"response_timeout": 60}, "response_timeout must be a timedelta"),
        ({"task_webhook_url": "ftp://h.test/t"}, "task_webhook_url must be an absolute http"),
        ({"poll_interval": 0}, "poll_interval must be greater than 0"),
    ],
)
def test_bad_configuration_fails_at_parse(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewHumanReviewOperator(**({"task_id": "review", "kickoff_id": KICKOFF_ID} | kwargs))


@needs_3_1
def test_kickoff_task_is_found_from_an_xcom_arg():
    from airflow.sdk import DAG

    from airflow_provider_crew.operators.crew import CrewKickoffOperator

    with DAG("d", schedule=None):
        kickoff = CrewKickoffOperator(task_id="start", inputs={"topic": "x"}, wait_for_completion=False)
        review = CrewHumanReviewOperator(task_id="review", kickoff_id=kickoff.output)
    assert review.kickoff_task_id == "start"
    assert "kickoff_id" in review.template_fields


# -- the request text ------------------------------------------------------------------------------


@needs_3_1
def test_body_shows_output_inputs_progress_and_earlier_feedback():
    op = operator(response_timeout=timedelta(hours=2))
    history = [
        {"round": 1, "answer": "Request changes", "feedback": "Add numbers", "responded_by": {"name": "Ana"}}
    ]
    body = op.review_body(KICKOFF_ID, CrewStatus.from_response(paused_record()), history, 2)
    assert "task **draft_task**" in body and "review round 2" in body and KICKOFF_ID in body
    assert f"```text\n{OUTPUT}\n```" in body  # verbatim, fenced
    assert "- **topic**: AI" in body and "- **audience**: engineers" in body
    assert "task 2 of 3 'draft_task' by Writer" in body
    assert "1. Request changes by Ana: Add numbers" in body
    assert "this task fails and the crew execution stays paused" in body
    assert f"XCom `{XCOM_REVIEW_REQUEST}`" in body


@needs_3_1
def test_body_fence_outlasts_backticks_in_the_output():
    status = CrewStatus.from_response(paused_record(output="use ```code``` and ````more````"))
    body = operator().review_body(KICKOFF_ID, status, [], 1)
    assert "`````text\nuse ```code``` and ````more````\n`````" in body


@needs_3_1
def test_body_names_the_time_out_default():
    op = operator(response_timeout=timedelta(minutes=5), approve_on_timeout=True)
    body = op.review_body(KICKOFF_ID, CrewStatus.from_response(paused_record()), [], 1)
    assert "Without an answer within 0:05:00, the output is approved." in body
    assert "No time limit." in operator().review_body(
        KICKOFF_ID, CrewStatus.from_response(paused_record()), [], 1
    )


# -- the loop, step by step -------------------------------------------------------------------------


@needs_3_1
def test_execute_starts_the_history_and_defers_to_the_crew_trigger(crew_connection):
    # The operator reads the status once before deferring; an id the service does not know yet
    # (404 within the grace window) is still worth waiting for.
    from airflow.providers.common.compat.sdk import TaskDeferred

    ti = FakeTI()
    with pytest.raises(TaskDeferred) as deferred:
        operator().execute({"ti": ti, "task_instance": ti})
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.trigger.wait_for == "human_input"
    assert ti.xcom == {"kickoff_id": KICKOFF_ID, XCOM_REVIEW_HISTORY: []}


@needs_3_1
def test_pause_writes_the_request_and_waits_for_the_answer(parked):
    ti = FakeTI()
    ti.xcom[XCOM_REVIEW_HISTORY] = []
    notifier = mock.Mock()
    op = operator(
        assigned_users={"id": "ana", "name": "Ana"}, notifiers=notifier, response_timeout=timedelta(hours=1)
    )
    with pytest.raises(park_exception()) as waiting:
        op.execute_complete({"ti": ti, "task_instance": ti}, crew_event(paused_record()))

    (request,) = parked
    assert request["ti_id"] == ti.id
    assert request["options"] == ["Approve", "Request changes"]
    assert request["subject"] == "Review crew task draft_task"
    assert OUTPUT in request["body"]
    assert request["defaults"] is None  # no answer in time: the task fails, nothing is approved
    assert request["assigned_users"] == [{"id": "ana", "name": "Ana"}]
    assert "feedback" in request["params"]
    assert ti.xcom[XCOM_REVIEW_REQUEST] | {"body": None} == {
        "round": 1,
        "kickoff_id": KICKOFF_ID,
        "crew_task_id": TASK_ID,
        "crew_task": "draft_task",
        "output": OUTPUT,
        "subject": "Review crew task draft_task",
        "body": None,
    }
    notifier.assert_called_once()
    assert op.body == request["body"]  # notifiers can template the current round's body
    assert waiting.value.method_name == "execute_review"
    assert waiting.value.kwargs == {"kickoff_id": KICKOFF_ID, "crew_task_id": TASK_ID, "round_number": 1}
    if AIRFLOW_V_3_3_PLUS:
        assert waiting.value.timeout == timedelta(hours=1)
    else:
        assert waiting.value.trigger.timeout_datetime is not None


@needs_3_1
def test_approve_on_timeout_sets_the_default(parked):
    ti = FakeTI()
    op = operator(response_timeout=timedelta(minutes=1), approve_on_timeout=True)
    with pytest.raises(park_exception()):
        op.execute_complete({"ti": ti, "task_instance": ti}, crew_event(paused_record()))
    assert parked[0]["defaults"] == ["Approve"]


def _review_step(op, ti, event, resume=None):
    hook = mock.Mock()
    hook.resume.return_value = resume or ResumeResult.model_validate({"status": "retrying", "message": "ok"})
    hook.get_status.return_value = CrewStatus.from_response({"state": "RUNNING"})
    from airflow.providers.common.compat.sdk import TaskDeferred

    with (
        mock.patch.object(human_review, "CrewHook", return_value=hook),
        pytest.raises(TaskDeferred) as deferred,
    ):
        op.execute_review(
            {"ti": ti, "task_instance": ti},
            event,
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
            round_number=1,
        )
    return hook, deferred.value


def _ti_in_round_one() -> FakeTI:
    ti = FakeTI()
    ti.xcom[XCOM_REVIEW_HISTORY] = []
    ti.xcom[XCOM_REVIEW_REQUEST] = {
        "round": 1,
        "output": OUTPUT,
        "crew_task_id": TASK_ID,
        "kickoff_id": KICKOFF_ID,
        "subject": "Review crew task draft_task",
        "body": "body",
    }
    ti.other[("kickoff", "webhooks")] = {
        "kickoff_id": KICKOFF_ID,
        "task_webhook_url": "https://h.test/task",
        "step_webhook_url": "https://h.test/step",
        "crew_webhook_url": None,
    }
    return ti


@needs_3_1
def test_request_changes_resumes_with_feedback_and_webhooks_then_waits_for_the_next_pause():
    ti = _ti_in_round_one()
    op = operator(kickoff_task_id="kickoff", crew_webhook_url="https://h.test/crew")
    hook, deferred = _review_step(op, ti, answer("Request changes", "  Add numbers  "))

    hook.resume.assert_called_once_with(
        KICKOFF_ID,
        TASK_ID,
        "Add numbers",
        False,
        task_webhook_url="https://h.test/task",
        step_webhook_url="https://h.test/step",
        crew_webhook_url="https://h.test/crew",
    )
    assert deferred.method_name == "execute_complete"
    assert deferred.trigger.wait_for == "human_input"
    (entry,) = ti.xcom[XCOM_REVIEW_HISTORY]
    assert entry == {
        "round": 1,
        "crew_task_id": TASK_ID,
        "output": OUTPUT,
        "is_approve": False,
        "answer": "Request changes",
        "feedback": "Add numbers",
        "responded_by": {"id": "ana", "name": "Ana"},
        "responded_at": "2026-01-01T00:00:00+00:00",
        "timed_out": False,
        "applied": True,
        "resume_status": "retrying",
        "resume_message": "ok",
    }


@needs_3_1
def test_approve_without_text_sends_a_plain_approval():
    ti = _ti_in_round_one()
    resume = ResumeResult.model_validate({"status": "resumed", "message": "ok"})
    hook, _ = _review_step(operator(kickoff_task_id="kickoff"), ti, answer("Approve"), resume)
    assert hook.resume.call_args.args[2:] == ("Approved.", True)
    assert ti.xcom[XCOM_REVIEW_HISTORY][0]["resume_status"] == "resumed"


@needs_3_1
def test_time_out_default_approval_says_so():
    ti = _ti_in_round_one()
    op = operator(response_timeout=timedelta(minutes=5), approve_on_timeout=True)
    hook, _ = _review_step(op, ti, answer("Approve", "", timedout=True))
    assert hook.resume.call_args.args[2] == "Approved automatically: no answer within 0:05:00."
    assert ti.xcom[XCOM_REVIEW_HISTORY][0]["timed_out"] is True
    assert ti.xcom[XCOM_REVIEW_HISTORY][0]["responded_by"] is None


@needs_3_1
def test_request_changes_without_feedback_is_not_sent_and_asked_again(parked):
    ti = _ti_in_round_one()
    hook = mock.Mock()
    with (
        mock.patch.object(human_review, "CrewHook", return_value=hook),
        pytest.raises(park_exception()) as waiting,
    ):
        operator().execute_review(
            {"ti": ti, "task_instance": ti},
            answer("Request changes", "   "),
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
            round_number=1,
        )
    hook.resume.assert_not_called()
    (entry,) = ti.xcom[XCOM_REVIEW_HISTORY]
    assert entry["applied"] is False and "without feedback" in entry["note"]
    assert len(parked) == 1  # the request is re-opened (its previous answer cleared)
    assert ti.xcom[XCOM_REVIEW_REQUEST]["round"] == 2
    assert waiting.value.kwargs["round_number"] == 2


@needs_3_1
def test_answer_the_crew_no_longer_waits_for_is_recorded_and_the_execution_followed():
    ti = _ti_in_round_one()
    hook = mock.Mock()
    hook.resume.side_effect = CrewBadRequestError(
        "not paused", endpoint="POST /resume", status_code=400, service_message="Execution is RUNNING"
    )
    from airflow.providers.common.compat.sdk import TaskDeferred

    with mock.patch.object(human_review, "CrewHook", return_value=hook), pytest.raises(TaskDeferred):
        operator().execute_review(
            {"ti": ti, "task_instance": ti},
            answer("Approve"),
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
            round_number=1,
        )
    (entry,) = ti.xcom[XCOM_REVIEW_HISTORY]
    assert entry["applied"] is False and "Execution is RUNNING" in entry["note"]


@needs_3_1
def test_no_answer_in_time_fails_and_says_the_crew_is_still_paused():
    ti = _ti_in_round_one()
    with pytest.raises(CrewReviewTimeoutError, match="still waiting for human input"):
        operator(response_timeout=timedelta(minutes=1)).execute_review(
            {"ti": ti, "task_instance": ti},
            {"error": "timeout", "error_type": "timeout"},
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
            round_number=1,
        )


@needs_3_1
@pytest.mark.parametrize("event", [None, {"chosen_options": ["Maybe"]}, {"chosen_options": []}])
def test_malformed_answers_fail_clearly(event):
    ti = _ti_in_round_one()
    with pytest.raises(CrewError):
        operator().execute_review(
            {"ti": ti, "task_instance": ti},
            event,
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
            round_number=1,
        )


@needs_3_1
def test_stale_pause_right_after_resume_is_polled_past(monkeypatch):
    ti = _ti_in_round_one()
    monkeypatch.setattr(human_review.time, "sleep", lambda s: None)
    hook = mock.Mock()
    hook.resume.return_value = ResumeResult.model_validate({"status": "retrying", "message": "ok"})
    hook.get_status.side_effect = [
        CrewStatus.from_response(paused_record()),  # still the answered pause
        CrewStatus.from_response({"state": "RUNNING"}),
    ]
    from airflow.providers.common.compat.sdk import TaskDeferred

    with mock.patch.object(human_review, "CrewHook", return_value=hook), pytest.raises(TaskDeferred):
        operator().execute_review(
            {"ti": ti, "task_instance": ti},
            answer("Request changes", "x"),
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
            round_number=1,
        )
    assert hook.get_status.call_count == 2


@needs_3_1
def test_completion_returns_the_final_output():
    ti = _ti_in_round_one()
    ti.xcom[XCOM_REVIEW_HISTORY] = [{"round": 1}]
    record = {"state": "SUCCESS", "result": "The published article"}
    assert (
        operator().execute_complete({"ti": ti}, crew_event(record, status="succeeded"))
        == "The published article"
    )
    assert ti.xcom["output"] == "The published article"


@needs_3_1
def test_a_failed_execution_fails_the_task():
    from airflow_provider_crew.exceptions import CrewExecutionFailedError

    ti = _ti_in_round_one()
    with pytest.raises(CrewExecutionFailedError, match="boom"):
        operator().execute_complete(
            {"ti": ti}, crew_event({"state": "FAILED", "error": "boom"}, status="failed")
        )


@needs_3_1
def test_before_3_3_the_answer_is_awaited_by_hitl_trigger(parked, monkeypatch):
    # Airflow 3.1-3.2 have no awaiting_input state: the HITL operators defer to HITLTrigger there.
    from airflow.providers.common.compat.sdk import TaskDeferred
    from airflow.providers.standard.triggers.hitl import HITLTrigger

    monkeypatch.setattr(human_review, "AIRFLOW_V_3_3_PLUS", False)
    ti = FakeTI()
    op = operator(response_timeout=timedelta(minutes=10), approve_on_timeout=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete({"ti": ti, "task_instance": ti}, crew_event(paused_record()))
    trigger = deferred.value.trigger
    assert isinstance(trigger, HITLTrigger)
    assert trigger.ti_id == ti.id and trigger.options == ["Approve", "Request changes"]
    assert trigger.defaults == ["Approve"] and trigger.timeout_datetime is not None
    assert deferred.value.method_name == "execute_review"
    assert deferred.value.kwargs == {"kickoff_id": KICKOFF_ID, "crew_task_id": TASK_ID, "round_number": 1}
