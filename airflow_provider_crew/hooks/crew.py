"""CrewHook: every request to a crew service, sync for tasks and async for triggers.

The hook reads the ``crew`` connection (:mod:`airflow_provider_crew.connection`) and sends the
contract's calls through :mod:`.client`. A triggerer may hold thousands of waits in one event loop:
their async reads go through what they share per loop, the connection and one aiohttp session
(:mod:`.loop_connection`).
The client, the models and the connection's validation are imported where a request is made: a DAG
file imports the hook with the operators and never sends one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import BaseHook
from airflow_provider_crew.connection_form import (
    CONN_TYPE,
    TOKEN_LABEL,
    UI_FIELD_BEHAVIOUR,
    connection_form_widgets,
)
from airflow_provider_crew.exceptions import CrewAuthenticationError, CrewError, CrewTransportError
from airflow_provider_crew.hooks.loop_connection import aread_status, shared_connection, with_overrides

if TYPE_CHECKING:
    import requests
    from pydantic import BaseModel

    from airflow_provider_crew.connection import CrewConnectionConfig
    from airflow_provider_crew.hooks.client.request import Call
    from airflow_provider_crew.hooks.client.response import Response
    from airflow_provider_crew.models import EventSubscription, HumanInputWebhook, ResumeResult, StopResult
    from airflow_provider_crew.status import CrewStatus

# How long a stop may take, retries included: it runs while Airflow kills the task (on_kill) or
# cancels its trigger, which wait for it only so long.
STOP_PATIENCE_SECONDS = 15.0

# What a kickoff's or resume's unknown outcome may mean; the errors say it, and that it was not repeated.
KICKOFF_IF_UNKNOWN = "an execution may have started and may be running"
RESUME_IF_UNKNOWN = "the feedback may have been applied to execution {execution_id}, which may run again"


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
        # The connection errors name (the token, the host...): none under Airflow's Test action.
        self._named_conn_id: str | None = crew_conn_id
        overrides = {"retry_limit": retry_limit, "retry_delay": retry_delay}
        self._overrides = {name: value for name, value in overrides.items() if value is not None}
        # Seams for tests: sleeping and the clock the retry policy reads (epoch seconds).
        self._sleep: Callable[[float], None] = time.sleep
        self._clock: Callable[[], float] = time.time

    # -- the connection --------------------------------------------------------------------------

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
        config, unread = self._read_connection()
        if unread:
            self.log.warning("Connection %r: %s", self.crew_conn_id, unread)
        return config

    def _read_connection(self, *, name_connection: bool = True) -> tuple[CrewConnectionConfig, str | None]:
        """The connection's settings, and what it holds that the provider does not read."""
        from airflow_provider_crew import connection as crew_connection

        with crew_connection.defined_where_this_runs(self.crew_conn_id):
            connection = self.get_connection(self.crew_conn_id)
        config = crew_connection.config_from_connection(
            connection, self.crew_conn_id, name_connection=name_connection
        )
        return with_overrides(config, self._overrides), crew_connection.unread_extras(connection)

    async def aget_config(self) -> CrewConnectionConfig:
        """The same settings, looked up without blocking the event loop (shared by the loop's waits)."""
        return with_overrides((await shared_connection(self.crew_conn_id)).config, self._overrides)

    # -- sending ---------------------------------------------------------------------------------

    def get_conn(self) -> requests.Session:
        """The hook's one ``requests.Session`` (connection pooling across calls)."""
        return self.session

    @cached_property
    def session(self) -> requests.Session:
        import requests  # here: a DAG file that imports an operator never needs it

        return requests.Session()

    def _send(self, call: Call, *, retry_limit: int | None = None, deadline: float | None = None) -> Response:
        """Send ``call`` under the retry policy.

        :param retry_limit: At most this many retries of any kind (0: one try), on top of the policy.
        :param deadline: Epoch seconds; no attempt or retry is made to run past it.
        """
        from airflow_provider_crew.hooks.client.retry import RetryPolicy, send_with_retries
        from airflow_provider_crew.hooks.client.transport import SyncTransport

        policy = RetryPolicy(call, self.config, deadline=deadline, max_retries=retry_limit, clock=self._clock)
        return send_with_retries(SyncTransport(self.session).send, policy, self._sleep)

    def _post(
        self,
        path: str,
        request: type[BaseModel],
        answer: type[BaseModel],
        *,
        if_unknown: str,
        deadline: float | None = None,
        **fields: Any,
    ) -> Any:
        """Check ``fields`` as a ``request`` body, POST it (never repeated when it may have arrived)
        and read the answer as ``answer``."""
        from airflow_provider_crew.hooks.client.request import build_request_model, post_call, read_answer

        body = build_request_model(request, **fields).to_wire()
        call = post_call(self.config, path, body, if_unknown=if_unknown, conn_id=self._named_conn_id)
        return read_answer(call, self._send(call, deadline=deadline), answer.model_validate)

    # -- the contract ----------------------------------------------------------------------------

    def get_inputs(self) -> list[str]:
        """``GET /inputs``: the names of the inputs the crew expects."""
        from airflow_provider_crew.hooks.client.request import get_call, read_answer
        from airflow_provider_crew.models import parse_inputs_response

        call = get_call(self.config, "/inputs", conn_id=self._named_conn_id)
        return read_answer(call, self._send(call), parse_inputs_response)

    def kickoff(
        self,
        inputs: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        task_webhook_url: str | None = None,
        step_webhook_url: str | None = None,
        crew_webhook_url: str | None = None,
        human_input_webhook: HumanInputWebhook | Mapping[str, Any] | None = None,
        event_stream: EventSubscription | None = None,
        deadline: float | None = None,
    ) -> str:
        """``POST /kickoff``: start an execution and return its ``kickoff_id``.

        Never repeated when the service may have received it (see
        :class:`~airflow_provider_crew.exceptions.CrewOutcomeUnknownError`). The body's fields are
        ``CrewKickoffOperator``'s parameters of the same names (docs/api.md).

        :param deadline: Epoch seconds the call must end by; a request cut short by it counts as one
            whose outcome is unknown (not repeated).
        """
        from airflow_provider_crew.models import KickoffRequest, KickoffResponse

        return self._post(
            "/kickoff",
            KickoffRequest,
            KickoffResponse,
            if_unknown=KICKOFF_IF_UNKNOWN,
            deadline=deadline,
            inputs=inputs,
            meta=meta,
            task_webhook_url=task_webhook_url,
            step_webhook_url=step_webhook_url,
            crew_webhook_url=crew_webhook_url,
            human_input_webhook=human_input_webhook,
            event_stream=event_stream,
        ).kickoff_id

    def get_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """``GET /{kickoff_id}/status`` (or ``/status/{kickoff_id}``): the status record, a
        ``CrewStatus`` (``airflow_provider_crew.status``: ``state``, ``output``, ``progress``, ``raw``...).

        :param deadline: Epoch seconds; retries that would sleep past it are not made, so a wait's
            deadline holds even when the service asks for long ``Retry-After`` pauses.
        """
        from airflow_provider_crew.hooks.client.request import Call, read_status

        read = read_status(self.config, kickoff_id, conn_id=self._named_conn_id)
        step = next(read)
        while isinstance(step, Call):
            step = read.send(self._send(step, deadline=deadline))
        return step

    async def aget_status(self, kickoff_id: str, *, deadline: float | None = None) -> CrewStatus:
        """:meth:`get_status` for triggers, without blocking the event loop: same requests, same reading.

        Every wait in the event loop shares the connection, the requests' headers and the session
        (:func:`~.loop_connection.aread_status`).
        """
        return await aread_status(
            self.crew_conn_id,
            kickoff_id,
            deadline=deadline,
            overrides=self._overrides,
            named_conn_id=self._named_conn_id,
            clock=self._clock,
        )

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
        event_stream: EventSubscription | None = None,
    ) -> ResumeResult:
        """``POST /resume``: send human feedback to an execution paused in Pending Human Input.

        The body's fields are ``CrewResumeOperator``'s parameters of the same names (docs/api.md;
        ``execution_id`` is the paused execution's ``kickoff_id``). The service does not carry webhook
        addresses over from the kickoff (docs/contract.md): pass them again to keep receiving them.
        """
        from airflow_provider_crew.models import ResumeRequest, ResumeResult

        return self._post(
            "/resume",
            ResumeRequest,
            ResumeResult,
            if_unknown=RESUME_IF_UNKNOWN.format(execution_id=execution_id),
            execution_id=execution_id,
            task_id=task_id,
            human_feedback=human_feedback,
            is_approve=is_approve,
            task_webhook_url=task_webhook_url,
            step_webhook_url=step_webhook_url,
            crew_webhook_url=crew_webhook_url,
            event_stream=event_stream,
        )

    def stop(self, kickoff_id: str, *, patience: float = STOP_PATIENCE_SECONDS) -> StopResult:
        """``POST /stop/{kickoff_id}``: stop an execution (not in the contract; crewAI's hosted service
        has it). Never raises: says what happened (stopped, already finished, not supported by this
        service, unknown).

        :param patience: Seconds it may take, retries included (Airflow kills a task's process 5 s
            after it asks it to stop).
        """
        from airflow_provider_crew.hooks.client.request import stop_call
        from airflow_provider_crew.models import StopOutcome, StopResult

        try:
            call = stop_call(self.config, kickoff_id, conn_id=self._named_conn_id)
            answer = self._send(call, retry_limit=1, deadline=time.time() + patience)
        except CrewError as error:
            return StopResult(outcome=StopOutcome.UNKNOWN, detail=str(error))
        return StopResult.from_answer(answer.status_code, answer.content)

    # -- Airflow's Test action -------------------------------------------------------------------

    def test_connection(self) -> tuple[bool, str]:
        """For Airflow's Test action: ``GET /`` then ``GET /inputs``; starts nothing.

        Tells bad settings, an unreachable service, a rejected token and OK apart (docs/connection.md,
        "The Test action"). Airflow runs this under a random connection id: the messages never name it.
        """
        from airflow_provider_crew.hooks.client.request import get_call

        try:
            config, unread = self._read_connection(name_connection=False)
        except CrewError as error:
            return False, str(error)
        # The calls below read self.config: give it the config just validated, not a second lookup.
        self.__dict__["config"] = config
        self._named_conn_id = None  # their errors say "the connection", as the messages above do
        try:
            # One try: the action should answer quickly, and an outage is what it is there to show.
            self._send(get_call(config, "/"), retry_limit=0)
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
            f"({config.credential_kind.value} token).{' ' + unread if unread else ''}"
        )


__all__ = ["CrewHook"]
