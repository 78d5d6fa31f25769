"""CrewResumeOperator: bad input fails at DAG parse naming the parameter; it takes ``kickoff_id`` like
the sensor and the other operators, and the old name ``execution_id`` keeps working with a
deprecation warning. The real resume goes over HTTP (here and in tests/operators/test_crew_http.py)."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator

from .test_crew import KICKOFF_ID, FakeTI


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"is_approve": "yes"}, "is_approve must be True .* or False"),
        ({"is_approve": 1}, "is_approve must be True"),
        ({"is_approve": False, "human_feedback": "  "}, "human_feedback is empty but is_approve=False"),
        ({"is_approve": True, "wait_for": "forever"}, "wait_for='forever' is not known"),
        ({"is_approve": True, "poll_interval": 0}, "poll_interval must be greater than 0"),
        ({"is_approve": True, "crew_webhook_url": "nope"}, "crew_webhook_url must be an absolute"),
    ],
)
def test_resume_bad_input_fails_at_parse_naming_the_parameter(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewResumeOperator(task_id="resume", execution_id=KICKOFF_ID, crew_task_id="t", **kwargs)


def test_resume_finds_the_kickoff_task_from_its_xcomarg():
    from airflow.sdk import DAG

    with DAG("d", schedule=None):
        start = CrewKickoffOperator(task_id="kickoff", inputs={"topic": "x"})
        resume = CrewResumeOperator(
            task_id="resume", execution_id=start.output, crew_task_id="t", is_approve=True
        )
    assert resume.kickoff_task_id == "kickoff"


def test_kickoff_id_is_the_parameter_and_is_templated_without_a_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op = CrewResumeOperator(task_id="r", kickoff_id=KICKOFF_ID, crew_task_id="t", is_approve=True)
    assert [w for w in caught if issubclass(w.category, AirflowProviderDeprecationWarning)] == []
    assert op.kickoff_id == KICKOFF_ID
    assert "kickoff_id" in op.template_fields
    assert "execution_id" not in op.template_fields


def test_the_old_name_execution_id_still_works_and_warns():
    with pytest.warns(
        AirflowProviderDeprecationWarning, match=r"execution_id=\.\.\.\) is deprecated; pass kickoff_id"
    ):
        op = CrewResumeOperator(task_id="r", execution_id=KICKOFF_ID, crew_task_id="t", is_approve=True)
    assert op.kickoff_id == KICKOFF_ID


def test_the_old_name_finds_the_kickoff_task_from_its_xcomarg_too():
    from airflow.sdk import DAG

    with DAG("d", schedule=None), pytest.warns(AirflowProviderDeprecationWarning):
        start = CrewKickoffOperator(task_id="start", inputs={"topic": "x"})
        old = CrewResumeOperator(task_id="old", execution_id=start.output, crew_task_id="t", is_approve=True)
    with DAG("e", schedule=None):
        start = CrewKickoffOperator(task_id="start", inputs={"topic": "x"})
        new = CrewResumeOperator(task_id="new", kickoff_id=start.output, crew_task_id="t", is_approve=True)
    assert old.kickoff_task_id == new.kickoff_task_id == "start"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "kickoff_id is required: the execution to resume, usually kickoff_id=kickoff.output"),
        ({"kickoff_id": "  "}, "kickoff_id is required"),
        (
            {"kickoff_id": KICKOFF_ID, "execution_id": KICKOFF_ID},
            "Both kickoff_id and execution_id are given",
        ),
    ],
)
def test_missing_or_doubled_kickoff_id_is_named(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewResumeOperator(task_id="r", crew_task_id="t", is_approve=True, **kwargs)


@pytest.mark.integration
@pytest.mark.parametrize("name", ["kickoff_id", "execution_id"])
def test_both_names_resume_a_paused_execution_over_http(crew_service, crew_webhooks, monkeypatch, name):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="review"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUMAN_HOOK",
        json.dumps(
            {"conn_type": "generic", "host": crew_webhooks.url_for("human"), "password": "hook-token-1"}
        ),
    )
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "t", "audience": "a"},
        human_input_webhook_conn_id="human_hook",
        deferrable=False,
        poll_interval=0.1,
    )
    ti = FakeTI()
    kickoff_id = kickoff.execute({"ti": ti})
    assert "output" not in ti.xcom  # returned at the pause: no final output yet
    paused = ti.xcom["human_input"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AirflowProviderDeprecationWarning)
        resume = CrewResumeOperator(
            task_id="approve",
            crew_task_id=paused["task_id"],
            is_approve=True,
            wait_for="completion",
            carry_over_webhooks=False,
            deferrable=False,
            poll_interval=0.1,
            **{name: kickoff_id},
        )
    resume_ti = FakeTI()
    summary = resume.execute({"ti": resume_ti})

    assert summary["outcome"] == "succeeded"
    assert summary["status"] in ("resumed", "completed")
    assert resume_ti.xcom["output"] == crew_service.executions[kickoff_id]["result"]
    assert [f["is_approve"] for f in crew_service.executions[kickoff_id]["feedback"]] == [True]


def test_a_resume_wait_counts_the_404_grace_from_the_kickoff_tasks_time():
    op = CrewResumeOperator(
        task_id="resume",
        kickoff_id=KICKOFF_ID,
        kickoff_task_id="kickoff",
        crew_task_id="t",
        is_approve=True,
        wait_for="completion",
    )
    ti = FakeTI()
    ti.xcom["pull:kicked_off_at"] = {"kickoff_id": KICKOFF_ID, "epoch_seconds": time.time() - 50}
    deadline = op._not_found_deadline({"ti": ti}, KICKOFF_ID, 60)
    assert deadline == pytest.approx(ti.xcom["pull:kicked_off_at"]["epoch_seconds"] + 60)
    assert ti.pulled == [{"task_ids": "kickoff", "key": "kicked_off_at"}]
