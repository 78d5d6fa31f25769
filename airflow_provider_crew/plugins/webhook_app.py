"""The app the api-server plugin mounts: it receives crews' webhooks and wakes the deferred waits.

Mounted at ``/crew-webhooks`` on Airflow's api-server by :mod:`.webhooks` (the package's
``airflow.plugins`` entry point), and imported by the api-server only. Airflow does not authenticate
plugin apps; this one checks every call itself:

- ``GET /crew-webhooks/v1/health``: whether the plugin can wake waits here, and proof of its key:
  the caller's nonce signed with a key derived for this alone, never with the one behind run tokens.
  Anyone may ask, so it never tells why the wake is off: the api-server's log does.
- ``POST /crew-webhooks/v1/{crew|human}/{dag_id}/{run_id}``: a crew's completion (``crew``) or
  human-input (``human``) webhook for one DAG run. The run's token comes as the ``token`` query
  parameter (the completion address) or a bearer token (the human-input webhook); a missing or wrong
  one gets 404 and touches nothing. The token is never logged nor put in an exception's text.

A webhook carries no result: it wakes the run's deferred waits on its execution (``kickoff_id``),
and each woken task reads the status with the crew's token (:mod:`airflow_provider_crew.operators.wait`).
Airflow fails a task resumed before the scheduler has handled its deferral (apache/airflow#67287), so
a wake that comes before the trigger's race bound (``not_before``) is not applied: until then the
trigger polls at most 5 s apart and ends the task itself. A wake at or after it is applied at once,
once per deferral, and only after re-checking under a row lock that the task instance still waits on
that trigger. Airflow's database and its resume of a deferred task are reached through
:mod:`.airflow_db`, which probes the internal the wake relies on (``handle_event_submit``): without it
the wake is off (the api-server's log says why) and the tasks keep polling.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from airflow_provider_crew import __version__
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.webhook_receiver import (
    API_VERSION,
    DEFAULT_RECEIVER_CONN_ID,
    EVENTS,
    KINDS,
    TOKEN_PARAMETER,
    ReceiverConfig,
    bearer_token,
    key_check,
    receiver_config,
    token_matches,
    usable_token,
)
from airflow_provider_crew.plugins import airflow_db
from airflow_provider_crew.plugins.event_receiver import EventReceiver
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.rules import Outcome, WaitFor

log = logging.getLogger(__name__)

STATUS_TRIGGER = "airflow_provider_crew.triggers.crew.CrewStatusTrigger"
#: Largest webhook body read; a larger one is refused (413) and wakes nothing.
MAX_BODY_BYTES = 1024 * 1024
# How long the receiver connection read in the api-server is used before it is read again.
KEYS_TTL_SECONDS = 60.0
# Webhooks for one run, kind and execution within this many seconds share one database lookup.
LOOKUP_DEDUP_SECONDS = 2.0
# Database work of the plugin runs in at most this many threads at once.
DB_THREADS = 4
WOKEN_BY = {
    "crew": "the crew's completion webhook",
    "human": "the crew's human-input webhook",
    "events": "the crew's event stream",
}
#: All ``/health`` says of why the wake is off: a caller is not authenticated, and an error's text may
#: name hosts, a secrets backend's or a database's failure.
WHY_IN_THE_LOG = "the api-server's log says why (search it for 'Webhook wake is off')"


@dataclass(frozen=True)
class Wait:
    """A task instance of the run deferred on a crew status trigger."""

    ti_id: Any  # the task instance's id as the database holds it (a UUID)
    trigger_id: int
    kwargs: dict[str, Any]

    @property
    def not_before(self) -> float:
        return float(self.kwargs.get("not_before") or 0.0)

    @property
    def deferral(self) -> tuple[str, int, float]:
        """One deferral of one task instance (a trigger row's id alone is reused once it is gone)."""
        return str(self.ti_id), self.trigger_id, self.not_before


def find_waits(dag_id: str, run_id: str, kickoff_id: str, kind: str) -> list[Wait]:
    """The run's task instances deferred on ``kickoff_id`` that a ``kind`` webhook ends."""
    waits = []
    for ti_id, trigger_id, kwargs in airflow_db.deferred_waits(dag_id, run_id, STATUS_TRIGGER):
        if kwargs.get("kickoff_id") != kickoff_id:
            continue
        if kind == "human" and kwargs.get("wait_for") != WaitFor.HUMAN_INPUT.value:
            continue  # a pause ends only the waits that stop at one
        waits.append(Wait(ti_id, trigger_id, kwargs))
    return waits


def apply_wake(wait: Wait, payload: dict[str, Any]) -> bool:
    """Resume the task instance with ``payload`` if, under a row lock, it still waits on that trigger.

    The row is read with a locking select (PostgreSQL, MySQL) and then claimed with an update that
    matches only while it still waits on that trigger: SQLite has no row locks, and the update is
    what serialises a concurrent resume there.
    """
    with airflow_db.session() as db:
        ti = airflow_db.lock_deferred(db, wait.ti_id, wait.trigger_id)
        if ti is None:
            return False  # ended, or woken by its trigger: nothing to do
        trigger = airflow_db.trigger_row(db, wait.trigger_id)
        if trigger is None or trigger.kwargs.get("not_before") != wait.kwargs.get("not_before"):
            return False  # deferred anew meanwhile (the database may reuse a trigger's id): not this wait
        if not airflow_db.claim_deferred(db, wait.ti_id, wait.trigger_id):
            return False
        if not airflow_db.submit_event(db, ti, payload):  # Airflow 3.3 then fails the task
            log.warning("Airflow could not store the wake of task instance %s.", wait.ti_id)
    return True


class Waker:
    """The api-server's side of the wake: lookups shared by repeated webhooks, wakes applied from the
    trigger's race bound on, once per deferral (a deferral is one trigger row)."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int, float], asyncio.Task[None]] = {}  # deferral -> its wake
        self._woken: OrderedDict[tuple[str, int, float], None] = OrderedDict()  # deferrals woken (bounded)
        self._recent: dict[tuple[str, str, str, str], float] = {}  # lookup -> when (monotonic)
        self._threads = asyncio.Semaphore(DB_THREADS)

    async def webhook(
        self,
        kind: str,
        dag_id: str,
        run_id: str,
        kickoff_id: str,
        ends: Callable[[dict[str, Any]], bool] | None = None,
        lookup: str = "",
    ) -> int:
        """Schedule the wake of every wait of the run that this webhook ends; how many it scheduled.

        :param ends: Whether it ends a wait, by the wait's trigger kwargs (the event stream's budget
            check); None: every wait of the execution that ``kind`` ends.
        :param lookup: What the webhook says, where one kind says several things: the same thing again
            within :data:`LOOKUP_DEDUP_SECONDS` shares the lookup just made.
        """
        now, came_at = time.monotonic(), time.time()
        key = (f"{kind}{lookup}", dag_id, run_id, kickoff_id)
        if now - self._recent.get(key, -LOOKUP_DEDUP_SECONDS) < LOOKUP_DEDUP_SECONDS:
            return 0  # the same webhook again: the lookup just made covers it
        self._recent = {seen: at for seen, at in self._recent.items() if now - at < LOOKUP_DEDUP_SECONDS}
        self._recent[key] = now
        async with self._threads:
            waits = await asyncio.to_thread(find_waits, dag_id, run_id, kickoff_id, kind)
        scheduled = 0
        for wait in waits:
            if wait.deferral in self._pending or wait.deferral in self._woken:
                continue
            if ends is not None and not ends(wait.kwargs):
                continue
            early = wait.not_before - time.time()
            if early > 0:
                log.debug(
                    "Not waking task instance %s (%s webhook, execution %s): %.1f s before its trigger's "
                    "race bound, until which the trigger's own polls end the wait.",
                    wait.ti_id,
                    kind,
                    kickoff_id,
                    early,
                )
                continue
            task = asyncio.get_running_loop().create_task(self._wake(wait, kind, came_at))
            self._pending[wait.deferral] = task
            task.add_done_callback(self._forget_pending)
            scheduled += 1
        return scheduled

    def _forget_pending(self, done: asyncio.Task[None]) -> None:
        for key, task in list(self._pending.items()):
            if task is done:
                del self._pending[key]

    async def _wake(self, wait: Wait, kind: str, came_at: float) -> None:
        event = CrewWaitEvent(
            outcome=Outcome.WOKEN,
            kickoff_id=str(wait.kwargs.get("kickoff_id")),
            message=f"Woken by {WOKEN_BY[kind]}.",
            wait=wait.kwargs,
            woken_at=came_at,  # the crew's end, for the woken task's crew.wait.end_lag
        )
        payload = event.payload()
        for attempt in range(3):
            try:
                async with self._threads:
                    applied = await asyncio.to_thread(apply_wake, wait, payload)
                break
            except Exception:  # e.g. SQLite's "database is locked" under load: try again, then give up
                if attempt == 2:
                    log.exception("Could not wake task instance %s; its wait polls on.", wait.ti_id)
                    return
                await asyncio.sleep(0.5 * (attempt + 1))
        self._woken[wait.deferral] = None
        while len(self._woken) > 10_000:
            self._woken.popitem(last=False)
        if applied:
            log.info(
                "Woke task instance %s (%s webhook, execution %s).",
                wait.ti_id,
                kind,
                wait.kwargs.get("kickoff_id"),
            )


class ReceiverKeys:
    """The receiver connection's keys in the api-server, read again after :data:`KEYS_TTL_SECONDS`."""

    def __init__(self) -> None:
        self._config: ReceiverConfig | None = None
        self._why: str = ""
        self._read_at = -KEYS_TTL_SECONDS

    def get(self) -> tuple[ReceiverConfig | None, str]:
        if time.monotonic() - self._read_at >= KEYS_TTL_SECONDS:
            config, why = self._read()
            if why and why != self._why:  # once per reason, not at every read
                log.warning("Webhook wake is off in this api-server: %s.", why)
            self._config, self._why, self._read_at = config, why, time.monotonic()
        return self._config, self._why

    async def aget(self) -> tuple[ReceiverConfig | None, str]:
        """:meth:`get` from the event loop: a due lookup (secrets backend, database) runs in a thread."""
        if time.monotonic() - self._read_at >= KEYS_TTL_SECONDS:
            return await asyncio.to_thread(self.get)
        return self._config, self._why

    @staticmethod
    def _read() -> tuple[ReceiverConfig | None, str]:
        try:
            where = "for the api-server"
            return receiver_config(airflow_db.connection, DEFAULT_RECEIVER_CONN_ID, where=where), ""
        except CrewConfigurationError as error:  # not defined, or defined wrong: its own words
            return None, str(error).rstrip(".")
        except Exception as error:  # a secrets backend's failure: logged, never raised
            return None, f"connection {DEFAULT_RECEIVER_CONN_ID!r} cannot be read: {error}"


def presented_token(request: Request) -> str | None:
    """The run's token the request presents: its ``token`` query parameter, else a bearer token.

    None when there is none, or when it cannot be a run's token (too long, or not ASCII): such a
    request gets the same 404 as a wrong token.
    """
    token = request.query_params.get(TOKEN_PARAMETER)
    if token:
        return usable_token(token)
    return bearer_token(request.headers.get("authorization", ""))


def execution_of(body: bytes) -> str | None:
    """The execution a webhook body names (``kickoff_id``, or ``execution_id`` of a pause), if any."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    value = data.get("kickoff_id") or data.get("execution_id")
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


async def read_capped(request: Request) -> bytes | None:
    """The request's body, or None once it passes :data:`MAX_BODY_BYTES` (the rest is not read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app() -> FastAPI:
    """The plugin's FastAPI app."""
    app = FastAPI(title="Crew webhooks", docs_url=None, redoc_url=None, openapi_url=None)
    waker, keys, missing = Waker(), ReceiverKeys(), airflow_db.wake_internals_missing()
    events = EventReceiver(waker, keys, read_capped)
    if missing is not None:
        log.warning("Webhook wake is off in this api-server: %s; the tasks poll as usual.", missing)

    def not_found() -> JSONResponse:
        # A new response each time: the api-server's middleware (gzip) edits a response's headers in
        # place, and a shared one would carry "content-encoding: gzip" to the next, plain, answer.
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    @app.get(f"/{API_VERSION}/health")
    def health(nonce: str | None = None) -> dict[str, Any]:
        config, _ = keys.get()
        answer: dict[str, Any] = {"plugin": "airflow-provider-crew", "version": __version__}
        answer["wake"] = missing is None and config is not None
        answer["reason"] = None if answer["wake"] else WHY_IN_THE_LOG
        if config is not None and nonce and len(nonce) <= 128:
            answer["key_check"] = key_check(config.keys[0], nonce)
        return answer

    # Before the webhooks' route, which would take "events" for a kind.
    @app.post(f"/{API_VERSION}/{EVENTS}/{{dag_id}}/{{path:path}}")
    async def event_delivery(dag_id: str, path: str, request: Request) -> Response:
        if missing is not None:
            return JSONResponse({"detail": "This Airflow cannot wake waits."}, status_code=503)
        return await events.deliver(dag_id, path, request)

    @app.post(f"/{API_VERSION}/{{kind}}/{{dag_id}}/{{run_id:path}}")
    async def webhook(kind: str, dag_id: str, run_id: str, request: Request) -> Response:
        config, _ = await keys.aget()
        token = presented_token(request)
        if kind not in KINDS or config is None or token is None:
            return not_found()
        if not token_matches(config.keys, dag_id, run_id, token):
            return not_found()
        if missing is not None:
            return JSONResponse({"detail": "This Airflow cannot wake waits."}, status_code=503)
        body = await read_capped(request)
        if body is None:
            return JSONResponse({"detail": f"Body over {MAX_BODY_BYTES} bytes."}, status_code=413)
        kickoff_id = execution_of(body)
        # How many waits this webhook will wake: its sender holds the run's token, and it is what tells
        # a crew operator (and the tests) that a webhook found nothing to wake.
        waking = 0 if kickoff_id is None else await waker.webhook(kind, dag_id, run_id, kickoff_id)
        return JSONResponse({"accepted": True, "waking": waking}, status_code=202)

    return app
