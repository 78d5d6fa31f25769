"""Webhooks: the service's outbound sender, and a local receiver that tests point webhooks at.

The sender makes real HTTP POSTs with one shared aiohttp session. Deliveries of one execution are
chained so a receiver sees them in the order they happened (steps, then the task, then the
human-input or crew notification); the ``webhooks`` event stream (:mod:`.event_stream`) is not
ordered. A failed delivery is recorded and never stops the execution. The receiver also reads
event-stream deliveries (``{"events": [...]}``): :meth:`WebhookReceiver.unique_events`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

__all__ = ["ReceivedWebhook", "WebhookReceiver", "WebhookSender"]

T = TypeVar("T")


class WebhookSender:
    """Delivers webhook payloads and records every attempt (kept in memory, newest last)."""

    def __init__(self, timeout: float = 5.0, max_records: int = 10_000) -> None:
        self.timeout = timeout
        self._records: deque[dict[str, Any]] = deque(maxlen=max_records)
        self._session: Any = None  # aiohttp.ClientSession, created inside the serving loop
        self._inflight: set[asyncio.Task[None]] = set()
        self._next_id = 1

    async def start(self) -> None:
        # Imported here, at server start-up, so importing this module stays cheap.
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(limit=100, force_close=False),
            )

    async def cancel_pending(self) -> None:
        """Cancel deliveries not finished yet (they are recorded as cancelled)."""
        pending = list(self._inflight)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        await self.cancel_pending()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivery attempt so far, as dicts (a copy)."""
        return [dict(r) for r in self._records]

    @property
    def pending(self) -> int:
        return len(self._inflight)

    def reset(self) -> None:
        self._records.clear()

    def send(
        self,
        kind: str,
        url: str,
        payload: Mapping[str, Any],
        *,
        kickoff_id: str,
        headers: Mapping[str, str] | None = None,
        auth: str | None = None,
        after: asyncio.Task[None] | None = None,
    ) -> asyncio.Task[None]:
        """Schedule one POST; it starts once ``after`` (the previous delivery) has finished."""
        record: dict[str, Any] = {
            "id": self._next_id,
            "kind": kind,
            "url": url,
            "kickoff_id": kickoff_id,
            "auth": auth,
            "payload": dict(payload),
            "status": None,
            "ok": None,
            "error": None,
            "queued_at": time.time(),
            "duration": None,
        }
        self._next_id += 1
        self._records.append(record)
        task = asyncio.get_running_loop().create_task(self._deliver(record, dict(headers or {}), after))
        # Keep a strong reference: the loop only holds weak ones to tasks.
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    async def _deliver(
        self, record: dict[str, Any], headers: dict[str, str], after: asyncio.Task[None] | None
    ) -> None:
        if after is not None and not after.done():
            # The previous delivery never raises; shield it so cancelling this one leaves it be.
            await asyncio.wait([after])
        started = time.perf_counter()
        headers.setdefault("Content-Type", "application/json")
        headers.setdefault("User-Agent", "local-crew-service")
        body = json.dumps(record["payload"], ensure_ascii=False).encode()
        try:
            if self._session is None:
                await self.start()
            async with self._session.post(record["url"], data=body, headers=headers) as resp:
                await resp.read()
                record["status"] = resp.status
                record["ok"] = 200 <= resp.status < 300
                if not record["ok"]:
                    record["error"] = f"receiver answered HTTP {resp.status}"
        except asyncio.CancelledError:
            record["ok"] = False
            record["error"] = "cancelled (service stopped or reset)"
            raise
        except Exception as exc:  # any delivery failure is data for the tests, not a crash
            record["ok"] = False
            record["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            record["duration"] = time.perf_counter() - started


# --------------------------------------------------------------------------------------------------
# Receiver


class _Server(ThreadingHTTPServer):
    # Realtime event streams open dozens of connections at once; the default backlog of 5 would
    # drop the surplus SYNs, and each dropped one costs the sender a second-long retransmit.
    request_queue_size = 128


@dataclass(frozen=True)
class ReceivedWebhook:
    """One request the receiver got. ``headers`` keys are lower case."""

    kind: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    received_at: float = field(default_factory=time.time)

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


class WebhookReceiver:
    """A small HTTP server on a free loopback port that records every request it gets.

    ``url_for("task")`` gives ``http://127.0.0.1:PORT/hooks/task``; the last path segment becomes
    the record's ``kind``. Use :meth:`wait_for` to wait for deliveries (never sleep and hope).
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._records: list[ReceivedWebhook] = []
        self._cond = threading.Condition()
        self._status = 200
        self._status_count: int | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    parsed = json.loads(body) if body else None
                except ValueError:
                    parsed = None
                path = self.path.split("?", 1)[0]
                kind = path.rstrip("/").rsplit("/", 1)[-1] or "root"
                status = receiver._record(
                    ReceivedWebhook(
                        kind=kind,
                        method=self.command,
                        path=self.path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        body=body,
                        json=parsed,
                    )
                )
                reply = json.dumps({"received": True}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_POST = do_PUT = do_GET = _handle

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read records
                return

        self._server = _Server((host, 0), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> WebhookReceiver:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                daemon=True,
                name=f"webhook-receiver-{self.port}",
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses and behaviour
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, kind: str) -> str:
        """Receiver address for one kind of notification, e.g. ``url_for("step")``."""
        return f"{self.base_url}/hooks/{kind}"

    def respond_with(self, status: int, count: int | None = None) -> None:
        """Answer the next ``count`` requests (all, if None) with ``status`` (e.g. 500)."""
        with self._cond:
            self._status = status
            self._status_count = count

    def _record(self, record: ReceivedWebhook) -> int:
        with self._cond:
            self._records.append(record)
            status = self._status
            if self._status_count is not None:
                self._status_count -= 1
                if self._status_count <= 0:
                    self._status, self._status_count = 200, None
            self._cond.notify_all()
            return status

    # -- reading
    @property
    def received(self) -> list[ReceivedWebhook]:
        """Everything received so far, oldest first (a copy)."""
        with self._cond:
            return list(self._records)

    def of_kind(self, kind: str) -> list[ReceivedWebhook]:
        return [r for r in self.received if r.kind == kind]

    def clear(self) -> None:
        with self._cond:
            self._records.clear()

    def wait_for(self, predicate: Callable[[list[ReceivedWebhook]], T | None], timeout: float = 5.0) -> T:
        """Wait until ``predicate(received)`` is truthy and return its value; TimeoutError at the deadline."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate(list(self._records))
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    got = [(r.kind, r.path) for r in self._records]
                    raise TimeoutError(f"webhook condition not met within {timeout}s; received {got}")
                self._cond.wait(remaining)

    def wait_for_count(self, kind: str, count: int, timeout: float = 5.0) -> list[ReceivedWebhook]:
        """Wait until at least ``count`` webhooks of ``kind`` arrived; returns them."""

        def enough(records: list[ReceivedWebhook]) -> list[ReceivedWebhook] | None:
            hits = [r for r in records if r.kind == kind]
            return hits if len(hits) >= count else None

        if count <= 0:
            return self.of_kind(kind)
        return self.wait_for(enough, timeout)

    # -- the ``webhooks`` event stream: deliveries of ``{"events": [...]}``
    def events(self, kind: str = "events") -> list[dict[str, Any]]:
        """Every event delivered to ``url_for(kind)``, as delivered: in arrival order, repeats included."""
        return _events_in(self.received, kind)

    def unique_events(self, kind: str = "events", execution_id: str | None = None) -> list[dict[str, Any]]:
        """The events delivered to ``url_for(kind)`` once each (by ``id``), ordered by ``timestamp``."""
        return _unique(_events_in(self.received, kind), execution_id)

    def wait_for_events(
        self,
        predicate: Callable[[list[dict[str, Any]]], T | None],
        kind: str = "events",
        execution_id: str | None = None,
        timeout: float = 5.0,
    ) -> T:
        """Wait until ``predicate(unique_events(kind, execution_id))`` is truthy; returns its value."""
        return self.wait_for(
            lambda records: predicate(_unique(_events_in(records, kind), execution_id)), timeout
        )

    def wait_for_event(
        self, event_type: str, kind: str = "events", execution_id: str | None = None, timeout: float = 5.0
    ) -> dict[str, Any]:
        """Wait for the first (by timestamp) event of ``event_type``; returns it."""

        def first(events: list[dict[str, Any]]) -> dict[str, Any] | None:
            return next((e for e in events if e.get("type") == event_type), None)

        return self.wait_for_events(first, kind, execution_id, timeout)


def _events_in(records: list[ReceivedWebhook], kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for record in records:
        body = record.json
        if record.kind == kind and isinstance(body, dict) and isinstance(body.get("events"), list):
            found.extend(e for e in body["events"] if isinstance(e, dict))
    return found


def _unique(events: list[dict[str, Any]], execution_id: str | None) -> list[dict[str, Any]]:
    seen: dict[Any, dict[str, Any]] = {}
    for event in events:
        if execution_id is None or event.get("execution_id") == execution_id:
            seen.setdefault(event.get("id"), event)
    return sorted(seen.values(), key=lambda e: str(e.get("timestamp")))
