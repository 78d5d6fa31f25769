"""What one attempt of a request may cost: time, and the body's size after decompression.

Both transports hold an answer to the same :class:`Limits`, so a broken or hostile service costs
one request, never the process that reads it (a triggerer reads the waits of every DAG):

- a total time bound per attempt (``connect_timeout + read_timeout``, cut short by the caller's
  deadline), not only a per-read one, so a body that trickles in byte by byte still ends;
- a cap on the body counted after decompression (``max_response_bytes``): gzip and deflate are
  decoded by :class:`BodyReader`, in bounded steps, never by the HTTP library, so a small body that
  inflates to gigabytes (a gzip bomb) costs at most the cap plus one step.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_crew.exceptions import CrewResponseTooLargeError, CrewServerError
from airflow_provider_crew.hooks.client.request import ACCEPT_ENCODING

if TYPE_CHECKING:
    from airflow_provider_crew.hooks.client.request import Call

# A request started at (or after) the caller's deadline still gets this long, so a wait can read
# the status one last time; a trickling body then ends this long after the deadline at most.
LAST_ATTEMPT_SECONDS = 1.0
READ_CHUNK = 64 * 1024
# Largest piece inflated at once: a gzip bomb grows memory by at most the cap plus this.
INFLATE_STEP = 1024 * 1024


@dataclass(slots=True)
class Limits:
    """What one attempt may cost: time (seconds) and body size (bytes, after decompression)."""

    connect_timeout: float
    read_timeout: float
    total: float
    max_bytes: int
    verify_tls: bool = True


def describe_size(size: int) -> str:
    """``33554432`` -> ``"32 MiB"``; exact bytes when not a round number of KiB/MiB.

    :param size: A size in bytes.
    """
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def response_too_large(call: Call, limit: int) -> CrewResponseTooLargeError:
    """The error for an answer whose body is over the cap.

    :param call: The request the body answers.
    :param limit: The cap, in bytes after decompression.
    """
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
