"""``POST /stop/{kickoff_id}``: the hosted service's answers, REVOKED and no further progress, and
the "absent" / "405" modes of a service without the endpoint."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from airflow_provider_crew.testing import LocalCrewService, wait_until
from airflow_provider_crew.testing.cli import build_parser
from airflow_provider_crew.testing.control import service_routes
from airflow_provider_crew.testing.faults import FaultRule

from ._helpers import Api, all_hooks, crew, human_hook, task

# Three tasks of three 50 ms steps: long enough to stop in the middle, short enough to finish fast.
STOPPABLE = crew("stoppable", task("a", steps=3), task("b", steps=3), task("c", steps=3), step_seconds=0.05)
REVIEWED = crew("reviewed", task("draft", human_input=True), task("publish"))
FAILING = crew("failing", task("boom", fails=True))
QUEUED = crew("queued", task("a"), pending_seconds=60)

pytestmark = pytest.mark.crew_service(STOPPABLE, REVIEWED, FAILING, QUEUED)


def _api(service: LocalCrewService, name: str) -> Iterator[Api]:
    client = Api(service, base_url=service.url_for_crew(name))
    yield client
    client.close()


@pytest.fixture
def reviewed(crew_service: LocalCrewService) -> Iterator[Api]:
    yield from _api(crew_service, "reviewed")


@pytest.fixture
def failing(crew_service: LocalCrewService) -> Iterator[Api]:
    yield from _api(crew_service, "failing")


@pytest.fixture
def queued(crew_service: LocalCrewService) -> Iterator[Api]:
    yield from _api(crew_service, "queued")


def _deliveries(service: LocalCrewService, kickoff_id: str) -> list[dict[str, Any]]:
    return [d for d in service.webhook_deliveries if d["kickoff_id"] == kickoff_id]


def _kinds(deliveries: list[dict[str, Any]]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for d in deliveries:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    return kinds


def test_stopping_a_running_execution_revokes_it_and_nothing_more_happens(
    api: Api, crew_service: LocalCrewService
) -> None:
    hooks = all_hooks(crew_service)
    kickoff_id = api.kickoff({"topic": "AI"}, **hooks)
    wait_until(lambda: api.status(kickoff_id)["last_step"], message="the crew never took a step")

    resp = api.post(f"/stop/{kickoff_id}")
    assert resp.status_code == 200
    assert resp.json() == {"status": "stopped", "kickoffId": kickoff_id}
    record = api.status(kickoff_id)
    assert record["state"] == "REVOKED"
    assert record["error"] == "Stopped by request"
    assert record["status"] == "Crew execution stopped"
    assert record["result"] == ""
    at_stop = crew_service.execution(kickoff_id)
    assert at_stop["finished_at"] is not None
    emitted = _deliveries(crew_service, kickoff_id)
    assert 1 <= at_stop["usage_metrics"]["successful_requests"] < 12  # 9 steps + 3 task outputs

    # A second execution of the same crew, started now, runs it whole: the stopped one had as
    # much time to move on, and must not have.
    witness = api.kickoff({"topic": "AI"}, **all_hooks(crew_service, "-witness"))
    assert crew_service.wait_for_state(witness, "SUCCESS")["progress"]["completed"] == 3
    crew_service.wait_for_deliveries(lambda done: len(done) == len(crew_service.webhook_deliveries))
    after = crew_service.execution(kickoff_id)
    for key in ("state", "status", "progress", "last_step", "last_executed_task", "usage_metrics", "error"):
        assert after[key] == at_stop[key], key
    assert api.status(kickoff_id) == record
    # Every webhook it sent was emitted before the stop: one per step and per task output, no crew one.
    sent = _deliveries(crew_service, kickoff_id)
    assert [d["id"] for d in sent] == [d["id"] for d in emitted]
    kinds = _kinds(sent)
    assert "crew" not in kinds
    assert kinds.get("step", 0) + kinds.get("task", 0) == at_stop["usage_metrics"]["successful_requests"]
    assert _kinds(_deliveries(crew_service, witness)) == {"step": 9, "task": 3, "crew": 1}

    assert crew_service.stops == [kickoff_id]
    assert crew_service.request_count("stop") == 1
    assert crew_service.counters["responses"]["stop"] == {"200": 1}


def test_stopping_a_finished_execution_answers_400_with_its_state(
    api: Api, failing: Api, crew_service: LocalCrewService
) -> None:
    done = api.kickoff()
    crew_service.wait_for_state(done, "SUCCESS")
    resp = api.post(f"/stop/{done}")
    assert resp.status_code == 400
    assert resp.json() == {"detail": "Cannot stop execution. Current state: SUCCESS"}
    assert api.status(done)["state"] == "SUCCESS"

    failed = failing.kickoff()
    crew_service.wait_for_state(failed, "FAILED")
    resp = failing.post(f"/stop/{failed}")
    assert resp.status_code == 400
    assert resp.json() == {"detail": "Cannot stop execution. Current state: FAILED"}
    assert failing.status(failed)["error"] == "Task failed"

    stopped = api.kickoff()
    assert api.post(f"/stop/{stopped}").status_code == 200
    resp = api.post(f"/stop/{stopped}")
    assert resp.status_code == 400
    assert resp.json() == {"detail": "Cannot stop execution. Current state: REVOKED"}

    assert crew_service.stops == [stopped]
    assert crew_service.counters["responses"]["stop"] == {"400": 3, "200": 1}


def test_stopping_a_paused_execution_revokes_it_and_resume_is_refused(
    reviewed: Api, crew_service: LocalCrewService
) -> None:
    kickoff_id = reviewed.kickoff(
        {"topic": "AI"}, humanInputWebhook=human_hook(crew_service), **all_hooks(crew_service)
    )
    note = crew_service.webhooks.wait_for_count("human", 1)[0].json
    assert reviewed.status(kickoff_id)["state"] == "PAUSED"

    resp = reviewed.post(f"/stop/{kickoff_id}")
    assert resp.status_code == 200
    assert resp.json() == {"status": "stopped", "kickoffId": kickoff_id}
    record = reviewed.status(kickoff_id)
    assert (record["state"], record["error"]) == ("REVOKED", "Stopped by request")
    assert crew_service.execution(kickoff_id)["paused_task_id"] is None

    resume = reviewed.resume(kickoff_id, note["task_id"], "too late", True)
    assert resume.status_code == 400
    assert "current state: REVOKED" in resume.json()["message"]
    assert reviewed.status(kickoff_id) == record
    assert "crew" not in _kinds(_deliveries(crew_service, kickoff_id))


def test_stopping_a_pending_execution_revokes_it_before_any_step(
    queued: Api, crew_service: LocalCrewService
) -> None:
    kickoff_id = queued.kickoff()
    assert queued.status(kickoff_id)["state"] == "PENDING"
    assert queued.post(f"/stop/{kickoff_id}").json() == {"status": "stopped", "kickoffId": kickoff_id}
    record = queued.status(kickoff_id)
    assert record["state"] == "REVOKED"
    assert record["progress"]["completed"] == 0
    assert record["usage_metrics"]["successful_requests"] == 0


def test_unknown_id_answers_404_as_the_status_route_does_and_unlike_an_unknown_path(api: Api) -> None:
    unknown = str(uuid.uuid4())
    resp = api.post(f"/stop/{unknown}")
    assert resp.status_code == 404
    assert resp.json() == {"error": "Not Found", "message": f"Execution {unknown} not found"}
    assert resp.json() == api.get(f"/{unknown}/status").json()
    no_route = api.post(f"/stop/{unknown}/now")
    assert no_route.status_code == 404
    assert no_route.json()["message"] == f"No route for POST /stop/{unknown}/now"


def test_stop_needs_a_token_and_post(api: Api, user_api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    url = f"{crew_service.base_url}/stop/{kickoff_id}"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
        resp = requests.post(url, headers=headers, timeout=10)
        assert resp.status_code == 401
        assert resp.json() == {"error": "Unauthorized", "message": "Invalid or missing bearer token"}
        assert resp.headers["www-authenticate"] == "Bearer"
    wrong_method = api.get(f"/stop/{kickoff_id}")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert api.status(kickoff_id)["state"] in ("PENDING", "RUNNING")
    assert crew_service.stops == []

    # Either token may stop, as for every other route; under /crews/<name> too.
    assert user_api.post(f"/crews/stoppable/stop/{kickoff_id}").status_code == 200
    assert crew_service.stops == [kickoff_id]
    assert crew_service.counters["responses"]["stop"] == {"401": 3, "405": 1, "200": 1}


def test_faults_can_target_stop(api: Api, crew_service: LocalCrewService) -> None:
    assert FaultRule("error", "stop", 1, status=503).endpoint == "stop"
    kickoff_id = api.kickoff()
    crew_service.faults.unavailable(count=1, endpoint="stop")
    assert api.post(f"/stop/{kickoff_id}").status_code == 503
    assert api.status(kickoff_id)["state"] in ("PENDING", "RUNNING")  # not acted on
    crew_service.faults.drop_after("stop")
    with pytest.raises(requests.ConnectionError):
        api.post(f"/stop/{kickoff_id}")  # acted on, then the answer is lost
    assert api.status(kickoff_id)["state"] == "REVOKED"
    assert crew_service.stops == [kickoff_id]
    assert crew_service.counters["faults"] == {"error_503": 1, "drop_after": 1}
    assert crew_service.counters["responses"]["stop"] == {"503": 1, "dropped": 1}


@pytest.mark.crew_service(STOPPABLE, stop_endpoint="absent")
def test_absent_mode_answers_as_an_unknown_path(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    resp = api.post(f"/stop/{kickoff_id}")
    assert resp.status_code == 404
    assert resp.json() == {"error": "Not Found", "message": f"No route for POST /stop/{kickoff_id}"}
    unknown_path = api.post(f"/halt/{kickoff_id}")
    assert (unknown_path.status_code, unknown_path.json()["error"]) == (404, "Not Found")
    assert requests.post(crew_service.base_url + f"/stop/{kickoff_id}", timeout=10).status_code == 401
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
    assert crew_service.request_count("stop") == 0
    assert crew_service.request_count("other") == 3
    assert crew_service.stops == []
    assert "POST /stop/{kickoff_id}" not in api.get("/_control").json()["service_routes"]


@pytest.mark.crew_service(STOPPABLE, stop_endpoint="405")
def test_405_mode_refuses_the_method(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    for resp in (api.post(f"/stop/{kickoff_id}"), api.get(f"/stop/{kickoff_id}")):
        assert resp.status_code == 405
        assert resp.json()["error"] == "Method Not Allowed"
        assert resp.headers["allow"] == ""  # the resource allows no method
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
    assert crew_service.counters["responses"]["stop"] == {"405": 2}
    assert crew_service.stops == []


def test_the_mode_can_change_at_run_time(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    assert crew_service.configure(stop_endpoint="absent")["stop_endpoint"] == "absent"
    assert api.post(f"/stop/{kickoff_id}").status_code == 404
    control = api.post("/_control/config", {"stop_endpoint": "405"})
    assert control.json()["stop_endpoint"] == "405"
    assert api.post(f"/stop/{kickoff_id}").status_code == 405
    assert api.post("/_control/config", {"stop_endpoint": "maybe"}).status_code == 400
    crew_service.configure(stop_endpoint="enabled")
    assert api.post(f"/stop/{kickoff_id}").status_code == 200
    assert "POST /stop/{kickoff_id}" in api.get("/_control").json()["service_routes"]


def test_options_are_checked_and_listed() -> None:
    with pytest.raises(ValueError, match="stop_endpoint must be one of enabled, absent, 405"):
        LocalCrewService(stop_endpoint="off")
    assert build_parser().parse_args(["serve"]).stop_endpoint == "enabled"
    assert build_parser().parse_args(["serve", "--no-stop-endpoint"]).stop_endpoint == "absent"
    assert build_parser().parse_args(["serve", "--stop-endpoint", "405"]).stop_endpoint == "405"
    assert service_routes("contract", "405") == [
        "GET /",
        "GET /inputs",
        "POST /kickoff",
        "GET /{kickoff_id}/status",
        "POST /resume",
    ]


def test_a_subprocess_service_without_the_endpoint() -> None:
    from airflow_provider_crew.testing import CrewServiceProcess

    with CrewServiceProcess(["research"], stop_endpoint="absent") as service:
        assert "--stop-endpoint" in service.command
        wait_until(lambda: any("stop: absent" in line for line in service.output))  # banner line
        assert service.configure()["stop_endpoint"] == "absent"
        url = f"{service.base_url}/stop/{uuid.uuid4()}"
        resp = requests.post(url, headers=service.auth_headers(), timeout=10)
        assert (resp.status_code, resp.json()["message"]) == (
            404,
            f"No route for POST {url[len(service.base_url) :]}",
        )
        assert service.request_count("other") == 1 and service.stops == []
