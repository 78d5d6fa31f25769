"""Real DAG runs: ``airflow dags test`` in a subprocess, against the local crew service over HTTP.

Each run gets the connections through ``AIRFLOW_CONN_*`` (as users deploy them) and a migrated
SQLite metadata database shared by the session; outputs are read back from Airflow's XCom table.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_crew.testing.dag_runs import (
    DagRun,
    airflow_env,
    crew_connections_env,
    dags_test,
    migrate_db,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_DAGS = REPO / "example_dags"


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An AIRFLOW_HOME with a migrated SQLite database, made once per test session."""
    home = tmp_path_factory.mktemp("airflow-home")
    migrate_db(airflow_env(home, EXAMPLE_DAGS))
    return home


@pytest.fixture
def run_dag(airflow_home: Path, crew_service: Any) -> Callable[..., DagRun]:
    """Run one example DAG with ``airflow dags test``; returns a :class:`DagRun` to assert on."""

    def run(dag_id: str, *, deferrable: bool, extra_env: dict[str, str] | None = None) -> DagRun:
        env = airflow_env(airflow_home, EXAMPLE_DAGS, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(deferrable))
        env.update(crew_connections_env(crew_service))
        env.update(extra_env or {})
        return dags_test(dag_id, env, cwd=REPO)

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``CREW_DAG_RUNS_DEFERRABLE_ONLY=1`` (CI's Airflow 3.0.6 job), a DAG run made in both modes
    runs deferrable only. The blocking wait polls in the worker through the hook, as on every minor; the
    deferrable one is where the Airflow version shows (the trigger, the triggerer's loop, the resumed
    task), and the newest runs both."""
    if os.environ.get("CREW_DAG_RUNS_DEFERRABLE_ONLY") != "1":
        return
    twins = [
        item for item in items if "blocking" in getattr(getattr(item, "callspec", None), "id", "").split("-")
    ]
    if twins:
        config.hook.pytest_deselected(items=twins)
        items[:] = [item for item in items if item not in twins]
