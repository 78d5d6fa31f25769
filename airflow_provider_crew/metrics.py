"""Crew metrics, through Airflow's own ``Stats``: the table of every metric, and the calls that emit them.

:data:`METRICS` is the one list of what the provider emits; docs/metrics.md's table is generated from
it (tests/test_docs.py checks it). Every caller emits through :func:`count` and :func:`timing` by a
name in the table, never a name built by hand.

Each metric goes out twice, as Airflow emits its own ``ti.finish``: under its name with its tags
(Datadog, OpenTelemetry, StatsD with tags), and, unless ``[metrics] legacy_names_on`` is off, under
the "legacy" name with the name variables in it (``crew.execution.ended.<dag_id>.<task_id>.<state>``)
for a plain StatsD, a ``.`` in a value written ``__``. Airflow adds its ``statsd_prefix`` to both.

Metrics never fail a task or a trigger: whatever ``Stats`` raises (a backend that is down or
misconfigured, a name a validator refuses) is logged once per process and dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, TypedDict

from airflow_provider_crew._compat import conf, stats_client

log = logging.getLogger(__name__)

WORKER = "worker"
TRIGGERER = "triggerer"
TASK = ("dag_id", "task_id")


class Metric(NamedTuple):
    """One metric: how it is named, counted and tagged, where it comes from, and what it means (a named
    tuple, not a dataclass: it loads with the operators, and costs half as much to create).

    :param legacy: The tags written into the legacy name, in this order.
    :param legacy_only_when: ``(tag, value)``: the legacy name is emitted only for that value (the
        tokens' legacy name counts the total, not each kind).
    """

    name: str
    type: str  # "counter" or "timer"
    unit: str
    tags: tuple[str, ...]
    legacy: tuple[str, ...]
    emitted_by: str
    meaning: str
    alert: bool = False
    legacy_only_when: tuple[str, str] | None = None

    def legacy_name(self, tags: Mapping[str, str]) -> str | None:
        """The name for a plain StatsD, with the name variables in it; None when not emitted for these
        tags, or when one is missing (a hook called outside a task)."""
        if self.legacy_only_when is not None:
            tag, value = self.legacy_only_when
            if tags.get(tag) != value:
                return None
        if not all(tags.get(tag) for tag in self.legacy):
            return None
        return ".".join((self.name, *(tags[tag].replace(".", "__") for tag in self.legacy)))


METRICS: tuple[Metric, ...] = (
    Metric(
        name="crew.execution.started",
        type="counter",
        unit="executions",
        tags=TASK,
        legacy=TASK,
        emitted_by=f"{WORKER}: the kickoff operator, `@task.crew`, the managed agent",
        meaning="The service answered a `POST /kickoff` with a kickoff id.",
    ),
    Metric(
        name="crew.execution.ended",
        type="counter",
        unit="executions",
        tags=(*TASK, "state"),
        legacy=(*TASK, "state"),
        emitted_by=(
            f"whoever observes the end: the {WORKER} (a blocking wait, a sensor, a woken wait) or the "
            f"{TRIGGERER} (a deferred wait)"
        ),
        meaning=(
            "A wait saw its execution end: `succeeded`, `failed`, `revoked`, `paused` for a person, or "
            "`over_budget` (stopped at its cap)."
        ),
    ),
    Metric(
        name="crew.execution.tokens",
        type="counter",
        unit="tokens",
        tags=(*TASK, "kind"),
        legacy=TASK,
        emitted_by="where `crew.execution.ended` is, when the service reports `usage_metrics`",
        meaning=(
            "Tokens the execution used, by `kind` (`total`, `prompt`, `completion`); the legacy name "
            "counts the total."
        ),
        legacy_only_when=("kind", "total"),
    ),
    Metric(
        name="crew.execution.cost",
        type="counter",
        unit="millionths",
        tags=TASK,
        legacy=TASK,
        emitted_by="where `crew.execution.tokens` is, when the connection has prices",
        meaning="What the execution cost, in millionths of the prices' currency (1,000,000 = 1.00).",
    ),
    Metric(
        name="crew.execution.over_budget",
        type="counter",
        unit="executions",
        tags=(*TASK, "cap"),
        legacy=TASK,
        emitted_by="where the wait read the usage over the cap: the worker or the triggerer",
        meaning=(
            "An execution reached its cap (`cap`: `tokens`, `cost`) short of its end: it was stopped and "
            "its task failed without retry."
        ),
        alert=True,
    ),
    Metric(
        name="crew.execution.duration",
        type="timer",
        unit="ms",
        tags=(*TASK, "state"),
        legacy=TASK,
        emitted_by="where `crew.execution.ended` is, when the task knows the kickoff time",
        meaning="From the kickoff to the end the wait observed.",
    ),
    Metric(
        name="crew.execution.status_reads",
        type="counter",
        unit="reads",
        tags=TASK,
        legacy=TASK,
        emitted_by=f"at the end of each stretch of a wait, in the {WORKER} or the {TRIGGERER}",
        meaning="`GET /status` reads the wait made (summed, the reads of the whole wait).",
    ),
    Metric(
        name="crew.request.retried",
        type="counter",
        unit="attempts",
        tags=("outcome", "method"),
        legacy=("outcome",),
        emitted_by=f"the client, wherever it runs ({WORKER}, {TRIGGERER}, api-server)",
        meaning=(
            "A request sent again after `busy` (429, the service's 503), `unreachable` (no answer) or "
            "`gateway` (a gateway's 502, 503 or 504)."
        ),
    ),
    Metric(
        name="crew.stop",
        type="counter",
        unit="stops",
        tags=("reason", "answer"),
        legacy=("reason", "answer"),
        emitted_by=(
            f"the {WORKER} or the {TRIGGERER}, where a stop is sent; the api-server, for a deferred task "
            "a user marked while no triggerer ran its trigger"
        ),
        meaning=(
            "A `POST /stop` sent, by why (`timeout`, `execution_timeout`, `review_timeout`, `cleared`, "
            "`marked_<state>`, `agent_timeout`, `over_budget`) and the answer (`stopped`, "
            "`already_finished`, `no_stop_endpoint`, `unknown`)."
        ),
    ),
    Metric(
        name="crew.review.round",
        type="counter",
        unit="rounds",
        tags=(*TASK, "answer"),
        legacy=(*TASK, "answer"),
        emitted_by=WORKER,
        meaning="A review round's answer: `approved`, `feedback`, or `timed_out` (nobody answered in time).",
    ),
    Metric(
        name="crew.review.response_time",
        type="timer",
        unit="ms",
        tags=TASK,
        legacy=TASK,
        emitted_by=WORKER,
        meaning="From a round's request to the person's answer.",
    ),
    Metric(
        name="crew.wait.end_lag",
        type="timer",
        unit="ms",
        tags=(*TASK, "source"),
        legacy=TASK,
        emitted_by=f"where a wait ends, in the {WORKER} or the {TRIGGERER}",
        meaning=(
            "From the crew's end to the wait's: `wake`, from the crew's webhook; `poll`, from the last read "
            "that saw it running (an upper bound)."
        ),
    ),
    Metric(
        name="crew.events.received",
        type="counter",
        unit="events",
        tags=("dag_id",),
        legacy=("dag_id",),
        emitted_by="the api-server's plugin, for a crew connection with `event_stream`",
        meaning="Events of a crew's event stream kept for the Crew tab, each event `id` once (repeats are "
        "not counted).",
    ),
    Metric(
        name="crew.events.rejected",
        type="counter",
        unit="deliveries",
        tags=("reason",),
        legacy=("reason",),
        emitted_by="the api-server's plugin",
        meaning="Event deliveries refused whole: `unauthorized` (not the run's events token, or no such "
        'address), `too_large` (over 1 MiB or 2,000 events), `malformed` (not `{"events": [...]}`).',
    ),
    Metric(
        name="crew.paid_post.unknown_outcome",
        type="counter",
        unit="requests",
        tags=(*TASK, "request"),
        legacy=(*TASK, "request"),
        emitted_by=WORKER,
        meaning=(
            "A paid POST (`kickoff`, `resume`, `review`) whose outcome is unknown: an execution may run, or "
            "an answer may be applied, that nobody follows. The task failed without retry."
        ),
        alert=True,
    ),
    Metric(
        name="crew.execution.left_running",
        type="counter",
        unit="executions",
        tags=(*TASK, "why"),
        legacy=TASK,
        emitted_by=(
            f"the {WORKER}, the {TRIGGERER} or the api-server, where a task ends and no stop was confirmed"
        ),
        meaning=(
            "An execution the task owned may run on with nobody following it: its stop's outcome is "
            "unknown (`stop_unknown`), the service has no `/stop` (`no_stop_endpoint`), stopping is off "
            "(`stop_disabled`: the connection's `stop_executions`, or the task's `stop_crew=False` at its "
            "time-out), or its kickoff's outcome is unknown (`unknown_outcome`)."
        ),
        alert=True,
    ),
)
BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}

_failed_before = False  # a Stats failure is logged once per process


def count(name: str, value: int = 1, /, **tags: Any) -> None:
    """Add ``value`` to the counter ``name`` (a name in :data:`METRICS`), with ``tags``. Never raises."""
    _emit(name, value, tags)


def timing(name: str, milliseconds: float, /, **tags: Any) -> None:
    """Record ``milliseconds`` in the timer ``name`` (a name in :data:`METRICS`), with ``tags``.
    Never raises."""
    _emit(name, milliseconds, tags)


def task_tags(task_instance: Any) -> dict[str, str]:
    """The ``dag_id`` and ``task_id`` tags of a task instance (Airflow's ``ti.stats_tags``), those it
    has: never raises, as no metric may fail a task."""
    return {tag: value for tag in TASK if (value := getattr(task_instance, tag, None))}


def current_task_tags() -> dict[str, str]:
    """:func:`task_tags` of the task this code runs in (a hook called from a task); {} outside one."""
    try:
        from airflow.sdk import get_current_context

        return task_tags(get_current_context()["ti"])
    except Exception:
        return {}


class ReviewedAnswer(TypedDict):
    """What the review metrics read of a reviewer's answer (a review round's answer is one)."""

    is_approve: bool
    timed_out: bool  # nobody answered in time: the default answer was taken
    responded_at: str | None  # ISO 8601


def review_round(tags: Mapping[str, str], given: ReviewedAnswer | None, asked_at: float | None) -> None:
    """A review round's answer (``given``; None when nobody answered in time), and how long the person
    took from the request ``asked_at`` (epoch seconds)."""
    if given is None or given["timed_out"]:
        count("crew.review.round", **tags, answer="timed_out")
        return
    count("crew.review.round", **tags, answer="approved" if given["is_approve"] else "feedback")
    responded_at = given["responded_at"]
    if asked_at is None or not responded_at:
        return
    try:
        answered = datetime.fromisoformat(responded_at)
    except (TypeError, ValueError):
        return
    timing("crew.review.response_time", max(0.0, answered.timestamp() - asked_at) * 1000, **tags)


def milliseconds_since(epoch_seconds: float) -> float:
    """Milliseconds from ``epoch_seconds`` to now; 0 for a time ahead of this machine's clock."""
    return max(0.0, time.time() - epoch_seconds) * 1000


def _emit(name: str, value: float, tags: Mapping[str, Any]) -> None:
    global _failed_before
    try:
        metric = BY_NAME[name]
        tags = {key: str(tag) for key, tag in tags.items()}
        stats = stats_client()
        send = stats.incr if metric.type == "counter" else stats.timing
        if conf.getboolean("metrics", "legacy_names_on", fallback=True):
            legacy = metric.legacy_name(tags)
            if legacy is not None:
                send(legacy, value, tags={key: tag for key, tag in tags.items() if key not in metric.legacy})
        send(name, value, tags=tags)
    except Exception as error:  # metrics never fail a task or a trigger
        if not _failed_before:
            _failed_before = True
            log.warning(
                "Could not emit metric %s (%r); metrics that fail are dropped in this process.", name, error
            )
        else:
            log.debug("Could not emit metric %s (%r).", name, error)


__all__ = [
    "BY_NAME",
    "METRICS",
    "Metric",
    "ReviewedAnswer",
    "count",
    "current_task_tags",
    "milliseconds_since",
    "review_round",
    "task_tags",
    "timing",
]
