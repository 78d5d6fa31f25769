"""Proof on a real stack: crew metrics reach a plain StatsD server from every process that emits them.

Real api-server, scheduler (LocalExecutor), dag-processor and triggerer, one stack for the module
(stack.py), with ``[metrics] statsd_on`` pointed at a UDP listener in the test (receivers.py). Every
DAG of dags/crew_metrics.py runs at once, and on Airflow 3.1+ a review of two rounds: a blocking kickoff
that meets a 429 and a gateway's 502 on a status read, a deferred kickoff its trigger ends, a kickoff
whose POST a gateway answers 502 (an unknown outcome), stops by a wait's time-out and by a user's mark,
an execution left running on purpose and one whose service has no ``/stop``, a Crew tab read in the
api-server, and two DAGs whose crew metrics a misconfigured metrics setup refuses.

Plain StatsD has no tags: the state, the reason and the answer reach it in the dotted names
(expected.py). Each sample names the component whose process tree sent it, so a metric the triggerer
or the api-server emits is proved to arrive from there. First, the listener is shown to receive what
Airflow itself sends, so that a crew metric missing is the provider's, not the harness's.

On this machine (2 shared cores) the module takes about 2 minutes on Airflow 3.3.2, 1.5 on 3.0.6.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS

from ..e2e.airflow_stack import epoch
from .expected import LAG_SLACK_MS, documented_metrics, legacy, tagged
from .receivers import Senders, StatsdListener
from .stack import REFUSING_HANDLER, REVIEW_DAG, TASK, Scenario, metrics_stack, run_scenario

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

WORKER = "scheduler"  # the LocalExecutor's task processes are children of the scheduler's


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Scenario, StatsdListener]]:
    if importlib.util.find_spec("statsd") is None:
        pytest.fail("Airflow's StatsD client needs the 'statsd' package: pip install -e '.[dev]'")
    senders = Senders()
    listener = StatsdListener(senders)
    try:
        with metrics_stack(tmp_path_factory.mktemp("statsd"), listener.env(**REFUSING_HANDLER), senders) as (
            airflow,
            services,
        ):
            started = time.monotonic()
            scenario = run_scenario(airflow, services)
            took = time.monotonic() - started
            print(f"\nmetrics (StatsD): the DAG runs took {took:.0f} s\n{scenario.summary()}")
            yield airflow, scenario, listener
    finally:
        listener.close()


def one_value(listener: StatsdListener, name: str) -> tuple[float, str | None]:
    """The one sample of ``name`` (a timer of one wait): its value and the component that sent it."""
    samples = listener.wait_for(lambda: listener.samples(name), timeout=15, what=name)
    assert len(samples) == 1, samples
    return samples[0].value, samples[0].component


def count(listener: StatsdListener, name: str, expected: float) -> set[str | None]:
    """Assert that counter ``name`` totals ``expected`` (waiting for it first); return its senders."""
    if expected:
        listener.wait_for_total(name, expected, timeout=15)
    assert listener.total(name) == expected, (name, listener.samples(name))
    return {s.component for s in listener.samples(name)}


def execution(scenario: Scenario, crew: str) -> dict[str, Any]:
    (found,) = scenario.executions[crew]  # one execution per DAG run: nothing started twice
    return found


# -- the harness: what Airflow itself sends arrives, from each component -------------------------


def test_the_listener_receives_what_airflow_sends_from_each_component(run):
    _, _, listener = run
    # The scheduler's timer of each DAG run's duration.
    duration = listener.wait_for(
        lambda: listener.samples("airflow.dagrun.duration.success.metrics_blocking"),
        timeout=15,
        what="Airflow's dagrun.duration",
    )
    assert {s.component for s in duration} == {"scheduler"}
    assert all(s.kind == "ms" and s.value > 0 for s in duration), duration
    # The triggerer's gauge of its running triggers (a deferred kickoff was one).
    running = listener.samples("airflow.triggers.running")
    assert running and {s.component for s in running} == {"triggerer"}, running
    assert max(s.value for s in running) >= 1
    if AIRFLOW_V_3_3_PLUS:  # the task runner's own ti.finish (the SDK's metrics client)
        finish = listener.samples("airflow.ti.finish.metrics_blocking.kickoff.success")
        assert [s.component for s in finish] == [WORKER], finish
    assert not listener.errors, listener.errors[:5]


# -- a blocking kickoff: everything from its worker -------------------------------------------------


def test_a_blocking_kickoff_sends_its_execution_from_the_worker(run):
    _, scenario, listener = run
    blocking = scenario.runs["metrics_blocking"]
    assert blocking.state == "success", blocking
    names = {"dag_id": "metrics_blocking", "task_id": TASK}
    assert count(listener, legacy("crew.execution.started", **names), 1) == {WORKER}
    assert count(listener, legacy("crew.execution.ended", **names, state="succeeded"), 1) == {WORKER}
    assert blocking.usage and blocking.usage["total_tokens"] > 0, blocking.usage
    count(listener, legacy("crew.execution.tokens", **names), blocking.usage["total_tokens"])

    crew = execution(scenario, "blocking")
    duration, sender = one_value(listener, legacy("crew.execution.duration", **names))
    assert sender == WORKER
    crew_ms = (crew["finished_at"] - crew["created_at"]) * 1000
    assert crew_ms - 50 <= duration <= blocking.wall_ms, (duration, crew_ms, blocking.wall_ms)
    reads = listener.wait_for_total(legacy("crew.execution.status_reads", **names), 1)
    assert reads <= crew["polls"], (reads, crew["polls"])  # the reads it counted reached the service
    lag, sender = one_value(listener, legacy("crew.wait.end_lag", **names))
    assert sender == WORKER and 0 <= lag <= duration + LAG_SLACK_MS, (lag, duration)
    # Tagged names arrive too (tags dropped by plain StatsD).
    for metric in ("crew.execution.started", "crew.execution.ended", "crew.execution.duration"):
        assert listener.samples(tagged(metric)), metric


# -- a deferred kickoff its trigger ends: the end comes from the triggerer --------------------------


def test_a_deferred_kickoff_ended_by_its_trigger_sends_its_end_from_the_triggerer(run):
    airflow, scenario, listener = run
    deferred = scenario.runs["metrics_deferred"]
    assert deferred.state == "success", deferred
    log = airflow.task_log(deferred.dag_id, deferred.run_id, TASK)
    names = {"dag_id": "metrics_deferred", "task_id": TASK}
    # Started where the kickoff's POST was answered (the worker, before it deferred).
    assert count(listener, legacy("crew.execution.started", **names), 1) == {WORKER}
    ended = count(listener, legacy("crew.execution.ended", **names, state="succeeded"), 1)
    assert ended == {"triggerer"}, f"ended sent by {ended}; the task's log:\n{log[-4000:]}"
    assert deferred.usage and deferred.usage["total_tokens"] > 0, deferred.usage
    tokens = count(listener, legacy("crew.execution.tokens", **names), deferred.usage["total_tokens"])
    assert tokens == {"triggerer"}

    crew = execution(scenario, "deferred")
    duration, sender = one_value(listener, legacy("crew.execution.duration", **names))
    crew_ms = (crew["finished_at"] - crew["created_at"]) * 1000
    assert sender == "triggerer" and crew_ms - 50 <= duration <= deferred.wall_ms, (duration, crew_ms)
    # Each stretch of the wait counts its reads where it ran: the worker's read before it deferred,
    # the trigger's polls in the triggerer.
    reads = listener.wait_for_total(legacy("crew.execution.status_reads", **names), 2)
    assert reads <= crew["polls"], (reads, crew["polls"])
    readers = {s.component for s in listener.samples(legacy("crew.execution.status_reads", **names))}
    assert "triggerer" in readers and readers <= {WORKER, "triggerer"}, readers
    lag, sender = one_value(listener, legacy("crew.wait.end_lag", **names))
    assert sender == "triggerer" and 0 <= lag <= duration + LAG_SLACK_MS, (lag, duration)


# -- the answers that made a request wait and retry, from wherever the client ran ------------------


def test_retried_requests_are_counted_by_outcome_where_the_client_ran(run):
    _, scenario, listener = run
    assert scenario.fired == {
        "deferred: 502 on a trigger's status read": 1,
        **({"marked_failed: 429 on the Crew tab's read": 1} if AIRFLOW_V_3_1_PLUS else {}),
    }, scenario.fired
    # busy: the blocking kickoff's 429 (worker) and, on 3.1+, the Crew tab's read (api-server).
    busy = listener.wait_for_total(
        legacy("crew.request.retried", outcome="busy"), 2 if AIRFLOW_V_3_1_PLUS else 1
    )
    # gateway: a 502 on the blocking wait's status read (worker) and on the trigger's (triggerer).
    gateway = listener.wait_for_total(legacy("crew.request.retried", outcome="gateway"), 2)
    assert busy >= 1 and gateway >= 2
    senders = {s.component for s in listener.samples(legacy("crew.request.retried", outcome="gateway"))}
    assert senders == {WORKER, "triggerer"}, senders
    senders = {s.component for s in listener.samples(legacy("crew.request.retried", outcome="busy"))}
    assert senders == ({WORKER, "api-server"} if AIRFLOW_V_3_1_PLUS else {WORKER}), senders
    if AIRFLOW_V_3_1_PLUS:
        assert scenario.tab_read and scenario.tab_read["source"] == "service", scenario.tab_read
    assert listener.total(tagged("crew.request.retried")) >= busy + gateway


# -- the alerts: a paid POST whose outcome is unknown, executions left running --------------------


def test_a_gateways_502_on_a_kickoff_counts_an_unknown_outcome_and_an_execution_left_running(run):
    _, scenario, listener = run
    gateway = scenario.runs["metrics_gateway"]
    assert gateway.state == "failed" and gateway.tasks == {TASK: "failed"}, gateway
    assert execution(scenario, "gateway")["state"] == "RUNNING"  # the POST reached it: it runs on
    names = {"dag_id": "metrics_gateway", "task_id": TASK}
    assert count(listener, legacy("crew.paid_post.unknown_outcome", **names, request="kickoff"), 1) == {
        WORKER
    }
    assert count(listener, legacy("crew.execution.left_running", **names), 1) == {WORKER}
    count(listener, legacy("crew.execution.started", **names), 0)  # no kickoff id came back


def test_stops_are_counted_by_reason_and_answer_and_what_runs_on_is_an_alert(run):
    _, scenario, listener = run
    for dag_id in ("metrics_timeout", "metrics_keep", "metrics_no_stop", "metrics_marked_failed"):
        assert scenario.runs[dag_id].tasks == {TASK: "failed"}, scenario.runs[dag_id]
    assert execution(scenario, "timeout")["state"] == "REVOKED"
    assert execution(scenario, "marked_failed")["state"] == "REVOKED"
    assert execution(scenario, "keep")["state"] == execution(scenario, "no_stop")["state"] == "RUNNING"

    # The wait's time-out in the worker; the user's mark in the triggerer (its trigger is cancelled).
    assert count(listener, legacy("crew.stop", reason="timeout", answer="stopped"), 1) == {WORKER}
    marked = count(listener, legacy("crew.stop", reason="marked_failed", answer="stopped"), 1)
    assert marked == {"triggerer"}, marked
    # A service without POST /stop: the stop is sent, the execution runs on.
    assert count(listener, legacy("crew.stop", reason="timeout", answer="no_stop_endpoint"), 1) == {WORKER}
    for dag_id in ("metrics_keep", "metrics_no_stop"):
        left = legacy("crew.execution.left_running", dag_id=dag_id, task_id=TASK)
        assert count(listener, left, 1) == {WORKER}
    # Stopped executions are not left running.
    for dag_id in ("metrics_timeout", "metrics_marked_failed"):
        assert not listener.samples(legacy("crew.execution.left_running", dag_id=dag_id, task_id=TASK))


# -- a review of two rounds ------------------------------------------------------------------------


@pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="human-in-the-loop review needs Airflow 3.1+")
def test_review_rounds_are_counted_by_answer_with_the_time_a_person_took(run):
    _, scenario, listener = run
    review = scenario.review
    assert review and review["run"]["state"] == "success", review
    wall_ms = (epoch(review["run"]["end_date"]) - epoch(review["run"]["start_date"])) * 1000
    for number, answer in ((1, "feedback"), (2, "approved")):
        names = {"dag_id": REVIEW_DAG, "task_id": f"review.round_{number}"}  # review__round_N on the wire
        count(listener, legacy("crew.review.round", **names, answer=answer), 1)
        took, _ = one_value(listener, legacy("crew.review.response_time", **names))
        assert 0 <= took <= wall_ms, (number, took, wall_ms)
    assert review["tasks"]["review.round_3"] == "skipped"  # nothing left to review: no round counted
    assert not [n for n in listener.names("airflow.crew.review.") if "review__round_3" in n]


# -- a metrics setup that raises never fails a task or a trigger ------------------------------------


def test_a_metrics_setup_that_raises_fails_no_task_and_no_trigger(run):
    """``[metrics] stat_name_handler`` raises for these DAGs' crew metrics, in the worker and the
    triggerer alike (airflow_path/refusing_stat_names.py); each run still succeeds, ended where it
    would have been."""
    airflow, scenario, listener = run
    for dag_id in ("metrics_broken_blocking", "metrics_broken_deferred"):
        broken = scenario.runs[dag_id]
        assert broken.state == "success" and broken.tasks == {TASK: "success"}, (
            broken,
            airflow.task_log(dag_id, broken.run_id, TASK)[-4000:],
        )
        assert broken.usage and broken.usage["total_tokens"] > 0
        assert not [n for n in listener.names("airflow.crew.") if dag_id in n]  # all refused
    airflow.check_alive()  # the triggerer lives on


# -- the documented table, whole -------------------------------------------------------------------


def test_every_documented_metric_arrived(run):
    _, _, listener = run
    documented = documented_metrics()
    received = set(listener.names("airflow.crew."))
    missing = [m for m in documented if tagged(m) not in received]
    assert not missing, f"documented but never received: {missing}; received: {sorted(received)}"
