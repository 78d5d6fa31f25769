"""A ``crew`` connection's settings: one pydantic model, :class:`CrewConnectionConfig`, every request's.

The extras' labels, defaults, bounds and choices are the form's table
(:data:`~airflow_provider_crew.connection_form.CONN_FIELDS`); errors name the field and the fix.
Nothing of Airflow is imported here at module level: the provider metadata reads the form in every
process, DAG files included, and this module loads only where a connection is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from airflow_provider_crew.connection_form import (
    CONN_FIELDS,
    CONN_TYPE,
    TOKEN_LABEL,
    StatusPathStyle,
    TokenKind,
)
from airflow_provider_crew.urls import CrewConnectionError, normalise_base_url

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from airflow_provider_crew.exceptions import CrewConfigurationError


MAX_BACKOFF_SECONDS = 60.0
KICKOFF_ID_PLACEHOLDER = "{kickoff_id}"
_PREFIX = f"extra__{CONN_TYPE}__"

# pydantic reads true as 1 and any case of a choice as no choice: numbers refuse true and false
# (as text they fail to parse), choices are compared in lower case.
_NOT_A_BOOL = BeforeValidator(lambda value: str(value) if isinstance(value, bool) else value)
_LOWER_CASE = BeforeValidator(lambda value: value.lower() if isinstance(value, str) else value)


def _extra(name: str) -> Any:
    """The model's field for an extra of the form: its default and minimum."""
    schema = CONN_FIELDS[name]["schema"]
    return Field(schema["default"], ge=schema.get("minimum"), gt=schema.get("exclusiveMinimum"))


def _named(name: str) -> str:
    """An extra as the user meets it in errors: the form's label, then the key it is stored under."""
    return f"'{CONN_FIELDS[name]['label']}' (extra '{name}')"


class CrewConnectionConfig(BaseModel):
    """Everything the hook needs from a ``crew`` connection, validated: one field per extra of the form."""

    model_config = ConfigDict(
        frozen=True,
        allow_inf_nan=False,
        validate_default=True,
    )

    base_url: str
    token: str = Field(repr=False, min_length=1)
    credential_kind: Annotated[TokenKind, _LOWER_CASE] = _extra("credential_kind")
    connect_timeout: Annotated[float, _NOT_A_BOOL] = _extra("connect_timeout")
    read_timeout: Annotated[float, _NOT_A_BOOL] = _extra("read_timeout")
    verify_tls: bool = _extra("verify_tls")
    retry_limit: Annotated[int, _NOT_A_BOOL] = _extra("retry_limit")
    retry_delay: Annotated[float, _NOT_A_BOOL] = _extra("retry_delay")
    retry_budget: Annotated[float, _NOT_A_BOOL] = _extra("retry_budget")
    max_response_bytes: Annotated[int, _NOT_A_BOOL] = _extra("max_response_bytes")
    status_path_style: Annotated[StatusPathStyle, _LOWER_CASE] = _extra("status_path_style")
    stop_executions: bool = _extra("stop_executions")
    wake_by_webhook: bool = _extra("wake_by_webhook")
    safety_poll_interval: Annotated[float, _NOT_A_BOOL] = _extra("safety_poll_interval")
    event_stream: bool = _extra("event_stream")
    event_stream_realtime: bool = _extra("event_stream_realtime")
    event_stream_content: bool = _extra("event_stream_content")
    execution_url_template: str | None = _extra("execution_url_template")
    max_usage: Annotated[int | None, _NOT_A_BOOL] = _extra("max_usage")
    max_cost: Annotated[float | None, _NOT_A_BOOL] = _extra("max_cost")
    input_price: Annotated[float | None, _NOT_A_BOOL] = _extra("input_price")
    output_price: Annotated[float | None, _NOT_A_BOOL] = _extra("output_price")
    cached_input_price: Annotated[float | None, _NOT_A_BOOL] = _extra("cached_input_price")

    @field_validator("token")
    @classmethod
    def _check_token(cls, token: str) -> str:
        """Only characters an HTTP header carries: a line break or a pasted zero-width space would fail
        every request late, in errors that quote the header. The message never shows the token."""
        for position, char in enumerate(token, start=1):
            if not "!" <= char <= "~":
                raise CrewConnectionError(
                    f"'{TOKEN_LABEL}' (the connection's password) holds U+{ord(char):04X} at character "
                    f"{position}, which an HTTP header cannot carry. Paste the token again without it."
                )
        return token

    @field_validator("execution_url_template", mode="before")
    @classmethod
    def _check_template(cls, raw: Any) -> str | None:
        """Absolute http(s), ``{kickoff_id}`` in it, no credentials: the built URL goes to XCom and the
        Airflow UI, so a login in it would leak; the message says so without echoing the value."""
        if raw is None:
            return None
        template = str(raw)
        parts = urlsplit(template)
        if parts.username is not None or parts.password is not None:
            problem = "must not contain a login or password: the link is shown in the UI and stored in XCom"
        elif parts.scheme not in {"http", "https"} or not parts.hostname:
            problem = f"must be an http(s) URL, got {template!r}"
        elif KICKOFF_ID_PLACEHOLDER not in template:
            problem = f"has no {KICKOFF_ID_PLACEHOLDER} placeholder for the execution id, got {template!r}"
        else:
            return template
        example = f"https://app.example.com/executions/{KICKOFF_ID_PLACEHOLDER}"
        raise CrewConnectionError(f"{_named('execution_url_template')} {problem}. Write e.g. {example}.")

    @model_validator(mode="after")
    def _check_event_stream(self) -> CrewConnectionConfig:
        """The event stream is delivered to the wake's receiver: without the wake, nothing would hear it."""
        if self.event_stream and not self.wake_by_webhook:
            raise CrewConnectionError(
                f"{_named('event_stream')} needs {_named('wake_by_webhook')}: the events reach Airflow "
                "through the same receiver. Turn both on, or the event stream off."
            )
        return self

    def execution_url(self, kickoff_id: str) -> str | None:
        """The execution's page in the crew's dashboard, or None when no template is set."""
        if not self.execution_url_template:
            return None
        return build_execution_url(self.execution_url_template, kickoff_id)


def _message(error: ErrorDetails) -> str:
    """pydantic's error as the provider says it: the field, what it must be, the value read."""
    kind = error["type"]
    if kind == "value_error":  # the validators' own errors (a field's, or the model's, without a loc)
        return str(error["ctx"]["error"])
    name = str(error["loc"][0])
    if name == "token":
        return (
            f"'{TOKEN_LABEL}' (the connection's password) is empty. "
            "Put the token from the crew's status tab in it."
        )
    schema = CONN_FIELDS[name]["schema"]
    if kind == "enum":
        expected = "one of " + ", ".join(repr(choice) for choice in schema["enum"])
    elif kind == "greater_than_equal":
        expected = f"{schema['minimum']} or more"
    elif kind == "greater_than":
        expected = f"more than {schema['exclusiveMinimum']}"
    elif "boolean" in schema["type"]:
        # pydantic's booleans, like Airflow's own settings, also read yes/no, on/off and 1/0.
        expected = "true or false (yes/no, on/off and 1/0 are read too)"
    elif "integer" in schema["type"]:
        expected = "a whole number"
    else:  # a number: of seconds where the label says "(s)"
        unit = " of seconds" if "(s)" in CONN_FIELDS[name]["label"] else ""
        # nan, inf, or a number too large for a float such as 1e309
        expected = f"a finite number{unit}" if kind == "finite_number" else f"a number{unit}"
    default = json.dumps(schema["default"])
    return (
        f"{_named(name)} must be {expected}, got {error['input']!r}. "
        f"Leave it empty for the default, {default}."
    )


def build_execution_url(template: str, kickoff_id: str) -> str:
    """The execution page URL: ``{kickoff_id}`` in ``template`` replaced by the URL-quoted id.

    ``str.replace`` rather than ``str.format``: other braces in a dashboard URL stay as they are.
    """
    return template.replace(KICKOFF_ID_PLACEHOLDER, quote(str(kickoff_id), safe=""))


# -- read from an Airflow connection ------------------------------------------------------------------


def connection_extra(connection: Any, *, invalid: str | None = None) -> dict[str, Any]:
    """A connection's extra (JSON text, a dict or empty) as a dict, read without Airflow's ``extra_dejson``.

    ``extra_dejson`` hands every value to Airflow's secret masker, which logs "Skipping masking for a
    secret as it's too short (<5 chars)" for any short string, secret or not: ``"true"``, ``"120"``
    (the URI form makes every extra a string). Airflow masked the extra as a whole when it fetched
    the connection; the one secret an extra read here holds, a ``crew`` extra's ``token``, is masked here.

    :param invalid: The error when the extra is not a JSON object; by default one naming the connection.
    """
    from airflow_provider_crew.exceptions import CrewConfigurationError

    raw = connection.extra or {}
    try:
        extra = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise CrewConfigurationError(
            invalid
            or f"Connection {connection.conn_id!r}: the extra is not a JSON object. Fix it, or leave it "
            "empty for the defaults."
        )
    for secret in (extra.get("token"), extra.get(_PREFIX + "token")):
        if secret and isinstance(secret, str):
            from airflow.providers.common.compat.sdk import mask_secret

            mask_secret(secret)
    return extra


def config_from_connection(
    connection: Any, conn_id: str, *, name_connection: bool = True
) -> CrewConnectionConfig:
    """Validate an Airflow connection into a config, or raise an error that names the field and the fix.

    The token is the password, else the extra ``token``; an empty extra takes the default.

    :param name_connection: Start errors with "Connection '<id>': ". Off for Airflow's Test action,
        which tests under a random id the user never chose.
    """
    from airflow_provider_crew.exceptions import CrewConfigurationError

    if connection.conn_type not in (CONN_TYPE, None, ""):
        raise CrewConfigurationError(
            f"Connection {conn_id!r} has type {connection.conn_type!r}; "
            f"the crew provider needs a connection of type {CONN_TYPE!r}."
        )
    fields: dict[str, Any] = {}
    # An extra is read under its name, else with the old form's prefix (extra__crew__read_timeout):
    # the prefixed ones come first, so that a name without the prefix wins. Empty: the default.
    extra = connection_extra(connection)
    for key in sorted(extra, key=lambda key: not key.startswith(_PREFIX)):
        value = extra[key].strip() if isinstance(extra[key], str) else extra[key]
        if value not in (None, ""):
            fields[key.removeprefix(_PREFIX)] = value
    try:
        fields["base_url"] = normalise_base_url(connection.host, port=connection.port, path=connection.schema)
        if connection.password and connection.password.strip():
            fields["token"] = connection.password.strip()
        return CrewConnectionConfig.model_validate(fields)
    except ValidationError as invalid:
        message = _message(invalid.errors()[0])
    except CrewConnectionError as error:
        message = str(error)
    raise CrewConfigurationError(
        f"Connection {conn_id!r}: {message}" if name_connection else message
    ) from None


def unread_extras(connection: Any) -> str | None:
    """The extras of ``connection`` the provider does not read, each with the name it may mean: a
    misspelt ``read_timout`` is ignored, and its default used, without a word otherwise."""
    import difflib

    known = [*CONN_FIELDS, "token"]
    unread = []
    for key in connection_extra(connection):
        if (name := key.removeprefix(_PREFIX)) not in known:
            close = difflib.get_close_matches(name, known, n=1)
            unread.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"Extras the crew provider does not read: {', '.join(unread)}." if unread else None


def not_defined_where_this_runs(conn_id: str) -> CrewConfigurationError:
    """The error for a lookup of ``conn_id`` that Airflow did not find: where to define it (every lookup
    of the provider's, in a task, a trigger or the api-server, says the same)."""
    from airflow_provider_crew.exceptions import CrewConfigurationError

    return CrewConfigurationError(
        f"Connection {conn_id!r} is not defined where this runs. Define it for every Airflow component "
        f"that uses it (workers and the triggerer): UI, AIRFLOW_CONN_{conn_id.upper()}, or a secrets "
        "backend."
    )


@contextmanager
def defined_where_this_runs(conn_id: str) -> Iterator[None]:
    """Around a lookup of ``conn_id``: Airflow's not-found error becomes the one that says where to
    define it (:func:`not_defined_where_this_runs`)."""
    from airflow_provider_crew._compat import AirflowNotFoundException

    try:
        yield
    except AirflowNotFoundException:
        raise not_defined_where_this_runs(conn_id) from None
