"""What the service counts for tests to assert on (``counters`` of a service handle)."""

from __future__ import annotations

from typing import Any

from .faults import ENDPOINTS

__all__ = ["Counters"]


class Counters:
    """Requests per endpoint, answers per endpoint and status code, token kinds used, and stops.

    ``stops`` lists the kickoff ids that ``POST /stop/{kickoff_id}`` stopped (answered 200), in order.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests: dict[str, int] = dict.fromkeys((*ENDPOINTS, "other"), 0)
        self.responses: dict[str, dict[str, int]] = {}
        self.auth: dict[str, int] = {"org": 0, "user": 0, "missing": 0, "invalid": 0}
        self.by_crew: dict[str, dict[str, int]] = {}
        self.status_paths: dict[str, int] = {"contract": 0, "deployed": 0}
        self.stops: list[str] = []

    def request(self, endpoint: str, crew: str | None) -> None:
        self.requests[endpoint] += 1
        if crew is not None:
            per = self.by_crew.setdefault(crew, {})
            per[endpoint] = per.get(endpoint, 0) + 1

    def response(self, endpoint: str, code: int | str) -> None:
        per = self.responses.setdefault(endpoint, {})
        key = str(code)
        per[key] = per.get(key, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "responses": {k: dict(v) for k, v in self.responses.items()},
            "auth": dict(self.auth),
            "by_crew": {k: dict(v) for k, v in self.by_crew.items()},
            "status_paths": dict(self.status_paths),
            "stops": list(self.stops),
        }
