"""The contract's requests as :class:`Call` s, and what an answer or a failure means for the call's caller.

A call carries what its failure means (:func:`explain`), so that no layer below re-derives it; an answer
is read into a model or raises the typed error of its status (:data:`.response.STATUS_ERRORS`), quoting
what the service said (docs/contract.md, "Errors"). :func:`read_status` chooses the status path.
"""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from airflow_provider_crew import __version__
from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.connection_form import TOKEN_LABEL, StatusPathStyle
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewConfigurationError,
    CrewError,
    CrewHTTPError,
    CrewOutcomeUnknownError,
    CrewServerError,
    CrewValidationError,
)
from airflow_provider_crew.hooks.client.response import STATUS_ERRORS, Response
from airflow_provider_crew.models import ServiceError, describe_validation_error
from airflow_provider_crew.status import CrewStatus

T = TypeVar("T")

# The hook's logger: log settings made for the hook keep covering what it learns about a service.
log = logging.getLogger("airflow_provider_crew.hooks.crew")

USER_AGENT = f"airflow-provider-crew/{__version__} (python {platform.python_version()})"
# The encodings both HTTP libraries inflate a bounded piece at a time, so that the body's cap
# (.transport) counts what they inflate.
ACCEPT_ENCODING = "gzip, deflate"


@dataclass(frozen=True)
class Call:
    """One request, built once and sent by either transport.

    :param consequence: What the caller should know when the request fails, e.g. that the
        execution may still be running; appended to every error about this call.
    :param if_unknown: For a POST: what may have happened when its outcome is unknown, e.g. "an
        execution may have started".
    :param conn_id: The connection the call is sent with: an error about one of its settings (the
        token, the host, the body's cap) names it. None: "the connection" (Airflow's Test action runs
        under an id the user never chose).
    """

    method: str
    url: str
    endpoint: str  # what messages call it, e.g. "POST /kickoff"
    headers: dict[str, str] = field(repr=False)
    body: dict[str, Any] | None = None
    consequence: str = ""
    if_unknown: str = ""
    repeatable: bool = False  # a POST that does nothing twice (a stop): retried as a GET is
    conn_id: str | None = None

    @property
    def idempotent(self) -> bool:
        return self.method == "GET" or self.repeatable


def request_headers(config: CrewConnectionConfig) -> dict[str, str]:
    """The headers of a request to the crew at ``config`` (both libraries add ``Content-Type`` to a body)."""
    return {
        "Authorization": f"Bearer {config.token}",
        "Accept": "application/json",
        "Accept-Encoding": ACCEPT_ENCODING,
        "User-Agent": USER_AGENT,
    }


def _call(method: str, base_url: str, path: str, headers: dict[str, str], **details: Any) -> Call:
    """A :class:`Call` of the contract's ``path`` at ``base_url``; messages name it "``method path``"."""
    return Call(
        method=method, url=f"{base_url}{path}", endpoint=f"{method} {path}", headers=headers, **details
    )


def get_call(config: CrewConnectionConfig, path: str, *, conn_id: str | None = None) -> Call:
    """A GET of the contract's ``path`` (``/inputs``, ``/``) from the crew at ``config``."""
    return _call("GET", config.base_url, path, request_headers(config), conn_id=conn_id)


def post_call(
    config: CrewConnectionConfig,
    path: str,
    body: dict[str, Any],
    *,
    if_unknown: str,
    conn_id: str | None = None,
) -> Call:
    """A POST of ``body`` to ``path`` (``/kickoff``, ``/resume``); ``if_unknown`` as :class:`Call`'s."""
    consequence = f"{if_unknown[:1].upper()}{if_unknown[1:]}; the {path.strip('/')} was not repeated."
    details = {"body": body, "consequence": consequence, "if_unknown": if_unknown, "conn_id": conn_id}
    return _call("POST", config.base_url, path, request_headers(config), **details)


def stop_call(config: CrewConnectionConfig, kickoff_id: str, *, conn_id: str | None = None) -> Call:
    """``POST /stop/{kickoff_id}``: stopping twice does nothing more, so it is repeated as a GET is."""
    path = f"/stop/{quote(kickoff_id, safe='')}"
    return _call(
        "POST", config.base_url, path, request_headers(config), body={}, repeatable=True, conn_id=conn_id
    )


def build_request_model(model: type[BaseModel], **fields: Any) -> Any:
    """Validate a request body early, raising a CrewConfigurationError that names the field."""
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        raise CrewConfigurationError(
            f"Invalid {model.__name__.removesuffix('Request').lower()} request: "
            f"{describe_validation_error(error)}"
        ) from None


# -- the status, at one of two paths ------------------------------------------------------------------

#: Each style's path, in the order ``auto`` asks them (docs/connection.md, "Status path style"):
#: the contract's, then, after a 404, the one deployed crews answer.
STATUS_PATHS = {
    StatusPathStyle.CONTRACT: "/{kickoff_id}/status",
    StatusPathStyle.DEPLOYED: "/status/{kickoff_id}",
}

#: The status path each service answered at, per base URL, for connections in ``auto`` mode. It lives
#: as long as the process and every hook and trigger in it share it, so finding a service's path
#: costs one 404 per process.
LEARNED_STATUS_PATHS: dict[str, StatusPathStyle] = {}


def status_call(
    base_url: str,
    headers: dict[str, str],
    kickoff_id: str,
    style: StatusPathStyle,
    *,
    conn_id: str | None = None,
) -> Call:
    """The request for an execution's status at ``style``'s path; ``headers`` as :func:`read_status`'s."""
    path = STATUS_PATHS[style].replace("{kickoff_id}", quote(kickoff_id, safe=""))
    consequence = f"Crew execution {kickoff_id} may still be running: only reading its status failed."
    return _call("GET", base_url, path, headers, consequence=consequence, conn_id=conn_id)


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
    (:data:`STATUS_PATHS`). A 404 with a path left moves on; any other answer is read, and a
    record that parses teaches the path (only then: a proxy's 200 page at one path must not teach it).

    :param headers: The requests' headers, when the waits of an event loop share them.
    :param conn_id: The connection ``config`` was read from, for the errors (:class:`Call`).
    """
    auto = config.status_path_style is StatusPathStyle.AUTO
    known = LEARNED_STATUS_PATHS.get(config.base_url) if auto else config.status_path_style
    styles = tuple(STATUS_PATHS) if known is None else (known,)
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


# -- what a failure means for the caller ---------------------------------------------------------------


def full_stop(sentence: str) -> str:
    """``sentence`` ended with a full stop, unless it ends with one already (or ``!``, ``?``)."""
    return sentence if sentence.endswith((".", "!", "?")) else f"{sentence}."


def explain(call: Call, message: str, *, acted_on: bool = True) -> str:
    """``message`` followed by what the failure means for the caller (``call.consequence``): a GET's (e.g.
    "the execution may still be running") always, a POST's ("an execution may have started") only when
    the service may have acted on it (``acted_on``: it answered, but the answer could not be read)."""
    if call.consequence and (acted_on or call.idempotent):
        return f"{full_stop(message)} {call.consequence}"
    return message


def setting(call: Call, field: str) -> str:
    """``field`` (as the form names it) of the connection ``call`` is sent with, for an error:
    "'Bearer token' (the password) of connection 'crew_default'"."""
    return f"{field} of connection {call.conn_id!r}" if call.conn_id else f"{field} of the connection"


def outcome_unknown(call: Call, reason: str) -> CrewOutcomeUnknownError:
    """The error for a POST that may or may not have reached the service (``reason``: why, e.g. "HTTP 502
    from a gateway"); it is never repeated."""
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


def raise_for_response(call: Call, response: Response) -> None:
    """Turn an error status into its typed error (:data:`STATUS_ERRORS`), quoting what the service said."""
    code = response.status_code
    if code < 400:
        return
    said = ServiceError.from_answer(response.content)
    message = f"{call.endpoint} answered {code}: {said.describe()}"
    if response.note:
        message = f"{message}. {response.note}"
    if code != 404:  # a 404 has its own meaning for a wait (not found, or not yet)
        message = explain(call, message, acted_on=False)
    error = STATUS_ERRORS.get(code, CrewServerError if code >= 500 else CrewHTTPError)
    details: dict[str, Any] = {"service_message": said.message, "details": said.details}
    if error is CrewAuthenticationError:  # the form's field and the connection, never the token
        message = (
            f"{full_stop(message)} The crew service rejected the token ({code}): check "
            f"{setting(call, f'{TOKEN_LABEL!r} (the password)')}; it must hold the token from the crew's "
            "status tab."
        )
    elif error is CrewValidationError:
        details["missing_inputs"] = said.missing_inputs
    raise error(message, endpoint=call.endpoint, status_code=code, **details)


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
