"""A deployed crew as a tool of Airflow's own AI agents: ``common.ai``'s managed-agent contract.

:class:`CrewManagedAgentHook` is :class:`~airflow_provider_crew.hooks.crew.CrewHook` and
``common.ai``'s ``BaseManagedAgentHook``: an agent task consults the crew through
``ManagedAgentToolset(hook.agent("topic"), ...)``, or a failover client over two crew connections.
It needs the ``ai`` extra (``pip install 'airflow-provider-crew[ai]'``, Python 3.11+); without it,
importing this module says so, and nothing else of the provider imports it (docs/managed-agent.md).

One ``crew`` connection is one crew. The ``agent`` argument names the crew input that receives the
prompt: ``hook.agent("topic")`` is "the crew, asked through its ``topic`` input". The other inputs
come from ``vendor_options["inputs"]``, set by the DAG (the calling model cannot change them);
``vendor_options["meta"]`` is passed on as the kickoff's ``meta``. Both are checked against
``GET /inputs`` before anything starts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import AirflowFailException, AirflowOptionalProviderFeatureException
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewBudgetExceededError,
    CrewConfigurationError,
    CrewExecutionTimeoutError,
    CrewNotFoundError,
    CrewOutcomeUnknownError,
    CrewRateLimitedError,
    CrewServerError,
    CrewTransportError,
    CrewValidationError,
)
from airflow_provider_crew.hooks.crew import STOP_PATIENCE_SECONDS, CrewHook
from airflow_provider_crew.hooks.stop import stop
from airflow_provider_crew.models import StopOutcome, inputs_mismatch
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.budget import Budget, budget_for
from airflow_provider_crew.waiting.end_metrics import wait_ended
from airflow_provider_crew.waiting.rules import Outcome, Poller, WaitFor, wait_blocking

try:
    from airflow.providers.common.ai.exceptions import ManagedAgentInvocationError, ManagedAgentRejected
    from airflow.providers.common.ai.managed_agents.base import (
        BaseManagedAgentHook,
        ManagedAgentCapabilities,
        ManagedAgentRef,
        ManagedAgentRequest,
        ManagedAgentResponse,
        ManagedAgentUsage,
    )
except ImportError as error:  # pragma: no cover - the ai extra's job
    raise AirflowOptionalProviderFeatureException(
        "A crew as a managed agent needs Airflow's common.ai provider: "
        f"pip install 'airflow-provider-crew[ai]' (Python 3.11+). ({error})"
    ) from error

#: Why a timed-out call stops its execution: nobody waits for it any more.
CALL_TIMEOUT = stopping.AGENT_TIMEOUT
#: Seconds a call waits when the request sets no ``timeout``.
DEFAULT_TIMEOUT = 600.0
#: What ``vendor_options`` may hold; anything else (another URL, token, connection) is refused.
VENDOR_OPTIONS = ("inputs", "meta")
POLL_INTERVAL = 1.0
MAX_POLL_INTERVAL = 10.0


class CrewAgentUnavailableError(ManagedAgentInvocationError):
    """The crew cannot take the call: a rejected token, no such crew, a wrong connection or option.
    Nothing was started, so a failover group may try another crew."""


class CrewAgentExecutionError(ManagedAgentInvocationError):
    """The crew's execution failed, was revoked, vanished, or paused for human input."""


class CrewAgentOutcomeUnknownError(ManagedAgentInvocationError, AirflowFailException):
    """The kickoff may have reached the crew (a time-out or reset after sending): it was not repeated,
    no other crew should be asked (see :data:`SAFE_TO_FAIL_OVER`), and Airflow does not retry the task,
    whose next try would ask the crew again."""


#: The errors after which a failover group may ask another crew without two executions for one call:
#: ``FailoverManagedAgentClient(members, failover_on=SAFE_TO_FAIL_OVER)``.
SAFE_TO_FAIL_OVER: tuple[type[BaseException], ...] = (
    CrewAgentUnavailableError,  # nothing started: a bad token, no such crew or input, a wrong option
    CrewRateLimitedError,  # the service said it did not act (429, after the connection's retries)
    CrewServerError,  # the service answered an error instead of starting the execution
    CrewTransportError,  # the request never reached the service
)


class CrewManagedAgentHook(CrewHook, BaseManagedAgentHook):
    """
    A deployed crew as a managed agent of ``common.ai``: one call runs one execution and waits for it.

    :param crew_conn_id: The ``crew`` connection: one crew.
    """

    agent_platform: ClassVar[str] = "crew.deployed"

    def resolve_agent(self, agent: str) -> ManagedAgentRef:
        """``crew.deployed``, ``<connection>:<prompt input>``. No network call, no connection lookup."""
        return ManagedAgentRef(platform=self.agent_platform, name=f"{self.crew_conn_id}:{agent}")

    def agent_capabilities(self, agent: str) -> ManagedAgentCapabilities:
        """No conversation state; structured output, token usage and a trace (the kickoff id)."""
        return ManagedAgentCapabilities(sessions=False, structured_output=True, usage=True, trace=True)

    # common.ai 1.0.0 declares get_agent_capabilities; apache/airflow's main branch renames it to
    # agent_capabilities for the next release. Under either base class the hook is concrete and both
    # names answer. Delete this name when the ai extra needs the release with the new one.
    get_agent_capabilities = agent_capabilities

    def invoke_agent(self, agent: str, request: ManagedAgentRequest) -> ManagedAgentResponse:
        """Run one execution with the prompt in input ``agent``; wait for it within ``request.timeout``.

        :raises ManagedAgentRejected: missing or unknown inputs (the model may rephrase).
        :raises CrewAgentUnavailableError: a bad token, no such crew, a wrong connection or option.
        :raises CrewAgentExecutionError: the execution failed, vanished or paused for human input.
        :raises CrewAgentOutcomeUnknownError: the kickoff may have started an execution.
        :raises CrewExecutionTimeoutError: not done within ``request.timeout``; the execution is stopped
            (``POST /stop``) unless the connection's ``stop_executions`` is off.
        Rate limits, server errors and unreachable services propagate unchanged (transient).
        """
        deadline = time.time() + (request.timeout if request.timeout is not None else DEFAULT_TIMEOUT)
        if request.session_id is not None:
            raise CrewAgentUnavailableError("A crew keeps no conversation: session_id cannot be honoured.")
        inputs, meta = self._inputs(agent, request)
        try:
            # The connection's caps ('Max tokens per execution', 'Max cost per execution'): a bad one
            # fails here, before anything is paid.
            budget = budget_for(None, None, config=self.config, conn_id=self.crew_conn_id)
            self._check_inputs(agent, inputs)
            kickoff_id = self.kickoff(inputs, meta=meta, deadline=deadline)
            kicked_off_at = time.time()
        except CrewValidationError as error:  # 422: the crew wants other inputs
            raise ManagedAgentRejected(str(error)) from None
        except CrewOutcomeUnknownError as error:
            raise CrewAgentOutcomeUnknownError(str(error)) from None
        except (
            CrewAuthenticationError,
            CrewBadRequestError,
            CrewNotFoundError,
            CrewConfigurationError,
        ) as error:
            raise CrewAgentUnavailableError(str(error)) from None
        self.log.info("Crew execution %s started for agent %s:%s", kickoff_id, self.crew_conn_id, agent)
        metrics.count("crew.execution.started", **metrics.current_task_tags())
        status = self._wait_for(kickoff_id, deadline, kicked_off_at, budget)
        response = self._response(kickoff_id, status)
        usage = response.usage
        self.log.info(
            "Crew execution %s answered (trace_ref %s): %s input and %s output tokens.",
            kickoff_id,
            response.trace_ref,
            usage.input_tokens if usage else "?",
            usage.output_tokens if usage else "?",
        )
        return response

    # -- the request -----------------------------------------------------------------------------

    def _inputs(self, agent: str, request: ManagedAgentRequest) -> tuple[dict[str, Any], Any]:
        options = dict(request.vendor_options or {})
        unknown = sorted(set(options) - set(VENDOR_OPTIONS))
        if unknown:
            raise CrewAgentUnavailableError(
                f"vendor_options {unknown} are not taken: a crew agent reads only {list(VENDOR_OPTIONS)}, so "
                "that no caller can point the call at another crew, token or connection."
            )
        inputs = options.get("inputs") or {}
        if not isinstance(inputs, Mapping):
            raise CrewAgentUnavailableError(
                "vendor_options['inputs'] must be a mapping of input name to value."
            )
        if agent in inputs:
            raise CrewAgentUnavailableError(
                f"vendor_options['inputs'] sets {agent!r}, the input the prompt goes to: leave it out."
            )
        return {**inputs, agent: _prompt_text(request)}, options.get("meta")

    def _check_inputs(self, agent: str, inputs: Mapping[str, Any]) -> None:
        """``GET /inputs`` before any kickoff: the crew must take exactly these inputs."""
        expected = self.get_inputs()
        if agent not in expected:
            raise CrewAgentUnavailableError(
                f"The crew at {self.config.base_url} has no input {agent!r} for the prompt; it takes "
                f"{expected}. Bind the agent to one of them: hook.agent('<input>')."
            )
        mismatch = inputs_mismatch(expected, inputs)
        if mismatch:
            raise ManagedAgentRejected(
                f"The crew takes the inputs {expected}: {mismatch}. Nothing was started."
            )

    # -- the wait and the answer -------------------------------------------------------------------

    def _wait_for(
        self, kickoff_id: str, deadline: float, kicked_off_at: float, budget: Budget | None
    ) -> CrewStatus:
        poller = Poller(
            kickoff_id,
            wait_for=WaitFor.HUMAN_INPUT,  # a pause ends the call: a model cannot answer it
            deadline=deadline,
            not_found_deadline=time.time() + 60,
            poll_interval=POLL_INTERVAL,
            max_poll_interval=MAX_POLL_INTERVAL,
            log=self.log,
            kicked_off_at=kicked_off_at,
            budget=budget,
        )
        result = wait_blocking(poller, lambda kickoff_id: self.get_status(kickoff_id, deadline=deadline))
        wait_ended(metrics.current_task_tags(), result, poller)
        status = result.last_status
        if result.outcome is Outcome.SUCCEEDED and status is not None:
            return status
        if result.outcome is Outcome.TIMEOUT:
            raise CrewExecutionTimeoutError(f"{result.message} {self._stop_unwaited(kickoff_id)}")
        if result.outcome is Outcome.OVER_BUDGET:
            stopped = self._stop_unwaited(kickoff_id, stopping.OVER_BUDGET)
            raise CrewBudgetExceededError(
                f"{result.message}. {stopped} The call fails without retry, so that no retry starts paying "
                f"again. To let it spend more, raise 'Max tokens per execution' (extra 'max_usage') or 'Max "
                f"cost per execution' (extra 'max_cost') on connection {self.crew_conn_id!r}."
            )
        if result.outcome is Outcome.PAUSED and status is not None:
            message = (
                f"Crew execution {kickoff_id} paused for human input on task {status.paused_task_id!r}, "
                "which a model cannot answer. It stays paused at the service: resume it (CrewResumeOperator, "
                "or the crew's dashboard) or let it expire."
            )
            self.log.warning(message)
            raise CrewAgentExecutionError(message)
        reason = (status.error if status is not None else None) or result.message
        raise CrewAgentExecutionError(f"Crew execution {kickoff_id} ended {result.outcome.value}: {reason}")

    def _stop_unwaited(self, kickoff_id: str, reason: str = CALL_TIMEOUT) -> str:
        """Stop the execution of a call that gave up on it (nobody waits for it); say what came of it."""
        result = stop(
            self,
            kickoff_id,
            reason,
            self.log,
            patience=STOP_PATIENCE_SECONDS,
            owner=metrics.current_task_tags(),
        )
        if result is None:
            return "The execution was not stopped and may still be running."
        if result.outcome is StopOutcome.STOPPED:
            return "The execution was stopped: nobody waits for it any more."
        return f"The execution may still be running (stop: {result.describe()})."

    @staticmethod
    def _response(kickoff_id: str, status: CrewStatus) -> ManagedAgentResponse:
        structured = status.raw.get("result_json") or None
        output = status.output
        text = output if isinstance(output, str) else json.dumps(output, indent=2, default=str)
        usage = status.usage
        return ManagedAgentResponse(
            text=text,
            raw=status.raw,
            structured=structured if isinstance(structured, (dict, list)) else None,
            usage=ManagedAgentUsage(usage["input_tokens"], usage["output_tokens"]) if usage else None,
            trace_ref=kickoff_id,
        )


def _prompt_text(request: ManagedAgentRequest) -> str:
    """The prompt, or the text of the last user message when the request carries messages."""
    if request.prompt is not None:
        return request.prompt
    for message in reversed(list(request.messages or [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(part.get("text", "") for part in content or [] if isinstance(part, Mapping))
    raise ManagedAgentRejected("The request has no user message to send to the crew.")


__all__ = [
    "SAFE_TO_FAIL_OVER",
    "CrewAgentExecutionError",
    "CrewAgentOutcomeUnknownError",
    "CrewAgentUnavailableError",
    "CrewManagedAgentHook",
]
