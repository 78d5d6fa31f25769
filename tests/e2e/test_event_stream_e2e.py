"""End to end: the crew's event stream reaches the api-server's plugin, ends failed crews' waits in
seconds, stops a crew at its budget between status reads, and fills the Crew tab.

A real api-server (two worker processes behind its one address), scheduler, dag-processor and
triggerer, and the local crew service in its own process posting its real event stream. The crew
connections opt in (``wake_by_webhook`` and ``event_stream``); waits past Airflow's race bound poll
every 300 s as a safety net, so a wait that ends sooner after a crew's failure was woken by its
events (the local service calls no completion webhook for a failed execution). All four runs start
together (the module's fixture) and each test waits for its own.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.hooks.webhook_receiver import EVENTS_TOKEN_KEY_PURPOSE, run_token

from .airflow_stack import AirflowStack, epoch, metadata_database, wait_for
from .test_webhook_wake_e2e import crew, finish, work

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
DAG_FILE = HERE / "dags" / "crew_events.py"
#: A failed crew's task ends within seconds of the crew's failure event: 0.4-0.9 s on an idle machine
#: here, 5.5-6.6 s with both cores busy with other test runs (docs/webhook-wake.md). The bound leaves room
#: for CI's load and is still far below the safety poll (300 s) that found a failure before.
FAILURE_TO_TASK_END_SECONDS = 15.0


CREWS = [
    crew("fails_late", work("only_task", 60, steps=6, fails=True, error="model quota exhausted")),
    {**crew("silent", work("only_task", 60, steps=3, fails=True)), "sends_events": False},
    # About 25 tokens a model call: one call in 80 s, then twenty in 20 s. The status reads see
    # nothing spent until the race bound, so the wait's own schedule (300 s) holds: only the events
    # can tell that the burst reached the cap of 300 (dags/crew_events.py). The burst comes well after
    # the bound (a deferral 10-25 s in, a bound of 35 s after it), before which no wake is applied and
    # the trigger's own 4 s polls would find the cap (with a 50 s idle task, one loaded 3.0.6 run failed
    # here, most likely so).
    crew("bursty", work("slow_task", 80), work("burst_task", 20, steps=20, tools=["search", "write_file"])),
    {
        **crew(
            "unordered",
            work("research_task", 20, steps=4, tools=["search"]),
            work("writing_task", 20, steps=4, tools=["write_file"], failing_tools=["write_file"]),
        ),
        "shuffle_events": True,
        "repeat_events": True,
    },
]
DAGS = {"events_fail": "fails_late", "events_silent": "silent", "events_budget": "bursty"}
DAGS["events_unordered"] = "unordered"


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Any, dict[str, str]]]:
    """The stack, the crew service, and a run of each DAG, started together."""
    from airflow_provider_crew.testing import CrewServiceProcess

    tmp = tmp_path_factory.mktemp("events")
    dags = tmp / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    crew_files = []
    for spec in CREWS:
        path = tmp / f"{spec['name']}.json"
        path.write_text(json.dumps(spec))
        crew_files.append(path)
    with contextlib.ExitStack() as stack:
        service = stack.enter_context(CrewServiceProcess(crew_files))
        airflow = AirflowStack(
            tmp / "home", dags, {**metadata_database(stack), "AIRFLOW__CORE__PARALLELISM": "8"}
        )
        airflow.api_workers = 2  # two api-server processes behind one address
        airflow.patience = 60.0
        key = secrets.token_urlsafe(32)
        for spec in CREWS:
            name = spec["name"]
            airflow.env.update(
                service.connection_env(
                    f"crew_{name}",
                    crew=name,
                    wake_by_webhook=True,
                    event_stream=True,
                    safety_poll_interval=20 if name == "silent" else 300,
                    status_path_style="contract",
                )
            )
        airflow.env["AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER"] = json.dumps(
            {"conn_type": "crew_webhook_receiver", "host": airflow.base_url, "password": key}
        )
        airflow.key = key  # type: ignore[attr-defined]
        try:
            airflow.migrate()
            airflow.start()
            for dag_id in DAGS:
                airflow.wait_for_dag(dag_id)
            runs = {dag_id: airflow.trigger(dag_id) for dag_id in DAGS}
            yield airflow, service, runs
        except BaseException:
            print(airflow.log_tail("api-server", 8000), airflow.scheduler_and_triggerer_logs())
            raise
        finally:
            airflow.stop()


def events_url(airflow: AirflowStack, dag_id: str, run_id: str) -> str:
    return f"{airflow.base_url}/crew-webhooks/v1/events/{dag_id}/{quote(run_id, safe='')}/kickoff/-1"


def kept_events(airflow: AirflowStack, dag_id: str, run_id: str) -> dict[str, Any] | None:
    entry = airflow.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/kickoff/xcomEntries/crew_events",
        expect=(200, 404),
        params={"deserialize": "true", "stringify": "false"},
    )
    return None if entry is None else entry["value"]


def test_a_crew_that_fails_ends_its_task_within_seconds_of_its_failure_event(stream):
    airflow, service, runs = stream
    run_id = runs["events_fail"]
    assert finish(airflow, "events_fail", run_id) == "failed"
    kickoff_id = airflow.xcom("events_fail", run_id, "kickoff", "kickoff_id")
    failed = [e for e in service.sent_events(kickoff_id) if e["type"] == "crew_kickoff_failed"]
    assert len(failed) == 1, service.sent_events(kickoff_id)
    _, ended = airflow.task_times("events_fail", run_id, "kickoff")
    assert ended is not None
    lag = ended - epoch(failed[0]["timestamp"])
    print(f"event stream e2e: a crew that failed 60 s in ended its task {lag:.1f} s after its failure event")
    woke = [
        line for line in airflow.log_tail("api-server", 10**7).splitlines() if "Woke task instance" in line
    ]
    print(f"failure event at {failed[0]['timestamp']}; the api-server: {woke}")
    assert lag <= FAILURE_TO_TASK_END_SECONDS
    log = airflow.task_log("events_fail", run_id, "kickoff")
    assert "Woken by the crew's event stream" in log and "model quota exhausted" in log, log
    kept = kept_events(airflow, "events_fail", run_id)
    assert kept is not None and (kept["ended"], kept["error"]) == ("failed", "model quota exhausted")


def test_a_cap_crossed_between_status_reads_wakes_the_wait_which_stops_the_crew(stream):
    airflow, service, runs = stream
    run_id = runs["events_budget"]
    assert finish(airflow, "events_budget", run_id) == "failed"
    kickoff_id = airflow.xcom("events_budget", run_id, "kickoff", "kickoff_id")
    execution = service.executions[kickoff_id]
    usage = airflow.xcom("events_budget", run_id, "kickoff", "usage")
    print(f"event stream e2e: the bursty crew was stopped at {usage['total_tokens']} tokens (cap 300)")
    assert service.stops == [kickoff_id] or kickoff_id in service.stops
    assert execution["state"] not in ("SUCCESS",)
    log = airflow.task_log("events_budget", run_id, "kickoff")
    assert "Woken by the crew's event stream" in log, log
    assert "reached its budget" in log
    assert 300 <= usage["total_tokens"] < 450  # the burst's 20 calls would have spent ~550


def test_events_shuffled_and_repeated_are_kept_once_and_forged_or_replayed_ones_change_nothing(stream):
    airflow, service, runs = stream
    dag_id, run_id = "events_unordered", runs["events_unordered"]
    assert finish(airflow, dag_id, run_id) == "success"
    kickoff_id = airflow.xcom(dag_id, run_id, "kickoff", "kickoff_id")
    sent = service.sent_events(kickoff_id)
    usage = airflow.xcom(dag_id, run_id, "kickoff", "usage")
    kept = wait_for(
        lambda: (found := kept_events(airflow, dag_id, run_id)) and found["received"] == len(sent) and found,
        timeout=30,
        what="every event kept",
    )
    assert kept["usage"]["total_tokens"] == usage["total_tokens"]
    assert (kept["task"], kept["ended"]) == ("writing_task", "completed")
    assert {call["tool"] for call in kept["tool_calls"]} == {"search", "write_file"}
    assert any(not call["ok"] for call in kept["tool_calls"])
    assert all("response" not in call for call in kept["model_calls"])  # no text without the opt-in

    token = run_token(airflow.key, dag_id, run_id, EVENTS_TOKEN_KEY_PURPOSE)  # type: ignore[attr-defined]
    forged = {"events": [{**sent[-1], "id": "forged", "type": "crew_kickoff_failed", "data": {"error": "x"}}]}
    for bearer in ("not-the-token", run_token(airflow.key, dag_id, run_id)):  # type: ignore[attr-defined]
        answer = requests.post(
            events_url(airflow, dag_id, run_id),
            json=forged,
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=30,
        )
        assert (answer.status_code, answer.json()) == (401, {"detail": "Unauthorized"})
    replayed = requests.post(
        events_url(airflow, dag_id, run_id),
        json={"events": sent[:50]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert (replayed.status_code, replayed.json()["accepted"]) == (202, 0)
    assert kept_events(airflow, dag_id, run_id) == kept

    if AIRFLOW_V_3_1_PLUS:  # the Crew tab (3.1+), served by either api-server process
        tab = f"{airflow.base_url}/crew-ui/api/task-instance/{dag_id}/{quote(run_id)}/kickoff/-1"
        seen = [airflow.session.get(tab, timeout=30).json()["activity"] for _ in range(8)]
        assert all(activity == seen[0] for activity in seen), seen
        assert seen[0]["tokens"] == usage["total_tokens"] and seen[0]["received"] == len(sent)


def test_a_service_that_sends_no_events_is_found_by_the_safety_poll_and_said_so(stream):
    airflow, _, runs = stream
    run_id = runs["events_silent"]
    assert finish(airflow, "events_silent", run_id) == "failed"
    log = airflow.task_log("events_silent", run_id, "kickoff")
    assert "No event came from the crew's event stream" in log, log
    assert "Woken by the crew's event stream" not in log
    assert kept_events(airflow, "events_silent", run_id) is None
