"""What one attempt of a request may cost: a total time, and the body's size after decompression.

Both transports hold an answer to the same :class:`Limits`, so a hostile service costs one request,
never the triggerer that reads every DAG's waits (docs/reliability.md, "Hostile or broken
services"). The HTTP libraries inflate gzip and deflate a bounded piece per read (urllib3 2.7 and
aiohttp 3.13.3, the fixes for CVE-2025-66471, CVE-2026-44432 and CVE-2025-69223); :class:`BodyCap`
counts the inflated bytes, so a gzip bomb costs at most the cap plus one piece.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_crew.exceptions import CrewResponseTooLargeError
from airflow_provider_crew.hooks.client.request import ACCEPT_ENCODING, named_field

if TYPE_CHECKING:
    from airflow_provider_crew.hooks.client.request import Call

# A request started at (or after) the caller's deadline still gets this long, so a wait can read
# the status one last time; a trickling body then ends this long after the deadline at most.
LAST_ATTEMPT_SECONDS = 1.0
# Largest piece read (and inflated) at once: a gzip bomb grows memory by at most the cap plus this.
READ_CHUNK = 64 * 1024
# What both libraries decode. Not "x-gzip": aiohttp passes it on undecoded, and it was not asked for.
_DECODED = frozenset({"", "identity", "gzip", "deflate"})


@dataclass(slots=True)
class Limits:
    """What one attempt may cost: time (seconds) and body size (bytes, after decompression)."""

    connect_timeout: float
    read_timeout: float
    total: float
    max_bytes: int
    verify_tls: bool = True


def describe_size(size: int) -> str:
    """``33554432`` -> ``"32 MiB"``; exact bytes when not a round number of KiB/MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def response_too_large(call: Call, limit: int) -> CrewResponseTooLargeError:
    """The error for an answer whose body is over the cap."""
    return CrewResponseTooLargeError(
        call.explain(
            f"{call.endpoint} answered with a body over {describe_size(limit)} (counted after "
            "decompression). Reading stopped at that cap and the request was not repeated: a repeat "
            "would read the same body. If the crew's answers really are this large, raise "
            f"{call.setting(named_field('max_response_bytes'))}, now {limit}."
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
            raise call.unreadable(status_code, asked)
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
