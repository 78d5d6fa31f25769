"""What a wait's end pushes to XCom (waiting/xcom.py) and what its trigger event carries: the final
output once, and every key a wait's end may leave out reading as None downstream."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.rules import Outcome, WaitResult
from airflow_provider_crew.waiting.xcom import (
    NONE_WHEN_ABSENT,
    asset_event_extra,
    crew_output,
    record_without_output,
    result_xcoms,
)

BIG = "final report " + "x" * 2_000_000  # a 2 MB output


def finished(**fields: Any) -> WaitResult:
    record = {"state": "SUCCESS", "status": "Crew execution completed", **fields}
    status = CrewStatus.from_response(record)
    return WaitResult(outcome=Outcome.SUCCEEDED, message=status.describe(), last_status=status)


def paused(**fields: Any) -> WaitResult:
    record = {
        "state": "PAUSED",
        "status": "pending human input",
        "last_executed_task": {"task_id": "t-1", "name": "draft_task", "output": "the draft"},
        **fields,
    }
    status = CrewStatus.from_response(record)
    return WaitResult(outcome=Outcome.PAUSED, message=status.describe(), last_status=status)


def local_service_record(output: str = BIG, **more: Any) -> dict[str, Any]:
    """A finished record shaped as the local crew service sends it: the output in ``result`` and
    again as the last task's output."""
    return {
        "result": output,
        "result_json": None,
        "progress": {"completed": 2, "total": 2},
        "last_executed_task": {"task_id": "t-2", "name": "reporting_task", "output": output},
        "usage_metrics": {"prompt_tokens": 10, "completion_tokens": 5, "successful_requests": 2},
        **more,
    }


# -- what each end pushes ------------------------------------------------------------------------


def test_a_pause_pushes_the_paused_task_and_no_result():
    xcoms = result_xcoms("k1", paused())
    assert set(xcoms) == {"status", "human_input"}
    assert xcoms["human_input"] == {"execution_id": "k1", "task_id": "t-1", "task_output": "the draft"}
    # The paused task's output is stored once, in human_input: the status record keeps the rest.
    assert xcoms["status"]["last_executed_task"] == {"task_id": "t-1", "name": "draft_task"}
    assert xcoms["status"]["state"] == "PAUSED"
    # Not pushed as None: Airflow reads a None XCom as a missing one (and 3.0 refuses to store it).
    # The crew task's XComArg is what gives None (below).
    assert "result" not in xcoms and "result" in NONE_WHEN_ABSENT


def test_a_pause_drops_every_copy_of_the_paused_output_and_keeps_other_fields():
    record = paused(
        pending_human_input={"task_id": "t-1", "task_output": "the draft", "asked_at": "12:00"},
        last_step={"output": "the draft"},  # not a place the paused output is read from: kept
    )
    status = result_xcoms("k1", record)["status"]
    assert status["pending_human_input"] == {"task_id": "t-1", "asked_at": "12:00"}
    assert status["last_executed_task"] == {"task_id": "t-1", "name": "draft_task"}
    assert status["last_step"] == {"output": "the draft"}

    other = paused(pending_human_input={"task_id": "t-1", "task_output": "the draft"})
    other.last_status.raw["last_executed_task"]["output"] = "an earlier note"
    assert result_xcoms("k1", other)["status"]["last_executed_task"]["output"] == "an earlier note"


def test_an_end_pushes_the_result_and_usage_and_no_human_input():
    xcoms = result_xcoms("k1", finished(**local_service_record("done")))
    assert set(xcoms) == {"status", "usage", "result"}
    assert xcoms["result"] == "done"
    assert xcoms["usage"]["input_tokens"] == 10
    assert "human_input" not in xcoms and "human_input" in NONE_WHEN_ABSENT


def test_an_end_without_token_counts_pushes_no_usage():
    xcoms = result_xcoms("k1", finished(result="done"))
    assert set(xcoms) == {"status", "result"}
    assert "usage" in NONE_WHEN_ABSENT


def test_an_end_without_output_pushes_no_result():
    # Not pushed as None (Airflow 3.0 refuses to store a None XCom): it reads as None all the same.
    xcoms = result_xcoms("k1", finished())
    assert set(xcoms) == {"status"} and "result" in NONE_WHEN_ABSENT


# -- the output is stored once -------------------------------------------------------------------


def test_status_keeps_the_record_without_the_output_fields():
    xcoms = result_xcoms("k1", finished(**local_service_record()))
    status = xcoms["status"]
    assert "result" not in status and "result_json" not in status
    assert status["last_executed_task"] == {"task_id": "t-2", "name": "reporting_task"}
    assert status["state"] == "SUCCESS" and status["usage_metrics"]["prompt_tokens"] == 10
    assert xcoms["result"] == BIG


def test_a_2_mb_output_appears_once_in_what_the_end_pushes():
    xcoms = result_xcoms("k1", finished(**local_service_record()))
    text = json.dumps(xcoms)
    assert text.count(BIG) == 1
    assert len(text) < len(BIG) + 2_000  # ~2 MB, where the raw record made it ~6 MB


def test_structured_output_is_stored_once_too():
    data = {"summary": BIG, "score": 7}
    raw_text = json.dumps(data)
    record = {
        "result": raw_text,
        "result_json": data,
        "last_executed_task": {"task_id": "t-2", "output": raw_text},
    }
    xcoms = result_xcoms("k1", finished(**record))
    assert xcoms["result"] == data
    assert xcoms["status"] == {
        "state": "SUCCESS",
        "status": "Crew execution completed",
        "last_executed_task": {"task_id": "t-2"},
    }


def test_an_output_read_from_the_last_task_leaves_it_and_a_different_one_stays():
    from_last_task = finished(last_executed_task={"task_id": "t-2", "output": BIG})
    assert from_last_task.last_status.output == BIG
    assert record_without_output(from_last_task.last_status)["last_executed_task"] == {"task_id": "t-2"}

    other = finished(result="the final output", last_executed_task={"task_id": "t-2", "output": "a note"})
    assert record_without_output(other.last_status)["last_executed_task"]["output"] == "a note"


def test_a_paused_record_is_kept_whole():
    result = paused(result="partial")
    assert record_without_output(result.last_status) == result.last_status.raw


# -- the trigger's event carries the output once ---------------------------------------------------


def test_a_finished_event_carries_the_output_once_and_the_worker_reads_it_back():
    result = finished(**local_service_record())
    payload = CrewWaitEvent.from_result("k1", result).payload()

    text = json.dumps(payload)
    assert text.count(BIG) == 1 and len(text) < len(BIG) + 2_000
    assert payload["output"] == BIG and "result" not in payload["record"]

    back = CrewWaitEvent.parse(json.loads(text)).to_result()
    assert back.outcome is Outcome.SUCCEEDED and back.last_status.output == BIG
    assert back.last_status.usage == result.last_status.usage
    # The worker pushes what a blocking wait pushes.
    assert result_xcoms("k1", back) == result_xcoms("k1", result)


def test_a_structured_output_survives_the_event():
    data = {"summary": "s", "score": 7}
    result = finished(result=json.dumps(data), result_json=data)
    back = CrewWaitEvent.parse(CrewWaitEvent.from_result("k1", result).payload()).to_result()
    assert back.last_status.output == data


def test_an_event_from_an_earlier_release_still_gives_the_output():
    # An event fired before the upgrade: the whole record, no "output" field.
    event = {"outcome": "succeeded", "kickoff_id": "k1", "message": "ok", "record": local_service_record("r")}
    event["record"]["state"] = "SUCCESS"
    assert CrewWaitEvent.parse(event).to_result().last_status.output == "r"


def test_other_events_carry_the_record_whole_and_no_output_field():
    result = paused()
    payload = CrewWaitEvent.from_result("k1", result).payload()
    assert "output" not in payload
    assert payload["record"] == result.last_status.raw
    assert CrewWaitEvent.parse(payload).to_result().last_status.paused_task_output == "the draft"


# -- the crew task's XComArg: a missing key of a wait's end resolves to None -----------------------


class FakeTI:
    """What PlainXComArg.resolve asks of the task instance: ``xcom_pull`` with a default."""

    dag_id = "d"

    def __init__(self, pushed: dict[str, Any]) -> None:
        self.pushed = pushed

    def xcom_pull(self, *, task_ids: str, key: str, default: Any = None, **_: Any) -> Any:
        return self.pushed.get(key, default)


@pytest.fixture
def kickoff():
    from airflow.sdk import DAG

    from airflow_provider_crew.operators.crew import CrewKickoffOperator

    with DAG("d", schedule=None):
        return CrewKickoffOperator(task_id="kickoff", inputs={"topic": "t"})


@pytest.mark.parametrize("key", sorted(NONE_WHEN_ABSENT))
def test_a_key_a_wait_may_leave_out_resolves_to_none(kickoff, key):
    arg = crew_output(kickoff)[key]
    assert arg.resolve({"ti": FakeTI({"return_value": "k1"})}) is None
    assert arg.resolve({"ti": FakeTI({key: {"v": 1}})}) == {"v": 1}


def test_any_other_missing_key_still_fails(kickoff):
    from airflow_provider_crew._compat import xcom_not_found

    with pytest.raises(xcom_not_found()):
        crew_output(kickoff)["reslt"].resolve({"ti": FakeTI({})})
    assert crew_output(kickoff).resolve({"ti": FakeTI({})}) is None  # return_value, as Airflow does


def test_the_crew_xcom_arg_serialises_as_airflows_own(kickoff):
    from airflow.sdk.definitions.xcom_arg import PlainXComArg, serialize_xcom_arg

    arg = crew_output(kickoff)["result"]
    assert serialize_xcom_arg(arg) == serialize_xcom_arg(PlainXComArg(kickoff, "result"))
    assert arg.key == "result" and arg.operator is kickoff
    with pytest.raises(ValueError, match="str lookup"):
        crew_output(kickoff)[0]


# -- asset events ----------------------------------------------------------------------------------


def test_an_asset_event_names_the_execution_its_state_page_and_tokens():
    result = finished(result="report", usage_metrics={"prompt_tokens": 3, "completion_tokens": 4})
    extra = asset_event_extra("k-1", result, "https://crews.example.com/k-1")
    assert extra == {
        "kickoff_id": "k-1",
        "state": "succeeded",
        "execution_url": "https://crews.example.com/k-1",
        "usage": result_xcoms("k-1", result)["usage"],
    }
    assert extra["usage"]["total_tokens"] == 7
    assert extra["usage"]["cost"] is None  # no prices on the connection


def test_an_asset_events_usage_has_its_cost_from_the_connections_prices():
    from airflow_provider_crew.waiting.budget import Prices

    result = finished(result="report", usage_metrics={"prompt_tokens": 3_000, "completion_tokens": 1_000})
    extra = asset_event_extra("k-1", result, None, Prices(input=3.0, output=15.0))
    assert extra["usage"]["cost"] == pytest.approx((3_000 * 3.0 + 1_000 * 15.0) / 1e6)


def test_an_asset_event_at_a_pause_or_without_a_wait_has_no_tokens_nor_page_it_does_not_know():
    assert asset_event_extra("k-1", paused(), None) == {"kickoff_id": "k-1", "state": "paused"}
    assert asset_event_extra("k-1", None, None) == {"kickoff_id": "k-1", "state": "running"}
    assert "final report" not in json.dumps(asset_event_extra("k-1", finished(result=BIG), None))
