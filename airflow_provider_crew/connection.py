"""Settings of a ``crew`` connection: the form's fields, their defaults and their validation.

This module has no Airflow import so that the hook (sync), the trigger (async) and the provider
metadata all read one definition of the connection.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

CONN_TYPE = "crew"


class StatusPathStyle(str, enum.Enum):
    """Which form of the status path a service answers."""

    CONTRACT = "contract"  # GET /{kickoff_id}/status, as the service contract says
    DEPLOYED = "deployed"  # GET /status/{kickoff_id}, as deployed services answer
    AUTO = "auto"  # try the contract form, learn from the first 404 which one works


class TokenKind(str, enum.Enum):
    """Informative only: the service decides what a token may do."""

    ORGANIZATION = "organization"
    USER = "user"


class CrewConnectionError(ValueError):
    """A ``crew`` connection is configured wrongly; the message names the field and the fix."""


# One definition of the extra fields: the provider metadata ("conn-fields"), the legacy form
# widgets and the parser below all read it.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "token_kind": {
        "label": "Token kind",
        "description": "Organization bearer token (full access) or user bearer token (user-scoped). "
        "Informative: shown in logs and the connection test.",
        "schema": {
            "type": ["string", "null"],
            "enum": [k.value for k in TokenKind],
            "default": "organization",
        },
    },
    "connect_timeout": {
        "label": "Connect time-out (s)",
        "description": "Seconds to wait for a TCP/TLS connection to the crew service.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 10},
    },
    "read_timeout": {
        "label": "Read time-out (s)",
        "description": "Seconds to wait for a response once the request is sent. Cold services can be slow.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 60},
    },
    "verify_tls": {
        "label": "Verify TLS certificate",
        "description": "Keep on unless you know why; off disables certificate checks.",
        "schema": {"type": ["boolean", "null"], "default": True},
    },
    "retry_limit": {
        "label": "Retry limit",
        "description": "Retries after connection errors, 429, 502, 503 and 504 (with back-off and jitter). "
        "A kickoff or resume is never repeated when the service may have received it.",
        "schema": {"type": ["integer", "null"], "minimum": 0, "default": 3},
    },
    "retry_delay": {
        "label": "Retry base delay (s)",
        "description": "First back-off delay; doubles each retry (capped at 60 s) unless the service "
        "sends Retry-After.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 1},
    },
    "status_path_style": {
        "label": "Status path style",
        "description": "'contract': GET /{kickoff_id}/status; 'deployed': GET /status/{kickoff_id}; "
        "'auto': learn which one the service answers.",
        "schema": {"type": ["string", "null"], "enum": [s.value for s in StatusPathStyle], "default": "auto"},
    },
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "port", "login", "extra"],
    "relabeling": {"host": "Crew base URL", "password": "Bearer token"},
    "placeholders": {
        "host": "https://my-crew-1234.example.com",
        "password": "bearer token from the crew's status tab",
    },
}

MAX_BACKOFF_SECONDS = 60.0


def _extra_value(extra: Mapping[str, Any], name: str) -> Any:
    """Read an extra stored plain (``timeout``) or with the old form prefix (``extra__crew__timeout``)."""
    for key in (name, f"extra__{CONN_TYPE}__{name}"):
        value = extra.get(key)
        if value is not None and value != "":
            return value
    return None


def _number(extra: Mapping[str, Any], name: str, *, integer: bool = False) -> float | int:
    raw = _extra_value(extra, name)
    default = CONN_FIELDS[name]["schema"]["default"]
    if raw is None:
        return default  # type: ignore[no-any-return]
    try:
        value: float | int = int(raw) if integer else float(raw)
        if isinstance(raw, bool) or (integer and isinstance(raw, float) and not raw.is_integer()):
            raise ValueError
    except (TypeError, ValueError):
        kind = "a whole number" if integer else "a number of seconds"
        raise CrewConnectionError(
            f"Connection extra '{name}' must be {kind}, got {raw!r}. Fix the '{CONN_FIELDS[name]['label']}' "
            "field of the connection."
        ) from None
    if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise CrewConnectionError(
            f"Connection extra '{name}' must not be negative, got {raw!r}. Set it to 0 or more "
            f"(default {default})."
        )
    return value


def _boolean(extra: Mapping[str, Any], name: str) -> bool:
    raw = _extra_value(extra, name)
    if raw is None:
        return bool(CONN_FIELDS[name]["schema"]["default"])
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"true", "1", "yes", "on"}:
        return True
    if text in {"false", "0", "no", "off"}:
        return False
    raise CrewConnectionError(f"Connection extra '{name}' must be true or false, got {raw!r}.")


def _choice(extra: Mapping[str, Any], name: str, enum_type: type[enum.Enum]) -> Any:
    raw = _extra_value(extra, name)
    if raw is None:
        return enum_type(CONN_FIELDS[name]["schema"]["default"])
    try:
        return enum_type(str(raw).strip().lower())
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in enum_type)
        raise CrewConnectionError(
            f"Connection extra '{name}' is {raw!r}; it must be one of {allowed}."
        ) from None


def normalise_base_url(host: str | None, *, port: int | None = None, path: str | None = None) -> str:
    """Return the crew's base URL from the connection fields, or raise naming the field and the fix.

    ``port`` and ``path`` come apart from the host when the connection is written as a URI
    (``crew://https://:TOKEN@my-crew.example.com:443/v1``): Airflow puts them in port and schema.
    """
    host = (host or "").strip()
    if not host:
        raise CrewConnectionError(
            "The crew connection has no host. Set 'Crew base URL' (the connection host) to the crew's "
            "address, e.g. https://my-crew-1234.example.com."
        )
    if "://" not in host:
        raise CrewConnectionError(
            f"The crew connection host {host!r} has no scheme. Write the full base URL, e.g. "
            f"https://{host} (http:// only for a local service)."
        )
    parts = urlsplit(host)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise CrewConnectionError(
            f"The crew connection host {host!r} is not an http(s) URL. Write it as "
            "https://<crew address>[/path]."
        )
    if port and parts.port is None:
        parts = parts._replace(netloc=f"{parts.netloc}:{port}")
    if path and path.strip("/"):
        parts = parts._replace(path=f"{parts.path.rstrip('/')}/{path.strip('/')}")
    return parts.geturl().rstrip("/")


@dataclass(frozen=True)
class CrewConnectionConfig:
    """Everything the hook needs from a ``crew`` connection, validated."""

    base_url: str
    token: str = field(repr=False)
    token_kind: TokenKind = TokenKind.ORGANIZATION
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    verify_tls: bool = True
    retry_limit: int = 3
    retry_delay: float = 1.0
    status_path_style: StatusPathStyle = StatusPathStyle.AUTO

    @classmethod
    def from_connection_fields(
        cls,
        *,
        conn_id: str,
        host: str | None,
        password: str | None,
        extra: Mapping[str, Any] | None,
        schema: str | None = None,
        port: int | None = None,
    ) -> CrewConnectionConfig:
        """Build the config from an Airflow connection's fields; errors name the connection and field."""
        extra = extra or {}
        try:
            base_url = normalise_base_url(host, port=port, path=schema)
            token = (password or _extra_value(extra, "token") or "").strip()
            if not token:
                raise CrewConnectionError(
                    "The crew connection has an empty bearer token. Put the token from the crew's status "
                    "tab in the connection's password ('Bearer token') field."
                )
            return cls(
                base_url=base_url,
                token=token,
                token_kind=_choice(extra, "token_kind", TokenKind),
                connect_timeout=float(_number(extra, "connect_timeout")),
                read_timeout=float(_number(extra, "read_timeout")),
                verify_tls=_boolean(extra, "verify_tls"),
                retry_limit=int(_number(extra, "retry_limit", integer=True)),
                retry_delay=float(_number(extra, "retry_delay")),
                status_path_style=_choice(extra, "status_path_style", StatusPathStyle),
            )
        except CrewConnectionError as error:
            raise CrewConnectionError(f"Connection {conn_id!r}: {error}") from None

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, read) time-outs as ``requests`` takes them."""
        return (self.connect_timeout, self.read_timeout)
