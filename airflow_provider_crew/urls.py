"""The URL rules the provider's connections share: https://, or http:// for a service on the same
machine only. The ``crew`` connection's address (:mod:`~airflow_provider_crew.connection`), the webhook
receiver's (:mod:`~airflow_provider_crew.hooks.webhook_receiver`) and the client's redirect check
(:mod:`~airflow_provider_crew.hooks.client.transport`) follow them.

Nothing of Airflow is imported here, as in the connection model that uses them.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from airflow_provider_crew.connection_form import HOST_LABEL, PORT_LABEL


class CrewConnectionError(ValueError):
    """A ``crew`` connection is configured wrongly; the message names the field and the fix."""


HTTP_RULE = (
    "http:// is accepted only for a service on the same machine (localhost, 127.0.0.1 or [::1]); "
    "anywhere else the bearer token would cross the network unencrypted"
)
DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback_host(hostname: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1): traffic that stays on the machine."""
    try:
        return hostname.lower() == "localhost" or ipaddress.ip_address(hostname).is_loopback
    except ValueError:  # a name other than localhost
        return False


def normalise_base_url(
    host: str | None, *, port: int | None = None, path: str | None = None, label: str = HOST_LABEL
) -> str:
    """Return the crew's base URL from the connection fields, or raise naming the field and the fix.

    https://, or http:// for a loopback host only (:data:`HTTP_RULE`). ``port`` and ``path`` come
    apart from the host when the connection is written as a URI
    (``crew://https://:TOKEN@my-crew.example.com:443/v1``): Airflow puts them in port and schema.
    The form's Port field lands in ``port`` too. Port 0 means none: Airflow's Test action sends 0
    for an empty port.

    :param label: The host field's name in the form, for the errors.
    """
    url = (host or "").strip()
    if not url:
        raise CrewConnectionError(f"'{label}' is empty. Set it to the https:// address.")
    if "@" in url.split("://", 1)[-1].split("/", 1)[0]:  # not echoed: it holds a password
        raise CrewConnectionError(
            f"'{label}' holds a login or password (user:password@). Remove it: the address is shown in logs."
        )
    if port and not 0 < port < 65536:
        raise CrewConnectionError(f"'{PORT_LABEL}' must be a number from 1 to 65535 or empty, got {port}.")
    try:
        parts = urlsplit(url)
        url_port = parts.port
    except ValueError as error:  # an unclosed [, or a port that is not a number from 0 to 65535
        raise CrewConnectionError(f"'{label}' {url!r} is not a valid URL ({error}).") from None
    if any(char.isspace() for char in url):
        problem = "contains a space. Remove it"
    elif "://" not in url:
        problem = f"has no scheme. Write the full address, e.g. https://{url}"
    elif parts.scheme not in {"http", "https"} or not parts.hostname:
        problem = "is not an https:// URL. Write it as https://<address>[/path]"
    elif parts.query or parts.fragment:
        problem = (
            "has a query or fragment (?... or #...). Remove it: the provider appends paths to the address"
        )
    elif parts.scheme == "http" and not is_loopback_host(parts.hostname):
        problem = f"uses http://. Write https://{url.split('://', 1)[1]}: {HTTP_RULE}"
    elif port and url_port and url_port != port:
        problem = (
            f"says port {url_port} but '{PORT_LABEL}' says {port}. Make them agree or leave '{PORT_LABEL}' "
            "empty"
        )
    else:
        problem = None
    if problem:
        raise CrewConnectionError(f"'{label}' {url!r} {problem}.")
    if port and url_port is None and port != DEFAULT_PORTS[parts.scheme]:
        parts = parts._replace(netloc=f"{parts.netloc}:{port}")
    if path and path.strip("/"):
        parts = parts._replace(path=f"{parts.path.rstrip('/')}/{path.strip('/')}")
    return parts.geturl().rstrip("/")


__all__ = ["DEFAULT_PORTS", "HTTP_RULE", "CrewConnectionError", "is_loopback_host", "normalise_base_url"]
