"""CrewStatusTrigger: what it stores (serialize) and what it fires (run) against the local service.

``run()`` is driven in the test's event loop the way the triggerer drives it: each test collects
every event the generator yields (under a time limit) and asserts there is exactly one, then
validates the payload with ``CrewWaitEvent.parse`` as ``execute_complete`` does.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import random
import threading
import time
import uuid
from collections import Counter

import aiohttp
import pytest

from airflow_provider_crew.connection_form import StatusPathStyle
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks import loop_connection
from airflow_provider_crew.hooks.client.request import status_call
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.triggers import crew as trigger_module
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.rules import Outcome, WaitFor
from tests.conftest import close_shared_sessions, loop_session

RESEARCH_INPUTS = {"topic": "tidal energy", "current_year": "2026"}
SECRET = "trigger-test-token-5e8a2b"
WRONG_TOKEN = "wrong-token-0d9f3c"
HUMAN_WEBHOOK_TOKEN = "human-hook-token-3a7d"
FAILING_CREW = {
    "name": "doomed",
    "inputs": ["topic"],
    "pending_seconds": 0.01,
    "step_seconds": 0.01,
    "tasks": [
        {"name": "prepare_task", "agent": "Planner", "steps": 1},
        {
            "name": "explode_task",
            "agent": "Builder",
            "steps": 1,
            "fails": True,
            "error": "explode_task blew up",
        },
    ],
}


@pytest.fixture
def connect(crew_service, monkeypatch):
    """Point a connection at the local service (contract status path: one request per poll)."""

    def install(
        conn_id: str = "crew_default",
        *,
        crew: str | None = None,
        password: str | None = None,
        **extra: object,
    ) -> str:
        conn = crew_service.connection_dict(
            "org", crew, retry_delay=0.02, status_path_style="contract", **extra
        )
        if password is not None:
            conn["password"] = password
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return conn_id

    return install


def make_trigger(
    kickoff_id: str,
    *,
    conn_id: str = "crew_default",
    wait_for: str = "completion",
    deadline_in: float = 30.0,
    not_found_in: float = 10.0,
    poll_interval: float = 0.05,
    max_poll_interval: float = 0.2,
) -> CrewStatusTrigger:
    now = time.time()
    return CrewStatusTrigger(
        kickoff_id=kickoff_id,
        crew_conn_id=conn_id,
        wait_for=wait_for,
        deadline=now + deadline_in,
        not_found_deadline=now + not_found_in,
        poll_interval=poll_interval,
        max_poll_interval=max_poll_interval,
    )


async def run_trigger(
    trigger: CrewStatusTrigger, timeout: float = 15.0, *, close: bool = True
) -> CrewWaitEvent:
    """Drain ``run()`` (bounded); assert it yielded exactly one event; return its parsed payload."""

    async def drain() -> list:
        return [event async for event in trigger.run()]

    try:
        events = await asyncio.wait_for(drain(), timeout)
    finally:
        if close:
            await close_shared_sessions()
    assert len(events) == 1, events
    payload = events[0].payload
    json.dumps(payload)  # the triggerer stores it: it must be JSON
    return CrewWaitEvent.parse(payload)


@pytest.fixture
def poll_ends(monkeypatch) -> list[float]:
    """When each status poll of a trigger got its answer (epoch seconds): a spy on the real hook.

    Tests about grace periods and deadlines assert on these instead of on a time window: which
    polls came before the deadline and which after holds however slowly a loaded machine runs.
    """
    ends: list[float] = []
    original = CrewHook.aget_status

    async def timed(hook, kickoff_id, **kwargs):
        try:
            return await original(hook, kickoff_id, **kwargs)
        finally:
            ends.append(time.time())

    monkeypatch.setattr(CrewHook, "aget_status", timed)
    return ends


def human_webhook(crew_service) -> dict[str, object]:
    return {
        "url": crew_service.webhooks.url_for("human"),
        "authentication": {"strategy": "bearer", "token": HUMAN_WEBHOOK_TOKEN},
    }


# -- serialize ------------------------------------------------------------------------------------


def paused_review_execution(crew_service, connect) -> str:
    """An execution of the review crew, paused: only the deadline ends a wait for its completion."""
    connect("crew_review", crew="review")
    kickoff_id = CrewHook("crew_review").kickoff(
        {"topic": "tides"}, human_input_webhook=human_webhook(crew_service)
    )
    crew_service.wait_for_state(kickoff_id, "PAUSED")
    return kickoff_id


def test_serialize_gives_json_primitives_and_no_token(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DEFAULT",
        json.dumps({"conn_type": "crew", "host": "https://crew.example.test", "password": SECRET}),
    )
    trigger = make_trigger(str(uuid.uuid4()), wait_for="human_input")

    classpath, kwargs = trigger.serialize()

    assert classpath == "airflow_provider_crew.triggers.crew.CrewStatusTrigger"
    module, _, name = classpath.rpartition(".")
    assert getattr(importlib.import_module(module), name) is CrewStatusTrigger
    assert all(isinstance(value, (str, int, float, bool)) or value is None for value in kwargs.values())
    dumped = json.dumps(kwargs)
    assert json.loads(dumped) == kwargs
    assert SECRET not in dumped
    assert "password" not in dumped and "token" not in dumped
    assert kwargs["wait_for"] == "human_input"


def test_trigger_recreated_from_its_kwargs_serializes_the_same():
    """A triggerer restart re-creates the trigger from stored kwargs: same wait, same deadlines."""
    trigger = make_trigger(str(uuid.uuid4()), wait_for=WaitFor.HUMAN_INPUT.value, deadline_in=120)
    classpath, kwargs = trigger.serialize()

    stored = json.loads(json.dumps(kwargs))
    again = CrewStatusTrigger(**stored)

    assert again.serialize() == (classpath, kwargs)
    assert again.deadline == trigger.deadline


def test_unknown_wait_for_is_refused_early():
    with pytest.raises(CrewConfigurationError, match="wait_for"):
        make_trigger(str(uuid.uuid4()), wait_for="forever")


def test_max_poll_interval_is_never_below_the_first_interval():
    trigger = make_trigger(str(uuid.uuid4()), poll_interval=5, max_poll_interval=1)

    assert trigger.serialize()[1]["max_poll_interval"] == 5.0


# -- run() against the local service ---------------------------------------------------------------


@pytest.mark.integration
async def test_run_fires_succeeded_with_the_record(crew_service, connect):
    connect()
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)

    event = await run_trigger(make_trigger(kickoff_id))

    assert event.outcome is Outcome.SUCCEEDED
    assert event.kickoff_id == kickoff_id
    execution = crew_service.executions[kickoff_id]
    assert event.record["state"] == "SUCCESS"
    # The final output travels once, beside the record, which keeps none of its copies.
    assert event.output == execution["result"]
    assert "result" not in event.record and "result_json" not in event.record
    assert "output" not in event.record["last_executed_task"]
    assert json.dumps(event.payload()).count(execution["result"][:80]) == 1
    assert event.to_result().last_status.output.startswith("reporting_task by Reporting Analyst")


@pytest.mark.integration
async def test_run_fires_paused_at_the_human_review(crew_service, connect):
    connect("crew_review", crew="review")
    kickoff_id = CrewHook("crew_review").kickoff(
        {"topic": "tides"}, human_input_webhook=human_webhook(crew_service)
    )

    event = await run_trigger(make_trigger(kickoff_id, conn_id="crew_review", wait_for="human_input"))

    assert event.outcome is Outcome.PAUSED
    execution = crew_service.executions[kickoff_id]
    draft_task_id = execution["task_ids"]["draft_task"]
    assert event.record["state"] == "PAUSED"
    assert event.to_result().last_status.paused_task_id == draft_task_id
    (note,) = crew_service.webhooks.wait_for_count("human", 1)
    assert note.json["task_id"] == draft_task_id
    assert execution["state"] == "PAUSED" and execution["feedback"] == []  # the trigger only watched


@pytest.mark.integration
@pytest.mark.crew_service(FAILING_CREW)
async def test_run_fires_failed_with_the_error(crew_service, connect):
    connect()
    kickoff_id = CrewHook().kickoff({"topic": "anything"})

    event = await run_trigger(make_trigger(kickoff_id))

    assert event.outcome is Outcome.FAILED
    assert event.record["state"] == "FAILED"
    assert event.record["error"] == "explode_task blew up"
    assert event.to_result().last_status.error == "explode_task blew up"
    assert crew_service.executions[kickoff_id]["state"] == "FAILED"


@pytest.fixture
def pushed(monkeypatch) -> list[dict]:
    """What a trigger that ends its task pushed to XCom (the triggerer's XCom API, faked)."""
    calls: list[dict] = []

    async def push_xcoms(task_instance, xcoms):
        calls.append(dict(xcoms))

    monkeypatch.setattr(trigger_module, "push_xcoms", push_xcoms)
    return calls


async def events_of(trigger: CrewStatusTrigger, timeout: float = 15.0) -> list:
    """Every event ``run()`` yields (bounded), unparsed."""

    async def drain() -> list:
        return [event async for event in trigger.run()]

    try:
        return await asyncio.wait_for(drain(), timeout)
    finally:
        await close_shared_sessions()


@pytest.mark.integration
async def test_a_trigger_that_may_end_the_task_ends_it_at_once_with_the_workers_xcoms(
    crew_service, connect, pushed
):
    from airflow.triggers.base import TaskSuccessEvent

    connect()
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)
    trigger = make_trigger(kickoff_id)
    trigger.ends_task_when_finished = trigger.ends_task_when_paused = True
    trigger.not_before = time.time() + 60  # the race bound: a worker resume would wait for it
    started = time.monotonic()

    (event,) = await events_of(trigger)

    assert time.monotonic() - started < 10  # not held: no worker resumes, so there is no race
    assert isinstance(event, TaskSuccessEvent)
    assert not event.xcoms  # Airflow 3.0-3.3 store an end event's XComs JSON-encoded twice
    execution = crew_service.executions[kickoff_id]
    (xcoms,) = pushed  # pushed as the worker pushes them, before the event
    assert xcoms["return_value"] == kickoff_id
    assert xcoms["result"] == execution["result"]
    assert xcoms["status"]["state"] == "SUCCESS"
    assert set(xcoms) <= {"return_value", "result", "status", "usage"}
    # The output is stored once: in "result", not again in the status record.
    assert json.dumps(xcoms).count(execution["result"][:80]) == 1


@pytest.mark.integration
async def test_a_trigger_whose_xcom_push_fails_hands_the_end_to_a_worker(crew_service, connect, monkeypatch):
    """A crashed trigger fails its task: a push refused by the triggerer's API must not fail a task
    whose crew succeeded. The worker then ends it, with the event it would have had anyway."""
    connect()
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)

    async def refused(task_instance, xcoms):
        raise RuntimeError("API_SERVER_ERROR: database is locked")

    monkeypatch.setattr(trigger_module, "push_xcoms", refused)
    trigger = make_trigger(kickoff_id)
    trigger.ends_task_when_finished = True

    (event,) = await events_of(trigger)

    assert type(event).__name__ == "TriggerEvent"
    assert CrewWaitEvent.parse(event.payload).outcome is Outcome.SUCCEEDED


@pytest.mark.integration
async def test_a_pause_ends_the_task_from_the_trigger_only_when_a_pause_is_a_success(
    crew_service, connect, pushed
):
    from airflow.triggers.base import TaskSuccessEvent

    connect("crew_review", crew="review")
    hook = CrewHook("crew_review")
    returning = make_trigger(
        hook.kickoff({"topic": "tides"}, human_input_webhook=human_webhook(crew_service)),
        conn_id="crew_review",
        wait_for="human_input",
    )
    returning.ends_task_when_finished = returning.ends_task_when_paused = True
    (ended,) = await events_of(returning)
    assert isinstance(ended, TaskSuccessEvent)
    (xcoms,) = pushed
    assert xcoms["human_input"]["execution_id"] == returning.kickoff_id
    assert "result" not in xcoms

    failing = make_trigger(
        hook.kickoff({"topic": "tides"}, human_input_webhook=human_webhook(crew_service)),
        conn_id="crew_review",
        wait_for="human_input",
    )
    failing.ends_task_when_finished = True  # on_human_input="fail": the worker fails the task at a pause
    failing.not_before = time.time() + 1.5
    (resumed,) = await events_of(failing)
    assert not isinstance(resumed, TaskSuccessEvent)
    assert CrewWaitEvent.parse(resumed.payload).outcome is Outcome.PAUSED
    assert time.time() >= failing.not_before  # a worker resume waits out the race bound
    assert len(pushed) == 1  # the worker pushes what a resumed wait found


@pytest.mark.integration
@pytest.mark.crew_service(FAILING_CREW)
async def test_a_failure_always_resumes_the_worker_after_the_race_bound(crew_service, connect):
    connect()
    trigger = make_trigger(CrewHook().kickoff({"topic": "anything"}))
    trigger.ends_task_when_finished = trigger.ends_task_when_paused = True
    trigger.not_before = time.time() + 1.5

    (event,) = await events_of(trigger)

    assert CrewWaitEvent.parse(event.payload).outcome is Outcome.FAILED  # retries, callbacks: a worker
    assert time.time() >= trigger.not_before


@pytest.mark.integration
async def test_with_the_wake_on_the_trigger_polls_often_until_the_race_bound(
    crew_service, connect, poll_ends
):
    kickoff_id = paused_review_execution(crew_service, connect)
    monkey = trigger_module.RACE_WINDOW_POLL_INTERVAL
    trigger_module.RACE_WINDOW_POLL_INTERVAL = 0.3
    try:
        trigger = make_trigger(kickoff_id, conn_id="crew_review", deadline_in=3.0, poll_interval=0.1)
        trigger.safety_poll_interval = 300.0
        trigger.not_before = time.time() + 1.5
        started = time.time()
        event = await run_trigger(trigger)
    finally:
        trigger_module.RACE_WINDOW_POLL_INTERVAL = monkey

    assert event.outcome is Outcome.TIMEOUT
    offsets = [end - started for end in poll_ends]
    in_window = [offset for offset in offsets if offset < 1.5]
    assert len(in_window) >= 4, offsets  # every 0.3 s at most until the bound: no wake comes before it
    assert not [offset for offset in offsets if 1.9 < offset < 2.9], offsets  # then the safety interval


@pytest.mark.integration
async def test_run_fires_not_found_after_the_grace_period(crew_service, connect, poll_ends):
    connect()
    unknown = str(uuid.uuid4())
    trigger = make_trigger(unknown, not_found_in=1.0)

    event = await run_trigger(trigger)

    assert event.outcome is Outcome.NOT_FOUND
    assert event.record is None
    assert unknown in event.message
    # Every 404 inside the grace period let the wait go on; the event came only once it was over.
    assert time.time() >= trigger.not_found_deadline
    assert all(end < trigger.not_found_deadline for end in poll_ends[:-1])
    assert crew_service.request_count("status") == len(poll_ends) >= 1
    assert set(crew_service.counters["responses"]["status"]) == {"404"}


@pytest.mark.integration
@pytest.mark.crew_service(faults=[{"kind": "status_404", "count": 3}])
async def test_run_tolerates_404s_right_after_kickoff(crew_service, connect):
    connect()
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)

    event = await run_trigger(make_trigger(kickoff_id, not_found_in=10))

    assert event.outcome is Outcome.SUCCEEDED
    assert crew_service.counters["responses"]["status"]["404"] == 3
    assert crew_service.faults.counts == {"status_404": 3}


@pytest.mark.integration
async def test_run_fires_timeout_at_the_deadline(crew_service, connect, poll_ends):
    # Paused for review while the trigger waits for completion: only the deadline can end it.
    connect("crew_review", crew="review")
    kickoff_id = CrewHook("crew_review").kickoff(
        {"topic": "tides"}, human_input_webhook=human_webhook(crew_service)
    )
    crew_service.wait_for_state(kickoff_id, "PAUSED")
    trigger = make_trigger(kickoff_id, conn_id="crew_review", deadline_in=0.4)

    event = await run_trigger(trigger)

    assert event.outcome is Outcome.TIMEOUT
    assert time.time() >= trigger.deadline
    # It polled until the deadline and stopped at the first answer after it, not later.
    assert sum(1 for end in poll_ends if end >= trigger.deadline) <= 1
    assert event.record["state"] == "PAUSED"  # the last status seen travels with the event
    assert "Timed out waiting for crew execution" in event.message  # the worker stops it (stop_crew)
    assert crew_service.request_count("status") == len(poll_ends) >= 1


@pytest.mark.integration
async def test_a_wait_woken_by_webhook_polls_once_soon_then_on_the_safety_interval(
    crew_service, connect, poll_ends
):
    """With webhook wake the trigger only backs the webhooks up: one early look, then slow polls."""
    kickoff_id = paused_review_execution(crew_service, connect)
    trigger = make_trigger(kickoff_id, conn_id="crew_review", deadline_in=5.0, poll_interval=0.2)
    trigger.safety_poll_interval = 2.0
    started = time.time()

    event = await run_trigger(trigger)

    assert event.outcome is Outcome.TIMEOUT
    offsets = [end - started for end in poll_ends]
    # The first look soon (one poll_interval, plus the connection's lookup on a loaded machine), well
    # before the safety interval's floor; then 1.6-2.0 s apart (the jittered safety interval). Without
    # the safety interval the same wait would poll every 0.05-0.2 s, a dozen times or more.
    assert offsets[0] <= 1.0, offsets
    gaps = [later - earlier for earlier, later in itertools.pairwise(offsets)]
    assert all(1.55 <= gap <= 2.6 for gap in gaps[:-1]) and gaps[-1] <= 2.6, (
        offsets
    )  # the last: at the deadline
    assert 2 <= len(offsets) <= 4, offsets


@pytest.mark.integration
async def test_a_woken_wait_whose_end_only_the_safety_poll_found_says_no_wake_came(
    crew_service, connect, capsys
):
    connect("crew_default")
    kickoff_id = CrewHook().kickoff({"topic": "tides", "current_year": "2026"})
    trigger = make_trigger(kickoff_id, poll_interval=0.05)
    trigger.safety_poll_interval = 0.5  # the first look is early; the crew ends before the next poll

    event = await run_trigger(trigger)

    assert event.outcome is Outcome.SUCCEEDED
    said = [line for line in capsys.readouterr().out.splitlines() if "no webhook woke this wait" in line]
    assert len(said) == 1 and kickoff_id in said[0] and "docs/webhook-wake.md" in said[0]


@pytest.mark.integration
async def test_a_polling_wait_or_a_first_look_says_nothing_about_wakes(crew_service, connect, capsys):
    connect("crew_default")
    kickoff_id = CrewHook().kickoff({"topic": "tides", "current_year": "2026"})
    crew_service.wait_for_state(kickoff_id)
    woken = make_trigger(kickoff_id)
    woken.safety_poll_interval = 300.0  # the first look finds the end: nothing was missed
    assert (await run_trigger(woken)).outcome is Outcome.SUCCEEDED
    assert (await run_trigger(make_trigger(kickoff_id))).outcome is Outcome.SUCCEEDED
    assert "no webhook woke" not in capsys.readouterr().out


@pytest.mark.integration
async def test_an_end_found_within_the_race_bound_says_nothing_about_wakes(
    crew_service, connect, capsys, monkeypatch
):
    """A webhook before the bound is not applied, by design: the trigger's own polls find the end."""
    connect("crew_default")
    kickoff_id = CrewHook().kickoff({"topic": "tides", "current_year": "2026"})
    monkeypatch.setattr(trigger_module, "RACE_WINDOW_POLL_INTERVAL", 0.2)
    trigger = make_trigger(kickoff_id, poll_interval=0.05)
    trigger.safety_poll_interval = 300.0
    trigger.not_before = time.time() + 6  # the crew ends within the bound (the event is held to it)

    assert (await run_trigger(trigger)).outcome is Outcome.SUCCEEDED
    assert "no webhook woke" not in capsys.readouterr().out


def test_a_trigger_is_rebuilt_from_stored_kwargs_of_another_release():
    kwargs = make_trigger("k-1").serialize()[1]
    rebuilt = CrewStatusTrigger.from_kwargs({**kwargs, "argument_of_a_newer_release": 1})
    assert rebuilt.serialize()[1] == kwargs
    assert "safety_poll_interval" in kwargs and kwargs["safety_poll_interval"] == 0.0


@pytest.mark.integration
async def test_run_with_a_deadline_already_past_polls_once_then_times_out(crew_service, connect):
    connect("crew_review", crew="review")
    kickoff_id = CrewHook("crew_review").kickoff(
        {"topic": "tides"}, human_input_webhook=human_webhook(crew_service)
    )
    crew_service.wait_for_state(kickoff_id, "PAUSED")

    event = await run_trigger(make_trigger(kickoff_id, conn_id="crew_review", deadline_in=-1))

    assert event.outcome is Outcome.TIMEOUT
    assert crew_service.request_count("status") == 1


@pytest.mark.integration
async def test_run_fires_error_on_a_bad_token_without_polling_on(crew_service, connect):
    connect(password=WRONG_TOKEN)

    event = await run_trigger(make_trigger(str(uuid.uuid4())))

    assert event.outcome is Outcome.ERROR
    assert "401" in event.message
    assert WRONG_TOKEN not in json.dumps(event.model_dump(mode="json"))
    assert crew_service.request_count("status") == 1  # permanent: neither retried nor polled again


@pytest.mark.integration
async def test_run_polls_on_through_transient_server_errors(crew_service, connect):
    connect(retry_limit=0, retry_budget=0)  # every 503 reaches the trigger as an error
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)
    crew_service.faults.unavailable(count=3, endpoint="status", retry_after=0.01)

    event = await run_trigger(make_trigger(kickoff_id))

    assert event.outcome is Outcome.SUCCEEDED
    assert crew_service.counters["responses"]["status"]["503"] == 3


# -- one aiohttp session per event loop ----------------------------------------------------------


@pytest.fixture
def sessions_created(monkeypatch) -> list[aiohttp.ClientSession]:
    """Every aiohttp.ClientSession created in this thread (the service's own run elsewhere)."""
    created: list[aiohttp.ClientSession] = []
    original = aiohttp.ClientSession.__init__
    here = threading.get_ident()

    def counting(self, *args, **kwargs):
        if threading.get_ident() == here:
            created.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", counting)
    return created


@pytest.mark.integration
@pytest.mark.crew_service(faults=[{"kind": "status_404", "count": 4}])
async def test_run_reuses_one_session_across_polls(crew_service, connect, sessions_created):
    connect()
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)
    try:
        event = await run_trigger(make_trigger(kickoff_id), close=False)

        assert event.outcome is Outcome.SUCCEEDED
        assert crew_service.request_count("status") >= 5  # four 404s, then at least one answer
        assert len(sessions_created) == 1
        assert loop_session() is sessions_created[0]
        assert not sessions_created[0].closed  # kept open for the next trigger in this loop
    finally:
        await close_shared_sessions()
    assert sessions_created[0].closed


@pytest.mark.integration
async def test_concurrent_triggers_in_one_loop_share_the_session(crew_service, connect, sessions_created):
    connect()
    hook = CrewHook()
    kickoff_ids = [hook.kickoff({**RESEARCH_INPUTS, "topic": f"topic {n}"}) for n in range(4)]
    try:
        events = await asyncio.gather(*(run_trigger(make_trigger(k), close=False) for k in kickoff_ids))
    finally:
        await close_shared_sessions()

    assert [e.outcome for e in events] == [Outcome.SUCCEEDED] * 4
    assert sorted(e.kickoff_id for e in events) == sorted(kickoff_ids)
    assert len(sessions_created) == 1


@pytest.mark.integration
async def test_the_deadline_holds_when_the_service_asks_for_long_retry_after_pauses(crew_service, connect):
    connect(retry_limit=5)
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)
    crew_service.faults.rate_limit(count=None, endpoint="status", retry_after=30)
    started = time.monotonic()

    event = await run_trigger(make_trigger(kickoff_id, deadline_in=0.5), timeout=10)

    assert event.outcome is Outcome.TIMEOUT
    assert time.monotonic() - started < 30  # not even one 30 s Retry-After pause was slept


async def test_a_connection_missing_in_the_triggerer_fires_an_error_event_naming_it(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_ONLY_ON_WORKERS", raising=False)

    event = await run_trigger(make_trigger("k-1", conn_id="only_on_workers"))

    assert event.outcome is Outcome.ERROR
    assert "Connection 'only_on_workers' is not defined where this runs" in event.message


# -- many waits in one triggerer ------------------------------------------------------------------


def test_the_first_poll_is_spread_over_half_an_interval_to_one_and_never_past_the_deadline():
    now = 1000.0
    delays = [trigger_module.first_poll_delay(2.0, now + 60, now) for _ in range(500)]

    assert all(1.0 <= d <= 2.0 for d in delays)
    assert max(delays) - min(delays) > 0.5  # spread, not one instant for every wait
    assert trigger_module.first_poll_delay(2.0, now + 0.3, now) <= 0.3
    assert trigger_module.first_poll_delay(2.0, now - 5, now) == 0.0


def test_a_herd_of_first_polls_is_held_to_the_pacers_rate():
    pacer = trigger_module.FirstPollPacer(per_second=500)
    now = 100.0
    rng = random.Random(7)
    wanted = [rng.uniform(1.0, 2.0) for _ in range(10_000)]  # a triggerer restart
    delays = [pacer.delay(w, now) for w in wanted]

    # A second's worth as wanted, the rest held: then 500 a second (the first second also has the
    # second's worth, minus what the held ones left).
    held = sorted(d - w for d, w in zip(delays, wanted, strict=True))
    assert held[499] == 0.0 and held[500] > 0.0
    per_second = Counter(int(d) for d in delays)
    assert per_second[1] <= 1_000 and max(per_second[s] for s in range(2, 21)) <= 550
    assert all(d >= w for d, w in zip(delays, wanted, strict=True))  # later, never sooner than wanted
    assert 19.0 < max(delays) < 21.5  # 10,000 polls at 500 a second, from 1 s on


def test_waits_started_alone_or_by_the_hundred_poll_when_they_wanted():
    pacer = trigger_module.FirstPollPacer(per_second=500)
    wanted = [1.0 + i / 300 for i in range(300)]
    assert [pacer.delay(w, 100.0) for w in wanted] == wanted
    # One second later the bucket is full again; nothing is held.
    assert pacer.delay(1.5, 101.0) == 1.5
    # A steady stream under the rate is never held (400 waits a second for a minute).
    assert all(pacer.delay(1.0, 102.0 + i / 400) == 1.0 for i in range(24_000))


async def test_a_paced_first_poll_still_comes_by_the_deadline():
    pacer = trigger_module.FirstPollPacer.for_running_loop()
    assert trigger_module.FirstPollPacer.for_running_loop() is pacer  # one per event loop
    # The herd is placed at one loop time, so that a stalled test process (CI runs jobs side by side)
    # cannot refill the bucket: 2,000 first polls wanted 1-2 s ahead hold the last three seconds.
    loop_now = asyncio.get_running_loop().time()
    for _ in range(2_000):
        pacer.delay(random.uniform(1.0, 2.0), loop_now)
    assert pacer.delay(1.5, loop_now) > 4.0
    # A wait due in 1.5 s polls then, at its deadline, though the bucket would hold it seconds longer.
    now = time.time()
    assert trigger_module.first_poll_delay(2.0, now + 1.5, now, pacer=pacer) == pytest.approx(1.5)


async def test_waits_started_together_do_not_poll_together(monkeypatch):
    slept: list[float] = []

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)
        raise asyncio.CancelledError  # stop each wait at its first sleep

    monkeypatch.setattr(trigger_module.asyncio, "sleep", fake_sleep)
    for n in range(20):
        with pytest.raises(asyncio.CancelledError):
            await anext(make_trigger(f"k-{n}", poll_interval=2.0).run())

    assert len(slept) == 20 and len(set(slept)) == 20
    assert all(1.0 <= d <= 2.0 for d in slept)


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """Every connection lookup the shared cache makes (a spy on its ``aget_connection``)."""
    seen: list[str] = []
    original = loop_connection.aget_connection

    async def counting(conn_id):
        seen.append(conn_id)
        await asyncio.sleep(0.01)  # long enough for other waits to ask meanwhile
        return await original(conn_id)

    monkeypatch.setattr(loop_connection, "aget_connection", counting)
    return seen


def _conn_env(monkeypatch, conn_id: str, host: str, password: str) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "crew", "host": host, "password": password}),
    )


async def test_waits_in_one_loop_share_one_connection_lookup(monkeypatch, lookups):
    _conn_env(monkeypatch, "crew_shared", "https://crew.example", "token-1")
    _conn_env(monkeypatch, "crew_other", "https://other.example", "token-2")

    first = await asyncio.gather(*(loop_connection.shared_connection("crew_shared") for _ in range(50)))
    again = await loop_connection.shared_connection("crew_shared")
    other = await loop_connection.shared_connection("crew_other")

    assert lookups == ["crew_shared", "crew_other"]
    assert all(c is first[0] for c in [*first, again])
    assert first[0].config.token == "token-1" and other.config.token == "token-2"
    call = status_call(first[0].config.base_url, first[0].headers, "k/1", StatusPathStyle.CONTRACT)
    assert (call.url, call.headers["Authorization"]) == (
        "https://crew.example/k%2F1/status",
        "Bearer token-1",
    )


async def test_a_rotated_token_is_picked_up_once_the_lookup_expires(monkeypatch, lookups):
    _conn_env(monkeypatch, "crew_rotating", "https://crew.example", "old-token")
    before = await loop_connection.shared_connection("crew_rotating", ttl=0.2)
    _conn_env(monkeypatch, "crew_rotating", "https://crew.example", "new-token")

    assert (await loop_connection.shared_connection("crew_rotating", ttl=0.2)).config.token == "old-token"
    await asyncio.sleep(0.25)
    after = await loop_connection.shared_connection("crew_rotating", ttl=0.2)

    assert before.config.token == "old-token" and after.config.token == "new-token"
    assert lookups == ["crew_rotating", "crew_rotating"]


@pytest.mark.integration
async def test_a_token_rotated_within_the_lookups_lifetime_is_picked_up_at_its_first_refusal(
    crew_service, connect, lookups
):
    """Rotate the token in the connection, revoke the old one at once: the waits of the loop must not
    fail for the minute their lookup is kept. The first 401 looks the connection up again, once for all."""
    from airflow_provider_crew.exceptions import CrewAuthenticationError

    connect()
    kickoff_id = CrewHook().kickoff(RESEARCH_INPUTS)
    connect("crew_rotated", password=WRONG_TOKEN)  # the old token, which the service no longer takes
    stale = await loop_connection.shared_connection("crew_rotated")
    connect("crew_rotated")  # the connection now holds the new token
    try:
        statuses = await asyncio.gather(*(CrewHook("crew_rotated").aget_status(kickoff_id) for _ in range(5)))
        assert all(status.state is not None for status in statuses)
        assert stale.config.token == WRONG_TOKEN and lookups == ["crew_rotated", "crew_rotated"]

        connect("crew_revoked", password=WRONG_TOKEN)  # the connection still holds it: the refusal stands
        with pytest.raises(CrewAuthenticationError):
            await CrewHook("crew_revoked").aget_status(kickoff_id)
        assert lookups.count("crew_revoked") == 2  # looked up again once, found the same token
    finally:
        await close_shared_sessions()


async def test_a_failed_lookup_is_not_kept(monkeypatch, lookups):
    monkeypatch.delenv("AIRFLOW_CONN_CREW_LATE", raising=False)
    results = await asyncio.gather(
        *(loop_connection.shared_connection("crew_late") for _ in range(5)), return_exceptions=True
    )
    assert all(isinstance(r, CrewConfigurationError) for r in results)

    _conn_env(monkeypatch, "crew_late", "https://crew.example", "token")
    assert (await loop_connection.shared_connection("crew_late")).config.token == "token"
    assert lookups == ["crew_late", "crew_late"]  # one for the five waiting together, one after


async def test_a_trigger_cancelled_while_it_pushes_xcoms_lets_the_push_finish(monkeypatch):
    """A wake (or a user) can end the deferral while the trigger pushes its task's XComs. The push's
    request must still read its answer: cancelled half-way, Airflow 3.1's trigger runner would read
    that answer as its own next one and exit. (Each ``XCom.set`` in the triggerer runs its request on
    the event loop with asgiref's ``async_to_sync``, as faked here.)"""
    import airflow.sdk.execution_time.xcom as xcom_module
    from asgiref.sync import async_to_sync

    started, answered = asyncio.Event(), []

    async def request(key):
        started.set()
        await asyncio.sleep(0.5)  # the request is written; its answer is on the way
        answered.append(key)

    def set_xcom(key, value, **where):
        async_to_sync(request)(key)

    monkeypatch.setattr(xcom_module.XCom, "set", staticmethod(set_xcom))
    ti = type("TI", (), {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1})()
    push = asyncio.ensure_future(trigger_module.push_xcoms(ti, {"return_value": "k", "result": "done"}))
    await asyncio.wait_for(started.wait(), 10)
    push.cancel()  # as the triggerer cancels a trigger whose task no longer waits
    with pytest.raises(asyncio.CancelledError):
        await push
    deadline = time.monotonic() + 10
    while len(answered) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert answered == ["return_value", "result"]
