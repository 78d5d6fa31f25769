"""One attempt of a request under its :class:`Limits`: sync (``requests``) or async (``aiohttp``).

A task's calls go through :class:`SyncTransport`, a trigger's through :class:`AsyncTransport`; each follows
only the redirects :func:`redirect_target` allows, and :mod:`.retry` decides what comes next.

Both hold an answer to the same :class:`Limits`, so a hostile service costs one request, never the
triggerer that reads every DAG's waits (docs/reliability.md, "Hostile or broken services"). The HTTP
libraries inflate gzip and deflate a bounded piece per read (urllib3 2.7 and aiohttp 3.13.3, the fixes
for CVE-2025-66471, CVE-2026-44432 and CVE-2025-69223); :class:`BodyCap` counts the inflated bytes, so
a gzip bomb costs at most the cap plus one piece.
"""

from __future__ import annotations

import asyncio
import http.client
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from airflow_provider_crew.connection_form import CONN_FIELDS, HOST_LABEL
from airflow_provider_crew.exceptions import CrewRedirectError, CrewResponseTooLargeError
from airflow_provider_crew.hooks.client.request import ACCEPT_ENCODING, Call, explain, setting, unreadable
from airflow_provider_crew.hooks.client.response import Came, Response, TransportFailure
from airflow_provider_crew.urls import DEFAULT_PORTS

if TYPE_CHECKING:  # imported where used: a task needs only requests, a trigger only aiohttp
    import aiohttp
    import requests

# Largest piece read (and inflated) at once: a gzip bomb grows memory by at most the cap plus this.
READ_CHUNK = 64 * 1024
# What both libraries decode. Not "x-gzip": aiohttp passes it on undecoded, and it was not asked for.
_DECODED = frozenset({"", "identity", "gzip", "deflate"})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
# What OpenSSL says of a handshake it refused: a certificate or host name not verified, a peer that
# does not speak TLS, or no protocol both ends share.
TLS_HANDSHAKE_REFUSALS = (
    "certificate verify failed",
    "wrong version number",
    "handshake failure",
    "unsupported protocol",
    "alert protocol version",
)


@dataclass(slots=True)
class Limits:
    """What one attempt may cost: time (seconds) and body size (bytes, after decompression)."""

    connect_timeout: float
    read_timeout: float
    total: float
    max_bytes: int
    verify_tls: bool = True


def over_time(limits: Limits) -> TransportFailure:
    """The failure of an attempt that ran past its total time bound."""
    return TransportFailure(Came.LOST, f"no complete answer within {limits.total:.3g} s")


def failed(limits: Limits, started: float, came: Came, reason: str) -> TransportFailure:
    """The failure of an attempt the library gave up on: at the end of the time bound, the bound's."""
    if time.monotonic() - started >= limits.total * 0.99:
        return over_time(limits)
    return TransportFailure(came, reason)


# -- which redirects are followed, and how much of a body is read --------------------------------------


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme)


def redirect_target(call: Call, current_url: str, status_code: int, location: str | None, hops: int) -> str:
    """The URL to follow a redirect to: only a GET's, only to the same scheme, host and port;
    :class:`CrewRedirectError` (saying why) when the rule forbids it (docs/reliability.md)."""
    target = urljoin(current_url, location) if location else None
    if target is None:
        problem = "a redirect without a Location"
    elif _origin(target) != _origin(current_url):
        problem = "a redirect to another origin ({}://{}:{})".format(*_origin(target))
    elif not call.idempotent:
        problem = f"a redirect of a {call.method}"
    elif hops >= MAX_REDIRECTS:
        problem = f"more than {MAX_REDIRECTS} redirects"
    else:
        return target
    raise CrewRedirectError(
        explain(
            call,
            f"{call.endpoint} answered {status_code}, {problem}, which the provider does not follow: "
            "it follows only a GET to the same scheme, host and port, so the bearer token never "
            "reaches another host and a kickoff or resume is never sent to a second place. Set "
            f"{setting(call, f'{HOST_LABEL!r} (the host)')} to the address the service answers at.",
            acted_on=False,
        ),
        endpoint=call.endpoint,
        status_code=status_code,
    )


def describe_size(size: int) -> str:
    """``33554432`` -> ``"32 MiB"``; exact bytes when not a round number of KiB/MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def response_too_large(call: Call, limit: int) -> CrewResponseTooLargeError:
    """The error for an answer whose body is over the cap."""
    cap = f"{CONN_FIELDS['max_response_bytes']['label']!r} (extra 'max_response_bytes')"
    return CrewResponseTooLargeError(
        explain(
            call,
            f"{call.endpoint} answered with a body over {describe_size(limit)} (counted after "
            "decompression). Reading stopped at that cap and the request was not repeated: a repeat "
            "would read the same body. If the crew's answers really are this large, raise "
            f"{setting(call, cap)}, now {limit}.",
        ),
        endpoint=call.endpoint,
        limit=limit,
    )


class BodyCap:
    """Collects one answer's body as the HTTP library decoded it, and stops at the cap."""

    __slots__ = ("_call", "_max_bytes", "_parts", "_size")

    def __init__(self, call: Call, status_code: int, headers: Mapping[str, str], max_bytes: int) -> None:
        self._call = call
        self._max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        encoding = (headers.get("Content-Encoding") or "").strip().lower()
        if encoding not in _DECODED:  # the libraries would pass it on undecoded, or decode brotli
            asked = (
                f"Content-Encoding {encoding!r}, which was not asked for (Accept-Encoding: {ACCEPT_ENCODING})"
            )
            raise unreadable(call, status_code, asked)
        # An honest Content-Length over the cap fails before a byte of the body is read.
        declared = headers.get("Content-Length", "").strip()
        if encoding in ("", "identity") and declared.isdigit() and int(declared) > max_bytes:
            raise response_too_large(call, max_bytes)

    def feed(self, data: bytes) -> None:
        """Add a decoded piece of the body; raises once over the cap."""
        self._size += len(data)
        if self._size > self._max_bytes:
            self._parts.clear()
            raise response_too_large(self._call, self._max_bytes)
        self._parts.append(data)

    def finish(self) -> bytes:
        """The whole body, decoded."""
        return b"".join(self._parts)


# -- sync: requests -------------------------------------------------------------------------------------


def classify_requests_error(error: requests.RequestException) -> Came:
    """How far a request got when ``requests`` raised ``error``."""
    import requests
    import urllib3.exceptions

    if isinstance(error, requests.exceptions.SSLError):
        # A refusal in the handshake: nothing was sent, and a repeat meets it again. urllib3 raises any
        # other TLS failure the same way, also one in the answer to a request already sent.
        text = str(error).lower()
        return Came.REFUSED if any(refusal in text for refusal in TLS_HANDSHAKE_REFUSALS) else Came.LOST
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return Came.NOTHING
    if isinstance(error, requests.exceptions.ConnectionError):
        # urllib3 wraps "could not connect" (refused, DNS) as NewConnectionError, or in the reason.
        inner = error.args[0] if error.args else None
        connecting = isinstance(getattr(inner, "reason", inner), urllib3.exceptions.NewConnectionError)
        return Came.NOTHING if connecting else Came.LOST
    if isinstance(error, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema)):
        return Came.REFUSED
    return Came.LOST


def describe_requests_error(error: BaseException) -> str:
    """A short reason without urllib3's nested reprs (which repeat the URL several times)."""
    inner: Any = error.args[0] if error.args else error
    reason = getattr(inner, "reason", inner)
    text = str(reason)
    text = text.split(": ", 1)[-1] if "object at 0x" in text else text
    return f"{type(error).__name__}: {text}"


@dataclass(slots=True)
class SyncTransport:
    """Sends attempts with ``requests`` (one session, so connections are reused)."""

    session: requests.Session

    def send(self, call: Call, limits: Limits) -> Response | TransportFailure:
        """One attempt of ``call``, following allowed redirects, read whole under ``limits``."""
        import requests

        started = time.monotonic()
        url = call.url
        for hops in range(MAX_REDIRECTS + 1):
            left = limits.total - (time.monotonic() - started)
            if left <= 0:
                return over_time(limits)
            try:
                raw = self.session.request(
                    call.method,
                    url,
                    headers=call.headers,
                    json=call.body,
                    timeout=(min(limits.connect_timeout, left), min(limits.read_timeout, left)),
                    verify=limits.verify_tls,
                    stream=True,
                    allow_redirects=False,
                )
            except requests.RequestException as error:
                return TransportFailure(classify_requests_error(error), describe_requests_error(error))
            if raw.status_code in REDIRECT_STATUSES:
                raw.close()
                url = redirect_target(call, url, raw.status_code, raw.headers.get("Location"), hops)
                continue
            return self._read(raw, call, limits, started)
        raise AssertionError("unreachable")  # pragma: no cover - redirect_target stops the loop

    @staticmethod
    def _read(
        raw: requests.Response, call: Call, limits: Limits, started: float
    ) -> Response | TransportFailure:
        import urllib3.exceptions

        complete = False
        try:
            body = BodyCap(call, raw.status_code, raw.headers, limits.max_bytes)
            # read1: one recv at most per read, each under the request's read time-out, and the total
            # bound checked between reads, so a body that trickles in ends within one read time-out
            # of the bound. urllib3 decodes gzip and deflate, at most READ_CHUNK bytes per read.
            while chunk := raw.raw.read1(READ_CHUNK, decode_content=True):
                body.feed(chunk)
                if time.monotonic() - started > limits.total:
                    return over_time(limits)
            complete = True
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as error:
            return failed(limits, started, Came.LOST, describe_requests_error(error))
        finally:
            if complete:
                raw.raw.release_conn()  # back to the pool for the next request
            else:
                raw.close()  # the rest of the body is unread: drop the connection
        return Response(raw.status_code, raw.headers, body.finish())


# -- async: aiohttp -------------------------------------------------------------------------------------


def classify_aiohttp_error(error: BaseException) -> Came:
    """How far a request got when ``aiohttp`` raised ``error``."""
    import aiohttp

    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return Came.REFUSED
    if isinstance(error, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        return Came.NOTHING
    return Came.LOST


@dataclass(slots=True)
class AsyncTransport:
    """Sends GET attempts with ``aiohttp`` (the event loop's shared session; kickoff and resume stay sync)."""

    session: aiohttp.ClientSession

    async def send(self, call: Call, limits: Limits) -> Response | TransportFailure:
        """One attempt of ``call``, following allowed redirects, read whole under ``limits``."""
        import aiohttp

        started = time.monotonic()
        url = call.url
        try:
            for hops in range(MAX_REDIRECTS + 1):
                left = limits.total - (time.monotonic() - started) if hops else limits.total
                if left <= 0:
                    return over_time(limits)
                # One total bound covers connecting, waiting and reading; read_timeout is part of it.
                # aiohttp's per-read time-out would add a timer per read: one per request costs less
                # on the triggerer's loop, where every poll of every wait runs.
                timeout = aiohttp.ClientTimeout(total=left, sock_connect=limits.connect_timeout)
                async with self.session.request(
                    call.method,
                    url,
                    headers=call.headers,
                    json=call.body,
                    timeout=timeout,
                    ssl=limits.verify_tls,
                    allow_redirects=False,
                ) as raw:
                    status = raw.status
                    if status in REDIRECT_STATUSES:
                        url = redirect_target(call, url, status, raw.headers.get("Location"), hops)
                        continue
                    length = raw.content_length
                    plain = "Content-Encoding" not in raw.headers
                    if plain and length is not None and length <= limits.max_bytes:
                        # The usual answer: plain, its length known and under the cap. One read.
                        return Response(status, raw.headers, await raw.read())
                    body = BodyCap(call, status, raw.headers, limits.max_bytes)
                    # aiohttp decodes gzip and deflate as the body arrives, a bounded piece at a time.
                    async for chunk in raw.content.iter_chunked(READ_CHUNK):
                        body.feed(chunk)
                    return Response(status, raw.headers, body.finish())
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            return failed(limits, started, classify_aiohttp_error(error), reason)
        raise AssertionError("unreachable")  # pragma: no cover - redirect_target stops the loop
