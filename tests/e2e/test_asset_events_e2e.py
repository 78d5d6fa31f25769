"""End to end: a crew task's asset event names the execution that produced it.

Real api-server, scheduler, dag-processor and triggerer against the local crew service. A deferrable
kickoff with an asset outlet finishes; the asset event Airflow records carries the kickoff id, the
execution's page, the state and the token counts in ``extra``, and the DAG scheduled on the asset
reads them from ``triggering_asset_events``. A kickoff that does not wait names its execution too,
as ``running``. The REST API's asset events show the same ``extra``.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .airflow_stack import FAST_SETTLE, AirflowStack, metadata_database, running_stack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

DAG_FILE = Path(__file__).resolve().parent / "dags" / "crew_assets.py"
PAGE = "https://crews.example.com/executions/{kickoff_id}"
CREW = {
    "name": "assets",
    "inputs": ["topic"],
    "pending_seconds": 0.1,
    "tasks": [{"name": "report", "agent": "Writer", "steps": 2, "step_seconds": 1}],
}


@pytest.fixture(scope="module")
def asset_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Any]]:
    from airflow_provider_crew.testing import LocalCrewService

    tmp = tmp_path_factory.mktemp("assets")
    dags = tmp / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    with contextlib.ExitStack() as stack:
        service = stack.enter_context(LocalCrewService([CREW]))
        env = {**metadata_database(stack), **FAST_SETTLE}
        env.update(service.connection_env("crew_assets", crew="assets", execution_url_template=PAGE))
        dag_ids = ("asset_producer", "asset_consumer", "asset_consumer_started")
        with running_stack(tmp / "home", dags, env, dag_ids) as airflow:
            for dag_id in dag_ids[1:]:
                airflow.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
            yield airflow, service


def consumer_extra(airflow: AirflowStack, dag_id: str) -> dict[str, Any] | None:
    """The ``extra`` the consumer DAG read from its triggering asset event, once its run succeeded."""
    airflow.check_alive()
    runs = airflow.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
    failed = [run["dag_run_id"] for run in runs if run["state"] == "failed"]
    assert not failed, airflow.failures(dag_id, failed)
    done = [run for run in runs if run["state"] == "success"]
    return airflow.xcom(dag_id, done[0]["dag_run_id"], "read_extra") if done else None


def test_the_asset_event_names_its_execution_and_the_scheduled_dag_reads_it(asset_stack):
    airflow, service = asset_stack
    run_id = airflow.trigger("asset_producer")
    wait_for(
        lambda: airflow.dag_run_state("asset_producer", run_id) in ("success", "failed") or None,
        timeout=180,
        what="the producer to end",
        interval=1,
    )
    assert airflow.task_states("asset_producer", run_id) == {
        "kickoff": "success",
        "kickoff_no_wait": "success",
    }, airflow.failures("asset_producer", [run_id])
    kickoff_id = airflow.xcom("asset_producer", run_id, "kickoff")
    usage = airflow.xcom("asset_producer", run_id, "kickoff", key="usage")
    assert usage["total_tokens"] > 0, usage

    extra = wait_for(
        lambda: consumer_extra(airflow, "asset_consumer"), timeout=120, what="the consumer's run"
    )
    assert extra == {
        "kickoff_id": kickoff_id,
        "state": "succeeded",
        "execution_url": PAGE.format(kickoff_id=kickoff_id),
        "usage": usage,
    }
    assert service.executions[kickoff_id]["state"] == "SUCCESS"

    started_id = airflow.xcom("asset_producer", run_id, "kickoff_no_wait")
    started = wait_for(
        lambda: consumer_extra(airflow, "asset_consumer_started"),
        timeout=120,
        what="the started consumer's run",
    )
    assert started == {
        "kickoff_id": started_id,
        "state": "running",
        "execution_url": PAGE.format(kickoff_id=started_id),
    }

    # The REST API's asset events (what the UI's asset page shows) hold the same extra.
    events = airflow.api("GET", "/assets/events", params={"source_dag_id": "asset_producer"})
    by_task = {event["source_task_id"]: event["extra"] for event in events["asset_events"]}
    assert by_task["kickoff"] == extra
    assert by_task["kickoff_no_wait"] == started
