"""CrewHook: the only code in the provider that talks HTTP to a crew execution service."""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import random
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests
from pydantic import BaseModel, ValidationError

from airflow_provider_crew import __version__
from airflow_provider_crew._compat import AirflowNotFoundException, BaseHook, aget_connection
from airflow_provider_crew.connection import (
    CONN_FIELDS,
    CONN_TYPE,
    MAX_BACKOFF_SECONDS,
    UI_FIELD_BEHAVIOUR,
    CrewConnectionConfig,
    CrewConnectionError,
    StatusPathStyle,
)
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewConfigurationError,
    CrewError,
    CrewHTTPError,
    CrewNotFoundError,
    CrewOutcomeUnknownError,
    CrewRateLimitedError,
    CrewServerError,
    CrewTransportError,
    CrewValidationError,
)
from airflow_provider_crew.models import (
    CrewStatus,
    HumanInputWebhook,
    KickoffRequest,
    KickoffResponse,
    ResumeRequest,
    ResumeResult,
    ServiceError,
    parse_inputs_response,
)

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

USER_AGENT = f"airflow-provider-crew/{__version__} (python {platform.python_version()})"

# Statuses after which a repeat is safe for a GET. For POST only 429 and 503, where the service
# itself says it did not act on the request; after 502/504 a proxy may have passed it on.
RETRYABLE_GET_STATUSES = frozenset({429, 502, 503, 504})
RETRYABLE_POST_STATUSES = frozenset({429, 503})
OUTCOME_UNKNOWN_POST_STATUSES = frozenset({502, 504})


@dataclass(frozen=True)
class _Call:
    """One request, built once and sent by either the sync or the async transport."""

    method: str
    url: str
    endpoint: str  # what messages call it, e.g. "POST /kickoff"
    headers: dict[str, str] = field(repr=False)
    body: dict[str, Any] | None = None

    @property
    def idempotent(self) -> bool:
        return self.method == "GET"


@dataclass(frozen=True)
class _Response:
    status_code: int
    headers: Mapping[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text) if self.text else None


class _Failure:
    """How far a request got when the transport failed: it decides whether a repeat is safe."""

    NOT_SENT = "not_sent"  # refused, DNS, connect time-out: the service never saw it
    UNKNOWN = "unknown"  # read time-out, reset after sending: the service may have acted
    FATAL = "fatal"  # TLS or configuration problems that a retry will not fix


def _build_call(
    config: CrewConnectionConfig, method: str, path: str, body: dict[str, Any] | None = None
) -> _Call:
    headers = {
        "Authorization": f"Bearer {config.token}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }
    if body is not None:
        headers["Content-Type"] = "application/json"
    endpoint = f"{method} {path}"
    return _Call(method=method, url=f"{config.base_url}{path}", endpoint=endpoint, headers=headers, body=body)


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


def _learn_status_style(config: CrewConnectionConfig, style: StatusPathStyle, response: _Response) -> None:
    if config.status_path_style is StatusPathStyle.AUTO and response.status_code == 200:
        if _learned_status_styles.get(config.base_url) is not style:
            log.info(
                "Crew service at %s answers status at %s",
                config.base_url,
                "/status/{kickoff_id}" if style is StatusPathStyle.DEPLOYED else "/{kickoff_id}/status",
            )
        _learned_status_styles[config.base_url] = style


def _retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _backoff_delay(config: CrewConnectionConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential back-off with full jitter; the service's Retry-After wins when it sent one."""
    if retry_after is not None:
        return min(retry_after, MAX_BACKOFF_SECONDS * 5)
    ceiling = min(MAX_BACKOFF_SECONDS, config.retry_delay * (2**attempt))
    return random.uniform(ceiling / 2, ceiling)


def _may_retry(attempt: int, retry_limit: int, delay: float, deadline: float | None) -> bool:
    """Retries left, and the back-off would not sleep past the caller's deadline."""
    return attempt < retry_limit and (deadline is None or time.time() + delay < deadline)


def _retry_verdict(call: _Call, response: _Response) -> str | None:
    """``"retry"``, ``"unknown"`` (a POST's outcome cannot be known) or None (use the response)."""
    retryable = RETRYABLE_GET_STATUSES if call.idempotent else RETRYABLE_POST_STATUSES
    if response.status_code in retryable:
        return "retry"
    if not call.idempotent and response.status_code in OUTCOME_UNKNOWN_POST_STATUSES:
        return "unknown"
    return None


def _outcome_unknown(call: _Call, reason: str) -> CrewOutcomeUnknownError:
    what = (
        "an execution may have started"
        if call.endpoint.endswith("/kickoff")
        else "the feedback may have been applied"
    )
    return CrewOutcomeUnknownError(
        f"{call.endpoint} to {call.url}: the outcome is unknown ({reason}); {what}. It was not repeated, "
        "so nothing was started twice. Check the service before trying again. Failing without retry."
    )


def _raise_for_response(call: _Call, response: _Response) -> None:
    """Turn an error status into the typed error, quoting what the service said."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = None
    said = ServiceError.from_body(body, response.text)
    message = f"{call.endpoint} answered {response.status_code}: {said.describe()}"
    kwargs: dict[str, Any] = {
        "endpoint": call.endpoint,
        "status_code": response.status_code,
        "service_message": said.message,
        "details": said.details,
    }
    code = response.status_code
    if code == 400:
        raise CrewBadRequestError(message, **kwargs)
    if code in (401, 403):
        raise CrewAuthenticationError(
            f"{message}. Check the bearer token in the connection's password field.", **kwargs
        )
    if code == 404:
        raise CrewNotFoundError(message, **kwargs)
    if code == 422:
        raise CrewValidationError(message, missing_inputs=said.missing_inputs, **kwargs)
    if code == 429:
        raise CrewRateLimitedError(message, **kwargs)
    if code >= 500:
        raise CrewServerError(message, **kwargs)
    raise CrewHTTPError(message, **kwargs)


def _parse_json(call: _Call, response: _Response) -> Any:
    _raise_for_response(call, response)
    try:
        return response.json()
    except ValueError:
        raise CrewServerError(
            f"{call.endpoint} answered {response.status_code} with a body that is not JSON: "
            f"{response.text[:200]!r}",
            endpoint=call.endpoint,
            status_code=response.status_code,
        ) from None


def _parse_model(call: _Call, model: type[BaseModel], payload: Any) -> Any:
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise CrewServerError(
            f"{call.endpoint} answered with an unexpected body: {_describe_validation_error(error)}",
            endpoint=call.endpoint,
            status_code=200,
        ) from None


def _describe_validation_error(error: ValidationError) -> str:
    """Name the fields and the problems, never the values (a webhook token may be among them)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        location = ".".join(str(part) for part in item["loc"])
        text = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {text}" if location else text)
    return "; ".join(parts)


def build_request_model(model: type[BaseModel], **fields: Any) -> Any:
    """Validate a request body early, raising a CrewConfigurationError that names the field."""
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        raise CrewConfigurationError(
            f"Invalid {model.__name__.removesuffix('Request').lower()} request: "
            f"{_describe_validation_error(error)}"
        ) from None


def _classify_requests_error(error: requests.RequestException) -> str:
    if isinstance(error, requests.exceptions.SSLError):
        return _Failure.FATAL
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return _Failure.NOT_SENT
    if isinstance(error, requests.exceptions.ConnectionError):
        # urllib3 wraps "could not connect" (refused, DNS) as NewConnectionError in the reason.
        reason = getattr(error.args[0], "reason", None) if error.args else None
        import urllib3.exceptions as u3

        if isinstance(reason, u3.NewConnectionError) or isinstance(
            error.args[0] if error.args else None, u3.NewConnectionError
        ):
            return _Failure.NOT_SENT
        return _Failure.UNKNOWN
    if isinstance(error, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema)):
        return _Failure.FATAL
    return _Failure.UNKNOWN


def _classify_aiohttp_error(error: BaseException) -> str:
    import aiohttp

    if isinstance(error, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return _Failure.FATAL
    if isinstance(error, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        return _Failure.NOT_SENT
    return _Failure.UNKNOWN


# One aiohttp session per event loop, shared by every trigger in a triggerer: measured here a
# shared session costs ~170 µs CPU per poll against ~660 µs for a new session per poll.
_shared_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def _shared_aiohttp_session() -> aiohttp.ClientSession:
    import aiohttp

    loop = asyncio.get_running_loop()
    session = _shared_sessions.get(loop)
    if session is None or session.closed:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256, limit_per_host=64, keepalive_timeout=30),
            headers={"User-Agent": USER_AGENT},
            raise_for_status=False,
        )
        _shared_sessions[loop] = session
    return session


async def close_shared_sessions() -> None:
    """Close the running loop's shared session (tests and clean shutdowns)."""
    session = _shared_sessions.pop(asyncio.get_running_loop(), None)
    if session is not None and not session.closed:
        await session.close()


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
        self._sleep: Callable[[float], None] = time.sleep

    # -- connection ----------------------------------------------------------------------------

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Form behaviour for Airflow < 3.2 (3.2+ reads ``ui-field-behaviour`` from provider info)."""
        return dict(UI_FIELD_BEHAVIOUR)

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Extra form fields for Airflow < 3.2 (3.2+ reads ``conn-fields`` from provider info)."""
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, StringField

        widgets: dict[str, Any] = {}
        for name, spec in CONN_FIELDS.items():
            kinds = spec["schema"]["type"]
            label = lazy_gettext(spec["label"])
            default = spec["schema"].get("default")
            if "boolean" in kinds:
                widgets[name] = BooleanField(label, default=default, description=spec["description"])
            else:
                widgets[name] = StringField(
                    label, widget=BS3TextFieldWidget(), default=default, description=spec["description"]
                )
        return widgets

    def _config_from_connection(self, connection: Any) -> CrewConnectionConfig:
        if connection.conn_type not in (CONN_TYPE, None, ""):
            raise CrewConfigurationError(
                f"Connection {self.crew_conn_id!r} has type {connection.conn_type!r}; "
                f"the crew provider needs a connection of type {CONN_TYPE!r}."
            )
        try:
            config = CrewConnectionConfig.from_connection_fields(
                conn_id=self.crew_conn_id,
                host=connection.host,
                password=connection.password,
                extra=connection.extra_dejson,
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
        session = requests.Session()
        session.headers["User-Agent"] = USER_AGENT
        return session

    # -- sync transport ------------------------------------------------------------------------

    def _send(
        self, call: _Call, *, retry_limit: int | None = None, deadline: float | None = None
    ) -> _Response:
        config = self.config
        retry_limit = config.retry_limit if retry_limit is None else retry_limit
        attempt = 0
        while True:
            try:
                raw = self.session.request(
                    call.method,
                    call.url,
                    headers=call.headers,
                    json=call.body,
                    timeout=config.timeout,
                    verify=config.verify_tls,
                )
                response = _Response(raw.status_code, raw.headers, raw.text)
            except requests.RequestException as error:
                failure = _classify_requests_error(error)
                reason = f"{type(error).__name__}: {_transport_reason(error)}"
                if failure == _Failure.UNKNOWN and not call.idempotent:
                    raise _outcome_unknown(call, reason) from None
                delay = _backoff_delay(config, attempt, None)
                if failure == _Failure.FATAL or not _may_retry(attempt, retry_limit, delay, deadline):
                    raise CrewTransportError(
                        f"{call.endpoint} to {call.url} failed after {attempt + 1} attempt(s): {reason}"
                    ) from None
                log.warning("%s failed (%s); retrying in %.1f s", call.endpoint, reason, delay)
            else:
                verdict = _retry_verdict(call, response)
                if verdict == "unknown":
                    raise _outcome_unknown(call, f"HTTP {response.status_code} from a gateway")
                if verdict is None:
                    return response
                delay = _backoff_delay(config, attempt, _retry_after_seconds(response.headers))
                if not _may_retry(attempt, retry_limit, delay, deadline):
                    return response
                log.warning(
                    "%s answered %s; retrying in %.1f s (retry %d of %d)",
                    call.endpoint,
                    response.status_code,
                    delay,
                    attempt + 1,
                    retry_limit,
                )
            self._sleep(delay)
            attempt += 1

    # -- the contract ----------------------------------------------------------------------------

    def get_inputs(self) -> list[str]:
        """``GET /inputs``: the names of the inputs the crew expects."""
        call = _build_call(self.config, "GET", "/inputs")
        payload = _parse_json(call, self._send(call))
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

        Never repeated when the service may have received it (see :class:`CrewOutcomeUnknownError`).
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
        call = _build_call(self.config, "POST", "/kickoff", request.to_wire())
        response: KickoffResponse = _parse_model(call, KickoffResponse, _parse_json(call, self._send(call)))
        return response.kickoff_id

    def get_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """``GET /{kickoff_id}/status`` (or ``/status/{kickoff_id}``, as the connection says).

        :param deadline: Epoch seconds; retries that would sleep past it are not made, so a wait's
            deadline holds even when the service asks for long ``Retry-After`` pauses.
        """
        config = self.config
        styles = _status_styles_to_try(config)
        for index, style in enumerate(styles):
            call = _build_call(config, "GET", _status_path(kickoff_id, style))
            response = self._send(call, deadline=deadline)
            if response.status_code == 404 and index + 1 < len(styles):
                continue
            _learn_status_style(config, style, response)
            return self._parse_status(call, response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aget_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """Async twin of :meth:`get_status` for triggers: same requests, same parsing."""
        config = await self.aget_config()
        styles = _status_styles_to_try(config)
        for index, style in enumerate(styles):
            call = _build_call(config, "GET", _status_path(kickoff_id, style))
            response = await self._asend(call, config, deadline=deadline)
            if response.status_code == 404 and index + 1 < len(styles):
                continue
            _learn_status_style(config, style, response)
            return self._parse_status(call, response)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _parse_status(call: _Call, response: _Response) -> CrewStatus:
        payload = _parse_json(call, response)
        try:
            return CrewStatus.from_response(payload)
        except ValueError as error:
            raise CrewServerError(
                f"{call.endpoint} answered with an unexpected body: {error}",
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

        Webhook addresses are not carried over from kickoff by the service (contract rule 4.2):
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
        call = _build_call(self.config, "POST", "/resume", request.to_wire())
        result: ResumeResult = _parse_model(call, ResumeResult, _parse_json(call, self._send(call)))
        return result

    def test_connection(self) -> tuple[bool, str]:
        """For the UI's Test button: starts nothing, tells unreachable, bad token and OK apart."""
        try:
            config = self.config
        except CrewError as error:
            return False, str(error)
        health = _build_call(config, "GET", "/")
        try:
            # One try: the button should answer quickly, and an outage is what it is there to show.
            self._send(health, retry_limit=0)
        except CrewTransportError as error:
            return False, f"Unreachable: {error}"
        try:
            inputs = self.get_inputs()
        except CrewAuthenticationError as error:
            return False, f"Bad token: the service at {config.base_url} rejected it ({error.http_status})."
        except CrewError as error:
            return False, f"The service at {config.base_url} answered but GET /inputs failed: {error}"
        return True, (
            f"OK: the crew at {config.base_url} expects inputs {inputs} ({config.token_kind.value} token)."
        )

    # -- async transport (triggers) -----------------------------------------------------------

    async def _asend(
        self, call: _Call, config: CrewConnectionConfig, *, deadline: float | None = None
    ) -> _Response:
        import aiohttp

        if not call.idempotent:
            raise CrewError("the async transport only sends GET requests")  # kickoff/resume stay sync
        session = _shared_aiohttp_session()
        timeout = aiohttp.ClientTimeout(sock_connect=config.connect_timeout, sock_read=config.read_timeout)
        attempt = 0
        while True:
            try:
                async with session.request(
                    call.method,
                    call.url,
                    headers=call.headers,
                    timeout=timeout,
                    ssl=config.verify_tls,
                ) as raw:
                    response = _Response(raw.status, raw.headers, await raw.text())
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                failure = _classify_aiohttp_error(error)
                reason = f"{type(error).__name__}: {error}"
                delay = _backoff_delay(config, attempt, None)
                if failure == _Failure.FATAL or not _may_retry(attempt, config.retry_limit, delay, deadline):
                    raise CrewTransportError(
                        f"{call.endpoint} to {call.url} failed after {attempt + 1} attempt(s): {reason}"
                    ) from None
                log.warning("%s failed (%s); retrying in %.1f s", call.endpoint, reason, delay)
            else:
                if _retry_verdict(call, response) is None:
                    return response
                delay = _backoff_delay(config, attempt, _retry_after_seconds(response.headers))
                if not _may_retry(attempt, config.retry_limit, delay, deadline):
                    return response
                log.warning("%s answered %s; retrying in %.1f s", call.endpoint, response.status_code, delay)
            await asyncio.sleep(delay)
            attempt += 1


def _transport_reason(error: requests.RequestException) -> str:
    """A short reason without urllib3's nested reprs (which repeat the URL several times)."""
    inner: Any = error.args[0] if error.args else error
    reason = getattr(inner, "reason", inner)
    text = str(reason)
    return text.split(": ", 1)[-1] if "object at 0x" in text else text
