"""Every example DAG, run for real, in deferrable and in blocking mode, asserting its outputs."""

from __future__ import annotations

import os
import re

import pytest

from airflow_provider_crew.testing.dag_runs import DEFAULT_HUMAN_WEBHOOK_TOKEN as HUMAN_WEBHOOK_TOKEN

pytestmark = pytest.mark.integration

MODES = [pytest.param(True, id="deferrable"), pytest.param(False, id="blocking")]
EXECUTION_PAGE = "https://dashboard.example.test/executions/{kickoff_id}"


def assert_waited_as_configured(run, deferrable: bool) -> None:
    """Deferrable runs wait in CrewStatusTrigger; blocking runs never defer. And no false alarm: the
    examples' connections have no execution page URL, and a link that looked for one in XCom made
    Airflow log "XCom not found" as an error at the end of every crew task run."""
    deferred = "CrewStatusTrigger" in run.stdout
    assert deferred is deferrable, run.stdout[-3000:]
    # (Airflow itself logs one when it iterates a mapped task's XComs past the end: not ours.)
    noise = [line for line in run.stdout.splitlines() if "XCom not found" in line and "execution_url" in line]
    assert not noise, "\n".join(noise)


# The crew runs at 1/20 of its bundled speed (steps of 1 s, not 0.05 s) wherever a test asserts that a
# deferrable task deferred: a waiting task reads the status once before deferring and does not defer
# when the execution has already finished, which a 0.2 s crew does on a loaded machine.
SLOW_ENOUGH_TO_DEFER = pytest.mark.crew_service(speed=0.05)
# Where the wait is a second task (the sensor after a kickoff that does not wait), 1/50: on a loaded
# machine `airflow dags test` took longer to start the sensor than the crew at 1/20 took to finish.
SLOW_ENOUGH_FOR_A_SECOND_TASK_TO_DEFER = pytest.mark.crew_service(speed=0.02)


@SLOW_ENOUGH_FOR_A_SECOND_TASK_TO_DEFER
@pytest.mark.parametrize("deferrable", MODES)
def test_kickoff_and_sensor(run_dag, crew_service, deferrable):
    run = run_dag(
        "example_crew_kickoff_and_sensor",
        deferrable=deferrable,
        # As the example's docstring shows: an execution page URL gives both tasks the link.
        extra_env=crew_service.connection_env("crew_default", execution_url_template=EXECUTION_PAGE),
    )

    assert run.state == "success", run.stdout[-3000:]
    assert_waited_as_configured(run, deferrable)
    kickoff_id = run.xcom("kickoff")
    page = EXECUTION_PAGE.format(kickoff_id=kickoff_id)
    for task_id in ("kickoff", "wait_for_crew"):  # what the "Crew execution" button opens
        assert run.xcom(task_id, key="execution_url") == page
        assert run.xcom(task_id, key="_link_CrewExecutionLink") == page
    execution = crew_service.executions[kickoff_id]
    assert execution["state"] == "SUCCESS"
    assert execution["inputs"] == {"topic": "tidal energy", "current_year": "2026"}
    output = run.xcom("report")
    assert output == run.xcom("wait_for_crew", key="result") == execution["result"]
    assert "tidal energy" in output
    assert crew_service.request_count("kickoff") == 1
    # The crew's token counts, in the shape of common.ai's usage XCom (for cost dashboards built on it).
    usage = execution["usage_metrics"]
    assert run.xcom("wait_for_crew", key="usage") == {
        "requests": usage["successful_requests"],
        "input_tokens": usage["prompt_tokens"],
        "output_tokens": usage["completion_tokens"],
        "total_tokens": usage["total_tokens"],
        "tool_calls": None,
        "cache_read_tokens": usage.get("cached_prompt_tokens"),
        "cache_write_tokens": None,
        "cost": None,
    }


@SLOW_ENOUGH_TO_DEFER
@pytest.mark.parametrize("deferrable", MODES)
def test_human_review_loop_with_webhooks_carried_over(run_dag, crew_service, deferrable):
    receiver = crew_service.webhooks
    run = run_dag(
        "example_crew_human_review",
        deferrable=deferrable,
        extra_env={"CREW_EXAMPLE_WEBHOOK_BASE": receiver.url_for("").rstrip("/")},
    )

    assert run.state == "success", run.stdout[-3000:]
    assert_waited_as_configured(run, deferrable)
    kickoff_id = run.xcom("kickoff")
    execution = crew_service.executions[kickoff_id]
    first, second = run.xcom("kickoff", key="human_input"), run.xcom("request_changes", key="human_input")
    assert first["execution_id"] == second["execution_id"] == kickoff_id
    assert first["task_id"] == second["task_id"] == execution["task_ids"]["draft_task"]
    feedback = "Add a section on schema evolution."
    assert feedback not in first["task_output"]
    assert feedback in second["task_output"]  # the crew retried the task with the feedback
    final = run.xcom("publish")
    assert final == run.xcom("approve", key="result")
    assert feedback in final  # feedback stays context for later tasks

    assert execution["state"] == "SUCCESS"
    assert [(f["is_approve"], f["feedback"]) for f in execution["feedback"]] == [
        (False, feedback),
        (True, "Approved, publish it."),
    ]

    # The service notified the human-input webhook twice, with the bearer token from the connection.
    human = receiver.wait_for_count("human", 2, timeout=10)
    assert {r.authorization for r in human} == {f"Bearer {HUMAN_WEBHOOK_TOKEN}"}
    # docs/contract.md: webhooks are forgotten at resume unless re-supplied. The resume tasks carried
    # them over, so the task after the last resume and the crew completion were still notified.
    tasks_after_approval = receiver.wait_for(
        lambda got: [r for r in got if r.kind == "task" and r.json.get("name") == "publish_task"], timeout=10
    )
    assert tasks_after_approval[0].json["kickoff_id"] == kickoff_id
    crew_done = receiver.wait_for_count("crew", 1, timeout=10)
    assert crew_done[0].json["kickoff_id"] == kickoff_id


# Lines a successful run must not print: asyncio's complaints about unclosed aiohttp sessions or
# abandoned tasks, and any warning or error logged by the provider itself.
SESSION_NOISE = (
    "Unclosed client session",
    "Unclosed connector",
    "Task was destroyed but it is pending",
    "Task exception was never retrieved",
)
PROVIDER_WARNING = re.compile(
    r"\[(warning|error)\s*\].*\[(airflow_provider_crew[\w.]*|asyncio)\]", re.IGNORECASE
)

# Loaded into the `airflow dags test` process (sitecustomize): when it exits, it writes down how
# many aiohttp sessions are still open. asyncio only complains about an unclosed session when the
# garbage collector reaches it, which may be never before the process ends; this count does not
# depend on that.
SESSION_PROBE = """
import atexit, gc, os, sys

def _count_open_sessions():
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None or "airflow_provider_crew.hooks.crew" not in sys.modules:
        return
    gc.collect()
    sessions = [o for o in gc.get_objects() if type(o) is aiohttp.ClientSession]
    with open(os.environ["CREW_SESSION_PROBE"], "a") as out:
        out.write(f"{sum(1 for s in sessions if not s.closed)} open of {len(sessions)}\\n")

atexit.register(_count_open_sessions)
"""


@SLOW_ENOUGH_TO_DEFER
@pytest.mark.parametrize("deferrable", MODES)
def test_mapped_fan_out(run_dag, crew_service, deferrable, tmp_path):
    """Deferred, it also shows the shared aiohttp session's lifetime: ``airflow dags test`` runs each
    deferred trigger in its own ``asyncio.run`` loop, and the session is closed inside that loop as it
    ends, not left open after the loop is gone."""
    (tmp_path / "sitecustomize.py").write_text(SESSION_PROBE)
    probe = tmp_path / "sessions.txt"
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    run = run_dag(
        "example_crew_mapped",
        deferrable=deferrable,
        extra_env={"PYTHONPATH": pythonpath, "CREW_SESSION_PROBE": str(probe)},
    )

    assert run.state == "success", run.stdout[-3000:]
    assert_waited_as_configured(run, deferrable)  # deferred: the three mapped waits, each in its own loop
    collected = run.xcom("collect")
    assert sorted(collected) == ["glaciers", "tides", "volcanoes"]
    for index, topic in enumerate(["tides", "glaciers", "volcanoes"]):
        kickoff_id = run.xcom("research", map_index=index)
        assert crew_service.executions[kickoff_id]["inputs"]["topic"] == topic
        assert collected[topic] == run.xcom("research", key="result", map_index=index)
        assert topic in collected[topic]
    assert crew_service.request_count("kickoff") == 3
    if deferrable:
        assert probe.read_text() == "0 open of 0\n"  # closed, and not kept alive by the shared-session map
    for noise in SESSION_NOISE:
        assert noise not in run.stdout, run.stdout[-3000:]
    assert [line for line in run.stdout.splitlines() if PROVIDER_WARNING.search(line)] == []


@SLOW_ENOUGH_TO_DEFER
@pytest.mark.parametrize("deferrable", MODES)
def test_taskflow_structured_output(run_dag, crew_service, deferrable):
    run = run_dag("example_crew_taskflow", deferrable=deferrable)

    assert run.state == "success", run.stdout[-3000:]
    assert_waited_as_configured(run, deferrable)
    output = run.xcom("analysis", key="result")
    assert isinstance(output, dict)  # result_json arrives as a structure, not a string
    assert (output["company"], output["quarter"]) == ("Acme Heat Pumps", "Q3")
    assert run.xcom("summarise").startswith("based_on=")


@SLOW_ENOUGH_TO_DEFER
@pytest.mark.parametrize("deferrable", MODES)
def test_task_decorator_single_and_mapped(run_dag, crew_service, deferrable):
    run = run_dag("example_crew_task_decorator", deferrable=deferrable)

    assert run.state == "success", run.stdout[-3000:]
    assert_waited_as_configured(run, deferrable)
    report = run.xcom("publish")
    assert sorted(report) == ["glaciers", "overview", "tides", "volcanoes"]
    overview_id = run.xcom("overview")  # the task returns the kickoff id, like every crew task
    assert crew_service.executions[overview_id]["inputs"] == {"topic": "ocean energy", "current_year": "2026"}
    assert report["overview"] == run.xcom("overview", key="result")
    for index, topic in enumerate(["tides", "glaciers", "volcanoes"]):
        kickoff_id = run.xcom("research", map_index=index)
        assert crew_service.executions[kickoff_id]["inputs"] == {"topic": topic, "current_year": "2026"}
        assert report[topic] == run.xcom("research", key="result", map_index=index)
        assert topic in report[topic]
    assert crew_service.request_count("kickoff") == 4


# Prices on crew_default (per million tokens), as the budget example's connection has them.
PRICED = {"input_price": 3.0, "output_price": 15.0}


@pytest.mark.parametrize("deferrable", MODES)
def test_budget_caps_and_the_usage_cost(run_dag, crew_service, deferrable):
    run = run_dag(
        "example_crew_budget",
        deferrable=deferrable,
        extra_env=crew_service.connection_env("crew_default", **PRICED),
    )

    assert run.state == "success", run.stdout[-3000:]
    reported = run.xcom("report")
    usage = run.xcom("research_priced", key="usage")
    assert usage["cost"] == pytest.approx(
        (usage["input_tokens"] * 3.0 + usage["output_tokens"] * 15.0) / 1e6, abs=1e-6
    )
    assert reported["research"] == usage["cost"] and 0 < usage["cost"] < 0.50
    mapped = [run.xcom("per_topic", key="usage", map_index=index) for index in (0, 1)]
    assert reported["per_topic"] == pytest.approx(sum(u["cost"] for u in mapped))
    assert crew_service.request_count("kickoff") == 4 and crew_service.stops == []  # under every cap
