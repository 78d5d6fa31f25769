"""``tokens_per_second`` (tokens spent continuously while RUNNING) and ``endless`` tasks (a crew
that runs until stopped): what the token-budget feature of the provider polls for and stops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_crew.testing import CrewDefinitionError, LocalCrewService, load_crew, wait_until

from ._helpers import Api, crew, human_hook, task

RATE = 1000
# Spends from the start; its only step is a minute away, so between reads only the spend moves.
SPENDING = crew("spending", task("work", endless=True, step_seconds=60), tokens_per_second=RATE)
# Endless at a quick pace: steps (and step tokens) keep coming until stopped.
ENDLESS = crew("endless", task("loop", endless=True, step_seconds=0.02), tokens_per_second=RATE)
# A review in the middle: 2 steps of 0.1 s before each pause, so a retry runs >= 0.2 s.
REVIEWED = crew(
    "reviewed",
    task("draft", human_input=True, steps=2, step_seconds=0.1),
    task("publish", steps=1, step_seconds=0.1),
    tokens_per_second=RATE,
)
# Same, but pausing with nobody told (no humanInputWebhook at kickoff).
SILENT = crew(
    "silent",
    task("draft", human_input=True),
    task("publish"),
    tokens_per_second=RATE,
    pause_without_webhook=True,
)
# Ends on its own after >= 0.3 s of running.
FINITE = crew("finite", task("a", steps=3, step_seconds=0.1), tokens_per_second=RATE)

pytestmark = pytest.mark.crew_service(SPENDING, ENDLESS, REVIEWED, SILENT, FINITE, "spender", speed=1)


@pytest.fixture
def crews(crew_service: LocalCrewService) -> Iterator[dict[str, Api]]:
    clients = {
        name: Api(crew_service, base_url=crew_service.url_for_crew(name))
        for name in ("endless", "reviewed", "silent", "finite", "spender")
    }
    yield clients
    for client in clients.values():
        client.close()


def _usage(api: Api, kickoff_id: str) -> dict[str, int]:
    usage = api.status(kickoff_id)["usage_metrics"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    return usage


def _timed_usage(api: Api, kickoff_id: str) -> tuple[float, dict[str, int]]:
    """The usage and the middle of the request's round trip (when the server read it, roughly)."""
    before = time.monotonic()
    usage = _usage(api, kickoff_id)
    return (before + time.monotonic()) / 2, usage


def _running(service: LocalCrewService, kickoff_id: str) -> None:
    service.wait_for_state(kickoff_id, "RUNNING")


def _paused_note(service: LocalCrewService, count: int = 1) -> dict[str, Any]:
    return service.webhooks.wait_for_count("human", count)[count - 1].json


def test_usage_grows_at_the_rate_while_running(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    _running(crew_service, kickoff_id)
    first_at, first = _timed_usage(api, kickoff_id)
    time.sleep(1.0)  # the interval measured, not a wait for a state
    second_at, second = _timed_usage(api, kickoff_id)
    expected = RATE * (second_at - first_at)
    grown = second["total_tokens"] - first["total_tokens"]
    assert 0.75 * expected <= grown <= 1.25 * expected, (grown, expected)
    # nothing but the spend moved (no step yet): split 3/4 prompt, 1/4 completion
    assert second["successful_requests"] == 0
    assert second["prompt_tokens"] == second["total_tokens"] * 3 // 4
    # reads between steps see it grow smoothly, every read a little more
    totals = []
    for _ in range(5):
        time.sleep(0.02)
        totals.append(_usage(api, kickoff_id)["total_tokens"])
    assert totals == sorted(totals) and len(set(totals)) == len(totals), totals
    snapshot = crew_service.execution(kickoff_id)
    assert snapshot["usage_metrics"]["total_tokens"] >= totals[-1]
    assert snapshot["usage_metrics"]["total_tokens"] == int(snapshot["running_seconds"] * RATE)


def test_stop_ends_the_spending(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    wait_until(lambda: _usage(api, kickoff_id)["total_tokens"] > 100, message="no tokens spent")
    assert api.post(f"/stop/{kickoff_id}").status_code == 200
    first = api.status(kickoff_id)
    assert first["state"] == "REVOKED"
    time.sleep(0.5)  # the interval over which nothing may change
    second = api.status(kickoff_id)
    assert second["usage_metrics"] == first["usage_metrics"]
    assert crew_service.execution(kickoff_id)["usage_metrics"] == first["usage_metrics"]


def test_nothing_is_spent_while_pending(crew_service: LocalCrewService) -> None:
    spec = load_crew({**SPENDING, "name": "queued", "pending_seconds": 60})
    engine = crew_service.app.engine

    async def start() -> str:
        return engine.kickoff(spec, {"topic": "AI"}).kickoff_id

    kickoff_id = crew_service.run_coroutine(start())
    time.sleep(0.3)  # the interval over which nothing may change
    snapshot = crew_service.execution(kickoff_id)
    assert snapshot["state"] == "PENDING"
    assert snapshot["usage_metrics"]["total_tokens"] == 0 and snapshot["running_seconds"] == 0


def test_endless_task_runs_until_stopped(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    endless = crews["endless"]
    kickoff_id = endless.kickoff(stepWebhookUrl=crew_service.webhooks.url_for("step"))
    # far more steps than the default 2, and still running
    record = wait_until(
        lambda: (r := endless.status(kickoff_id))["usage_metrics"]["successful_requests"] >= 10 and r,
        message="the endless task did not keep stepping",
    )
    assert record["state"] == "RUNNING"
    assert record["progress"]["current"] == "loop" and record["progress"]["completed"] == 0
    assert "/endless of loop" in record["last_step"]["thought"]

    started = time.monotonic()
    assert endless.post(f"/stop/{kickoff_id}").status_code == 200
    stopped = endless.status(kickoff_id)
    assert stopped["state"] == "REVOKED"
    assert time.monotonic() - started < 1.0
    time.sleep(0.3)  # fifteen step intervals: nothing may move
    after = endless.status(kickoff_id)
    assert after == stopped
    # one step webhook per step taken before the stop, none after
    crew_service.wait_for_deliveries(lambda done: len(done) == len(crew_service.webhook_deliveries))
    kinds = [d["kind"] for d in crew_service.webhook_deliveries]
    assert kinds == ["step"] * stopped["usage_metrics"]["successful_requests"]


def test_no_spending_while_paused_and_a_resume_continues_from_the_total(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    reviewed = crews["reviewed"]
    started = time.monotonic()
    kickoff_id = reviewed.kickoff(humanInputWebhook=human_hook(crew_service))
    note = _paused_note(crew_service)
    paused = _usage(reviewed, kickoff_id)
    assert paused["total_tokens"] >= 0.2 * RATE  # 2 steps of 0.1 s before the pause
    hold = 0.5
    time.sleep(hold)  # the interval over which nothing may change
    assert reviewed.status(kickoff_id)["state"] == "PAUSED"
    assert _usage(reviewed, kickoff_id) == paused

    # retry: the draft runs again (>= 0.2 s), pauses again; the total carries on from before
    assert reviewed.resume(kickoff_id, note["task_id"], "more", False).json()["status"] == "retrying"
    resumed = _usage(reviewed, kickoff_id)
    assert resumed["total_tokens"] >= paused["total_tokens"]
    note = _paused_note(crew_service, 2)
    second = _usage(reviewed, kickoff_id)
    assert second["total_tokens"] - paused["total_tokens"] >= 0.2 * RATE
    time.sleep(hold)
    assert _usage(reviewed, kickoff_id) == second

    assert reviewed.resume(kickoff_id, note["task_id"], "ok", True).json()["status"] == "resumed"
    snapshot = crew_service.wait_for_state(kickoff_id, "SUCCESS")
    final = snapshot["usage_metrics"]
    assert final["total_tokens"] - second["total_tokens"] >= 0.1 * RATE  # publish: 1 step of 0.1 s
    # the two paused holds were not charged: running time is at most the wall time without them
    assert snapshot["running_seconds"] <= time.monotonic() - started - 2 * hold
    time.sleep(0.2)
    assert _usage(reviewed, kickoff_id) == final  # ended: fixed


def test_pause_without_webhook_does_not_spend(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    silent = crews["silent"]
    kickoff_id = silent.kickoff()
    crew_service.wait_for_state(kickoff_id, "PAUSED")
    first = _usage(silent, kickoff_id)
    time.sleep(0.5)  # the interval over which nothing may change
    assert _usage(silent, kickoff_id) == first
    assert silent.resume(kickoff_id, "draft", "ok", True).json()["status"] == "resumed"
    final = crew_service.wait_for_state(kickoff_id, "SUCCESS")["usage_metrics"]
    assert final["total_tokens"] > first["total_tokens"]


def test_crew_webhook_token_usage_includes_the_spend(
    crews: dict[str, Api], crew_service: LocalCrewService
) -> None:
    finite = crews["finite"]
    kickoff_id = finite.kickoff(crewWebhookUrl=crew_service.webhooks.url_for("crew"))
    snapshot = crew_service.wait_for_state(kickoff_id, "SUCCESS")
    (delivery,) = crew_service.webhooks.wait_for_count("crew", 1)
    usage = snapshot["usage_metrics"]
    assert usage["total_tokens"] >= 0.3 * RATE  # 3 steps of 0.1 s
    assert delivery.json["token_usage"] == {
        "total_tokens": usage["total_tokens"],
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
    }
    assert _usage(finite, kickoff_id) == usage


def test_builtin_spender_crew(crews: dict[str, Api], crew_service: LocalCrewService) -> None:
    spec = load_crew("spender")
    assert spec.input_names == ["topic"]
    assert spec.tokens_per_second == 1000 and spec.step_seconds == 1
    assert [t.endless for t in spec.tasks] == [True]
    spender = crews["spender"]
    kickoff_id = spender.kickoff({"topic": "AI"})
    wait_until(lambda: _usage(spender, kickoff_id)["total_tokens"] >= 200, message="spender did not spend")
    assert spender.post(f"/stop/{kickoff_id}").status_code == 200
    assert spender.status(kickoff_id)["state"] == "REVOKED"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tokens_per_second": -1}, "crew c.tokens_per_second: must be a number >= 0"),
        ({"tokens_per_second": "fast"}, "crew c.tokens_per_second: must be a number >= 0"),
        ({"tokens_per_second": True}, "crew c.tokens_per_second: must be a number >= 0"),
        ({"tokens_per_second": float("inf")}, "crew c.tokens_per_second: must be a finite number"),
    ],
)
def test_tokens_per_second_is_validated(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(CrewDefinitionError) as err:
        load_crew(crew("c", task("t"), **extra))
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("task_extra", "crew_extra", "message"),
    [
        ({"endless": "yes"}, {}, "crew c.tasks[0].endless: must be true or false"),
        (
            {"endless": True, "human_input": True},
            {},
            "tasks[0].human_input: cannot be set on an endless task",
        ),
        ({"endless": True, "fails": True}, {}, "tasks[0].fails: cannot be set on an endless task"),
        ({"endless": True, "fail_when": {"topic": "x"}}, {}, "tasks[0].fail_when: cannot be set"),
        ({"endless": True}, {"step_seconds": 0}, "crew c.tasks[0].step_seconds: an endless task needs"),
        ({"endless": True, "step_seconds": 0}, {}, "crew c.tasks[0].step_seconds: an endless task needs"),
    ],
)
def test_endless_is_validated(task_extra: dict[str, Any], crew_extra: dict[str, Any], message: str) -> None:
    with pytest.raises(CrewDefinitionError) as err:
        load_crew(crew("c", task("t", **task_extra), **crew_extra))
    assert message in str(err.value)


def test_settings_default_off_and_round_trip() -> None:
    plain = load_crew(crew("c", task("t")))
    assert plain.tokens_per_second == 0 and plain.tasks[0].endless is False
    spec = load_crew(crew("c", task("t", endless=True), tokens_per_second=12.5))
    data = spec.to_dict()
    assert data["tokens_per_second"] == 12.5 and data["tasks"][0]["endless"] is True
