"""The wait as a task runs it, where the crew's webhooks wake it: over real HTTP to the local crew
service and to the api-server plugin's app, the task called directly (no scheduler).

The whole loop on real Airflow components is tests/e2e/test_webhook_wake_e2e.py.
"""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.hooks.webhook_receiver import EVENTS_TOKEN_KEY_PURPOSE, run_token
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.operators.resume import CrewResumeOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor
from airflow_provider_crew.triggers.crew import CrewStatusTrigger
from airflow_provider_crew.waiting.event import CrewWaitEvent
from airflow_provider_crew.waiting.rules import Outcome
from tests.conftest import RECEIVER_KEY

pytestmark = pytest.mark.integration

RESEARCH = {"topic": "tides", "current_year": "2026"}
RUN_ID = "manual__2026-11-24T03:00:00+00:00"


class FakeTI:
    dag_id = "wake_dag"
    run_id = RUN_ID
    try_number = 1
    map_index = -1

    def __init__(self) -> None:
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value", **_):
        return self.xcom.get(f"{task_ids}:{key}")


@pytest.fixture
def waking(crew_service, monkeypatch):
    """``crew_default`` opted in to webhook wake, its safety poll every 120 s."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DEFAULT",
        crew_service.connection_json(
            wake_by_webhook=True, safety_poll_interval=120, status_path_style="contract"
        ),
    )


def woken_event(kickoff_id: str, *, deadline: float, wait_for: str = "completion") -> dict:
    trigger = CrewStatusTrigger(
        kickoff_id=kickoff_id,
        crew_conn_id="crew_default",
        wait_for=wait_for,
        deadline=deadline,
        not_found_deadline=time.time() + 60,
        safety_poll_interval=120,
    )
    return CrewWaitEvent(
        outcome=Outcome.WOKEN,
        kickoff_id=kickoff_id,
        message="Woken by the crew's completion webhook.",
        wait=trigger.serialize()[1],
    ).payload()


def test_a_woken_wait_reads_the_status_and_ends_when_the_crew_is_done(crew_service, waking, capsys):
    kickoff_id = CrewHook().kickoff(RESEARCH)
    crew_service.wait_for_state(kickoff_id)
    polls = crew_service.executions[kickoff_id]["polls"]
    sensor = CrewStatusSensor(task_id="wait", kickoff_id=kickoff_id)
    ti = FakeTI()

    returned = sensor.execute_complete({"ti": ti}, woken_event(kickoff_id, deadline=time.time() + 600))

    assert returned == kickoff_id
    assert ti.xcom["result"] == crew_service.executions[kickoff_id]["result"]
    assert crew_service.executions[kickoff_id]["polls"] == polls + 1  # one read, the task's own
    assert "Woken by the crew's completion webhook. Reading the status" in capsys.readouterr().out


def test_a_wake_before_the_end_defers_again_with_the_same_deadline(crew_service, waking, webhook_plugin):
    crew_service.configure(speed=0.01)  # the research crew now runs for minutes
    kickoff_id = CrewHook().kickoff(RESEARCH)
    deadline = time.time() + 600
    op = CrewKickoffOperator(task_id="kickoff", inputs=RESEARCH, deferrable=True)

    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete({"ti": FakeTI()}, woken_event(kickoff_id, deadline=deadline))

    trigger = deferred.value.trigger
    assert isinstance(trigger, CrewStatusTrigger) and trigger.kickoff_id == kickoff_id
    assert trigger.deadline == deadline  # a wake never lengthens the wait
    assert trigger.safety_poll_interval == 120 and trigger.execution_seen
    assert trigger.not_before > time.time()  # the new deferral is held as any other


def test_the_kickoff_sends_this_runs_addresses_and_keeps_them_out_of_xcom(
    crew_service, waking, webhook_plugin
):
    ti = FakeTI()
    op = CrewKickoffOperator(
        task_id="kickoff",
        inputs=RESEARCH,
        wait_for_completion=False,
        task_webhook_url="https://hooks.example.test/task",
        human_input_webhook_conn_id="crew_webhook_receiver",
    )
    kickoff_id = op.execute({"ti": ti})

    token = run_token(RECEIVER_KEY, "wake_dag", RUN_ID)
    execution = crew_service.executions[kickoff_id]
    crew_url = urlsplit(execution["webhooks"]["crew"])
    assert parse_qs(crew_url.query) == {"token": [token]} and crew_url.username is None
    assert crew_url.path.startswith("/crew-webhooks/v1/crew/wake_dag/")
    assert execution["webhooks"]["task"] == "https://hooks.example.test/task"
    assert execution["human_input_webhook"]["strategy"] == "bearer"
    assert execution["human_input_webhook"]["url"].startswith(
        f"{webhook_plugin}/crew-webhooks/v1/human/wake_dag/"
    )
    # XCom keeps the user's own addresses, for a resume to send again; never the run's secret.
    assert ti.xcom["webhooks"] == {
        "kickoff_id": kickoff_id,
        "task_webhook_url": "https://hooks.example.test/task",
        "step_webhook_url": None,
        "crew_webhook_url": None,
    }
    assert token not in json.dumps(ti.xcom, default=str) and RECEIVER_KEY not in json.dumps(
        ti.xcom, default=str
    )


def kick_off_the_review_crew(
    crew_service: object, monkeypatch: pytest.MonkeyPatch, ti: FakeTI, **extras: object
) -> str:
    """A kickoff of the review crew on ``crew_review`` with the wake on (and ``extras``), its pauses
    announced to the receiver; the kickoff id."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_REVIEW",
        crew_service.connection_json(  # type: ignore[attr-defined]
            crew="review", wake_by_webhook=True, status_path_style="contract", **extras
        ),
    )
    return CrewKickoffOperator(
        task_id="kickoff",
        crew_conn_id="crew_review",
        inputs={"topic": "tides", "audience": "engineers"},
        wait_for_completion=False,
        human_input_webhook_conn_id="crew_webhook_receiver",
    ).execute({"ti": ti})


def approve(crew_service: object, kickoff_id: str, ti: FakeTI) -> None:
    """Resume the review crew's pause with an approval, as task ``approve``."""
    paused = crew_service.wait_for_state(kickoff_id, "PAUSED", timeout=30)  # type: ignore[attr-defined]
    CrewResumeOperator(
        task_id="approve",
        crew_conn_id="crew_review",
        kickoff_id=kickoff_id,
        kickoff_task_id="kickoff",
        crew_task_id=paused["paused_task_id"],
        is_approve=True,
    ).execute({"ti": ti})


def test_a_resume_sends_the_runs_completion_address_again(crew_service, webhook_plugin, monkeypatch):
    ti = FakeTI()
    kickoff_id = kick_off_the_review_crew(crew_service, monkeypatch, ti)
    ti.xcom["kickoff:webhooks"] = ti.xcom["webhooks"]  # what the resume pulls from the kickoff task

    approve(crew_service, kickoff_id, ti)

    after = crew_service.executions[kickoff_id]["webhooks"]["crew"]
    assert parse_qs(urlsplit(after).query)["token"] == [run_token(RECEIVER_KEY, "wake_dag", RUN_ID)]  # again


def test_a_kickoff_and_a_resume_subscribe_to_the_event_stream_each_with_its_own_task_instance(
    crew_service, webhook_plugin, monkeypatch
):
    ti = FakeTI()
    ti.task_id = "kickoff"  # type: ignore[attr-defined]
    kickoff_id = kick_off_the_review_crew(crew_service, monkeypatch, ti, event_stream=True)
    events = f"{webhook_plugin}/crew-webhooks/v1/events/wake_dag/{quote(RUN_ID, safe='')}"
    subscribed = crew_service.executions[kickoff_id]["event_webhooks"]
    assert subscribed["url"] == f"{events}/kickoff/-1" and "crew_kickoff_failed" in subscribed["events"]
    ti.task_id = "approve"  # type: ignore[attr-defined]
    approve(crew_service, kickoff_id, ti)
    assert crew_service.executions[kickoff_id]["event_webhooks"]["url"] == f"{events}/approve/-1"
    # The run's events token is sent as bearer, never kept where a task's data is.
    token = run_token(RECEIVER_KEY, "wake_dag", RUN_ID, EVENTS_TOKEN_KEY_PURPOSE)
    assert token not in json.dumps(crew_service.executions[kickoff_id], default=str)
    assert token not in json.dumps(ti.xcom, default=str)


def test_wake_is_off_and_says_why_once_when_the_receiver_is_not_defined(
    crew_service, waking, monkeypatch, capsys
):
    monkeypatch.delenv("AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER", raising=False)
    op = CrewKickoffOperator(task_id="kickoff", inputs=RESEARCH, wait_for_completion=False)
    hook = CrewHook()
    assert op._webhook_wake({"ti": FakeTI()}, hook) is None
    assert op._webhook_wake({"ti": FakeTI()}, hook) is None
    said = [line for line in capsys.readouterr().out.splitlines() if "Webhook wake is off" in line]
    assert len(said) == 1 and "'crew_webhook_receiver' is not defined" in said[0]
    kickoff_id = op.execute({"ti": FakeTI()})
    assert crew_service.executions[kickoff_id]["webhooks"]["crew"] is None  # polled as before


def test_a_crew_webhook_url_meets_wake_with_an_error_naming_both_and_starts_nothing(crew_service, waking):
    op = CrewKickoffOperator(
        task_id="kickoff", inputs=RESEARCH, crew_webhook_url="https://hooks.example.test/crew"
    )
    with pytest.raises(
        CrewConfigurationError, match=r"crew_webhook_url is set, and connection 'crew_default' wakes"
    ):
        op.execute({"ti": FakeTI()})
    assert crew_service.request_count("kickoff") == 0
    resume = CrewResumeOperator(
        task_id="resume",
        kickoff_id="k-1",
        crew_task_id="t",
        is_approve=True,
        crew_webhook_url="https://hooks.example.test/crew",
    )
    with pytest.raises(CrewConfigurationError, match=r"Drop crew_webhook_url"):
        resume.execute({"ti": FakeTI()})
    assert crew_service.request_count("resume") == 0


def test_the_settle_time_covers_airflows_bound_on_a_lingering_deferring_process(monkeypatch):
    """Overtime, the supervisor's check interval, SIGTERM-to-SIGKILL and two scheduler loops."""
    from airflow_provider_crew.waiting import race

    monkeypatch.setattr(race, "running_in_process_test", lambda: False)
    settings = {"task_success_overtime": 20.0, "min_heartbeat_interval": 5.0, "scheduler_heartbeat_sec": 5.0}
    monkeypatch.setattr(race.conf, "getfloat", lambda section, key, fallback=None: settings[key])
    assert race.deferral_settle_seconds() == 20 + 5 + 5 + 10
    settings.update(task_success_overtime=5.0, min_heartbeat_interval=1.0, scheduler_heartbeat_sec=1.0)
    assert race.deferral_settle_seconds() == 5 + 1 + 5 + 5  # the margin never drops below 5 s
    monkeypatch.setattr(race, "AIRFLOW_DEFERRAL_RACE_FIXED", True)
    assert race.deferral_settle_seconds() == 0.0  # an Airflow that fixed the race needs no bound
    monkeypatch.setattr(race, "AIRFLOW_DEFERRAL_RACE_FIXED", False)
    monkeypatch.setattr(race, "running_in_process_test", lambda: True)
    assert race.deferral_settle_seconds() == 0.0  # dag.test() has no executor, so no race
