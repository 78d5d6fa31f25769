"""CrewResumeOperator: bad input fails at DAG parse naming the parameter; it takes ``kickoff_id``,
``wait_for_completion`` and ``on_human_input`` like the kickoff and the sensor, and returns the
kickoff id. The real resume goes over HTTP (here and in tests/operators/test_crew_http.py)."""

from __future__ import annotations

import json
import time

import pytest

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator

from .test_crew import KICKOFF_ID, FakeTI


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"is_approve": "yes"}, "is_approve must be True or False .*got 'yes'"),
        ({"is_approve": 1}, "is_approve must be True or False .*got 1"),
        ({"is_approve": False, "human_feedback": "  "}, "human_feedback is empty but is_approve=False"),
        ({"is_approve": True, "on_human_input": "forever"}, "on_human_input='forever' is not known"),
        ({"is_approve": True, "poll_interval": 0}, "poll_interval must be greater than 0"),
        ({"is_approve": True, "crew_webhook_url": "nope"}, "crew_webhook_url must be an absolute"),
    ],
)
def test_resume_bad_input_fails_at_parse_naming_the_parameter(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewResumeOperator(task_id="resume", kickoff_id=KICKOFF_ID, crew_task_id="t", **kwargs)


def test_resume_finds_the_kickoff_task_from_its_xcomarg():
    from airflow.sdk import DAG

    with DAG("d", schedule=None):
        start = CrewKickoffOperator(task_id="kickoff", inputs={"topic": "x"})
        resume = CrewResumeOperator(
            task_id="resume", kickoff_id=start.output, crew_task_id="t", is_approve=True
        )
    assert resume.kickoff_task_id == "kickoff"


def test_kickoff_id_is_the_one_name_and_is_templated():
    op = CrewResumeOperator(task_id="r", kickoff_id=KICKOFF_ID, crew_task_id="t", is_approve=True)
    assert op.kickoff_id == KICKOFF_ID
    assert "kickoff_id" in op.template_fields
    with pytest.raises(TypeError, match="kickoff_id"):  # the pre-1.0 name execution_id is gone
        CrewResumeOperator(task_id="old", execution_id=KICKOFF_ID, crew_task_id="t", is_approve=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"kickoff_id": None},
            "kickoff_id is required: the execution to resume, usually kickoff_id=kickoff.output",
        ),
        ({"kickoff_id": "  "}, "kickoff_id is required"),
    ],
)
def test_missing_kickoff_id_is_named(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        CrewResumeOperator(task_id="r", crew_task_id="t", is_approve=True, **kwargs)


@pytest.mark.parametrize(
    ("rendered", "expected"),
    [("True", True), ("False", False), ("true", True), ("false", False), (" TRUE ", True), (False, False)],
)
def test_a_templated_is_approve_renders_as_a_boolean(rendered, expected):
    op = CrewResumeOperator(
        task_id="r", kickoff_id=KICKOFF_ID, crew_task_id="t", is_approve="{{ params.ok }}", human_feedback="x"
    )
    op.is_approve = rendered  # what Jinja rendered, as text unless render_template_as_native_obj
    op._validate_feedback()
    assert op.is_approve is expected


@pytest.mark.parametrize("rendered", ["yes", "1", "", "None", None])
def test_a_templated_is_approve_that_is_no_boolean_fails_at_task_start_naming_the_value(rendered):
    op = CrewResumeOperator(
        task_id="r", kickoff_id=KICKOFF_ID, crew_task_id="t", is_approve="{{ params.ok }}"
    )
    op.is_approve = rendered
    with pytest.raises(CrewConfigurationError, match=f"is_approve must be True or False .*got {rendered!r}"):
        op.execute({"ti": FakeTI()})


@pytest.mark.integration
def test_a_resume_waits_by_default_and_returns_the_kickoff_id(crew_service, crew_webhooks, monkeypatch):
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
    assert "result" not in ti.xcom  # returned at the pause: no final output yet
    paused = ti.xcom["human_input"]

    resume = CrewResumeOperator(
        task_id="approve",
        kickoff_id=kickoff_id,
        crew_task_id=paused["task_id"],
        is_approve="True",  # as Jinja renders a boolean
        carry_over_webhooks=False,
        deferrable=False,
        poll_interval=0.1,
    )
    resume_ti = FakeTI()
    returned = resume.execute({"ti": resume_ti})

    assert returned == kickoff_id
    assert resume_ti.xcom["resume"]["status"] in ("resumed", "completed")
    assert resume_ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]
    assert [f["is_approve"] for f in crew_service.executions[kickoff_id]["feedback"]] == [True]


def test_a_resume_wait_counts_the_404_grace_from_the_kickoff_tasks_time():
    op = CrewResumeOperator(
        task_id="resume",
        kickoff_id=KICKOFF_ID,
        kickoff_task_id="kickoff",
        crew_task_id="t",
        is_approve=True,
    )
    ti = FakeTI()
    ti.xcom["pull:kicked_off_at"] = {"kickoff_id": KICKOFF_ID, "epoch_seconds": time.time() - 50}
    deadline = op._not_found_deadline({"ti": ti}, KICKOFF_ID, 60)
    assert deadline == pytest.approx(ti.xcom["pull:kicked_off_at"]["epoch_seconds"] + 60)
    assert ti.pulled == [{"task_ids": "kickoff", "key": "kicked_off_at"}]
