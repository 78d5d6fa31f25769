"""What a wait's end tells the metrics, from whichever process ends it: the worker or the triggerer.

``crew.execution.ended``, ``crew.execution.tokens``, ``crew.execution.duration``,
``crew.execution.status_reads`` and ``crew.wait.end_lag`` (docs/metrics.md), all from the
:class:`~.rules.Poller` that read the end: while it polls it only counts its reads and keeps the time
of the last one that did not end the wait.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_provider_crew import metrics
from airflow_provider_crew.waiting.rules import Outcome, Poller, WaitResult

#: The ``state`` tag of ``crew.execution.ended`` for the outcomes that end an execution's wait with it.
ENDED_STATES = {
    Outcome.SUCCEEDED: "succeeded",
    Outcome.FAILED: "failed",
    Outcome.PAUSED: "paused",
    Outcome.OVER_BUDGET: "over_budget",
}
#: A FAILED execution that was stopped or cancelled: ``revoked``.
REVOKED_WORDS = frozenset({"revoked", "cancelled", "canceled"})
#: The ``kind`` tag of ``crew.execution.tokens``, and the ``usage`` XCom's key it counts.
TOKEN_KINDS = {"total": "total_tokens", "prompt": "input_tokens", "completion": "output_tokens"}


def wait_ended(
    task: Mapping[str, str], result: WaitResult | None, poller: Poller, *, woken_at: float | None = None
) -> None:
    """Emit the metrics of a wait, or a stretch of it, that ``poller`` drove to ``result``.

    :param task: The ``dag_id`` and ``task_id`` tags of the waiting task.
    :param result: How the wait ended; None when this stretch ended without an end (a deferral, a
        cancelled trigger): only its reads are counted.
    :param poller: The wait's state: its reads (counted once), the kickoff time, the last read that
        did not end it.
    :param woken_at: When the crew's webhook woke the wait (epoch seconds): the crew's end, for
        ``crew.wait.end_lag`` with ``source=wake``; else the polls bound it (``source=poll``).
    """
    if poller.reads:
        metrics.count("crew.execution.status_reads", poller.reads, **task)
        poller.reads = 0
    state = ENDED_STATES.get(result.outcome) if result is not None else None
    if result is None or state is None:
        return  # a time-out, a lost execution or an error: no end of the execution was seen
    status = result.last_status
    if state == "failed" and status is not None and (status.raw_state or "").lower() in REVOKED_WORDS:
        state = "revoked"
    metrics.count("crew.execution.ended", **task, state=state)
    usage = status.usage if status is not None else None
    for kind, key in TOKEN_KINDS.items():
        if usage is not None and usage.get(key) is not None:
            metrics.count("crew.execution.tokens", usage[key], **task, kind=kind)
    budget = poller.budget
    cost = budget.prices.cost(usage) if budget is not None and budget.prices is not None else None
    if cost is not None:
        metrics.count("crew.execution.cost", round(cost * 1_000_000), **task)
    if result.outcome is Outcome.OVER_BUDGET and budget is not None:
        metrics.count("crew.execution.over_budget", **task, cap=budget.cap_reached(usage))
    if poller.kicked_off_at is not None:
        since = metrics.milliseconds_since(poller.kicked_off_at)
        metrics.timing("crew.execution.duration", since, **task, state=state)
    crew_ended_at, source = (woken_at, "wake") if woken_at is not None else (poller.last_running_at, "poll")
    if crew_ended_at is not None:
        metrics.timing("crew.wait.end_lag", metrics.milliseconds_since(crew_ended_at), **task, source=source)


__all__ = ["ENDED_STATES", "TOKEN_KINDS", "wait_ended"]
