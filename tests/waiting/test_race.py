"""``[crew] deferral_race_hold``: ``auto`` keeps the hold where Airflow's race exists, ``off`` drops it."""

from __future__ import annotations

import time

import pytest

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.waiting import race


@pytest.fixture
def outside_dag_test(monkeypatch):
    monkeypatch.setattr(race, "running_in_process_test", lambda: False)
    monkeypatch.setattr(race, "AIRFLOW_DEFERRAL_RACE_FIXED", False)


def test_auto_is_the_default_and_keeps_the_hold(outside_dag_test, monkeypatch):
    monkeypatch.delenv("AIRFLOW__CREW__DEFERRAL_RACE_HOLD", raising=False)
    assert race.race_hold_enabled() is True
    assert race.deferral_settle_seconds() > 0
    monkeypatch.setenv("AIRFLOW__CREW__DEFERRAL_RACE_HOLD", "auto")
    assert race.deferral_settle_seconds() > 0


@pytest.mark.parametrize("value", ["off", "OFF", " off "])
def test_off_makes_the_hold_zero(outside_dag_test, monkeypatch, value):
    monkeypatch.setenv("AIRFLOW__CREW__DEFERRAL_RACE_HOLD", value)
    assert race.race_hold_enabled() is False
    assert race.deferral_settle_seconds() == 0.0


async def test_with_the_hold_off_a_trigger_holds_nothing(outside_dag_test, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CREW__DEFERRAL_RACE_HOLD", "off")
    started = time.monotonic()
    await race.hold_until(time.time() + race.deferral_settle_seconds())
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("value", ["no", "false", "0", "on"])
def test_an_unknown_value_fails_naming_the_option_and_the_values(monkeypatch, value):
    monkeypatch.setenv("AIRFLOW__CREW__DEFERRAL_RACE_HOLD", value)
    with pytest.raises(CrewConfigurationError) as error:
        race.deferral_settle_seconds()
    assert f"[crew] deferral_race_hold = {value!r} is not known" in str(error.value)
    assert "'auto', 'off'" in str(error.value)


def test_an_unknown_value_fails_at_dag_parse_before_a_kickoff_starts_anything(monkeypatch):
    from airflow_provider_crew.operators.crew import CrewKickoffOperator

    monkeypatch.setenv("AIRFLOW__CREW__DEFERRAL_RACE_HOLD", "sometimes")
    with pytest.raises(CrewConfigurationError, match=r"\[crew\] deferral_race_hold"):
        CrewKickoffOperator(task_id="k", inputs={"topic": "t"})
