"""End to end: the crews' webhooks wake deferred waits through the provider's api-server plugin.

A real api-server (with the plugin the package registers), scheduler, dag-processor and triggerer,
and the local crew service in its own process sending its real webhooks to the api-server. The crew
connections opt in (``wake_by_webhook``); ``crew_webhook_receiver`` points at the api-server. Waits
here poll every 300 s as a safety net once Airflow's race bound after their deferral has passed (until
then every 4 s, and no wake is applied), so a wait that ends later than that within a minute was woken.

Airflow's own bound on a deferring task's process stays at its default here (35 s with the stack's
settings), as in production: a crew that ends within it is found by the trigger, which ends the task
itself; one that ends after it is woken by its webhook.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.hooks.webhook_receiver import run_token, wake_path

from .airflow_stack import AirflowStack, _signal_group, epoch, metadata_database, wait_for
from .test_stop_e2e import STOP_TIMEOUT, deferred_in_triggerer, mark

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
DAG_FILE = HERE / "dags" / "crew_wake.py"
RUN_TIMEOUT = 420  # a review run crosses four deferrals, and its pauses come after the race bound
WAITING_STATE = "awaiting_input" if AIRFLOW_V_3_3_PLUS else "deferred"
# Airflow's stale executor-event race shows up in the scheduler's log in these words.
RACE_SIGNS = ("state attribute is queued", "state mismatch", "externally")


def crew(name: str, *tasks: dict[str, Any], pending: float = 0.2) -> dict[str, Any]:
    return {"name": name, "inputs": ["topic"], "pending_seconds": pending, "tasks": list(tasks)}


def work(name: str, seconds: float, steps: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "agent": "Worker", "steps": steps, "step_seconds": seconds / steps, **extra}


def review_crew(name: str, outline: float, draft: float = 4, publish: float = 3) -> dict[str, Any]:
    return crew(
        name,
        work("outline_task", outline),
        work("draft_task", draft, steps=2, human_input=True),
        work("publish_task", publish),
    )


CREWS = [
    crew("slow_a", work("research_task", 30, steps=6), work("writing_task", 30, steps=6)),
    crew("slow_b", work("research_task", 30, steps=6), work("writing_task", 30, steps=6)),
    crew("quick", work("only_task", 0.5)),
    crew("safety", work("only_task", 60, steps=3)),
    crew(
        "marked", work("only_task", 120, steps=6)
    ),  # marked failed long before its end  # ends after the race bound: the safety poll finds it
    # A wake is applied only after the race bound (35 s after the deferral here); until then the
    # trigger's polls find the crew's end or pause. These pauses and ends come after it, to be woken.
    review_crew("review_a", outline=45, publish=45),
    review_crew("review_b", outline=45, draft=60),  # each round's pause comes after the bound too
    *(crew(f"soak_{n}", work("only_task", max(n - 0.2, 0.5)), pending=0.1) for n in (2, 10, 20, 30, 40)),
]
SOAK_CREWS = ("soak_2", "soak_10", "soak_20", "soak_30", "soak_40")  # as in dags/crew_wake.py
# Spends 500 tokens a second until it is stopped (dags/crew_wake.py caps it at 20,000).
SPENDER = {**crew("spender", work("spend", 1, endless=True)), "tokens_per_second": 500}
CREWS.append(SPENDER)
# Status reads of a woken ~60 s wait at most: the read before deferring, the trigger's polls (every 4 s
# at most until the race bound, 35 s here), the woken task's read, and slack for a loaded machine.
WINDOW_READS = 16


@pytest.fixture(scope="module")
def wake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Any]]:
    from airflow_provider_crew.testing import CrewServiceProcess

    tmp = tmp_path_factory.mktemp("wake")
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
            tmp / "home", dags, {**metadata_database(stack), "AIRFLOW__CORE__PARALLELISM": "16"}
        )
        airflow.patience = 120.0
        key = secrets.token_urlsafe(32)
        for spec in CREWS:
            name = spec["name"]
            safety = 20 if name == "safety" else 300
            airflow.env.update(
                service.connection_env(
                    f"crew_{name}",
                    crew=name,
                    wake_by_webhook=True,
                    safety_poll_interval=safety,
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
            health = requests.get(f"{airflow.base_url}/crew-webhooks/v1/health", timeout=10).json()
            assert health["wake"] is True, health
            for dag_id in (
                "wake_kickoff",
                "wake_sensor",
                "wake_resume",
                "wake_quick",
                "wake_safety",
                "wake_ended",
                "wake_marked",
                "wake_budget",
            ):
                airflow.wait_for_dag(dag_id)
            yield airflow, service
        except BaseException:
            for component in airflow.processes:
                print(f"----- {component} -----\n{airflow.log_tail(component, 6000)}")
            raise
        finally:
            airflow.stop()


# -- helpers ---------------------------------------------------------------------------------------


def finish(airflow: AirflowStack, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT) -> str:
    def ended() -> str | None:
        airflow.check_alive()
        state = airflow.dag_run_state(dag_id, run_id)
        return state if state in ("success", "failed") else None

    return wait_for(ended, timeout=timeout, what=f"{dag_id} {run_id} to end", interval=1)


def woken_lines(airflow: AirflowStack) -> list[str]:
    return re.findall(r"Woke task instance (\S+) \((\w+) webhook", airflow.log_tail("api-server", 10**8))


def raced(airflow: AirflowStack) -> set[str]:
    """The task instance tries (ids) Airflow failed in its stale executor-event race, from its log."""
    found = set()
    for line in airflow.log_tail("scheduler", 10**8).splitlines():
        if any(sign in line for sign in RACE_SIGNS):
            found.update(re.findall(r"ti_id=([0-9a-f-]{36})", line))
    return found


def timeline(airflow: AirflowStack, ti_id: str) -> str:
    """What the api-server, scheduler and triggerer logged about one task instance, in time order."""
    lines = [
        f"{component}: {line[:300]}"
        for component in ("api-server", "scheduler", "triggerer")
        for line in airflow.log_tail(component, 10**8).splitlines()
        if ti_id in line
    ]
    # Airflow's components stamp their lines "2026-11-24T05:21:50.4Z" or "2026-11-24 05:21:50.4+00:00".
    return "\n".join(sorted(lines, key=lambda line: line.split(": ", 1)[1][:26].replace("T", " ", 1)))


def assert_no_race(airflow: AirflowStack, dag_id: str, *run_ids: str) -> None:
    """No try of these runs' task instances was failed by Airflow's race (the scheduler names each)."""
    hit = [
        line
        for line in airflow.log_tail("scheduler", 10**8).splitlines()
        if any(sign in line for sign in RACE_SIGNS)
        and f"<TaskInstance: {dag_id}." in line
        and any(f" {run_id} " in line for run_id in run_ids)
    ]
    assert not hit, f"Airflow's race failed tries of {dag_id}: {hit}"


def post_webhook(
    airflow: AirflowStack,
    kind: str,
    dag_id: str,
    run_id: str,
    body: bytes | dict[str, Any],
    *,
    token: str | None,
    timeout: float = 30,
) -> requests.Response:
    """POST a webhook as a crew service would: the token in the address's ``token`` query parameter."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    params = {"token": token} if token is not None else None
    url = f"{airflow.base_url}{wake_path(kind, dag_id, run_id)}"
    return requests.post(url, data=data, headers=headers, params=params, timeout=timeout)


def deferred(airflow: AirflowStack, dag_id: str, run_id: str, task_id: str) -> bool:
    return airflow.task_states(dag_id, run_id).get(task_id) == "deferred"


# -- the wake ---------------------------------------------------------------------------------------


def test_woken_waits_end_with_few_status_reads(wake):
    """A kickoff, a sensor and a resume each end at the crew's webhook, not at a poll."""
    airflow, service = wake
    runs = {dag_id: airflow.trigger(dag_id) for dag_id in ("wake_kickoff", "wake_sensor", "wake_resume")}
    started = time.monotonic()
    states = {dag_id: finish(airflow, dag_id, run_id) for dag_id, run_id in runs.items()}
    print(f"wake e2e: three runs ended in {time.monotonic() - started:.0f} s: {states}")
    assert set(states.values()) == {"success"}, {d: airflow.task_states(d, r) for d, r in runs.items()}

    kickoff = service.executions[airflow.xcom("wake_kickoff", runs["wake_kickoff"], "kickoff")]
    sensed = service.executions[airflow.xcom("wake_sensor", runs["wake_sensor"], "kickoff")]
    resumed = service.executions[airflow.xcom("wake_resume", runs["wake_resume"], "kickoff")]
    # A ~60 s crew: the read before deferring, the trigger's polls every 4 s until the race bound (35 s
    # here), the read after the wake; none after the bound but that one (the safety poll is 300 s away).
    print(
        f"wake e2e: status reads: kickoff {kickoff['polls']}, sensor {sensed['polls']}, "
        f"pause and resume {resumed['polls']}"
    )
    assert kickoff["finished_at"] - kickoff["created_at"] >= 55
    assert kickoff["polls"] <= WINDOW_READS and sensed["polls"] <= WINDOW_READS
    assert resumed["polls"] <= 2 * WINDOW_READS  # two waits: for the pause, then for the end

    for dag_id, task_id, webhook in (
        ("wake_kickoff", "kickoff", "completion"),
        ("wake_sensor", "wait", "completion"),
        ("wake_resume", "kickoff", "human-input"),
        ("wake_resume", "approve", "completion"),
    ):
        log = airflow.task_log(dag_id, runs[dag_id], task_id)
        assert f"Woken by the crew's {webhook} webhook" in log, f"{dag_id}.{task_id} was not woken:\n{log}"
        assert "Webhook wake is on" in log
    for dag_id, run_id in runs.items():
        assert_no_race(airflow, dag_id, run_id)


def test_woken_waits_with_a_cap_read_at_its_pace_and_stop_the_crew_at_it(wake):
    """With the wake on, a wait past the race bound polls every 300 s: a cap keeps it reading at the
    crew's spending pace, so the crew is stopped at its cap (within 10% of it or one second of
    spending), once, and the task fails without using its retry (issue: the budget)."""
    airflow, service = wake
    run_id = airflow.trigger("wake_budget")
    assert finish(airflow, "wake_budget", run_id) == "failed", airflow.failures("wake_budget", [run_id])

    # One execution: the cap's failure used no retry (a retry would have started another).
    [kickoff_id] = [k for k, execution in service.executions.items() if execution["crew"] == "spender"]
    assert service.stops.count(kickoff_id) == 1
    execution = service.execution(kickoff_id)
    spent = execution["usage_metrics"]["total_tokens"]
    print(f"\nwake e2e: capped at 20,000 tokens, stopped at {spent} after {execution['polls']} status reads")
    assert execution["state"] == "REVOKED"
    assert 20_000 <= spent <= 20_000 + max(2_000, 500), spent
    assert airflow.task_states("wake_budget", run_id)["kickoff"] == "failed"
    usage = airflow.xcom("wake_budget", run_id, "kickoff", key="usage")
    assert usage["total_tokens"] >= 20_000
    log = airflow.task_log("wake_budget", run_id, "kickoff")
    assert f"Crew execution {kickoff_id} reached its budget" in log, log[-4000:]
    assert "The task fails without retry" in log
    assert "no webhook woke this wait" not in log  # the cap's reads are no safety poll


def test_marking_woken_waits_failed_stops_their_crew_from_the_api_server(wake):
    """With the wake on, a cancelled trigger stops nothing (a wake and a user's mark look alike to it);
    a mark calls the api-server's listener, which a wake never does: it stops the execution, once."""
    airflow, service = wake
    run_id = airflow.trigger("wake_marked")
    wait_for(
        lambda: deferred_in_triggerer(airflow, "wake_marked", run_id),
        timeout=120,
        what="the kickoff to defer to a triggerer",
    )
    [kickoff_id] = [k for k, execution in service.executions.items() if execution["crew"] == "marked"]
    sent = mark(airflow, "wake_marked", run_id, "failed")
    wait_for(lambda: kickoff_id in service.stops, timeout=STOP_TIMEOUT, what=f"{kickoff_id} to be stopped")
    print(f"\nwake e2e: woken wait marked failed -> stopped {time.monotonic() - sent:.1f} s after the PATCH")
    assert service.stops.count(kickoff_id) == 1
    assert service.execution(kickoff_id)["state"] == "REVOKED"
    assert airflow.task_states("wake_marked", run_id)["kickoff"] == "failed"


def said_by_trigger(airflow: AirflowStack, task_log: str, ti_id: str, line: str) -> bool:
    """Whether a trigger of task instance ``ti_id`` logged ``line``: in the task's log, or in the
    triggerer's own. A trigger's log lines reach the triggerer apart from its end, and Airflow (3.0-3.3)
    writes those it reads after the end to its own log, not the task's (seen once in CI, on 3.2.2)."""
    if line in task_log:
        return True
    triggerer_lines = airflow.log_tail("triggerer", size=10_000_000).splitlines()
    if any(line in text and ti_id in text for text in triggerer_lines):
        print(f"Airflow wrote {line!r} to the triggerer's log, after the trigger's end")
        return True
    return False


def test_a_crew_that_ends_within_the_race_bound_is_ended_by_its_trigger_at_once(wake):
    """No worker resumes, so no race and no hold: the task ends seconds after its crew, and a task
    downstream reads what it pushed as values, as from a worker."""
    airflow, service = wake
    airflow.wait_for_dag("wake_ended")
    run_id = airflow.trigger("wake_ended")
    assert finish(airflow, "wake_ended", run_id) == "success", airflow.task_states("wake_ended", run_id)
    kickoff_id = airflow.xcom("wake_ended", run_id, "kickoff")
    execution = service.executions[kickoff_id]
    tis = airflow.api("GET", f"/dags/wake_ended/dagRuns/{run_id}/taskInstances")["task_instances"]
    (ti,) = [ti for ti in tis if ti["task_id"] == "kickoff"]
    ended = epoch(ti["end_date"])
    late = ended - execution["finished_at"]
    # A figure, not a pass/fail (the latency is benchmarks/wait_latency.py's): on a loaded machine the
    # trigger's XCom writes through a busy api-server take seconds each.
    print(f"ended by its trigger: {late:.1f} s after the crew (the race bound is 35 s here)")
    folder = airflow.log_folder("wake_ended", run_id, "kickoff")
    earlier = [folder / f"attempt={n}.log" for n in range(1, ti["try_number"])]
    # A try before the last only on Airflow 3.0's start race (see dags/crew_wake.py): it never ran.
    assert all(not path.exists() or not path.read_text().strip() for path in earlier), earlier
    if earlier:
        print(f"try {ti['try_number']}: Airflow failed {len(earlier)} earlier try before it started")
    # The last try's log, with its trigger's (Airflow writes that beside it: attempt=N.log.trigger.*).
    last = sorted(folder.glob(f"attempt={ti['try_number']}.log*"))
    log = "\n".join(path.read_text(errors="replace") for path in last)
    assert said_by_trigger(airflow, log, ti["id"], "The triggerer ends the task"), log
    assert "Woken by" not in log
    # No worker ran the task after its deferral (a resumed task's worker parses the DAG file again),
    # so nothing held the end until the race bound.
    assert log.count("Filling up the DagBag from") == 1, log
    assert airflow.xcom("wake_ended", run_id, "downstream") == f"{kickoff_id}: {execution['result']}"
    assert_no_race(airflow, "wake_ended", run_id)


@pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="review in the Airflow UI needs Airflow 3.1+")
def test_review_rounds_are_woken_by_the_crews_pause(wake):
    airflow, service = wake
    airflow.wait_for_dag("wake_review")
    run_id = airflow.trigger("wake_review")
    answers = {1: ("Request changes", "Shorter."), 2: ("Approve", "Good.")}
    answered: set[int] = set()
    deadline = time.monotonic() + RUN_TIMEOUT
    while airflow.dag_run_state("wake_review", run_id) not in ("success", "failed"):
        assert time.monotonic() < deadline, airflow.task_states("wake_review", run_id)
        states = airflow.task_states("wake_review", run_id)
        for number, (option, feedback) in answers.items():
            task_id = f"review.round_{number}"
            if number in answered or states.get(task_id) not in (WAITING_STATE, "deferred"):
                continue
            path = airflow.hitl_path("wake_review", run_id, task_id)
            detail = airflow.api("GET", path, expect=(200, 404))
            if detail and not detail.get("response_received"):
                airflow.api(
                    "PATCH", path, json={"chosen_options": [option], "params_input": {"feedback": feedback}}
                )
                answered.add(number)
        time.sleep(1)
    assert airflow.dag_run_state("wake_review", run_id) == "success", airflow.task_states(
        "wake_review", run_id
    )
    for number in (1, 2):
        log = airflow.task_log("wake_review", run_id, f"review.wait_{number}")
        assert "Woken by the crew's human-input webhook" in log, f"wait {number} was not woken:\n{log}"
        airflow.check_review_round_asked_at_its_first_read("wake_review", run_id, number)
    kickoff_id = airflow.xcom("wake_review", run_id, "kickoff")
    assert [f["is_approve"] for f in service.executions[kickoff_id]["feedback"]] == [False, True]
    # On 3.3 an answer given the moment the request opens can land before the scheduler has handled the
    # round's parking, and Airflow fails that try (docs/human-review.md; its retry collects the answer).
    # A try failed so had resumed from the wake and parked: the wake's resume went through.
    api_server = airflow.log_tail("api-server", 10**8)
    for ti_id in raced(airflow) & {ti for ti, _ in woken_lines(airflow)}:
        parked = re.search(rf"new_state=awaiting_input.*ti_id={ti_id}", api_server) or re.search(
            rf"ti_id={ti_id}.*new_state=awaiting_input", api_server
        )
        assert AIRFLOW_V_3_3_PLUS and parked, (
            f"try {ti_id} was failed by Airflow's race after its wake:\n{timeline(airflow, ti_id)}"
        )


# -- what must change nothing -------------------------------------------------------------------------


def test_webhooks_that_must_change_nothing(wake):
    """Wrong or other runs' tokens, unknown executions, oversized bodies, duplicates, late and early ones."""
    airflow, service = wake
    run_id = airflow.trigger("wake_kickoff")
    quick = airflow.trigger("wake_quick")  # its webhook comes before, or about when, the task defers
    wait_for(lambda: deferred(airflow, "wake_kickoff", run_id, "kickoff"), timeout=120, what="the deferral")
    kickoff_id = airflow.xcom("wake_kickoff", run_id, "kickoff", key="kickoff_id")
    token = run_token(airflow.key, "wake_kickoff", run_id)
    done = {"kickoff_id": kickoff_id, "result": "forged"}

    assert post_webhook(airflow, "crew", "wake_kickoff", run_id, done, token="x" * 43).status_code == 404
    assert post_webhook(airflow, "crew", "wake_kickoff", run_id, done, token=None).status_code == 404
    other_run = run_token(airflow.key, "wake_kickoff", quick)
    assert post_webhook(airflow, "crew", "wake_kickoff", run_id, done, token=other_run).status_code == 404
    assert post_webhook(airflow, "mail", "wake_kickoff", run_id, done, token=token).status_code == 404
    other_key = run_token(secrets.token_urlsafe(32), "wake_kickoff", run_id)
    assert post_webhook(airflow, "crew", "wake_kickoff", run_id, done, token=other_key).status_code == 404
    big = json.dumps({"kickoff_id": kickoff_id, "result": "x" * (1024 * 1024)}).encode()
    assert post_webhook(airflow, "crew", "wake_kickoff", run_id, big, token=token).status_code == 413
    # Accepted, and the plugin's answer (given after its lookup) says they wake nothing.
    unknown = {"kickoff_id": "not-an-execution-of-this-run"}
    for body in (unknown, b"not json"):
        answer = post_webhook(airflow, "crew", "wake_kickoff", run_id, body, token=token)
        assert (answer.status_code, answer.json()) == (202, {"accepted": True, "waking": 0})
    assert deferred(airflow, "wake_kickoff", run_id, "kickoff"), airflow.task_states("wake_kickoff", run_id)
    assert not [line for line in woken_lines(airflow) if line[0] in _ti_ids(airflow, "wake_kickoff", run_id)]

    assert finish(airflow, "wake_kickoff", run_id) == "success"
    assert finish(airflow, "wake_quick", quick) == "success"
    # The crew's own webhook and three copies of it, sent again after the run ended: one wake.
    for _ in range(3):
        answer = post_webhook(airflow, "crew", "wake_kickoff", run_id, done, token=token)
        assert (answer.status_code, answer.json()["waking"]) == (202, 0)
    assert airflow.dag_run_state("wake_kickoff", run_id) == "success"
    wakes = [line for line in woken_lines(airflow) if line[0] in _ti_ids(airflow, "wake_kickoff", run_id)]
    assert len(wakes) == 1, wakes
    assert service.executions[kickoff_id]["polls"] <= WINDOW_READS
    assert_no_race(airflow, "wake_kickoff", run_id)
    assert_no_race(airflow, "wake_quick", quick)


def _ti_ids(airflow: AirflowStack, dag_id: str, run_id: str) -> set[str]:
    tis = airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
    return {ti["id"] for ti in tis}


def test_a_flood_of_webhooks_leaves_the_api_server_answering(wake):
    """1,000 webhooks, valid and invalid, while a wait is deferred: the UI and REST API keep answering,
    and the wait is woken at most once per deferral."""
    airflow, _ = wake
    run_id = airflow.trigger("wake_kickoff")
    wait_for(lambda: deferred(airflow, "wake_kickoff", run_id, "kickoff"), timeout=120, what="the deferral")
    kickoff_id = airflow.xcom("wake_kickoff", run_id, "kickoff", key="kickoff_id")
    token = run_token(airflow.key, "wake_kickoff", run_id)
    bodies = [
        ({"kickoff_id": kickoff_id}, token if n % 2 else "forged-" + secrets.token_urlsafe(30))
        for n in range(1000)
    ]
    answers: list[float] = []
    stop = threading.Event()

    def watch_rest() -> None:
        while not stop.is_set():
            started = time.monotonic()
            assert airflow.session.get(f"{airflow.base_url}/api/v2/version", timeout=30).status_code == 200
            assert airflow.session.get(f"{airflow.base_url}/", timeout=30).status_code == 200  # the UI
            answers.append(time.monotonic() - started)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch_rest)
    watcher.start()
    try:
        with ThreadPoolExecutor(32) as pool:
            codes = list(
                pool.map(
                    lambda b: (
                        post_webhook(airflow, "crew", "wake_kickoff", run_id, b[0], token=b[1]).status_code
                    ),
                    bodies,
                )
            )
    finally:
        stop.set()
        watcher.join(60)
    assert codes.count(404) == 500 and codes.count(202) == 500, {c: codes.count(c) for c in set(codes)}
    print(f"flood: REST and UI answered {len(answers)} times, slowest {max(answers):.2f} s")
    assert answers and max(answers) < 5
    assert finish(airflow, "wake_kickoff", run_id) == "success"
    log = airflow.task_log("wake_kickoff", run_id, "kickoff")
    deferrals = log.count("Pausing task as DEFERRED")
    wakes = [line for line in woken_lines(airflow) if line[0] in _ti_ids(airflow, "wake_kickoff", run_id)]
    # Valid webhooks before the race bound wake nothing; after it, at most one wake per deferral (a
    # forged-early one finds the crew still running and defers again; the crew's own one ends it).
    assert 1 <= len(wakes) <= deferrals, (wakes, deferrals)
    assert_no_race(airflow, "wake_kickoff", run_id)


@pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="the soak needs Airflow 3.1+ (CI runs it on the newest)")
def test_race_soak_50_runs_whose_crews_end_0_to_40_s_after_the_deferral(wake):
    """50 DAG runs, 10 for each crew length, running together: every task succeeds on its first try,
    none in Airflow's race; each ended by its trigger (crews ending within the race bound) or woken."""
    airflow, _ = wake
    dag_ids = [f"wake_{crew}" for crew in SOAK_CREWS]
    for dag_id in dag_ids:
        airflow.wait_for_dag(dag_id)
    # Ten waves of one run per crew, each wave triggered once the scheduler has started the one before:
    # 50 runs queued in one go make the scheduler write them in one transaction, which SQLite may refuse
    # ("database is locked") on a busy machine, and the scheduler exits on that.
    runs: list[tuple[str, str]] = []
    for _ in range(10):
        wave = [(dag_id, airflow.trigger(dag_id)) for dag_id in dag_ids]
        runs += wave
        wait_for(
            lambda: all(airflow.dag_run_state(*run) != "queued" for run in wave),  # noqa: B023
            timeout=120,
            what="the scheduler to start a wave of soak runs",
        )
    states = {run: finish(airflow, *run, timeout=600) for run in runs}
    woken = {ti for ti, _ in woken_lines(airflow)}
    tis = {run: _ti_ids(airflow, *run) for run in runs}
    ended_by_trigger = {
        run for run in runs if "The triggerer ends the task" in airflow.task_log(*run, "kickoff")
    }
    print(
        f"soak: {sum(s == 'success' for s in states.values())} of {len(runs)} runs succeeded; "
        f"{len(ended_by_trigger)} ended by their trigger, {sum(bool(ids & woken) for ids in tis.values())} "
        "woken by the crew's webhook, the rest by a poll on a worker"
    )
    failed = {run: airflow.task_states(*run) for run, state in states.items() if state != "success"}
    assert not failed, failed
    tries = {
        run: [
            ti["try_number"]
            for ti in airflow.api("GET", f"/dags/{run[0]}/dagRuns/{run[1]}/taskInstances")["task_instances"]
        ]
        for run in runs
    }
    assert all(numbers == [1] for numbers in tries.values()), tries  # no retry hid a raced try
    assert len(ended_by_trigger) >= len(runs) // 2  # crews ending within the bound: no worker, no hold
    for dag_id in dag_ids:
        assert_no_race(airflow, dag_id, *(run_id for d, run_id in runs if d == dag_id))


def test_a_key_rotated_on_the_api_server_still_wakes_the_waits_started_before(wake):
    """docs/webhook-wake.md's rotation: the new key first, then the old one. A wait whose crew was
    given an address signed with the old key is still woken; the new key opens the run's address too."""
    airflow, service = wake
    run_id = airflow.trigger("wake_kickoff")
    wait_for(lambda: deferred(airflow, "wake_kickoff", run_id, "kickoff"), timeout=120, what="the deferral")
    kickoff_id = airflow.xcom("wake_kickoff", run_id, "kickoff", key="kickoff_id")
    old_key, new_key = airflow.key, secrets.token_urlsafe(32)
    restart_api_server(airflow, f"{new_key} {old_key}")
    try:
        assert finish(airflow, "wake_kickoff", run_id) == "success"
        log = airflow.task_log("wake_kickoff", run_id, "kickoff")
        assert "Woken by the crew's completion webhook" in log, log
        assert service.executions[kickoff_id]["polls"] <= WINDOW_READS
        done = {"kickoff_id": kickoff_id}
        for key, code in ((new_key, 202), (old_key, 202), (secrets.token_urlsafe(32), 404)):
            token = run_token(key, "wake_kickoff", run_id)
            assert (
                post_webhook(airflow, "crew", "wake_kickoff", run_id, done, token=token).status_code == code
            )
    finally:
        restart_api_server(airflow, old_key)  # the workers hold the old key alone: as before, for the rest


def restart_api_server(airflow: AirflowStack, password: str) -> None:
    api_server = airflow.processes.pop("api-server")
    _signal_group(api_server, 15)
    api_server.wait(30)
    airflow.env["AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER"] = json.dumps(
        {"conn_type": "crew_webhook_receiver", "host": airflow.base_url, "password": password}
    )
    airflow.start(("api-server",))


def test_with_the_api_server_stopped_the_safety_poll_ends_the_wait(wake):
    """Last: the api-server goes away while the wait is deferred; the crew's webhook finds nobody."""
    airflow, service = wake
    run_id = airflow.trigger("wake_safety")
    wait_for(lambda: deferred(airflow, "wake_safety", run_id, "kickoff"), timeout=120, what="the deferral")
    kickoff_id = airflow.xcom("wake_safety", run_id, "kickoff", key="kickoff_id")
    api_server = airflow.processes.pop("api-server")
    _signal_group(api_server, 15)
    api_server.wait(30)
    service.wait_for_state(kickoff_id, "SUCCESS", timeout=120)
    deliveries = service.wait_for_deliveries(
        lambda got: (
            [d for d in got if d["kickoff_id"] == kickoff_id and d["kind"] == "crew" and d["ok"] is not None]
            or None
        ),
        timeout=30,
    )
    assert deliveries[-1]["ok"] is False  # nobody answered the crew's webhook
    airflow.start(("api-server",))  # the workers need it again to run the woken task
    assert finish(airflow, "wake_safety", run_id) == "success"
    log = airflow.task_log("wake_safety", run_id, "kickoff")
    assert "Woken by" not in log  # the safety poll found the end
    assert "no webhook woke this wait" in log  # and the task's log says so, with what to check
    assert_no_race(airflow, "wake_safety", run_id)
