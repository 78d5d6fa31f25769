"""The HTTP face of the local crew service: a bare ASGI app (no framework).

A framework's per-request routing and validation cost more than this service's whole status
handler, and the service must serve thousands of polls per second on one core, so routing,
auth and JSON handling are written out here. Faults are applied before authentication, the way
a gateway in front of a real deployment would answer 429/503 without looking at the token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from .crews import CrewSpec
from .engine import Engine, HumanInputTarget, ResumeError
from .faults import ENDPOINTS, FaultRule, Faults, gzip_bomb_body, oversized_body
from .webhooks import WebhookSender

__all__ = ["STATUS_PATH_MODES", "Counters", "CrewServiceApp"]

log = logging.getLogger("airflow_provider_crew.testing")

STATUS_PATH_MODES = ("contract", "deployed", "both")
MAX_BODY = 1024 * 1024
WEBHOOK_FIELDS = {"taskWebhookUrl": "task", "stepWebhookUrl": "step", "crewWebhookUrl": "crew"}

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_JSON = b"application/json"
_TEXT = b"text/plain; charset=utf-8"
_HTML = b"text/html; charset=utf-8"
_HTML_500 = (
    b"<!DOCTYPE html>\n<html><head><title>500 Internal Server Error</title></head>\n"
    b"<body><h1>Internal Server Error</h1><p>The server encountered an internal error and was "
    b"unable to complete your request.</p><hr><address>nginx</address></body></html>\n"
)
# The ``html_200`` fault: a proxy's maintenance page, served with 200.
_HTML_200 = (
    b"<!DOCTYPE html>\n<html><head><title>Down for maintenance</title></head>\n"
    b"<body><h1>We'll be back soon</h1><p>This site is undergoing maintenance.</p></body></html>\n"
)
# The ``unknown_state`` fault: a status record with a state the contract does not know.
_UNKNOWN_STATE = b'{"state": "QUARANTINED", "status": "Quarantined by the gateway"}'
_REASONS = {422: "Validation Error"}


class HTTPError(Exception):
    """Raised by handlers to answer with the ``{"error", "message"}`` body."""

    def __init__(self, status: int, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details


class _Dropped(Exception):
    pass


def _reason(status: int) -> str:
    return _REASONS.get(status) or HTTPStatus(status).phrase


def _error_body(status: int, message: str, details: Mapping[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"error": _reason(status), "message": message}
    if details is not None:
        body["details"] = dict(details)
    return json.dumps(body).encode()


class Counters:
    """Requests per endpoint, answers per endpoint and status code, and token kinds used."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests: dict[str, int] = dict.fromkeys((*ENDPOINTS, "other"), 0)
        self.responses: dict[str, dict[str, int]] = {}
        self.auth: dict[str, int] = {"org": 0, "user": 0, "missing": 0, "invalid": 0}
        self.by_crew: dict[str, dict[str, int]] = {}
        self.status_paths: dict[str, int] = {"contract": 0, "deployed": 0}

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
        }


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


class CrewServiceApp:
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

    async def reset(self) -> None:
        """Forget executions, deliveries, counters and faults (the control API's reset)."""
        await self.engine.reset()
        await self.sender.cancel_pending()
        self.sender.reset()
        self.faults.reset()
        self.counters.reset()

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
            await self._drop(send)
            return
        rule = faults.take_response(endpoint, crew)
        if rule is not None and rule.kind in ("oversized", "gzip_bomb", "redirect"):
            await self._hostile_answer(scope, send, endpoint, rule)
            return
        if rule is not None:
            status, body, ctype, headers = self._fault_answer(rule)
            counters.response(endpoint, status)
            await self._send(send, status, body, ctype, headers)
            return
        try:
            status, body, ctype, headers = await self._handle(
                scope, receive, crew, endpoint, kickoff_id, style
            )
        except HTTPError as exc:
            status, body, ctype = exc.status, _error_body(exc.status, exc.message, exc.details), _JSON
            headers = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
        except _Dropped:
            return  # the client went away mid-request
        except Exception as exc:  # answer 500 the documented way and keep serving
            log.exception("local crew service: error handling %s %s", scope["method"], path)
            status, body, ctype, headers = 500, _error_body(500, f"{type(exc).__name__}: {exc}"), _JSON, []
        if faults.take("drop_after", endpoint, crew):
            counters.response(endpoint, "dropped")
            await self._drop(send)
            return
        if faults.take("truncated_json", endpoint, crew):
            body = body[: len(body) // 2]
        if faults.take("wrong_content_type", endpoint, crew):
            ctype = _HTML
        counters.response(endpoint, status)
        trickle = faults.take("trickle", endpoint, crew)
        if trickle is not None:
            await self._send_trickled(send, status, body, ctype, headers, trickle.seconds)
            return
        await self._send(send, status, body, ctype, headers)

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
        allowed = "POST" if endpoint in ("kickoff", "resume") else "GET"
        if method != allowed and not (method == "HEAD" and allowed == "GET"):
            return (
                405,
                _error_body(405, f"Use {allowed} for this path"),
                _JSON,
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
            return 200, body, _JSON, []
        if endpoint == "health":
            return 200, b"Healthy", _TEXT, []
        if endpoint == "inputs":
            return 200, json.dumps({"inputs": crew.input_names}).encode(), _JSON, []
        raw = await self._read_body(receive)
        data = _json_object(raw, self._header(scope, b"content-type"))
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
        missing = crew.missing_inputs(inputs or {})
        if missing:
            raise HTTPError(422, "Missing required inputs", {"missing_inputs": missing})
        ex = self.engine.kickoff(
            crew, inputs or {}, meta=meta, webhooks=webhooks, human_input=human, token_kind=token_kind
        )
        return 200, json.dumps({"kickoff_id": ex.kickoff_id}).encode(), _JSON, []

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
        try:
            status, message = self.engine.resume(
                data["execution_id"], data["task_id"], data["human_feedback"], data["is_approve"], webhooks
            )
        except ResumeError as exc:
            raise HTTPError(exc.status_code, exc.message) from None
        return 200, json.dumps({"status": status, "message": message}).encode(), _JSON, []

    # ---------------------------------------------------------------------------------------------
    # Control API (tests steer a separately running service through it)

    async def _control(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, payload = await self._control_answer(scope, receive)
            body = json.dumps(payload, default=str).encode()
        except HTTPError as exc:
            status, body = exc.status, _error_body(exc.status, exc.message, exc.details)
        except _Dropped:
            return
        except Exception as exc:
            log.exception("local crew service: control API error")
            status, body = 500, _error_body(500, f"{type(exc).__name__}: {exc}")
        await self._send(send, status, body, _JSON, [])

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
            raw = await self._read_body(receive)
            if raw.strip():
                try:
                    data = json.loads(raw)
                except ValueError as exc:
                    raise HTTPError(400, f"Malformed JSON body: {exc}") from None
        if route == "" and method == "GET":
            return 200, {"routes": CONTROL_ROUTES}
        if route == "counters" and method == "GET":
            return 200, {**self.counters.snapshot(), "faults": self.faults.counts}
        if route == "faults":
            if method == "GET":
                return 200, {"rules": self.faults.rules, "counts": self.faults.counts}
            if method == "POST":
                items = data if isinstance(data, list) else [data]
                if not items or not all(isinstance(i, dict) for i in items):
                    raise HTTPError(400, "Send a fault object or a list of them")
                try:
                    added = [self.faults.add(FaultRule.from_dict(i)) for i in items]
                except (ValueError, TypeError) as exc:
                    raise HTTPError(400, str(exc)) from None
                return 200, {"rules": added}
            if method == "DELETE" and arg is None:
                self.faults.clear()
                return 200, {"rules": []}
            if method == "DELETE":
                try:
                    self.faults.remove(int(arg or ""))
                except (KeyError, ValueError):
                    raise HTTPError(404, f"No fault rule {arg}") from None
                return 200, {"removed": int(arg or "")}
        if route == "executions" and method == "GET":
            if arg is None:
                return 200, {"executions": [ex.snapshot() for ex in self.engine.executions.values()]}
            ex = self.engine.executions.get(arg)
            if ex is None:
                raise HTTPError(404, f"Execution {arg} not found")
            return 200, ex.snapshot()
        if route == "webhooks" and method == "GET":
            return 200, {"deliveries": self.sender.deliveries, "pending": self.sender.pending}
        if route == "reset" and method == "POST":
            await self.reset()
            return 200, {"reset": True}
        if route == "crews" and method == "GET":
            return 200, {"root": self.root_crew, "crews": [c.to_dict() for c in self.crews.values()]}
        if route == "config":
            if method == "POST":
                if not isinstance(data, dict):
                    raise HTTPError(400, "Send an object with status_path and/or speed")
                try:
                    if "status_path" in data:
                        self.status_path = data["status_path"]
                    if "speed" in data:
                        self.engine.speed = data["speed"]
                except ValueError as exc:
                    raise HTTPError(400, str(exc)) from None
            if method in ("GET", "POST"):
                return 200, self.config()
        raise HTTPError(404, f"No control route for {method} {scope['path']}")

    def config(self) -> dict[str, Any]:
        return {
            "status_path": self._status_path,
            "speed": self.engine.speed,
            "root_crew": self.root_crew,
            "crews": list(self.crews),
        }

    # ---------------------------------------------------------------------------------------------
    # Plumbing

    @staticmethod
    def _header(scope: Scope, name: bytes) -> str | None:
        for key, value in scope["headers"]:
            if key == name:
                return value.decode("latin-1")
        return None

    @staticmethod
    async def _read_body(receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Dropped()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                raise HTTPError(400, f"Request body larger than {MAX_BODY} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _fault_answer(rule: FaultRule) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
        if rule.kind == "html_500":
            return 500, _HTML_500, _HTML, []
        if rule.kind == "html_200":
            return 200, _HTML_200, _HTML, []
        if rule.kind == "unknown_state":
            return 200, _UNKNOWN_STATE, _JSON, []
        headers: list[tuple[bytes, bytes]] = []
        wait = ""
        if rule.retry_after is not None:
            # Whole seconds, as RFC 9110 says; fractions only when a test asks for them.
            value = rule.retry_after
            text = str(int(value)) if float(value).is_integer() else str(value)
            headers.append((b"retry-after", text.encode()))
            wait = f"; retry after {text} s"
        messages = {
            429: "Rate limit exceeded",
            503: "The crew service is temporarily unavailable",
        }
        message = messages.get(rule.status, f"Injected {rule.status} fault") + wait
        return rule.status, _error_body(rule.status, message), _JSON, headers

    @staticmethod
    async def _send(
        send: Send, status: int, body: bytes, ctype: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), *headers],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _hostile_answer(self, scope: Scope, send: Send, endpoint: str, rule: FaultRule) -> None:
        """Answer with an oversized body, a gzip bomb or a redirect, without acting on the request."""
        if rule.kind == "redirect":
            assert rule.location is not None
            target = rule.location.rstrip("/") + scope["path"]
            self.counters.response(endpoint, rule.status)
            body = _error_body(rule.status, f"Moved to {target}")
            await self._send(send, rule.status, body, _JSON, [(b"location", target.encode())])
            return
        self.counters.response(endpoint, 200)
        length = rule.size
        headers: list[tuple[bytes, bytes]] = [(b"content-type", _JSON)]
        if rule.kind == "gzip_bomb":
            # Built once per size, off the loop: the service keeps answering meanwhile.
            packed = await asyncio.to_thread(gzip_bomb_body, rule.size)
            pieces: Iterable[bytes] = (packed[i : i + 65536] for i in range(0, len(packed), 65536))
            length = len(packed)
            headers.append((b"content-encoding", b"gzip"))
        else:
            pieces = oversized_body(rule.size)
        headers.append((b"content-length", str(length).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            if _client_gone(send):
                return
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _send_trickled(
        send: Send,
        status: int,
        body: bytes,
        ctype: bytes,
        headers: list[tuple[bytes, bytes]],
        seconds: float,
    ) -> None:
        """The real answer, one byte every ``seconds`` (a proxy or service stuck mid-answer)."""
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(body)).encode()), *headers],
            }
        )
        for index in range(len(body)):
            await send({"type": "http.response.body", "body": body[index : index + 1], "more_body": True})
            await asyncio.sleep(seconds)
            if _client_gone(send):
                return
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _drop(send: Send) -> None:
        """Reset the TCP connection without answering.

        ASGI has no "abort"; uvicorn's ``send`` is a bound method of its request cycle, which holds
        the transport. SO_LINGER 0 makes close() send RST, so the client sees a reset, not a reply.
        """
        cycle = getattr(send, "__self__", None)
        transport = getattr(cycle, "transport", None)
        if transport is None:
            raise RuntimeError("dropping a connection needs uvicorn (no transport found)")
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # A plain close (if SO_LINGER is refused) still leaves the client without a response.
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        # Let connection_lost run so uvicorn knows the client is gone and does not answer 500.
        for _ in range(20):
            if getattr(cycle, "disconnected", True):
                break
            await asyncio.sleep(0)


def _client_gone(send: Send) -> bool:
    """Whether uvicorn saw the client hang up (so a long answer can stop being sent)."""
    return bool(getattr(getattr(send, "__self__", None), "disconnected", False))


CONTROL_ROUTES = [
    "GET /_control/counters",
    "GET /_control/faults",
    "POST /_control/faults",
    "DELETE /_control/faults",
    "DELETE /_control/faults/{id}",
    "GET /_control/executions",
    "GET /_control/executions/{kickoff_id}",
    "GET /_control/webhooks",
    "POST /_control/reset",
    "GET /_control/crews",
    "GET /_control/config",
    "POST /_control/config",
]
