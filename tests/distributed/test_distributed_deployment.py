"""A distributed deployment, with a triggerer and a worker killed under running crews.

PostgreSQL is Airflow's metadata database and Redis the Celery broker (both from Debian's
packages, installed and started by ``scripts/distributed-services.sh``). The CeleryExecutor runs
2 workers and 2 triggerers, next to the api-server, scheduler and dag-processor. The crew is the
bundled local crew service. The DAG (``dags/crew_distributed.py``) starts deferrable and blocking
kickoffs, fanned out with ``.expand``.

While every crew is still running, the test SIGKILLs the triggerer holding the most waits (it is
not restarted) and the worker running the most blocking waits. Then it checks that every task
succeeds, that the crew service received exactly one kickoff per task instance (its own request
record, by the ``meta`` each kickoff carries), that the other triggerer took over the waits
without a retry, and that the killed worker's tasks reattached to their executions on retry
(Airflow 3.3+ task state store) instead of starting new ones.

The crews run until the test releases them: each takes 900 one-second steps, and the test speeds
the service up once the faults are handled. So no crew can finish before a fault, however slow
the machine. Failover uses Airflow's own settings (``cluster.FAILOVER_SETTINGS``).

Opt-in, several minutes: ``pytest -m distributed tests/distributed`` (root, or PostgreSQL 15 and
Redis installed; ``pip install -e '.[distributed]'``). It is skipped, with the reason, when
PostgreSQL or Redis cannot be started or the extra is missing, unless ``CREW_DISTRIBUTED_REQUIRED=1``
(CI) makes that a failure. Every process it starts is stopped by its pid or process group in the teardown.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_3_PLUS
from airflow_provider_crew.waiting.race import deferral_settle_seconds

from ..e2e.airflow_stack import wait_for
from .cluster import CeleryCluster, Services, ServicesUnavailable

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(
        not AIRFLOW_V_3_3_PLUS,
        reason="a retry reattaches to its execution only from Airflow 3.3 (task state store)",
    ),
]

DAGS = Path(__file__).resolve().parent / "dags"
DAG_ID = "crew_distributed"
DEFERRABLE = 6
BLOCKING = 4
TASKS = DEFERRABLE + BLOCKING
# 900 steps of 1 s: the crews outlast anything the test waits for, until it sets RELEASE_SPEED,
# which finishes the rest within seconds.
GATED_CREW = {
    "name": "long_research",
    "description": "Researches a topic for as long as the test needs.",
    "inputs": ["topic"],
    "pending_seconds": 0.05,
    "step_seconds": 1.0,
    "tasks": [
        {
            "name": "research_task",
            "agent": "Researcher",
            "description": "Research {topic}.",
            "expected_output": "Notes about {topic}",
            "steps": 900,
        }
    ],
}
RELEASE_SPEED = 300
START_TIMEOUT = 300  # parse, queue, start and defer every task on a loaded 2-core machine
RECOVERY_TIMEOUT = 180  # heartbeat timeout 20 s + detection + retry + start, with margin
FINISH_TIMEOUT = 180

Key = tuple[str, int]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[CeleryCluster, Any, dict[str, float]]]:
    for module in ("airflow.providers.celery", "psycopg2", "asyncpg"):
        if not _importable(module):
            _unavailable(f"{module} is missing: pip install -e '.[distributed]'")
    from airflow_provider_crew.testing import LocalCrewService

    timings: dict[str, float] = {}
    started = time.monotonic()
    services = Services()
    try:
        services.start()
    except ServicesUnavailable as error:
        _unavailable(f"PostgreSQL and Redis could not be started: {error}")
    timings["services"] = time.monotonic() - started
    try:
        with LocalCrewService(GATED_CREW) as service:
            env = {
                # The crews' webhooks wake the deferred waits, which poll only every 10 minutes as a
                # safety net: once the crews are released, the waits end at the webhooks or not in time.
                **service.connection_env("crew_default", wake_by_webhook=True, safety_poll_interval=600),
                "CREW_DIST_DEFERRABLE": str(DEFERRABLE),
                "CREW_DIST_BLOCKING": str(BLOCKING),
            }
            cluster = CeleryCluster(tmp_path / "home", DAGS, services, env, workers=2, triggerers=2)
            receiver = json.dumps(
                {
                    "conn_type": "crew_webhook_receiver",
                    "host": cluster.base_url,
                    "password": secrets.token_urlsafe(32),
                }
            )
            for component_env in (cluster.env, *(c.env for c in cluster.components.values())):
                component_env["AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER"] = receiver
            try:
                mark = time.monotonic()
                cluster.migrate()
                timings["migrate"] = time.monotonic() - mark
                mark = time.monotonic()
                cluster.start()
                timings["start"] = time.monotonic() - mark
                yield cluster, service, timings
            except BaseException:
                _print_logs(cluster)
                raise
            finally:
                cluster.stop()
    finally:
        services.stop()


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _unavailable(reason: str) -> NoReturn:
    """Skip, naming what is missing; fail instead where the test must run (CREW_DISTRIBUTED_REQUIRED=1)."""
    if os.environ.get("CREW_DISTRIBUTED_REQUIRED") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def _print_logs(cluster: CeleryCluster) -> None:
    for name in cluster.components:
        print(f"----- {name} -----\n{cluster.log_tail(name)}")


def _triggerer(ti: dict[str, Any]) -> str | None:
    job = ti.get("triggerer_job") or {}
    return job.get("hostname")


def test_celery_deployment_survives_a_killed_triggerer_and_worker(deployment):
    cluster, service, timings = deployment
    try:
        _run_scenario(cluster, service, timings)
    except BaseException:
        _print_logs(cluster)
        raise


def _run_scenario(cluster: CeleryCluster, service: Any, timings: dict[str, float]) -> None:
    started = time.monotonic()
    cluster.wait_for_dag(DAG_ID)
    run_id = cluster.trigger(DAG_ID)

    def task_instances() -> dict[Key, dict[str, Any]]:
        cluster.check_alive()
        tis = {(ti["task_id"], ti["map_index"]): ti for ti in cluster.task_instances(DAG_ID, run_id)}
        failed = {key: ti["state"] for key, ti in tis.items() if ti["state"] in ("failed", "upstream_failed")}
        assert not failed, f"tasks failed: {failed}"
        return {key: ti for key, ti in tis.items() if key[1] >= 0}

    def kickoff_id(key: Key) -> str | None:
        return cluster.xcom_value(DAG_ID, run_id, key[0], key[1], "kickoff_id")

    # 1. Every deferrable task waits in a triggerer and every blocking one on a worker, with its
    #    kickoff id recorded (XCom is written after the task state store: a retry can find it).
    def all_waiting() -> dict[Key, dict[str, Any]] | None:
        tis = task_instances()
        if len(tis) != TASKS:
            return None
        for key, ti in tis.items():
            if key[0] == "deferrable" and not (ti["state"] == "deferred" and _triggerer(ti)):
                return None
            if key[0] == "blocking" and not (ti["state"] == "running" and ti["hostname"] and kickoff_id(key)):
                return None
        return tis

    waiting = wait_for(
        all_waiting,
        timeout=START_TIMEOUT,
        interval=2,
        what=f"{DEFERRABLE} deferrable tasks deferred to a triggerer and {BLOCKING} blocking tasks waiting on a worker",
    )
    timings["all waiting"] = time.monotonic() - started
    # Every deferral happened before this moment: from the race bound after it (the cluster keeps
    # Airflow's defaults for the settings it is made of), a crew's webhook wakes its wait.
    wakes_apply_from = time.monotonic() + deferral_settle_seconds()
    first_kickoffs = {key: kickoff_id(key) for key in waiting}
    assert service.request_count("kickoff") == TASKS, service.counters["requests"]
    executions = service.executions
    assert {e["state"] for e in executions.values()} == {"RUNNING"}, "a crew was not running at the faults"

    # 2. The faults: the triggerer holding the most waits and the worker running the most blocking
    #    tasks die at once, as their machines would. The triggerer is not restarted.
    held = Counter(_triggerer(ti) for key, ti in waiting.items() if key[0] == "deferrable")
    running = Counter(ti["hostname"] for key, ti in waiting.items() if key[0] == "blocking")
    doomed_triggerer = held.most_common(1)[0][0]
    doomed_worker = running.most_common(1)[0][0]
    survivor_triggerer = next(
        n for n in cluster.components if n.startswith("triggerer-") and n != doomed_triggerer
    )
    survivor_worker = next(n for n in cluster.components if n.startswith("worker-") and n != doomed_worker)
    orphaned = sorted(
        k for k, ti in waiting.items() if k[0] == "deferrable" and _triggerer(ti) == doomed_triggerer
    )
    interrupted = sorted(
        k for k, ti in waiting.items() if k[0] == "blocking" and ti["hostname"] == doomed_worker
    )
    triggerer_killed_at = cluster.kill(doomed_triggerer)
    worker_killed_at = cluster.kill(doomed_worker)

    # 3. Recovery: the other triggerer takes the orphaned waits over (same try, no retry); the
    #    interrupted tasks are failed by the heartbeat timeout, retried on the other worker, and
    #    their retries reattach to the executions the first tries started, which are still running.
    recovered: dict[str, float] = {}

    def reattached(key: Key) -> bool:
        log = cluster.task_log(DAG_ID, run_id, key[0], key[1], try_number=2)
        return f"Reattaching to crew execution {first_kickoffs[key]}" in log

    def both_recovered() -> bool:
        kickoffs = service.request_count("kickoff")
        assert kickoffs == TASKS, f"{kickoffs - TASKS} retries started a second execution"
        tis = task_instances()
        if "triggerer" not in recovered and all(
            tis[k]["state"] == "deferred" and _triggerer(tis[k]) == survivor_triggerer for k in orphaned
        ):
            recovered["triggerer"] = time.monotonic() - triggerer_killed_at
        if "worker" not in recovered and all(
            tis[k]["state"] == "running"
            and tis[k]["try_number"] == 2
            and tis[k]["hostname"] == survivor_worker
            and reattached(k)
            for k in interrupted
        ):
            recovered["worker"] = time.monotonic() - worker_killed_at
        return len(recovered) == 2

    wait_for(
        both_recovered,
        timeout=RECOVERY_TIMEOUT,
        interval=1,
        what=f"{survivor_triggerer} to take over {len(orphaned)} waits and the retries of "
        f"{len(interrupted)} interrupted tasks to reattach on {survivor_worker}",
    )
    assert {e["state"] for e in service.executions.values()} == {"RUNNING"}, "a crew ended before the release"

    # 4. Release the crews and let everything finish. A crew that ended within the race bound of its
    #    wait's deferral would be seen by the trigger's own polls (and its webhook dropped): release
    #    after the bound, so that what is proven is the wake, across the takeover too.
    wait_for(
        lambda: time.monotonic() >= wakes_apply_from,
        timeout=max(0.0, wakes_apply_from - time.monotonic()) + 5,
        interval=1,
        what="the race bound after the deferrals",
    )
    service.configure(speed=RELEASE_SPEED)
    released = time.monotonic()

    def run_finished() -> str | None:
        cluster.check_alive()
        state = cluster.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    final_state = wait_for(run_finished, timeout=FINISH_TIMEOUT, interval=2, what="the DAG run to finish")
    timings["finish after release"] = time.monotonic() - released
    # The deferred waits ended at the crews' webhooks (their safety poll is 10 minutes away), each woken
    # once, also those the surviving triggerer took over from the killed one.
    woken = re.findall(r"Woke task instance (\S+) \(crew webhook", cluster.log_tail("api-server", 10**8))
    assert len(woken) == len(set(woken)) == DEFERRABLE, woken
    final = {(ti["task_id"], ti["map_index"]): ti for ti in cluster.task_instances(DAG_ID, run_id)}
    assert final_state == "success", {key: ti["state"] for key, ti in final.items()}
    assert {ti["state"] for ti in final.values()} == {"success"}

    # Exactly one kickoff per task instance, by the service's own record.
    assert service.request_count("kickoff") == TASKS, "a task started a second execution"
    executions = service.executions
    per_task = Counter((e["meta"]["task_id"], int(e["meta"]["map_index"])) for e in executions.values())
    assert per_task == Counter({key: 1 for key in waiting}), per_task
    assert {e["state"] for e in executions.values()} == {"SUCCESS"}

    for key, ti in final.items():
        # Every task's result is the execution its first try started.
        assert cluster.xcom_value(DAG_ID, run_id, key[0], key[1], "return_value") == first_kickoffs[key], key
        if key in interrupted:
            assert ti["try_number"] == 2 and ti["hostname"] == survivor_worker, (key, ti)
        else:
            assert ti["try_number"] == 1, f"{key} was retried although its worker was not killed: {ti}"
    timings["total"] = time.monotonic() - started

    _print_summary(
        [
            (
                f"SIGKILL {doomed_triggerer} (not restarted)",
                f"{len(orphaned)} of {DEFERRABLE} deferred waits",
                f"taken over by {survivor_triggerer} in {recovered['triggerer']:.0f} s",
                f"{len(orphaned)} succeeded on try 1, 0 extra kickoffs",
            ),
            (
                f"SIGKILL {doomed_worker}",
                f"{len(interrupted)} of {BLOCKING} blocking waits",
                f"retries reattached on {survivor_worker} {recovered['worker']:.0f} s after the kill",
                f"{len(interrupted)} reattached on try 2 and succeeded, 0 extra kickoffs",
            ),
        ],
        timings,
    )


def _print_summary(rows: list[tuple[str, str, str, str]], timings: dict[str, float]) -> None:
    header = ("fault", "tasks hit", "recovery", "outcome")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    line = "-+-".join("-" * w for w in widths)
    print()
    for row in [header, None, *rows]:
        if row is None:
            print(line)
            continue
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print("timings (s): " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in timings.items()))
