"""What an attempt brought back, whatever the call: an answer read whole (:class:`Response`) or how far
it got (:class:`TransportFailure`), its row of :mod:`.retry`'s rules (:func:`what_came_back`) and the typed
error of an error status (:data:`STATUS_ERRORS`). What it means for the call is :mod:`.request`'s.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewHTTPError,
    CrewNotFoundError,
    CrewRateLimitedError,
    CrewValidationError,
)
from airflow_provider_crew.models import ServiceError


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


@dataclass(slots=True)
class TransportFailure:
    """An attempt that got no answer: how far it got (a row of :class:`Came`), and why (for errors)."""

    came: Came
    reason: str


class Came(str, enum.Enum):
    """What an attempt brought back, in the words of docs/reliability.md's table."""

    NOTHING = "nothing: connection refused, DNS failure, connect time-out"
    REFUSED = "nothing: a TLS handshake refused (a certificate not verified, no shared protocol)"
    TOO_MANY = "`429`"
    SERVICE_BUSY = (
        '`503` with `Retry-After`, or with the service\'s own JSON error (a string `"error"`, as in '
        '`{"error": ..., "message": ...}`, or a framework\'s `"detail"`)'
    )
    # Gateways answer 503 themselves, without Retry-After, when the service's connection drops after
    # they passed the request on: Envoy and Istio in plain text; AWS API Gateway, Kong, Azure API
    # Management and ESPv2 in JSON with only a "message".
    GATEWAY_BUSY = (
        "`503` without either: a gateway's own (Envoy's \"upstream connect error or disconnect/reset "
        'before headers", "no healthy upstream"; AWS API Gateway\'s, Kong\'s or Azure API '
        'Management\'s JSON with only a `"message"`)'
    )
    GATEWAY_FAILED = "`502`, `504`"
    SERVER_FAILED = "`500` or any other `5xx`"
    LOST = (
        "read time-out, connection reset or a TLS failure after sending (a corrupt record in the "
        "answer), no whole answer in time"
    )
    ANSWER = "`2xx`, `3xx`, `4xx` other than `429`"


def what_came_back(outcome: Response | TransportFailure) -> Came:
    """The row of the retry rules an attempt's outcome falls in."""
    if isinstance(outcome, TransportFailure):
        return outcome.came
    code = outcome.status_code
    if code < 500:
        return Came.TOO_MANY if code == 429 else Came.ANSWER
    if code == 503:
        busy = "Retry-After" in outcome.headers or ServiceError.sent_by_service(outcome.content)
        return Came.SERVICE_BUSY if busy else Came.GATEWAY_BUSY
    return Came.GATEWAY_FAILED if code in (502, 504) else Came.SERVER_FAILED


#: Why a POST's outcome is unknown after an answer in a row its rule never repeats.
UNKNOWN_AFTER = {
    Came.GATEWAY_BUSY: "HTTP 503 without Retry-After or the service's error body: a gateway's own answer",
    Came.GATEWAY_FAILED: "HTTP {code} from a gateway",
    Came.SERVER_FAILED: "HTTP {code}: the service failed while handling it",
}


#: The typed error of each status the contract names (docs/contract.md, "Errors"); any other status
#: from 500 on is a :class:`CrewServerError`, from 400 on a :class:`CrewHTTPError`.
STATUS_ERRORS: dict[int, type[CrewHTTPError]] = {
    400: CrewBadRequestError,
    401: CrewAuthenticationError,
    403: CrewAuthenticationError,
    404: CrewNotFoundError,
    422: CrewValidationError,
    429: CrewRateLimitedError,
}
