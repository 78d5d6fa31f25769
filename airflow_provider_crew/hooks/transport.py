"""What a transport sends and reports: a :class:`Call`; its :class:`Response` or :class:`TransportFailure`.

Two transports send one attempt of a call each: :mod:`.sync_transport` (``requests``) and
:mod:`.async_transport` (``aiohttp``); :mod:`.retry` decides what comes next. Both hold an answer
to the same :class:`Limits`, so a broken or hostile service costs one request, never the process
that reads it (a triggerer reads the waits of every DAG):

- a total time bound per attempt (``connect_timeout + read_timeout``, cut short by the caller's
  deadline), not only a per-read one, so a body that trickles in byte by byte still ends;
- a cap on the body counted after decompression (``max_response_bytes``): gzip and deflate are
  decoded by :mod:`.body`, in bounded steps, never by the HTTP library;
- redirects are followed only for a GET to the same scheme, host and port (:mod:`.redirects`), so
  the bearer token never reaches another host and a kickoff or resume is never sent to a second place.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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

        :param message: What went wrong.
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
    """An attempt that got no answer: how far it got, and why (for error messages)."""

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


def over_time(limits: Limits) -> TransportFailure:
    """The failure of an attempt that ran past its total time bound.

    :param limits: The attempt's limits.
    """
    return TransportFailure(Failure.UNKNOWN, f"no complete answer within {limits.total:.3g} s")
