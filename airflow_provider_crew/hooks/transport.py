"""How one request travels: a sync transport (``requests``) and an async one (``aiohttp``).

Each sends one attempt of a :class:`Call` and reports the :class:`Response`, or a
:class:`TransportFailure` that says how far the request got; :mod:`.retry` decides what comes next.
Both hold an answer to the same limits, so a broken or hostile service costs one request, never
the process that reads it (a triggerer reads the waits of every DAG):

- a total time bound per attempt (``connect_timeout + read_timeout``, cut short by the caller's
  deadline), not only a per-read one, so a body that trickles in byte by byte still ends;
- a cap on the body counted after decompression (``max_response_bytes``): gzip and deflate are
  decoded here, in bounded steps, never by the HTTP library;
- redirects are followed only for a GET to the same scheme, host and port, so the bearer token
  never reaches another host and a kickoff or resume is never sent to a second place.
"""

from __future__ import annotations

import asyncio
import enum
import http.client
import json
import logging
import time
import weakref
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from airflow_provider_crew.exceptions import CrewRedirectError, CrewResponseTooLargeError, CrewServerError

if TYPE_CHECKING:
    # Imported where used: a DAG file that imports an operator or sensor needs neither at parse time.
    import aiohttp
    import requests

log = logging.getLogger(__name__)

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_ENCODING = "Content-Encoding"
MAX_REDIRECTS = 5
# Only what BodyReader decodes itself, so decompression stays under the cap.
ACCEPT_ENCODING = "gzip, deflate"
READ_CHUNK = 64 * 1024
# Largest piece inflated at once: a gzip bomb grows memory by at most the cap plus this.
INFLATE_STEP = 1024 * 1024
# A request started at (or after) the caller's deadline still gets this long, so a wait can read
# the status one last time; a trickling body then ends this long after the deadline at most.
LAST_ATTEMPT_SECONDS = 1.0


@dataclass(frozen=True)
class Call:
    """One request, built once and sent by either transport.

    :param consequence: What the caller should know when the request fails, e.g. that the
        execution may still be running; appended to every error about this call.
    """

    method: str
    url: str
    endpoint: str  # what messages call it, e.g. "POST /kickoff"
    headers: dict[str, str] = field(repr=False)
    body: dict[str, Any] | None = None
    consequence: str = ""

    @property
    def idempotent(self) -> bool:
        return self.method == "GET"

    def explain(self, message: str, *, acted_on: bool = True) -> str:
        """``message`` followed by what the failure means for the caller.

        :param acted_on: Whether the service may have acted on the request (it answered, but the
            answer could not be read). A GET's consequence (e.g. "the execution may still be
            running") holds either way; a POST's ("an execution may have started") only then.
        """
        if self.consequence and (acted_on or self.idempotent):
            return f"{message} {self.consequence}"
        return message


@dataclass(slots=True)  # built per request: plain slots construct faster than frozen fields
class Response:
    """An answer read whole (under the limits). ``note`` says how the retries ended, for errors."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes
    note: str = ""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        # Decoding first is faster than json.loads(bytes), which sniffs the encoding in Python.
        return json.loads(self.content.decode("utf-8")) if self.content else None


class Failure(str, enum.Enum):
    """How far a request got when the transport failed: it decides whether a repeat is safe."""

    NOT_SENT = "not_sent"  # refused, DNS, connect time-out: the service never saw it
    UNKNOWN = "unknown"  # read time-out, reset after sending, over the time bound: it may have acted
    FATAL = "fatal"  # TLS or URL problems that a repeat will not fix


@dataclass(slots=True)
class TransportFailure:
    kind: Failure
    reason: str


@dataclass(slots=True)
class Limits:
    """What one attempt may cost: time (seconds) and body size (bytes, after decompression)."""

    connect_timeout: float
    read_timeout: float
    total: float
    max_bytes: int
    verify_tls: bool = True


def _over_time(limits: Limits) -> TransportFailure:
    return TransportFailure(Failure.UNKNOWN, f"no complete answer within {limits.total:.3g} s")


# -- what both transports share ------------------------------------------------------------------


def describe_size(size: int) -> str:
    """``33554432`` -> ``"32 MiB"``; exact bytes when not a round number of KiB/MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def response_too_large(call: Call, limit: int) -> CrewResponseTooLargeError:
    return CrewResponseTooLargeError(
        call.explain(
            f"{call.endpoint} answered with a body over {describe_size(limit)} (counted after "
            "decompression). Reading stopped at that cap and the request was not repeated: a repeat "
            "would read the same body. If the crew's answers really are this large, raise the "
            f"connection's 'max_response_bytes' extra (the 'Max response size' field, now {limit})."
        ),
        endpoint=call.endpoint,
        limit=limit,
    )


class _Inflater:
    """gzip or deflate, decoded in steps of at most INFLATE_STEP bytes."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # gzip: 16 + MAX_WBITS; deflate is zlib-wrapped by the RFC but raw in some servers.
        self._wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        self._decompressor = zlib.decompressobj(self._wbits)
        self._started = False

    def inflate(self, data: bytes, room: int) -> list[bytes]:
        """Decode ``data``; stop early once more than ``room`` bytes came out."""
        pieces: list[bytes] = []
        produced = 0
        while data and produced <= room:
            step = min(INFLATE_STEP, room - produced + 1)
            try:
                out = self._decompressor.decompress(data, step)
            except zlib.error:
                if self.encoding != "deflate" or self._started:
                    raise
                self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate
                self._started = True
                continue
            self._started = True
            pieces.append(out)
            produced += len(out)
            data = self._decompressor.unconsumed_tail
            if self._decompressor.eof:
                data = self._decompressor.unused_data
                if not data.strip(b"\0"):
                    break
                self._decompressor = zlib.decompressobj(self._wbits)  # a gzip of several members
        return pieces

    def flush(self) -> bytes:
        return self._decompressor.flush()


class BodyReader:
    """Collects one answer's body, decoding gzip or deflate itself, and stops at the cap.

    :param call: The request the body answers (for error messages).
    :param status_code: The answer's status code.
    :param headers: The answer's headers (``Content-Encoding``, ``Content-Length``).
    :param max_bytes: The cap, in bytes after decompression.
    """

    def __init__(self, call: Call, status_code: int, headers: Mapping[str, str], max_bytes: int) -> None:
        self.call = call
        self.status_code = status_code
        self.max_bytes = max_bytes
        encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding in ("identity", ""):
            self._inflater: _Inflater | None = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            self._inflater = _Inflater("deflate" if encoding == "deflate" else "gzip")
        else:
            raise CrewServerError(
                call.explain(
                    f"{call.endpoint} answered {status_code} with Content-Encoding {encoding!r}, which was "
                    f"not asked for (Accept-Encoding: {ACCEPT_ENCODING})."
                ),
                endpoint=call.endpoint,
                status_code=status_code,
            )
        self._parts: list[bytes] = []
        self._size = 0
        if self._inflater is None:
            # An honest Content-Length over the cap fails before a byte of the body is read.
            declared = headers.get("Content-Length")
            if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
                raise response_too_large(call, max_bytes)

    @property
    def identity(self) -> bool:
        return self._inflater is None

    def feed(self, data: bytes) -> None:
        """Add a piece of the body as it came off the wire; raises once over the cap."""
        if self._inflater is None:
            self._add([data])
            return
        try:
            pieces = self._inflater.inflate(data, self.max_bytes - self._size)
        except zlib.error as error:
            raise self._not_decodable(error) from None
        self._add(pieces)

    def finish(self) -> bytes:
        """The whole body, decoded."""
        if self._inflater is not None:
            try:
                self._add([self._inflater.flush()])
            except zlib.error as error:
                raise self._not_decodable(error) from None
        return b"".join(self._parts)

    def _add(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            self._size += len(piece)
            if self._size > self.max_bytes:
                self._parts.clear()
                raise response_too_large(self.call, self.max_bytes)
            if piece:
                self._parts.append(piece)

    def _not_decodable(self, error: zlib.error) -> CrewServerError:
        assert self._inflater is not None
        return CrewServerError(
            self.call.explain(
                f"{self.call.endpoint} answered {self.status_code} with a body that is not valid "
                f"{self._inflater.encoding} ({error})."
            ),
            endpoint=self.call.endpoint,
            status_code=self.status_code,
        )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)


def redirect_target(call: Call, current_url: str, status_code: int, location: str | None, hops: int) -> str:
    """The URL to follow a redirect to, or :class:`CrewRedirectError` when the rule forbids it.

    The rule: only a GET, only to the same scheme, host and port, at most MAX_REDIRECTS times.
    """
    target = urljoin(current_url, location) if location else None
    scheme, host, port = _origin(target or current_url)
    where = f"{scheme}://{host}:{port}"
    if target is not None and call.idempotent and _origin(target) == _origin(current_url):
        if hops < MAX_REDIRECTS:
            return target
        problem = f"more than {MAX_REDIRECTS} redirects"
    elif target is None:
        problem = "a redirect without a Location"
    elif _origin(target) != _origin(current_url):
        problem = f"a redirect to another origin ({where})"
    else:
        problem = f"a redirect of a {call.method}"
    raise CrewRedirectError(
        call.explain(
            f"{call.endpoint} answered {status_code}, {problem}, which the provider does not follow: "
            "it follows only a GET to the same scheme, host and port, so the bearer token never "
            "reaches another host and a kickoff or resume is never sent to a second place. Set the "
            "connection's host ('Crew base URL') to the address the service answers at.",
            acted_on=False,
        ),
        endpoint=call.endpoint,
        status_code=status_code,
    )


# -- sync transport (requests) ---------------------------------------------------------------------


def classify_requests_error(error: requests.RequestException) -> Failure:
    import requests
    import urllib3.exceptions

    if isinstance(error, requests.exceptions.SSLError):
        return Failure.FATAL
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return Failure.NOT_SENT
    if isinstance(error, requests.exceptions.ConnectionError):
        # urllib3 wraps "could not connect" (refused, DNS) as NewConnectionError in the reason.
        inner = error.args[0] if error.args else None
        reason = getattr(inner, "reason", None)
        if isinstance(reason, urllib3.exceptions.NewConnectionError) or isinstance(
            inner, urllib3.exceptions.NewConnectionError
        ):
            return Failure.NOT_SENT
        return Failure.UNKNOWN
    if isinstance(error, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema)):
        return Failure.FATAL
    return Failure.UNKNOWN


def describe_requests_error(error: BaseException) -> str:
    """A short reason without urllib3's nested reprs (which repeat the URL several times)."""
    inner: Any = error.args[0] if error.args else error
    reason = getattr(inner, "reason", inner)
    text = str(reason)
    text = text.split(": ", 1)[-1] if "object at 0x" in text else text
    return f"{type(error).__name__}: {text}"


class SyncTransport:
    """Sends attempts with ``requests`` (one session, so connections are reused)."""

    def __init__(self, session: requests.Session) -> None:
        self.session = session

    def send(self, call: Call, limits: Limits) -> Response | TransportFailure:
        import requests

        started = time.monotonic()
        url = call.url
        for hops in range(MAX_REDIRECTS + 1):
            left = limits.total - (time.monotonic() - started)
            if left <= 0:
                return _over_time(limits)
            try:
                raw = self.session.request(
                    call.method,
                    url,
                    headers=call.headers,
                    json=call.body,
                    timeout=(limits.connect_timeout, min(limits.read_timeout, left)),
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
            reader = BodyReader(call, raw.status_code, raw.headers, limits.max_bytes)
            stream = raw.raw
            # One recv per read (read1), each under the time left, so the total bound holds even
            # for a body that trickles in; urllib3 before 2.x has no read1 and reads in full chunks.
            read = getattr(stream, "read1", None) or stream.read
            sock = getattr(getattr(stream, "connection", None), "sock", None)
            while True:
                left = limits.total - (time.monotonic() - started)
                if left <= 0:
                    return _over_time(limits)
                if sock is not None:
                    sock.settimeout(min(limits.read_timeout, left))
                chunk = read(READ_CHUNK, decode_content=False)
                if not chunk:
                    break
                reader.feed(chunk)
            complete = True
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as error:
            if time.monotonic() - started >= limits.total * 0.99:
                return _over_time(limits)
            return TransportFailure(Failure.UNKNOWN, describe_requests_error(error))
        finally:
            if complete:
                raw.raw.release_conn()  # back to the pool for the next request
            else:
                raw.close()  # the rest of the body is unread: drop the connection
        return Response(raw.status_code, raw.headers, reader.finish())


# -- async transport (aiohttp) ----------------------------------------------------------------------


def classify_aiohttp_error(error: BaseException) -> Failure:
    import aiohttp

    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return Failure.FATAL
    connect_timeout = getattr(aiohttp, "ConnectionTimeoutError", ())  # aiohttp 3.10+
    if isinstance(error, aiohttp.ClientConnectorError) or (
        connect_timeout and isinstance(error, connect_timeout)
    ):
        return Failure.NOT_SENT
    return Failure.UNKNOWN


@dataclass
class _LoopSession:
    session: aiohttp.ClientSession
    closer: asyncio.Task[None] | None = None


# One aiohttp session per event loop, shared by every trigger in a triggerer: measured here a
# shared session costs ~170 µs CPU per poll against ~660 µs for a new session per poll.
_loop_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSession] = (
    weakref.WeakKeyDictionary()
)


def _new_session(user_agent: str) -> aiohttp.ClientSession:
    import aiohttp

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=256, limit_per_host=64, keepalive_timeout=30),
        headers={"User-Agent": user_agent},
        raise_for_status=False,
        auto_decompress=False,  # BodyReader inflates, under the cap
    )


async def _close_when_the_loop_ends(session: aiohttp.ClientSession) -> None:
    """Wait until cancelled, then close ``session`` and forget it.

    ``asyncio.run`` (the triggerer, ``airflow dags test``) and pytest's loop runner cancel the
    tasks left when their main coroutine ends: this is how the shared session gets closed inside
    its own loop, instead of being found unclosed ("Unclosed client session") after the loop is gone.
    Forgetting it matters too: the session refers to its loop, so an entry left in the weak-keyed
    map would keep the loop, its connector and the session alive until the process ends.
    """
    loop = asyncio.get_running_loop()
    try:
        await asyncio.Event().wait()
    finally:
        entry = _loop_sessions.get(loop)
        if entry is not None and entry.session is session:
            del _loop_sessions[loop]
        await session.close()


def shared_session(user_agent: str) -> aiohttp.ClientSession:
    """The running loop's shared session, created on first use and closed when the loop ends."""
    loop = asyncio.get_running_loop()
    entry = _loop_sessions.get(loop)
    if entry is None or entry.session.closed:
        entry = _LoopSession(_new_session(user_agent))
        # The entry holds the task: the loop keeps only a weak reference to it.
        entry.closer = loop.create_task(
            _close_when_the_loop_ends(entry.session), name="airflow-provider-crew: close the shared session"
        )
        _loop_sessions[loop] = entry
    return entry.session


def loop_session() -> aiohttp.ClientSession | None:
    """The running loop's shared session, if it has one (for tests)."""
    entry = _loop_sessions.get(asyncio.get_running_loop())
    return None if entry is None else entry.session


async def close_shared_sessions() -> None:
    """Close the running loop's shared session now (tests and clean shutdowns)."""
    entry = _loop_sessions.get(asyncio.get_running_loop())
    if entry is None:
        return
    if entry.closer is not None and not entry.closer.done():
        entry.closer.cancel()
        await asyncio.wait([entry.closer])  # its finally closes and forgets the session
    _loop_sessions.pop(asyncio.get_running_loop(), None)
    if not entry.session.closed:
        await entry.session.close()


class AsyncTransport:
    """Sends GET attempts with the loop's shared aiohttp session (kickoff and resume stay sync)."""

    def __init__(self, user_agent: str) -> None:
        self.user_agent = user_agent

    async def send(self, call: Call, limits: Limits) -> Response | TransportFailure:
        import aiohttp

        session = shared_session(self.user_agent)
        started = time.monotonic()
        url = call.url
        try:
            for hops in range(MAX_REDIRECTS + 1):
                left = limits.total - (time.monotonic() - started) if hops else limits.total
                if left <= 0:
                    return _over_time(limits)
                # One total bound covers connecting, waiting and reading; read_timeout is part of it.
                # aiohttp's per-read time-out would add a timer per read: one per request costs less
                # on the triggerer's loop, where every poll of every wait runs.
                timeout = aiohttp.ClientTimeout(total=left, sock_connect=limits.connect_timeout)
                async with session.request(
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
                    if length is not None and length <= limits.max_bytes and _ENCODING not in raw.headers:
                        # The usual answer: plain, its length known and under the cap. One read.
                        return Response(status, raw.headers, await raw.read())
                    reader = BodyReader(call, status, raw.headers, limits.max_bytes)
                    async for chunk in raw.content.iter_chunked(READ_CHUNK):
                        reader.feed(chunk)
                    return Response(status, raw.headers, reader.finish())
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            if time.monotonic() - started >= limits.total * 0.99:
                return _over_time(limits)
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            return TransportFailure(classify_aiohttp_error(error), reason)
        raise AssertionError("unreachable")  # pragma: no cover - redirect_target stops the loop
