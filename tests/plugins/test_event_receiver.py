"""The event stream's receiver in the api-server's plugin, over HTTP (FastAPI's test client), with its
database calls recorded: who gets in, what a delivery may be, what is kept, which waits it wakes. The
real database and real crews: tests/e2e/test_event_stream_e2e.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from airflow_provider_crew.crew_events import EventLog
from airflow_provider_crew.hooks.webhook_receiver import EVENTS_TOKEN_KEY_PURPOSE, run_token
from airflow_provider_crew.plugins import event_receiver, webhook_app
from airflow_provider_crew.plugins.event_receiver import task_of
from airflow_provider_crew.plugins.webhook_app import Wait, create_app
from airflow_provider_crew.testing import wait_until

KEY = "plugin-test-key-" + "k" * 20
DAG, RUN, TASK = "events_dag", "manual__2026-12-01T02:09:28+00:00", "kickoff"
TOKEN = run_token(KEY, DAG, RUN, EVENTS_TOKEN_KEY_PURPOSE)


@pytest.fixture
def plugin(monkeypatch):
    """The app, with the run's logs in memory and the waits of the run recorded."""
    from fastapi.testclient import TestClient

    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
        json.dumps({"conn_type": "crew_webhook_receiver", "host": "http://127.0.0.1:8080", "password": KEY}),
    )
    logs: dict[tuple[Any, ...], EventLog] = {}
    found: list[tuple[Any, ...]] = []
    woken: list[Wait] = []
    waits: list[Wait] = []

    def add_events(where, kickoff_id, events, content):
        kept = logs.get(where)
        log = kept if kept is not None and kept.kickoff_id == kickoff_id else EventLog(kickoff_id=kickoff_id)
        logs[where] = log
        return log.add(events, content=content), log

    def find_waits(dag_id, run_id, kickoff_id, kind):
        found.append((dag_id, run_id, kickoff_id, kind))
        return [wait for wait in waits if wait.kwargs["kickoff_id"] == kickoff_id]

    def apply_wake(wait, payload):
        woken.append(wait)
        return True

    monkeypatch.setattr(event_receiver, "add_events", add_events)
    monkeypatch.setattr(webhook_app, "find_waits", find_waits)
    monkeypatch.setattr(webhook_app, "apply_wake", apply_wake)
    with TestClient(create_app()) as client:
        yield client, logs, found, woken, waits


def deliver(
    client, events: Any, *, token: str | None = TOKEN, run_id: str = RUN, map_index: int = -1, **params
):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = events if isinstance(events, bytes) else json.dumps({"events": events}).encode()
    return client.post(
        f"/v1/events/{DAG}/{run_id}/{TASK}/{map_index}", content=body, headers=headers, params=params
    )


def event(number: int, type_: str, second: int = 1, **data: Any) -> dict[str, Any]:
    return {
        "id": f"e-{number}",
        "execution_id": "k-1",
        "timestamp": f"2026-12-01T10:00:{second:02d}+00:00",
        "type": type_,
        "data": data,
    }


def wait_on(kickoff_id: str, **kwargs: Any) -> Wait:
    return Wait(
        "ti-1", 7, {"kickoff_id": kickoff_id, "not_before": time.time() - 1, "deadline": 1e10, **kwargs}
    )


def test_the_address_names_the_run_the_task_and_its_map_index():
    assert task_of("manual__2026/12/01/review.round_1/3") == ("manual__2026/12/01", "review.round_1", 3)
    assert task_of("run/task/x") is None and task_of("run/3") is None


@pytest.mark.parametrize(
    "token",
    [None, "wrong", run_token(KEY, DAG, RUN), run_token(KEY, DAG, "another-run", EVENTS_TOKEN_KEY_PURPOSE)],
    ids=["none", "wrong", "the-completion-addresss-token", "another-runs"],
)
def test_anything_but_the_runs_events_token_gets_401_and_touches_nothing(plugin, token):
    client, logs, found, _, _ = plugin
    answer = deliver(client, [event(1, "crew_kickoff_failed")], token=token)
    assert (answer.status_code, answer.json()) == (401, {"detail": "Unauthorized"})
    assert logs == {} and found == []


def test_a_body_over_the_bound_or_not_a_delivery_is_refused(plugin):
    client, logs, _, _, _ = plugin
    assert deliver(client, b"x" * (webhook_app.MAX_BODY_BYTES + 1)).status_code == 413
    assert deliver(client, b"not json").status_code == 400
    assert deliver(client, b'{"events": {}}').status_code == 400
    assert logs == {}


def test_events_are_kept_once_in_timestamp_order_a_malformed_one_skipped(plugin):
    client, logs, _, _, _ = plugin
    first = deliver(
        client,
        [
            event(2, "task_started", 9, task_name="Write", agent_role="Writer"),
            {"id": "broken"},
            event(1, "task_started", 3, task_name="Research", agent_role="Researcher"),
            event(3, "a_type_nobody_knows", 4),
        ],
    )
    assert (first.status_code, first.json()) == (202, {"accepted": 3, "skipped": 1, "waking": 0})
    again = deliver(client, [event(2, "task_started", 9, task_name="Write", agent_role="Writer")])
    assert again.json() == {"accepted": 0, "skipped": 0, "waking": 0}
    log = logs[(DAG, RUN, TASK, -1)]
    assert (log.task, log.agent, log.received) == ("Write", "Writer", 3)


def test_model_responses_are_kept_only_when_the_subscription_asks(plugin):
    client, logs, _, _, _ = plugin
    call = {"model": "m", "usage": {"total_tokens": 5}, "response": "private answer"}
    deliver(client, [event(1, "llm_call_completed", **call)])
    deliver(client, [event(1, "llm_call_completed", **call)], map_index=2, content="1")
    assert "response" not in logs[(DAG, RUN, TASK, -1)].model_calls[0]
    assert logs[(DAG, RUN, TASK, 2)].model_calls[0]["response"] == "private answer"


def test_a_failure_event_wakes_the_executions_waits(plugin):
    client, _, found, woken, waits = plugin
    waits += [wait_on("k-1"), wait_on("k-other")]
    answer = deliver(client, [event(1, "task_failed"), event(2, "crew_kickoff_failed", error="boom")])
    assert answer.json()["waking"] == 1
    wait_until(lambda: len(woken) == 1, timeout=5, message="the wake applied")
    assert woken[0].kwargs["kickoff_id"] == "k-1" and found == [(DAG, RUN, "k-1", "events")]


def test_model_calls_wake_only_the_waits_whose_budget_they_reach(plugin, monkeypatch):
    client, _, _, woken, waits = plugin
    monkeypatch.setattr(webhook_app, "LOOKUP_DEDUP_SECONDS", 0)  # each delivery looks the waits up
    waits += [wait_on("k-1", budget={"max_tokens": 1000}), wait_on("k-1", budget=None)]
    waits[1] = Wait("ti-2", 8, waits[1].kwargs)
    usage = {"prompt_tokens": 500, "completion_tokens": 100, "total_tokens": 600}
    assert deliver(client, [event(1, "llm_call_completed", 1, model="m", usage=usage)]).json()["waking"] == 0
    answer = deliver(client, [event(2, "llm_call_completed", 2, model="m", usage=usage)])
    assert answer.json()["waking"] == 1
    wait_until(lambda: len(woken) == 1, timeout=5, message="the wake applied")
    assert woken[0].ti_id == "ti-1"


def test_kept_events_and_refused_deliveries_are_counted(plugin, monkeypatch):
    from airflow_provider_crew import metrics

    counted: list[tuple[Any, ...]] = []
    monkeypatch.setattr(
        metrics, "count", lambda name, value=1, /, **tags: counted.append((name, value, tags))
    )
    client = plugin[0]
    deliver(client, [event(1, "task_started"), event(2, "task_completed"), event(1, "task_started")])
    deliver(client, [event(3, "task_started")], token="wrong")
    deliver(client, b"not json")
    assert counted == [
        ("crew.events.received", 2, {"dag_id": DAG}),
        ("crew.events.rejected", 1, {"reason": "unauthorized"}),
        ("crew.events.rejected", 1, {"reason": "malformed"}),
    ]
