"""The execution state machine. Each execution is one asyncio task; nothing here touches HTTP.

PENDING (briefly) -> RUNNING, task by task -> SUCCESS, or FAILED when a task is declared failing.
A task with ``human_input`` pauses the execution (PAUSED, status "Pending Human Input") when the
kickoff gave a ``humanInputWebhook``; :meth:`Engine.resume` then accepts the output (continue) or
re-runs the task with the feedback as context (retry), which pauses and notifies again.
:meth:`Engine.stop` ends any unfinished execution as REVOKED: its runner is cancelled, so no more
steps run and no more webhooks are sent for it (no crew webhook either). A task with ``endless``
steps until then. While RUNNING an execution also spends ``crew.tokens_per_second`` tokens per
second (see :class:`~.execution.Execution`). An execution whose kickoff (or a resume) gave a
``webhooks`` object also reports what it does as events (:mod:`.events`, :mod:`.event_stream`).
All state lives in memory, in the serving event loop's thread.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from . import events as ev
from .agent import AgentContext, DeterministicAgent, FeedbackNote, TaskOutcome
from .crew_spec import CrewSpec, TaskSpec
from .event_stream import EventStream, EventTarget
from .execution import (
    FAILED,
    PAUSED,
    PENDING,
    PENDING_HUMAN_INPUT,
    REVOKED,
    RUNNING,
    SUCCESS,
    Execution,
    FeedbackRound,
    HumanInputTarget,
    PausedTask,
)
from .faults import Faults
from .payloads import crew_payload, human_input_payload, step_payload, task_payload
from .webhooks import WebhookSender

__all__ = [
    "FAILED",
    "PAUSED",
    "PENDING",
    "PENDING_HUMAN_INPUT",
    "REVOKED",
    "RUNNING",
    "STOPPED_ERROR",
    "SUCCESS",
    "Engine",
    "Execution",
    "HumanInputTarget",
    "ResumeError",
    "StopError",
]

WEBHOOK_KINDS = ("task", "step", "crew")
STOPPED_ERROR = "Stopped by request"
# An endless task built without a step pace (CrewSpec directly) must not spin the event loop.
MIN_ENDLESS_STEP_SECONDS = 0.001


class ResumeError(Exception):
    """A resume request the service refuses; carries the HTTP answer."""

    def __init__(self, status_code: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error = error
        self.message = message


class StopError(ResumeError):
    """A stop request the service refuses (unknown id: 404; already finished: 400)."""


class Engine:
    """Starts, runs and resumes executions; sends their webhooks through a :class:`WebhookSender`."""

    def __init__(
        self,
        sender: WebhookSender,
        faults: Faults,
        speed: float = 1.0,
        agent: DeterministicAgent | None = None,
    ) -> None:
        self.sender = sender
        self.faults = faults
        self.speed = speed
        self.agent = agent or DeterministicAgent()
        self.executions: dict[str, Execution] = {}

    @property
    def speed(self) -> float:
        return self._speed

    @speed.setter
    def speed(self, value: float) -> None:
        if not isinstance(value, int | float) or value <= 0:
            raise ValueError("speed must be a number > 0 (2 = twice as fast)")
        self._speed = float(value)

    async def _pause_for(self, seconds: float) -> None:
        await asyncio.sleep(seconds / self._speed if seconds > 0 else 0)

    # ---------------------------------------------------------------------------------------------
    # Kickoff and status

    def kickoff(
        self,
        crew: CrewSpec,
        inputs: Mapping[str, Any],
        *,
        meta: Any = None,
        webhooks: Mapping[str, str | None] | None = None,
        human_input: HumanInputTarget | None = None,
        token_kind: str = "org",
        event_target: EventTarget | None = None,
    ) -> Execution:
        """Create an execution and start running it; returns at once (state PENDING)."""
        kickoff_id = str(uuid.uuid4())
        ex = Execution(
            kickoff_id=kickoff_id,
            crew=crew,
            inputs=crew.with_defaults(inputs),
            meta=meta,
            webhooks={k: (webhooks or {}).get(k) for k in WEBHOOK_KINDS},
            human_input=human_input,
            token_kind=token_kind,
            task_ids=[str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kickoff_id}/{t.name}")) for t in crew.tasks],
            attempts=[1] * len(crew.tasks),
        )
        for rule in self.faults.status_404_budget(crew.name):
            ex.hidden_polls += rule.count or 0
            ex.hidden_rule = ex.hidden_rule or rule
        if event_target is not None and crew.sends_events:
            ex.events = EventStream(event_target, self.sender, crew, kickoff_id)
        self.executions[kickoff_id] = ex
        ex.runner = asyncio.get_running_loop().create_task(self._run(ex), name=f"crew-{kickoff_id}")
        return ex

    def poll(self, kickoff_id: str) -> bytes | None:
        """Serialised status, or None for "404" (unknown id, or hidden by a status_404 fault)."""
        ex = self.executions.get(kickoff_id)
        if ex is None:
            return None
        ex.polls += 1
        if ex.hidden_polls > 0:
            ex.hidden_polls -= 1
            if ex.hidden_rule is not None:
                self.faults.record_hidden_poll(ex.hidden_rule)
            return None
        return ex.status_bytes()

    # ---------------------------------------------------------------------------------------------
    # Running

    async def _run(self, ex: Execution) -> None:
        try:
            await self._pause_for(ex.crew.pending_seconds)
            ex.state = RUNNING
            ex.touch()
            ev.crew_started(ex)
            tasks = ex.crew.tasks
            while ex.state == RUNNING and ex.task_index < len(tasks):
                index = ex.task_index
                task = tasks[index]
                outcome = await self._perform(ex, index)
                if outcome is None:
                    return  # failed
                self._notify_task(ex, index, outcome)
                if task.human_input and (ex.human_input is not None or ex.crew.pause_without_webhook):
                    waiter = self._pause(ex, index, outcome)
                    # resume() moves the state on (accept or retry) before waking us.
                    await waiter
                    continue
                self._accept(ex, index, outcome)
            if ex.state == RUNNING:
                self._complete(ex)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in the stand-in must show up as a failed execution
            self._fail(ex, f"internal error in local crew service: {type(exc).__name__}: {exc}")

    async def _perform(self, ex: Execution, index: int) -> TaskOutcome | None:
        task = ex.crew.tasks[index]
        attempt = ex.attempts[index]
        ex.status = f"Running task {index + 1} of {len(ex.crew.tasks)}: {task.name}" + (
            f" (attempt {attempt}, with human feedback)" if attempt > 1 else ""
        )
        ex.touch()
        ctx = AgentContext(
            crew=ex.crew,
            task=task,
            inputs=ex.inputs,
            earlier=[(t.name, o.summary) for t, _, o, _ in ex.accepted],
            feedback=[FeedbackNote(f.task_name, f.feedback, f.is_approve) for f in ex.feedback],
            attempt=attempt,
        )
        variables = self.agent.variables(ctx)
        ev.task_started(ex, index, ctx, variables)
        await self._take_steps(ex, ctx, task)
        if task.should_fail(ex.inputs):
            ev.task_failed(ex, index, task.error)
            self._fail(ex, task.error)
            return None
        outcome = self.agent.write(ctx)
        ev.task_done(ex, index, ctx, variables, outcome)
        ex.prompt_tokens += outcome.prompt_tokens
        ex.completion_tokens += outcome.completion_tokens
        ex.requests += 1
        ex.last_executed_task = {
            "task_id": ex.task_ids[index],
            "name": task.name,
            "agent": task.agent,
            "output": outcome.raw,
        }
        ex.touch()
        return outcome

    async def _take_steps(self, ex: Execution, ctx: AgentContext, task: TaskSpec) -> None:
        """The task's agent steps, each after the step pause, with its usage and step webhook."""
        per_step = ex.crew.seconds_per_step(task)
        # An endless task steps until the execution is stopped (stop() cancels this runner).
        numbers: Iterable[int] = itertools.count(1) if task.endless else range(1, task.steps + 1)
        if task.endless:
            per_step = max(per_step, MIN_ENDLESS_STEP_SECONDS)
        for number in numbers:
            await self._pause_for(per_step)
            step = self.agent.step(ctx, number)
            ex.last_step = {
                "agent": step.agent,
                "thought": step.thought,
                "tool": step.tool,
                "tool_input": step.tool_input,
                "result": step.result,
            }
            ex.prompt_tokens += step.prompt_tokens
            ex.completion_tokens += step.completion_tokens
            ex.requests += 1
            ex.touch()
            ev.step(ex, ex.task_index, step)
            self._emit(ex, "step", step_payload(ex, step))
        if task.steps == 0 and not task.endless:
            await self._pause_for(per_step)

    def _notify_task(self, ex: Execution, index: int, outcome: TaskOutcome) -> None:
        task = ex.crew.tasks[index]
        ctx_vars = self.agent.variables(AgentContext(crew=ex.crew, task=task, inputs=ex.inputs))
        self._emit(ex, "task", task_payload(ex, index, outcome, ctx_vars))

    def _pause(self, ex: Execution, index: int, outcome: TaskOutcome) -> asyncio.Future[bool]:
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ex.paused = PausedTask(index, ex.task_ids[index], outcome, waiter)
        ex.paused_at = time.time()
        ex.state = PAUSED
        ex.status = PENDING_HUMAN_INPUT
        ex.touch()
        ev.settle(ex)
        target = ex.human_input
        if target is None:
            return waiter  # pausing without a webhook (pause_without_webhook): nobody is told
        # Paused before notifying: whoever gets the notification may resume straight away.
        ex.delivery_tail = self.sender.send(
            "human_input",
            target.url,
            human_input_payload(ex, index, outcome),
            kickoff_id=ex.kickoff_id,
            headers=target.headers(),
            auth=target.strategy,
            after=ex.delivery_tail,
        )
        return waiter

    def _accept(self, ex: Execution, index: int, outcome: TaskOutcome) -> None:
        task = ex.crew.tasks[index]
        ex.accepted.append((task, ex.task_ids[index], outcome, ex.attempts[index]))
        ex.completed += 1
        ex.task_index = index + 1
        ex.touch()

    def _complete(self, ex: Execution) -> None:
        final = ex.accepted[-1][2]
        ex.result = final.raw
        ex.result_json = final.json
        ex.state = SUCCESS
        ex.status = "Crew execution completed"
        ex.finished_at = time.time()
        ex.touch()
        ev.crew_completed(ex)
        self._emit(ex, "crew", crew_payload(ex))

    def _fail(self, ex: Execution, error: str) -> None:
        ex.state = FAILED
        ex.status = "Crew execution failed"
        ex.error = error
        ex.finished_at = time.time()
        ex.touch()
        ev.crew_failed(ex)
        if ex.crew.completion_webhook_on_failure:  # off by default: the contract promises none here
            self._emit(ex, "crew", crew_payload(ex))

    def _emit(self, ex: Execution, kind: str, payload: dict[str, Any]) -> None:
        url = ex.webhooks.get(kind)
        if url and ex.state != REVOKED:
            ex.delivery_tail = self.sender.send(
                kind, url, payload, kickoff_id=ex.kickoff_id, after=ex.delivery_tail
            )

    # ---------------------------------------------------------------------------------------------
    # Resume

    def resume(
        self,
        kickoff_id: str,
        task_id: str,
        feedback: str,
        is_approve: bool,
        webhooks: Mapping[str, str | None],
        event_target: EventTarget | None = None,
    ) -> tuple[str, str]:
        """Apply human feedback; returns the response ``(status, message)`` or raises ResumeError."""
        ex = self.executions.get(kickoff_id)
        if ex is None:
            raise ResumeError(404, "Not Found", f"Execution {kickoff_id} not found")
        paused = ex.paused
        if ex.state != PAUSED or paused is None:
            raise ResumeError(
                400,
                "Bad Request",
                f"Execution {kickoff_id} is not waiting for human input (current state: {ex.state})",
            )
        task = ex.crew.tasks[paused.index]
        if task_id not in (paused.task_id, task.name):
            raise ResumeError(
                400,
                "Bad Request",
                f"task_id {task_id!r} is not the task waiting for human input; "
                f"expected {paused.task_id!r} ({task.name})",
            )
        # The contract's resume rule: webhook addresses are not carried over; only those given now are used.
        ex.webhooks = {k: webhooks.get(k) for k in WEBHOOK_KINDS}
        # The event stream keeps the kickoff's target unless this resume gives one.
        if event_target is not None and ex.events is not None:
            ex.events.retarget(event_target)
        elif event_target is not None and ex.crew.sends_events:
            ex.events = EventStream(event_target, self.sender, ex.crew, kickoff_id)
        ex.feedback.append(
            FeedbackRound(
                round=len(ex.feedback) + 1,
                task_id=paused.task_id,
                task_name=task.name,
                attempt=ex.attempts[paused.index],
                feedback=feedback,
                is_approve=is_approve,
                received_at=time.time(),
            )
        )
        ex.paused = None
        if is_approve:
            self._accept(ex, paused.index, paused.outcome)
            if ex.task_index >= len(ex.crew.tasks):
                self._complete(ex)
                answer = ("completed", f"Feedback accepted for task {task.name}; the execution completed")
            else:
                ex.state = RUNNING
                ex.status = f"Resumed after human approval of {task.name}"
                answer = ("resumed", f"Feedback accepted for task {task.name}; execution resumed")
        else:
            ex.attempts[paused.index] += 1
            ex.state = RUNNING
            ex.status = f"Retrying task {task.name} with human feedback"
            answer = ("retrying", f"Task {task.name} will be retried with the feedback as context")
        ex.touch()
        if not paused.waiter.done():
            paused.waiter.set_result(is_approve)
        return answer

    # ---------------------------------------------------------------------------------------------
    # Stop

    def stop(self, kickoff_id: str) -> Execution:
        """Stop an unfinished execution (PENDING, RUNNING, PAUSED): it ends REVOKED; raises StopError."""
        ex = self.executions.get(kickoff_id)
        if ex is None:
            raise StopError(404, "Not Found", f"Execution {kickoff_id} not found")
        if ex.finished:
            raise StopError(400, "Bad Request", f"Cannot stop execution. Current state: {ex.state}")
        ex.state = REVOKED
        ex.status = "Crew execution stopped"
        ex.error = STOPPED_ERROR
        ex.finished_at = time.time()
        ex.paused = None
        ex.touch()
        ev.settle(ex)
        runner = ex.runner
        if runner is not None and not runner.done():
            # Runs in the serving loop, so the runner is parked at an await: it ends there, no
            # further step, task or webhook (a paused one's waiter is cancelled with it).
            runner.cancel()
        return ex

    # ---------------------------------------------------------------------------------------------
    # Lifecycle

    async def cancel_all(self) -> None:
        for ex in self.executions.values():
            if ex.events is not None:
                ex.events.close()
        runners = [ex.runner for ex in self.executions.values() if ex.runner and not ex.runner.done()]
        for runner in runners:
            runner.cancel()
        if runners:
            await asyncio.gather(*runners, return_exceptions=True)

    async def reset(self) -> None:
        """Cancel every execution and forget them."""
        await self.cancel_all()
        self.executions.clear()
