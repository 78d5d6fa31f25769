"""The contract's requests, built as :class:`~.transport.Call` s: URL, headers, and what a failure means.

Every call carries the bearer token, asks for JSON in the encodings :mod:`.body` decodes, and says
which provider sent it; a call whose failure leaves something uncertain says what (its consequence).
"""

from __future__ import annotations

import platform
from typing import Any

from airflow_provider_crew import __version__
from airflow_provider_crew.connection import CrewConnectionConfig, StatusPathStyle
from airflow_provider_crew.hooks.body import ACCEPT_ENCODING
from airflow_provider_crew.hooks.status_path import status_path
from airflow_provider_crew.hooks.transport import Call

USER_AGENT = f"airflow-provider-crew/{__version__} (python {platform.python_version()})"

# What a call's failure means for the caller; appended to its errors.
KICKOFF_CONSEQUENCE = "An execution may have started; the kickoff was not repeated."
RESUME_CONSEQUENCE = "The feedback may have been applied; the resume was not repeated."


def request_headers(config: CrewConnectionConfig, *, with_body: bool = False) -> dict[str, str]:
    """The headers of a request to the crew at ``config``.

    :param config: The connection's settings (its token).
    :param with_body: The request sends a JSON body.
    """
    headers = {
        "Authorization": f"Bearer {config.token}",
        "Accept": "application/json",
        "Accept-Encoding": ACCEPT_ENCODING,
        "User-Agent": USER_AGENT,
    }
    if with_body:
        headers["Content-Type"] = "application/json"
    return headers


def build_call(
    config: CrewConnectionConfig,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    consequence: str = "",
) -> Call:
    """A request to the crew at ``config``.

    :param config: The connection's settings (base URL, token).
    :param method: ``GET`` or ``POST``.
    :param path: The contract's path, e.g. ``/kickoff``.
    :param body: The JSON body, if any.
    :param consequence: What a failure means for the caller (see :class:`~.transport.Call`).
    """
    return Call(
        method=method,
        url=f"{config.base_url}{path}",
        endpoint=f"{method} {path}",
        headers=request_headers(config, with_body=body is not None),
        body=body,
        consequence=consequence,
    )


def status_call(base_url: str, headers: dict[str, str], kickoff_id: str, style: StatusPathStyle) -> Call:
    """The request for an execution's status.

    :param base_url: The crew's base URL.
    :param headers: The request's headers (:func:`request_headers`), shared by the status requests
        of one connection.
    :param kickoff_id: The execution.
    :param style: Which of the two status paths to ask.
    """
    path = status_path(kickoff_id, style)
    return Call(
        method="GET",
        url=f"{base_url}{path}",
        endpoint=f"GET {path}",
        headers=headers,
        consequence=f"Crew execution {kickoff_id} may still be running: only reading its status failed.",
    )
