"""Which redirects are followed: only a GET's, only to the same scheme, host and port (the error
says why; docs/reliability.md, "Hostile or broken services")."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from airflow_provider_crew.connection import DEFAULT_PORTS
from airflow_provider_crew.connection_form import HOST_LABEL
from airflow_provider_crew.exceptions import CrewRedirectError

if TYPE_CHECKING:
    from airflow_provider_crew.hooks.client.request import Call

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme)


def redirect_target(call: Call, current_url: str, status_code: int, location: str | None, hops: int) -> str:
    """The URL to follow a redirect to, or :class:`CrewRedirectError` when the rule forbids it."""
    target = urljoin(current_url, location) if location else None
    if target is None:
        problem = "a redirect without a Location"
    elif _origin(target) != _origin(current_url):
        problem = "a redirect to another origin ({}://{}:{})".format(*_origin(target))
    elif not call.idempotent:
        problem = f"a redirect of a {call.method}"
    elif hops >= MAX_REDIRECTS:
        problem = f"more than {MAX_REDIRECTS} redirects"
    else:
        return target
    raise CrewRedirectError(
        call.explain(
            f"{call.endpoint} answered {status_code}, {problem}, which the provider does not follow: "
            "it follows only a GET to the same scheme, host and port, so the bearer token never "
            "reaches another host and a kickoff or resume is never sent to a second place. Set "
            f"{call.setting(f'{HOST_LABEL!r} (the host)')} to the address the service answers at.",
            acted_on=False,
        ),
        endpoint=call.endpoint,
        status_code=status_code,
    )
