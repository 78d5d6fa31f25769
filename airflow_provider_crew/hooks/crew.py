"""CrewHook: the contract's four calls (inputs, kickoff, status, resume) and the connection test.

Where the rest lives, under ``hooks/``:

- ``airflow_connection``: the ``crew`` connection read from Airflow and validated; its form fields.
- ``calls``: a call's URL, headers and what its failure means; ``status_path``: the two status
  paths and the one each service answers at.
- ``transport``, ``sync_transport``, ``async_transport``, ``body``, ``redirects``: how a request
  travels, under a time bound and a body cap; ``retry``: whether it is repeated.
- ``answers``: reading the service's answers and errors.
- ``triggerer``: the triggers' async status reads, shared by every wait in an event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import AirflowNotFoundException, BaseHook
from airflow_provider_crew.connection import (
    CONN_TYPE,
    TOKEN_LABEL,
    UI_FIELD_BEHAVIOUR,
    CrewConnectionConfig,
    StatusPathStyle,
)
from airflow_provider_crew.exceptions import CrewAuthenticationError, CrewError, CrewTransportError
from airflow_provider_crew.hooks.airflow_connection import (
    aread_config,
    config_from_connection,
    connection_extra,
    connection_form_widgets,
    extra_as_dict,
    missing_connection,
)
from airflow_provider_crew.hooks.answers import build_request_model, read_get_answer, read_post_answer
from airflow_provider_crew.hooks.async_transport import close_shared_sessions
from airflow_provider_crew.hooks.calls import (
    KICKOFF_CONSEQUENCE,
    RESUME_CONSEQUENCE,
    USER_AGENT,
    build_call,
    request_headers,
    status_call,
)
from airflow_provider_crew.hooks.retry import RetryPolicy, send_with_retries
from airflow_provider_crew.hooks.status_path import LEARNED_STATUS_PATHS
from airflow_provider_crew.hooks.sync_transport import SyncTransport
from airflow_provider_crew.hooks.transport import Call, Response
from airflow_provider_crew.hooks.triggerer import aread_status
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

# connection_extra, extra_as_dict and close_shared_sessions are imported from here by other modules.
__all__ = [
    "USER_AGENT",
    "CrewHook",
    "build_request_model",
    "close_shared_sessions",
    "connection_extra",
    "extra_as_dict",
]


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
        """Extra form fields for Airflow < 3.2 (3.2+ reads ``conn-fields`` from provider info)."""
        return connection_form_widgets()

    @cached_property
    def config(self) -> CrewConnectionConfig:
        """The validated connection settings (looked up once per hook)."""
        try:
            connection = self.get_connection(self.crew_conn_id)
        except AirflowNotFoundException:
            raise missing_connection(self.crew_conn_id) from None
        return self._config_from_connection(connection)

    async def aget_config(self) -> CrewConnectionConfig:
        """The same settings, looked up without blocking the event loop."""
        if self._async_config is None:
            self._async_config = await aread_config(
                self.crew_conn_id, retry_limit=self._retry_limit, retry_delay=self._retry_delay
            )
        return self._async_config

    def _config_from_connection(
        self, connection: Any, *, name_connection: bool = True
    ) -> CrewConnectionConfig:
        return config_from_connection(
            connection,
            self.crew_conn_id,
            name_connection=name_connection,
            retry_limit=self._retry_limit,
            retry_delay=self._retry_delay,
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

    def _send(self, call: Call, *, retry_limit: int | None = None, deadline: float | None = None) -> Response:
        """Send ``call`` under the retry policy.

        :param call: The request.
        :param retry_limit: At most this many retries of any kind (0: one try), on top of the policy.
        :param deadline: Epoch seconds; no attempt or retry is made to run past it.
        """
        policy = RetryPolicy(call, self.config, deadline=deadline, max_retries=retry_limit, clock=self._clock)
        return send_with_retries(SyncTransport(self.session).send, policy, self._sleep)

    # -- the contract ----------------------------------------------------------------------------

    def get_inputs(self) -> list[str]:
        """``GET /inputs``: the names of the inputs the crew expects."""
        call = build_call(self.config, "GET", "/inputs")
        return read_get_answer(call, self._send(call), parse_inputs_response)

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

        :param inputs: The crew's inputs, by name.
        :param meta: Free-form metadata the service passes to the crew and echoes in every webhook.
        :param task_webhook_url: URL the service calls after each crew task.
        :param step_webhook_url: URL the service calls after each agent step.
        :param crew_webhook_url: URL the service calls when the execution completes.
        :param human_input_webhook: Where the service announces a pause for human input, and how it
            authenticates there.
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
        call = build_call(self.config, "POST", "/kickoff", request.to_wire(), consequence=KICKOFF_CONSEQUENCE)
        response: KickoffResponse = read_post_answer(call, self._send(call), KickoffResponse)
        return response.kickoff_id

    def get_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """``GET /{kickoff_id}/status`` (or ``/status/{kickoff_id}``, as the connection says).

        :param kickoff_id: The execution.
        :param deadline: Epoch seconds; retries that would sleep past it are not made, so a wait's
            deadline holds even when the service asks for long ``Retry-After`` pauses.
        """
        config = self.config
        styles = LEARNED_STATUS_PATHS.styles_to_try(config)
        for index, style in enumerate(styles):
            call = self._status_call(config, kickoff_id, style)
            response = self._send(call, deadline=deadline)
            if response.status_code == 404 and index + 1 < len(styles):
                continue
            LEARNED_STATUS_PATHS.learn(config, style, response)
            return read_get_answer(call, response, CrewStatus.from_response)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aget_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """Async twin of :meth:`get_status` for triggers: same requests, same parsing.

        :param kickoff_id: The execution.
        :param deadline: Epoch seconds, as for :meth:`get_status`.
        """
        config = await self.aget_config()
        return await aread_status(
            config,
            lambda style: self._status_call(config, kickoff_id, style),
            deadline=deadline,
            clock=self._clock,
        )

    def _status_call(self, config: CrewConnectionConfig, kickoff_id: str, style: StatusPathStyle) -> Call:
        call = self._status_calls.get((kickoff_id, style))
        if call is None:
            call = status_call(config.base_url, request_headers(config), kickoff_id, style)
            if len(self._status_calls) > 64:  # a hook reused for many executions stays small
                self._status_calls.clear()
            self._status_calls[(kickoff_id, style)] = call
        return call

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

        :param execution_id: The paused execution's ``kickoff_id``.
        :param task_id: The task waiting for feedback.
        :param human_feedback: The feedback text; required, non-blank, when ``is_approve`` is False.
        :param is_approve: ``True`` to approve and continue; ``False`` to have the task redone with
            the feedback.
        :param task_webhook_url: URL the service calls after each crew task.
        :param step_webhook_url: URL the service calls after each agent step.
        :param crew_webhook_url: URL the service calls when the execution completes.
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
        call = build_call(self.config, "POST", "/resume", request.to_wire(), consequence=RESUME_CONSEQUENCE)
        result: ResumeResult = read_post_answer(call, self._send(call), ResumeResult)
        return result

    # -- Airflow's Test action -------------------------------------------------------------------

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
            return False, str(missing_connection(self.crew_conn_id))
        except CrewError as error:
            return False, str(error)
        # The calls below read self.config: give it the config just validated, not a second lookup.
        self.__dict__["config"] = config
        health = build_call(config, "GET", "/")
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
