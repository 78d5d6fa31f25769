"""The ``webhooks`` event stream (the hosted service's "Enterprise Event Streaming"): where and how.

A kickoff (or a resume) may carry ``"webhooks": {"events": [...], "url": ..., "realtime": false,
"authentication": {"strategy": "bearer", "token": ...}}``. :func:`parse_event_target` checks it;
one :class:`EventStream` per execution then delivers the events :mod:`.events` builds, each
delivery a POST of ``{"events": [event, ...]}`` through the :class:`~.webhooks.WebhookSender`
(recorded with kind ``events``; a failed one is recorded and dropped, never retried).

- ``realtime: true``: every event is POSTed alone, at once. ``false``: events are batched; a batch
  goes out ``crew.event_batch_seconds`` after its first event or at ``crew.event_batch_size``
  events, whichever comes first, and whatever is pending goes out at once when the execution
  pauses for human input, is resumed with a new target, or ends.
- Only the types named in ``events`` are sent. Timestamps strictly increase within an execution.
- ``crew.shuffle_events``: every batch is shuffled (never left in order when it has two or more
  events) and every other delivery is held back until the next one has been delivered, so
  deliveries arrive out of order too. Deterministic: a fixed seed, a fixed rhythm.
- ``crew.repeat_events``: every other delivery (the 1st, 3rd, ...) is POSTed a second time, with
  the same event ids, once the first copy has been delivered.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

from .crew_spec import CrewSpec
from .webhooks import WebhookSender

__all__ = ["EVENT_TYPES", "EventStream", "EventTarget", "parse_event_target"]

# The types this service emits (crewAI's event bus names); any other name may be asked for, and
# is simply never sent.
EVENT_TYPES = (
    "crew_kickoff_started",
    "crew_kickoff_completed",
    "crew_kickoff_failed",
    "task_started",
    "task_completed",
    "task_failed",
    "agent_execution_started",
    "agent_execution_completed",
    "agent_execution_error",
    "llm_call_started",
    "llm_call_completed",
    "tool_usage_started",
    "tool_usage_finished",
    "tool_usage_error",
)
_FIELDS = ("events", "url", "realtime", "authentication")
SHUFFLE_SEED = 51


@dataclass(frozen=True)
class EventTarget:
    """A checked ``webhooks`` object: where the events go, which, how, with what token."""

    url: str
    events: frozenset[str]
    realtime: bool = False
    token: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def describe(self) -> dict[str, Any]:
        """For snapshots: everything but the token."""
        return {
            "url": self.url,
            "events": sorted(self.events),
            "realtime": self.realtime,
            "strategy": "bearer" if self.token else None,
        }


def parse_event_target(value: Any, field: str = "webhooks") -> EventTarget | None:
    """The ``webhooks`` object of a kickoff or resume body; ValueError (a 400) if malformed."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"Field '{field}' must be an object")
    unknown = sorted(set(value) - set(_FIELDS))
    if unknown:
        raise ValueError(f"Field '{field}' has unknown fields {unknown}; known: {', '.join(_FIELDS)}")
    url = value.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if (
        not isinstance(url, str)
        or parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() for c in url)
    ):
        raise ValueError(f"Field '{field}.url' must be an absolute http(s) URL, got {url!r}")
    events = value.get("events")
    if not isinstance(events, list) or not events or not all(isinstance(e, str) and e for e in events):
        raise ValueError(f"Field '{field}.events' must be a non-empty list of event type names")
    realtime = value.get("realtime", False)
    if not isinstance(realtime, bool):
        raise ValueError(f"Field '{field}.realtime' must be a boolean (true or false)")
    return EventTarget(url, frozenset(events), realtime, _bearer_token(value.get("authentication"), field))


def _bearer_token(auth: Any, field: str) -> str | None:
    if auth is None:
        return None
    if not isinstance(auth, Mapping):
        raise ValueError(f"Field '{field}.authentication' must be an object")
    if auth.get("strategy") != "bearer":
        raise ValueError(f"{field}.authentication.strategy must be 'bearer', got {auth.get('strategy')!r}")
    token = auth.get("token")
    if not isinstance(token, str) or not token:
        raise ValueError(f"{field}.authentication: strategy 'bearer' needs a non-empty 'token'")
    extra = sorted(set(auth) - {"strategy", "token"})
    if extra:
        raise ValueError(f"{field}.authentication: strategy 'bearer' takes only a token, not {extra}")
    return token


class EventStream:
    """One execution's events on their way to its target. Lives in the serving loop."""

    def __init__(self, target: EventTarget, sender: WebhookSender, crew: CrewSpec, kickoff_id: str) -> None:
        self.target = target
        self.sender = sender
        self.kickoff_id = kickoff_id
        self.batch_seconds = crew.event_batch_seconds
        self.batch_size = crew.event_batch_size
        self.shuffle = crew.shuffle_events
        self.repeat = crew.repeat_events
        self.sent: list[dict[str, Any]] = []  # every event handed to delivery, in emission order
        self.posts = 0
        self._rng = random.Random(SHUFFLE_SEED)
        self._buffer: list[dict[str, Any]] = []
        self._held: tuple[EventTarget, list[dict[str, Any]]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last: datetime | None = None
        self._closed = False

    def wants(self, event_type: str) -> bool:
        return not self._closed and event_type in self.target.events

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        """Stamp one event and queue it (realtime: deliver it now)."""
        if not self.wants(event_type):
            return
        event = {
            "id": str(uuid.uuid4()),
            "execution_id": self.kickoff_id,
            "timestamp": self.stamp(),
            "type": event_type,
            "data": data,
        }
        self.sent.append(event)
        self._buffer.append(event)
        if self.target.realtime or len(self._buffer) >= self.batch_size:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.batch_seconds, self.flush)

    def stamp(self) -> str:
        """Now, ISO 8601 with microseconds, strictly later than the stream's previous stamp."""
        now = datetime.now(timezone.utc)
        if self._last is not None and now <= self._last:
            now = self._last + timedelta(microseconds=1)
        self._last = now
        return now.isoformat(timespec="microseconds")

    def flush(self, final: bool = False) -> None:
        """Deliver the pending batch; ``final`` also releases a held-back one (an idle point)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._buffer = self._buffer, []
        if batch and self.shuffle:
            batch = self._shuffled(batch)
            if self._held is None and not final:
                self._held = (self.target, batch)  # goes out after the next delivery
                return
        tail = self._post(self.target, batch) if batch else None
        if self._held is not None and (tail is not None or final):
            (target, held), self._held = self._held, None
            self._post(target, held, after=tail)

    def retarget(self, target: EventTarget) -> None:
        """A resume's ``webhooks``: what is pending goes to the old target, later events to this one."""
        self.flush(final=True)
        self.target = target

    def close(self) -> None:
        """Forget pending events (the service is reset or shutting down)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buffer, self._held = [], None

    def _shuffled(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        mixed = list(batch)
        self._rng.shuffle(mixed)
        if len(mixed) > 1 and mixed == batch:
            mixed = mixed[1:] + mixed[:1]
        return mixed

    def _post(
        self, target: EventTarget, batch: list[dict[str, Any]], after: asyncio.Task[None] | None = None
    ) -> asyncio.Task[None]:
        self.posts += 1
        payload = {"events": batch}
        auth = "bearer" if target.token else None
        headers = target.headers()
        kickoff_id = self.kickoff_id
        task = self.sender.send(
            "events", target.url, payload, kickoff_id=kickoff_id, headers=headers, auth=auth, after=after
        )
        if self.repeat and self.posts % 2 == 1:
            self.sender.send(
                "events", target.url, payload, kickoff_id=kickoff_id, headers=headers, auth=auth, after=task
            )
        return task
