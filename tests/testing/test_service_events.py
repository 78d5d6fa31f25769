"""The ``webhooks`` event stream as real HTTP: auth, the types asked for, batched and realtime
delivery, usage, failures, out-of-order and repeated deliveries, resume, bad objects."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from airflow_provider_crew.testing import (
    CrewDefinitionError,
    LocalCrewService,
    RemoteCrewService,
    load_crew,
    wait_until,
)
from airflow_provider_crew.testing.event_stream import EVENT_TYPES

from ._helpers import Api, crew, human_hook, task

TOKEN = "stream-secret"
IDS = {"crew_name", "task_id", "task_name", "agent_id", "agent_role"}
TOOL = IDS | {"tool_name", "tool_args", "tool_class", "run_attempts"}
LLM = IDS | {"call_id", "model", "messages"}
DATA_KEYS = {
    "crew_kickoff_started": IDS | {"inputs"},
    "crew_kickoff_completed": IDS | {"output", "total_tokens"},
    "crew_kickoff_failed": IDS | {"error"},
    "task_started": IDS | {"context"},
    "task_completed": IDS | {"output"},
    "task_failed": IDS | {"error"},
    "agent_execution_started": IDS | {"task_prompt", "tools"},
    "agent_execution_completed": IDS | {"output"},
    "agent_execution_error": IDS | {"error"},
    "llm_call_started": LLM,
    "llm_call_completed": LLM | {"response", "call_type", "usage", "finish_reason", "response_id"},
    "tool_usage_started": TOOL,
    "tool_usage_finished": TOOL | {"started_at", "finished_at", "from_cache", "output"},
    "tool_usage_error": TOOL | {"error"},
}
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")

PAIR = crew("pair", task("one", steps=2, tools=["search", "scrape"]), task("two", steps=1))
BOOM = crew("boom", task("one"), task("two", fails=True, error="disk full"), task("three"))
LOUD_BOOM = crew("loud_boom", task("one", fails=True, error="disk full"), completion_webhook_on_failure=True)
BROKEN_TOOL = crew("broken_tool", task("one", steps=2, tools=["search", "scrape"], failing_tools=["scrape"]))
SMALL_BATCHES = crew("small_batches", task("one", steps=4), task("two", steps=4), event_batch_size=3)
ONE_BATCH = crew("one_batch", task("one", steps=3), task("two", steps=3), event_batch_seconds=30)
MIXED = crew(
    "mixed",
    task("one", steps=4),
    task("two", steps=4),
    event_batch_size=4,
    shuffle_events=True,
    repeat_events=True,
)
MIXED_REALTIME = crew("mixed_realtime", task("one", steps=3), shuffle_events=True)
# Never ends: any delivery while it runs was sent by the batch timer (or at once, realtime).
ENDLESS = crew("endless", task("loop", endless=True, step_seconds=0.02), event_batch_seconds=0.1)
HELD = crew(
    "held", task("loop", endless=True, step_seconds=0.02), event_batch_seconds=60, event_batch_size=10_000
)
REVIEWED = crew("reviewed", task("draft", human_input=True), task("check", human_input=True), task("publish"))

pytestmark = pytest.mark.crew_service(
    PAIR,
    BOOM,
    LOUD_BOOM,
    BROKEN_TOOL,
    SMALL_BATCHES,
    ONE_BATCH,
    MIXED,
    MIXED_REALTIME,
    ENDLESS,
    HELD,
    REVIEWED,
)


@pytest.fixture
def crews(crew_service: LocalCrewService) -> Iterator[dict[str, Api]]:
    clients = {
        name: Api(crew_service, base_url=crew_service.url_for_crew(name)) for name in crew_service.app.crews
    }
    yield clients
    for client in clients.values():
        client.close()


def _stream(
    service: LocalCrewService,
    kind: str = "events",
    events: list[str] | tuple[str, ...] = EVENT_TYPES,
    **extra: Any,
) -> dict[str, Any]:
    """A ``webhooks`` object sending ``events`` to the receiver's ``kind`` address with a bearer token."""
    return {
        "events": list(events),
        "url": service.webhooks.url_for(kind),
        "realtime": False,
        "authentication": {"strategy": "bearer", "token": TOKEN},
        **extra,
    }


def _all_delivered(service: LocalCrewService, kickoff_id: str, kind: str = "events") -> list[dict[str, Any]]:
    """Wait for the end of the execution and for every event it sent; returns them once each."""
    service.wait_for_state(kickoff_id, "SUCCESS", "FAILED", "REVOKED")
    sent = service.sent_events(kickoff_id)
    got = service.webhooks.wait_for_events(
        lambda events: events if len(events) == len(sent) else None, kind, kickoff_id
    )
    assert sorted(e["id"] for e in got) == sorted(e["id"] for e in sent)
    return got


def _settled(service: LocalCrewService) -> list[dict[str, Any]]:
    """Wait until every delivery the service queued has finished (call once some are expected)."""
    return service.wait_for_deliveries(
        lambda done: done if len(done) == len(service.webhook_deliveries) else None
    )


def _deliveries(service: LocalCrewService, kind: str = "events") -> list[list[dict[str, Any]]]:
    return [r.json["events"] for r in service.webhooks.of_kind(kind)]


def test_events_arrive_with_bearer_auth_in_the_crewai_shapes(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    kickoff_id = crews["pair"].kickoff(webhooks=_stream(crew_service))
    events = _all_delivered(crew_service, kickoff_id)
    for record in crew_service.webhooks.of_kind("events"):
        assert record.method == "POST"
        assert record.authorization == f"Bearer {TOKEN}"
        assert record.headers["content-type"] == "application/json"
        assert set(record.json) == {"events"}
    assert len({e["id"] for e in events}) == len(events)
    for event in events:
        assert set(event) == {"id", "execution_id", "timestamp", "type", "data"}
        assert event["execution_id"] == kickoff_id
        assert TIMESTAMP.match(event["timestamp"]), event["timestamp"]
        assert datetime.fromisoformat(event["timestamp"]).tzinfo is not None
        assert set(event["data"]) == DATA_KEYS[event["type"]], event["type"]
        assert event["data"]["crew_name"] == "pair"
    # timestamps strictly increase, so ordering by them gives the order things happened in
    assert len({e["timestamp"] for e in events}) == len(events)
    types = [e["type"] for e in events]
    per_task = ["task_started", "agent_execution_started"]
    per_step = ["llm_call_started", "llm_call_completed", "tool_usage_started", "tool_usage_finished"]
    per_output = ["llm_call_started", "llm_call_completed", "agent_execution_completed", "task_completed"]
    assert types == [
        "crew_kickoff_started",
        *per_task,
        *per_step,
        *per_step,
        *per_output,
        *per_task,
        *per_step,
        *per_output,
        "crew_kickoff_completed",
    ]
    first = events[0]["data"]
    assert first["inputs"] == {"topic": "AI"}
    assert first["task_id"] is None and first["agent_role"] is None

    snapshot = crew_service.execution(kickoff_id)
    by_type = {e["type"]: e["data"] for e in events}  # the last of each type
    done = by_type["task_completed"]
    assert (done["task_id"], done["task_name"], done["agent_role"]) == (
        snapshot["task_ids"]["two"],
        "two",
        "two agent",
    )
    assert done["output"]["raw"] == snapshot["tasks"][1]["output"] == snapshot["result"]
    assert done["output"]["name"] == "two" and done["output"]["output_format"] == "raw"
    assert by_type["crew_kickoff_completed"]["output"] == snapshot["result"]
    assert by_type["crew_kickoff_completed"]["total_tokens"] == snapshot["usage_metrics"]["total_tokens"]
    assert "Do two about AI" in by_type["agent_execution_started"]["task_prompt"]
    tool_uses = [e["data"] for e in events if e["type"] == "tool_usage_finished"]
    assert [t["tool_name"] for t in tool_uses] == ["search", "scrape", "search"]
    assert tool_uses[0]["tool_args"] == {"query": "Do one about AI", "step": 1}
    assert tool_uses[0]["output"] == "search result 1 for one"
    calls = [e["data"] for e in events if e["type"] == "llm_call_completed"]
    assert all(c["messages"][-1]["content"] for c in calls)  # prompts are sent in full
    assert calls[-1]["response"] == snapshot["result"]
    starts = {e["data"]["call_id"] for e in events if e["type"] == "llm_call_started"}
    assert starts == {c["call_id"] for c in calls}
    # the service keeps what it sent: the control API gives the same events
    remote = RemoteCrewService(crew_service.base_url, crew_service.org_token, crew_service.user_token)
    assert remote.sent_events(kickoff_id) == crew_service.sent_events(kickoff_id)
    assert crew_service.execution(kickoff_id)["event_webhooks"] == {
        "url": crew_service.webhooks.url_for("events"),
        "events": sorted(EVENT_TYPES),
        "realtime": False,
        "strategy": "bearer",
    }


def test_only_the_types_asked_for_are_sent(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    wanted = ["task_completed", "llm_call_completed", "memory_query_started"]  # the last is never sent
    kickoff_id = crews["pair"].kickoff(webhooks=_stream(crew_service, events=wanted))
    events = _all_delivered(crew_service, kickoff_id)
    assert Counter(e["type"] for e in events) == {"task_completed": 2, "llm_call_completed": 5}


def test_usage_of_the_model_calls_adds_up_to_the_status(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    kickoff_id = crews["pair"].kickoff(webhooks=_stream(crew_service, events=["llm_call_completed"]))
    events = _all_delivered(crew_service, kickoff_id)
    usage = crews["pair"].status(kickoff_id)["usage_metrics"]
    calls = [e["data"] for e in events]
    assert {c["model"] for c in calls} == {"local/deterministic-agent"}
    for call in calls:
        counts = call["usage"]
        assert counts["total_tokens"] == counts["prompt_tokens"] + counts["completion_tokens"] > 0
        assert counts["cached_prompt_tokens"] == 0
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert sum(c["usage"][key] for c in calls) == usage[key], key
    assert len(calls) == usage["successful_requests"]


def test_realtime_posts_each_event_alone(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    kickoff_id = crews["one_batch"].kickoff(webhooks=_stream(crew_service, realtime=True))
    events = _all_delivered(crew_service, kickoff_id)
    deliveries = _deliveries(crew_service)
    assert [len(batch) for batch in deliveries] == [1] * len(events)


def test_batched_delivery_gathers_events(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    # A batch interval longer than the run: everything goes in one delivery, at the end.
    kickoff_id = crews["one_batch"].kickoff(webhooks=_stream(crew_service))
    events = _all_delivered(crew_service, kickoff_id)
    assert [len(batch) for batch in _deliveries(crew_service)] == [len(events)]
    assert len(events) == 38


def test_a_full_batch_goes_out_at_once(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    kickoff_id = crews["small_batches"].kickoff(webhooks=_stream(crew_service))
    events = _all_delivered(crew_service, kickoff_id)
    sizes = [len(batch) for batch in _deliveries(crew_service)]
    assert sum(sizes) == len(events) and max(sizes) == 3 and len(sizes) >= len(events) // 3


@pytest.mark.parametrize("realtime", [False, True])
def test_events_are_delivered_while_the_execution_runs(
    crews: dict[str, Api], crew_service: LocalCrewService, realtime: bool
) -> None:
    api = crews["endless"]
    kickoff_id = api.kickoff(webhooks=_stream(crew_service, realtime=realtime))
    # it never ends, so these came from the batch timer (or at once)
    crew_service.webhooks.wait_for(lambda records: len(records) >= 2)
    crew_service.webhooks.wait_for_event("tool_usage_finished", execution_id=kickoff_id)
    assert api.status(kickoff_id)["state"] == "RUNNING"
    assert api.post(f"/stop/{kickoff_id}").status_code == 200


def test_pending_events_are_delivered_on_stop(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    api = crews["held"]  # a batch interval of a minute
    kickoff_id = api.kickoff(webhooks=_stream(crew_service))
    wait_until(lambda: len(crew_service.sent_events(kickoff_id)) >= 10, timeout=5)
    assert crew_service.webhooks.of_kind("events") == []
    assert api.post(f"/stop/{kickoff_id}").status_code == 200
    _all_delivered(crew_service, kickoff_id)


def test_a_failing_crew_sends_the_failure_events_and_no_completion_webhook(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    api = crews["boom"]
    kickoff_id = api.kickoff(
        crewWebhookUrl=crew_service.webhooks.url_for("crew"), webhooks=_stream(crew_service)
    )
    events = _all_delivered(crew_service, kickoff_id)
    assert [e["type"] for e in events][-3:] == ["agent_execution_error", "task_failed", "crew_kickoff_failed"]
    failed = {e["type"]: e["data"] for e in events[-3:]}
    assert failed["crew_kickoff_failed"]["error"] == "disk full"
    assert failed["task_failed"]["error"] == failed["agent_execution_error"]["error"] == "disk full"
    assert (failed["task_failed"]["task_name"], failed["task_failed"]["agent_role"]) == ("two", "two agent")
    assert "three" not in {e["data"]["task_name"] for e in events}
    # every delivery is over, and none of them was the crew (completion) webhook
    assert {d["kind"] for d in _settled(crew_service)} == {"events"}
    assert crew_service.webhooks.of_kind("crew") == []


def test_a_failed_crew_may_also_call_the_completion_webhook(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    api = crews["loud_boom"]  # completion_webhook_on_failure: true
    kickoff_id = api.kickoff(
        crewWebhookUrl=crew_service.webhooks.url_for("crew"), webhooks=_stream(crew_service)
    )
    note = crew_service.webhooks.wait_for_count("crew", 1)[0].json
    assert (note["kickoff_id"], note["error"], note["result"]) == (kickoff_id, "disk full", "")
    assert _all_delivered(crew_service, kickoff_id)[-1]["type"] == "crew_kickoff_failed"


def test_a_failing_tool_sends_tool_usage_error(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    kickoff_id = crews["broken_tool"].kickoff(webhooks=_stream(crew_service))
    events = _all_delivered(crew_service, kickoff_id)
    tools = [(e["type"], e["data"]["tool_name"]) for e in events if e["type"].startswith("tool_usage")]
    assert tools == [
        ("tool_usage_started", "search"),
        ("tool_usage_finished", "search"),
        ("tool_usage_started", "scrape"),
        ("tool_usage_error", "scrape"),
    ]
    error = next(e["data"] for e in events if e["type"] == "tool_usage_error")
    assert "scrape" in error["error"] and error["tool_args"] == {"query": "Do one about AI", "step": 2}
    assert crew_service.execution(kickoff_id)["state"] == "SUCCESS"  # the agent carries on


def test_shuffled_and_repeated_deliveries(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    kickoff_id = crews["mixed"].kickoff(webhooks=_stream(crew_service))
    events = _all_delivered(crew_service, kickoff_id)
    sent = crew_service.sent_events(kickoff_id)
    assert [e["id"] for e in events] == [e["id"] for e in sent]  # ordering by timestamp restores it
    deliveries = _settled(crew_service)
    assert all(d["ok"] for d in deliveries) and len(deliveries) == len(_deliveries(crew_service))
    arrived = crew_service.webhooks.events()
    assert len(arrived) > len(events)  # some deliveries came twice, with the same ids
    assert {e["id"] for e in arrived} == {e["id"] for e in events}
    stamps = [e["timestamp"] for e in arrived]
    assert stamps != sorted(stamps)
    batches = _deliveries(crew_service)
    assert any([e["timestamp"] for e in b] != sorted(e["timestamp"] for e in b) for b in batches)
    firsts = [min(e["timestamp"] for e in b) for b in batches]
    assert firsts != sorted(firsts)  # a batch came after a later one


def test_realtime_deliveries_can_arrive_out_of_order(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    kickoff_id = crews["mixed_realtime"].kickoff(webhooks=_stream(crew_service, realtime=True))
    events = _all_delivered(crew_service, kickoff_id)
    batches = _deliveries(crew_service)
    assert [len(b) for b in batches] == [1] * len(events)
    # arrivals race each other, but a held-back event always goes out after the next one
    posts = [d["payload"]["events"][0]["timestamp"] for d in crew_service.webhook_deliveries]
    assert posts != sorted(posts)


def _paused(api: Api, service: LocalCrewService, kickoff_id: str) -> str:
    snap = service.wait_for_state(kickoff_id, "PAUSED")
    return snap["paused_task_id"]


def test_resume_sends_later_events_to_its_own_webhooks_object(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    api = crews["reviewed"]
    kickoff_id = api.kickoff(
        humanInputWebhook=human_hook(crew_service), webhooks=_stream(crew_service, "before")
    )
    task_id = _paused(api, crew_service, kickoff_id)
    hooks = crew_service.webhooks
    before = hooks.wait_for_event("task_completed", "before", kickoff_id)  # delivered at the pause
    assert before["data"]["task_name"] == "draft"
    resp = api.resume(kickoff_id, task_id, "ok", True, webhooks=_stream(crew_service, "after", realtime=True))
    assert resp.status_code == 200, resp.text
    task_id = _paused(api, crew_service, kickoff_id)
    # a resume without the object keeps the target in force
    assert api.resume(kickoff_id, task_id, "ok", True).status_code == 200
    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    sent = crew_service.sent_events(kickoff_id)
    first = {
        e["id"] for e in sent if e["data"]["task_name"] == "draft" or e["type"] == "crew_kickoff_started"
    }
    got_before = hooks.wait_for_events(lambda e: e if len(e) == len(first) else None, "before", kickoff_id)
    got_after = hooks.wait_for_events(
        lambda e: e if len(e) == len(sent) - len(first) else None, "after", kickoff_id
    )
    assert {e["id"] for e in got_before} == first
    assert {e["data"]["task_name"] for e in got_after} == {None, "check", "publish"}
    assert got_after[-1]["type"] == "crew_kickoff_completed"
    assert all(len(b) == 1 for b in _deliveries(crew_service, "after"))  # that object said realtime
    assert crew_service.execution(kickoff_id)["event_webhooks"]["url"] == hooks.url_for("after")


def test_a_resume_may_start_the_stream(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    api = crews["reviewed"]
    kickoff_id = api.kickoff(humanInputWebhook=human_hook(crew_service))
    task_id = _paused(api, crew_service, kickoff_id)
    assert crew_service.sent_events(kickoff_id) == []
    assert api.resume(kickoff_id, task_id, "ok", True, webhooks=_stream(crew_service)).status_code == 200
    task_id = _paused(api, crew_service, kickoff_id)
    assert api.resume(kickoff_id, task_id, "ok", True).status_code == 200
    events = _all_delivered(crew_service, kickoff_id)
    assert events[0]["type"] == "task_started" and events[0]["data"]["task_name"] == "check"


BAD_OBJECTS = [
    ("not an object", "must be an object"),
    ({"url": "http://127.0.0.1:9/x"}, "events"),
    ({"events": [], "url": "http://127.0.0.1:9/x"}, "events"),
    ({"events": ["task_started", 3], "url": "http://127.0.0.1:9/x"}, "events"),
    ({"events": ["task_started"]}, "url"),
    ({"events": ["task_started"], "url": "ftp://host/x"}, "url"),
    ({"events": ["task_started"], "url": "/relative"}, "url"),
    ({"events": ["task_started"], "url": "http://h/x", "realtime": "yes"}, "realtime"),
    ({"events": ["task_started"], "url": "http://h/x", "authentication": "t"}, "authentication"),
    ({"events": ["task_started"], "url": "http://h/x", "authentication": {"strategy": "basic"}}, "bearer"),
    ({"events": ["task_started"], "url": "http://h/x", "authentication": {"strategy": "bearer"}}, "token"),
    (
        {
            "events": ["task_started"],
            "url": "http://h/x",
            "authentication": {"strategy": "bearer", "token": ""},
        },
        "token",
    ),
    (
        {
            "events": ["task_started"],
            "url": "http://h/x",
            "authentication": {"strategy": "bearer", "token": "t", "password": "p"},
        },
        "only a token",
    ),
    ({"events": ["task_started"], "url": "http://h/x", "batch": True}, "unknown fields"),
]


@pytest.mark.parametrize(("bad", "says"), BAD_OBJECTS)
def test_a_malformed_webhooks_object_is_refused(
    crews: dict[str, Api], crew_service: LocalCrewService, bad: Any, says: str
) -> None:
    api = crews["pair"]
    resp = api.post("/kickoff", {"inputs": {"topic": "AI"}, "webhooks": bad})
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["error"] == "Bad Request" and says in body["message"], body
    assert crew_service.executions == {}


def test_a_resume_with_a_malformed_webhooks_object_is_refused(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    api = crews["reviewed"]
    kickoff_id = api.kickoff(humanInputWebhook=human_hook(crew_service))
    task_id = _paused(api, crew_service, kickoff_id)
    resp = api.resume(kickoff_id, task_id, "ok", True, webhooks={"events": "all", "url": "http://h/x"})
    assert resp.status_code == 400 and "webhooks.events" in resp.json()["message"]
    assert crew_service.execution(kickoff_id)["state"] == "PAUSED"  # not applied


@pytest.mark.parametrize("failure", ["http_500", "refused"])
def test_failed_deliveries_do_not_break_the_execution(
    crews: dict[str, Api], crew_service: LocalCrewService, failure: str
) -> None:
    stream = _stream(crew_service, realtime=True)
    if failure == "http_500":
        crew_service.webhooks.respond_with(500)
    else:
        stream["url"] = "http://127.0.0.1:9/nobody-listens"
    kickoff_id = crews["pair"].kickoff(webhooks=stream)
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
    deliveries = _settled(crew_service)
    assert len(deliveries) == len(crew_service.sent_events(kickoff_id))
    assert not any(d["ok"] for d in deliveries)
    assert all(d["error"] for d in deliveries)


def test_the_event_settings_of_a_crew_file_are_checked() -> None:
    spec = load_crew(MIXED)
    assert (spec.event_batch_size, spec.shuffle_events, spec.repeat_events) == (4, True, True)
    assert spec.to_dict()["event_batch_seconds"] == 0.5
    assert load_crew(BROKEN_TOOL).to_dict()["tasks"][0]["failing_tools"] == ["scrape"]
    for bad in (
        {"event_batch_size": 0},
        {"event_batch_seconds": -1},
        {"shuffle_events": "yes"},
        {"completion_webhook_on_failure": 1},
    ):
        with pytest.raises(CrewDefinitionError, match=next(iter(bad))):
            load_crew(crew("bad", task("one"), **bad))
    with pytest.raises(CrewDefinitionError, match="failing_tools"):
        load_crew(crew("bad", task("one", failing_tools="scrape")))


def test_the_control_api_lists_the_event_streams(
    crews: dict[str, Api], crew_service: LocalCrewService, api: Api
) -> None:
    streamed = crews["pair"].kickoff(webhooks=_stream(crew_service, realtime=True))
    silent = crews["pair"].kickoff()
    _all_delivered(crew_service, streamed)
    crew_service.wait_for_state(silent)
    listing = api.get("/_control/events").json()["executions"]
    assert list(listing) == [streamed]  # only executions with a stream
    one = api.get(f"/_control/events/{streamed}").json()
    assert one["events"] == crew_service.sent_events(streamed) and one["posts"] == len(one["events"])
    assert one["target"]["realtime"] is True and "token" not in one["target"]
    assert api.get(f"/_control/events/{silent}").json() == {
        "target": None,
        "events": [],
        "posts": 0,
    }
    assert api.get("/_control/events/nope").status_code == 404
    remote = RemoteCrewService(crew_service.base_url, crew_service.org_token, crew_service.user_token)
    with pytest.raises(KeyError):
        remote.sent_events("nope")
    assert crew_service.sent_events(silent) == []
