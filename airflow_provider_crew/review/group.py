"""Human review as a task group: for each round a ``wait_<n>`` sensor and a ``round_<n>``, then
``result`` (docs/human-review.md). Each round is its own task instance, so each has its own request,
showing the output it asks about.

Why a sensor before each round: a round must ask from a worker once the crew has paused, and a task
resumed on a worker soon after it deferred can be failed by Airflow's stale executor-event race
(:mod:`airflow_provider_crew.waiting.race`). The sensor's trigger ends it at the pause (no worker
resumes it: no race, no hold); the round then starts as a new task instance and asks at once.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk import TaskGroup, chain

from airflow_provider_crew._compat import require_human_in_the_loop
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.operators.wait import DEFAULT_TIMEOUT
from airflow_provider_crew.review.base import NEEDS_3_1
from airflow_provider_crew.review.result import CrewReviewResultOperator
from airflow_provider_crew.review.round import CrewReviewRoundOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor
from airflow_provider_crew.waiting.rules import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL, OnHumanInput

if TYPE_CHECKING:
    from airflow.sdk.bases.notifier import BaseNotifier

DEFAULT_MAX_ROUNDS = 3
#: One ``:param`` text of a docstring (the provider's are indented by 4, their continuations by 8).
PARAM_TEXT = re.compile(r"^    :param (\w+):.*\n(?:        .*\n)*", re.MULTILINE)
Function = TypeVar("Function", bound=Callable[..., Any])


class CrewReviewGroup(TaskGroup):
    """The task group :func:`crew_human_review` lays out; wires like any task group."""

    @property
    def result_task(self) -> CrewReviewResultOperator:
        """The group's last task: it waits for the end and pushes the final output."""
        task = self.children[self.child_id("result")]
        assert isinstance(task, CrewReviewResultOperator)
        return task

    @property
    def output(self) -> Any:
        """The result task's XComArg: the kickoff id; ``["result"]`` the final output."""
        return self.result_task.output


def _texts_of_the_rounds(function: Function) -> Function:
    """``function`` with, for each parameter it passes on to every round as it is, the ``:param`` text of
    the round's class or a base (each text is written once, where the task that takes it is; the nearest
    wins), in the signature's order with ``function``'s own: docs/api.md reads them there."""
    texts: dict[str, str] = {}
    for each in (*reversed(CrewReviewRoundOperator.__mro__), function):
        texts.update((found[1], found[0]) for found in PARAM_TEXT.finditer(each.__doc__ or ""))
    prose = PARAM_TEXT.sub("", function.__doc__ or "").rstrip(" ")
    names = inspect.signature(function).parameters
    function.__doc__ = prose + "".join(texts[name] for name in names if name in texts)
    return function


@_texts_of_the_rounds
def crew_human_review(
    *,
    kickoff_id: str | Any,
    group_id: str = "review",
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    crew_conn_id: str = CrewHook.default_conn_name,
    inputs: Mapping[str, Any] | Any | None = None,
    subject: str = "Review crew task {task}",
    assigned_users: Mapping[str, str] | list[Mapping[str, str]] | None = None,
    notifiers: Sequence[BaseNotifier] | BaseNotifier | None = None,
    response_timeout: timedelta | None = None,
    approve_on_timeout: bool = False,
    task_webhook_url: str | None = None,
    step_webhook_url: str | None = None,
    crew_webhook_url: str | None = None,
    carry_over_webhooks: bool = True,
    kickoff_task_id: str | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
    timeout: timedelta | float = DEFAULT_TIMEOUT,
    retries: int = 1,
    retry_delay: timedelta = timedelta(seconds=5),
    openlineage_include_values: bool = False,
    stop_crew: bool | None = None,
    max_tokens: int | str | None = None,
    max_cost: float | str | None = None,
) -> CrewReviewGroup:
    """
    Lay out a human review of a crew execution: a task group of ``max_rounds`` rounds and a result.

    Returns :class:`CrewReviewGroup`, which wires like any task group; its ``output`` is the kickoff
    id, ``output["result"]`` the final output, ``output["review_history"]`` every round's record.

    :param group_id: The task group's id.
    :param max_rounds: How many requests at most (each "Request changes" uses one round).
    :param retries: Retries of each task. A round that fails before its answer was applied asks
        again on its retry; one that applied its answer follows the execution.
    :param retry_delay: How soon a retry runs. Short, because a failed round leaves a reviewer
        waiting: on Airflow 3.3 an answer given within seconds of the request can get the round
        failed by Airflow (docs/human-review.md), and the retry asks again.
    :param stop_crew: As on every crew task, and also when a round's ``response_timeout`` passes
        without ``approve_on_timeout`` (nobody will answer that pause). ``None`` (the review owns the
        wait) stops the execution; ``False`` leaves it running (paused, to resume by hand).
    """
    require_human_in_the_loop(NEEDS_3_1)
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise CrewConfigurationError(f"max_rounds must be a whole number of 1 or more, got {max_rounds!r}.")

    common: dict[str, Any] = {
        "kickoff_id": kickoff_id,
        "crew_conn_id": crew_conn_id,
        "inputs": inputs,
        "poll_interval": poll_interval,
        "max_poll_interval": max_poll_interval,
        "timeout": timeout,
        "retries": retries,
        "retry_delay": retry_delay,
        "openlineage_include_values": openlineage_include_values,
        # The wait sensors are the review's own: they stop as the rounds do unless told otherwise.
        "stop_crew": True if stop_crew is None else stop_crew,
        # The execution's caps, across every round: each wait and each resume keeps them.
        "max_tokens": max_tokens,
        "max_cost": max_cost,
    }
    numbers = range(1, max_rounds + 1)
    group = CrewReviewGroup(group_id=group_id)
    with group:
        round_ids = [group.child_id(f"round_{number}") for number in numbers]
        rounds = [
            CrewReviewRoundOperator(
                task_id=f"round_{number}",
                round_number=number,
                round_task_ids=round_ids,
                subject=subject,
                assigned_users=assigned_users,
                notifiers=notifiers,
                response_timeout=response_timeout,
                approve_on_timeout=approve_on_timeout,
                task_webhook_url=task_webhook_url,
                step_webhook_url=step_webhook_url,
                crew_webhook_url=crew_webhook_url,
                carry_over_webhooks=carry_over_webhooks,
                kickoff_task_id=kickoff_task_id,  # None: the task finds it from kickoff_id
                **common,
            )
            for number in numbers
        ]
        waits = [
            CrewStatusSensor(
                task_id=f"wait_{number}",
                on_human_input=OnHumanInput.RETURN.value,  # the pause (or the end) ends the wait
                deferrable=True,  # the point of the sensor: no worker slot while the crew works
                kickoff_task_id=kickoff_task_id,  # None: the task finds it from kickoff_id
                **{name: value for name, value in common.items() if name != "inputs"},
            )
            for number in numbers
        ]
        result = CrewReviewResultOperator(
            task_id="result", round_task_ids=round_ids, trigger_rule="none_failed", **common
        )
        chain(*[task for pair in zip(waits, rounds, strict=True) for task in pair], result)
    return group


__all__ = ["CrewReviewGroup", "crew_human_review"]
