"""A deployment's ``[metrics] stat_name_handler`` that raises for some names: a misconfigured metrics
setup as the crew's code meets it (tests/metrics).

Airflow calls the handler on every name it sends and lets anything but its own
``InvalidStatsNameException`` through to the caller. It refuses only the crew's metrics of the
``metrics_broken_*`` DAGs (their dotted names carry the DAG id), so that Airflow's own metrics and
every other DAG's are untouched: those DAGs must still succeed, in the worker and in the triggerer.
"""

from __future__ import annotations

REFUSED = "metrics_broken"


def refuse_broken_dags(stat_name: str) -> str:
    if stat_name.startswith("crew.") and REFUSED in stat_name:
        raise ValueError(f"refused by the deployment's stat_name_handler: {stat_name}")
    return stat_name
