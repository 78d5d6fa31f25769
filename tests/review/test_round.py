"""crew_human_review: the task group, each round's request, its answer, and the result.

The answers go to the local crew service over real HTTP. The real loop (api-server, scheduler,
triggerer, a reviewer through the REST API and in a browser) is in tests/e2e and tests/browser.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.exceptions import CrewConfigurationError, CrewError, CrewTransportError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.operators import paid_post
from airflow_provider_crew.review import answer as review_answer
from airflow_provider_crew.review import record as review_record
from airflow_provider_crew.status import CrewStatus

needs_3_1 = pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="human review needs Airflow 3.1+")

KICKOFF_ID = "0b6f3c1e-0000-4000-8000-000000000001"
TASK_ID = "f253f8b5-7aa3-5716-be72-c3c845d3e87b"
OUTPUT = "draft_task by Writer (attempt 1): A draft about AI\ninputs: topic=AI"
ROUNDS = ["review.round_1", "review.round_2", "review.round_3"]


class FakeTI:
    """XCom in dicts, keyed like Airflow keys it: this task's keys, and other tasks' return values."""

    def __init__(self, task_id: str = "review.round_1", try_number: int = 1) -> None:
        self.id = uuid.uuid4()
        self.task_id = task_id
        self.map_index = -1
        self.try_number = try_number
        self.xcom: dict[str, object] = {}
        self.other: dict[tuple[str, str], object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: Any, key: str = "return_value", map_indexes: int | None = None):
        if isinstance(task_ids, list):
            return [self.xcom_pull(task_id, key) for task_id in task_ids]
        if task_ids == self.task_id:
            return self.xcom.get(key)
        return self.other.get((task_ids, key))


def context(ti: FakeTI) -> dict[str, Any]:
    return {"ti": ti, "task_instance": ti}


def paused_record(output: str = OUTPUT, attempt: int = 1) -> dict:
    return {
        "state": "PAUSED",
        "status": "Pending Human Input",
        "progress": {"completed": 1, "total": 3, "current": "draft_task", "current_agent": "Writer"},
        "last_executed_task": {"task_id": TASK_ID, "name": "draft_task", "agent": "Writer", "output": output},
        "attempt": attempt,
    }


def crew_event(record: dict, outcome: str = "paused", kickoff_id: str = KICKOFF_ID) -> dict:
    return {"outcome": outcome, "kickoff_id": kickoff_id, "message": "m", "record": record}


def answer(option: str, feedback: str | None = None, user: str = "Ana", timedout: bool = False) -> dict:
    return {
        "chosen_options": [option],
        "params_input": {} if feedback is None else {"feedback": feedback},
        "responded_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
        "responded_by_user": None if timedout else {"id": user.lower(), "name": user},
        "timedout": timedout,
    }


def round_operator(number: int = 1, **kwargs):
    from airflow_provider_crew.review.round import CrewReviewRoundOperator

    kwargs.setdefault("kickoff_id", KICKOFF_ID)
    return CrewReviewRoundOperator(
        task_id=f"round_{number}",
        round_number=number,
        round_task_ids=ROUNDS,
        inputs={"topic": "AI", "audience": "engineers"},
        **kwargs,
    )


@pytest.fixture
def parked(monkeypatch, crew_conn):
    """Record what would go to Airflow's human-in-the-loop API instead of needing a supervisor."""
    crew_conn()  # the request says whether a time-out stops the execution: the connection's stop_executions
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
    from airflow_provider_crew.review import crew_human_review

    with pytest.raises(Exception, match=r"needs Airflow 3\.1\+.*CrewResumeOperator"):
        crew_human_review(kickoff_id=KICKOFF_ID)


@needs_3_1
def test_the_group_lays_out_a_wait_and_a_round_per_round_then_the_result_and_wires_like_a_task_group():
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.review import crew_human_review

    with DAG("review_layout", schedule=None) as dag:
        upstream = EmptyOperator(task_id="upstream")
        kickoff = CrewKickoffOperator(task_id="kickoff", inputs={"topic": "AI"}, wait_for_completion=False)
        review = crew_human_review(kickoff_id=kickoff.output, max_rounds=3)
        downstream = EmptyOperator(task_id="downstream")
        upstream >> review >> downstream

    from airflow_provider_crew.sensors.crew import CrewStatusSensor
    from airflow_provider_crew.waiting.rules import OnHumanInput

    result = review.result_task
    waits = ["review.wait_1", "review.wait_2", "review.wait_3"]
    assert result.task_id == "review.result"
    assert sorted(dag.task_dict) == sorted(
        ["upstream", "kickoff", *waits, *ROUNDS, "review.result", "downstream"]
    )
    # upstream before the first wait, downstream after the result, as with any task group
    assert dag.task_dict["review.wait_1"].upstream_task_ids == {"upstream", "kickoff"}
    assert dag.task_dict["downstream"].upstream_task_ids == {"review.result"}
    # like every crew task: the output is the kickoff id, ["result"] the final output
    assert (review.output.operator, review.output.key) == (result, "return_value")
    assert (review.output["result"].operator, review.output["result"].key) == (result, "result")
    # each round after the sensor that waits for its pause, each sensor after the round before
    assert dag.task_dict["review.round_1"].upstream_task_ids == {"review.wait_1", "kickoff"}
    assert dag.task_dict["review.wait_2"].upstream_task_ids == {"review.round_1", "kickoff"}
    assert dag.task_dict["review.round_2"].upstream_task_ids == {"review.wait_2", "kickoff"}
    assert dag.task_dict["review.result"].upstream_task_ids == {"review.round_3", "kickoff"}
    assert result.trigger_rule == "none_failed"  # skipped rounds (the crew finished) are fine
    for number, (wait_id, task_id) in enumerate(zip(waits, ROUNDS, strict=True), start=1):
        task = dag.task_dict[task_id]
        assert (task.round_number, task.round_task_ids, task.kickoff_task_id) == (number, ROUNDS, "kickoff")
        assert task.retries == 1
        wait = dag.task_dict[wait_id]
        assert isinstance(wait, CrewStatusSensor)
        assert (wait.on_human_input, wait.deferrable, wait.kickoff_task_id) == (
            OnHumanInput.RETURN,
            True,
            "kickoff",
        )
        assert (wait.retries, wait.poll_interval, wait.timeout) == (1, task.poll_interval, task.timeout)


@needs_3_1
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_rounds": 0}, "max_rounds must be a whole number of 1 or more"),
        ({"kickoff_id": " "}, "kickoff_id is required: the execution under review"),
        ({"response_timeout": 3600}, r"response_timeout must be a timedelta.*timedelta\(hours=24\)"),
        ({"approve_on_timeout": True}, "approve_on_timeout=True needs a response_timeout"),
        ({"task_webhook_url": "ftp://x"}, "task_webhook_url"),
        ({"poll_interval": 0}, "poll_interval must be greater than 0"),
        ({"stop_crew": "false"}, "stop_crew must be True, False or None"),
    ],
)
def test_bad_configuration_fails_at_parse(kwargs, message):
    from airflow.sdk import DAG

    from airflow_provider_crew.review import crew_human_review

    kwargs.setdefault("kickoff_id", KICKOFF_ID)
    with DAG("bad_review", schedule=None), pytest.raises(CrewConfigurationError, match=message):
        crew_human_review(**kwargs)


# -- the request ------------------------------------------------------------------------------------


@needs_3_1
def test_body_shows_this_rounds_number_inputs_time_limit_and_earlier_rounds(crew_conn):
    # The text itself is tested in tests/review/test_request.py; this is what the round fills in.
    crew_conn()  # the request says whether a time-out stops the execution: the connection's stop_executions
    ti = FakeTI("review.round_2")
    ti.other[("review.round_1", "return_value")] = {
        "round": 1,
        "answer": "Request changes",
        "feedback": "Shorter | please",
        "applied": True,
        "responded_by": {"id": "ana", "name": "Ana"},
    }
    op = round_operator(2, response_timeout=timedelta(minutes=90), approve_on_timeout=True)
    written = op._write_request(context(ti), KICKOFF_ID, CrewStatus.from_response(paused_record()))
    body = written["body"]
    assert ti.xcom["review_request"] == written and op.body == body  # notifiers read task.body
    assert written["subject"] == "Review crew task draft_task (round 2 of 3)"
    assert body.startswith("**Review round 2 of 3**")
    assert OUTPUT in body
    assert "**topic**: AI" in body and "**audience**: engineers" in body
    assert "1. Request changes by Ana: Shorter \\| please" in body
    assert "round 3 asks you about the new output" in body
    assert body.endswith("Without an answer within 90 minutes, the output is approved.")
    assert "Asked again" not in body
    retried = round_operator(3)._write_request(
        context(FakeTI("review.round_3", try_number=2)), KICKOFF_ID, CrewStatus.from_response(paused_record())
    )["body"]
    assert "an earlier try of this round ended before an answer was applied" in retried
    assert "this is the last review round, so the feedback is *not* sent" in retried


# -- a round: waiting, asking -----------------------------------------------------------------------


@needs_3_1
def test_round_defers_to_the_crew_trigger_held_until_airflow_has_handled_the_deferral(crew_connection):
    from airflow.providers.common.compat.sdk import TaskDeferred

    ti = FakeTI()
    before = datetime.now(timezone.utc).timestamp()
    with (
        mock.patch("airflow_provider_crew.operators.wait.deferral_settle_seconds", return_value=30.0),
        pytest.raises(TaskDeferred) as deferred,
    ):
        round_operator().execute(context(ti))
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "execute_complete"
    assert trigger.wait_for == "human_input"
    assert trigger.not_before >= before + 30.0
    assert trigger.serialize()[1]["not_before"] == trigger.not_before
    assert ti.xcom == {"kickoff_id": KICKOFF_ID}  # no execution page URL without a template


@needs_3_1
def test_pause_writes_this_rounds_request_and_waits_for_the_answer(parked):
    ti = FakeTI("review.round_2")
    ti.other[("review.round_1", "return_value")] = {
        "round": 1,
        "answer": "Request changes",
        "feedback": "Shorter",
        "applied": True,
    }
    notifier = mock.Mock()
    op = round_operator(
        2,
        assigned_users={"id": "ana", "name": "Ana"},
        notifiers=notifier,
        response_timeout=timedelta(hours=1),
    )
    with pytest.raises(park_exception()) as waiting:
        op.execute_complete(context(ti), crew_event(paused_record(attempt=2)))

    (request,) = parked
    assert request["ti_id"] == ti.id
    assert request["options"] == ["Approve", "Request changes"]
    assert request["subject"] == "Review crew task draft_task (round 2 of 3)"
    assert OUTPUT in request["body"] and "1. Request changes by time-out default: Shorter" in request["body"]
    # stop_crew and the connection's stop_executions are on by default: the reviewer is told so.
    assert request["body"].endswith(
        "Without an answer within 1 hour, this task fails and stops the crew execution."
    )
    assert request["defaults"] is None  # no answer in time: the round fails, nothing is approved
    assert request["assigned_users"] == [{"id": "ana", "name": "Ana"}]
    assert "feedback" in request["params"]
    assert time.time() - ti.xcom["review_request"]["asked_at"] < 60  # for crew.review.response_time
    assert ti.xcom["review_request"] | {"body": None, "asked_at": None} == {
        "round": 2,
        "kickoff_id": KICKOFF_ID,
        "crew_task_id": TASK_ID,
        "crew_task": "draft_task",
        "output": OUTPUT,
        "subject": "Review crew task draft_task (round 2 of 3)",
        "body": None,
        "asked_at": None,
    }
    notifier.assert_called_once()
    assert op.body == request["body"]  # notifiers can template this round's body
    assert waiting.value.method_name == "execute_review"
    # The connection (no execution page template) is known: the execution URL rides along, None.
    assert waiting.value.kwargs == {
        "kickoff_id": KICKOFF_ID,
        "crew_task_id": TASK_ID,
        "crew_execution_url": None,
    }
    if AIRFLOW_V_3_3_PLUS:
        assert waiting.value.timeout == timedelta(hours=1)
    else:
        trigger = waiting.value.trigger
        assert type(trigger).__name__ == "CrewReviewAnswerTrigger"
        assert trigger.timeout_datetime is not None
        assert trigger.serialize()[0] == "airflow_provider_crew.review.answer.CrewReviewAnswerTrigger"


@needs_3_1
def test_with_stop_crew_off_the_request_says_a_time_out_leaves_the_execution_paused(parked):
    op = round_operator(response_timeout=timedelta(hours=1), stop_crew=False)
    with pytest.raises(park_exception()):
        op.execute_complete(context(FakeTI()), crew_event(paused_record()))
    assert parked[0]["body"].endswith("this task fails and the crew execution stays paused.")


@needs_3_1
def test_approve_on_timeout_sets_the_default(parked):
    op = round_operator(response_timeout=timedelta(minutes=1), approve_on_timeout=True)
    with pytest.raises(park_exception()):
        op.execute_complete(context(FakeTI()), crew_event(paused_record()))
    assert parked[0]["defaults"] == ["Approve"]


@needs_3_1
def test_round_skips_when_the_execution_finished():
    from airflow.providers.common.compat.sdk import AirflowSkipException

    ti = FakeTI("review.round_3")
    record = {"state": "SUCCESS", "result": "done"}
    with pytest.raises(AirflowSkipException, match="finished"):
        round_operator(3).execute_complete(context(ti), crew_event(record, outcome="succeeded"))
    assert ti.xcom["status"] == {"state": "SUCCESS"}  # the output is stored once, in result


@needs_3_1
def test_a_failed_execution_fails_the_round():
    from airflow_provider_crew.exceptions import CrewExecutionFailedError

    with pytest.raises(CrewExecutionFailedError, match="boom"):
        round_operator().execute_complete(
            context(FakeTI()), crew_event({"state": "FAILED", "error": "boom"}, outcome="failed")
        )


# -- a round: the answer, against the local crew service -------------------------------------------


@pytest.fixture
def paused_execution(crew_service, crew_connection, crew_webhooks):
    """A real execution of the review crew, paused on draft_task; returns (kickoff_id, status)."""
    from airflow_provider_crew.models import HumanInputWebhook

    hook = CrewHook(crew_conn_id=crew_connection)
    webhook = HumanInputWebhook.model_validate(
        {"url": crew_webhooks.url_for("human"), "authentication": {"strategy": "bearer", "token": "t0ken"}}
    )
    kickoff_id = hook.kickoff(
        {"topic": "AI"},
        human_input_webhook=webhook,
        task_webhook_url=crew_webhooks.url_for("task"),
    )
    crew_service.wait_for_state(kickoff_id, "PAUSED", timeout=30)
    return kickoff_id, hook.get_status(kickoff_id)


def ti_asked(kickoff_id: str, status: CrewStatus, number: int = 1) -> FakeTI:
    ti = FakeTI(f"round_{number}")
    ti.xcom["review_request"] = {
        "round": number,
        "kickoff_id": kickoff_id,
        "crew_task_id": status.paused_task_id,
        "crew_task": "draft_task",
        "output": status.paused_task_output,
    }
    return ti


def review(op, ti, event, kickoff_id, status):
    return op.execute_review(context(ti), event, kickoff_id=kickoff_id, crew_task_id=status.paused_task_id)


@needs_3_1
@pytest.mark.crew_service("review")
def test_request_changes_sends_the_feedback_and_ends_the_round(crew_service, paused_execution):
    kickoff_id, status = paused_execution
    ti = ti_asked(kickoff_id, status)
    ti.other[("kickoff", "webhooks")] = {"kickoff_id": kickoff_id, "task_webhook_url": "https://h.test/task"}
    op = round_operator(kickoff_id=kickoff_id, kickoff_task_id="kickoff")
    record = review(op, ti, answer("Request changes", "Shorter"), kickoff_id, status)

    assert record | {"responded_at": None} == {
        "round": 1,
        "crew_task_id": status.paused_task_id,
        "crew_task": "draft_task",
        "output": status.paused_task_output,
        "answer": "Request changes",
        "is_approve": False,
        "feedback": "Shorter",
        "responded_by": {"id": "ana", "name": "Ana"},
        "responded_at": None,
        "timed_out": False,
        "applied": True,
        "resume_status": "retrying",
        "resume_message": record["resume_message"],
    }
    execution = crew_service.executions[kickoff_id]
    assert [(f["is_approve"], f["feedback"]) for f in execution["feedback"]] == [(False, "Shorter")]
    # The kickoff's webhook addresses were sent again with the resume (the service forgets them).
    assert crew_service.execution(kickoff_id)["webhooks"]["task"] == "https://h.test/task"
    # The round ended without deferring again: the next round waits for the redone draft.
    after = CrewHook(crew_conn_id="crew_default").get_status(kickoff_id)
    assert (after.state.value, after.paused_task_output) != ("PAUSED", status.paused_task_output)


@needs_3_1
@pytest.mark.crew_service("review")
def test_approve_without_text_sends_a_plain_approval(crew_service, paused_execution):
    kickoff_id, status = paused_execution
    record = review(
        round_operator(kickoff_id=kickoff_id),
        ti_asked(kickoff_id, status),
        answer("Approve"),
        kickoff_id,
        status,
    )
    assert (record["applied"], record["feedback"], record["resume_status"]) == (True, "Approved.", "resumed")
    assert crew_service.executions[kickoff_id]["feedback"][0]["feedback"] == "Approved."


@needs_3_1
@pytest.mark.crew_service("review")
def test_a_round_over_its_cap_sends_nothing_and_reads_the_status_once(crew_service, paused_execution):
    from airflow_provider_crew.exceptions import CrewBudgetExceededError

    kickoff_id, status = paused_execution
    assert (status.usage or {}).get("total_tokens", 0) > 1
    reads = crew_service.request_count("status")
    with pytest.raises(CrewBudgetExceededError, match="it is not resumed, and nothing was sent"):
        review(
            round_operator(kickoff_id=kickoff_id, max_tokens=1),
            ti_asked(kickoff_id, status),
            answer("Approve"),
            kickoff_id,
            status,
        )
    # One read before the POST serves both checks: the answer still applies, and the budget.
    assert crew_service.request_count("status") == reads + 1
    assert crew_service.executions[kickoff_id]["feedback"] == []
    assert crew_service.executions[kickoff_id]["state"] == "PAUSED"
    assert crew_service.request_count("resume") == 0


@needs_3_1
@pytest.mark.crew_service("review")
def test_request_changes_without_feedback_is_not_sent(crew_service, paused_execution):
    kickoff_id, status = paused_execution
    record = review(
        round_operator(kickoff_id=kickoff_id),
        ti_asked(kickoff_id, status),
        answer("Request changes", "  "),
        kickoff_id,
        status,
    )
    assert record["applied"] is False
    assert "without feedback, so nothing was sent" in record["note"]
    assert crew_service.executions[kickoff_id]["feedback"] == []
    assert crew_service.executions[kickoff_id]["state"] == "PAUSED"


@needs_3_1
@pytest.mark.crew_service("review")
def test_changes_in_the_last_round_leave_the_execution_paused_and_say_how_to_go_on(
    crew_service, paused_execution
):
    from airflow_provider_crew.exceptions import CrewReviewRoundsExhaustedError

    kickoff_id, status = paused_execution
    with pytest.raises(CrewReviewRoundsExhaustedError, match=r"All 3 review rounds.*raise max_rounds"):
        review(
            round_operator(3, kickoff_id=kickoff_id),
            ti_asked(kickoff_id, status, 3),
            answer("Request changes", "More"),
            kickoff_id,
            status,
        )
    assert crew_service.executions[kickoff_id]["state"] == "PAUSED"
    assert crew_service.executions[kickoff_id]["feedback"] == []


@needs_3_1
@pytest.mark.crew_service("review")
def test_an_answer_to_an_output_the_execution_no_longer_shows_is_not_applied(crew_service, paused_execution):
    kickoff_id, status = paused_execution
    hook = CrewHook(crew_conn_id="crew_default")
    hook.resume(kickoff_id, status.paused_task_id, "Done elsewhere", True)  # someone else answered
    ti = ti_asked(kickoff_id, status)
    record = review(
        round_operator(kickoff_id=kickoff_id), ti, answer("Request changes", "Shorter"), kickoff_id, status
    )
    assert record["applied"] is False and "moved on before the answer arrived" in record["note"]
    assert [f["feedback"] for f in crew_service.executions[kickoff_id]["feedback"]] == ["Done elsewhere"]


@needs_3_1
def test_no_answer_in_time_fails_without_retry_and_says_the_crew_is_still_paused():
    from airflow_provider_crew._compat import AirflowFailException
    from airflow_provider_crew.exceptions import CrewReviewTimeoutError

    op = round_operator(response_timeout=timedelta(minutes=1), stop_crew=False)
    with pytest.raises(
        CrewReviewTimeoutError,
        match=rf"within 1 minute \(response_timeout\)\. Crew execution {KICKOFF_ID} is still waiting for "
        rf"human input on task '{TASK_ID}': clear this task to ask again",
    ) as error:
        op.execute_review(
            context(FakeTI()),
            {"error": "t", "error_type": "timeout"},
            kickoff_id=KICKOFF_ID,
            crew_task_id=TASK_ID,
        )
    assert isinstance(error.value, AirflowFailException)  # fails without using the retries


@needs_3_1
@pytest.mark.crew_service("review")
def test_no_answer_in_time_stops_the_paused_crew_by_default(crew_service, paused_execution):
    from airflow_provider_crew.exceptions import CrewReviewTimeoutError

    kickoff_id, status = paused_execution
    op = round_operator(kickoff_id=kickoff_id, response_timeout=timedelta(minutes=1))
    ti = FakeTI()
    with pytest.raises(
        CrewReviewTimeoutError, match=r"nobody will answer .* so this task stopped it .*: stopped"
    ):
        op.execute_review(
            context(ti),
            {"error": "t", "error_type": "timeout"},
            kickoff_id=kickoff_id,
            crew_task_id=status.paused_task_id,
        )
    assert crew_service.stops == [kickoff_id]
    assert crew_service.executions[kickoff_id]["state"] == "REVOKED"
    assert ti.xcom["status"]["stopped"]["reason"] == "nobody answered the review within response_timeout"


@needs_3_1
@pytest.mark.parametrize("event", [None, {"chosen_options": ["Maybe"]}, {"chosen_options": []}])
def test_malformed_answers_fail_clearly(event):
    with pytest.raises(CrewError, match=r"human-in-the-loop event|exactly one of"):
        round_operator().execute_review(context(FakeTI()), event, kickoff_id=KICKOFF_ID, crew_task_id=TASK_ID)


# -- the result -------------------------------------------------------------------------------------


def result_operator():
    from airflow_provider_crew.review.result import CrewReviewResultOperator

    return CrewReviewResultOperator(task_id="result", kickoff_id=KICKOFF_ID, round_task_ids=ROUNDS)


@needs_3_1
def test_result_returns_the_output_with_every_rounds_record(crew_connection):
    ti = FakeTI("review.result")
    rounds = [{"round": 1, "answer": "Approve", "applied": True}]
    ti.other[("review.round_1", "return_value")] = rounds[0]
    out = result_operator()._finish(context(ti), KICKOFF_ID, _result({"state": "SUCCESS", "result": "final"}))
    assert out == KICKOFF_ID and ti.xcom["result"] == "final"
    with mock.patch.object(
        result_operator().__class__,
        "_wait",
        side_effect=lambda *a, **k: _result({"state": "SUCCESS", "result": "final"}),
    ):
        assert result_operator().execute(context(ti)) == KICKOFF_ID
    assert ti.xcom["review_history"] == rounds


@needs_3_1
def test_result_fails_when_the_crew_pauses_again_after_the_last_round():
    from airflow_provider_crew.exceptions import CrewReviewRoundsExhaustedError

    with pytest.raises(CrewReviewRoundsExhaustedError, match=r"after all 3 review rounds.*stays paused"):
        result_operator()._finish(context(FakeTI("review.result")), KICKOFF_ID, _result(paused_record()))


def _result(record: dict):
    from airflow_provider_crew.waiting.event import CrewWaitEvent

    outcome = {"PAUSED": "paused", "SUCCESS": "succeeded"}[record["state"]]
    return CrewWaitEvent.parse(crew_event(record, outcome=outcome)).to_result()


# -- a retry of a round whose answer was applied (Airflow 3.3+: the task state store) --------------


class FakeStateStore:
    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, key: str, default: object = None) -> object:
        return self.values.get(key, default)

    def set(self, key: str, value: object, *, retention: object = None) -> None:
        self.values[key] = json.loads(json.dumps(value))  # what the store keeps is JSON

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


@needs_3_1
@pytest.mark.crew_service("review")
def test_a_retry_of_a_round_whose_answer_was_applied_keeps_its_record(
    crew_service, paused_execution, monkeypatch
):

    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    kickoff_id, status = paused_execution
    op = round_operator(kickoff_id=kickoff_id, carry_over_webhooks=False)
    asked = ti_asked(kickoff_id, status)
    record = review(op, asked, answer("Approve"), kickoff_id, status)
    assert record["applied"]
    request = asked.xcom["review_request"]
    kept = {
        "kickoff_id": kickoff_id,
        "record": record,
        "request": request,
        "state": "sent",
        "max_tries": None,
    }
    assert store.values[review_record.APPLIED_RECORD_KEY] == kept

    # Airflow failed the try after the answer was applied; the retry must not wait for a pause that
    # will not come and skip, losing who approved: it returns the record of the earlier try. Airflow
    # cleared the earlier try's XComs as the retry started: the request the reviewer answered is
    # pushed again, so XCom review_request still holds it.
    retry = round_operator(kickoff_id=kickoff_id, carry_over_webhooks=False)
    monkeypatch.setattr(retry, "_wait", lambda *args, **kwargs: pytest.fail("the retry waited again"))
    retried = FakeTI("round_1", try_number=2)
    assert retry.execute(context(retried)) == record
    assert retried.xcom["review_request"] == request
    assert len(crew_service.executions[kickoff_id]["feedback"]) == 1


@needs_3_1
def test_a_kept_record_of_another_execution_is_ignored(monkeypatch):

    store = FakeStateStore()
    store.set(
        review_record.APPLIED_RECORD_KEY, {"kickoff_id": "an-earlier-execution", "record": {"round": 1}}
    )
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    op = round_operator()
    monkeypatch.setattr(op, "_follow_execution", lambda *args: None)

    class Waited(Exception):
        pass

    def wait(*args, **kwargs):
        raise Waited

    monkeypatch.setattr(op, "_wait", wait)
    with pytest.raises(Waited):  # a new execution (the kickoff ran again): this round asks anew
        op.execute(context(FakeTI("round_1")))


# -- a retry of a round whose answer landed but was never applied (Airflow 3.3+) -------------------


@needs_3_1
def test_a_round_that_parks_keeps_what_it_asked_about(parked, monkeypatch):

    from airflow_provider_crew.review import round as review_round

    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    built: list[object] = []
    monkeypatch.setattr(
        review_round, "RoundRetry", lambda *args: built.append(args) or review_record.RoundRetry(*args)
    )
    with pytest.raises(park_exception()):
        round_operator().execute_complete(context(FakeTI()), crew_event(paused_record()))

    asked = store.values[review_answer.ASKED_RECORD_KEY]
    assert asked["kickoff_id"] == KICKOFF_ID and asked["crew_task_id"] == TASK_ID
    assert OUTPUT not in json.dumps(asked)  # a digest of the output, not the output
    assert len(parked) == 1
    assert len(built) == 1  # what the round keeps for a retry is built once per run of the task


@needs_3_1
def test_a_retry_collects_the_answer_to_the_earlier_request_instead_of_asking_again(parked, monkeypatch):
    from airflow.providers.common.compat.sdk import TaskDeferred

    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    with pytest.raises(park_exception()):  # try 1 asks; Airflow fails it as the answer lands
        round_operator().execute_complete(context(FakeTI()), crew_event(paused_record()))

    retry_ti = FakeTI(try_number=2)
    with pytest.raises(TaskDeferred) as waiting:
        round_operator().execute_complete(context(retry_ti), crew_event(paused_record()))

    assert len(parked) == 1  # the request was not written again: that would clear its answer
    trigger = waiting.value.trigger
    assert type(trigger).__name__ == "CrewReviewAnswerTrigger"
    assert trigger.ti_id == retry_ti.id
    assert trigger.not_before > time.time()  # held until the deferral is surely handled
    assert waiting.value.method_name == "execute_review"
    # The connection (no execution page template) is known: the execution URL rides along, None.
    assert waiting.value.kwargs == {
        "kickoff_id": KICKOFF_ID,
        "crew_task_id": TASK_ID,
        "crew_execution_url": None,
    }
    assert retry_ti.xcom["review_request"]["output"] == OUTPUT  # for the record execute_review builds


@needs_3_1
def test_a_retry_asks_anew_when_the_earlier_try_asked_about_another_output(parked, monkeypatch):

    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    with pytest.raises(park_exception()):
        round_operator().execute_complete(context(FakeTI()), crew_event(paused_record(output="first draft")))

    with pytest.raises(park_exception()):  # the crew paused again with another output: ask about it
        round_operator().execute_complete(context(FakeTI(try_number=2)), crew_event(paused_record()))
    assert len(parked) == 2


class RefusingStateStore(FakeStateStore):
    """A store for a try Airflow has already failed: it refuses writes (the API answers 404)."""

    def set(self, key: str, value: object, *, retention: object = None) -> None:
        raise RuntimeError("API_SERVER_ERROR: {'status_code': 404, 'reason': 'not_found'}")


@needs_3_1
@pytest.mark.crew_service("review")
def test_a_try_airflow_already_failed_does_not_send_the_answer(crew_service, paused_execution, monkeypatch):

    monkeypatch.setattr(paid_post, "task_state_store", lambda context: RefusingStateStore())
    kickoff_id, status = paused_execution
    op = round_operator(kickoff_id=kickoff_id, carry_over_webhooks=False)
    with pytest.raises(
        CrewError, match=r"POST /resume to crew execution .* was not sent.*a retry sends it once"
    ):
        review(op, ti_asked(kickoff_id, status), answer("Request changes", "Shorter"), kickoff_id, status)

    # Nothing reached the crew: the retry collects this answer and sends it once.
    assert crew_service.executions[kickoff_id]["feedback"] == []
    assert crew_service.executions[kickoff_id]["state"] == "PAUSED"


@needs_3_1
@pytest.mark.crew_service("review")
def test_an_answer_that_never_reached_the_crew_drops_its_claim_and_the_retry_sends_it_once(
    crew_service, paused_execution, monkeypatch
):
    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    kickoff_id, status = paused_execution
    real_resume = CrewHook.resume

    def refused(self, *args, **kwargs):
        raise CrewTransportError("POST /resume failed after 4 attempt(s): ConnectionError: refused")

    monkeypatch.setattr(CrewHook, "resume", refused)
    op = round_operator(kickoff_id=kickoff_id, carry_over_webhooks=False)
    with pytest.raises(CrewTransportError):
        review(op, ti_asked(kickoff_id, status), answer("Request changes", "Shorter"), kickoff_id, status)
    assert review_record.APPLIED_RECORD_KEY not in store.values  # not left "sending": nothing arrived

    monkeypatch.setattr(CrewHook, "resume", real_resume)
    retry_ti = ti_asked(kickoff_id, status)
    retry_ti.try_number = 2
    record = review(op, retry_ti, answer("Request changes", "Shorter"), kickoff_id, status)
    assert record["applied"] is True and "note" not in record
    assert [f["feedback"] for f in crew_service.executions[kickoff_id]["feedback"]] == ["Shorter"]


@needs_3_1
def test_a_try_stopped_while_sending_is_not_sent_again_by_the_retry(monkeypatch):

    store = FakeStateStore()
    sending = {"round": 1, "answer": "Approve", "applied": True}
    store.set(
        review_record.APPLIED_RECORD_KEY, {"kickoff_id": KICKOFF_ID, "record": sending, "state": "sending"}
    )
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    retry = round_operator()
    monkeypatch.setattr(retry, "_follow_execution", lambda *args: None)
    monkeypatch.setattr(retry, "_wait", lambda *args, **kwargs: pytest.fail("the retry waited again"))

    record = retry.execute(context(FakeTI(try_number=2)))
    assert record["answer"] == "Approve" and "stopped while sending" in record["note"]


@needs_3_1
def test_an_answer_is_counted_once_in_the_metrics_also_when_a_retry_collects_it(monkeypatch):
    """A retry that collects the answer an earlier try took (apache/airflow#72716's race) does not count
    the round again in ``crew.review.round``; a new answer, or one without a store (before 3.3), is counted."""
    store = FakeStateStore()
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: store)
    counted: list[object] = []
    monkeypatch.setattr(review_record.metrics, "review_round", lambda *args: counted.append(args))

    def counts(kept: review_record.RoundRetry, given: Any) -> bool:
        before = len(counted)
        kept.count(given, 1767225600.0)
        return len(counted) > before

    op = round_operator()
    given = {"is_approve": True, "timed_out": False, "responded_at": "2026-01-01T00:01:30+00:00"}
    first, retry = (
        review_record.RoundRetry(context(FakeTI("round_1", try_number=n)), "k-1", op) for n in (1, 2)
    )
    assert counts(first, given)
    assert counted == [({"task_id": "round_1"}, given, 1767225600.0)]
    assert not counts(retry, given)
    assert counts(retry, {**given, "responded_at": "2026-01-01T00:02:00+00:00"})
    assert counts(first, None) and not counts(retry, None)

    monkeypatch.setattr(paid_post, "task_state_store", lambda context: None)
    no_store = review_record.RoundRetry(context(FakeTI("round_1")), "k-1", op)
    assert counts(no_store, given) and counts(no_store, given)

    # A try Airflow already ended (the answer landed before the parking was handled): its retry counts.
    monkeypatch.setattr(paid_post, "task_state_store", lambda context: RefusingStateStore())
    ended = review_record.RoundRetry(context(FakeTI("round_1")), "k-1", op)
    assert not counts(ended, given)
