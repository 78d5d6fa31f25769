"""OpenLineage events of crew tasks, for real: ``airflow dags test`` with OpenLineage's file transport.

The DAG (tests/integration/dags/crew_lineage.py) runs against the local crew service, in deferrable
and in blocking mode; the test reads the events the OpenLineage listener wrote and asserts the
crew facets, that input values and outputs appear only where a task opted in, and that no token or
webhook credential appears anywhere. Skipped without ``apache-airflow-providers-openlineage``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_crew.connection import build_execution_url
from airflow_provider_crew.testing.dag_runs import DagRun, airflow_env, dags_test

pytest.importorskip(
    "airflow.providers.openlineage", reason="needs apache-airflow-providers-openlineage (extra: openlineage)"
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "tests" / "integration" / "dags" / "crew_lineage.py"
DAG_ID = "crew_lineage"
TEMPLATE = "https://dashboard.example.test/crews/research/executions/{kickoff_id}"
WEBHOOK_TOKEN = "lineage-webhook-credential-5d2a"
TOPIC = "tidal energy"
FAILING_TOPIC = "fail"  # the bundled research crew fails its first task on this topic
MODES = [pytest.param(True, id="deferrable"), pytest.param(False, id="blocking")]


@dataclass
class LineageRun:
    run: DagRun
    events: list[dict[str, Any]]
    events_text: str

    def of(self, task_id: str, event_type: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["job"]["name"] == f"{DAG_ID}.{task_id}" and e["eventType"] == event_type
        ]

    def one(self, task_id: str, event_type: str) -> dict[str, Any]:
        (event,) = self.of(task_id, event_type)
        return event


@pytest.fixture
def run_with_lineage(
    airflow_home: Path, crew_service: Any, tmp_path: Path
) -> Iterator[Callable[..., LineageRun]]:
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)  # only this DAG: parsing stays quick

    def run(*, deferrable: bool, topic: str = TOPIC) -> LineageRun:
        events_file = tmp_path / f"openlineage-{deferrable}-{topic}.jsonl"
        env = airflow_env(
            airflow_home,
            dags,
            AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(deferrable),
            AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
                {"type": "file", "log_file_path": str(events_file), "append": True}
            ),
            AIRFLOW__OPENLINEAGE__NAMESPACE="crew-tests",
            CREW_LINEAGE_TOPIC=topic,
        )
        env.update(crew_service.connection_env("crew_default", execution_url_template=TEMPLATE))
        env["AIRFLOW_CONN_CREW_LINEAGE_WEBHOOK"] = json.dumps(
            {"conn_type": "http", "host": crew_service.webhooks.url_for("human"), "password": WEBHOOK_TOKEN}
        )
        dag_run = dags_test(DAG_ID, env, cwd=REPO, check=False)
        assert events_file.exists(), f"no OpenLineage events written:\n{dag_run.stdout[-3000:]}"
        text = events_file.read_text()
        events = [json.loads(line) for line in text.splitlines() if line.strip()]
        return LineageRun(run=dag_run, events=events, events_text=text)

    yield run


def assert_no_credentials(lineage: LineageRun, crew_service: Any) -> None:
    for secret in (WEBHOOK_TOKEN, crew_service.org_token, crew_service.user_token):
        assert secret not in lineage.events_text
        assert secret not in json.dumps(lineage.run.xcom("kickoff", "execution_url"))


def assert_waited_as_configured(lineage: LineageRun, task_id: str, deferrable: bool) -> None:
    # A deferred task runs twice (before and after the trigger), and each run emits START.
    assert ("CrewStatusTrigger" in lineage.run.stdout) is deferrable, lineage.run.stdout[-3000:]
    assert len(lineage.of(task_id, "START")) == (2 if deferrable else 1)


def crew_facets(event: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    facets = event["run"]["facets"]
    return facets["externalQuery"], facets["crewExecution"]


# Steps of 1 s: the kickoff is still running when it first reads the status, so it really defers.
@pytest.mark.crew_service(speed=0.05)
@pytest.mark.parametrize("deferrable", MODES)
def test_complete_events_carry_the_execution_its_outcome_and_cost(run_with_lineage, crew_service, deferrable):
    lineage = run_with_lineage(deferrable=deferrable)

    assert lineage.run.state == "success", lineage.run.stdout[-3000:]
    assert_waited_as_configured(lineage, "kickoff", deferrable)
    kickoff_id = lineage.run.xcom("kickoff")
    execution = crew_service.executions[kickoff_id]

    external, crew = crew_facets(lineage.one("kickoff", "COMPLETE"))
    assert external["externalQueryId"] == kickoff_id
    assert external["source"] == crew_service.base_url  # the base URL, no credentials in it
    assert external["_schemaURL"].endswith("ExternalQueryRunFacet.json#/$defs/ExternalQueryRunFacet")
    expected = {
        "executionId": kickoff_id,
        "outcome": "succeeded",
        "state": "SUCCESS",
        "tasksCompleted": 2,
        "tasksTotal": 2,
        "tokenUsage": execution["usage_metrics"],
        "inputNames": ["current_year", "topic"],
        "executionUrl": build_execution_url(TEMPLATE, kickoff_id),
    }
    assert {key: value for key, value in crew.items() if not key.startswith("_")} == expected
    assert crew["tokenUsage"]["total_tokens"] > 0

    # Opted in: the values and the output too.
    with_values_id = lineage.run.xcom("kickoff_with_values")
    _, crew_with_values = crew_facets(lineage.one("kickoff_with_values", "COMPLETE"))
    assert crew_with_values["inputs"] == {"topic": TOPIC, "current_year": "2026"}
    assert crew_with_values["output"] == crew_service.executions[with_values_id]["result"]

    # The sensor follows the first execution: same id, its own view of the outcome.
    external, crew = crew_facets(lineage.one("wait_for_crew", "COMPLETE"))
    assert external == {**external, "externalQueryId": kickoff_id, "source": crew_service.base_url}
    assert (crew["executionId"], crew["outcome"], crew["state"]) == (kickoff_id, "succeeded", "SUCCESS")
    assert "inputs" not in crew and "output" not in crew

    # Input values and outputs appear nowhere but in the task that opted in.
    for event in lineage.events:
        if event["job"]["name"] != f"{DAG_ID}.kickoff_with_values":
            assert TOPIC not in json.dumps(event), event["job"]["name"]
    assert_no_credentials(lineage, crew_service)


@pytest.mark.crew_service(speed=0.05)
@pytest.mark.parametrize("deferrable", MODES)
def test_fail_events_carry_the_crews_error(run_with_lineage, crew_service, deferrable):
    lineage = run_with_lineage(deferrable=deferrable, topic=FAILING_TOPIC)

    assert lineage.run.state == "failed", lineage.run.stdout[-3000:]
    assert_waited_as_configured(lineage, "kickoff", deferrable)
    kickoff_id = lineage.run.xcom("kickoff", "kickoff_id")
    execution = crew_service.executions[kickoff_id]
    assert execution["state"] == "FAILED"

    event = lineage.one("kickoff", "FAIL")
    external, crew = crew_facets(event)
    assert (external["externalQueryId"], external["source"]) == (kickoff_id, crew_service.base_url)
    assert crew["outcome"] == "failed"
    assert crew["state"] == "FAILED"
    assert crew["error"] == execution["error"]
    assert "search tool returned no results" in crew["error"]
    assert crew["inputNames"] == ["current_year", "topic"] and "inputs" not in crew
    assert crew["executionUrl"] == build_execution_url(TEMPLATE, kickoff_id)
    # OpenLineage's listener puts the task's exception here; it names the crew's error.
    assert execution["error"] in event["run"]["facets"]["errorMessage"]["message"]
    assert not lineage.of("kickoff", "COMPLETE")
    assert_no_credentials(lineage, crew_service)
