"""The Crew tab's "At work" section in a real browser (Airflow 3.1+): a running crew's model and tool
calls from its event stream, on a real api-server, scheduler, dag-processor and triggerer with the
local crew service posting its events; and hostile event data shown as text (no stack)."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from tests.browser.harness import (
    UI_TIMEOUT_MS,
    VIEWS_BASE,
    Steps,
    log_in,
    missing_requirement,  # noqa: F401 - the skipif condition reads it
    serve_views,
)
from tests.e2e.airflow_stack import FAST_SETTLE, AirflowStack, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="plugin views (external_views) need Airflow 3.1+"),
    pytest.mark.skipif("bool(missing_requirement())", reason="no Playwright or Chromium (see the log)"),
]

DAG_ID = "crew_tab_events"
DAG_FILE = f'''
import pendulum
from airflow.sdk import DAG
from airflow_provider_crew.operators.crew import CrewKickoffOperator

with DAG(dag_id="{DAG_ID}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    CrewKickoffOperator(task_id="kickoff", crew_conn_id="crew_chatty", inputs={{"topic": "tides"}}, deferrable=True)
'''
# About 60 s: three tasks of six 3 s agent steps, each step a model call and a tool call (one tool fails).
CHATTY = {
    "name": "chatty",
    "inputs": ["topic"],
    "pending_seconds": 0.2,
    "tasks": [
        {
            "name": name,
            "agent": agent,
            "steps": 6,
            "step_seconds": 3,
            "tools": tools,
            "failing_tools": failing,
        }
        for name, agent, tools, failing in (
            ("research_task", "Researcher", ["search"], []),
            ("outline_task", "Planner", ["search", "read_file"], ["read_file"]),
            ("writing_task", "Writer", ["write_file"], []),
        )
    ],
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    from airflow_provider_crew.testing import LocalCrewService

    tmp = tmp_path_factory.mktemp("crew-tab-events")
    (tmp / "dags").mkdir()
    (tmp / "dags" / "crew_tab_events.py").write_text(DAG_FILE)
    with contextlib.ExitStack() as resources:
        service = resources.enter_context(LocalCrewService(CHATTY))
        airflow = AirflowStack(tmp / "home", tmp / "dags", dict(FAST_SETTLE))
        airflow.env.update(
            service.connection_env(
                "crew_chatty", wake_by_webhook=True, event_stream=True, safety_poll_interval=300
            )
        )
        airflow.env["AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER"] = json.dumps(
            {
                "conn_type": "crew_webhook_receiver",
                "host": airflow.base_url,
                "password": secrets.token_urlsafe(32),
            }
        )
        airflow.patience = 60.0
        try:
            airflow.migrate()
            airflow.start()
            airflow.wait_for_dag(DAG_ID)
            yield airflow
        finally:
            airflow.stop()


def test_the_tab_shows_a_running_crews_model_and_tool_calls_as_they_come(
    stack: AirflowStack, steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, page = stack, steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    run_id = airflow.trigger(DAG_ID)
    wait_for(
        lambda: airflow.task_states(DAG_ID, run_id).get("kickoff") in ("running", "deferred"),
        timeout=120,
        what="the kickoff waiting",
    )
    page.goto(f"{airflow.base_url}/dags/{DAG_ID}/runs/{quote(run_id)}/tasks/kickoff/plugin/crew")
    tab = page.frame_locator("iframe[title='Crew']")
    activity = tab.locator("#activity")
    expect(activity).to_contain_text("At work, from the crew's events", timeout=60_000)
    expect(tab.locator("#model-calls tr")).to_have_count(3, timeout=UI_TIMEOUT_MS)  # a head, two calls
    steps.shot("first-calls")
    # It updates by itself: the outline task's failing tool shows up without a reload.
    expect(tab.locator("#tool-calls")).to_contain_text("error", timeout=60_000)
    expect(activity).to_contain_text("Planner")
    steps.shot("a-failed-tool-call")
    calls = tab.locator("#model-calls").inner_text()
    assert "local/deterministic-agent" in calls and "Tokens" in calls, calls
    assert "Tokens so far" in activity.inner_text()
    wait_for(lambda: airflow.dag_run_state(DAG_ID, run_id) == "success" or None, timeout=180, what="the run")
    page.reload()
    expect(tab.locator("#activity")).to_contain_text("completed", timeout=UI_TIMEOUT_MS)
    steps.shot("finished")


def test_hostile_event_data_is_shown_as_text(steps: Steps) -> None:
    """Whoever holds a run's events token writes what the tab shows: task, agent, model and tool
    names, errors. No stack: the tab is served as the plugin serves it, its data route answers."""
    from playwright.sync_api import expect

    hostile = "<img src=x onerror=alert(1)>"
    call = {"at": "2026-12-01T10:00:01+00:00", "model": hostile, "tokens": 7, "error": hostile}
    tool = {"at": "2026-12-01T10:00:02+00:00", "tool": hostile, "ok": False, "error": hostile}
    activity = {
        "task": hostile, "agent": hostile, "at_work_since": None, "ended": "failed", "error": hostile,
        "last_event_at": hostile, "received": 3, "tokens": 7, "model_calls": [call], "tool_calls": [tool],
    }  # fmt: skip
    tab = {
        "found": True, "crew_task": True, "ti_state": "running", "kickoff_id": "k-1", "live": False,
        "source": "xcom", "state": "running", "activity": activity,
    }  # fmt: skip
    page = steps.page
    dialogs = serve_views(page, {"/api/task-instance/d/r/t/-1": tab})
    page.goto(f"{VIEWS_BASE}/task-instance/d/r/t/-1")
    expect(page.locator("#activity")).to_contain_text(f"failed: {hostile}")
    expect(page.locator("#model-calls")).to_contain_text(hostile)
    expect(page.locator("#tool-calls")).to_contain_text(f"error: {hostile}")
    steps.shot("hostile-events-as-text")
    assert page.locator("img").count() == 0 and dialogs == []
