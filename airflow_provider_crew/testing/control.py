"""The control API, under ``/_control``: tests steer a separately running service through it.

Only the organization token may use it. Each route is a named handler, looked up by method and
route in ``_HANDLERS``; :class:`~.handle.RemoteCrewService` is its client.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from .asgi import JSON, Dropped, HTTPError, Receive, Scope, Send, error_body, read_body, send_answer
from .counters import Counters
from .crew_spec import CrewSpec
from .engine import Engine
from .faults import FaultRule, Faults
from .webhooks import WebhookSender

__all__ = ["CONTROL_ROUTES", "SERVICE_ROUTES", "ControlAPI", "service_routes"]

log = logging.getLogger("airflow_provider_crew.testing")

CONTROL_ROUTES = [
    "GET /_control/counters",
    "GET /_control/faults",
    "POST /_control/faults",
    "DELETE /_control/faults",
    "DELETE /_control/faults/{id}",
    "GET /_control/executions",
    "GET /_control/executions/{kickoff_id}",
    "GET /_control/webhooks",
    "GET /_control/events",
    "GET /_control/events/{kickoff_id}",
    "POST /_control/reset",
    "GET /_control/crews",
    "GET /_control/config",
    "POST /_control/config",
]

# The service's own routes (each also under /crews/<name>), listed by GET /_control as served now.
SERVICE_ROUTES = [
    "GET /",
    "GET /inputs",
    "POST /kickoff",
    "GET /{kickoff_id}/status",
    "GET /status/{kickoff_id}",
    "POST /resume",
    "POST /stop/{kickoff_id}",
]


def service_routes(status_path: str = "both", stop_endpoint: str = "enabled") -> list[str]:
    """:data:`SERVICE_ROUTES` less those switched off by ``status_path`` and ``stop_endpoint``."""
    off = {"contract": "GET /status/{kickoff_id}", "deployed": "GET /{kickoff_id}/status"}.get(status_path)
    return [r for r in SERVICE_ROUTES if r != off and (stop_endpoint == "enabled" or "/stop/" not in r)]


class ControlAPI(ABC):
    """The ``/_control`` routes, mixed into :class:`~.app.CrewServiceApp`: they use its state."""

    crews: dict[str, CrewSpec]
    root_crew: str
    status_path: str
    stop_endpoint: str
    counters: Counters
    faults: Faults
    engine: Engine
    sender: WebhookSender

    @abstractmethod
    def _token_kind(self, scope: Scope) -> str:
        """Which token the request carries: ``org``, ``user``, ``missing`` or ``invalid``."""

    async def reset(self) -> None:
        """Forget executions, deliveries, counters and faults (the control API's reset)."""
        await self.engine.reset()
        await self.sender.cancel_pending()
        self.sender.reset()
        self.faults.reset()
        self.counters.reset()

    def config(self) -> dict[str, Any]:
        return {
            "status_path": self.status_path,
            "stop_endpoint": self.stop_endpoint,
            "speed": self.engine.speed,
            "root_crew": self.root_crew,
            "crews": list(self.crews),
        }

    async def _control(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, payload = await self._control_answer(scope, receive)
            body = json.dumps(payload, default=str).encode()
        except HTTPError as exc:
            status, body = exc.status, error_body(exc.status, exc.message, exc.details)
        except Dropped:
            return
        except Exception as exc:
            log.exception("local crew service: control API error")
            status, body = 500, error_body(500, f"{type(exc).__name__}: {exc}")
        await send_answer(send, status, body, JSON, [])

    async def _control_answer(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        kind = self._token_kind(scope)
        if kind == "user":
            raise HTTPError(403, "The control API needs the organization token")
        if kind != "org":
            raise HTTPError(401, "Invalid or missing bearer token")
        method = scope["method"]
        parts = scope["path"].rstrip("/").split("/")[2:]
        route = parts[0] if parts else ""
        arg = parts[1] if len(parts) > 1 else None
        data: Any = None
        if method in ("POST", "PUT"):
            raw = await read_body(receive)
            if raw.strip():
                try:
                    data = json.loads(raw)
                except ValueError as exc:
                    raise HTTPError(400, f"Malformed JSON body: {exc}") from None
        handler = _HANDLERS.get((method, route))
        if handler is None:
            raise HTTPError(404, f"No control route for {method} {scope['path']}")
        return await handler(self, arg, data)

    # ---------------------------------------------------------------------------------------------
    # Handlers: ``arg`` is the path segment after the route (an id), ``data`` the parsed JSON body.

    async def _routes(self, arg: str | None, data: Any) -> tuple[int, Any]:
        served = service_routes(self.status_path, self.stop_endpoint)
        return 200, {"routes": CONTROL_ROUTES, "service_routes": served}

    async def _counters(self, arg: str | None, data: Any) -> tuple[int, Any]:
        return 200, {**self.counters.snapshot(), "faults": self.faults.counts}

    async def _list_faults(self, arg: str | None, data: Any) -> tuple[int, Any]:
        return 200, {"rules": self.faults.rules, "counts": self.faults.counts}

    async def _add_faults(self, arg: str | None, data: Any) -> tuple[int, Any]:
        items = data if isinstance(data, list) else [data]
        if not items or not all(isinstance(i, dict) for i in items):
            raise HTTPError(400, "Send a fault object or a list of them")
        try:
            added = [self.faults.add(FaultRule.from_dict(i)) for i in items]
        except (ValueError, TypeError) as exc:
            raise HTTPError(400, str(exc)) from None
        return 200, {"rules": added}

    async def _remove_faults(self, arg: str | None, data: Any) -> tuple[int, Any]:
        if arg is None:
            self.faults.clear()
            return 200, {"rules": []}
        try:
            self.faults.remove(int(arg or ""))
        except (KeyError, ValueError):
            raise HTTPError(404, f"No fault rule {arg}") from None
        return 200, {"removed": int(arg or "")}

    async def _executions(self, arg: str | None, data: Any) -> tuple[int, Any]:
        if arg is None:
            return 200, {"executions": [ex.snapshot() for ex in self.engine.executions.values()]}
        ex = self.engine.executions.get(arg)
        if ex is None:
            raise HTTPError(404, f"Execution {arg} not found")
        return 200, ex.snapshot()

    async def _webhooks(self, arg: str | None, data: Any) -> tuple[int, Any]:
        return 200, {"deliveries": self.sender.deliveries, "pending": self.sender.pending}

    async def _events(self, arg: str | None, data: Any) -> tuple[int, Any]:
        """The ``webhooks`` event stream of one execution, or of all that have one."""
        executions = self.engine.executions
        if arg is not None and arg not in executions:
            raise HTTPError(404, f"Execution {arg} not found")
        chosen = [executions[arg]] if arg is not None else list(executions.values())
        streams = {
            ex.kickoff_id: {
                "target": ex.events.target.describe() if ex.events else None,
                "events": list(ex.events.sent) if ex.events else [],
                "posts": ex.events.posts if ex.events else 0,
            }
            for ex in chosen
            if ex.events is not None or arg is not None
        }
        return 200, streams[arg] if arg is not None else {"executions": streams}

    async def _reset(self, arg: str | None, data: Any) -> tuple[int, Any]:
        await self.reset()
        return 200, {"reset": True}

    async def _crews(self, arg: str | None, data: Any) -> tuple[int, Any]:
        return 200, {"root": self.root_crew, "crews": [c.to_dict() for c in self.crews.values()]}

    async def _config(self, arg: str | None, data: Any) -> tuple[int, Any]:
        return 200, self.config()

    async def _set_config(self, arg: str | None, data: Any) -> tuple[int, Any]:
        if not isinstance(data, dict):
            raise HTTPError(400, "Send an object with status_path, stop_endpoint and/or speed")
        try:
            if "status_path" in data:
                self.status_path = data["status_path"]
            if "stop_endpoint" in data:
                self.stop_endpoint = data["stop_endpoint"]
            if "speed" in data:
                self.engine.speed = data["speed"]
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from None
        return 200, self.config()


_Handler = Callable[[ControlAPI, str | None, Any], Awaitable[tuple[int, Any]]]

# (method, route) -> handler; anything else answers 404.
_HANDLERS: dict[tuple[str, str], _Handler] = {
    ("GET", ""): ControlAPI._routes,
    ("GET", "counters"): ControlAPI._counters,
    ("GET", "faults"): ControlAPI._list_faults,
    ("POST", "faults"): ControlAPI._add_faults,
    ("DELETE", "faults"): ControlAPI._remove_faults,
    ("GET", "executions"): ControlAPI._executions,
    ("GET", "webhooks"): ControlAPI._webhooks,
    ("GET", "events"): ControlAPI._events,
    ("POST", "reset"): ControlAPI._reset,
    ("GET", "crews"): ControlAPI._crews,
    ("GET", "config"): ControlAPI._config,
    ("POST", "config"): ControlAPI._set_config,
}
