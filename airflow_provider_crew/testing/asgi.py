"""ASGI plumbing shared by the service's app, its control API and its fault answers.

Written out by hand, without a framework (see :mod:`.app` for why): reading a bounded request body,
sending an answer, and the ``{"error", "message"}`` error body.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any

__all__ = [
    "HTML",
    "JSON",
    "MAX_BODY",
    "TEXT",
    "Dropped",
    "HTTPError",
    "Receive",
    "Scope",
    "Send",
    "error_body",
    "header",
    "read_body",
    "send_answer",
]

MAX_BODY = 1024 * 1024

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"
HTML = b"text/html; charset=utf-8"
_REASONS = {422: "Validation Error"}


class HTTPError(Exception):
    """Raised by handlers to answer with the ``{"error", "message"}`` body."""

    def __init__(self, status: int, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details


class Dropped(Exception):
    """The client went away mid-request: there is no one to answer."""


def _reason(status: int) -> str:
    return _REASONS.get(status) or HTTPStatus(status).phrase


def error_body(status: int, message: str, details: Mapping[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"error": _reason(status), "message": message}
    if details is not None:
        body["details"] = dict(details)
    return json.dumps(body).encode()


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Dropped()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise HTTPError(400, f"Request body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_answer(
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
