"""What one execution may spend: its caps, its cost from prices, and when to read its status again so
that a crew spending steadily is stopped close to its cap. No I/O, no Airflow.

A cap is ``max_tokens`` (the execution's total tokens, as the service counts them in ``usage_metrics``)
and/or ``max_cost`` (in the currency of the connection's prices). Both cover the execution's whole
total: the service's counts are cumulative across review rounds, so a resume continues from what was
already spent. Every wait compares the usage of each status read with the cap (:meth:`Budget.over`)
and, between reads, schedules the next one from the spending rate it observed (:class:`SpendingPace`):
at a steady rate the wait reads again shortly after the cap is reached, so the crew is stopped having
spent at most :data:`OVERSHOOT_SHARE` over its cap or :data:`SLACK_SECONDS` of its spending, whichever
is larger (docs/performance.md, "Budget overshoot").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_crew.exceptions import CrewConfigurationError

#: The share of a cap a crew may spend past it before it is stopped, at a steady rate.
OVERSHOOT_SHARE = 0.1
#: ... or this many seconds of its spending, whichever is larger.
SLACK_SECONDS = 1.0
#: With a cap, the read after the first one comes within this many seconds: the first two reads
#: give the spending rate, which then schedules the reads.
FIRST_RATE_READ_SECONDS = 1.0
#: How long a deferral leaves a wait unread: the worker's exit, the scheduler, a triggerer starting the
#: trigger and its first connection lookup (3-4 s on a fresh triggerer; seconds more on a loaded Airflow).
#: A capped wait whose cap may come sooner reads on in the worker instead (``CrewStopMixin``).
DEFERRAL_GAP_SECONDS = 10.0
#: The parameters of a crew task that set its caps, and the connection extras that give their defaults.
CAP_PARAMETERS = {"max_tokens": "max_usage", "max_cost": "max_cost"}
# The token cap's extra is ``max_usage``, not ``max_tokens``: Airflow masks the value of any extra whose
# name holds "token" (connection_form.py, CONN_FIELDS).


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices per million tokens by kind, in the currency ``max_cost`` is in.

    :param input: Per million prompt (input) tokens.
    :param output: Per million completion (output) tokens.
    :param cached_input: Per million cached prompt tokens, where the service reports them
        (``cached_prompt_tokens``, part of the prompt tokens); without it they cost ``input``.
    """

    input: float | None = None
    output: float | None = None
    cached_input: float | None = None

    def cost(self, usage: Mapping[str, Any] | None) -> float | None:
        """The cost of ``usage`` (a ``usage`` XCom's counts), or None when it cannot be priced: no
        usage, or a kind of token counted with no price for it."""
        if usage is None:
            return None
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
        if prompt is None and completion is None:
            return None
        cached = min(usage.get("cache_read_tokens") or 0, prompt or 0) if self.cached_input is not None else 0
        parts = (
            ((prompt or 0) - cached, self.input),
            (completion or 0, self.output),
            (cached, self.cached_input),
        )
        if any(count and price is None for count, price in parts):
            return None
        return round(sum(count * (price or 0.0) for count, price in parts) / 1_000_000, 6)

    def to_kwargs(self) -> dict[str, float | None]:
        return {"input": self.input, "output": self.output, "cached_input": self.cached_input}


def priced(usage: dict[str, Any] | None, prices: Prices | None) -> dict[str, Any] | None:
    """``usage`` with its ``cost`` filled in from ``prices`` (None without prices, as before)."""
    if usage is None or prices is None:
        return usage
    return {**usage, "cost": prices.cost(usage)}


@dataclass(frozen=True, slots=True)
class Budget:
    """The caps of one execution and the prices its usage is priced at; either may be absent
    (:func:`budget_for` gives None for neither)."""

    max_tokens: int | None = None
    max_cost: float | None = None
    prices: Prices | None = None

    def used(self, usage: Mapping[str, Any] | None) -> float | None:
        """The share of the nearest cap spent (1.0: at the cap), or None when the service reports no
        usage (or, for ``max_cost`` alone, none that can be priced)."""
        if usage is None:
            return None
        shares = []
        total = usage.get("total_tokens")
        if self.max_tokens is not None and total is not None:
            shares.append(total / self.max_tokens)
        cost = self.prices.cost(usage) if self.prices is not None else None
        if self.max_cost is not None and cost is not None:
            shares.append(cost / self.max_cost)
        return max(shares) if shares else None

    @property
    def capped(self) -> bool:
        """Whether there is a cap (a budget may hold prices alone, to price the usage)."""
        return self.max_tokens is not None or self.max_cost is not None

    def cap_reached(self, usage: Mapping[str, Any] | None) -> str:
        """Which cap ``usage`` reached first: ``tokens`` or ``cost`` (the ``cap`` tag of the metric)."""
        total = (usage or {}).get("total_tokens")
        if self.max_tokens is not None and total is not None and total >= self.max_tokens:
            return "tokens"
        return "cost"

    def over(self, usage: Mapping[str, Any] | None) -> bool:
        """Whether ``usage`` reached a cap."""
        used = self.used(usage)
        return used is not None and used >= 1.0

    def describe_caps(self) -> str:
        caps = []
        if self.max_tokens is not None:
            caps.append(f"max_tokens={self.max_tokens}")
        if self.max_cost is not None:
            caps.append(f"max_cost={self.max_cost:g}")
        return ", ".join(caps)

    def describe_spent(self, usage: Mapping[str, Any] | None) -> str:
        """What ``usage`` spent, in the caps' terms: tokens, and the cost when it is priced."""
        if usage is None:
            return "no usage reported"
        spent = f"{usage.get('total_tokens')} tokens"
        cost = self.prices.cost(usage) if self.prices is not None else None
        return spent if cost is None else f"{spent}, cost {cost:g}"

    def over_message(self, kickoff_id: str, usage: Mapping[str, Any] | None) -> str:
        """What a wait's end over the budget says (the task's error adds what came of the stop)."""
        return (
            f"Crew execution {kickoff_id} reached its budget: it spent {self.describe_spent(usage)} "
            f"({self.describe_caps()})"
        )

    def to_kwargs(self) -> dict[str, Any]:
        """The budget as JSON primitives (a trigger's kwargs)."""
        return {
            "max_tokens": self.max_tokens,
            "max_cost": self.max_cost,
            "prices": self.prices.to_kwargs() if self.prices is not None else None,
        }

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None) -> Budget | None:
        if not kwargs:
            return None
        prices = kwargs.get("prices")
        return cls(
            max_tokens=kwargs.get("max_tokens"),
            max_cost=kwargs.get("max_cost"),
            prices=Prices(**prices) if prices else None,
        )


def checked_cap(value: Any, parameter: str) -> Any:
    """A cap as a task was given it, at DAG parse: None, a template (checked at task start), or a
    positive number (a whole one for ``max_tokens``); anything else fails naming the parameter."""
    if value is None or (isinstance(value, str) and "{{" in value):
        return value
    return cap_value(value, parameter)


def cap_value(value: Any, parameter: str) -> int | float | None:
    """A rendered cap as a number: a positive number, or its text (a template renders to text); None
    and "" for no cap. ``max_tokens`` is a whole number."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = value
    whole = parameter == "max_tokens"
    if isinstance(number, float) and whole and number.is_integer():
        number = int(number)
    kinds = (int,) if whole else (int, float)
    if isinstance(number, bool) or not isinstance(number, kinds) or not math.isfinite(number) or number <= 0:
        what = "whole number of tokens" if whole else "number, in the currency of the connection's prices"
        raise CrewConfigurationError(
            f"{parameter} must be a positive {what} (or None for no cap), got {value!r}. "
            f"Fix the task's {parameter}, or leave it None to take the crew connection's default."
        )
    return number


def prices_of(config: Any) -> Prices | None:
    """A crew connection's prices (``CrewConnectionConfig``), or None when it has none."""
    prices = Prices(config.input_price, config.output_price, config.cached_input_price)
    return None if prices == Prices() else prices


def budget_for(
    max_tokens: Any, max_cost: Any, *, config: Any, conn_id: str, defaults: bool = True
) -> Budget | None:
    """The budget of one execution: the task's caps, else the connection's defaults, and the connection's
    prices (which price its usage with no cap too); None with neither caps nor prices.

    :param max_tokens: The task's ``max_tokens`` (rendered).
    :param max_cost: The task's ``max_cost`` (rendered).
    :param config: The crew connection's ``CrewConnectionConfig``: its default caps and its prices.
    :param conn_id: The connection, for the errors.
    :param defaults: Take the connection's caps where the task gives none (off for a task that does not
        stop its execution: a sensor that only watches).
    """
    tokens = cap_value(max_tokens, "max_tokens")
    cost = cap_value(max_cost, "max_cost")
    if defaults:
        tokens = tokens if tokens is not None else config.max_usage
        cost = cost if cost is not None else config.max_cost
    prices = prices_of(config)
    if tokens is None and cost is None and prices is None:
        return None
    if cost is not None and (prices is None or (prices.input is None and prices.output is None)):
        raise CrewConfigurationError(
            f"max_cost={cost:g} needs prices: connection {conn_id!r} has no 'Input price' (extra "
            "'input_price') or 'Output price' (extra 'output_price'), per million tokens. Set them on the "
            "connection, or cap tokens with max_tokens instead."
        )
    return Budget(max_tokens=None if tokens is None else int(tokens), max_cost=cost, prices=prices)


class SpendingPace:
    """When a wait with a cap reads next: from the spending rate between its last two reads.

    At a steady rate the crew reaches its cap ``(1 - used) / rate`` seconds after a read. Within the
    allowed overshoot of it (the larger of :data:`OVERSHOOT_SHARE` of the cap and :data:`SLACK_SECONDS`
    of spending), the next read comes half the allowance past the cap, so it finds the cap reached and
    the stop comes within the allowance; farther away, halfway to the cap, so that a rate measured
    across the execution's start, or a change of pace, is corrected before it matters. Without a rate
    yet (a first read) the next read comes within :data:`FIRST_RATE_READ_SECONDS`; a crew that spends
    nothing (paused, idle) leaves the wait's own schedule as it is.
    """

    __slots__ = ("at", "due", "rate", "said_unenforceable", "used")

    def __init__(self, at: float | None = None, used: float | None = None) -> None:
        self.at = at
        self.used = used
        self.said_unenforceable = False  # the wait said its cap cannot be enforced (no usage reported)
        self.due: float | None = None  # when the next read is due by the rate (epoch seconds)
        self.rate: float | None = None  # the share of the cap spent per second, between the last reads

    def cap_within(self, seconds: float, *, learning: bool) -> bool:
        """Whether the cap may come within ``seconds`` at the rate last read; without a rate (a first
        read, or nothing spent since the last), ``learning``. False when the service reports no usage."""
        if self.used is None:
            return False
        if not self.rate:
            return learning
        return (1.0 - self.used) / self.rate < seconds

    def to_kwargs(self) -> list[Any]:
        """The pace as JSON primitives (a trigger's kwargs): the wait goes on at the same pace."""
        return [self.at, self.used, self.said_unenforceable, self.due]

    @classmethod
    def from_kwargs(cls, kwargs: Any) -> SpendingPace:
        pace = cls()
        if isinstance(kwargs, (list, tuple)) and len(kwargs) == 4:
            pace.at, pace.used, pace.said_unenforceable, pace.due = kwargs
        return pace

    def after_read(
        self, now: float, budget: Budget, usage: Mapping[str, Any] | None, log: Any, kickoff_id: str
    ) -> float | None:
        """:meth:`next_read` after a read at ``now`` that found ``usage``. A cap the service's answer
        cannot enforce (no usage in it, or none the prices can price) is said once, at the first read
        that shows it: the wait goes on without it."""
        used = budget.used(usage)
        if used is None and not self.said_unenforceable:
            self.said_unenforceable = True
            log.warning(
                "Crew execution %s: its status reports no usage%s, so its budget (%s) cannot be enforced; "
                "the wait goes on without it (docs/howto/budget.rst, 'A service that reports no usage').",
                kickoff_id,
                "" if usage is None else " that the connection's prices can price",
                budget.describe_caps(),
            )
        return self.next_read(now, used)

    def next_read(self, now: float, used: float | None) -> float | None:
        """Seconds to the next read after one at ``now`` that found ``used`` of the cap spent; None: the
        wait's own schedule (no usage, or none spent since the last read)."""
        delay = self._next_read(now, used)
        self.due = None if delay is None else now + delay
        return delay

    def _next_read(self, now: float, used: float | None) -> float | None:
        before_at, before_used = self.at, self.used
        if used is None:
            return None
        self.at, self.used = now, used
        if before_at is None or before_used is None:
            return FIRST_RATE_READ_SECONDS
        if now <= before_at or used <= before_used:
            self.rate = 0.0
            return None
        rate = self.rate = (used - before_used) / (now - before_at)  # share of the cap per second
        allowance = max(SLACK_SECONDS, OVERSHOOT_SHARE / rate)
        to_cap = max(0.0, (1.0 - used) / rate)
        # Far from the cap, halfway there: a rate read over a start (queued, nothing spent yet) or a
        # change of pace is read again before it matters. Near it, just past it.
        return to_cap / 2 if to_cap > allowance else to_cap + allowance / 2


__all__ = [
    "CAP_PARAMETERS",
    "OVERSHOOT_SHARE",
    "SLACK_SECONDS",
    "Budget",
    "Prices",
    "SpendingPace",
    "budget_for",
    "cap_value",
    "checked_cap",
    "priced",
    "prices_of",
]
