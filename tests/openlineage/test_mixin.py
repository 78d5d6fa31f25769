"""The OpenLineage support without a DAG run: lazy imports, the facets built from what a task holds,
no request to the crew service, nothing secret. tests/integration/test_openlineage.py runs it for
real in ``airflow dags test``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_crew.openlineage import CREW_EXECUTION_FACET, public_base_url
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.rules import FollowedExecution, Outcome, WaitResult

SCHEMA_FILE = (
    Path(__file__).resolve().parents[2]
    / "airflow_provider_crew"
    / "openlineage"
    / "CrewExecutionRunFacet.json"
)


def test_importing_the_operators_and_the_sensor_imports_no_openlineage_module():
    """Airflow's configuration reads every provider's metadata (get_provider_info) whoever asks
    first; that is all of OpenLineage an import of the crew tasks may load."""
    code = (
        "import sys, airflow_provider_crew.operators.crew, airflow_provider_crew.sensors.crew, "
        "airflow_provider_crew.openlineage, airflow_provider_crew.links.crew; "
        "print([m for m in sys.modules if (m.split('.')[0] == 'openlineage' "
        "or m.startswith('airflow.providers.openlineage.')) and not m.endswith('.get_provider_info')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://my-crew.example.com", "https://my-crew.example.com"),
        (
            "https://user:s3cret@my-crew.example.com:8443/v1?token=abc#x",
            "https://my-crew.example.com:8443/v1",
        ),
        ("http://[::1]:8787/crews/review", "http://[::1]:8787/crews/review"),
    ],
)
def test_the_source_is_the_base_url_without_credentials(base_url, expected):
    assert public_base_url(base_url) == expected


# -- facets (need the OpenLineage provider) ---------------------------------------------------------

RECORD = {
    "state": "SUCCESS",
    "result": "the report",
    "progress": {"completed": 2, "total": 2},
    "usage_metrics": {
        "total_tokens": 30,
        "prompt_tokens": 20,
        "completion_tokens": 10,
        "note": "x",
        "flag": True,
    },
}


def kickoff_task(**kwargs: Any) -> Any:
    from airflow_provider_crew.operators.crew import CrewKickoffOperator

    return CrewKickoffOperator(task_id="kickoff", inputs={"topic": "private topic", "year": 2026}, **kwargs)


def facets_dict(lineage: Any) -> dict[str, Any]:
    from openlineage.client.serde import Serde

    return {name: json.loads(Serde.to_json(facet)) for name, facet in lineage.run_facets.items()}


@pytest.fixture
def openlineage():
    return pytest.importorskip(
        "airflow.providers.openlineage", reason="needs apache-airflow-providers-openlineage"
    )


def test_complete_facets_come_from_what_the_task_holds_without_a_request(
    openlineage, crew_service, crew_connection
):
    task = kickoff_task()
    task.crew_execution = FollowedExecution(
        "k-1",
        result=WaitResult(
            outcome=Outcome.SUCCEEDED, message="done", last_status=CrewStatus.from_response(RECORD)
        ),
    )
    before = crew_service.counters["requests"]

    facets = facets_dict(task.get_openlineage_facets_on_complete(None))

    assert crew_service.counters["requests"] == before  # no request to the crew service
    assert facets["externalQuery"]["externalQueryId"] == "k-1"
    assert facets["externalQuery"]["source"] == crew_service.base_url
    crew = facets[CREW_EXECUTION_FACET]
    assert crew["tokenUsage"] == {"total_tokens": 30, "prompt_tokens": 20, "completion_tokens": 10}
    assert "cost" not in crew  # the connection has no prices
    assert (crew["state"], crew["outcome"], crew["tasksCompleted"], crew["tasksTotal"]) == (
        "SUCCESS",
        "succeeded",
        2,
        2,
    )
    assert crew["inputNames"] == ["topic", "year"]
    assert "inputs" not in crew and "output" not in crew and "errorMessage" not in facets
    assert "private topic" not in json.dumps(facets) and crew_service.org_token not in json.dumps(facets)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_FILE.read_text())["$defs"]["CrewExecutionRunFacet"]["allOf"][1]
    jsonschema.validate(crew, schema)


def test_values_only_when_the_task_opts_in(openlineage, crew_connection):
    task = kickoff_task(openlineage_include_values=True)
    task.crew_execution = FollowedExecution(
        "k-1",
        result=WaitResult(
            outcome=Outcome.SUCCEEDED, message="done", last_status=CrewStatus.from_response(RECORD)
        ),
    )
    crew = facets_dict(task.get_openlineage_facets_on_complete(None))[CREW_EXECUTION_FACET]
    assert crew["inputs"] == {"topic": "private topic", "year": 2026}
    assert crew["output"] == "the report"


def test_a_task_that_failed_before_any_execution_reports_nothing_of_its_own(openlineage, crew_connection):
    assert kickoff_task().get_openlineage_facets_on_failure(None) is None


def test_a_sensor_that_failed_after_a_deferral_still_names_its_execution(openlineage, crew_connection):
    """After a deferral the task resumes in a new process: the rendered kickoff_id is what it knows."""
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    sensor = CrewStatusSensor(task_id="wait", kickoff_id="k-9")
    facets = facets_dict(sensor.get_openlineage_facets_on_failure(None))
    assert facets["externalQuery"]["externalQueryId"] == "k-9"
    assert facets[CREW_EXECUTION_FACET] == {**facets[CREW_EXECUTION_FACET], "executionId": "k-9"}
    assert "outcome" not in facets[CREW_EXECUTION_FACET]


def test_a_failure_carries_the_crews_error(openlineage, crew_connection):
    task = kickoff_task()
    failed = CrewStatus.from_response(
        {"state": "FAILED", "error": "tool broke", "progress": {"completed": 0, "total": 2}}
    )
    with pytest.raises(Exception, match="tool broke"):
        task._end_wait("k-2", WaitResult(outcome=Outcome.FAILED, message="FAILED", last_status=failed))
    facets = facets_dict(task.get_openlineage_facets_on_failure(None))
    assert facets["errorMessage"]["message"] == "tool broke"
    crew = facets[CREW_EXECUTION_FACET]
    assert (crew["executionId"], crew["outcome"], crew["state"], crew["error"]) == (
        "k-2",
        "failed",
        "FAILED",
        "tool broke",
    )


@pytest.mark.crew_service(
    {"name": "slow", "inputs": ["topic"], "step_seconds": 10, "tasks": [{"name": "t", "agent": "Worker"}]}
)
def test_a_fail_event_says_the_execution_was_stopped(openlineage, crew_service, crew_connection):
    from airflow_provider_crew.hooks.crew import CrewHook

    kickoff_id = CrewHook(crew_conn_id=crew_connection).kickoff({"topic": "x"})
    task = kickoff_task()
    timed_out = WaitResult(outcome=Outcome.TIMEOUT, message="Timed out waiting", last_status=None)
    with pytest.raises(Exception, match="Stopping the execution: stopped"):
        task._end_wait(kickoff_id, timed_out)
    crew = facets_dict(task.get_openlineage_facets_on_failure(None))[CREW_EXECUTION_FACET]
    assert crew["stopped"] == {"reason": "the wait's timeout passed", "answer": "stopped"}
    assert crew_service.stops == [kickoff_id]


def test_the_opt_in_works_with_partial_and_expand():
    """Mapped tasks validate partial() arguments against each class's own signature."""
    import pendulum
    from airflow.sdk import DAG

    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.operators.resume import CrewResumeOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    with DAG("mapped_opt_in", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        kickoffs = CrewKickoffOperator.partial(task_id="k", openlineage_include_values=True).expand(
            inputs=[{"topic": "a"}, {"topic": "b"}]
        )
        sensors = CrewStatusSensor.partial(task_id="s", openlineage_include_values=True).expand(
            kickoff_id=kickoffs.output
        )
        resumes = CrewResumeOperator.partial(
            task_id="r", crew_task_id="t", is_approve=True, openlineage_include_values=True
        ).expand(kickoff_id=kickoffs.output)
    for mapped in (kickoffs, sensors, resumes):
        assert mapped.partial_kwargs["openlineage_include_values"] is True


def test_the_cost_comes_from_the_connections_prices(openlineage, crew_service, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(input_price=3.0, output_price=15.0)
    )
    task = kickoff_task()
    task.crew_execution = FollowedExecution(
        "k-1",
        result=WaitResult(
            outcome=Outcome.SUCCEEDED, message="done", last_status=CrewStatus.from_response(RECORD)
        ),
    )

    crew = facets_dict(task.get_openlineage_facets_on_complete(None))[CREW_EXECUTION_FACET]

    assert crew["cost"] == pytest.approx((20 * 3.0 + 10 * 15.0) / 1e6)  # 20 prompt, 10 completion tokens
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_FILE.read_text())["$defs"]["CrewExecutionRunFacet"]["allOf"][1]
    jsonschema.validate(crew, schema)
