"""The "Crew execution" extra link: the connection's URL template, the link class, and real DAG runs.

The runs use ``airflow dags test`` against the local crew service and read back the XCom the worker
writes at the end of each run of a task (``_link_CrewExecutionLink``): that XCom is all the
api-server reads to show the link. tests/links/test_execution_link_e2e.py reads the link through the
REST API of a real api-server while the task is deferred and after it ended.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_crew.connection import (
    CrewConnectionConfig,
    build_execution_url,
    config_from_connection,
)
from airflow_provider_crew.connection_form import CONN_FIELDS
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.testing.dag_runs import DagRun, airflow_env, dags_test, migrate_db
from airflow_provider_crew.waiting.xcom import XCOM_EXECUTION_URL

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "tests" / "integration" / "dags" / "crew_lineage.py"
TEMPLATE = "https://dashboard.example.test/crews/{kickoff_id}/trace?tab=steps&q={not_a_placeholder}"
LINK_XCOM = "_link_CrewExecutionLink"
WEBHOOK_TOKEN = "link-webhook-credential-91ab"


def config(**extra: Any) -> CrewConnectionConfig:
    connection = SimpleNamespace(
        conn_id="crew_default",
        conn_type="crew",
        host="https://crew.example.test",
        schema=None,
        port=None,
        password="tok",
        extra=extra,
    )
    return config_from_connection(connection, "crew_default")


# -- the connection's template -------------------------------------------------------------------


def test_the_template_is_optional_and_without_it_there_is_no_url():
    assert config().execution_url_template is None
    assert config().execution_url("abc") is None
    assert CONN_FIELDS["execution_url_template"]["schema"]["default"] is None


def test_the_id_is_url_quoted_and_other_braces_stay():
    built = config(execution_url_template=TEMPLATE).execution_url("id with/slash?&#")
    assert built == (
        "https://dashboard.example.test/crews/id%20with%2Fslash%3F%26%23/trace?tab=steps&q={not_a_placeholder}"
    )
    assert (
        build_execution_url("https://d.test/e/{kickoff_id}/{kickoff_id}", "a b")
        == "https://d.test/e/a%20b/a%20b"
    )


def test_the_template_is_read_with_the_old_form_prefix_too():
    extra = {"extra__crew__execution_url_template": "https://d.test/{kickoff_id}"}
    assert config(**extra).execution_url("x") == "https://d.test/x"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("https://d.test/executions/", "no {kickoff_id} placeholder"),
        ("https://d.test/executions/{id}", "no {kickoff_id} placeholder"),
        ("ftp://d.test/{kickoff_id}", "must be an http(s) URL"),
        ("d.test/{kickoff_id}", "must be an http(s) URL"),
        ("https:///{kickoff_id}", "must be an http(s) URL"),
        ("https://user:pw-9f3@d.test/{kickoff_id}", "must not contain a login or password"),
    ],
)
def test_a_bad_template_fails_naming_the_field(template, expected):
    with pytest.raises(CrewConfigurationError) as raised:  # as the hook raises it
        config(execution_url_template=template)
    message = str(raised.value)
    assert "'crew_default'" in message
    assert "execution_url_template" in message and "'Execution page URL'" in message
    assert expected in message
    assert "pw-9f3" not in message  # a password in the template is not echoed


def test_a_bad_template_fails_through_the_hook_as_a_configuration_error(crew_conn):
    from airflow_provider_crew.exceptions import CrewConfigurationError
    from airflow_provider_crew.hooks.crew import CrewHook

    crew_conn(execution_url_template="https://d.test/executions")
    with pytest.raises(CrewConfigurationError, match="execution_url_template"):
        CrewHook().config  # noqa: B018


# -- the link class ---------------------------------------------------------------------------------


def test_every_crew_task_has_the_link_and_the_provider_registers_it():
    import importlib

    from airflow_provider_crew import get_provider_info
    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.operators.resume import CrewResumeOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    for task_class in (CrewKickoffOperator, CrewResumeOperator, CrewStatusSensor):
        assert [type(link) for link in task_class.operator_extra_links] == [CrewExecutionLink], task_class
    (path,) = get_provider_info()["extra-links"]
    module, _, name = path.rpartition(".")
    link_class = getattr(importlib.import_module(module), name)
    assert link_class is CrewExecutionLink
    assert CrewExecutionLink().name == "Crew execution"
    assert CrewExecutionLink().xcom_key == LINK_XCOM


def test_get_link_never_raises_when_xcom_cannot_be_read():
    """Outside a task run there is no supervisor to read XCom from: a real failure, answered with ""."""
    from types import SimpleNamespace

    ti_key = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=1)
    assert CrewExecutionLink().get_link(None, ti_key=ti_key) == ""  # type: ignore[arg-type]


@pytest.mark.parametrize("stored", [None, "", 42, {"url": "https://x.test"}, "javascript:alert(1)"])
def test_get_link_answers_only_http_urls(monkeypatch, stored):
    from airflow.providers.common.compat.sdk import XCom

    monkeypatch.setattr(XCom, "get_value", classmethod(lambda cls, **kwargs: stored))
    assert CrewExecutionLink().get_link(None, ti_key=object()) == ""  # type: ignore[arg-type]


class CrewTask:
    """A crew task as the link sees it: what its run knows of the execution's page URL."""

    def __init__(self, known: bool, url: str | None = None) -> None:
        self.known, self.url = known, url

    def known_execution_url(self) -> tuple[bool, str | None]:
        return self.known, self.url


def runtime_ti(next_method: str | None) -> SimpleNamespace:
    """The runtime task instance the worker passes as ``ti_key``: did this run resume a deferral?"""
    return SimpleNamespace(
        dag_id="d",
        task_id="t",
        run_id="r",
        map_index=-1,
        _ti_context_from_server=SimpleNamespace(next_method=next_method),
    )


@pytest.fixture
def xcom_reads(monkeypatch) -> list[str]:
    """The XCom keys the link reads (each answers the stored URL)."""
    from airflow.providers.common.compat.sdk import XCom

    reads: list[str] = []

    def get_value(cls, *, ti_key, key):
        reads.append(key)
        return "https://dashboard.example.test/executions/from-xcom"

    monkeypatch.setattr(XCom, "get_value", classmethod(get_value))
    return reads


def test_a_task_that_failed_before_knowing_its_execution_reads_no_xcom(xcom_reads):
    """A bad token, address or inputs fail the task before the kickoff: nothing was pushed, and a read
    would make Airflow log "XCom not found" at error level after the task's own error."""
    link = CrewExecutionLink()
    assert link.get_link(CrewTask(known=False), ti_key=runtime_ti(None)) == ""  # type: ignore[arg-type]
    assert xcom_reads == []


def test_a_task_that_knows_its_execution_answers_without_reading_xcom(xcom_reads):
    link = CrewExecutionLink()
    known = CrewTask(known=True, url="https://dashboard.example.test/executions/k-1")
    assert link.get_link(known, ti_key=runtime_ti(None)) == known.url  # type: ignore[arg-type]
    assert link.get_link(CrewTask(known=True), ti_key=runtime_ti(None)) == ""  # type: ignore[arg-type]
    assert xcom_reads == []


def test_a_resumed_task_that_lost_the_url_reads_it_from_xcom(xcom_reads):
    """After a deferral the try's XComs are kept: the run that deferred may have pushed it."""
    link = CrewExecutionLink()
    url = link.get_link(CrewTask(known=False), ti_key=runtime_ti("execute_complete"))  # type: ignore[arg-type]
    assert url == "https://dashboard.example.test/executions/from-xcom"
    assert xcom_reads == [XCOM_EXECUTION_URL]


# -- real DAG runs ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def link_airflow_home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    home = tmp_path_factory.mktemp("airflow-home-links")
    dags = tmp_path_factory.mktemp("dags-links")
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    migrate_db(airflow_env(home, dags))
    return home, dags


@pytest.fixture
def run_dag(link_airflow_home: tuple[Path, Path], crew_service: Any) -> Callable[..., DagRun]:
    home, dags = link_airflow_home

    def run(dag_id: str, *, deferrable: bool, template: str | None, topic: str = "tidal energy") -> DagRun:
        extra = {"execution_url_template": template} if template else {}
        env = airflow_env(
            home, dags, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(deferrable), CREW_LINEAGE_TOPIC=topic
        )
        env.update(crew_service.connection_env("crew_default", **extra))
        env.update(crew_service.connection_env("crew_review", crew="review", **extra))
        env["AIRFLOW_CONN_CREW_LINEAGE_WEBHOOK"] = json.dumps(
            {"conn_type": "http", "host": crew_service.webhooks.url_for("human"), "password": WEBHOOK_TOKEN}
        )
        return dags_test(dag_id, env, cwd=REPO, check=False)

    return run


def links_of(run: DagRun, task_id: str) -> tuple[Any, Any]:
    """(XCom execution_url, the link XCom the worker wrote at the end of the task's last run)."""
    return run.xcom(task_id, XCOM_EXECUTION_URL), run.xcom(task_id, LINK_XCOM)


# Steps of 1 s: the kickoff is still running when it first reads the status, so it really defers.
@pytest.mark.integration
@pytest.mark.crew_service(speed=0.05)
def test_deferred_kickoff_and_sensor_link_to_the_execution(run_dag, crew_service):
    run = run_dag("crew_lineage", deferrable=True, template=TEMPLATE)

    assert run.state == "success", run.stdout[-3000:]
    assert "CrewStatusTrigger" in run.stdout  # the kickoff deferred
    kickoff_id = run.xcom("kickoff")
    expected = build_execution_url(TEMPLATE, kickoff_id)
    assert links_of(run, "kickoff") == (expected, expected)
    assert links_of(run, "wait_for_crew") == (expected, expected)  # the sensor follows the same one
    other = build_execution_url(TEMPLATE, run.xcom("kickoff_with_values"))
    assert links_of(run, "kickoff_with_values") == (other, other)
    for token in (WEBHOOK_TOKEN, crew_service.org_token):
        assert token not in expected


@pytest.mark.integration
@pytest.mark.crew_service(speed=0.05)
def test_a_failed_kickoff_still_links_to_its_execution(run_dag, crew_service):
    run = run_dag("crew_lineage", deferrable=False, template=TEMPLATE, topic="fail")

    assert run.state == "failed", run.stdout[-3000:]
    kickoff_id = run.xcom("kickoff", "kickoff_id")
    assert crew_service.executions[kickoff_id]["state"] == "FAILED"
    expected = build_execution_url(TEMPLATE, kickoff_id)
    assert links_of(run, "kickoff") == (expected, expected)


@pytest.mark.integration
def test_the_resume_task_links_to_the_execution_it_resumed(run_dag, crew_service):
    run = run_dag("crew_link_resume", deferrable=False, template=TEMPLATE)

    assert run.state == "success", run.stdout[-3000:]
    kickoff_id = run.xcom("kickoff")
    assert crew_service.executions[kickoff_id]["state"] == "SUCCESS"
    expected = build_execution_url(TEMPLATE, kickoff_id)
    assert links_of(run, "kickoff") == (expected, expected)
    assert links_of(run, "approve") == (expected, expected)


@pytest.mark.integration
def test_without_a_template_there_is_no_url_and_the_task_still_succeeds(run_dag):
    run = run_dag("crew_lineage", deferrable=False, template=None)

    assert run.state == "success", run.stdout[-3000:]
    for task_id in ("kickoff", "wait_for_crew"):
        with pytest.raises(KeyError):
            run.xcom(task_id, XCOM_EXECUTION_URL)
        assert run.xcom(task_id, LINK_XCOM) == ""  # the UI and REST API show no link
