"""An answer read whole (:class:`Response`), then read into the contract's models or a typed error.

The messages quote what the service said (docs/contract.md, "Errors") and name fields, never
values: a token or a webhook credential may be among them. :func:`build_request_model` checks a
request body the same way before it is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from airflow_provider_crew.connection_form import TOKEN_LABEL
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewHTTPError,
    CrewNotFoundError,
    CrewRateLimitedError,
    CrewServerError,
    CrewValidationError,
)
from airflow_provider_crew.hooks.client.request import (
    Call,
    full_stop,
    learn_status_path,
    status_call,
    status_styles,
)
from airflow_provider_crew.models import ServiceError, StopOutcome, StopResult
from airflow_provider_crew.status import CrewStatus

if TYPE_CHECKING:
    from airflow_provider_crew.connection import CrewConnectionConfig

T = TypeVar("T")


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


def service_said(response: Response) -> ServiceError:
    """What the service said in an answer's body: its JSON error shape, or the text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    return ServiceError.from_body(body, response.text)


def raise_for_response(call: Call, response: Response) -> None:
    """Turn an error status into the typed error, quoting what the service said."""
    if response.status_code < 400:
        return
    said = service_said(response)
    message = f"{call.endpoint} answered {response.status_code}: {said.describe()}"
    if response.note:
        message = f"{message}. {response.note}"
    if response.status_code != 404:  # a 404 has its own meaning for a wait (not found, or not yet)
        message = call.explain(message, acted_on=False)
    kwargs: dict[str, Any] = {
        "endpoint": call.endpoint,
        "status_code": response.status_code,
        "service_message": said.message,
        "details": said.details,
    }
    code = response.status_code
    if code == 400:
        raise CrewBadRequestError(message, **kwargs)
    if code in (401, 403):
        raise CrewAuthenticationError(f"{full_stop(message)} {token_rejected(call, code)}", **kwargs)
    if code == 404:
        raise CrewNotFoundError(message, **kwargs)
    if code == 422:
        raise CrewValidationError(message, missing_inputs=said.missing_inputs, **kwargs)
    if code == 429:
        raise CrewRateLimitedError(message, **kwargs)
    if code >= 500:
        raise CrewServerError(message, **kwargs)
    raise CrewHTTPError(message, **kwargs)


def token_rejected(call: Call, status_code: int) -> str:
    """What a 401 or 403 means, naming the form's field and the connection (never the token)."""
    return (
        f"The crew service rejected the token ({status_code}): check "
        f"{call.setting(f'{TOKEN_LABEL!r} (the password)')}; it must hold the token from the crew's "
        "status tab."
    )


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


def read_answer(call: Call, response: Response, read: Callable[[Any], T]) -> T:
    """An answer's JSON body, read by ``read`` (a ``ValueError`` when it is not what the contract
    says); an error status raises its typed error, a body that cannot be read :meth:`Call.unreadable`'s."""
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
        raise call.unreadable(response.status_code, f"a body that cannot be read: {detail}") from None


def read_status(
    config: CrewConnectionConfig, headers: dict[str, str], kickoff_id: str, *, conn_id: str | None = None
) -> Generator[Call, Response, CrewStatus]:
    """Read ``kickoff_id``'s status: yields each request, is sent its answer, returns the record.

    The hook's sync and async reads both drive it, so the two-path rule exists once: a 404 with a
    path left to try moves on; any other answer is read, and a record that parses teaches the path.

    :param headers: The status requests' headers.
    :param conn_id: The connection ``config`` was read from, for the errors (:class:`.request.Call`).
    """
    for style in status_styles(config):
        call = status_call(config.base_url, headers, kickoff_id, style, conn_id=conn_id)
        response = yield call
        if response.status_code != 404:
            break
    status = read_answer(call, response, CrewStatus.from_response)
    learn_status_path(config, style)
    return status


def describe_validation_error(error: ValidationError) -> str:
    """Name the fields and the problems, never the values (a webhook token may be among them)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        location = ".".join(str(part) for part in item["loc"])
        text = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {text}" if location else text)
    return "; ".join(parts)


def build_request_model(model: type[BaseModel], **fields: Any) -> Any:
    """Validate a request body early, raising a CrewConfigurationError that names the field."""
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        raise CrewConfigurationError(
            f"Invalid {model.__name__.removesuffix('Request').lower()} request: "
            f"{describe_validation_error(error)}"
        ) from None
