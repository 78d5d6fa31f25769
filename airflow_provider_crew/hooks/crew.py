"""CrewHook: the contract's four calls (inputs, kickoff, status, resume) and the connection test.

How a request travels (time bound, body cap, redirects, sync and async) is in :mod:`.transport`;
whether it is repeated is decided by :mod:`.retry`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_provider_crew import __version__
from airflow_provider_crew._compat import AirflowNotFoundException, BaseHook, aget_connection
from airflow_provider_crew.connection import (
    CONN_FIELDS,
    CONN_TYPE,
    TOKEN_LABEL,
    UI_FIELD_BEHAVIOUR,
    CrewConnectionConfig,
    CrewConnectionError,
    StatusPathStyle,
)
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewConfigurationError,
    CrewError,
    CrewServerError,
    CrewTransportError,
)
from airflow_provider_crew.hooks.answers import build_request_model, parse_json, read_post_answer
from airflow_provider_crew.hooks.retry import RetryPolicy, asend_with_retries, send_with_retries
from airflow_provider_crew.hooks.transport import (
    ACCEPT_ENCODING,
    AsyncTransport,
    Call,
    Response,
    SyncTransport,
    close_shared_sessions,
)
from airflow_provider_crew.models import (
    CrewStatus,
    HumanInputWebhook,
    KickoffRequest,
    KickoffResponse,
    ResumeRequest,
    ResumeResult,
    parse_inputs_response,
)

if TYPE_CHECKING:
    import requests  # imported by the session property: DAG files never need it at parse time

__all__ = ["USER_AGENT", "CrewHook", "build_request_model", "close_shared_sessions"]

log = logging.getLogger(__name__)

USER_AGENT = f"airflow-provider-crew/{__version__} (python {platform.python_version()})"

# What a call's failure means for the caller; appended to its errors.
_KICKOFF_CONSEQUENCE = "An execution may have started; the kickoff was not repeated."
_RESUME_CONSEQUENCE = "The feedback may have been applied; the resume was not repeated."


def _headers(config: CrewConnectionConfig, *, with_body: bool = False) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {config.token}",
        "Accept": "application/json",
        "Accept-Encoding": ACCEPT_ENCODING,
        "User-Agent": USER_AGENT,
    }
    if with_body:
        headers["Content-Type"] = "application/json"
    return headers


def _build_call(
    config: CrewConnectionConfig,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    *,
    consequence: str = "",
) -> Call:
    headers = _headers(config, with_body=body is not None)
    return Call(
        method=method,
        url=f"{config.base_url}{path}",
        endpoint=f"{method} {path}",
        headers=headers,
        body=body,
        consequence=consequence,
    )


def _status_consequence(kickoff_id: str) -> str:
    return f"Crew execution {kickoff_id} may still be running: only reading its status failed."


def _status_path(kickoff_id: str, style: StatusPathStyle) -> str:
    quoted = quote(kickoff_id, safe="")
    return f"/status/{quoted}" if style is StatusPathStyle.DEPLOYED else f"/{quoted}/status"


# Learned per base URL in `auto` mode, shared by every hook and trigger in the process.
_learned_status_styles: dict[str, StatusPathStyle] = {}


def _status_styles_to_try(config: CrewConnectionConfig) -> list[StatusPathStyle]:
    if config.status_path_style is not StatusPathStyle.AUTO:
        return [config.status_path_style]
    learned = _learned_status_styles.get(config.base_url)
    if learned is not None:
        return [learned]
    return [StatusPathStyle.CONTRACT, StatusPathStyle.DEPLOYED]


def _learn_status_style(config: CrewConnectionConfig, style: StatusPathStyle, response: Response) -> None:
    if config.status_path_style is StatusPathStyle.AUTO and response.status_code == 200:
        if _learned_status_styles.get(config.base_url) is not style:
            log.info(
                "Crew service at %s answers status at %s",
                config.base_url,
                "/status/{kickoff_id}" if style is StatusPathStyle.DEPLOYED else "/{kickoff_id}/status",
            )
        _learned_status_styles[config.base_url] = style


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


class CrewHook(BaseHook):
    """
    Talk to one deployed crew: list its inputs, start executions, read their status, resume them.

    :param crew_conn_id: The ``crew`` connection: host = the crew's base URL, password = bearer token.
    :param retry_limit: Overrides the connection's retry limit.
    :param retry_delay: Overrides the connection's first back-off delay, in seconds.
    """

    conn_name_attr = "crew_conn_id"
    default_conn_name = "crew_default"
    conn_type = CONN_TYPE
    hook_name = "Crew"

    def __init__(
        self,
        crew_conn_id: str = default_conn_name,
        *,
        retry_limit: int | None = None,
        retry_delay: float | None = None,
    ) -> None:
        super().__init__()
        self.crew_conn_id = crew_conn_id
        self._retry_limit = retry_limit
        self._retry_delay = retry_delay
        self._async_config: CrewConnectionConfig | None = None
        # Seams for tests: sleeping and the clock the retry policy reads (epoch seconds).
        self._sleep: Callable[[float], None] = time.sleep
        self._clock: Callable[[], float] = time.time
        # A trigger polls one execution through one hook: its request is built once, not per poll.
        self._status_calls: dict[tuple[str, StatusPathStyle], Call] = {}

    # -- connection ----------------------------------------------------------------------------

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Form behaviour for Airflow < 3.2 (3.2+ reads ``ui-field-behaviour`` from provider info)."""
        return dict(UI_FIELD_BEHAVIOUR)

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra form fields for Airflow < 3.2 (3.2+ reads ``conn-fields`` from provider info).

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

    def _config_from_connection(
        self, connection: Any, *, name_connection: bool = True
    ) -> CrewConnectionConfig:
        """Validate ``connection`` into a config; errors name the field and, by default, the connection.

        :param connection: An Airflow connection of type ``crew``.
        :param name_connection: Start errors with "Connection '<id>': ". Off for Airflow's Test
            action, which tests under a random id the user never chose.
        """
        if connection.conn_type not in (CONN_TYPE, None, ""):
            raise CrewConfigurationError(
                f"Connection {self.crew_conn_id!r} has type {connection.conn_type!r}; "
                f"the crew provider needs a connection of type {CONN_TYPE!r}."
            )
        try:
            config = CrewConnectionConfig.from_connection_fields(
                conn_id=self.crew_conn_id if name_connection else None,
                host=connection.host,
                password=connection.password,
                extra=connection_extra(connection),
                schema=connection.schema,
                port=connection.port,
            )
        except CrewConnectionError as error:
            raise CrewConfigurationError(str(error)) from None
        overrides: dict[str, Any] = {}
        if self._retry_limit is not None:
            overrides["retry_limit"] = self._retry_limit
        if self._retry_delay is not None:
            overrides["retry_delay"] = self._retry_delay
        if overrides:
            from dataclasses import replace

            config = replace(config, **overrides)
        return config

    @cached_property
    def config(self) -> CrewConnectionConfig:
        """The validated connection settings (looked up once per hook)."""
        try:
            connection = self.get_connection(self.crew_conn_id)
        except AirflowNotFoundException:
            raise self._missing_connection() from None
        return self._config_from_connection(connection)

    async def aget_config(self) -> CrewConnectionConfig:
        """The same settings, looked up without blocking the event loop."""
        if self._async_config is None:
            try:
                connection = await aget_connection(self.crew_conn_id)
            except AirflowNotFoundException:
                raise self._missing_connection() from None
            self._async_config = self._config_from_connection(connection)
        return self._async_config

    def _missing_connection(self) -> CrewConfigurationError:
        return CrewConfigurationError(
            f"Connection {self.crew_conn_id!r} is not defined where this runs. Define it for every "
            "Airflow component that uses it (workers and the triggerer): UI, AIRFLOW_CONN_"
            f"{self.crew_conn_id.upper()}, or a secrets backend."
        )

    def get_conn(self) -> requests.Session:
        """The hook's one ``requests.Session`` (connection pooling across calls)."""
        return self.session

    @cached_property
    def session(self) -> requests.Session:
        import requests

        session = requests.Session()
        session.headers["User-Agent"] = USER_AGENT
        return session

    # -- sending ----------------------------------------------------------------------------------

    def _send(self, call: Call, *, retry_limit: int | None = None, deadline: float | None = None) -> Response:
        """Send ``call`` under the retry policy.

        :param retry_limit: At most this many retries of any kind (0: one try), on top of the policy.
        :param deadline: Epoch seconds; no attempt or retry is made to run past it.
        """
        policy = RetryPolicy(call, self.config, deadline=deadline, max_retries=retry_limit, clock=self._clock)
        return send_with_retries(SyncTransport(self.session).send, policy, self._sleep)

    async def _asend(
        self, call: Call, config: CrewConnectionConfig, *, deadline: float | None = None
    ) -> Response:
        return await _asend(call, config, deadline=deadline, clock=self._clock)

    # -- the contract ----------------------------------------------------------------------------

    def get_inputs(self) -> list[str]:
        """``GET /inputs``: the names of the inputs the crew expects."""
        call = _build_call(self.config, "GET", "/inputs")
        payload = parse_json(call, self._send(call))
        try:
            return parse_inputs_response(payload)
        except ValueError as error:
            raise CrewServerError(
                f"{call.endpoint} answered with an unexpected body: {error}",
                endpoint=call.endpoint,
                status_code=200,
            ) from None

    def kickoff(
        self,
        inputs: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
        human_input_webhook: HumanInputWebhook | Mapping[str, Any] | None = None,
    ) -> str:
        """``POST /kickoff``: start an execution and return its ``kickoff_id``.

        Never repeated when the service may have received it (see
        :class:`~airflow_provider_crew.exceptions.CrewOutcomeUnknownError`).
        """
        request = build_request_model(
            KickoffRequest,
            inputs=inputs,
            meta=meta,
            task_webhook_url=task_webhook_url,
            step_webhook_url=step_webhook_url,
            crew_webhook_url=crew_webhook_url,
            human_input_webhook=human_input_webhook,
        )
        call = _build_call(
            self.config, "POST", "/kickoff", request.to_wire(), consequence=_KICKOFF_CONSEQUENCE
        )
        response: KickoffResponse = read_post_answer(call, self._send(call), KickoffResponse)
        return response.kickoff_id

    def get_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """``GET /{kickoff_id}/status`` (or ``/status/{kickoff_id}``, as the connection says).

        :param deadline: Epoch seconds; retries that would sleep past it are not made, so a wait's
            deadline holds even when the service asks for long ``Retry-After`` pauses.
        """
        config = self.config
        styles = _status_styles_to_try(config)
        for index, style in enumerate(styles):
            call = self._status_call(config, kickoff_id, style)
            response = self._send(call, deadline=deadline)
            if response.status_code == 404 and index + 1 < len(styles):
                continue
            _learn_status_style(config, style, response)
            return self._parse_status(call, response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aget_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """Async twin of :meth:`get_status` for triggers: same requests, same parsing."""
        config = await self.aget_config()
        return await _aread_status(
            config,
            kickoff_id,
            lambda style: self._status_call(config, kickoff_id, style),
            deadline=deadline,
            clock=self._clock,
        )

    def _status_call(self, config: CrewConnectionConfig, kickoff_id: str, style: StatusPathStyle) -> Call:
        call = self._status_calls.get((kickoff_id, style))
        if call is None:
            path = _status_path(kickoff_id, style)
            call = _build_call(config, "GET", path, consequence=_status_consequence(kickoff_id))
            if len(self._status_calls) > 64:  # a hook reused for many executions stays small
                self._status_calls.clear()
            self._status_calls[(kickoff_id, style)] = call
        return call

    @staticmethod
    def _parse_status(call: Call, response: Response) -> CrewStatus:
        payload = parse_json(call, response)
        try:
            return CrewStatus.from_response(payload)
        except ValueError as error:
            raise CrewServerError(
                call.explain(f"{call.endpoint} answered with an unexpected body: {error}"),
                endpoint=call.endpoint,
                status_code=200,
            ) from None

    def resume(
        self,
        execution_id: str,
        task_id: str,
        human_feedback: str,
        is_approve: bool,
        *,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
    ) -> ResumeResult:
        """``POST /resume``: send human feedback to an execution paused in Pending Human Input.

        Webhook addresses are not carried over from kickoff by the service (docs/contract.md):
        pass them again to keep receiving notifications.
        """
        request = build_request_model(
            ResumeRequest,
            execution_id=execution_id,
            task_id=task_id,
            human_feedback=human_feedback,
            is_approve=is_approve,
            task_webhook_url=task_webhook_url,
            step_webhook_url=step_webhook_url,
            crew_webhook_url=crew_webhook_url,
        )
        call = _build_call(self.config, "POST", "/resume", request.to_wire(), consequence=_RESUME_CONSEQUENCE)
        result: ResumeResult = read_post_answer(call, self._send(call), ResumeResult)
        return result

    def test_connection(self) -> tuple[bool, str]:
        """For Airflow's Test action: ``GET /`` then ``GET /inputs``; starts nothing.

        Tells bad settings, an unreachable service, a rejected token and OK apart. Airflow runs this
        under a random connection id, so the messages name the URL and the fields, never the id.

        :return: (success, message for the person who clicked Test).
        """
        try:
            connection = self.get_connection(self.crew_conn_id)
            config = self._config_from_connection(connection, name_connection=False)
        except AirflowNotFoundException:
            return False, str(self._missing_connection())
        except CrewError as error:
            return False, str(error)
        # The calls below read self.config: give it the config just validated, not a second lookup.
        self.__dict__["config"] = config
        health = _build_call(config, "GET", "/")
        try:
            # One try: the action should answer quickly, and an outage is what it is there to show.
            self._send(health, retry_limit=0)
        except CrewTransportError as error:
            return False, f"Unreachable: {error}"
        try:
            inputs = self.get_inputs()
        except CrewAuthenticationError as error:
            return False, (
                f"Bad token: the crew at {config.base_url} rejected the token ({error.http_status}). Put "
                f"the token from the crew's status tab in '{TOKEN_LABEL}'."
            )
        except CrewError as error:
            return False, f"The crew at {config.base_url} answered GET / but GET /inputs failed: {error}"
        return True, (
            f"OK: the crew at {config.base_url} expects inputs {inputs} "
            f"({config.credential_kind.value} token)."
        )


# -- the triggers' async path: shared by every wait in an event loop ---------------------------------

_ASYNC_TRANSPORT = AsyncTransport(USER_AGENT)


async def _asend(
    call: Call, config: CrewConnectionConfig, *, deadline: float | None, clock: Callable[[], float]
) -> Response:
    if not call.idempotent:
        raise CrewError("the async transport only sends GET requests")  # kickoff/resume stay sync
    policy = RetryPolicy(call, config, deadline=deadline, clock=clock)
    return await asend_with_retries(_ASYNC_TRANSPORT.send, policy)


async def _aread_status(
    config: CrewConnectionConfig,
    kickoff_id: str,
    call_for: Callable[[StatusPathStyle], Call],
    *,
    deadline: float | None,
    clock: Callable[[], float] = time.time,
) -> CrewStatus:
    styles = _status_styles_to_try(config)
    for index, style in enumerate(styles):
        call = call_for(style)
        response = await _asend(call, config, deadline=deadline, clock=clock)
        if response.status_code == 404 and index + 1 < len(styles):
            continue
        _learn_status_style(config, style, response)
        return CrewHook._parse_status(call, response)
    raise AssertionError("unreachable")  # pragma: no cover


# How long a connection looked up for the waits of an event loop is used before it is looked up
# again: a rotated token or a moved service is picked up within this long.
CONNECTION_TTL_SECONDS = 60.0


@dataclass(slots=True)
class SharedConnection:
    """A connection's settings as every wait in one event loop uses them, until ``expires``."""

    conn_id: str
    config: CrewConnectionConfig
    headers: dict[str, str]  # a status request's headers, shared by every wait's requests
    expires: float  # loop.time()

    def status_call(self, kickoff_id: str, style: StatusPathStyle) -> Call:
        path = _status_path(kickoff_id, style)
        return Call(
            method="GET",
            url=f"{self.config.base_url}{path}",
            endpoint=f"GET {path}",
            headers=self.headers,
            consequence=_status_consequence(kickoff_id),
        )


# Per event loop (the triggerer runs one): conn_id -> the connection, or the lookup in flight.
_loop_connections: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, SharedConnection | asyncio.Task[SharedConnection]]
] = weakref.WeakKeyDictionary()


async def shared_connection(conn_id: str, *, ttl: float | None = None) -> SharedConnection:
    """``conn_id`` looked up once per event loop and ``ttl`` seconds, for every wait that uses it.

    Waits that ask while a lookup is in flight share it; a failed lookup is not kept (the next
    call looks up again). Connection errors raise as :meth:`CrewHook.aget_config` raises them.
    """
    loop = asyncio.get_running_loop()
    connections = _loop_connections.get(loop)
    if connections is None:
        connections = _loop_connections[loop] = {}
    entry = connections.get(conn_id)
    if isinstance(entry, SharedConnection) and entry.expires > loop.time():
        return entry
    if not isinstance(entry, asyncio.Task):
        lifetime = CONNECTION_TTL_SECONDS if ttl is None else ttl
        entry = loop.create_task(_look_up(conn_id, lifetime, connections))
        connections[conn_id] = entry
    # shield: a wait cancelled meanwhile does not cancel the lookup the other waits share.
    return await asyncio.shield(entry)


async def _look_up(
    conn_id: str, ttl: float, connections: dict[str, SharedConnection | asyncio.Task[SharedConnection]]
) -> SharedConnection:
    this = asyncio.current_task()
    try:
        config = await CrewHook(crew_conn_id=conn_id).aget_config()
    except BaseException:
        if connections.get(conn_id) is this:
            del connections[conn_id]
        raise
    shared = SharedConnection(conn_id, config, _headers(config), asyncio.get_running_loop().time() + ttl)
    connections[conn_id] = shared
    return shared


def forget_shared_connections() -> None:
    """Drop the running loop's looked-up connections (tests)."""
    _loop_connections.pop(asyncio.get_running_loop(), None)


async def aget_status_shared(
    connection: SharedConnection, kickoff_id: str, *, deadline: float | None = None
) -> CrewStatus:
    """:meth:`CrewHook.aget_status` for a wait in a triggerer, with its loop's shared connection."""
    return await _aread_status(
        connection.config,
        kickoff_id,
        lambda style: connection.status_call(kickoff_id, style),
        deadline=deadline,
    )
