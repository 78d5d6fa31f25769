"""A broken or hostile crew service, over real HTTP, through the sync path and the deferrable path.

The local crew service's fault knobs send what misbehaving services and proxies send: a body far
over the cap, a gzip bomb, a body that trickles in one byte at a time, a redirect to another host.
Each costs one request (or one wait), never the process: the body stops at the cap, a request ends
at its total time bound or the wait's deadline, the token never reaches another host, and the
waits beside the bad one in the same event loop keep being answered.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from airflow_provider_crew.exceptions import (
    CrewRedirectError,
    CrewResponseTooLargeError,
    CrewTransportError,
)
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.rules import Outcome
from tests.conftest import close_shared_sessions

pytestmark = pytest.mark.integration

RESEARCH_INPUTS = {"topic": "tidal energy", "current_year": "2026"}
MiB = 1024 * 1024
CAP = 1 * MiB
TRICKLE_SECONDS = 0.5  # per byte: a status record of ~1 KiB would take minutes to arrive


@pytest.fixture
def connect(crew_service, monkeypatch):
    """A connection to the local service with a 1 MiB cap (contract status path: one request per poll)."""

    def install(conn_id: str = "crew_default", *, crew: str | None = None, **extra: object) -> CrewHook:
        settings = {"status_path_style": "contract", "max_response_bytes": CAP, "retry_delay": 0.05, **extra}
        for name, value in crew_service.connection_env(conn_id, "org", crew, **settings).items():
            monkeypatch.setenv(name, value)
        return CrewHook(conn_id)

    return install


async def aget_status(hook: CrewHook, kickoff_id: str, **kwargs):
    try:
        return await hook.aget_status(kickoff_id, **kwargs)
    finally:
        await close_shared_sessions()


def get_status(path: str, hook: CrewHook, kickoff_id: str, **kwargs):
    """The sync path (blocking waits, the sensor's poke) or the async one (the trigger)."""
    if path == "sync":
        return hook.get_status(kickoff_id, **kwargs)
    return asyncio.run(aget_status(hook, kickoff_id, **kwargs))


def trigger(kickoff_id: str, conn_id: str = "crew_default", deadline_in: float = 120.0) -> CrewStatusTrigger:
    now = time.time()
    return CrewStatusTrigger(
        kickoff_id=kickoff_id,
        crew_conn_id=conn_id,
        wait_for="completion",
        deadline=now + deadline_in,
        not_found_deadline=now + 30,
        poll_interval=0.05,
        max_poll_interval=0.2,
    )


async def first_event(t: CrewStatusTrigger) -> CrewWaitEvent:
    events = [event async for event in t.run()]
    assert len(events) == 1, events
    return CrewWaitEvent.parse(events[0].payload)


PATHS = ["sync", "async"]


# -- bodies over the cap ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("kind", "size"), [("oversized", 256 * MiB), ("gzip_bomb", 512 * MiB)])
def test_a_status_body_over_the_cap_fails_once_naming_cap_setting_and_execution(
    crew_service, connect, path, kind, size
):
    hook = connect()
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    getattr(crew_service.faults, kind)(size, endpoint="status")

    with pytest.raises(CrewResponseTooLargeError) as caught:
        get_status(path, hook, kickoff_id)

    message = str(caught.value)
    assert (
        f"GET /{kickoff_id}/status answered with a body over 1 MiB (counted after decompression)" in message
    )
    assert (
        "raise 'Max response size (bytes)' (extra 'max_response_bytes') of connection 'crew_default', "
        f"now {CAP}." in message
    )
    assert f"Crew execution {kickoff_id} may still be running" in message
    assert crew_service.org_token not in message
    assert crew_service.request_count("status") == 1  # not retried: a retry would read it again
    assert crew_service.faults.counts == {kind: 1}


def test_a_kickoff_answer_over_the_cap_is_not_repeated_and_says_an_execution_may_have_started(
    crew_service, connect
):
    crew_service.faults.oversized(64 * MiB, endpoint="kickoff")

    with pytest.raises(CrewResponseTooLargeError, match="An execution may have started"):
        connect().kickoff(RESEARCH_INPUTS)

    assert crew_service.request_count("kickoff") == 1


@pytest.mark.parametrize("path", PATHS)
def test_a_large_status_under_the_cap_is_read(crew_service, connect, path):
    """The cap is what the connection says: raise it and the same answer is read whole."""
    hook = connect(max_response_bytes=64 * MiB)
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.gzip_bomb(8 * MiB, endpoint="status")

    status = get_status(path, hook, kickoff_id)

    assert status.raw["state"] == "SUCCESS" and len(status.output) > 8 * MiB - 100


# -- a body that trickles in --------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_a_trickling_answer_ends_at_the_total_time_bound(crew_service, connect, path):
    hook = connect(connect_timeout=1, read_timeout=1, retry_limit=0)  # bound: 1 + 1 s per attempt
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    body_bytes = len(json.dumps(crew_service.executions[kickoff_id]))  # about what the status body holds
    crew_service.faults.trickle(TRICKLE_SECONDS, endpoint="status")
    started = time.monotonic()

    with pytest.raises(CrewTransportError) as caught:
        get_status(path, hook, kickoff_id)

    assert "no complete answer within 2 s" in str(caught.value)
    assert f"Crew execution {kickoff_id} may still be running" in str(caught.value)
    # Each byte arrived within the 1 s read time-out; only a total bound ends this before the body.
    assert time.monotonic() - started < TRICKLE_SECONDS * body_bytes / 4
    assert crew_service.request_count("status") == 1


@pytest.mark.parametrize("path", PATHS)
def test_a_trickling_answer_ends_at_the_callers_deadline_before_the_time_bound(crew_service, connect, path):
    hook = connect(read_timeout=600)  # the bound alone would allow ten minutes
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.trickle(TRICKLE_SECONDS, endpoint="status", count=None)

    with pytest.raises(CrewTransportError, match=r"no complete answer within 1\.\d+ s"):
        get_status(path, hook, kickoff_id, deadline=time.time() + 1.5)


async def test_a_deferred_wait_on_a_trickling_service_times_out_at_its_deadline(crew_service, connect):
    hook = connect(read_timeout=600)
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.trickle(TRICKLE_SECONDS, endpoint="status", count=None)
    wait = trigger(kickoff_id, deadline_in=2)

    try:
        event = await asyncio.wait_for(first_event(wait), 60)
    finally:
        await close_shared_sessions()

    assert event.outcome is Outcome.TIMEOUT
    assert time.time() >= wait.deadline
    assert "Timed out waiting for crew execution" in event.message


# -- the waits beside a bad one ---------------------------------------------------------------------


@pytest.mark.crew_service(
    faults=[
        {
            "kind": "trickle",
            "seconds": TRICKLE_SECONDS,
            "endpoint": "status",
            "count": None,
            "crew": "structured",
        }
    ]
)
async def test_waits_beside_bad_ones_in_the_same_loop_keep_being_answered(crew_service, connect):
    """One triggerer-like loop: four good waits, a trickling one, an oversized one and a bomb."""
    good = connect()
    connect("crew_slow", crew="structured")
    connect("crew_big", crew="review")
    good_ids = [good.kickoff({**RESEARCH_INPUTS, "topic": f"topic {n}"}) for n in range(4)]
    slow_id = CrewHook("crew_slow").kickoff({"company": "Acme", "quarter": "Q3"})
    big_ids = [CrewHook("crew_big").kickoff({"topic": f"big {n}"}) for n in range(2)]
    crew_service.faults.oversized(300 * MiB, endpoint="status", crew="review")
    crew_service.faults.gzip_bomb(512 * MiB, endpoint="status", crew="review")

    slow = asyncio.create_task(first_event(trigger(slow_id, "crew_slow")))
    big = [asyncio.create_task(first_event(trigger(k, "crew_big"))) for k in big_ids]
    try:
        events = await asyncio.wait_for(asyncio.gather(*(first_event(trigger(k)) for k in good_ids)), 60)
        # The good waits all ended while the trickling one was still being fed its answer.
        assert not slow.done()
        big_events = await asyncio.wait_for(asyncio.gather(*big), 60)
    finally:
        slow.cancel()
        await asyncio.wait([slow])
        await close_shared_sessions()

    assert [e.outcome for e in events] == [Outcome.SUCCEEDED] * 4
    assert sorted(e.kickoff_id for e in events) == sorted(good_ids)
    assert [e.outcome for e in big_events] == [Outcome.ERROR] * 2
    assert all("over 1 MiB" in e.message and "max_response_bytes" in e.message for e in big_events)
    assert (
        crew_service.faults.counts.get("oversized") == 1 and crew_service.faults.counts.get("gzip_bomb") == 1
    )


# -- redirects --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_to_another_host_is_refused_and_the_token_never_reaches_it(
    crew_service, connect, path, status
):
    elsewhere = crew_service.webhooks  # a second HTTP server that records every request it gets
    hook = connect()
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.redirect(elsewhere.url_for("stolen"), status=status, endpoint="status")

    with pytest.raises(CrewRedirectError) as caught:
        get_status(path, hook, kickoff_id)

    message = str(caught.value)
    assert caught.value.http_status == status
    assert "a redirect to another origin" in message
    assert "Set 'Crew base URL' (the host) of connection 'crew_default' to the address" in message
    assert f"Crew execution {kickoff_id} may still be running" in message
    assert elsewhere.received == []  # not even contacted, so no token there
    assert crew_service.request_count("status") == 1


@pytest.mark.parametrize("path", PATHS)
def test_a_redirect_within_the_service_is_followed_with_the_token(crew_service, connect, path):
    hook = connect()
    kickoff_id = hook.kickoff(RESEARCH_INPUTS)
    crew_service.faults.redirect(crew_service.base_url, status=308, endpoint="status")
    auth_before = crew_service.counters["auth"]["org"]

    status = get_status(path, hook, kickoff_id)

    assert status.raw["kickoff_id"] == kickoff_id
    assert crew_service.counters["responses"]["status"] == {"308": 1, "200": 1}
    assert crew_service.counters["auth"]["org"] == auth_before + 1  # the followed request was authorised


def test_a_redirected_kickoff_is_not_followed_and_starts_nothing(crew_service, connect):
    crew_service.faults.redirect(crew_service.base_url, status=307, endpoint="kickoff")

    with pytest.raises(CrewRedirectError, match="a redirect of a POST") as caught:
        connect().kickoff(RESEARCH_INPUTS)

    assert "may have started" not in str(caught.value)  # a redirect is an answer: nothing was done
    assert crew_service.request_count("kickoff") == 1
    assert crew_service.executions == {}


def test_an_unknown_kickoff_id_is_still_not_found_through_the_new_transport(crew_service, connect):
    from airflow_provider_crew.exceptions import CrewNotFoundError

    with pytest.raises(CrewNotFoundError) as caught:
        connect().get_status(str(uuid.uuid4()))
    assert "may still be running" not in str(caught.value)  # a 404 means something else to a wait
