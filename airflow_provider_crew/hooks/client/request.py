"""The contract's requests as :class:`Call` s: URL, headers, body, and what a failure means for the caller.

Every call carries the bearer token, asks for JSON in the encodings :mod:`.transport` counts, and says
which provider sent it. A kickoff or resume also says what may have happened when its outcome is
unknown, so that no layer below re-derives it. The status has two paths (:data:`STATUS_PATHS`):
:func:`.response.read_status` chooses between them.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from airflow_provider_crew import __version__
from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.connection_form import StatusPathStyle
from airflow_provider_crew.exceptions import CrewConfigurationError

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
    """A POST of ``body`` to the contract's ``path`` (``/kickoff``, ``/resume``).

    :param if_unknown: What may have happened when the outcome is unknown, e.g. "an execution may
        have started"; the errors say it, and that the request was not repeated.
    """
    consequence = f"{if_unknown[:1].upper()}{if_unknown[1:]}; the {path.strip('/')} was not repeated."
    details = {"body": body, "consequence": consequence, "if_unknown": if_unknown, "conn_id": conn_id}
    return _call("POST", config.base_url, path, request_headers(config), **details)


def stop_call(config: CrewConnectionConfig, kickoff_id: str, *, conn_id: str | None = None) -> Call:
    """``POST /stop/{kickoff_id}``: stopping twice does nothing more, so it is repeated as a GET is."""
    path = f"/stop/{quote(kickoff_id, safe='')}"
    return _call(
        "POST", config.base_url, path, request_headers(config), body={}, repeatable=True, conn_id=conn_id
    )


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
    """The request for an execution's status at ``style``'s path.

    :param headers: The request's headers (:func:`request_headers`), shared by the status requests
        of one connection.
    """
    path = STATUS_PATHS[style].replace("{kickoff_id}", quote(kickoff_id, safe=""))
    consequence = f"Crew execution {kickoff_id} may still be running: only reading its status failed."
    return _call("GET", base_url, path, headers, consequence=consequence, conn_id=conn_id)


# -- a request body, checked before it is sent ----------------------------------------------------------


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
