"""What the Crew tab and the Crews page say of an execution's budget (docs/crew-views.md): stopped over
it, and a cap the service's answers cannot enforce (no usage in them)."""

from __future__ import annotations

from typing import Any

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.budget import CAP_PARAMETERS, cap_value
from airflow_provider_crew.waiting.stopping import OVER_BUDGET


def money(value: float) -> str:
    """A cost as the views show it: two decimals from 1 on, four significant digits below."""
    return f"{value:,.2f}" if value >= 1 else f"{value:.4g}"


def over_budget_answer(status: Any) -> str | None:
    """What the stop answered when XCom ``status`` says the execution was stopped over its budget (its
    ``stopped`` reason, :data:`~airflow_provider_crew.waiting.stopping.OVER_BUDGET`); else None."""
    stopped = status.get("stopped") if isinstance(status, dict) else None
    if isinstance(stopped, dict) and stopped.get("reason") == OVER_BUDGET:
        answer = stopped.get("answer")
        return (str(answer) if answer not in (None, "") else "unknown")[
            :80
        ]  # XCom is writable through the REST API
    return None


def budget_line(answer: str, tokens: int | None, cost: float | None, caps: dict[str, Any] | None) -> str:
    """The tab's line for an execution stopped over its budget: what it spent, and its cap. ``answer``:
    what the stop answered; ``caps``: the task's rendered ``max_tokens`` and ``max_cost``, None when
    unknown (no rendered fields stored: the line says what was spent)."""
    spent = "an unreported number of tokens" if tokens is None else f"{tokens:,} tokens"
    spent += "" if cost is None else f" (cost {money(cost)})"
    head = "Stopped at its budget" if caps is None else "Stopped over its budget"
    head = head if answer == "stopped" else f"Reached its budget (its stop: {answer})"
    if caps is None:
        return f"{head}: spent {spent}."
    limits = [
        f"{value:,} tokens" if name == "max_tokens" else f"cost {money(value)}"
        for name in CAP_PARAMETERS
        if (value := _cap(caps, name)) is not None
    ]
    cap = " and ".join(limits) or "the crew connection's default"  # the task had none of its own
    return f"{head}: spent {spent}; its cap{'s' if len(limits) > 1 else ''}: {cap}."


def _cap(caps: dict[str, Any], parameter: str) -> int | float | None:
    try:
        return cap_value(caps.get(parameter), parameter)
    except CrewConfigurationError:  # not a cap the task could have run with
        return None


def unenforceable_line(status: CrewStatus | None, caps: dict[str, Any] | None) -> str | None:
    """The tab's line for a task with a cap of its own whose execution's status reports no usage: the cap
    cannot be enforced (the task's log says so too, at its first read); else None."""
    if status is None or caps is None or "usage_metrics" in status.raw:
        return None
    if not any(_cap(caps, name) is not None for name in CAP_PARAMETERS):
        return None
    return "Its budget cannot be enforced: the crew service reports no usage (usage_metrics) for it."
