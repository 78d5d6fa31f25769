"""Faults on purpose: rules that make the service misbehave the way real deployments do.

A :class:`FaultRule` targets an endpoint (``health``, ``inputs``, ``kickoff``, ``status``,
``resume`` or ``*``), optionally one crew, and fires ``count`` times (``None``: until cleared).
Rules are armed at start (constructor / CLI flags / crew file) or at run time through a
:class:`Faults` handle in-process or the ``/_control/faults`` HTTP API. Every firing is counted.

Kinds:

``latency``      sleep ``seconds`` before handling the request.
``slow_first``   sleep ``seconds`` on the first matching request only (a cold service).
``error``        answer ``status`` (429, 503, ...) with a JSON body and ``Retry-After: retry_after``.
``html_500``     answer 500 with an HTML body, as a proxy in front of a broken service would.
``drop_before``  close the connection (TCP reset) without reading or acting on the request.
``drop_after``   act on the request (e.g. start the execution), then reset without a response.
``status_404``   each execution kicked off while armed answers 404 to its first ``count`` polls.
``gateway``      answer 502, 503 (default) or 504 as a gateway does itself (``text/plain``, no
                 ``Retry-After``), after passing the request on (``after``, default) or not.

Hostile or broken answers (what a client must survive without harm to its process):

``oversized``    answer 200 with a JSON body of ``size`` bytes, without acting on the request.
``gzip_bomb``    answer 200 gzip-encoded: a small body inflating to ``size`` bytes, without acting.
``trickle``      act on the request, then send the answer one byte every ``seconds``.
``redirect``     answer ``status`` (default 307) with ``Location: <location><request path>``,
                 without acting on the request: e.g. to another host, which must not see the token.

Garbage answers (what a proxy, a gateway or a half-deployed service sends):

``html_200``            answer 200 with an HTML page (a proxy's maintenance page), without acting.
``truncated_json``      act on the request, then send only the first half of its JSON answer
                        (a complete HTTP response whose body is cut).
``wrong_content_type``  act on the request and send its answer as ``text/html``.
``unknown_state``       answer 200 with a status record whose ``state`` the contract does not
                        know (``QUARANTINED``), without acting on the request.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

# The hostile answer bodies have their own module; still importable from here (client tests do).
from .hostile_bodies import gzip_bomb_body, oversized_body

__all__ = [
    "ENDPOINTS",
    "FAULT_KINDS",
    "GARBAGE_KINDS",
    "FaultRule",
    "Faults",
    "FaultsAPI",
    "gzip_bomb_body",
    "oversized_body",
]

ENDPOINTS = ("health", "inputs", "kickoff", "status", "resume", "stop")
FAULT_KINDS = (
    "latency",
    "slow_first",
    "error",
    "html_500",
    "drop_before",
    "drop_after",
    "status_404",
    "gateway",
    "oversized",
    "gzip_bomb",
    "trickle",
    "redirect",
    "html_200",
    "truncated_json",
    "wrong_content_type",
    "unknown_state",
)
# Kinds that replace the normal response, checked in this order.
_RESPONSE_KINDS = ("error", "html_500", "oversized", "gzip_bomb", "redirect", "html_200", "unknown_state")
# Kinds that act on the request and then spoil its answer.
GARBAGE_AFTER_KINDS = ("truncated_json", "wrong_content_type")
GARBAGE_KINDS = ("html_200", "truncated_json", "wrong_content_type", "unknown_state")
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
GATEWAY_STATUSES = (502, 503, 504)


@dataclass
class FaultRule:
    """One fault. ``fired`` counts how often it has taken effect."""

    kind: str
    endpoint: str = "*"
    count: int | None = 1
    seconds: float = 0.0
    status: int = 503
    retry_after: float | None = 1.0
    crew: str | None = None
    size: int = 0
    location: str | None = None
    after: bool = True
    fired: int = 0
    id: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {', '.join(FAULT_KINDS)}")
        if self.endpoint != "*" and self.endpoint not in ENDPOINTS:
            raise ValueError(
                f"unknown endpoint {self.endpoint!r}; expected '*' or one of {', '.join(ENDPOINTS)}"
            )
        if self.kind == "status_404":
            self.endpoint = "status"
        if self.count is not None and (not isinstance(self.count, int) or self.count < 0):
            raise ValueError("count must be an integer >= 0 or null (unlimited)")
        if self.kind == "status_404" and self.count is None:
            raise ValueError("status_404 needs a count: the number of polls answered 404 per execution")
        if self.kind == "slow_first" and self.count is None:
            self.count = 1
        if not isinstance(self.seconds, int | float) or self.seconds < 0:
            raise ValueError("seconds must be a number >= 0")
        if self.kind in ("latency", "slow_first") and self.seconds <= 0:
            raise ValueError(f"{self.kind} needs seconds > 0")
        if self.kind == "error" and not (isinstance(self.status, int) and 400 <= self.status <= 599):
            raise ValueError("error status must be an HTTP error code (400-599)")
        if self.retry_after is not None and (
            not isinstance(self.retry_after, int | float) or self.retry_after < 0
        ):
            raise ValueError("retry_after must be a number >= 0 or null")
        self._check_hostile_answer()

    def _check_hostile_answer(self) -> None:
        size: Any = self.size
        if isinstance(size, float) and size.is_integer():
            self.size = int(size)  # the CLI's key=value form reads numbers as floats
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 0:
            raise ValueError("size must be a whole number of bytes >= 0")
        if self.kind in ("oversized", "gzip_bomb") and self.size < 64:
            raise ValueError(f"{self.kind} needs size >= 64 (bytes of the body, after decompression)")
        if self.kind == "trickle" and self.seconds <= 0:
            raise ValueError("trickle needs seconds > 0 (the pause between two bytes of the answer)")
        if not isinstance(self.after, bool):
            raise ValueError("after must be true or false")
        if self.kind == "gateway":
            if self.status not in GATEWAY_STATUSES:
                raise ValueError(f"gateway status must be one of {', '.join(map(str, GATEWAY_STATUSES))}")
            self.retry_after = None  # a gateway's own answer never says when to come back
        if self.kind == "redirect":
            if self.status == 503:  # the dataclass default: a redirect's own default is 307
                self.status = 307
            if self.status not in REDIRECT_STATUSES:
                raise ValueError(f"redirect status must be one of {', '.join(map(str, REDIRECT_STATUSES))}")
            if not isinstance(self.location, str) or not self.location.startswith(("http://", "https://")):
                raise ValueError("redirect needs a location: an absolute http(s) URL, e.g. http://other:8080")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultRule:
        """Build a rule from JSON-like data (control API, CLI ``--fault``, crew files)."""
        allowed = {
            "kind",
            "endpoint",
            "count",
            "seconds",
            "status",
            "retry_after",
            "crew",
            "size",
            "location",
            "after",
        }
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"unknown fault fields {unknown}; allowed: {sorted(allowed)}")
        if "kind" not in data:
            raise ValueError("a fault needs a 'kind'")
        kwargs = {k: data[k] for k in allowed if k in data}
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["remaining"] = None if self.count is None else max(self.count - self.fired, 0)
        if self.kind == "status_404":
            data["remaining"] = None  # a per-execution budget, not a total
        return data

    def describe(self) -> str:
        """One line for humans, e.g. ``error 429 x2 on kickoff (Retry-After 1)``."""
        times = "until cleared" if self.count is None else f"x{self.count}"
        where = f"on {'all endpoints' if self.endpoint == '*' else self.endpoint}"
        if self.crew:
            where += f" of crew {self.crew}"
        if self.kind == "error":
            return f"error {self.status} {times} {where} (Retry-After {self.retry_after})"
        if self.kind in ("latency", "slow_first"):
            return f"{self.kind} {self.seconds}s {times} {where}"
        if self.kind == "status_404":
            return f"status_404: first {self.count} polls of each new execution answer 404"
        if self.kind in ("oversized", "gzip_bomb"):
            return f"{self.kind} {self.size} bytes {times} {where}"
        if self.kind == "trickle":
            return f"trickle one byte every {self.seconds}s {times} {where}"
        if self.kind == "redirect":
            return f"redirect {self.status} to {self.location} {times} {where}"
        if self.kind == "gateway":
            acted = "after passing the request on" if self.after else "without passing the request on"
            return f"gateway {self.status} {acted} {times} {where}"
        return f"{self.kind} {times} {where}"

    def matches(self, endpoint: str, crew: str | None) -> bool:
        return (self.endpoint in ("*", endpoint)) and (self.crew is None or self.crew == crew)

    @property
    def exhausted(self) -> bool:
        return self.kind != "status_404" and self.count is not None and self.fired >= self.count


class FaultsAPI(ABC):
    """Builders shared by the in-process :class:`Faults` and the HTTP ``RemoteFaults``."""

    @abstractmethod
    def add(self, rule: FaultRule | Mapping[str, Any]) -> dict[str, Any]:
        """Arm one rule; returns it as a dict (with its ``id``)."""

    @abstractmethod
    def clear(self) -> None:
        """Disarm every rule (the counts stay until reset)."""

    @abstractmethod
    def remove(self, rule_id: int) -> None:
        """Disarm one rule."""

    @property
    @abstractmethod
    def rules(self) -> list[dict[str, Any]]:
        """Armed rules with their ``fired`` counts."""

    @property
    @abstractmethod
    def counts(self) -> dict[str, int]:
        """How often each fault kind took effect, e.g. ``{"error_429": 2, "drop_after": 1}``."""

    def latency(
        self, seconds: float, endpoint: str = "*", count: int | None = None, crew: str | None = None
    ) -> dict[str, Any]:
        """Delay requests by ``seconds`` (every request unless ``count`` is given)."""
        return self.add(FaultRule("latency", endpoint, count, seconds=seconds, crew=crew))

    def slow_first(self, seconds: float, endpoint: str = "*", crew: str | None = None) -> dict[str, Any]:
        """Delay only the next matching request (a service waking up from idle)."""
        return self.add(FaultRule("slow_first", endpoint, 1, seconds=seconds, crew=crew))

    def error(
        self,
        status: int = 503,
        count: int | None = 1,
        endpoint: str = "*",
        retry_after: float | None = 1.0,
        crew: str | None = None,
    ) -> dict[str, Any]:
        """Answer ``count`` requests with ``status`` and a ``Retry-After`` header."""
        return self.add(
            FaultRule("error", endpoint, count, status=status, retry_after=retry_after, crew=crew)
        )

    def rate_limit(
        self, count: int | None = 1, endpoint: str = "*", retry_after: float | None = 1.0
    ) -> dict[str, Any]:
        """``count`` responses of 429 Too Many Requests."""
        return self.error(429, count, endpoint, retry_after)

    def unavailable(
        self, count: int | None = 1, endpoint: str = "*", retry_after: float | None = 1.0
    ) -> dict[str, Any]:
        """``count`` responses of 503 Service Unavailable."""
        return self.error(503, count, endpoint, retry_after)

    def garbage(
        self, kind: str, endpoint: str = "*", count: int | None = 1, crew: str | None = None
    ) -> dict[str, Any]:
        """``count`` garbage answers of ``kind``: ``html_200``, ``truncated_json``,
        ``wrong_content_type`` or ``unknown_state`` (see the module docstring)."""
        if kind not in GARBAGE_KINDS:
            raise ValueError(f"unknown garbage kind {kind!r}; expected one of {', '.join(GARBAGE_KINDS)}")
        return self.add(FaultRule(kind, endpoint, count, crew=crew))

    def html_500(self, count: int | None = 1, endpoint: str = "*", crew: str | None = None) -> dict[str, Any]:
        """``count`` responses of 500 with an HTML (not JSON) body."""
        return self.add(FaultRule("html_500", endpoint, count, crew=crew))

    def drop_before(
        self, endpoint: str = "*", count: int | None = 1, crew: str | None = None
    ) -> dict[str, Any]:
        """Reset ``count`` connections before the request is read: nothing is done."""
        return self.add(FaultRule("drop_before", endpoint, count, crew=crew))

    def drop_after(
        self, endpoint: str = "*", count: int | None = 1, crew: str | None = None
    ) -> dict[str, Any]:
        """Act on ``count`` requests, then reset the connection instead of answering."""
        return self.add(FaultRule("drop_after", endpoint, count, crew=crew))

    def gateway(
        self,
        endpoint: str = "*",
        count: int | None = 1,
        status: int = 503,
        after: bool = True,
        crew: str | None = None,
    ) -> dict[str, Any]:
        """``count`` answers of a gateway's own ``status`` (502, 503 or 504; text, no Retry-After).

        ``after``: the request is acted on first (the execution starts, the resume is applied),
        then the gateway answers, as when the upstream connection resets after the request was
        forwarded. ``after=False``: nothing is passed on (503 "no healthy upstream").
        """
        return self.add(FaultRule("gateway", endpoint, count, status=status, crew=crew, after=after))

    def status_404(self, polls: int = 2, crew: str | None = None) -> dict[str, Any]:
        """Executions kicked off from now on answer 404 to their first ``polls`` status polls."""
        return self.add(FaultRule("status_404", "status", polls, crew=crew))

    def oversized(
        self, size: int, endpoint: str = "*", count: int | None = 1, crew: str | None = None
    ) -> dict[str, Any]:
        """``count`` answers of 200 whose JSON body is ``size`` bytes long (nothing is acted on)."""
        return self.add(FaultRule("oversized", endpoint, count, size=size, crew=crew))

    def gzip_bomb(
        self, size: int, endpoint: str = "*", count: int | None = 1, crew: str | None = None
    ) -> dict[str, Any]:
        """``count`` answers of 200 in gzip that inflate to ``size`` bytes (nothing is acted on)."""
        return self.add(FaultRule("gzip_bomb", endpoint, count, size=size, crew=crew))

    def trickle(
        self, seconds: float, endpoint: str = "*", count: int | None = 1, crew: str | None = None
    ) -> dict[str, Any]:
        """Act on ``count`` requests, then send each answer one byte every ``seconds``."""
        return self.add(FaultRule("trickle", endpoint, count, seconds=seconds, crew=crew))

    def redirect(
        self,
        location: str,
        status: int = 307,
        endpoint: str = "*",
        count: int | None = 1,
        crew: str | None = None,
    ) -> dict[str, Any]:
        """``count`` answers of ``status`` with ``Location: <location><request path>``."""
        return self.add(FaultRule("redirect", endpoint, count, status=status, location=location, crew=crew))


def _count_key(rule: FaultRule) -> str:
    return f"{rule.kind}_{rule.status}" if rule.kind in ("error", "gateway") else rule.kind


class Faults(FaultsAPI):
    """Thread-safe rule store used by the server; tests may steer it from another thread."""

    def __init__(self, rules: Iterable[FaultRule | Mapping[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._next_id = 1
        self._counts: dict[str, int] = {}
        for rule in rules:
            self.add(rule)

    # -- FaultsAPI
    def add(self, rule: FaultRule | Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(rule, FaultRule):
            rule = FaultRule.from_dict(rule)
        with self._lock:
            rule.id = self._next_id
            self._next_id += 1
            self._rules.append(rule)
            return rule.to_dict()

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def remove(self, rule_id: int) -> None:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            if len(self._rules) == before:
                raise KeyError(rule_id)

    @property
    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.to_dict() for r in self._rules]

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        """Disarm all rules and zero the counts."""
        with self._lock:
            self._rules.clear()
            self._counts.clear()

    # -- used by the server
    def _fire(self, rule: FaultRule) -> None:
        rule.fired += 1
        key = _count_key(rule)
        self._counts[key] = self._counts.get(key, 0) + 1

    def take(self, kind: str, endpoint: str, crew: str | None) -> FaultRule | None:
        """Consume one firing of the first armed ``kind`` rule matching the request.

        For ``gateway`` only the rules that answer after acting (``after``) are taken here; the
        others replace the answer (:meth:`take_response`).
        """
        if not self._rules:  # fast path: no lock when nothing is armed
            return None
        with self._lock:
            for rule in self._rules:
                if (
                    rule.kind == kind
                    and not (kind == "gateway" and not rule.after)
                    and not rule.exhausted
                    and rule.matches(endpoint, crew)
                ):
                    self._fire(rule)
                    return rule
        return None

    def take_response(self, endpoint: str, crew: str | None) -> FaultRule | None:
        """Consume the first armed response-replacing rule (``error``, ``html_500``, a ``gateway``
        that passes nothing on...)."""
        if not self._rules:
            return None
        with self._lock:
            for rule in self._rules:
                replaces = rule.kind in _RESPONSE_KINDS or (rule.kind == "gateway" and not rule.after)
                if replaces and not rule.exhausted and rule.matches(endpoint, crew):
                    self._fire(rule)
                    return rule
        return None

    def delay_for(self, endpoint: str, crew: str | None) -> float:
        """Seconds to wait before handling: all matching latency rules plus a slow first call."""
        if not self._rules:
            return 0.0
        total = 0.0
        with self._lock:
            for rule in self._rules:
                if (
                    rule.kind in ("latency", "slow_first")
                    and not rule.exhausted
                    and rule.matches(endpoint, crew)
                ):
                    self._fire(rule)
                    total += rule.seconds
        return total

    def status_404_budget(self, crew: str | None) -> list[FaultRule]:
        """Rules that hide a new execution; the engine copies ``count`` per execution."""
        if not self._rules:
            return []
        with self._lock:
            return [
                r for r in self._rules if r.kind == "status_404" and r.matches("status", crew) and r.count
            ]

    def record_hidden_poll(self, rule: FaultRule) -> None:
        with self._lock:
            self._fire(rule)
