"""The crew metrics as a platform team's backend receives them (the lead's spec, issue #43): the
tagged names, and the "legacy" dotted names whose variables carry what plain StatsD has no tags for.

One table, :data:`NAME_VARIABLES`, says which variables each metric puts in its dotted name, in order;
:func:`legacy` builds a dotted name from it as Airflow builds ``ti.finish.<dag_id>.<task_id>.<state>``
('.' in a value becomes '__', as Airflow does for a task in a group).
"""

from __future__ import annotations

PREFIX = "airflow."  # [metrics] statsd_prefix and otel_prefix, Airflow's default

NAME_VARIABLES: dict[str, tuple[str, ...]] = {
    "crew.execution.started": ("dag_id", "task_id"),
    "crew.execution.ended": ("dag_id", "task_id", "state"),
    "crew.execution.tokens": ("dag_id", "task_id"),
    "crew.execution.duration": ("dag_id", "task_id"),
    "crew.execution.status_reads": ("dag_id", "task_id"),
    "crew.request.retried": ("outcome",),
    "crew.stop": ("reason", "answer"),
    "crew.review.round": ("dag_id", "task_id", "answer"),
    "crew.review.response_time": ("dag_id", "task_id"),
    "crew.wait.end_lag": ("dag_id", "task_id"),
    "crew.paid_post.unknown_outcome": ("dag_id", "task_id", "request"),
    "crew.execution.left_running": ("dag_id", "task_id"),
    "crew.execution.cost": ("dag_id", "task_id"),
    "crew.execution.over_budget": ("dag_id", "task_id"),
    "crew.events.received": ("dag_id",),
    "crew.events.rejected": ("reason",),
}
ALERTS = ("crew.execution.over_budget", "crew.paid_post.unknown_outcome", "crew.execution.left_running")
REVIEW_METRICS = ("crew.review.round", "crew.review.response_time")  # human-in-the-loop: Airflow 3.1+


# ``crew.wait.end_lag`` runs from the last read that saw the crew running (the task's read before it
# deferred, when the trigger's first read ends the wait), which came after the kickoff: it is within
# ``crew.execution.duration``, the two taken at most this far apart.
LAG_SLACK_MS = 50


def tagged(metric: str) -> str:
    """The name on the wire of the tagged metric (StatsD and OpenTelemetry alike)."""
    assert metric in NAME_VARIABLES, metric
    return PREFIX + metric


def legacy(metric: str, **variables: str) -> str:
    """The dotted name on the wire, e.g. ``airflow.crew.execution.ended.my_dag.kickoff.succeeded``."""
    names = NAME_VARIABLES[metric]
    assert set(variables) == set(names), (metric, sorted(variables), names)
    return ".".join([PREFIX + metric, *(str(variables[name]).replace(".", "__") for name in names)])


def documented_metrics() -> list[str]:
    """The names of ``airflow_provider_crew.metrics.METRICS``, the table docs/metrics.md is made from,
    that the DAG runs produce on this Airflow (a review needs 3.1+)."""
    from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
    from airflow_provider_crew.metrics import METRICS  # the emitting side (issue #43)

    names = (
        list(METRICS) if isinstance(METRICS, dict) else [getattr(m, "name", None) or m[0] for m in METRICS]
    )
    return [name for name in names if AIRFLOW_V_3_1_PLUS or name not in REVIEW_METRICS]
