"""A new user's first runs fail before the task knows its execution: a rejected token, missing inputs
(issue #49). Real DAG runs (``airflow dags test``) against the local crew service check that the task
fails with its own error, said once: the "Crew execution" link, which Airflow asks for its URL at the
end of every run, has no execution to link to and reads no XCom (a missing one is logged by Airflow
as an "XCom not found" error)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_provider_crew.testing.dag_runs import DagRun, airflow_env, dags_test, migrate_db

pytestmark = pytest.mark.integration

DAG_FILE = Path(__file__).parent / "dags" / "crew_first_failures.py"
TEMPLATE = "https://dashboard.example.test/executions/{kickoff_id}"
WRONG_TOKEN = "not-the-crew-token-5e7a"
LINK_XCOM = "_link_CrewExecutionLink"


@pytest.fixture(scope="module")
def first_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    home = tmp_path_factory.mktemp("airflow-home-first-failures")
    dags = tmp_path_factory.mktemp("dags-first-failures")
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    migrate_db(airflow_env(home, dags))
    return home, dags


def run(
    first_home: tuple[Path, Path], crew_service, dag_id: str, *, deferrable: bool, token: str | None = None
):
    home, dags = first_home
    env = airflow_env(home, dags, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(deferrable))
    connection = crew_service.connection_dict(execution_url_template=TEMPLATE)
    if token is not None:
        connection["password"] = token
    env["AIRFLOW_CONN_CREW_DEFAULT"] = json.dumps(connection)
    return dags_test(dag_id, env, check=False)


def assert_failed_once(run: DagRun, error: str) -> None:
    """The kickoff failed with ``error`` in its log, no execution link, and no "XCom not found" line."""
    assert run.state == "failed", run.stdout[-3000:]
    assert run.task_states() == {("kickoff", -1): "failed"}
    assert error in run.flowing(), run.stdout[-3000:]
    noise = [line for line in run.stdout.splitlines() if "XCom not found" in line]
    assert noise == [], noise
    assert run.xcom("kickoff", LINK_XCOM) == ""  # the UI shows no link
    with pytest.raises(KeyError):
        run.xcom("kickoff", "execution_url")


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferrable"])
def test_a_rejected_token_fails_the_task_with_one_error_naming_the_connection(
    first_home, crew_service, deferrable
):
    result = run(first_home, crew_service, "crew_first_bad_token", deferrable=deferrable, token=WRONG_TOKEN)

    assert_failed_once(
        result,
        "GET /inputs answered 401: Unauthorized: Invalid or missing bearer token. The crew service "
        "rejected the token (401): check 'Bearer token' (the password) of connection 'crew_default'",
    )
    # Airflow 3.0's `dags test` logs its own request to mask the secret (MaskSecret) at debug level,
    # value and all: Airflow's line, not the provider's.
    leaks = [
        line
        for line in result.stdout.splitlines()
        if (WRONG_TOKEN in line or crew_service.org_token in line) and "MaskSecret" not in line
    ]
    assert leaks == [], leaks
    assert crew_service.executions == {}


def test_missing_inputs_fail_the_task_with_one_error(first_home, crew_service):
    result = run(first_home, crew_service, "crew_first_missing_inputs", deferrable=False)

    assert_failed_once(
        result,
        "CrewConfigurationError: inputs do not match what the crew expects (missing ['topic']). The "
        "crew declares ['topic', 'current_year']. Nothing was started.",
    )
    assert crew_service.executions == {}
