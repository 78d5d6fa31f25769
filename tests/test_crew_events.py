"""The event stream's delivery parser and what the provider keeps of an execution's events."""

from __future__ import annotations

import pytest

from airflow_provider_crew import crew_events
from airflow_provider_crew.crew_events import EventLog, parse_delivery
from airflow_provider_crew.waiting.budget import Budget


def event(number: int, type_: str, second: int, execution: str = "k-1", **data: object) -> dict[str, object]:
    return {
        "id": f"e-{number}",
        "execution_id": execution,
        "timestamp": f"2026-12-01T10:00:{second:02d}.000001+00:00",
        "type": type_,
        "data": data,
    }


def model_call(number: int, second: int, prompt: int, completion: int, **data: object) -> dict[str, object]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return event(number, "llm_call_completed", second, model="gpt-x", usage=usage, **data)


def log_of(*events: dict[str, object], content: bool = False) -> EventLog:
    log = EventLog(kickoff_id="k-1")
    log.add(parse_delivery({"events": list(events)})[0], content=content)
    return log


def test_a_malformed_event_is_skipped_without_losing_the_rest_of_its_delivery() -> None:
    parsed, skipped = parse_delivery(
        {"events": [event(1, "task_started", 1), {"id": "e-2"}, "text", event(3, "task_completed", 2)]}
    )
    assert [e.id for e in parsed] == ["e-1", "e-3"]
    assert skipped == 2


@pytest.mark.parametrize("body", [[], {"events": "x"}, {"other": []}, None])
def test_a_body_that_is_not_a_delivery_is_refused(body: object) -> None:
    with pytest.raises(ValueError, match="events"):
        parse_delivery(body)


def test_a_delivery_over_the_bound_is_refused_whole() -> None:
    too_many = [event(n, "task_started", 1) for n in range(crew_events.MAX_EVENTS_PER_DELIVERY + 1)]
    with pytest.raises(ValueError, match="at most"):
        parse_delivery({"events": too_many})


def test_repeated_events_count_once_and_other_executions_are_not_counted() -> None:
    log = log_of(
        model_call(1, 1, 100, 20), model_call(1, 1, 100, 20), model_call(2, 2, 10, 5, execution="k-2")
    )
    again = log.add(parse_delivery({"events": [model_call(1, 1, 100, 20)]})[0])
    assert again == []
    assert log.received == 1
    assert log.usage == {
        "input_tokens": 100,
        "output_tokens": 20,
        "total_tokens": 120,
        "cache_read_tokens": 0,
    }


def test_events_out_of_order_leave_the_newest_at_work() -> None:
    log = log_of(
        event(2, "task_started", 9, task_name="Write", agent_role="Writer"),
        event(1, "task_started", 3, task_name="Research", agent_role="Researcher"),
    )
    assert (log.task, log.agent) == ("Write", "Writer")
    late = log.add(parse_delivery({"events": [event(3, "agent_execution_started", 5, agent_role="Old")]})[0])
    assert len(late) == 1
    assert log.agent == "Writer"


def test_the_summed_usage_is_read_by_the_budget_as_a_status_usage_is() -> None:
    log = log_of(model_call(1, 1, 600, 200), model_call(2, 2, 150, 50))
    assert Budget(max_tokens=1000).over(log.usage)
    assert not Budget(max_tokens=1001).over(log.usage)


def test_a_failure_event_ends_the_log_with_its_error() -> None:
    log = log_of(event(1, "crew_kickoff_failed", 4, error="model quota exhausted"))
    assert (log.ended, log.error) == ("failed", "model quota exhausted")


def test_recent_calls_are_bounded_and_prompt_text_is_kept_only_when_asked() -> None:
    calls = [model_call(n, n, 1, 1, messages=["secret prompt"], response="the answer") for n in range(15)]
    tools = [event(100, "tool_usage_error", 20, tool_name="search", error="timeout")]
    log = log_of(*calls, *tools)
    assert len(log.model_calls) == crew_events.RECENT_CALLS
    assert log.model_calls[-1]["at"].startswith("2026-12-01T10:00:14")
    assert "secret prompt" not in log.model_dump_json()
    assert "the answer" not in log.model_dump_json()
    assert log.tool_calls == [
        {"at": log.tool_calls[0]["at"], "tool": "search", "ok": False, "error": "timeout"}
    ]
    assert log_of(*calls, content=True).model_calls[-1]["response"] == "the answer"


def test_hostile_data_is_kept_as_bounded_text() -> None:
    log = log_of(event(1, "task_started", 1, task_name="<script>" + "x" * 2000, agent_role=["a", "b"]))
    assert log.task is not None and len(log.task) == crew_events.MAX_TEXT
    assert log.agent == "['a', 'b']"


def test_the_seen_ids_are_bounded() -> None:
    log = log_of(*[event(n, "task_completed", n % 60) for n in range(crew_events.SEEN_IDS + 10)])
    assert len(log.seen) == crew_events.SEEN_IDS
    assert log.received == crew_events.SEEN_IDS + 10


def test_a_start_delivered_after_later_events_still_says_what_is_at_work() -> None:
    log = log_of(event(1, "tool_usage_finished", 9, tool_name="search"))
    log.add(
        parse_delivery({"events": [event(2, "task_started", 5, task_name="Write", agent_role="Writer")]})[0]
    )
    log.add(parse_delivery({"events": [event(3, "task_started", 2, task_name="Research")]})[0])
    assert (log.task, log.agent) == ("Write", "Writer")
    assert log.last_event_at is not None and log.last_event_at.startswith("2026-12-01T10:00:09")


def test_times_in_other_zones_are_kept_in_utc() -> None:
    late = {**event(1, "task_started", 0, task_name="Later"), "timestamp": "2026-12-01T11:00:05+01:00"}
    log = log_of(event(2, "task_started", 9, task_name="Earlier"), late)
    assert log.task == "Earlier" and log.at_work_since == "2026-12-01T10:00:09.000001+00:00"
