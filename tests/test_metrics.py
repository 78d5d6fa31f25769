"""Crew metrics: names, tags and values each emitter sends through Airflow's Stats, the legacy names,
and that a Stats that raises never fails the caller."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_crew import _compat, metrics
from airflow_provider_crew.hooks.client.retry import GET_RULE, POST_RULE, RETRIED_AFTER, Step
from airflow_provider_crew.hooks.stop import stop
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting import stopping
from airflow_provider_crew.waiting.end_metrics import wait_ended
from airflow_provider_crew.waiting.rules import Outcome, Poller, WaitFor, WaitResult

PACKAGE = Path(metrics.__file__).parent
TASK = {"dag_id": "billing", "task_id": "group.kickoff"}


class FakeStats:
    """Airflow's Stats as the provider calls it: ``incr(stat, count, tags=)``, ``timing(stat, dt, tags=)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float, dict[str, str]]] = []

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, str] | None = None) -> None:
        self.sent.append(("incr", stat, count, dict(tags or {})))

    def timing(self, stat: str, dt: float, *, tags: dict[str, str] | None = None) -> None:
        self.sent.append(("timing", stat, dt, dict(tags or {})))

    def named(self, prefix: str) -> list[tuple[str, str, float, dict[str, str]]]:
        return [sent for sent in self.sent if sent[1].startswith(prefix)]


@pytest.fixture
def stats(monkeypatch: pytest.MonkeyPatch) -> FakeStats:
    fake = FakeStats()
    monkeypatch.setattr(metrics, "stats_client", lambda: fake)
    return fake


def test_a_counter_goes_out_tagged_and_under_its_legacy_name_a_dot_in_a_value_written_twice_underscored(
    stats: FakeStats,
) -> None:
    metrics.count("crew.execution.ended", **TASK, state="succeeded")
    assert stats.sent == [
        ("incr", "crew.execution.ended.billing.group__kickoff.succeeded", 1, {}),
        ("incr", "crew.execution.ended", 1, {**TASK, "state": "succeeded"}),
    ]


def test_tags_not_in_the_legacy_name_stay_tags_on_it(stats: FakeStats) -> None:
    metrics.timing("crew.wait.end_lag", 1500.0, **TASK, source="wake")
    assert stats.sent[0] == ("timing", "crew.wait.end_lag.billing.group__kickoff", 1500.0, {"source": "wake"})


def test_legacy_names_on_is_read_from_airflow(stats: FakeStats, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__METRICS__LEGACY_NAMES_ON", "False")
    metrics.count("crew.stop", reason="timeout", answer="stopped")
    assert stats.sent == [("incr", "crew.stop", 1, {"reason": "timeout", "answer": "stopped"})]


def test_a_hook_outside_a_task_sends_the_tagged_name_only(stats: FakeStats) -> None:
    metrics.count("crew.execution.started", **metrics.current_task_tags())
    assert stats.sent == [("incr", "crew.execution.started", 1, {})]


def test_a_stats_that_raises_never_fails_the_caller_and_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Down:
        def incr(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("statsd host unreachable")

        timing = incr

    monkeypatch.setattr(metrics, "stats_client", Down)
    monkeypatch.setattr(metrics, "_failed_before", False)
    with caplog.at_level(logging.DEBUG, logger=metrics.__name__):
        metrics.count("crew.execution.started", **TASK)
        metrics.timing("crew.execution.duration", 10.0, **TASK, state="succeeded")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "statsd host unreachable" in warnings[0].getMessage()


def test_a_client_that_cannot_be_found_never_fails_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Any:
        raise ImportError("no metrics client")

    monkeypatch.setattr(metrics, "stats_client", broken)
    metrics.count("crew.request.retried", outcome="busy", method="GET")


def test_every_name_a_caller_emits_is_in_the_table() -> None:
    """No caller builds a name by hand: every count()/timing() call names a METRICS entry literally."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("count", "timing")
                and isinstance(getattr(node.func.value, "id", None), str)
                and node.func.value.id == "metrics"
            ):
                assert isinstance(node.args[0], ast.Constant), f"{path}: a metric name built by hand"
                names.add(node.args[0].value)
    assert names <= set(metrics.BY_NAME)
    assert names == set(metrics.BY_NAME) - {"crew.review.round", "crew.review.response_time"}


def test_the_table_is_complete_and_names_the_three_alerts() -> None:
    assert [m.name for m in metrics.METRICS if m.alert] == [
        "crew.execution.over_budget",
        "crew.paid_post.unknown_outcome",
        "crew.execution.left_running",
    ]
    for metric in metrics.METRICS:
        assert metric.type in ("counter", "timer")
        assert set(metric.legacy) <= set(metric.tags)
        assert metric.name.startswith("crew.")


def test_every_answer_a_request_is_sent_again_after_has_an_outcome_word() -> None:
    retried = {
        came for rule in (GET_RULE, POST_RULE) for came, step in rule.items() if step.name.startswith("AGAIN")
    }
    assert retried == set(RETRIED_AFTER)
    assert set(RETRIED_AFTER.values()) == {"busy", "unreachable", "gateway"}
    assert Step.AGAIN in POST_RULE.values()


# -- the wait's end --------------------------------------------------------------------------------


def _poller(clock: list[float], kicked_off_at: float | None = 1000.0, budget: Any = None) -> Poller:
    return Poller(
        "k-1",
        wait_for=WaitFor.COMPLETION,
        deadline=10_000.0,
        not_found_deadline=0.0,
        poll_interval=5,
        max_poll_interval=5,
        log=logging.getLogger("test"),
        kicked_off_at=kicked_off_at,
        budget=budget,
        clock=lambda: clock[0],
    )


def _status(state: str, **extra: Any) -> CrewStatus:
    return CrewStatus.from_response({"state": state, **extra})


def test_a_wait_that_polled_to_its_end_sends_end_tokens_duration_reads_and_a_poll_bounded_lag(
    stats: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1010.0]
    monkeypatch.setattr(metrics.time, "time", lambda: 1013.0)
    poller = _poller(clock)
    assert poller.step(_status("RUNNING")) == 5
    clock[0] = 1012.0
    usage = {"total_tokens": 30, "prompt_tokens": 20, "completion_tokens": 10}
    result = poller.step(_status("SUCCESS", result="done", usage_metrics=usage))
    assert isinstance(result, WaitResult)
    wait_ended(TASK, result, poller)
    tagged = {(kind, name, tuple(sorted(tags.items()))): value for kind, name, value, tags in stats.sent}
    task = tuple(sorted(TASK.items()))
    assert tagged[("incr", "crew.execution.status_reads", task)] == 2
    assert (
        tagged[("incr", "crew.execution.ended", tuple(sorted({**TASK, "state": "succeeded"}.items())))] == 1
    )
    for kind, value in (("total", 30), ("prompt", 20), ("completion", 10)):
        assert (
            tagged[("incr", "crew.execution.tokens", tuple(sorted({**TASK, "kind": kind}.items())))] == value
        )
    # the legacy name counts the total only
    assert [s[1:3] for s in stats.named("crew.execution.tokens.")] == [
        ("crew.execution.tokens.billing.group__kickoff", 30)
    ]
    duration = tagged[
        ("timing", "crew.execution.duration", tuple(sorted({**TASK, "state": "succeeded"}.items())))
    ]
    assert duration == pytest.approx(13_000.0)
    lag = tagged[("timing", "crew.wait.end_lag", tuple(sorted({**TASK, "source": "poll"}.items())))]
    assert lag == pytest.approx(3_000.0)  # from the read at 1010 that saw it running


def test_a_wait_over_its_budget_counts_its_cap_its_end_and_its_cost(stats: FakeStats) -> None:
    from airflow_provider_crew.waiting.budget import Budget, Prices

    budget = Budget(max_tokens=3_000, prices=Prices(input=3.0, output=15.0))
    poller = _poller([1010.0], budget=budget)
    usage = {"total_tokens": 4_000, "prompt_tokens": 3_000, "completion_tokens": 1_000}
    result = poller.step(_status("RUNNING", usage_metrics=usage))
    assert isinstance(result, WaitResult) and result.outcome is Outcome.OVER_BUDGET
    wait_ended(TASK, result, poller)
    tagged = {(name, tuple(sorted(tags.items()))): value for _, name, value, tags in stats.sent}
    assert tagged[("crew.execution.over_budget", tuple(sorted({**TASK, "cap": "tokens"}.items())))] == 1
    assert tagged[("crew.execution.ended", tuple(sorted({**TASK, "state": "over_budget"}.items())))] == 1
    # 3,000 prompt tokens at 3 and 1,000 completion tokens at 15 per million: 0.024, in millionths
    assert tagged[("crew.execution.cost", tuple(sorted(TASK.items())))] == 24_000
    assert ("incr", "crew.execution.over_budget.billing.group__kickoff", 1, {"cap": "tokens"}) in stats.sent


def test_a_trigger_whose_first_read_ends_the_wait_bounds_the_lag_by_the_tasks_read_before_deferring(
    stats: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_crew.triggers.crew import CrewStatusTrigger

    monkeypatch.setattr(metrics.time, "time", lambda: 1040.0)
    task_poller = _poller([1010.0])
    assert task_poller.step(_status("RUNNING")) == 5  # the task's read before it deferred
    trigger = CrewStatusTrigger(
        kickoff_id="k-1",
        crew_conn_id="crew_default",
        wait_for="completion",
        deadline=10_000.0,
        not_found_deadline=0.0,
        last_running_at=task_poller.last_running_at,
    )
    _, kwargs = trigger.serialize()
    poller = CrewStatusTrigger(**kwargs).poller(logging.getLogger("test"))
    result = poller.step(_status("SUCCESS", result="done"))  # the trigger's first read
    wait_ended(TASK, result, poller)  # type: ignore[arg-type]
    lag = [value for _, name, value, tags in stats.sent if name == "crew.wait.end_lag"]
    assert lag == [pytest.approx(30_000.0)]


def test_a_woken_wait_measures_its_lag_from_the_webhook(
    stats: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics.time, "time", lambda: 1020.5)
    poller = _poller([1020.0], kicked_off_at=None)
    result = poller.step(_status("FAILED", error="boom"))
    assert isinstance(result, WaitResult)
    wait_ended(TASK, result, poller, woken_at=1020.0)
    names = {
        (name, tags.get("state") or tags.get("source")): value for _, name, value, tags in stats.sent if tags
    }
    assert names[("crew.wait.end_lag", "wake")] == pytest.approx(500.0)
    assert ("crew.execution.ended", "failed") in names
    assert not stats.named("crew.execution.duration")  # no kickoff time known


def test_a_revoked_execution_ends_revoked(stats: FakeStats) -> None:
    poller = _poller([1.0])
    wait_ended(TASK, poller.step(_status("REVOKED")), poller)  # type: ignore[arg-type]
    assert ("incr", "crew.execution.ended", 1, {**TASK, "state": "revoked"}) in stats.sent


def test_a_wait_cut_short_counts_its_reads_once_and_no_end(stats: FakeStats) -> None:
    poller = _poller([1.0])
    poller.step(_status("RUNNING"))
    poller.step(_status("RUNNING"))
    wait_ended(TASK, None, poller)
    wait_ended(TASK, WaitResult(outcome=Outcome.TIMEOUT, message="late"), poller)
    assert stats.sent == [
        ("incr", "crew.execution.status_reads.billing.group__kickoff", 2, {}),
        ("incr", "crew.execution.status_reads", 2, TASK),
    ]


# -- stops ----------------------------------------------------------------------------------------


class _StopHook:
    def __init__(self, outcome: str, *, enabled: bool = True) -> None:
        from types import SimpleNamespace

        from airflow_provider_crew.models import StopOutcome, StopResult

        self.config = SimpleNamespace(base_url=f"http://crew-{outcome}", stop_executions=enabled)
        self.result = StopResult(outcome=StopOutcome(outcome))

    def stop(self, kickoff_id: str, patience: float) -> Any:
        return self.result


@pytest.mark.parametrize(
    ("outcome", "answer", "left_running"),
    [
        ("stopped", "stopped", None),
        ("already finished", "already_finished", None),
        ("unknown", "unknown", "stop_unknown"),
        ("not supported by this service", "no_stop_endpoint", "no_stop_endpoint"),
    ],
)
def test_a_stop_counts_its_reason_and_answer_and_an_execution_it_may_leave_running(
    stats: FakeStats, outcome: str, answer: str, left_running: str | None
) -> None:
    log = logging.getLogger("test")
    stop(_StopHook(outcome), "k-1", "the task was marked failed", log, patience=1, owner=TASK)
    assert ("incr", "crew.stop", 1, {"reason": "marked_failed", "answer": answer}) in stats.sent
    assert ("incr", f"crew.stop.marked_failed.{answer}", 1, {}) in stats.sent
    running = [tags.get("why") for _, name, _, tags in stats.sent if name == "crew.execution.left_running"]
    assert running == ([left_running] if left_running else [])


def test_a_connection_that_does_not_stop_leaves_the_execution_running(stats: FakeStats) -> None:
    log = logging.getLogger("test")
    stop(_StopHook("stopped", enabled=False), "k-1", stopping.WAIT_TIMEOUT, log, patience=1, owner=TASK)
    assert stats.sent == [
        ("incr", "crew.execution.left_running.billing.group__kickoff", 1, {"why": "stop_disabled"}),
        ("incr", "crew.execution.left_running", 1, {**TASK, "why": "stop_disabled"}),
    ]


@pytest.mark.parametrize(
    ("stop_crew", "owns_execution", "left_running"), [(False, True, 1), (False, False, 0)]
)
def test_a_timed_out_wait_told_not_to_stop_counts_the_execution_it_owned_as_left_running(
    stats: FakeStats, stop_crew: bool, owns_execution: bool, left_running: int
) -> None:
    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    if owns_execution:
        task: Any = CrewKickoffOperator(task_id="kickoff", inputs={}, stop_crew=stop_crew)
    else:  # a sensor only watches an execution another task started
        task = CrewStatusSensor(task_id="kickoff", kickoff_id="k-1")
    assert task._stop_cut_off_wait("k-1", stopping.WAIT_TIMEOUT) is None
    running = [tags for _, name, _, tags in stats.sent if name == "crew.execution.left_running"]
    assert running == [{**metrics.task_tags(task), "why": "stop_disabled"}] * left_running


# -- review rounds --------------------------------------------------------------------------------


def test_a_review_answer_counts_its_round_and_the_time_the_person_took(stats: FakeStats) -> None:
    given = {"is_approve": False, "timed_out": False, "responded_at": "2026-01-01T00:01:30+00:00"}
    asked_at = 1767225600.0  # 2026-01-01T00:00:00Z
    metrics.review_round(TASK, given, asked_at)
    assert ("incr", "crew.review.round", 1, {**TASK, "answer": "feedback"}) in stats.sent
    assert ("timing", "crew.review.response_time", 90_000.0, TASK) in stats.sent


def test_a_review_nobody_answered_counts_timed_out_without_a_response_time(stats: FakeStats) -> None:
    metrics.review_round(TASK, None, 1.0)
    metrics.review_round(TASK, {"is_approve": True, "timed_out": True, "responded_at": None}, 1.0)
    assert [tags["answer"] for _, name, _, tags in stats.sent if name == "crew.review.round"] == [
        "timed_out"
    ] * 2
    assert not stats.named("crew.review.response_time")


# -- which client -----------------------------------------------------------------------------------


def test_the_client_this_process_set_up_is_the_one_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """3.3's triggerer sets up only the core's client; its runner must not use the SDK's (a no-op)."""
    import importlib

    try:
        sdk = importlib.import_module(_compat._STATS_CLIENTS[0])
        core = importlib.import_module(_compat._STATS_CLIENTS[1])
    except ImportError:  # before the split: one client (airflow.stats), which sets itself up anywhere
        assert _compat.stats_client() is _compat.Stats
        return
    monkeypatch.setattr(sdk, "_factory", None)
    monkeypatch.setattr(core, "_factory", object())
    assert _compat.stats_client() is core.Stats
    monkeypatch.setattr(sdk, "_factory", object())
    assert _compat.stats_client() is sdk.Stats
    monkeypatch.setattr(sdk, "_factory", None)
    monkeypatch.setattr(core, "_factory", None)
    assert _compat.stats_client() is _compat.Stats


def test_a_stats_client_counts_as_set_up_where_each_minor_keeps_its_factory() -> None:
    """3.3 keeps the factory ``initialize`` sets in the module; 3.2 on its ``Stats`` class, which a use
    before ``initialize`` sets to ``NoStatsLogger`` (then it is not set up)."""
    import types

    class NoStatsLogger:
        pass

    def client(**module: Any) -> types.SimpleNamespace:
        return types.SimpleNamespace(**module)

    assert _compat._stats_initialized(client(_factory=object, Stats=object))  # 3.3
    assert not _compat._stats_initialized(client(_factory=None, Stats=type("Stats", (), {})))
    assert _compat._stats_initialized(client(Stats=type("Stats", (), {"factory": object})))  # 3.2
    assert not _compat._stats_initialized(client(Stats=type("Stats", (), {"factory": NoStatsLogger})))
