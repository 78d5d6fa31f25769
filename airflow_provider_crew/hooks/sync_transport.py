"""The sync transport: one attempt of a :class:`~.transport.Call` with ``requests``, under its limits.

Used by every call a task makes (kickoff, resume, inputs, a blocking wait's status reads).
"""

from __future__ import annotations

import http.client
import time
from typing import TYPE_CHECKING, Any

from airflow_provider_crew.hooks.body import READ_CHUNK, BodyReader
from airflow_provider_crew.hooks.redirects import MAX_REDIRECTS, REDIRECT_STATUSES, redirect_target
from airflow_provider_crew.hooks.transport import (
    Call,
    Failure,
    Limits,
    Response,
    TransportFailure,
    over_time,
)

if TYPE_CHECKING:
    # Imported where used: a DAG file that imports an operator or sensor needs it only when a task runs.
    import requests


def classify_requests_error(error: requests.RequestException) -> Failure:
    """How far a request got when ``requests`` raised ``error``.

    :param error: What ``requests`` raised.
    """
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
    """A short reason without urllib3's nested reprs (which repeat the URL several times).

    :param error: What ``requests`` or urllib3 raised.
    """
    inner: Any = error.args[0] if error.args else error
    reason = getattr(inner, "reason", inner)
    text = str(reason)
    text = text.split(": ", 1)[-1] if "object at 0x" in text else text
    return f"{type(error).__name__}: {text}"


class SyncTransport:
    """Sends attempts with ``requests`` (one session, so connections are reused).

    :param session: The hook's session.
    """

    def __init__(self, session: requests.Session) -> None:
        self.session = session

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
                    return over_time(limits)
                if sock is not None:
                    sock.settimeout(min(limits.read_timeout, left))
                chunk = read(READ_CHUNK, decode_content=False)
                if not chunk:
                    break
                reader.feed(chunk)
            complete = True
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as error:
            if time.monotonic() - started >= limits.total * 0.99:
                return over_time(limits)
            return TransportFailure(Failure.UNKNOWN, describe_requests_error(error))
        finally:
            if complete:
                raw.raw.release_conn()  # back to the pool for the next request
            else:
                raw.close()  # the rest of the body is unread: drop the connection
        return Response(raw.status_code, raw.headers, reader.finish())
