"""The HTTP face of the local crew service: a bare ASGI app (no framework).

A framework's per-request routing and validation cost more than this service's whole status
handler, and the service must serve thousands of polls per second on one core, so routing,
auth and JSON handling are written out here (and in :mod:`.asgi`). Faults are applied before
authentication, the way a gateway in front of a real deployment would answer 429/503 without
looking at the token; their answers are in :mod:`.fault_answers`, the ``/_control`` routes in
:mod:`.control`. ``POST /stop/{kickoff_id}`` can be switched off (``stop_endpoint``) to play an
older or third-party service: "absent" answers it as an unknown path, "405" as a refused method.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from .asgi import (
    HTML,
    JSON,
    TEXT,
    Dropped,
    HTTPError,
    Receive,
    Scope,
    Send,
    error_body,
    header,
    read_body,
    send_answer,
)
from .control import ControlAPI
from .counters import Counters
from .crew_spec import CrewSpec
from .engine import Engine, ResumeError, StopError
from .event_stream import EventTarget, parse_event_target
from .execution import HumanInputTarget
from .fault_answers import drop_connection, fault_answer, send_hostile_answer, send_trickled
from .faults import Faults
from .webhooks import WebhookSender

__all__ = ["STATUS_PATH_MODES", "STOP_ENDPOINT_MODES", "Counters", "CrewServiceApp"]

log = logging.getLogger("airflow_provider_crew.testing")

STATUS_PATH_MODES = ("contract", "deployed", "both")
# "enabled": POST /stop/{id} stops executions; "absent": it is an unknown path (404, as for any
# other); "405": it answers 405 Method Not Allowed (empty Allow: the resource allows no method).
STOP_ENDPOINT_MODES = ("enabled", "absent", "405")
WEBHOOK_FIELDS = {"taskWebhookUrl": "task", "stepWebhookUrl": "step", "crewWebhookUrl": "crew"}


def _check_url(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise HTTPError(400, f"Field '{field}' must be a string URL")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value):
        raise HTTPError(400, f"Field '{field}' must be an absolute http(s) URL, got {value!r}")
    return value


def _webhook_urls(body: Mapping[str, Any]) -> dict[str, str | None]:
    urls: dict[str, str | None] = {}
    for field, kind in WEBHOOK_FIELDS.items():
        value = body.get(field)
        urls[kind] = None if value is None else _check_url(value, field)
    return urls


def _event_target(body: Mapping[str, Any]) -> EventTarget | None:
    """The ``webhooks`` object (the event stream) of a kickoff or resume body."""
    try:
        return parse_event_target(body.get("webhooks"))
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None


def _human_input_target(value: Any) -> HumanInputTarget | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HTTPError(400, "Field 'humanInputWebhook' must be an object")
    url = _check_url(value.get("url"), "humanInputWebhook.url")
    auth = value.get("authentication")
    if auth is None:
        return HumanInputTarget(url)
    if not isinstance(auth, dict):
        raise HTTPError(400, "Field 'humanInputWebhook.authentication' must be an object")
    strategy = auth.get("strategy")
    token, username, password = auth.get("token"), auth.get("username"), auth.get("password")
    if strategy == "bearer":
        if not isinstance(token, str) or not token:
            raise HTTPError(
                400, "humanInputWebhook.authentication: strategy 'bearer' needs a non-empty 'token'"
            )
        if username is not None or password is not None:
            raise HTTPError(
                400,
                "humanInputWebhook.authentication: strategy 'bearer' takes a token, not username/password",
            )
        return HumanInputTarget(url, "bearer", token=token)
    if strategy == "basic":
        if not isinstance(username, str) or not username or not isinstance(password, str):
            raise HTTPError(
                400, "humanInputWebhook.authentication: strategy 'basic' needs 'username' and 'password'"
            )
        if token is not None:
            raise HTTPError(
                400, "humanInputWebhook.authentication: strategy 'basic' takes username/password, not a token"
            )
        return HumanInputTarget(url, "basic", username=username, password=password)
    raise HTTPError(
        400, f"humanInputWebhook.authentication.strategy must be 'bearer' or 'basic', got {strategy!r}"
    )


def _json_object(raw: bytes, content_type: str | None) -> dict[str, Any]:
    if content_type is None or "json" not in content_type.lower():
        raise HTTPError(400, "Content-Type must be application/json")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, f"Malformed JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "Request body must be a JSON object")
    return data


class CrewServiceApp(ControlAPI):
    """ASGI application serving one or more crews (the first is also at the root path)."""

    def __init__(
        self,
        crews: Iterable[CrewSpec],
        *,
        org_token: str,
        user_token: str,
        status_path: str = "both",
        speed: float = 1.0,
        faults: Faults | None = None,
        webhook_timeout: float = 5.0,
        stop_endpoint: str = "enabled",
    ) -> None:
        crew_list = list(crews)
        if not crew_list:
            raise ValueError("at least one crew is needed")
        self.crews: dict[str, CrewSpec] = {}
        for crew in crew_list:
            if crew.name in self.crews:
                raise ValueError(f"two crews are named {crew.name!r}")
            self.crews[crew.name] = crew
        self.root_crew = crew_list[0].name
        if not org_token or not user_token or org_token == user_token:
            raise ValueError("the organization and user tokens must be non-empty and different")
        self.org_token = org_token
        self.user_token = user_token
        self._org = org_token.encode()
        self._user = user_token.encode()
        self.status_path = status_path
        self.stop_endpoint = stop_endpoint
        self.faults = faults if faults is not None else Faults()
        for crew in crew_list:
            for rule in crew.faults:
                self.faults.add({**rule, "crew": crew.name})
        self.sender = WebhookSender(timeout=webhook_timeout)
        self.engine = Engine(self.sender, self.faults, speed=speed)
        self.counters = Counters()

    @property
    def status_path(self) -> str:
        return self._status_path

    @status_path.setter
    def status_path(self, mode: str) -> None:
        if mode not in STATUS_PATH_MODES:
            raise ValueError(f"status_path must be one of {', '.join(STATUS_PATH_MODES)}, got {mode!r}")
        self._status_path = mode

    @property
    def stop_endpoint(self) -> str:
        return self._stop_endpoint

    @stop_endpoint.setter
    def stop_endpoint(self, mode: str) -> None:
        if mode not in STOP_ENDPOINT_MODES:
            raise ValueError(f"stop_endpoint must be one of {', '.join(STOP_ENDPOINT_MODES)}, got {mode!r}")
        self._stop_endpoint = mode

    # ---------------------------------------------------------------------------------------------
    # ASGI entry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        await self.sender.start()

    async def shutdown(self) -> None:
        await self.engine.cancel_all()
        await self.sender.close()

    # ---------------------------------------------------------------------------------------------
    # Routing

    def _route(self, path: str) -> tuple[str | None, str, str | None, str | None]:
        """Map a path to ``(crew, endpoint, kickoff_id, status_style)``; crew None = unknown crew."""
        crew: str | None = self.root_crew
        if path.startswith("/crews/"):
            _, _, name, *rest = path.split("/", 3)
            crew = name if name in self.crews else None
            path = "/" + (rest[0] if rest else "")
        if path == "/":
            return crew, "health", None, None
        parts = path.strip("/").split("/")
        if len(parts) == 1:
            if parts[0] in ("inputs", "kickoff", "resume"):
                return crew, parts[0], None, None
        elif len(parts) == 2:
            if parts[0] == "status" and parts[1]:
                return crew, "status", parts[1], "deployed"
            if parts[0] == "stop" and parts[1] and self._stop_endpoint != "absent":
                return crew, "stop", parts[1], None
            if parts[1] == "status" and parts[0]:
                return crew, "status", parts[0], "contract"
        return crew, "other", None, None

    def _token_kind(self, scope: Scope) -> str:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() != b"bearer" or not token:
                    return "invalid"
                token = token.strip()
                if hmac.compare_digest(token, self._org):
                    return "org"
                if hmac.compare_digest(token, self._user):
                    return "user"
                return "invalid"
        return "missing"

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path == "/_control" or path.startswith("/_control/"):
            await self._control(scope, receive, send)
            return
        crew, endpoint, kickoff_id, style = self._route(path)
        counters = self.counters
        counters.request(endpoint, crew)
        faults = self.faults
        delay = faults.delay_for(endpoint, crew)
        if delay:
            await asyncio.sleep(delay)
        if faults.take("drop_before", endpoint, crew):
            counters.response(endpoint, "dropped")
            await drop_connection(send)
            return
        rule = faults.take_response(endpoint, crew)
        if rule is not None and rule.kind in ("oversized", "gzip_bomb", "redirect"):
            await send_hostile_answer(scope, send, endpoint, rule, counters)
            return
        if rule is not None:
            status, body, ctype, headers = fault_answer(rule)
            counters.response(endpoint, status)
            await send_answer(send, status, body, ctype, headers)
            return
        try:
            status, body, ctype, headers = await self._handle(
                scope, receive, crew, endpoint, kickoff_id, style
            )
        except HTTPError as exc:
            status, body, ctype = exc.status, error_body(exc.status, exc.message, exc.details), JSON
            headers = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
        except Dropped:
            return  # the client went away mid-request
        except Exception as exc:  # answer 500 the documented way and keep serving
            log.exception("local crew service: error handling %s %s", scope["method"], path)
            status, body, ctype, headers = 500, error_body(500, f"{type(exc).__name__}: {exc}"), JSON, []
        if faults.take("drop_after", endpoint, crew):
            counters.response(endpoint, "dropped")
            await drop_connection(send)
            return
        gateway = faults.take("gateway", endpoint, crew)
        if gateway is not None:  # acted on; the gateway in front answers on its own instead
            status, body, ctype, headers = fault_answer(gateway)
            counters.response(endpoint, status)
            await send_answer(send, status, body, ctype, headers)
            return
        if faults.take("truncated_json", endpoint, crew):
            body = body[: len(body) // 2]
        if faults.take("wrong_content_type", endpoint, crew):
            ctype = HTML
        counters.response(endpoint, status)
        trickle = faults.take("trickle", endpoint, crew)
        if trickle is not None:
            await send_trickled(send, status, body, ctype, headers, trickle.seconds)
            return
        await send_answer(send, status, body, ctype, headers)

    async def _handle(
        self,
        scope: Scope,
        receive: Receive,
        crew_name: str | None,
        endpoint: str,
        kickoff_id: str | None,
        style: str | None,
    ) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
        token_kind = self._token_kind(scope)
        self.counters.auth[token_kind] += 1
        if token_kind in ("missing", "invalid"):
            raise HTTPError(401, "Invalid or missing bearer token")
        if crew_name is None:
            raise HTTPError(404, f"Unknown crew in path {scope['path']}")
        crew = self.crews[crew_name]
        method = scope["method"]
        if endpoint == "other":
            raise HTTPError(404, f"No route for {method} {scope['path']}")
        if endpoint == "stop" and self._stop_endpoint == "405":
            message = f"Method {method} not allowed for {scope['path']}"
            return 405, error_body(405, message), JSON, [(b"allow", b"")]
        allowed = "POST" if endpoint in ("kickoff", "resume", "stop") else "GET"
        if method != allowed and not (method == "HEAD" and allowed == "GET"):
            return (
                405,
                error_body(405, f"Use {allowed} for this path"),
                JSON,
                [(b"allow", allowed.encode())],
            )
        if endpoint == "status":
            assert kickoff_id is not None and style is not None
            self.counters.status_paths[style] += 1
            if self._status_path not in ("both", style):
                raise HTTPError(404, f"No route for {method} {scope['path']}")
            body = self.engine.poll(kickoff_id)
            if body is None:
                raise HTTPError(404, f"Execution {kickoff_id} not found")
            return 200, body, JSON, []
        if endpoint == "health":
            return 200, b"Healthy", TEXT, []
        if endpoint == "inputs":
            return 200, json.dumps({"inputs": crew.input_names}).encode(), JSON, []
        if endpoint == "stop":
            assert kickoff_id is not None
            return self._stop(kickoff_id)
        raw = await read_body(receive)
        data = _json_object(raw, header(scope, b"content-type"))
        if endpoint == "kickoff":
            return self._kickoff(crew, data, token_kind)
        return self._resume(data)

    def _kickoff(
        self, crew: CrewSpec, data: dict[str, Any], token_kind: str
    ) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
        inputs = data.get("inputs")
        if "inputs" in data and not isinstance(inputs, dict):
            raise HTTPError(400, "Field 'inputs' must be an object")
        meta = data.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise HTTPError(400, "Field 'meta' must be an object")
        webhooks = _webhook_urls(data)
        human = _human_input_target(data.get("humanInputWebhook"))
        events = _event_target(data)
        missing = crew.missing_inputs(inputs or {})
        if missing:
            raise HTTPError(422, "Missing required inputs", {"missing_inputs": missing})
        ex = self.engine.kickoff(
            crew,
            inputs or {},
            meta=meta,
            webhooks=webhooks,
            human_input=human,
            token_kind=token_kind,
            event_target=events,
        )
        return 200, json.dumps({"kickoff_id": ex.kickoff_id}).encode(), JSON, []

    def _resume(self, data: dict[str, Any]) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
        required = {"execution_id": str, "task_id": str, "human_feedback": str, "is_approve": bool}
        missing = [name for name in required if data.get(name) is None]
        if missing:
            raise HTTPError(400, f"Missing required fields: {', '.join(missing)}")
        for name, typ in required.items():
            if not isinstance(data[name], typ):
                kind = "a boolean (true or false)" if typ is bool else "a string"
                raise HTTPError(400, f"Field '{name}' must be {kind}")
        webhooks = _webhook_urls(data)
        events = _event_target(data)
        try:
            status, message = self.engine.resume(
                data["execution_id"],
                data["task_id"],
                data["human_feedback"],
                data["is_approve"],
                webhooks,
                event_target=events,
            )
        except ResumeError as exc:
            raise HTTPError(exc.status_code, exc.message) from None
        return 200, json.dumps({"status": status, "message": message}).encode(), JSON, []

    def _stop(self, kickoff_id: str) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
        """The hosted service's answers: 200 stopped, 400 ``{"detail"}`` when finished, 404 unknown."""
        try:
            ex = self.engine.stop(kickoff_id)
        except StopError as exc:
            if exc.status_code == 400:  # in the hosted service's shape, word for word
                return 400, json.dumps({"detail": exc.message}).encode(), JSON, []
            raise HTTPError(exc.status_code, exc.message) from None
        self.counters.stops.append(ex.kickoff_id)
        return 200, json.dumps({"status": "stopped", "kickoffId": ex.kickoff_id}).encode(), JSON, []
