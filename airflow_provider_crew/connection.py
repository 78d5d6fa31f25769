"""Settings of a ``crew`` connection: the form's fields, their defaults and their validation.

This module has no Airflow import so that the hook (sync), the trigger (async) and the provider
metadata all read one definition of the connection.
"""

from __future__ import annotations

import enum
import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

CONN_TYPE = "crew"


class StatusPathStyle(str, enum.Enum):
    """Which form of the status path a service answers."""

    CONTRACT = "contract"  # GET /{kickoff_id}/status, as the service contract says
    DEPLOYED = "deployed"  # GET /status/{kickoff_id}, as deployed services answer
    AUTO = "auto"  # try the contract form, learn from the first 404 which one works


class TokenKind(str, enum.Enum):
    """Which kind of bearer token the connection holds; informative: the service decides what it may do."""

    ORGANIZATION = "organization"
    USER = "user"


class CrewConnectionError(ValueError):
    """A ``crew`` connection is configured wrongly; the message names the field and the fix."""


# The form's names for the standard fields the crew connection uses (UI_FIELD_BEHAVIOUR relabels
# them): error messages name a field as the user sees it.
HOST_LABEL = "Crew base URL"
PORT_LABEL = "Port"
TOKEN_LABEL = "Bearer token"


# One definition of the extra fields: the provider metadata ("conn-fields"), the legacy form
# widgets and the parser below all read it.
#
# No key may contain a word Airflow treats as secret ("token", "password", "secret", "proxy",
# "bearer", "dsn" and the others of [core] sensitive_var_conn_names): Airflow would show the value
# as "***" in the REST API and the form, and the form could not show it when a connection is
# reopened (tests/test_provider_info.py checks this against Airflow's own masker).
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "credential_kind": {
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
        "description": "Retries after failures that do not say when to come back: connection errors, "
        "and 502, 504 or time-outs on reads (429 and 503 are governed by the retry budget). "
        "A kickoff or resume is never repeated when the service may have received it.",
        "schema": {"type": ["integer", "null"], "minimum": 0, "default": 3},
    },
    "retry_delay": {
        "label": "Retry base delay (s)",
        "description": "First back-off delay; doubles each retry (capped at 60 s), with jitter. The "
        "service's Retry-After is a floor under it.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 1},
    },
    "retry_budget": {
        "label": "Retry budget (s)",
        "description": "Seconds during which answers of 429 (rate limited) and 503 (unavailable) are "
        "retried, with a growing, jittered back-off that never waits less than the service's "
        "Retry-After. A wait's deadline ends the retries sooner.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 300},
    },
    "max_response_bytes": {
        "label": "Max response size (bytes)",
        "description": "Largest answer body read from the service, counted after decompression "
        "(default 32 MiB). A larger answer fails the task with an error naming this field.",
        "schema": {"type": ["integer", "null"], "minimum": 1, "default": 32 * 1024 * 1024},
    },
    "status_path_style": {
        "label": "Status path style",
        "description": "'contract': GET /{kickoff_id}/status; 'deployed': GET /status/{kickoff_id}; "
        "'auto': learn which one the service answers.",
        "schema": {"type": ["string", "null"], "enum": [s.value for s in StatusPathStyle], "default": "auto"},
    },
    "wake_by_webhook": {
        "label": "Wake waits by webhook",
        "description": "The crew's completion and pause webhooks wake deferred waits through Airflow's "
        "api-server (the provider's plugin and the crew_webhook_receiver connection); polling then only "
        "backs them up. Needs the crew service to reach the api-server (docs/webhook-wake.md).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "safety_poll_interval": {
        "label": "Safety poll interval (s)",
        "description": "With webhook wake: seconds between the status polls that still find failures and "
        "revocations, which the crew announces by no webhook.",
        "schema": {"type": ["number", "null"], "minimum": 1, "default": 300},
    },
    "execution_url_template": {
        "label": "Execution page URL",
        "description": "Optional. The address of one execution's page in the crew's dashboard, with "
        "{kickoff_id} where the execution id goes, e.g. https://app.example.com/executions/{kickoff_id}. "
        "Crew tasks then show a 'Crew execution' link to it.",
        "schema": {"type": ["string", "null"], "default": None},
    },
}

# Extras read under an older name too, for connections saved before the rename. "token_kind"
# became "credential_kind" because Airflow masks every extra whose key contains "token".
LEGACY_EXTRA_NAMES: dict[str, tuple[str, ...]] = {"credential_kind": ("token_kind",)}

# The webhook receiver's form (hooks/webhook_receiver.py): the api-server's address and the key.
RECEIVER_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "login", "extra"],
    "relabeling": {"host": "Airflow address as crews reach it", "password": "Key"},
    "placeholders": {
        "host": "https://airflow.example.com (the api-server, through the ingress crews reach)",
        "password": "a random key of 24+ characters; while rotating: new key, space, old key",
    },
}

# Port stays visible: on Airflow 3.3.1 and 3.3.2 the connections list's Test action sends port 0
# for a connection without a port and the api-server refuses it as "a different host or port"
# (apache/airflow#73298); a connection with its port filled in tests fine there.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "login", "extra"],
    "relabeling": {"host": HOST_LABEL, "port": PORT_LABEL, "password": TOKEN_LABEL},
    "placeholders": {
        "host": "https://my-crew-1234.example.com (http:// only for localhost)",
        "port": "optional: 443 for https; the Test action of Airflow 3.3.1-3.3.2 needs it",
        "password": "bearer token from the crew's status tab",
    },
}

MAX_BACKOFF_SECONDS = 60.0


def _extra_value(extra: Mapping[str, Any], name: str) -> Any:
    """Read an extra stored plain (``timeout``) or with the old form prefix (``extra__crew__timeout``).

    A field renamed since (:data:`LEGACY_EXTRA_NAMES`) is also read under its old name; the new
    name wins when both are set.
    """
    for stored_name in (name, *LEGACY_EXTRA_NAMES.get(name, ())):
        for key in (stored_name, f"extra__{CONN_TYPE}__{stored_name}"):
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


def connection_form_widgets() -> dict[str, Any]:
    """The connection form's extra fields for Airflow < 3.2 (3.2+ reads ``conn-fields`` from provider info).

    Imports the form libraries when called: this module itself imports nothing of Airflow's web stack.

    Airflow 3.0 and 3.1 call this with stand-ins for wtforms and flask-appbuilder when those are
    not installed; the stand-ins take only label, validators, description, default and widget,
    and turn an ``any_of`` validator into a drop-down.
    """
    from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
    from flask_babel import lazy_gettext
    from wtforms import BooleanField, IntegerField, StringField
    from wtforms.validators import Optional, any_of

    widgets: dict[str, Any] = {}
    for name, spec in CONN_FIELDS.items():
        kinds = spec["schema"]["type"]
        label = lazy_gettext(spec["label"])
        default = spec["schema"].get("default")
        validators = [Optional()]
        if "enum" in spec["schema"]:
            validators.append(any_of(spec["schema"]["enum"]))
        if "boolean" in kinds:
            widgets[name] = BooleanField(label, default=default, description=spec["description"])
        elif "integer" in kinds:
            widgets[name] = IntegerField(
                label, validators=validators, default=default, description=spec["description"]
            )
        else:
            widgets[name] = StringField(
                label,
                validators=validators,
                widget=BS3TextFieldWidget(),
                default=default,
                description=spec["description"],
            )
    return widgets
