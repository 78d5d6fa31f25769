"""One real Airflow stack whose DAG runs produce every crew metric, sending its metrics wherever the
caller's settings say (StatsD or OpenTelemetry).

:func:`metrics_stack` starts the api-server, scheduler (LocalExecutor), dag-processor and triggerer
(tests/e2e/airflow_stack.py) against the local crew service, and :func:`run_scenario` runs every DAG
of dags/crew_metrics.py at once, plus a review of two rounds on Airflow 3.1+, acting as a user and a
gateway do where a case needs it. What it saw (runs, XComs, executions, the faults that fired) is
returned for the test to compare with the metrics that arrived.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS

from ..e2e.airflow_stack import FAST_SETTLE, AirflowStack, epoch, metadata_database, running_stack, wait_for
from ..e2e.test_stop_e2e import deferred_in_triggerer
from .receivers import Senders

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DAG_FILE = HERE / "dags" / "crew_metrics.py"
REVIEW_DAG_FILE = REPO / "example_dags" / "example_crew_review_in_airflow.py"
REVIEW_DAG = "example_crew_review_in_airflow"
# On the components' PYTHONPATH: the stat name handler of a broken metrics setup.
AIRFLOW_PATH = HERE / "airflow_path"
REFUSING_HANDLER = {"AIRFLOW__METRICS__STAT_NAME_HANDLER": "refusing_stat_names.refuse_broken_dags"}
TASK = "kickoff"
RUN_TIMEOUT = 240
HUMAN_WEBHOOK_TOKEN = "human-webhook-token-metrics"
FEEDBACK = "Add a section on schema evolution."


def crew(name: str, steps: int, step_seconds: float, *faults: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "inputs": ["topic"],
        "pending_seconds": 0.1,
        "tasks": [{"name": "work", "agent": "Worker", "steps": steps, "step_seconds": step_seconds}],
        "faults": list(faults),
    }


# Each DAG's crew (dags/crew_metrics.py). Faults armed from the start: a busy service's 429 on the
# blocking kickoff and a gateway's 502 on its first status read (both retried); a gateway's 502 after
# the gateway's kickoff reached the service (an unknown outcome).
CREWS = [
    crew(
        "blocking",
        4,  # 4 s: its wait reads it running at least once, which bounds its end lag
        1,
        {"kind": "error", "endpoint": "kickoff", "status": 429, "retry_after": 1, "count": 1},
        {"kind": "gateway", "endpoint": "status", "status": 502, "count": 1},
    ),
    crew("deferred", 15, 2),  # 30 s: the test arms a 502 while the trigger polls
    crew("gateway", 60, 2, {"kind": "gateway", "endpoint": "kickoff", "status": 502, "count": 1}),
    crew("timeout", 60, 2),
    crew("keep", 60, 2),
    crew("marked_failed", 60, 2),
    crew("broken_blocking", 2, 0.5),  # their crew metrics raise where REFUSING_HANDLER is set
    crew("broken_deferred", 3, 2),
    # Spends 2,000 tokens a second until stopped: its kickoff's cap (3,000) stops it (over_budget).
    {**crew("over_budget", 600, 1), "tokens_per_second": 2000},
]
# Prices on these crews' connections, per million tokens: their ends count crew.execution.cost.
PRICED = {"blocking", "over_budget"}
PRICES = {"input_price": 3.0, "output_price": 15.0}
# The blocking kickoff's crew posts its event stream to the api-server (crew.events.received); its wait
# does not defer, so the wake that the stream rides on changes nothing else of it.
EVENT_STREAMS = {"blocking": {"wake_by_webhook": True, "event_stream": True}}
RECEIVER_KEY = "metrics-receiver-key-" + "k" * 20


def receiver_connection(airflow: AirflowStack) -> dict[str, str]:
    """The webhook receiver connection: the api-server's address as the crews reach it."""
    receiver = {"conn_type": "crew_webhook_receiver", "host": airflow.base_url, "password": RECEIVER_KEY}
    return {"AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER": json.dumps(receiver)}


NO_STOP_CREWS = [crew("no_stop", 60, 2)]  # on a service without POST /stop
DAG_IDS = [f"metrics_{spec['name']}" for spec in CREWS + NO_STOP_CREWS]


@dataclass
class Run:
    """One DAG run as the test saw it."""

    dag_id: str
    run_id: str
    state: str = ""
    started: float = 0.0  # epoch seconds, Airflow's start and end of the run
    ended: float = 0.0
    tasks: dict[str, str | None] = field(default_factory=dict)
    kickoff_id: str | None = None
    usage: dict[str, Any] | None = None

    @property
    def wall_ms(self) -> float:
        return (self.ended - self.started) * 1000


@dataclass
class Scenario:
    """What the DAG runs did, to compare with the metrics that arrived."""

    runs: dict[str, Run]
    executions: dict[str, list[dict[str, Any]]]  # the service's executions, by crew
    fired: dict[str, int]  # how often each fault the test armed during the runs fired
    tab_read: dict[str, Any] | None = None  # the Crew tab's answer, read in the api-server
    review: dict[str, Any] | None = None

    def summary(self) -> str:
        """Each run's state and time, for the test's output."""
        first = min(run.started for run in self.runs.values())
        lines = [
            f"  {run.dag_id}: {run.state}, {run.started - first:.0f}-{run.ended - first:.0f} s"
            for run in self.runs.values()
        ]
        if self.review:
            review = self.review["run"]
            start, end = epoch(review["start_date"]) - first, epoch(review["end_date"]) - first
            lines.append(f"  {REVIEW_DAG}: {review['state']}, {start:.0f}-{end:.0f} s")
        return "\n".join(lines)


@dataclass
class Services:
    main: Any
    no_stop: Any
    review: Any | None


@contextlib.contextmanager
def metrics_stack(
    tmp: Path, metrics_env: Mapping[str, str], senders: Senders
) -> Iterator[tuple[AirflowStack, Services]]:
    """Start the crew services and the Airflow stack with ``metrics_env``; ``senders`` learns which
    process is which component."""
    from airflow_provider_crew.testing import LocalCrewService

    dags = tmp / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    with contextlib.ExitStack() as stack:
        main = stack.enter_context(LocalCrewService(CREWS))
        no_stop = stack.enter_context(LocalCrewService(NO_STOP_CREWS, stop_endpoint="absent"))
        env = {**metadata_database(stack), **FAST_SETTLE, **metrics_env}
        env["PYTHONPATH"] = os.pathsep.join([str(AIRFLOW_PATH), env["PYTHONPATH"]])
        for spec in CREWS:
            extras = {**(PRICES if spec["name"] in PRICED else {}), **EVENT_STREAMS.get(spec["name"], {})}
            env.update(
                main.connection_env(f"crew_{spec['name']}", crew=spec["name"], retry_delay=0.2, **extras)
            )
        env.update(no_stop.connection_env("crew_no_stop", crew="no_stop"))
        review = None
        if AIRFLOW_V_3_1_PLUS:  # human-in-the-loop: Airflow 3.1+
            shutil.copy(REVIEW_DAG_FILE, dags / REVIEW_DAG_FILE.name)
            # Agent steps of 1 s, as in tests/e2e/test_human_review_e2e.py (which says why).
            review = stack.enter_context(LocalCrewService("review", speed=0.05))
            env.update(review.connection_env("crew_review"))
            env["AIRFLOW_CONN_CREW_REVIEW_WEBHOOK"] = json.dumps(
                {
                    "conn_type": "http",
                    "host": review.webhooks.url_for("human"),
                    "password": HUMAN_WEBHOOK_TOKEN,
                }
            )
        dag_ids = DAG_IDS + ([REVIEW_DAG] if review else [])
        with running_stack(tmp / "home", dags, env, dag_ids, env_for=receiver_connection) as airflow:
            # A sample is named by its sender when it is read: one received before this still is.
            senders.components.update({p.pid: name for name, p in airflow.processes.items()})
            yield airflow, Services(main, no_stop, review)


# -- the scenario -----------------------------------------------------------------------------------


def wait_deferred(airflow: AirflowStack, dag_id: str, run_id: str) -> dict[str, Any]:
    return wait_for(
        lambda: deferred_in_triggerer(airflow, dag_id, run_id),
        timeout=120,
        what=f"{dag_id}'s kickoff to defer to the triggerer",
    )


def arm(service: Any, crew_name: str, **rule: Any) -> dict[str, Any]:
    """Arm one fault on ``crew_name``'s requests now; returns the rule (its ``id``)."""
    return service.faults.add({**rule, "crew": crew_name})  # type: ignore[no-any-return]


def fired(service: Any, rule_id: int) -> int:
    return next(int(r["fired"]) for r in service.faults.rules if r["id"] == rule_id)


def run_scenario(airflow: AirflowStack, services: Services, *, broken: bool = True) -> Scenario:
    """Every DAG run at once; the user's and the gateway's parts played as each run gets there.

    :param broken: Run the ``metrics_broken_*`` DAGs too (for a stack with :data:`REFUSING_HANDLER`).
    """
    main = services.main
    first = ["metrics_deferred", "metrics_marked_failed"]  # the runs the test acts on, first
    order = first + [d for d in DAG_IDS if d not in first and (broken or "broken" not in d)]
    review = None
    with ThreadPoolExecutor(1) as reviewer:
        if services.review:  # the reviewer answers in a thread of its own, each round at once
            review_run = airflow.trigger(REVIEW_DAG, conf={"topic": "data contracts"})
            review = reviewer.submit(answer_review, own_session(airflow), review_run)
        runs = {dag_id: Run(dag_id, airflow.trigger(dag_id)) for dag_id in order}
        armed, tab_read = play_user_and_gateway(airflow, main, runs)
        for run in runs.values():
            finish(airflow, run)
        reviewed = review.result() if review else None
    executions: dict[str, list[dict[str, Any]]] = {}
    for service in (main, services.no_stop):
        for execution in sorted(service.executions.values(), key=lambda e: e["created_at"]):
            executions.setdefault(execution["crew"], []).append(execution)
    return Scenario(
        runs=runs,
        executions=executions,
        fired={what: fired(service, rule_id) for what, (service, rule_id) in armed.items()},
        tab_read=tab_read,
        review=reviewed,
    )


def own_session(airflow: AirflowStack) -> AirflowStack:
    """The stack with a REST session of its own, logged in as the same user: for another thread."""
    other = copy.copy(airflow)
    other.session = requests.Session()
    other.session.headers.update(airflow.session.headers)
    return other


def play_user_and_gateway(
    airflow: AirflowStack, main: Any, runs: dict[str, Run]
) -> tuple[dict[str, tuple[Any, int]], dict[str, Any] | None]:
    """A gateway's 502 on the deferred wait's trigger; the Crew tab's read and the user's mark of the
    marked_failed kickoff. Returns the faults armed and the Crew tab's answer."""
    armed: dict[str, tuple[Any, int]] = {}

    # A gateway answers 502 to a status read of the deferred wait's trigger: retried in the triggerer.
    wait_deferred(airflow, "metrics_deferred", runs["metrics_deferred"].run_id)
    armed["deferred: 502 on a trigger's status read"] = (
        main,
        arm(main, "deferred", kind="gateway", endpoint="status", status=502)["id"],
    )

    # The Crew tab reads the deferred task's execution in the api-server and meets a 429 (retried
    # there); then the user marks the task failed and its trigger stops the execution.
    marked = runs["metrics_marked_failed"]
    wait_deferred(airflow, marked.dag_id, marked.run_id)
    wait_for(
        lambda: [e for e in main.executions.values() if e["crew"] == "marked_failed" and e["polls"] >= 1],
        timeout=30,
        what="the marked_failed kickoff's read before it deferred",
    )
    tab_read = None
    if AIRFLOW_V_3_1_PLUS:  # the Crew tab: Airflow 3.1+
        rule = arm(main, "marked_failed", kind="error", endpoint="status", status=429, retry_after=1)
        armed["marked_failed: 429 on the Crew tab's read"] = (main, rule["id"])
        url = f"{airflow.base_url}/crew-ui/api/task-instance/{marked.dag_id}/{quote(marked.run_id)}/{TASK}/-1"
        answer = airflow.session.get(url, timeout=60)
        assert answer.status_code == 200, answer.text
        tab_read = answer.json()
    airflow.api(
        "PATCH",
        f"/dags/{marked.dag_id}/dagRuns/{marked.run_id}/taskInstances/{TASK}",
        json={"new_state": "failed"},
        idempotent=True,
    )
    # A forged event delivery (not the run's token): the api-server refuses it (crew.events.rejected).
    forged = requests.post(
        f"{airflow.base_url}/crew-webhooks/v1/events/{marked.dag_id}/{quote(marked.run_id, safe='')}/{TASK}/-1",
        json={"events": []},
        headers={"Authorization": "Bearer forged"},
        timeout=30,
    )
    assert forged.status_code == 401, forged.text
    return armed, tab_read


def finish(airflow: AirflowStack, run: Run) -> None:
    """Wait for ``run`` to end and fill in what it did."""

    def ended() -> dict[str, Any] | None:
        airflow.check_alive()
        found = airflow.api("GET", f"/dags/{run.dag_id}/dagRuns/{run.run_id}")
        return found if found["state"] in ("success", "failed") else None

    found = wait_for(ended, timeout=RUN_TIMEOUT, what=f"{run.dag_id} {run.run_id} to end", interval=1)
    run.state = found["state"]
    run.started, run.ended = epoch(found["start_date"]), epoch(found["end_date"])
    run.tasks = airflow.task_states(run.dag_id, run.run_id)
    if run.tasks.get(TASK) == "success":
        run.kickoff_id = airflow.xcom(run.dag_id, run.run_id, TASK)
        run.usage = airflow.xcom(run.dag_id, run.run_id, TASK, key="usage")


# -- the review: "Request changes" in round 1, "Approve" in round 2, each at once -------------------

ANSWERS = {1: ("Request changes", FEEDBACK), 2: ("Approve", "Good now, publish it.")}
WAITING_STATE = "awaiting_input" if AIRFLOW_V_3_3_PLUS else "deferred"


def answer_review(airflow: AirflowStack, run_id: str) -> dict[str, Any]:
    """Answer each round the moment it can be answered, until the run ends (as
    tests/e2e/test_human_review_e2e.py does); returns the run and when each round was answered."""
    answered: dict[int, float] = {}
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        airflow.check_alive()
        run = airflow.api("GET", f"/dags/{REVIEW_DAG}/dagRuns/{run_id}")
        if run["state"] in ("success", "failed"):
            states = airflow.task_states(REVIEW_DAG, run_id)
            return {"run_id": run_id, "run": run, "answered": answered, "tasks": states}
        assert time.monotonic() < deadline, f"review run {run_id}: {airflow.task_states(REVIEW_DAG, run_id)}"
        states = airflow.task_states(REVIEW_DAG, run_id)
        for number, (option, feedback) in ANSWERS.items():
            task_id = f"review.round_{number}"
            if number in answered or states.get(task_id) not in (WAITING_STATE, "deferred"):
                continue
            path = airflow.hitl_path(REVIEW_DAG, run_id, task_id)
            detail = airflow.api("GET", path, expect=(200, 404))
            if not detail or detail.get("response_received"):
                continue
            airflow.api(
                "PATCH", path, json={"chosen_options": [option], "params_input": {"feedback": feedback}}
            )
            answered[number] = time.time()
        time.sleep(0.5)  # the next look at the run; every wait above has its own deadline
