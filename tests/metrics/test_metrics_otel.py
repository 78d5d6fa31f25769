"""Proof on a real stack: crew metrics reach an OpenTelemetry collector, with their attributes.

The StatsD module's stack and DAG runs (stack.py), with ``[metrics] otel_on`` exporting every second
over OTLP/HTTP to a receiver in the test (receivers.py), which decodes each
``ExportMetricsServiceRequest`` and names the component whose process sent it. Airflow's OTel logger
keeps the names as they are, with its ``otel_prefix`` (``airflow.crew.execution.ended``), and the tags
as attributes; counters are cumulative sums per process, timers histograms in milliseconds. What
arrives is compared with what the runs did, the tags that plain StatsD loses included: the state,
the outcome and method of a retry, the reason and answer of a stop, why an execution runs on.

The receiver is first shown to receive what Airflow itself exports from each component. On this
machine (2 shared cores) the module takes about 2.5 minutes on Airflow 3.3.2.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_V_3_3_PLUS

from .expected import LAG_SLACK_MS, documented_metrics, tagged
from .receivers import OtlpReceiver, Senders
from .stack import REVIEW_DAG, TASK, Scenario, metrics_stack, run_scenario

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

WORKER = "scheduler"  # the LocalExecutor's task processes are children of the scheduler's
# A sample that a process exports at its next interval (1 s here) is there within seconds.
ARRIVAL_SECONDS = 20


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Scenario, OtlpReceiver]]:
    senders = Senders()
    receiver = OtlpReceiver(senders)
    try:
        with metrics_stack(tmp_path_factory.mktemp("otel"), receiver.env(interval_ms=1000), senders) as (
            airflow,
            services,
        ):
            started = time.monotonic()
            scenario = run_scenario(airflow, services, broken=False)
            took = time.monotonic() - started
            print(f"\nmetrics (OpenTelemetry): the DAG runs took {took:.0f} s\n{scenario.summary()}")
            yield airflow, scenario, receiver
    finally:
        receiver.close()


def total(receiver: OtlpReceiver, metric: str, expected: float, **attributes: str) -> set[str | None]:
    """Assert that the tagged counter totals ``expected`` for these attributes (waiting for it first);
    return the components that sent it."""
    name = tagged(metric)
    if expected:
        receiver.wait_for_total(name, expected, timeout=ARRIVAL_SECONDS, **attributes)
    found = [(s.value, s.component, s.sender[:1]) for s in receiver.samples(name, **attributes)]
    assert receiver.total(name, **attributes) == expected, (name, attributes, found)
    return {s.component for s in receiver.samples(name, **attributes)}


def one_timing(receiver: OtlpReceiver, metric: str, **attributes: str) -> tuple[float, str | None]:
    """The one observation of a tagged timer for these attributes: its value (ms) and its sender."""
    name = tagged(metric)
    found = receiver.wait_for(
        lambda: receiver.samples(name, **attributes), timeout=ARRIVAL_SECONDS, what=f"{name} {attributes}"
    )
    assert [(s.kind, s.count) for s in found] == [("ms", 1)], found
    return found[0].value, found[0].component


def test_the_receiver_decodes_what_airflow_exports_from_each_component(run):
    _, _, receiver = run
    running = receiver.wait_for(
        lambda: receiver.samples("airflow.triggers.running"), timeout=ARRIVAL_SECONDS, what="triggers.running"
    )
    assert {s.component for s in running} == {"triggerer"}, running
    durations = receiver.samples("airflow.dagrun.duration.success", dag_id="metrics_blocking")
    assert durations and {s.component for s in durations} == {"scheduler"}, receiver.names("airflow.dagrun")
    if AIRFLOW_V_3_3_PLUS:  # the task runner's own ti.finish, with its attributes
        finish = receiver.wait_for(
            lambda: receiver.samples("airflow.ti.finish", dag_id="metrics_blocking", state="success"),
            timeout=ARRIVAL_SECONDS,
            what="ti.finish from the worker",
        )
        assert {s.component for s in finish} == {WORKER}, finish
    # A process forked while its exporter's connection was open may write into the same socket as its
    # parent: seen as a request's headers inside another request's body, a few times per hundreds of
    # exports (each answer closes the connection, which keeps the window small). A process's next
    # export carries its cumulative values again, so a crew metric is lost only with a last export.
    print(f"OTLP: {receiver.requests} exports decoded, {len(receiver.errors)} not: {receiver.errors[:3]}")
    assert receiver.requests > 50 and len(receiver.errors) <= receiver.requests // 20, receiver.errors[:5]


def test_an_executions_metrics_carry_its_dag_task_and_state(run):
    _, scenario, receiver = run
    for dag_id, ender in (("metrics_blocking", WORKER), ("metrics_deferred", "triggerer")):
        run_ = scenario.runs[dag_id]
        assert run_.state == "success" and run_.usage, run_
        task = {"dag_id": dag_id, "task_id": TASK}
        assert total(receiver, "crew.execution.started", 1, **task) == {WORKER}
        assert total(receiver, "crew.execution.ended", 1, **task, state="succeeded") == {ender}
        usage = run_.usage
        assert total(receiver, "crew.execution.tokens", usage["total_tokens"], **task, kind="total") == {
            ender
        }
        prompt = receiver.total(tagged("crew.execution.tokens"), **task, kind="prompt")
        completion = receiver.total(tagged("crew.execution.tokens"), **task, kind="completion")
        assert prompt + completion == usage["total_tokens"], (prompt, completion, usage)
        duration, sender = one_timing(receiver, "crew.execution.duration", **task, state="succeeded")
        assert sender == ender and 0 < duration <= run_.wall_ms, (dag_id, duration, run_.wall_ms)
        lag, sender = one_timing(receiver, "crew.wait.end_lag", **task, source="poll")
        # From the last read that saw the crew running, which came after the kickoff: within the duration.
        assert sender == ender and 0 <= lag <= duration + LAG_SLACK_MS, (dag_id, lag, duration)
        assert receiver.total(tagged("crew.execution.status_reads"), **task) >= 1


def test_retries_carry_their_outcome_and_method_where_the_client_ran(run):
    _, _, receiver = run
    assert total(receiver, "crew.request.retried", 1, outcome="busy", method="POST") == {WORKER}
    gateway = receiver.wait_for_total(tagged("crew.request.retried"), 2, outcome="gateway", method="GET")
    assert gateway == 2
    senders = {s.component for s in receiver.samples(tagged("crew.request.retried"), outcome="gateway")}
    assert senders == {WORKER, "triggerer"}, senders
    if AIRFLOW_V_3_1_PLUS:  # the Crew tab's read in the api-server
        assert total(receiver, "crew.request.retried", 1, outcome="busy", method="GET") == {"api-server"}


def test_stops_and_alerts_carry_their_reason_answer_and_why(run):
    _, _, receiver = run
    assert total(receiver, "crew.stop", 1, reason="timeout", answer="stopped") == {WORKER}
    assert total(receiver, "crew.stop", 1, reason="marked_failed", answer="stopped") == {"triggerer"}
    assert total(receiver, "crew.stop", 1, reason="timeout", answer="no_stop_endpoint") == {WORKER}
    gateway = {"dag_id": "metrics_gateway", "task_id": TASK}
    assert total(receiver, "crew.paid_post.unknown_outcome", 1, **gateway, request="kickoff") == {WORKER}
    for dag_id, why in (
        ("metrics_gateway", "unknown_outcome"),
        ("metrics_no_stop", "no_stop_endpoint"),
        ("metrics_keep", "stop_disabled"),
    ):
        left = total(receiver, "crew.execution.left_running", 1, dag_id=dag_id, task_id=TASK, why=why)
        assert left == {WORKER}, (dag_id, left)


@pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="human-in-the-loop review needs Airflow 3.1+")
def test_review_rounds_carry_their_task_and_answer(run):
    _, scenario, receiver = run
    assert scenario.review and scenario.review["run"]["state"] == "success", scenario.review
    for number, answer in ((1, "feedback"), (2, "approved")):
        task = {"dag_id": REVIEW_DAG, "task_id": f"review.round_{number}"}  # the dot kept in an attribute
        total(receiver, "crew.review.round", 1, **task, answer=answer)
        took, _ = one_timing(receiver, "crew.review.response_time", **task)
        assert took >= 0, took


def test_every_documented_metric_arrived(run):
    _, _, receiver = run
    received = set(receiver.names("airflow.crew."))
    missing = [m for m in documented_metrics() if tagged(m) not in received]
    assert not missing, f"documented but never received: {missing}; received: {sorted(received)}"
