"""Faults under a real Airflow (LocalExecutor) and the local crew service, one table row per fault.

The suite starts the api-server, scheduler, dag-processor and triggerer as real processes
(:class:`stack.FaultStack`) and the local crew service in-process, then, in order:

1. SIGKILLs the triggerer while it holds deferred waits, and restarts it; at the same time SIGKILLs
   one running task's process mid-wait (its retry must reattach: Airflow 3.3+).
2. SIGKILLs the scheduler, with everything under it, mid-run, and restarts it.
3. Takes the service away for ``CREW_FAULTS_OUTAGE_SECONDS`` (default 120) twice at once: as 503
   answers for one crew and as connection refused (nothing listening on the port its connection
   names) for another, with waits in progress and new kickoffs arriving; meanwhile garbage answers
   to status polls (HTML with 200, truncated JSON, JSON labelled text/html, a state and an HTTP
   status the contract does not know), garbage answers to kickoffs, and status answers slower
   than the connection's read time-out.
4. Sends 100 mapped kickoffs through 100 answers of 429 (Retry-After: 1), default settings.
5. Searches every file under AIRFLOW_HOME, a dump of the metadata database, the trigger kwargs
   held while waits were deferred, and REST answers for the crew token, with positive controls.

Each row asserts its expected outcome; the table is printed at the end (terminal summary) and
written to test-artifacts/faults/table.md. Crews run until the suite releases them (900 steps of
1 s, then ``speed=300``), so no crew finishes before its fault however slow the machine.

Opt-in: ``pytest -m faults tests/faults``. Every process it starts is stopped by its pid or
process group in the teardown.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.testing import LocalCrewService

from ..e2e.airflow_stack import wait_for
from .proxy import TcpForwarder
from .stack import FaultStack
from .table import TABLE, Row

pytestmark = pytest.mark.faults

DAGS = Path(__file__).resolve().parent / "dags"
OUTAGE_SECONDS = float(os.environ.get("CREW_FAULTS_OUTAGE_SECONDS", "120"))
# 16 task processes at once: at 32, on 2 CPUs and SQLite beside CI's other lane, Airflow itself reset
# task instances that were slow to start (their retries are Airflow's, not the provider's).
PARALLELISM = 16
RELEASE_SPEED = 300
START_TIMEOUT = 300  # parse, queue, start and defer on a loaded 2-core machine
RECOVERY_TIMEOUT = 240
FINISH_TIMEOUT = 300
REATTACH_NEEDS = "a retry reattaches to its execution only from Airflow 3.3 (task state store)"

Key = tuple[str, str, int]  # run id, task id, map index


def gated(name: str) -> dict[str, Any]:
    """A crew that runs until the suite releases it."""
    return {
        "name": name,
        "description": f"Runs for as long as the {name} fault needs.",
        "inputs": ["topic"],
        "pending_seconds": 0.05,
        "step_seconds": 1.0,
        "tasks": [
            {
                "name": "research_task",
                "agent": "Researcher",
                "description": "Research {topic}.",
                "expected_output": "Notes",
                "steps": 900,
            }
        ],
    }


def timed(name: str, steps: int, step_seconds: float) -> dict[str, Any]:
    crew = gated(name)
    crew["step_seconds"] = step_seconds
    crew["tasks"][0]["steps"] = steps
    return crew


CREWS = [
    gated("triggerer"),
    gated("task"),
    gated("scheduler"),
    gated("outage_503"),
    gated("outage_refused"),
    timed("garbage", 15, 1.0),
    timed("garbage_kickoff", 1, 0.2),
    timed("slow", 12, 1.0),
    timed("burst", 1, 0.5),
]
# Garbage answers to status polls, each twice: the wait must poll on through every one.
STATUS_GARBAGE = ("html_200", "truncated_json", "wrong_content_type", "unknown_state")


@dataclass
class Suite:
    stack: FaultStack
    service: LocalCrewService
    proxy: TcpForwarder
    token: str
    trigger_kwargs: list[str] = field(default_factory=list)
    kickoff_ids_in_triggers: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    token = f"crew-faults-token-{secrets.token_hex(12)}"
    service = LocalCrewService(CREWS, org_token=token)
    service.start()
    proxy = TcpForwarder("127.0.0.1", service.port)
    stack: FaultStack | None = None
    try:
        proxy.accept()
        env: dict[str, str] = {}
        for crew in ("triggerer", "task", "scheduler", "outage_503", "garbage", "garbage_kickoff", "burst"):
            env.update(service.connection_env(f"crew_{crew}", crew=crew))
        # Status answers slower than the read time-out: 1 + 2 s per attempt.
        env.update(service.connection_env("crew_slow", crew="slow", connect_timeout=1, read_timeout=2))
        # Through the forwarder, whose port refuses connections during the outage.
        env["AIRFLOW_CONN_CREW_OUTAGE_REFUSED"] = json.dumps(
            {"conn_type": "crew", "host": f"{proxy.base_url}/crews/outage_refused", "password": token}
        )
        stack = FaultStack(tmp_path_factory.mktemp("faults") / "home", DAGS, env, parallelism=PARALLELISM)
        TABLE.header_note = (
            f"LocalExecutor parallelism {PARALLELISM}, SQLite, {os.cpu_count()} CPUs, "
            f"outages of {OUTAGE_SECONDS:.0f} s"
        )
        stack.migrate()
        stack.start()
        for dag_id in ("fault_triggerer", "fault_burst_429"):
            stack.wait_for_dag(dag_id, timeout=180)
        yield Suite(stack, service, proxy, token)
    except BaseException:
        if stack is not None:
            for name in stack.components:
                print(f"----- {name} -----\n{stack.log_tail(name)}")
        raise
    finally:
        if stack is not None:
            stack.stop()
        proxy.stop()
        service.stop()


# -- helpers ---------------------------------------------------------------------------------------


def mapped(stack: FaultStack, dag_id: str, run_id: str) -> dict[Key, dict[str, Any]]:
    return {
        (run_id, ti["task_id"], ti["map_index"]): ti
        for ti in stack.task_instances(dag_id, run_id)
        if ti["map_index"] >= 0
    }


def raw_task_log(stack: FaultStack, dag_id: str, key: Key, try_number: int) -> str:
    """One try's log records as JSON text: with the exception's type, which the UI's text leaves out."""
    return json.dumps(stack.task_log_records(dag_id, *key, try_number=try_number))


def no_failures(tis: dict[Key, dict[str, Any]]) -> None:
    failed = {k: ti["state"] for k, ti in tis.items() if ti["state"] in ("failed", "upstream_failed")}
    assert not failed, f"tasks failed: {failed}"


def waiting(stack: FaultStack, dag_id: str, run_id: str, count: int) -> Callable[[], dict | None]:
    """Every task of the run waits: deferred to a triggerer, or running with its kickoff id in XCom."""

    def check() -> dict[Key, dict[str, Any]] | None:
        stack.check_alive()
        tis = mapped(stack, dag_id, run_id)
        no_failures(tis)
        if len(tis) != count:
            return None
        for key, ti in tis.items():
            if key[1] == "deferrable" and not (ti["state"] == "deferred" and ti.get("triggerer_job")):
                return None
            if key[1] == "blocking" and not (
                ti["state"] == "running" and stack.xcom_value(dag_id, run_id, key[1], key[2], "kickoff_id")
            ):
                return None
        return tis

    return check


def finished(stack: FaultStack, dag_id: str, run_ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        stack.check_alive()
        return all(stack.dag_run_state(dag_id, r) in ("success", "failed") for r in run_ids)

    return check


def release(suite: Suite, dag_ids_runs: list[tuple[str, list[str]]]) -> None:
    """Let the gated crews finish, wait for the runs, then slow the service down again."""
    suite.service.configure(speed=RELEASE_SPEED)
    try:
        for dag_id, runs in dag_ids_runs:
            wait_for(
                finished(suite.stack, dag_id, runs),
                timeout=FINISH_TIMEOUT,
                interval=2,
                what=f"{dag_id} runs {runs} to finish",
            )
    finally:
        suite.service.configure(speed=1)


def measure(
    suite: Suite, fault: str, dag_id: str, runs: list[str], crew: str, seconds: float
) -> tuple[Row, dict]:
    """A row's figures, from Airflow's REST API and the crew service's own record."""
    stack = suite.stack
    tis: dict[Key, dict[str, Any]] = {}
    for run_id in runs:
        tis.update(mapped(stack, dag_id, run_id))
    executions = [e for e in suite.service.executions.values() if e["crew"] == crew]
    per_task = Counter(
        (e["meta"]["run_id"], e["meta"]["task_id"], int(e["meta"]["map_index"])) for e in executions
    )
    returned = {
        stack.xcom_value(dag_id, k[0], k[1], k[2], "return_value")
        for k, ti in tis.items()
        if ti["state"] == "success"
    }
    row = Row(
        fault=fault,
        tasks=len(tis),
        succeeded=sum(ti["state"] == "success" for ti in tis.values()),
        kickoffs=len(executions),
        duplicates=sum(n - 1 for n in per_task.values()),
        lost=sum(e["kickoff_id"] not in returned for e in executions),
        retries=sum(ti["try_number"] - 1 for ti in tis.values()),
        seconds=seconds,
    )
    return row, {"tis": tis, "executions": executions, "per_task": per_task, "returned": returned}


def check_row(row: Row, expected: dict[str, Any], note: str) -> str | None:
    """Compare a row with its expected figures; record the verdict; return the mismatch, if any."""
    wrong = {
        name: (getattr(row, name), want) for name, want in expected.items() if getattr(row, name) != want
    }
    row.note = note
    row.verdict = (
        "ok"
        if not wrong
        else "FAIL " + ", ".join(f"{n}={got} (expected {want})" for n, (got, want) in wrong.items())
    )
    TABLE.add(row)
    return None if not wrong else f"{row.fault}: {row.verdict}"


def reattached(stack: FaultStack, dag_id: str, key: Key, kickoff_id: str, try_number: int = 2) -> bool:
    log = stack.task_log(dag_id, key[0], key[1], key[2], try_number=try_number)
    return f"Reattaching to crew execution {kickoff_id}" in log


def kickoff_ids(stack: FaultStack, dag_id: str, keys: list[Key]) -> dict[Key, str]:
    return {k: stack.xcom_value(dag_id, k[0], k[1], k[2], "kickoff_id") for k in keys}


def read_triggers(stack: FaultStack) -> list[str]:
    """The trigger rows' kwargs, as stored (Airflow keeps them encrypted only with a Fernet key)."""
    with sqlite3.connect(f"file:{stack.home / 'airflow.db'}?mode=ro", uri=True, timeout=30) as db:
        return [str(row[0]) for row in db.execute("SELECT kwargs FROM trigger")]


# -- 1. triggerer and task process -----------------------------------------------------------------


def test_triggerer_and_task_process_killed_mid_wait(suite: Suite) -> None:
    stack, service = suite.stack, suite.service
    started = time.monotonic()
    run_t = stack.trigger("fault_triggerer")
    run_k = stack.trigger("fault_task") if AIRFLOW_V_3_3_PLUS else None
    deferred = wait_for(
        waiting(stack, "fault_triggerer", run_t, 4),
        timeout=START_TIMEOUT,
        interval=2,
        what="4 waits deferred to the triggerer",
    )
    blocking = (
        wait_for(
            waiting(stack, "fault_task", run_k, 2),
            timeout=START_TIMEOUT,
            interval=2,
            what="2 blocking waits running",
        )
        if run_k
        else {}
    )
    first = kickoff_ids(stack, "fault_triggerer", list(deferred))
    first_task = kickoff_ids(stack, "fault_task", list(blocking))
    # Held by the triggerer now: the secrets search reads them at the end.
    suite.trigger_kwargs = read_triggers(stack)
    suite.kickoff_ids_in_triggers = list(first.values())
    crews = {e["crew"]: e["state"] for e in service.executions.values()}
    assert set(crews.values()) == {"RUNNING"}, crews

    old_job = {ti["triggerer_job"]["id"] for ti in deferred.values()}
    polls_before = service.call_in_loop(lambda: service.app.counters.by_crew["triggerer"].get("status", 0))
    killed_at = stack.kill("triggerer")
    victim = next(iter(blocking), None)
    if victim:
        stack.kill_task_process(blocking[victim]["id"])
        task_killed_at = time.monotonic()
    stack.restart("triggerer")

    recovered: dict[str, float] = {}

    def taken_over() -> bool:
        tis = mapped(stack, "fault_triggerer", run_t)
        no_failures(tis)
        polls = service.call_in_loop(lambda: service.app.counters.by_crew["triggerer"].get("status", 0))
        if all(
            ti["state"] == "deferred" and ti.get("triggerer_job") and ti["triggerer_job"]["id"] not in old_job
            for ti in tis.values()
        ) and polls > polls_before + len(tis):
            recovered.setdefault("triggerer", time.monotonic() - killed_at)
        if victim and "task" not in recovered:
            ti = mapped(stack, "fault_task", run_k)[victim]
            if (
                ti["try_number"] == 2
                and ti["state"] == "running"
                and reattached(stack, "fault_task", victim, first_task[victim])
            ):
                recovered["task"] = time.monotonic() - task_killed_at
        return "triggerer" in recovered and (not victim or "task" in recovered)

    wait_for(
        taken_over,
        timeout=RECOVERY_TIMEOUT,
        interval=1,
        what="the restarted triggerer to take the waits over (and the killed task's retry to reattach)",
    )
    release(suite, [("fault_triggerer", [run_t])] + ([("fault_task", [run_k])] if run_k else []))

    problems = []
    row, seen = measure(
        suite,
        "triggerer SIGKILL + restart (4 deferred waits)",
        "fault_triggerer",
        [run_t],
        "triggerer",
        time.monotonic() - started,
    )
    assert {seen["tis"][k]["state"] for k in first} == {"success"}
    problems.append(
        check_row(
            row,
            dict(tasks=4, succeeded=4, kickoffs=4, duplicates=0, lost=0, retries=0),
            f"the new triggerer ran the 4 waits {recovered['triggerer']:.0f} s after the kill, same try "
            f"(triggerer_health_check_threshold {stack.env['AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD']} s)",
        )
    )
    if run_k:
        row, seen = measure(
            suite,
            "task process SIGKILL mid-wait (1 of 2 blocking)",
            "fault_task",
            [run_k],
            "task",
            time.monotonic() - started,
        )
        results = {k: stack.xcom_value("fault_task", *k, "return_value") for k in first_task}
        assert results == first_task, "a task returned another execution than its first try started"
        problems.append(
            check_row(
                row,
                dict(tasks=2, succeeded=2, kickoffs=2, duplicates=0, lost=0, retries=1),
                f"failed at once by its supervisor; try 2 reattached to the running execution "
                f"{recovered['task']:.0f} s after the kill",
            )
        )
    else:
        TABLE.add(
            Row(
                "task process SIGKILL mid-wait",
                note=f"skipped: {REATTACH_NEEDS}; the retry would start a second execution",
                verdict="skipped",
            )
        )
    assert not any(problems), problems


# -- 2. scheduler ----------------------------------------------------------------------------------


def test_scheduler_killed_mid_run_and_restarted(suite: Suite) -> None:
    if not AIRFLOW_V_3_3_PLUS:
        TABLE.add(Row("scheduler SIGKILL + restart", note=f"skipped: {REATTACH_NEEDS}", verdict="skipped"))
        pytest.skip(REATTACH_NEEDS)
    stack = suite.stack
    started = time.monotonic()
    run = stack.trigger("fault_scheduler")
    tis = wait_for(
        waiting(stack, "fault_scheduler", run, 4),
        timeout=START_TIMEOUT,
        interval=2,
        what="2 deferred and 2 blocking waits",
    )
    first = kickoff_ids(stack, "fault_scheduler", list(tis))
    interrupted = [k for k in tis if k[1] == "blocking"]
    killed_at = stack.kill("scheduler")  # with its LocalExecutor workers and their tasks
    stack.restart("scheduler")
    recovered: dict[str, float] = {}

    def recovered_all() -> bool:
        now = mapped(stack, "fault_scheduler", run)
        no_failures(now)
        if all(
            now[k]["try_number"] == 2
            and now[k]["state"] == "running"
            and reattached(stack, "fault_scheduler", k, first[k])
            for k in interrupted
        ):
            recovered.setdefault("blocking", time.monotonic() - killed_at)
        return "blocking" in recovered

    wait_for(
        recovered_all,
        timeout=RECOVERY_TIMEOUT,
        interval=2,
        what="the blocking tasks killed with the scheduler to be retried and reattach",
    )
    release(suite, [("fault_scheduler", [run])])
    row, _ = measure(
        suite,
        "scheduler SIGKILL (with its tasks) + restart",
        "fault_scheduler",
        [run],
        "scheduler",
        time.monotonic() - started,
    )
    results = {k: stack.xcom_value("fault_scheduler", *k, "return_value") for k in first}
    assert results == first, "a task returned another execution than its first try started"
    problem = check_row(
        row,
        dict(tasks=4, succeeded=4, kickoffs=4, duplicates=0, lost=0, retries=2),
        f"deferred waits untouched (try 1); the 2 blocking tasks died with it, were reset as orphans by the "
        f"new scheduler (scheduler_health_check_threshold "
        f"{stack.env['AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD']} s, orphaned_tasks_check_interval "
        f"{stack.env['AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL']} s) and reattached on try 2, "
        f"{recovered['blocking']:.0f} s after the kill",
    )
    assert problem is None, problem


# -- 3. outages and garbage ------------------------------------------------------------------------


def test_service_outages_garbage_and_slow_answers(suite: Suite) -> None:
    stack, service, proxy = suite.stack, suite.service, suite.proxy
    faults = service.faults
    started = time.monotonic()
    garbage_rules = [
        faults.garbage(kind, endpoint="status", count=2, crew="garbage") for kind in STATUS_GARBAGE
    ]
    garbage_rules.append(faults.error(418, count=2, endpoint="status", retry_after=None, crew="garbage"))
    kickoff_rules = [
        faults.garbage("html_200", endpoint="kickoff", count=1, crew="garbage_kickoff"),
        faults.garbage("truncated_json", endpoint="kickoff", count=1, crew="garbage_kickoff"),
    ]
    slow_rule = faults.latency(5, endpoint="status", count=4, crew="slow")

    runs = {
        dag: [stack.trigger(dag)]
        for dag in (
            "fault_outage_503",
            "fault_outage_refused",
            "fault_garbage_status",
            "fault_garbage_kickoff",
            "fault_slow_status",
        )
    }
    for dag in ("fault_outage_503", "fault_outage_refused"):
        wait_for(
            waiting(stack, dag, runs[dag][0], 3), timeout=START_TIMEOUT, interval=2, what=f"{dag}'s waits"
        )

    # The outages: 503 for one crew, nothing listening for the other. New runs arrive meanwhile.
    outage = faults.error(503, count=None, crew="outage_503", retry_after=1)
    proxy.refuse()
    outage_started = time.monotonic()
    for dag in ("fault_outage_503", "fault_outage_refused"):
        runs[dag].append(stack.trigger(dag))

    def outage_over() -> bool:
        stack.check_alive()
        for dag in ("fault_outage_503", "fault_outage_refused"):
            no_failures(mapped(stack, dag, runs[dag][0]))  # the waits in progress must hold
        return time.monotonic() - outage_started >= OUTAGE_SECONDS

    wait_for(outage_over, timeout=OUTAGE_SECONDS + 60, interval=2, what="the end of the outage")
    faults.remove(outage["id"])
    proxy.accept()
    refused_during = service.counters["faults"].get("error_503", 0)
    for dag in ("fault_outage_503", "fault_outage_refused"):
        wait_for(
            waiting(stack, dag, runs[dag][1], 3),
            timeout=RECOVERY_TIMEOUT,
            interval=2,
            what=f"{dag}'s second run to start its crews after the outage",
        )
    recovered = time.monotonic() - outage_started - OUTAGE_SECONDS
    release(suite, [(dag, r) for dag, r in runs.items()])
    wall = time.monotonic() - started

    problems = []
    row, _ = measure(
        suite,
        f"service outage: 503 for {OUTAGE_SECONDS:.0f} s",
        "fault_outage_503",
        runs["fault_outage_503"],
        "outage_503",
        wall,
    )
    problems.append(
        check_row(
            row,
            dict(tasks=6, succeeded=6, kickoffs=6, duplicates=0, lost=0, retries=0),
            f"3 waits polled through {refused_during} answers of 503; 3 kickoffs sent during the outage were retried "
            f"by the hook (retry_budget 300 s) and started {recovered:.0f} s after it ended",
        )
    )
    row, seen = measure(
        suite,
        f"service outage: connection refused for {OUTAGE_SECONDS:.0f} s",
        "fault_outage_refused",
        runs["fault_outage_refused"],
        "outage_refused",
        wall,
    )
    run1_retries = sum(
        ti["try_number"] - 1 for k, ti in seen["tis"].items() if k[0] == runs["fault_outage_refused"][0]
    )
    problems.append(
        check_row(
            row,
            dict(tasks=6, succeeded=6, kickoffs=6, duplicates=0, lost=0),
            f"3 waits polled through it with 0 retries ({run1_retries} seen); 3 kickoffs sent during it used up "
            f"retry_limit (3) within seconds and needed Airflow retries (retry_delay 20 s) until it ended",
        )
    )
    assert run1_retries == 0, "a wait in progress needed an Airflow retry through connection refused"

    row, _ = measure(
        suite,
        "garbage status answers (HTML 200, truncated JSON, text/html, unknown state, 418), 2 each",
        "fault_garbage_status",
        runs["fault_garbage_status"],
        "garbage",
        wall,
    )
    fired = {r["id"]: r["fired"] for r in faults.rules}
    unfired = [r["kind"] for r in garbage_rules if fired.get(r["id"], 0) != r["count"]]
    problems.append(
        check_row(
            row,
            dict(tasks=4, succeeded=4, kickoffs=4, duplicates=0, lost=0, retries=0),
            "each counted as a failed poll (an unknown state as still running); the waits polled on"
            + (f"; NOT FIRED: {unfired}" if unfired else ""),
        )
    )
    assert not unfired, f"garbage rules that never fired: {unfired}"

    row, seen = measure(
        suite,
        "garbage kickoff answers (HTML 200; truncated JSON after acting)",
        "fault_garbage_kickoff",
        runs["fault_garbage_kickoff"],
        "garbage_kickoff",
        wall,
    )
    # The task log files themselves: the REST API's structured log keeps the exception apart.
    logs = [
        path.read_text(errors="replace")
        for path in (stack.home / "logs" / "dag_id=fault_garbage_kickoff").rglob("*.log")
    ]
    unknown = sum("the outcome is unknown" in log for log in logs)
    problems.append(
        check_row(
            row,
            dict(tasks=2, succeeded=0, kickoffs=1, duplicates=0, lost=1, retries=0),
            f"expected: both fail at once with CrewOutcomeUnknownError ({unknown} of 2 logs say so), no retry "
            "although retries=2; the truncated answer's execution ran unclaimed, named in the error",
        )
    )
    assert unknown == 2, logs
    kickoff_fired = {r["id"]: r["fired"] for r in faults.rules}
    assert all(kickoff_fired.get(r["id"]) == 1 for r in kickoff_rules), faults.rules

    row, _ = measure(
        suite,
        "status answers slower than read_timeout (5 s latency, read_timeout 2 s), 4 polls",
        "fault_slow_status",
        runs["fault_slow_status"],
        "slow",
        wall,
    )
    fired = {r["id"]: r["fired"] for r in faults.rules}
    problems.append(
        check_row(
            row,
            dict(tasks=3, succeeded=3, kickoffs=3, duplicates=0, lost=0, retries=0),
            f"{fired.get(slow_rule['id'])} slow answers; each attempt ended at 3 s, the hook retried the GET, the waits polled on",
        )
    )
    faults.clear()
    assert not any(problems), problems


# -- 4. 429 burst ----------------------------------------------------------------------------------


def test_burst_of_100_kickoffs_through_100_answers_of_429(suite: Suite) -> None:
    stack, service = suite.stack, suite.service
    rule = service.faults.error(429, count=100, endpoint="kickoff", retry_after=1, crew="burst")
    started = time.monotonic()
    run = stack.trigger("fault_burst_429")

    def done() -> bool:
        stack.check_alive()
        return stack.dag_run_state("fault_burst_429", run) in ("success", "failed")

    wait_for(done, timeout=600, interval=3, what="100 mapped kickoffs to finish")
    row, seen = measure(
        suite,
        "100 mapped kickoffs through 100 x 429 (Retry-After: 1), default settings",
        "fault_burst_429",
        [run],
        "burst",
        time.monotonic() - started,
    )
    fired = next(r["fired"] for r in service.faults.rules if r["id"] == rule["id"])
    service.faults.clear()
    # The hook rides out every 429 itself: no try may fail on one. Airflow may still stop a try for
    # its own reasons when a hundred task processes swamp it (it resets a task instance whose try is
    # slow to report). A try stopped during POST /kickoff may have started an execution: its retry
    # must start none (nothing twice) and fail without retry, saying so. Every other task succeeds.
    tries = [
        (key, try_number, raw_task_log(stack, "fault_burst_429", key, try_number))
        for key, ti in seen["tis"].items()
        for try_number in range(1, ti["try_number"] + 1)
    ]
    rate_limited = [(key, n) for key, n, log in tries if "CrewRateLimitedError" in log]
    stopped = {key for key, _, log in tries if "set out to start a crew execution and was stopped" in log}
    failed = {key for key, ti in seen["tis"].items() if ti["state"] != "success"}
    problem = check_row(
        row,
        dict(tasks=100, succeeded=100 - len(failed), duplicates=0),
        f"{fired} answers of 429 spread over the kickoffs, retried by the hook (retry_budget 300 s); "
        f"{len(rate_limited)} tries failed on a 429; {row.retries} Airflow retries of its own; "
        f"{len(failed)} tasks whose try Airflow stopped mid-kickoff failed without retry, starting "
        f"nothing twice ({row.lost} of them had started an execution); parallelism {PARALLELISM}",
    )
    assert fired == 100 and problem is None and not rate_limited, (fired, problem, rate_limited)
    assert failed <= stopped, (
        f"tasks failed without the stopped-mid-kickoff message: {sorted(failed - stopped)}"
    )
    assert row.lost <= len(failed)  # an execution no task returned belongs to a task stopped mid-kickoff


# -- 5. secrets ------------------------------------------------------------------------------------

CONTROL_VARIABLE = "crew_faults_positive_control"


def test_token_is_found_only_where_it_was_planted(suite: Suite) -> None:
    stack, token = suite.stack, suite.token
    started = time.monotonic()
    forms = {token, quote(token, safe="")}
    # Positive controls, one per place searched: the token planted on purpose where it must be found.
    control_file = stack.home / "logs" / "positive-control" / "planted.log"
    control_file.parent.mkdir(parents=True, exist_ok=True)
    control_file.write_text(f"positive control: {token}\n")
    stack.api("POST", "/variables", expect=(200, 201), json={"key": CONTROL_VARIABLE, "value": token})

    # 1. Every file under AIRFLOW_HOME (component logs, task logs, trigger logs), except the database.
    files_with = []
    files_read = 0
    for path in stack.home.rglob("*"):
        if not path.is_file() or path.name.startswith("airflow.db"):
            continue
        files_read += 1
        data = path.read_bytes()
        if any(form.encode() in data for form in forms):
            files_with.append(str(path.relative_to(stack.home)))

    # 2. The metadata database, dumped whole.
    with sqlite3.connect(f"file:{stack.home / 'airflow.db'}?mode=ro", uri=True, timeout=30) as db:
        dump = list(db.iterdump())
    dump_with = [line[:80] for line in dump if any(form in line for form in forms)]

    # 3. Trigger kwargs as stored while 4 waits were deferred (read then; rows go once they fire).
    assert suite.trigger_kwargs, "no trigger rows were read while waits were deferred"
    kwargs_text = "\n".join(suite.trigger_kwargs)
    ids_seen = sum(k in kwargs_text for k in suite.kickoff_ids_in_triggers)
    kwargs_with_token = any(form in kwargs_text for form in forms)

    # 4. REST answers: runs, task instances, XComs, every try's log of the fault DAGs, event log,
    #    connections, variables.
    answers: dict[str, str] = {}

    def get(path: str, **params: Any) -> Any:
        body = stack.api("GET", path, expect=(200, 404), params=params)
        answers[path + (f"?{params}" if params else "")] = json.dumps(body)
        return body

    for dag_id in (
        "fault_triggerer",
        "fault_task",
        "fault_scheduler",
        "fault_outage_503",
        "fault_outage_refused",
        "fault_garbage_status",
        "fault_garbage_kickoff",
        "fault_slow_status",
        "fault_burst_429",
    ):
        runs = get(f"/dags/{dag_id}/dagRuns")
        for run in (runs or {}).get("dag_runs", []):
            run_id = run["dag_run_id"]
            get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/~/xcomEntries", limit=200)
            for ti in stack.task_instances(dag_id, run_id):
                if dag_id == "fault_burst_429" and ti["map_index"] > 4:
                    continue  # 5 of the 100 burst tasks are enough here; their log files are all searched above
                for key in ("return_value", "kickoff_id", "status", "webhooks"):
                    answers[f"{dag_id}/{run_id}/{ti['task_id']}/{ti['map_index']}/{key}"] = json.dumps(
                        stack.xcom_value(dag_id, run_id, ti["task_id"], ti["map_index"], key)
                    )
                for try_number in range(1, ti["try_number"] + 1):
                    answers[f"log {dag_id}/{run_id}/{ti['task_id']}/{ti['map_index']}/{try_number}"] = (
                        stack.task_log(dag_id, run_id, ti["task_id"], ti["map_index"], try_number)
                    )
    get("/eventLogs", limit=500)
    get("/connections")
    get("/variables")
    rest_with = sorted(name for name, text in answers.items() if any(form in text for form in forms))

    # The controls are found where planted, and the token nowhere else.
    control_rel = str(control_file.relative_to(stack.home))
    variable_lines = [
        line for line in dump_with if CONTROL_VARIABLE in line or line.startswith('INSERT INTO "variable"')
    ]
    assert files_with == [control_rel], files_with
    assert dump_with and dump_with == variable_lines, dump_with
    assert rest_with == ["/variables"], rest_with
    assert ids_seen == len(suite.kickoff_ids_in_triggers) and not kwargs_with_token
    stack.api("DELETE", f"/variables/{CONTROL_VARIABLE}", expect=(204, 200))
    TABLE.add(
        Row(
            "secrets: the crew token searched for",
            seconds=time.monotonic() - started,
            note=f"{files_read} files, {len(dump)} DB dump lines, {len(suite.trigger_kwargs)} trigger rows "
            f"({ids_seen} kickoff ids found in them), {len(answers)} REST answers: found only at the 2 positive "
            "controls (a planted log file, an Airflow Variable in the DB and GET /variables)",
        )
    )
