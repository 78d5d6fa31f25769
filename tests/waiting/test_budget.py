"""The budget's rules without I/O: caps checked at DAG parse, cost from prices, a read over a cap ends the
wait ``over_budget``, and the reads paced by the spending rate (waiting/budget.py)."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.status import CrewStatus
from airflow_provider_crew.waiting.budget import (
    Budget,
    Prices,
    SpendingPace,
    budget_for,
    cap_value,
    checked_cap,
    priced,
)
from airflow_provider_crew.waiting.rules import Outcome, Poller, WaitFor, WaitResult

LOG = logging.getLogger("test_budget")


def config(**fields):
    defaults = dict(
        max_usage=None, max_cost=None, input_price=None, output_price=None, cached_input_price=None
    )
    return SimpleNamespace(**{**defaults, **fields})


def poller(kickoff_id: str, budget: Budget | None, **clock) -> Poller:
    """A wait polled every 2 s growing to 15, without a deadline, under ``budget``."""
    return Poller(
        kickoff_id,
        wait_for=WaitFor.COMPLETION,
        deadline=math.inf,
        not_found_deadline=0,
        poll_interval=2,
        max_poll_interval=15,
        log=LOG,
        budget=budget,
        **clock,
    )


def running(total: int, state: str = "RUNNING") -> CrewStatus:
    prompt = total * 3 // 4
    return CrewStatus.from_response(
        {
            "state": state,
            "usage_metrics": {
                "total_tokens": total,
                "prompt_tokens": prompt,
                "completion_tokens": total - prompt,
            },
        }
    )


@pytest.mark.parametrize(
    ("value", "parameter", "expected"),
    [
        (None, "max_tokens", None),
        (5000, "max_tokens", 5000),
        ("5000", "max_tokens", 5000),
        ("", "max_cost", None),
        (2.5, "max_cost", 2.5),
        ("0.75", "max_cost", 0.75),
        ("1e3", "max_tokens", 1000),
    ],
)
def test_a_cap_reads_as_a_positive_number(value, parameter, expected):
    assert cap_value(value, parameter) == expected


@pytest.mark.parametrize(
    ("value", "parameter"),
    [
        (0, "max_tokens"),
        (-1, "max_cost"),
        (2.5, "max_tokens"),
        ("lots", "max_tokens"),
        (True, "max_tokens"),
        (math.inf, "max_cost"),
        ("nan", "max_cost"),
        ([100], "max_tokens"),
    ],
)
def test_a_bad_cap_fails_naming_the_parameter_and_the_fix(value, parameter):
    with pytest.raises(CrewConfigurationError) as caught:
        checked_cap(value, parameter)
    message = str(caught.value)
    assert message.startswith(f"{parameter} must be a positive "), message
    assert f"got {value!r}" in message and "leave it None to take the crew connection's default" in message


def test_a_templated_cap_waits_for_task_start():
    assert checked_cap("{{ params.cap }}", "max_tokens") == "{{ params.cap }}"
    with pytest.raises(CrewConfigurationError, match="max_tokens must be a positive whole number"):
        cap_value("twelve", "max_tokens")  # as it rendered


def test_the_tasks_cap_overrides_the_connections_and_a_sensor_takes_no_default():
    conn = config(max_usage=10_000, max_cost=None)
    assert budget_for(None, None, config=conn, conn_id="c") == Budget(max_tokens=10_000)
    assert budget_for(500, None, config=conn, conn_id="c") == Budget(max_tokens=500)
    assert budget_for(None, None, config=conn, conn_id="c", defaults=False) is None
    assert budget_for(None, None, config=config(), conn_id="c") is None


def test_max_cost_without_prices_fails_naming_both():
    with pytest.raises(CrewConfigurationError) as caught:
        budget_for(None, 2.0, config=config(), conn_id="crew_default")
    message = str(caught.value)
    assert "max_cost=2 needs prices" in message
    assert (
        "connection 'crew_default'" in message and "'input_price'" in message and "'output_price'" in message
    )
    with pytest.raises(CrewConfigurationError, match="needs prices"):
        budget_for(None, None, config=config(max_cost=2.0), conn_id="crew_default")  # the connection's


def test_prices_price_the_usage_and_leave_it_alone_without_them():
    usage = {"input_tokens": 1_000_000, "output_tokens": 200_000, "cache_read_tokens": 400_000, "cost": None}
    assert priced(usage, None) is usage
    assert Prices(input=3.0, output=15.0).cost(usage) == pytest.approx(3.0 + 3.0)
    # Cached prompt tokens are part of the prompt tokens: at their own price when it is set.
    assert Prices(input=3.0, output=15.0, cached_input=0.3).cost(usage) == pytest.approx(1.8 + 0.12 + 3.0)
    assert priced(usage, Prices(input=3.0, output=15.0))["cost"] == pytest.approx(6.0)
    assert Prices(input=3.0).cost(usage) is None  # completion tokens with no price: unknown, not 0
    assert Prices(input=3.0, output=15.0).cost({"input_tokens": None, "output_tokens": None}) is None


def test_a_read_over_the_cap_ends_the_wait_over_budget_and_a_finished_one_ends_as_usual():
    budget = Budget(max_tokens=3000)
    capped = poller("k-1", budget)
    assert isinstance(capped.step(running(2999)), float)
    ended = capped.step(running(3000))
    assert isinstance(ended, WaitResult) and ended.outcome is Outcome.OVER_BUDGET
    assert ended.message == "Crew execution k-1 reached its budget: it spent 3000 tokens (max_tokens=3000)"
    done = poller("k-2", budget)
    assert done.step(running(9000, "SUCCESS")).outcome is Outcome.SUCCEEDED  # past stopping: its output


def test_a_cost_cap_is_read_from_the_prices():
    budget = Budget(max_cost=0.01, prices=Prices(input=3.0, output=15.0))
    # 3,000 tokens: 2,250 prompt at 3, 750 completion at 15 per million = 0.018
    assert budget.over(running(3000).usage) and budget.cap_reached(running(3000).usage) == "cost"
    assert not budget.over(running(1000).usage)
    assert "cost 0.018" in budget.over_message("k", running(3000).usage)


def test_the_reads_are_paced_by_the_spending_rate():
    pace = SpendingPace()
    assert pace.next_read(100.0, 0.0) == 1.0  # no rate yet: read again within a second
    # 20% of the cap a second: the cap in 4 s, more than the allowance (max(1 s, 10% / 20% = 0.5 s)):
    # halfway there; then 2 s from it, still more: halfway; then 1 s, within it: half of it past the cap.
    assert pace.next_read(101.0, 0.2) == pytest.approx(2.0)
    assert pace.next_read(103.0, 0.6) == pytest.approx(1.0)
    assert pace.next_read(104.0, 0.8) == pytest.approx(1.0 + 0.5)
    # Slow (1% a second): the allowance is 10% of the cap, 10 s of spending; 5 s from the cap, read 5 s
    # after it.
    slow = SpendingPace(at=0.0, used=0.85)
    assert slow.next_read(10.0, 0.95) == pytest.approx(5.0 + 5.0)
    assert SpendingPace(at=0.0, used=0.5).next_read(10.0, 0.5) is None  # spends nothing: own schedule
    assert SpendingPace().next_read(1.0, None) is None  # no usage reported


def test_a_wait_without_a_cap_keeps_its_schedule_and_one_with_a_cap_reads_before_the_cap():
    now = [0.0]

    def clock():
        return now[0]

    free, capped = poller("k", None, clock=clock), poller("k", Budget(max_tokens=5000), clock=clock)
    assert free.pace is None
    delays = []
    for second in (0, 1, 2):
        now[0] = float(second)
        delays.append((free.step(running(2000 * second)), capped.step(running(2000 * second))))
    assert all(1.6 <= free_delay <= 15 for free_delay, _ in delays)  # 2 s, grown with jitter
    # Capped: 1 s to learn the rate; at 2,000/s the cap (5,000) is 1.5 s after 2,000: halfway; 0.5 s
    # after 4,000, within the allowance (1 s): 0.5 s past it. Sooner than the grown interval (1.6 s+).
    assert delays[0][1] == 1.0 and delays[1][1] == pytest.approx(0.75) and delays[2][1] == pytest.approx(1.0)


def test_a_service_without_usage_is_said_once(caplog):
    unenforceable = poller("k-3", Budget(max_tokens=10))
    with caplog.at_level(logging.WARNING, logger="test_budget"):
        for _ in range(3):
            unenforceable.step(CrewStatus.from_response({"state": "RUNNING"}))
    said = [r.getMessage() for r in caplog.records if "cannot be enforced" in r.getMessage()]
    assert said == [
        "Crew execution k-3: its status reports no usage, so its budget (max_tokens=10) cannot be enforced; "
        "the wait goes on without it (docs/howto/budget.rst, 'A service that reports no usage')."
    ]


def test_the_budget_and_its_pace_travel_as_json_primitives():
    budget = Budget(max_tokens=5, max_cost=1.5, prices=Prices(input=1.0, output=2.0))
    assert Budget.from_kwargs(budget.to_kwargs()) == budget
    pace = SpendingPace(at=1.0, used=0.5)
    pace.next_read(2.0, 0.6)
    again = SpendingPace.from_kwargs(pace.to_kwargs())
    assert (again.at, again.used, again.due) == (pace.at, pace.used, pace.due)
    assert Budget.from_kwargs(None) is None


def test_a_capped_wait_knows_when_its_cap_is_nearer_than_a_deferral():
    pace = SpendingPace()
    assert pace.cap_within(10, learning=True) is False  # no read yet: nothing to learn from
    pace.next_read(0.0, 0.0)
    assert pace.cap_within(10, learning=True) and not pace.cap_within(10, learning=False)  # no rate yet
    pace.next_read(1.0, 0.05)  # 5% a second: the cap in 19 s
    assert not pace.cap_within(10, learning=True)
    pace.next_read(2.0, 0.2)  # 15% a second: the cap in 5.3 s
    assert pace.cap_within(10, learning=False)
    pace.next_read(3.0, 0.2)  # nothing spent since: no rate
    assert pace.cap_within(10, learning=True) and not pace.cap_within(10, learning=False)
