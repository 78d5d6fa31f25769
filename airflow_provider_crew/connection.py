"""A ``crew`` connection's settings: read from an Airflow connection, checked, with their defaults.

The form's fields and defaults are :mod:`airflow_provider_crew.connection_form`; this module reads a
connection against them into a :class:`CrewConnectionConfig`, which every request of the hook uses.
It imports nothing of Airflow beyond the provider's exceptions: the connection object is read as it
comes.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from airflow_provider_crew.connection_form import (
    CONN_FIELDS,
    CONN_TYPE,
    HOST_LABEL,
    PORT_LABEL,
    TOKEN_LABEL,
    StatusPathStyle,
    TokenKind,
)
from airflow_provider_crew.exceptions import CrewConfigurationError


class CrewConnectionError(ValueError):
    """A ``crew`` connection is configured wrongly; the message names the field and the fix."""


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
    if value < (minimum := CONN_FIELDS[name]["schema"]["minimum"]):
        raise CrewConnectionError(
            f"Connection extra '{name}' must be at least {minimum}, got {value}. Leave it out for the "
            f"default ({default})."
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


KICKOFF_ID_PLACEHOLDER = "{kickoff_id}"


def _execution_url_template(extra: Mapping[str, Any], name: str = "execution_url_template") -> str | None:
    """The execution page URL template, checked: absolute http(s), ``{kickoff_id}`` in it, no credentials.

    The built URL goes to XCom and the Airflow UI, so a login in it would leak; the check says so
    without echoing the value.
    """
    raw = _extra_value(extra, name)
    if raw is None:
        return None
    fix = (
        f"Fix the '{CONN_FIELDS[name]['label']}' field of the connection, e.g. "
        f"https://app.example.com/executions/{KICKOFF_ID_PLACEHOLDER}."
    )
    template = str(raw).strip()
    parts = urlsplit(template)
    if parts.username is not None or parts.password is not None:
        raise CrewConnectionError(
            f"Connection extra '{name}' must not contain a login or password: the link is shown in the "
            f"Airflow UI and stored in XCom. {fix}"
        )
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise CrewConnectionError(
            f"Connection extra '{name}' must be an http(s) URL, got {template!r}. {fix}"
        )
    if KICKOFF_ID_PLACEHOLDER not in template:
        raise CrewConnectionError(
            f"Connection extra '{name}' has no {KICKOFF_ID_PLACEHOLDER} placeholder for the execution id, "
            f"got {template!r}. {fix}"
        )
    return template


def build_execution_url(template: str, kickoff_id: str) -> str:
    """The execution page URL: ``{kickoff_id}`` in ``template`` replaced by the URL-quoted id.

    ``str.replace`` rather than ``str.format``: other braces in a dashboard URL stay as they are.
    """
    return template.replace(KICKOFF_ID_PLACEHOLDER, quote(str(kickoff_id), safe=""))


HTTP_RULE = (
    "http:// is accepted only for a service on the same machine (localhost, 127.0.0.1 or [::1]); "
    "anywhere else the bearer token would cross the network unencrypted"
)
DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback_host(hostname: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1): traffic that stays on the machine.

    :param hostname: The host part of a URL, without brackets or port.
    """
    if hostname.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def normalise_base_url(
    host: str | None, *, port: int | None = None, path: str | None = None, label: str = HOST_LABEL
) -> str:
    """Return the crew's base URL from the connection fields, or raise naming the field and the fix.

    The rule for the scheme: https://, or http:// for a loopback host only (:data:`HTTP_RULE`).

    ``port`` and ``path`` come apart from the host when the connection is written as a URI
    (``crew://https://:TOKEN@my-crew.example.com:443/v1``): Airflow puts them in port and schema.
    The form's Port field lands in ``port`` too. Port 0 means none: Airflow's Test action sends 0
    for an empty port.

    :param host: The connection's host ('Crew base URL').
    :param port: The connection's port, if any.
    :param path: The connection's schema, a path appended to the URL (URI form only).
    :param label: The host field's name in the form, for the errors.
    """
    host = (host or "").strip()
    if not host:
        raise CrewConnectionError(
            f"'{label}' is empty. Set it (the connection's host) to the address, e.g. "
            "https://my-crew-1234.example.com."
        )
    if "://" not in host:
        raise CrewConnectionError(
            f"'{label}' {host!r} has no scheme. Write the full address, e.g. https://{host}."
        )
    parts = urlsplit(host)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise CrewConnectionError(
            f"'{label}' {host!r} is not an https:// URL. Write it as https://<crew address>[/path]."
        )
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise CrewConnectionError(
            f"'{label}' {host!r} uses http://. Write https://{host.split('://', 1)[1]}: {HTTP_RULE}."
        )
    try:
        url_port = parts.port
    except ValueError:
        raise CrewConnectionError(
            f"'{label}' {host!r} has a port that is not a number from 1 to 65535."
        ) from None
    if port:
        if not 0 < port < 65536:
            raise CrewConnectionError(
                f"'{PORT_LABEL}' must be a number from 1 to 65535, got {port}. Leave it empty to use "
                f"the port in '{label}' or the scheme's default."
            )
        if url_port is None:
            if port != DEFAULT_PORTS[parts.scheme]:
                parts = parts._replace(netloc=f"{parts.netloc}:{port}")
        elif url_port != port:
            raise CrewConnectionError(
                f"'{label}' {host!r} says port {url_port} but '{PORT_LABEL}' says {port}. Make them "
                f"agree or leave '{PORT_LABEL}' empty."
            )
    if path and path.strip("/"):
        parts = parts._replace(path=f"{parts.path.rstrip('/')}/{path.strip('/')}")
    return parts.geturl().rstrip("/")


@dataclass(frozen=True)
class CrewConnectionConfig:
    """Everything the hook needs from a ``crew`` connection, validated."""

    base_url: str
    token: str = field(repr=False)
    credential_kind: TokenKind = TokenKind.ORGANIZATION
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    verify_tls: bool = True
    retry_limit: int = 3
    retry_delay: float = 1.0
    retry_budget: float = 300.0
    max_response_bytes: int = 32 * 1024 * 1024
    status_path_style: StatusPathStyle = StatusPathStyle.AUTO
    execution_url_template: str | None = None
    wake_by_webhook: bool = False
    safety_poll_interval: float = 300.0
    stop_executions: bool = True

    @classmethod
    def from_connection_fields(
        cls,
        *,
        conn_id: str | None,
        host: str | None,
        password: str | None,
        extra: Mapping[str, Any] | None,
        schema: str | None = None,
        port: int | None = None,
    ) -> CrewConnectionConfig:
        """Build the config from an Airflow connection's fields; errors name the field and the fix.

        :param conn_id: Named at the start of every error ("Connection 'crew_default': ..."). None
            leaves it out: Airflow's Test action tests under a random id the user never chose.
        :param host: The connection's host, the crew's base URL.
        :param password: The connection's password, the bearer token.
        :param extra: The connection's extras (``extra_dejson``).
        :param schema: The connection's schema: a path appended to the base URL.
        :param port: The connection's port.
        """
        extra = extra or {}
        try:
            base_url = normalise_base_url(host, port=port, path=schema)
            token = (password or _extra_value(extra, "token") or "").strip()
            if not token:
                raise CrewConnectionError(
                    f"'{TOKEN_LABEL}' (the connection's password) is empty. Put the token from the "
                    "crew's status tab in it."
                )
            return cls(
                base_url=base_url,
                token=token,
                credential_kind=_choice(extra, "credential_kind", TokenKind),
                connect_timeout=float(_number(extra, "connect_timeout")),
                read_timeout=float(_number(extra, "read_timeout")),
                verify_tls=_boolean(extra, "verify_tls"),
                retry_limit=int(_number(extra, "retry_limit", integer=True)),
                retry_delay=float(_number(extra, "retry_delay")),
                retry_budget=float(_number(extra, "retry_budget")),
                max_response_bytes=int(_number(extra, "max_response_bytes", integer=True)),
                status_path_style=_choice(extra, "status_path_style", StatusPathStyle),
                execution_url_template=_execution_url_template(extra),
                wake_by_webhook=_boolean(extra, "wake_by_webhook"),
                safety_poll_interval=float(_number(extra, "safety_poll_interval")),
                stop_executions=_boolean(extra, "stop_executions"),
            )
        except CrewConnectionError as error:
            if conn_id is None:
                raise
            raise CrewConnectionError(f"Connection {conn_id!r}: {error}") from None

    def execution_url(self, kickoff_id: str) -> str | None:
        """The execution's page in the crew's dashboard, or None when no template is set."""
        if not self.execution_url_template:
            return None
        return build_execution_url(self.execution_url_template, kickoff_id)


# -- read from an Airflow connection ------------------------------------------------------------------


def extra_as_dict(raw: Any, *, invalid: str) -> dict[str, Any]:
    """A connection's raw extra (JSON text, a dict or empty) as a dict, parsed without the masker.

    :param raw: ``connection.extra``.
    :param invalid: The error message when it is not a JSON object.
    """
    if not raw:
        return {}
    try:
        extra = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise CrewConfigurationError(invalid)
    return extra


def connection_extra(connection: Any) -> dict[str, Any]:
    """A connection's extra as a dict, read without Airflow's ``extra_dejson``.

    ``extra_dejson`` hands every value to Airflow's secret masker, which logs "Skipping masking for a
    secret as it's too short (<5 chars)" for any short string, secret or not: ``"true"``, ``"120"``
    (the URI form makes every extra a string). Airflow masked the extra as a whole when it fetched
    the connection; the one secret a ``crew`` extra can hold, ``token``, is masked here.

    :param connection: An Airflow connection.
    """
    extra = extra_as_dict(
        connection.extra,
        invalid=f"Connection {connection.conn_id!r}: the extra is not a JSON object. Fix it, or leave it "
        "empty for the defaults.",
    )
    secrets = [
        extra[key] for key in ("token", f"extra__{CONN_TYPE}__token") if isinstance(extra.get(key), str)
    ]
    if any(secrets):
        from airflow.providers.common.compat.sdk import mask_secret

        for secret in filter(None, secrets):
            mask_secret(secret)
    return extra


def config_from_connection(
    connection: Any, conn_id: str, *, name_connection: bool = True
) -> CrewConnectionConfig:
    """Validate ``connection`` into a config; errors name the field and, by default, the connection.

    :param connection: An Airflow connection of type ``crew``.
    :param conn_id: The id it was looked up by.
    :param name_connection: Start errors with "Connection '<id>': ". Off for Airflow's Test
        action, which tests under a random id the user never chose.
    """
    if connection.conn_type not in (CONN_TYPE, None, ""):
        raise CrewConfigurationError(
            f"Connection {conn_id!r} has type {connection.conn_type!r}; "
            f"the crew provider needs a connection of type {CONN_TYPE!r}."
        )
    try:
        return CrewConnectionConfig.from_connection_fields(
            conn_id=conn_id if name_connection else None,
            host=connection.host,
            password=connection.password,
            extra=connection_extra(connection),
            schema=connection.schema,
            port=connection.port,
        )
    except CrewConnectionError as error:
        raise CrewConfigurationError(str(error)) from None


def missing_connection(conn_id: str) -> CrewConfigurationError:
    """The error for a connection not defined where this runs, with the ways to define it."""
    return CrewConfigurationError(
        f"Connection {conn_id!r} is not defined where this runs. Define it for every Airflow component "
        f"that uses it (workers and the triggerer): UI, AIRFLOW_CONN_{conn_id.upper()}, or a secrets backend."
    )


__all__ = [
    "CrewConnectionConfig",
    "CrewConnectionError",
    "config_from_connection",
    "connection_extra",
    "extra_as_dict",
    "missing_connection",
    "normalise_base_url",
]
