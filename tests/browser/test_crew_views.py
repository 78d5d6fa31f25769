"""The Crew tab and the Crews page in a real browser, against a real api-server (Airflow 3.1+).

One stack for the module: api-server, scheduler, dag-processor and triggerer; the local research crew
at 5 s agent steps (a crew of about 20 s) on ``crew_default`` and the review crew on
``crew_review`` (the review and resume examples). The tab is opened where a user opens it, the task
instance page's "Crew" tab; the page in Browse. Screenshots of every step go to the folder the test
prints.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.waiting.rules import DEFAULT_MAX_POLL_INTERVAL
from tests.browser.harness import (
    UI_TIMEOUT_MS,
    VIEWS_BASE,
    Steps,
    log_in,
    missing_requirement,  # noqa: F401 - the skipif condition reads it
    serve_views,
)
from tests.e2e.airflow_stack import AIRFLOW_PATH, FAST_SETTLE, AirflowStack, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.browser,
    pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="plugin views (external_views) need Airflow 3.1+"),
    # Read when each test starts, not at import: Chromium is installed once the selection is known.
    pytest.mark.skipif("bool(missing_requirement())", reason="no Playwright or Chromium (see the log)"),
]

REPO = Path(__file__).resolve().parents[2]
REVIEW_DAG = REPO / "example_dags" / "example_crew_review_in_airflow.py"
REVIEW_DAG_ID = "example_crew_review_in_airflow"
RESUME_DAG = REPO / "example_dags" / "example_crew_human_review.py"  # CrewResumeOperator, scripted
RESUME_DAG_ID = "example_crew_human_review"
DAG_ID = "crew_views"
DAG_FILE = f'''
import pendulum
from airflow.sdk import DAG, task
from airflow_provider_crew.operators.crew import CrewKickoffOperator

with DAG(dag_id="{DAG_ID}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    kickoff = CrewKickoffOperator(
        task_id="kickoff", inputs={{"topic": "tides", "current_year": "2026"}}, poll_interval=2,
        deferrable=False, retries=0,
    )

    @task
    def report(output):
        return len(output or "")

    report(kickoff.output["result"])

    @task.crew(poll_interval=3, deferrable=True, retries=0)
    def decorated():
        return {{"topic": "waves", "current_year": "2026"}}

    decorated()
'''
# A crew that spends 2,000 tokens a second, on a connection with prices, and a kickoff capped at 3,000.
BUDGET_DAG_ID = "crew_views_budget"
BUDGET_CAP = 3000
BUDGET_DAG_FILE = f'''
import pendulum
from airflow.sdk import DAG
from airflow_provider_crew.operators.crew import CrewKickoffOperator

with DAG(dag_id="{BUDGET_DAG_ID}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    CrewKickoffOperator(
        task_id="kickoff", crew_conn_id="crew_budget", inputs={{"topic": "budgets"}},
        max_tokens={BUDGET_CAP}, deferrable=True, retries=0,
    )
'''
SPENDER = {
    "name": "spender",
    "inputs": ["topic"],
    "pending_seconds": 0.05,
    "step_seconds": 1,
    "tokens_per_second": 2000,
    "tasks": [{"name": "draft", "agent": "Writer", "steps": 30}],
}
PRICES = {"input_price": 3.0, "output_price": 15.0}  # per million tokens
WAITING_STATE = "awaiting_input" if AIRFLOW_V_3_3_PLUS else "deferred"
EXECUTION_PAGE = "https://crews.example.com/executions/{kickoff_id}"
OUTSIDER = "outsider"  # may not read the review example (tests/e2e/airflow_path/per_dag_auth_manager.py)
OUTSIDER_PASSWORD = secrets.token_urlsafe(12)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Any, Any]]:
    from airflow_provider_crew.testing import LocalCrewService

    tmp_path = tmp_path_factory.mktemp("crew-views")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "crew_views.py").write_text(DAG_FILE)
    (dags / "crew_views_budget.py").write_text(BUDGET_DAG_FILE)
    shutil.copy(REVIEW_DAG, dags / REVIEW_DAG.name)
    shutil.copy(RESUME_DAG, dags / RESUME_DAG.name)
    with contextlib.ExitStack() as resources:
        research = resources.enter_context(LocalCrewService("research", speed=0.01))  # 5 s agent steps
        review = resources.enter_context(LocalCrewService("review", speed=0.05))
        spender = resources.enter_context(LocalCrewService(SPENDER))
        env = {
            **research.connection_env("crew_default", execution_url_template=EXECUTION_PAGE),
            **review.connection_env("crew_review"),
            **spender.connection_env("crew_budget", **PRICES),
            "AIRFLOW_CONN_CREW_REVIEW_WEBHOOK": json.dumps(
                {"conn_type": "http", "host": review.webhooks.url_for("human"), "password": "hook-token"}
            ),
            **FAST_SETTLE,
        }
        # A second user whom the auth manager's one per-DAG rule keeps out of the review example.
        env |= {
            "AIRFLOW__CORE__AUTH_MANAGER": "per_dag_auth_manager.PerDagAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"admin:admin,{OUTSIDER}:viewer",
            "CREW_TEST_HIDDEN_DAGS": f"{REVIEW_DAG_ID},{BUDGET_DAG_ID}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(AIRFLOW_PATH), os.environ.get("PYTHONPATH")])),
        }
        airflow = AirflowStack(tmp_path / "home", dags, env)
        passwords = airflow.home / "simple_auth_manager_passwords.json"
        passwords.write_text(json.dumps({**json.loads(passwords.read_text()), OUTSIDER: OUTSIDER_PASSWORD}))
        airflow.patience = 60.0
        try:
            airflow.migrate()
            airflow.start()
            airflow.wait_for_dag(DAG_ID)
            airflow.wait_for_dag(REVIEW_DAG_ID)
            airflow.wait_for_dag(RESUME_DAG_ID)
            airflow.wait_for_dag(BUDGET_DAG_ID)
            airflow.login()
            yield airflow, research, review
        finally:
            airflow.stop()


@pytest.fixture(scope="module")
def waiting_review_run(stack: tuple[AirflowStack, Any, Any]) -> str:
    """A run of the review example whose first round waits for its reviewer."""
    airflow, _, _ = stack
    run_id = airflow.trigger(REVIEW_DAG_ID)
    wait_for(
        lambda: state_of(airflow, REVIEW_DAG_ID, run_id, "review.round_1") == WAITING_STATE,
        timeout=240,
        what="the first review round waiting for its reviewer",
    )
    return run_id


@pytest.fixture(scope="module")
def finished_run(stack: tuple[AirflowStack, Any, Any]) -> str:
    """A run of the kickoff DAG whose crew finished (its tokens are in XCom ``usage``)."""
    airflow, _, _ = stack
    run_id = airflow.trigger(DAG_ID)
    wait_for(lambda: airflow.dag_run_state(DAG_ID, run_id) == "success" or None, timeout=240, what="the run")
    return run_id


def tab_url(airflow: AirflowStack, dag_id: str, run_id: str, task_id: str) -> str:
    return f"{airflow.base_url}/dags/{dag_id}/runs/{quote(run_id)}/tasks/{task_id}/plugin/crew"


def api_url(airflow: AirflowStack, dag_id: str, run_id: str, task_id: str) -> str:
    return f"{airflow.base_url}/crew-ui/api/task-instance/{dag_id}/{quote(run_id)}/{task_id}/-1"


def frame(page: Any) -> Any:
    return page.frame_locator("iframe[title='Crew'], iframe[title='Crews']")


def state_of(airflow: AirflowStack, dag_id: str, run_id: str, task_id: str) -> str | None:
    return airflow.task_states(dag_id, run_id).get(task_id)


def open_running_kickoff_tab(airflow: AirflowStack, steps: Steps) -> tuple[str, Any]:
    """Log in, start a run of the kickoff DAG, and open its kickoff's Crew tab once the crew runs."""
    from playwright.sync_api import expect

    page = steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    run_id = airflow.trigger(DAG_ID)
    wait_for(
        lambda: state_of(airflow, DAG_ID, run_id, "kickoff") == "running", timeout=120, what="kickoff running"
    )
    page.goto(tab_url(airflow, DAG_ID, run_id, "kickoff"), wait_until="domcontentloaded")
    tab = frame(page)
    expect(tab.locator("[data-state='running']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    return run_id, tab


def test_the_views_answer_no_data_without_a_valid_session(stack: tuple[AirflowStack, Any, Any]) -> None:
    airflow, _, _ = stack
    path = api_url(airflow, DAG_ID, "any", "kickoff")
    anonymous = requests.get(path, timeout=30)
    assert anonymous.status_code == 401, anonymous.text
    forged = requests.get(path, headers={"Authorization": "Bearer not-a-token"}, timeout=30)
    assert forged.status_code in (401, 403), forged.text
    assert "kickoff_id" not in anonymous.text + forged.text
    page_list = requests.get(f"{airflow.base_url}/crew-ui/api/crews", timeout=30)
    assert page_list.status_code == 401
    # The same user the UI logs in as may read it (the REST session's bearer token).
    assert airflow.session.get(f"{airflow.base_url}/crew-ui/api/crews", timeout=30).status_code == 200
    plugins = airflow.api("GET", "/plugins")["plugins"]
    views = [view for plugin in plugins for view in plugin.get("external_views", [])]
    assert {view["name"] for view in views} >= {"Crew", "Crews"}


def test_a_user_the_auth_manager_keeps_out_of_a_dag_sees_none_of_its_crews(
    stack: tuple[AirflowStack, Any, Any], finished_run: str, waiting_review_run: str, steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, _, _ = stack
    answer = requests.post(
        f"{airflow.base_url}/auth/token",
        json={"username": OUTSIDER, "password": OUTSIDER_PASSWORD},
        timeout=30,
    )
    assert answer.status_code in (200, 201), answer.text
    outsider = {"Authorization": f"Bearer {answer.json()['access_token']}"}
    hidden = requests.get(
        api_url(airflow, REVIEW_DAG_ID, waiting_review_run, "review.wait_1"), headers=outsider, timeout=30
    )
    assert hidden.status_code == 403, hidden.text
    assert waiting_review_run not in hidden.text
    shown = requests.get(api_url(airflow, DAG_ID, finished_run, "kickoff"), headers=outsider, timeout=30)
    assert shown.status_code == 200 and shown.json()["state"] == "succeeded", shown.text
    listed = requests.get(f"{airflow.base_url}/crew-ui/api/crews", headers=outsider, timeout=30).json()
    assert {row["dag_id"] for row in listed["rows"]} == {DAG_ID}, listed["rows"]
    assert REVIEW_DAG_ID not in json.dumps(listed["tokens_by_day"])
    # The admin sees both.
    everything = airflow.session.get(f"{airflow.base_url}/crew-ui/api/crews", timeout=30).json()
    assert {row["dag_id"] for row in everything["rows"]} >= {DAG_ID, REVIEW_DAG_ID}
    # In the browser, the outsider's Crew tab of the review example says so and shows nothing.
    page = steps.page
    log_in(page, airflow.base_url, OUTSIDER, OUTSIDER_PASSWORD, steps)
    page.goto(
        f"{airflow.base_url}/crew-ui/task-instance/{REVIEW_DAG_ID}/{quote(waiting_review_run)}/review.wait_1/-1"
    )
    expect(page.get_by_text("You may not see this task's crew (403)")).to_be_visible(timeout=UI_TIMEOUT_MS)
    steps.shot("outsider-forbidden")


def test_the_tab_follows_a_running_kickoff_and_then_shows_what_xcom_holds(
    stack: tuple[AirflowStack, Any, Any], steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, research, _ = stack
    page = steps.page
    run_id, tab = open_running_kickoff_tab(airflow, steps)
    steps.shot("running")
    # The tab reads again at the wait's own pace, which grows as the wait's does: from the kickoff's
    # poll_interval=2, from the deferred @task.crew's 3 (read from its trigger).
    view = airflow.session.get(api_url(airflow, DAG_ID, run_id, "kickoff"), timeout=30).json()
    assert view["source"] == "service" and 2.0 <= view["refresh_seconds"] <= DEFAULT_MAX_POLL_INTERVAL, view
    decorated = wait_for(
        lambda: (
            v
            if (v := airflow.session.get(api_url(airflow, DAG_ID, run_id, "decorated"), timeout=30).json())[
                "source"
            ]
            == "service"
            else None
        ),
        timeout=120,
        what="the @task.crew task's execution read from the service",
    )
    assert decorated["crew_task"] and 3.0 <= decorated["refresh_seconds"] <= DEFAULT_MAX_POLL_INTERVAL, (
        decorated
    )
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(seen) < 3:  # the first view and two steps after it
        progress = " | ".join(tab.locator("dl").inner_text().split("\n"))
        if not seen or progress != seen[-1]:
            seen.append(progress)
            steps.shot(f"progress-{len(seen)}")
        if "Succeeded" in progress:
            break
        page.wait_for_timeout(500)  # looking again, as a person would; the deadline bounds it
    assert len(seen) >= 3, f"the tab did not update through two steps by itself: {seen}"
    assert "task 1 of 2" in seen[0] or "task 2 of 2" in seen[0], seen[0]
    wait_for(
        lambda: state_of(airflow, DAG_ID, run_id, "kickoff") == "success", timeout=180, what="kickoff success"
    )
    page.reload(wait_until="domcontentloaded")
    expect(tab.locator("[data-state='succeeded']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(tab.locator("#output")).to_contain_text("tides", timeout=UI_TIMEOUT_MS)
    steps.shot("finished")
    # The execution's page opens in a new tab (the crew's dashboard is another site).
    link = tab.get_by_role("link", name=EXECUTION_PAGE.replace("{kickoff_id}", view["kickoff_id"]))
    page.context.route(
        "https://crews.example.com/**", lambda route: route.fulfill(body="the crew's dashboard")
    )
    with page.context.expect_page(timeout=UI_TIMEOUT_MS) as opened:
        link.click()
    assert opened.value.url == EXECUTION_PAGE.replace("{kickoff_id}", view["kickoff_id"])
    # A finished task's tab reads XCom only: no status read reaches the service.
    reads = research.counters["requests"]["status"]
    view = airflow.session.get(api_url(airflow, DAG_ID, run_id, "kickoff"), timeout=30).json()
    assert view["source"] == "xcom" and view["state"] == "succeeded" and view["tokens"], view
    assert research.counters["requests"]["status"] == reads
    assert "token" not in json.dumps(view).replace('"tokens"', "")
    # A task that is not a crew task says so.
    page.goto(tab_url(airflow, DAG_ID, run_id, "report"), wait_until="domcontentloaded")
    expect(tab.get_by_text("Not a crew task")).to_be_visible(timeout=UI_TIMEOUT_MS)
    steps.shot("not-a-crew-task")


def test_the_tab_of_a_paused_execution_links_to_its_review_request(
    stack: tuple[AirflowStack, Any, Any], waiting_review_run: str, steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, _, _ = stack
    page = steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    run_id = waiting_review_run
    page.goto(tab_url(airflow, REVIEW_DAG_ID, run_id, "review.wait_1"), wait_until="domcontentloaded")
    tab = frame(page)
    expect(tab.locator("[data-state='waiting_for_human_input']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    link = tab.get_by_role("link", name="Open the review request")
    expect(link).to_be_visible(timeout=UI_TIMEOUT_MS)
    steps.shot("paused")
    link.click()
    expect(page).to_have_url(re.compile(r"/tasks/review\.round_1/required_actions$"), timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("Request changes").first).to_be_visible(timeout=UI_TIMEOUT_MS)
    steps.shot("review-request")
    # The round itself, waiting for its reviewer, follows the same paused execution.
    round_view = airflow.session.get(
        api_url(airflow, REVIEW_DAG_ID, run_id, "review.round_1"), timeout=30
    ).json()
    assert round_view["crew_task"] and round_view["state"] == "waiting_for_human_input", round_view
    assert round_view["kickoff_id"] == airflow.xcom(REVIEW_DAG_ID, run_id, "kickoff"), round_view


def test_the_crews_page_lists_filters_and_plots_tokens(
    stack: tuple[AirflowStack, Any, Any], finished_run: str, waiting_review_run: str, steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, _, _ = stack
    page = steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    run_id = waiting_review_run
    page.goto(f"{airflow.base_url}/plugin/crews", wait_until="domcontentloaded")
    crews = frame(page)
    expect(crews.locator("#tokens-plot rect").first).to_be_attached(timeout=UI_TIMEOUT_MS)
    expect(crews.locator("#legend")).to_contain_text(DAG_ID)
    expect(crews.locator("tbody")).to_contain_text(finished_run)
    # Every day of the window on the axis: the 7 days back touch 8 UTC dates.
    expect(crews.locator("#tokens-plot")).to_have_attribute("data-days", "8")
    # The address stays the page's, as on 3.1 (3.3.2 mirrors the frame's own address into it), with
    # one frame.
    expect(crews.locator("body[data-ui-address-kept]")).to_be_attached(timeout=UI_TIMEOUT_MS)
    expect(page).to_have_url(f"{airflow.base_url}/plugin/crews")
    expect(page.locator("iframe")).to_have_count(1)
    steps.shot("crews-all")
    for days in (30, 90):  # every day on the axis, the labels thinned so that none overlaps the next
        crews.locator("#days").select_option(str(days))
        expect(crews.locator("#tokens-plot")).to_have_attribute(
            "data-days", str(days + 1), timeout=UI_TIMEOUT_MS
        )
        labels = crews.locator("#tokens-plot text.day")
        boxes = [labels.nth(i).bounding_box() for i in range(labels.count())]
        assert len(boxes) >= 7, boxes
        assert all(left["x"] + left["width"] < right["x"] for left, right in itertools.pairwise(boxes)), boxes
    steps.shot("crews-90-days")
    crews.locator("#days").select_option("7")
    expect(crews.locator("#tokens-plot")).to_have_attribute("data-days", "8", timeout=UI_TIMEOUT_MS)
    waiting = crews.get_by_role("button", name=re.compile("^Waiting for a person"))
    waiting.click()
    # The page marks the filter once the filtered rows are in.
    expect(waiting).to_have_attribute("aria-pressed", "true", timeout=UI_TIMEOUT_MS)
    rows = crews.locator("tbody tr")
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    assert texts and all("waiting for a person" in text for text in texts), texts
    assert any(run_id in text and "round_1" in text for text in texts), texts
    steps.shot("crews-waiting")


def test_an_execution_stopped_over_its_budget_shows_what_it_spent_on_the_tab_and_the_page(
    stack: tuple[AirflowStack, Any, Any], steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, _, _ = stack
    run_id = airflow.trigger(BUDGET_DAG_ID)
    wait_for(
        lambda: airflow.dag_run_state(BUDGET_DAG_ID, run_id) == "failed" or None,
        timeout=240,
        what="the run stopped over its budget",
    )
    view = airflow.session.get(api_url(airflow, BUDGET_DAG_ID, run_id, "kickoff"), timeout=30).json()
    line = re.compile(
        r"^Stopped over its budget: spent [\d,]+ tokens \(cost 0\.\d+\); its cap: 3,000 tokens\.$"
    )
    assert line.match(view["over_budget"] or ""), view
    assert view["state"] == "stopped" and view["tokens"] >= BUDGET_CAP and view["cost"] > 0, view
    page = steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    page.goto(tab_url(airflow, BUDGET_DAG_ID, run_id, "kickoff"), wait_until="domcontentloaded")
    tab = frame(page)
    expect(tab.locator("#over-budget")).to_have_text(line, timeout=UI_TIMEOUT_MS)
    expect(tab.locator("[data-state='stopped']")).to_have_text("Stopped")
    expect(tab.locator("dl")).to_contain_text(f"{view['tokens']:,} (cost ")
    steps.shot("over-budget")
    # The page: the row says so, with its cost; the plot shows the cost per day.
    page.goto(f"{airflow.base_url}/plugin/crews", wait_until="domcontentloaded")
    crews = frame(page)
    row = crews.locator("tbody tr", has_text=run_id)
    expect(row).to_have_attribute("data-state", "over budget", timeout=UI_TIMEOUT_MS)
    expect(row.locator("td.state")).to_have_text("over budget")
    expect(row.locator("td").last).to_have_text(re.compile(r"^0\.\d+$"))
    crews.get_by_role("button", name="Cost", exact=True).click()
    expect(crews.locator("#cost-plot rect").first).to_be_attached(timeout=UI_TIMEOUT_MS)
    expect(crews.locator("#plot-title")).to_have_text("Cost per day (UTC), by DAG")
    expect(crews.locator("#legend")).to_contain_text(BUDGET_DAG_ID)
    listed = airflow.session.get(f"{airflow.base_url}/crew-ui/api/crews", timeout=30).json()
    assert any(BUDGET_DAG_ID in by_dag for by_dag in listed["cost_by_day"].values()), listed["cost_by_day"]
    steps.shot("crews-cost")


def test_hostile_budget_values_in_xcom_are_shown_as_text(steps: Steps) -> None:
    """XCom is writable through the REST API: what the views show of a budget stop and a cost is text.
    No stack: the pages are served as the plugin serves them, their data routes answer hostile values."""
    from playwright.sync_api import expect

    hostile = "<img src=x onerror=alert(1)>"
    tab = {
        "found": True, "crew_task": True, "ti_state": "failed", "kickoff_id": hostile, "live": False,
        "source": "xcom", "state": "stopped", "tokens": 4012, "cost": 0.024177,
        "over_budget": f"Reached its budget (its stop: {hostile}): spent 4,012 tokens (cost 0.02418).",
    }  # fmt: skip
    days = {"2026-11-28": {hostile: 0.5}}
    row = {"dag_id": hostile, "run_id": "r", "task_id": "t", "map_index": -1, "state": "over budget"}
    crews = {
        "counts": {"all": 1, "running": 0, "waiting": 0}, "rows": [{**row, "tokens": 10, "cost": 0.5}],
        "more": 0, "tokens_by_day": {"2026-11-28": {hostile: 10}}, "cost_by_day": days,
    }  # fmt: skip
    page, base = steps.page, VIEWS_BASE
    dialogs = serve_views(page, {"/api/task-instance/d/r/t/-1": tab, "/api/crews": crews})
    page.goto(f"{base}/task-instance/d/r/t/-1")
    expect(page.locator("#over-budget")).to_have_text(tab["over_budget"])
    expect(page.locator("dl")).to_contain_text("4,012 (cost 0.02418)")
    page.goto(f"{base}/crews")
    page.get_by_role("button", name="Cost", exact=True).click()
    expect(page.locator("#cost-plot rect")).to_have_count(1)
    expect(page.locator("tbody")).to_contain_text(hostile)
    steps.shot("hostile-as-text")
    assert page.locator("img").count() == 0 and dialogs == []


def test_with_the_service_down_the_tab_shows_the_last_known_state(
    stack: tuple[AirflowStack, Any, Any], steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, research, _ = stack
    _, tab = open_running_kickoff_tab(airflow, steps)
    research.stop()
    # One message: which service, why, since when, and what is shown; no exception's repr.
    banner = re.compile(
        r"^The crew service of connection 'crew_default' \(http://127\.0\.0\.1:\d+\) cannot be read since "
        r"\d\d:\d\d:\d\d UTC: the connection was refused\. Shown: the state it gave at \d\d:\d\d:\d\d UTC\.$"
    )
    expect(tab.locator("#problem")).to_have_text(banner, timeout=UI_TIMEOUT_MS)
    expect(tab.locator("[data-state='running']")).to_be_visible()
    expect(tab.locator("#note")).not_to_contain_text("Read from the crew service")
    steps.shot("service-down")


def test_the_tabs_of_resume_tasks_show_the_pause_one_ended_at_and_the_finish_of_the_other(
    stack: tuple[AirflowStack, Any, Any], steps: Steps
) -> None:
    from playwright.sync_api import expect

    airflow, _, _ = stack
    run_id = airflow.trigger(RESUME_DAG_ID)
    wait_for(
        lambda: airflow.dag_run_state(RESUME_DAG_ID, run_id) == "success" or None, timeout=240, what="the run"
    )
    page = steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    # request_changes resumed the crew and ended at its next pause: its tab shows that pause.
    page.goto(tab_url(airflow, RESUME_DAG_ID, run_id, "request_changes"), wait_until="domcontentloaded")
    tab = frame(page)
    expect(tab.locator("[data-state='waiting_for_human_input']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(tab.get_by_text("Paused task id")).to_be_visible()
    steps.shot("resume-ended-at-a-pause")
    # approve resumed it to its end.
    page.goto(tab_url(airflow, RESUME_DAG_ID, run_id, "approve"), wait_until="domcontentloaded")
    expect(tab.locator("[data-state='succeeded']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(tab.locator("#output")).not_to_be_empty()
    steps.shot("resume-finished")
    kickoff_id = airflow.xcom(RESUME_DAG_ID, run_id, "kickoff")
    for task_id in ("request_changes", "approve"):
        view = airflow.session.get(api_url(airflow, RESUME_DAG_ID, run_id, task_id), timeout=30).json()
        assert view["crew_task"] and view["kickoff_id"] == kickoff_id and view["source"] == "xcom", view


def test_the_tab_of_a_review_result_shows_the_approved_output(
    stack: tuple[AirflowStack, Any, Any], waiting_review_run: str, steps: Steps
) -> None:
    """Last in the module: it answers the round the tests above find waiting."""
    from playwright.sync_api import expect

    airflow, _, _ = stack
    run_id = waiting_review_run
    path = airflow.hitl_path(REVIEW_DAG_ID, run_id, "review.round_1")
    airflow.api("PATCH", path, json={"chosen_options": ["Approve"], "params_input": {"feedback": "Good."}})
    wait_for(
        lambda: airflow.dag_run_state(REVIEW_DAG_ID, run_id) == "success" or None,
        timeout=240,
        what="the approved review run",
    )
    page = steps.page
    log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    page.goto(tab_url(airflow, REVIEW_DAG_ID, run_id, "review.result"), wait_until="domcontentloaded")
    tab = frame(page)
    expect(tab.locator("[data-state='succeeded']")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(tab.locator("#output")).to_contain_text("data contracts")
    steps.shot("review-result")
    view = airflow.session.get(api_url(airflow, REVIEW_DAG_ID, run_id, "review.result"), timeout=30).json()
    assert (
        view["kickoff_id"] == airflow.xcom(REVIEW_DAG_ID, run_id, "kickoff") and view["source"] == "xcom"
    ), view
