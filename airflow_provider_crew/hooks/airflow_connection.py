"""The ``crew`` connection as Airflow holds it: its extra, its validated settings, its form fields.

What the fields mean and how they are checked is :mod:`airflow_provider_crew.connection` (no
Airflow import); this module reads them out of an Airflow connection.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from airflow_provider_crew._compat import AirflowNotFoundException, aget_connection
from airflow_provider_crew.connection import (
    CONN_FIELDS,
    CONN_TYPE,
    CrewConnectionConfig,
    CrewConnectionError,
)
from airflow_provider_crew.exceptions import CrewConfigurationError


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
    connection: Any,
    conn_id: str,
    *,
    name_connection: bool = True,
    retry_limit: int | None = None,
    retry_delay: float | None = None,
) -> CrewConnectionConfig:
    """Validate ``connection`` into a config; errors name the field and, by default, the connection.

    :param connection: An Airflow connection of type ``crew``.
    :param conn_id: The id it was looked up by.
    :param name_connection: Start errors with "Connection '<id>': ". Off for Airflow's Test
        action, which tests under a random id the user never chose.
    :param retry_limit: Overrides the connection's retry limit.
    :param retry_delay: Overrides the connection's first back-off delay, in seconds.
    """
    if connection.conn_type not in (CONN_TYPE, None, ""):
        raise CrewConfigurationError(
            f"Connection {conn_id!r} has type {connection.conn_type!r}; "
            f"the crew provider needs a connection of type {CONN_TYPE!r}."
        )
    try:
        config = CrewConnectionConfig.from_connection_fields(
            conn_id=conn_id if name_connection else None,
            host=connection.host,
            password=connection.password,
            extra=connection_extra(connection),
            schema=connection.schema,
            port=connection.port,
        )
    except CrewConnectionError as error:
        raise CrewConfigurationError(str(error)) from None
    overrides: dict[str, Any] = {}
    if retry_limit is not None:
        overrides["retry_limit"] = retry_limit
    if retry_delay is not None:
        overrides["retry_delay"] = retry_delay
    return replace(config, **overrides) if overrides else config


def missing_connection(conn_id: str) -> CrewConfigurationError:
    """The error for a connection not defined where this runs, with the ways to define it.

    :param conn_id: The connection's id.
    """
    return CrewConfigurationError(
        f"Connection {conn_id!r} is not defined where this runs. Define it for every "
        "Airflow component that uses it (workers and the triggerer): UI, AIRFLOW_CONN_"
        f"{conn_id.upper()}, or a secrets backend."
    )


async def aread_config(
    conn_id: str, *, retry_limit: int | None = None, retry_delay: float | None = None
) -> CrewConnectionConfig:
    """Look ``conn_id`` up without blocking the event loop and validate it.

    :param conn_id: The ``crew`` connection.
    :param retry_limit: Overrides the connection's retry limit.
    :param retry_delay: Overrides the connection's first back-off delay, in seconds.
    """
    try:
        connection = await aget_connection(conn_id)
    except AirflowNotFoundException:
        raise missing_connection(conn_id) from None
    return config_from_connection(connection, conn_id, retry_limit=retry_limit, retry_delay=retry_delay)


def connection_form_widgets() -> dict[str, Any]:
    """The connection form's extra fields for Airflow < 3.2 (3.2+ reads ``conn-fields`` from provider info).

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
