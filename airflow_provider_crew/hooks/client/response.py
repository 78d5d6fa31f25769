"""What an attempt brought back, and what it means: the retry rules' row, the model, or the typed error.

An attempt's outcome is an answer read whole (:class:`Response`) or a :class:`TransportFailure`;
:func:`what_came_back` names its row of :mod:`.retry`'s rules. An error status raises the error
:data:`STATUS_ERRORS` gives it, and every error about a :class:`~.request.Call` says what the failure
means for its caller (:func:`explain`). The messages quote what the service said (docs/contract.md,
"Errors") and name fields, never values: a token or a webhook credential may be among them.
:func:`read_status` is the one place the status path is chosen.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from airflow_provider_crew.connection_form import TOKEN_LABEL, StatusPathStyle
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewError,
    CrewHTTPError,
    CrewNotFoundError,
    CrewOutcomeUnknownError,
    CrewRateLimitedError,
    CrewServerError,
    CrewValidationError,
)
from airflow_provider_crew.hooks.client.request import (
    LEARNED_STATUS_PATHS,
    STATUS_PATHS,
    Call,
    describe_validation_error,
    request_headers,
    status_call,
)
from airflow_provider_crew.models import ServiceError, StopOutcome, StopResult
from airflow_provider_crew.status import CrewStatus

if TYPE_CHECKING:
    from airflow_provider_crew.connection import CrewConnectionConfig

T = TypeVar("T")

# The hook's logger: log settings made for the hook keep covering what it learns about a service.
log = logging.getLogger("airflow_provider_crew.hooks.crew")


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
    """An attempt that got no answer: how far it got (:data:`Came.NOTHING`, :data:`Came.REFUSED` or
    :data:`Came.LOST`), and why (for error messages)."""

    came: Came
    reason: str


# -- what came back, in the rows of the retry rules ----------------------------------------------------


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


def is_service_error_body(response: Response) -> bool:
    """Whether the body is the service's own JSON error (a string ``error`` or ``detail``), not a
    gateway's text, HTML page or JSON ``{"message": ...}``."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return False
    return isinstance(body, dict) and any(isinstance(body.get(key), str) for key in ("error", "detail"))


def what_came_back(outcome: Response | TransportFailure) -> Came:
    """The row of the retry rules an attempt's outcome falls in."""
    if isinstance(outcome, TransportFailure):
        return outcome.came
    code = outcome.status_code
    if code < 500:
        return Came.TOO_MANY if code == 429 else Came.ANSWER
    if code == 503:
        busy = "Retry-After" in outcome.headers or is_service_error_body(outcome)
        return Came.SERVICE_BUSY if busy else Came.GATEWAY_BUSY
    return Came.GATEWAY_FAILED if code in (502, 504) else Came.SERVER_FAILED


def unknown_reason(outcome: Response | TransportFailure) -> str:
    """Why a POST's outcome is unknown, for the error."""
    if isinstance(outcome, TransportFailure):
        return outcome.reason
    code = outcome.status_code
    if code == 503:
        return "HTTP 503 without Retry-After or the service's error body: a gateway's own answer"
    if code in (502, 504):
        return f"HTTP {code} from a gateway"
    return f"HTTP {code}: the service failed while handling it"


# -- what a failure means for the caller ---------------------------------------------------------------


def full_stop(sentence: str) -> str:
    """``sentence`` ended with a full stop, unless it ends with one already (or ``!``, ``?``)."""
    return sentence if sentence.endswith((".", "!", "?")) else f"{sentence}."


def explain(call: Call, message: str, *, acted_on: bool = True) -> str:
    """``message`` followed by what the failure means for the caller (``call.consequence``).

    :param message: What went wrong.
    :param acted_on: Whether the service may have acted on the request (it answered, but the
        answer could not be read). A GET's consequence (e.g. "the execution may still be
        running") holds either way; a POST's ("an execution may have started") only then.
    """
    if call.consequence and (acted_on or call.idempotent):
        return f"{full_stop(message)} {call.consequence}"
    return message


def setting(call: Call, field: str) -> str:
    """``field`` (as the form names it) of the connection ``call`` is sent with, for an error:
    "'Bearer token' (the password) of connection 'crew_default'"."""
    return f"{field} of connection {call.conn_id!r}" if call.conn_id else f"{field} of the connection"


def outcome_unknown(call: Call, reason: str) -> CrewOutcomeUnknownError:
    """The error for a POST that may or may not have reached the service; it is never repeated.

    :param reason: Why the outcome is unknown, e.g. "HTTP 502 from a gateway".
    """
    return CrewOutcomeUnknownError(
        f"{call.endpoint} to {call.url}: the outcome is unknown ({reason}); {call.if_unknown}. It was "
        "not repeated, so nothing was done twice. Check the crew's executions at the service (its "
        "dashboard) before trying again: clear this task only if nothing was started or applied. "
        "Failing without retry."
    )


def unreadable(call: Call, status_code: int, what: str) -> CrewError:
    """The error for an answer that holds ``what``, which cannot be read: for a kickoff or resume
    the service may have acted on (any answer but a 4xx refusal) the outcome is unknown; for
    anything else it is the service's error."""
    said = f"answered {status_code} with {what}"
    if not call.idempotent and not 400 <= status_code < 500:
        return outcome_unknown(call, f"it {said}")
    return CrewServerError(
        explain(call, f"{call.endpoint} {said}"), endpoint=call.endpoint, status_code=status_code
    )


# -- an answer into a model or its typed error ----------------------------------------------------------

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


def service_said(response: Response) -> ServiceError:
    """What the service said in an answer's body: its JSON error shape, or the text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    return ServiceError.from_body(body, response.text)


def raise_for_response(call: Call, response: Response) -> None:
    """Turn an error status into its typed error (:data:`STATUS_ERRORS`), quoting what the service said."""
    code = response.status_code
    if code < 400:
        return
    said = service_said(response)
    message = f"{call.endpoint} answered {code}: {said.describe()}"
    if response.note:
        message = f"{message}. {response.note}"
    if code != 404:  # a 404 has its own meaning for a wait (not found, or not yet)
        message = explain(call, message, acted_on=False)
    error = STATUS_ERRORS.get(code, CrewServerError if code >= 500 else CrewHTTPError)
    details: dict[str, Any] = {"service_message": said.message, "details": said.details}
    if error is CrewAuthenticationError:
        message = f"{full_stop(message)} {token_rejected(call, code)}"
    elif error is CrewValidationError:
        details["missing_inputs"] = said.missing_inputs
    raise error(message, endpoint=call.endpoint, status_code=code, **details)


def token_rejected(call: Call, status_code: int) -> str:
    """What a 401 or 403 means, naming the form's field and the connection (never the token)."""
    return (
        f"The crew service rejected the token ({status_code}): check "
        f"{setting(call, f'{TOKEN_LABEL!r} (the password)')}; it must hold the token from the crew's "
        "status tab."
    )


def read_answer(call: Call, response: Response, read: Callable[[Any], T]) -> T:
    """An answer's JSON body, read by ``read`` (a ``ValueError`` when it is not what the contract
    says); an error status raises its typed error, a body that cannot be read :func:`unreadable`'s."""
    raise_for_response(call, response)
    try:
        return read(response.json())
    except ValueError as error:
        if isinstance(error, ValidationError):
            detail = describe_validation_error(error)
        elif isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
            detail = f"not JSON: {response.text[:200]!r}"
        else:
            detail = str(error)
        raise unreadable(call, response.status_code, f"a body that cannot be read: {detail}") from None


def read_status(
    config: CrewConnectionConfig,
    kickoff_id: str,
    *,
    headers: dict[str, str] | None = None,
    conn_id: str | None = None,
) -> Generator[Call | CrewStatus, Response, None]:
    """Read ``kickoff_id``'s status: yields each request and is sent its answer, then yields the record.

    The one place the status path is chosen, for the hook's sync and async reads alike: the
    connection's style, or in ``auto`` mode the one learned for the service, else both in turn
    (:data:`~.request.STATUS_PATHS`). A 404 with a path left moves on; any other answer is read, and a
    record that parses teaches the path (only then: a proxy's 200 page at one path must not teach it).

    :param headers: The requests' headers, when the waits of an event loop share them.
    :param conn_id: The connection ``config`` was read from, for the errors (:class:`~.request.Call`).
    """
    auto = config.status_path_style is StatusPathStyle.AUTO
    learned = LEARNED_STATUS_PATHS.get(config.base_url)
    if not auto:
        styles: tuple[StatusPathStyle, ...] = (config.status_path_style,)
    else:
        styles = tuple(STATUS_PATHS) if learned is None else (learned,)
    headers = request_headers(config) if headers is None else headers
    for style in styles:
        call = status_call(config.base_url, headers, kickoff_id, style, conn_id=conn_id)
        response = yield call
        if response.status_code != 404:
            break
    status = read_answer(call, response, CrewStatus.from_response)
    if auto and LEARNED_STATUS_PATHS.get(config.base_url) is not style:
        log.info("Crew service at %s answers status at %s", config.base_url, STATUS_PATHS[style])
        LEARNED_STATUS_PATHS[config.base_url] = style
    yield status


def read_stop_answer(response: Response | CrewError) -> StopResult:
    """What a ``POST /stop/{id}`` answer means. A service without the route answers 405, or a 404 about
    the route (a framework's bare "Not Found", "No route for ..."), not about the execution ("Execution
    not found")."""
    if isinstance(response, CrewError):
        return StopResult(outcome=StopOutcome.UNKNOWN, detail=str(response))
    code = response.status_code
    said = service_said(response).message or ""
    if code < 300:
        return StopResult(outcome=StopOutcome.STOPPED, detail=said)
    if code == 400:  # "Cannot stop execution. Current state: SUCCESS"
        return StopResult(outcome=StopOutcome.ALREADY_FINISHED, detail=said)
    words = said.lower()
    about_execution = "route" not in words and any(word in words for word in ("execution", "kickoff"))
    if code == 405 or (code == 404 and not about_execution):
        return StopResult(outcome=StopOutcome.NOT_SUPPORTED, detail=f"HTTP {code}")
    return StopResult(outcome=StopOutcome.UNKNOWN, detail=f"HTTP {code}: {said or 'no error message'}")
