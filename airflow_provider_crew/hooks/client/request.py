"""The contract's requests as :class:`Call` s: URL, headers, and what a failure means for the caller.

Every call carries the bearer token, asks for JSON in the encodings :mod:`.limits` counts, and says
which provider sent it. A kickoff or resume also says what may have happened when its outcome is
unknown, so that no layer below re-derives it. The status has two paths (:data:`STATUS_PATHS`).
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from airflow_provider_crew import __version__
from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.connection_form import CONN_FIELDS, StatusPathStyle
from airflow_provider_crew.exceptions import CrewError, CrewOutcomeUnknownError, CrewServerError

USER_AGENT = f"airflow-provider-crew/{__version__} (python {platform.python_version()})"
# The encodings both HTTP libraries inflate a bounded piece at a time, so that the body's cap
# (.limits) counts what they inflate.
ACCEPT_ENCODING = "gzip, deflate"

# The hook's logger: log settings made for the hook keep covering what it learns about a service.
log = logging.getLogger("airflow_provider_crew.hooks.crew")


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

    def setting(self, field: str) -> str:
        """``field`` (as the form names it) of the connection the call is sent with, for an error:
        "'Bearer token' (the password) of connection 'crew_default'"."""
        return f"{field} of connection {self.conn_id!r}" if self.conn_id else f"{field} of the connection"

    def explain(self, message: str, *, acted_on: bool = True) -> str:
        """``message`` followed by what the failure means for the caller.

        :param message: What went wrong.
        :param acted_on: Whether the service may have acted on the request (it answered, but the
            answer could not be read). A GET's consequence (e.g. "the execution may still be
            running") holds either way; a POST's ("an execution may have started") only then.
        """
        if self.consequence and (acted_on or self.idempotent):
            return f"{full_stop(message)} {self.consequence}"
        return message

    def unreadable(self, status_code: int, what: str) -> CrewError:
        """The error for an answer that holds ``what``, which cannot be read: for a kickoff or resume
        the service may have acted on (any answer but a 4xx refusal) the outcome is unknown; for
        anything else it is the service's error."""
        said = f"answered {status_code} with {what}"
        if not self.idempotent and not 400 <= status_code < 500:
            return self.outcome_unknown(f"it {said}")
        return CrewServerError(
            self.explain(f"{self.endpoint} {said}"), endpoint=self.endpoint, status_code=status_code
        )

    def outcome_unknown(self, reason: str) -> CrewOutcomeUnknownError:
        """The error for a POST that may or may not have reached the service; it is never repeated.

        :param reason: Why the outcome is unknown, e.g. "HTTP 502 from a gateway".
        """
        return CrewOutcomeUnknownError(
            f"{self.endpoint} to {self.url}: the outcome is unknown ({reason}); {self.if_unknown}. It was "
            "not repeated, so nothing was done twice. Check the crew's executions at the service (its "
            "dashboard) before trying again: clear this task only if nothing was started or applied. "
            "Failing without retry."
        )


def full_stop(sentence: str) -> str:
    """``sentence`` ended with a full stop, unless it ends with one already (or ``!``, ``?``)."""
    return sentence if sentence.endswith((".", "!", "?")) else f"{sentence}."


def named_field(extra: str) -> str:
    """An extra as errors name it: the form's label, then the key it is stored under."""
    return f"{CONN_FIELDS[extra]['label']!r} (extra {extra!r})"


def request_headers(config: CrewConnectionConfig, *, with_body: bool = False) -> dict[str, str]:
    """The headers of a request to the crew at ``config``."""
    headers = {
        "Authorization": f"Bearer {config.token}",
        "Accept": "application/json",
        "Accept-Encoding": ACCEPT_ENCODING,
        "User-Agent": USER_AGENT,
    }
    if with_body:
        headers["Content-Type"] = "application/json"
    return headers


def _call(method: str, base_url: str, path: str, headers: dict[str, str], **details: Any) -> Call:
    """A :class:`Call` of the contract's ``path`` at ``base_url``; messages name it "``method path``"."""
    return Call(
        method=method, url=f"{base_url}{path}", endpoint=f"{method} {path}", headers=headers, **details
    )


def get_call(config: CrewConnectionConfig, path: str, *, conn_id: str | None = None) -> Call:
    """A GET of the contract's ``path`` (``/inputs``, ``/``) from the crew at ``config``.

    :param conn_id: The connection ``config`` was read from, for the errors (:class:`Call`).
    """
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
    :param conn_id: The connection ``config`` was read from, for the errors (:class:`Call`).
    """
    headers = request_headers(config, with_body=True)
    consequence = f"{if_unknown[:1].upper()}{if_unknown[1:]}; the {path.strip('/')} was not repeated."
    return _call(
        "POST",
        config.base_url,
        path,
        headers,
        body=body,
        consequence=consequence,
        if_unknown=if_unknown,
        conn_id=conn_id,
    )


def stop_call(config: CrewConnectionConfig, kickoff_id: str, *, conn_id: str | None = None) -> Call:
    """``POST /stop/{kickoff_id}``: stopping twice does nothing more, so it is repeated as a GET is."""
    path = f"/stop/{quote(kickoff_id, safe='')}"
    headers = request_headers(config, with_body=True)
    return _call("POST", config.base_url, path, headers, body={}, repeatable=True, conn_id=conn_id)


# -- the status, at one of two paths ------------------------------------------------------------------

#: Each style's path, in the order ``auto`` asks them (docs/connection.md, "Status path style"):
#: the contract's, then, after a 404, the one deployed crews answer.
STATUS_PATHS = {
    StatusPathStyle.CONTRACT: "/{kickoff_id}/status",
    StatusPathStyle.DEPLOYED: "/status/{kickoff_id}",
}


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
    :param conn_id: The connection, for the errors (:class:`Call`).
    """
    path = STATUS_PATHS[style].replace("{kickoff_id}", quote(kickoff_id, safe=""))
    consequence = f"Crew execution {kickoff_id} may still be running: only reading its status failed."
    return _call("GET", base_url, path, headers, consequence=consequence, conn_id=conn_id)


#: The status path each service answered at, per base URL, for connections in ``auto`` mode. It lives
#: as long as the process and every hook and trigger in it share it, so finding a service's path
#: costs one 404 per process.
LEARNED_STATUS_PATHS: dict[str, StatusPathStyle] = {}


def status_styles(config: CrewConnectionConfig) -> tuple[StatusPathStyle, ...]:
    """The status path styles to ask, in order: the connection's, the one learned, or both."""
    if config.status_path_style is not StatusPathStyle.AUTO:
        return (config.status_path_style,)
    learned = LEARNED_STATUS_PATHS.get(config.base_url)
    return tuple(STATUS_PATHS) if learned is None else (learned,)


def learn_status_path(config: CrewConnectionConfig, style: StatusPathStyle) -> None:
    """Remember ``style`` for the service at ``config`` (in ``auto`` mode): it answered a status
    record that parses there (only then: a proxy's 200 page at one path must not teach it)."""
    if (
        config.status_path_style is StatusPathStyle.AUTO
        and LEARNED_STATUS_PATHS.get(config.base_url) is not style
    ):
        log.info("Crew service at %s answers status at %s", config.base_url, STATUS_PATHS[style])
        LEARNED_STATUS_PATHS[config.base_url] = style
