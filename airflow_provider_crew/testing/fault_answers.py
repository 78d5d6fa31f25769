"""How the service answers when a fault fires (the kinds are described in :mod:`.faults`).

Answers that replace the real one (an error, an HTML page, an unknown state, a gateway's own
answer, a hostile body or a redirect), the real answer trickled byte by byte, and a connection
reset instead of any answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Iterable

from .asgi import HTML, JSON, Scope, Send, error_body, send_answer
from .counters import Counters
from .faults import FaultRule
from .hostile_bodies import gzip_bomb_body, oversized_body

__all__ = ["drop_connection", "fault_answer", "send_hostile_answer", "send_trickled"]

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
# The ``gateway`` fault: what Envoy (Istio, cloud load balancers alike) answers on its own, as
# text/plain and without Retry-After. Keyed by (status, after): after = the request was forwarded.
_ENVOY_RESET = "upstream connect error or disconnect/reset before headers. reset reason: "
_GATEWAY_BODIES = {
    (502, True): _ENVOY_RESET + "protocol error",
    (502, False): _ENVOY_RESET + "connection failure",
    (503, True): _ENVOY_RESET + "connection termination",
    (503, False): "no healthy upstream",
    (504, True): "upstream request timeout",
    (504, False): _ENVOY_RESET + "connection timeout",
}
_GATEWAY_TEXT = b"text/plain"


def fault_answer(rule: FaultRule) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
    """The answer of an ``error``, ``html_500``, ``html_200``, ``unknown_state`` or ``gateway`` rule."""
    if rule.kind == "gateway":
        body = _GATEWAY_BODIES[(rule.status, rule.after)].encode()
        return rule.status, body, _GATEWAY_TEXT, [(b"server", b"envoy")]
    if rule.kind == "html_500":
        return 500, _HTML_500, HTML, []
    if rule.kind == "html_200":
        return 200, _HTML_200, HTML, []
    if rule.kind == "unknown_state":
        return 200, _UNKNOWN_STATE, JSON, []
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
    return rule.status, error_body(rule.status, message), JSON, headers


async def send_hostile_answer(
    scope: Scope, send: Send, endpoint: str, rule: FaultRule, counters: Counters
) -> None:
    """Answer with an oversized body, a gzip bomb or a redirect, without acting on the request."""
    if rule.kind == "redirect":
        assert rule.location is not None
        target = rule.location.rstrip("/") + scope["path"]
        counters.response(endpoint, rule.status)
        body = error_body(rule.status, f"Moved to {target}")
        await send_answer(send, rule.status, body, JSON, [(b"location", target.encode())])
        return
    counters.response(endpoint, 200)
    length = rule.size
    headers: list[tuple[bytes, bytes]] = [(b"content-type", JSON)]
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


async def send_trickled(
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


async def drop_connection(send: Send) -> None:
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
