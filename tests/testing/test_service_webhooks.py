"""Webhooks as real HTTP: payloads, auth headers, meta echo, the carry-over rule, delivery failures."""

from __future__ import annotations

import base64
import socket

import pytest

from airflow_provider_crew.testing import LocalCrewService

from ._helpers import Api, all_hooks, human_hook

pytestmark = pytest.mark.crew_service("research", "review", speed=10)

META = {"run": "r-1", "nested": {"n": 1}}
RESEARCH_INPUTS = {"topic": "AI", "current_year": "2025"}
STEP_KEYS = {"prompt", "thought", "tool", "tool_input", "result", "kickoff_id", "meta"}
TASK_KEYS = {
    "description",
    "name",
    "expected_output",
    "summary",
    "agent",
    "output",
    "output_json",
    "kickoff_id",
    "meta",
}
CREW_KEYS = {"kickoff_id", "result", "result_json", "token_usage", "meta"}
HUMAN_KEYS = {"execution_id", "task_id", "task_output", "kickoff_id", "meta"}


def _review(crew_service: LocalCrewService) -> Api:
    return Api(crew_service, base_url=crew_service.url_for_crew("review"))


def test_task_step_and_crew_notifications(api: Api, crew_service: LocalCrewService) -> None:
    hooks = crew_service.webhooks
    kickoff_id = api.kickoff(RESEARCH_INPUTS, meta=META, **all_hooks(crew_service))
    crew_note = hooks.wait_for_count("crew", 1)[0]
    received = hooks.received
    # delivered in the order things happened: 2 steps then the task, twice, then the crew
    assert [r.kind for r in received] == ["step", "step", "task", "step", "step", "task", "crew"]
    for record in received:
        assert record.method == "POST"
        assert record.path == f"/hooks/{record.kind}"
        assert record.headers["content-type"] == "application/json"
        assert "authorization" not in record.headers
        assert record.json["kickoff_id"] == kickoff_id
        assert record.json["meta"] == META

    steps = [r.json for r in received if r.kind == "step"]
    assert all(set(s) == STEP_KEYS for s in steps)
    assert steps[0]["tool"] == "search" and steps[1]["tool"] == "scrape_website"
    assert "AI" in steps[0]["prompt"]

    tasks = [r.json for r in received if r.kind == "task"]
    assert all(set(t) == TASK_KEYS for t in tasks)
    assert [(t["name"], t["agent"]) for t in tasks] == [
        ("research_task", "Senior Researcher"),
        ("reporting_task", "Reporting Analyst"),
    ]
    assert tasks[0]["description"].startswith("Conduct a thorough research about AI.")
    assert (
        tasks[0]["expected_output"]
        == "A list with 10 bullet points of the most relevant information about AI"
    )
    assert tasks[0]["output_json"] is None
    assert tasks[0]["summary"] == tasks[0]["output"].splitlines()[0]

    assert set(crew_note.json) == CREW_KEYS
    status = api.status(kickoff_id)
    assert crew_note.json["result"] == status["result"] == tasks[1]["output"]
    assert crew_note.json["result_json"] is None
    usage = status["usage_metrics"]
    assert crew_note.json["token_usage"] == {
        k: usage[k] for k in ("total_tokens", "prompt_tokens", "completion_tokens")
    }

    deliveries = crew_service.wait_for_deliveries(lambda ds: ds if len(ds) == 7 else None)
    assert all(d["ok"] and d["status"] == 200 for d in deliveries)
    assert [d["kind"] for d in deliveries] == [r.kind for r in received]


@pytest.mark.parametrize("strategy", ["bearer", "basic"])
def test_human_input_notification_auth_and_payload(crew_service: LocalCrewService, strategy: str) -> None:
    review = _review(crew_service)
    kickoff_id = review.kickoff(
        {"topic": "AI"}, meta=META, humanInputWebhook=human_hook(crew_service, strategy)
    )
    note = crew_service.webhooks.wait_for_count("human", 1)[0]
    assert note.method == "POST" and note.path == "/hooks/human"
    if strategy == "bearer":
        assert note.authorization == "Bearer hook-secret"
    else:
        scheme, _, encoded = (note.authorization or "").partition(" ")
        assert scheme == "Basic"
        assert base64.b64decode(encoded).decode() == "alice:s3cret"
    assert set(note.json) == HUMAN_KEYS
    assert note.json["execution_id"] == note.json["kickoff_id"] == kickoff_id
    assert note.json["meta"] == META
    status = review.status(kickoff_id)
    assert note.json["task_id"] == status["last_executed_task"]["task_id"]
    assert note.json["task_output"] == status["last_executed_task"]["output"]
    delivery = crew_service.wait_for_deliveries(lambda ds: ds)[0]
    assert (delivery["kind"], delivery["auth"], delivery["ok"]) == ("human_input", strategy, True)


def test_human_input_without_authentication_sends_no_header(crew_service: LocalCrewService) -> None:
    review = _review(crew_service)
    review.kickoff({"topic": "AI"}, humanInputWebhook={"url": crew_service.webhooks.url_for("human")})
    note = crew_service.webhooks.wait_for_count("human", 1)[0]
    assert "authorization" not in note.headers


def test_resume_without_webhook_urls_stops_task_step_and_crew_notifications(
    crew_service: LocalCrewService,
) -> None:
    hooks = crew_service.webhooks
    review = _review(crew_service)
    kickoff_id = review.kickoff(
        {"topic": "AI"}, meta=META, humanInputWebhook=human_hook(crew_service), **all_hooks(crew_service)
    )
    note = hooks.wait_for_count("human", 1)[0]
    before = [r.kind for r in hooks.received]
    assert before == ["step", "task", "step", "step", "task", "human"]

    # reject without URLs: the retry sends no step/task notifications, but the human-input hook stays
    assert review.resume(kickoff_id, note.json["task_id"], "again", False).json()["status"] == "retrying"
    second = hooks.wait_for_count("human", 2)[1]
    assert review.resume(kickoff_id, second.json["task_id"], "ok", True).json()["status"] == "resumed"
    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    # Every notification is recorded when it is emitted, so after SUCCESS the list is final.
    kinds = [d["kind"] for d in crew_service.webhook_deliveries]
    assert kinds == ["step", "task", "step", "step", "task", "human_input", "human_input"]
    crew_service.wait_for_deliveries(lambda ds: len(ds) == 7)
    assert [r.kind for r in hooks.received] == [*before, "human"]


def test_resume_with_webhook_urls_keeps_notifications_coming(crew_service: LocalCrewService) -> None:
    hooks = crew_service.webhooks
    review = _review(crew_service)
    kickoff_id = review.kickoff(
        {"topic": "AI"}, meta=META, humanInputWebhook=human_hook(crew_service), **all_hooks(crew_service)
    )
    note = hooks.wait_for_count("human", 1)[0]
    # the addresses given in THIS resume request are the ones used from now on
    resp = review.resume(kickoff_id, note.json["task_id"], "redo", False, **all_hooks(crew_service, "-r1"))
    assert resp.json()["status"] == "retrying"
    second = hooks.wait_for_count("human", 2)[1]
    review.resume(kickoff_id, second.json["task_id"], "ok", True, **all_hooks(crew_service, "-r2"))
    hooks.wait_for_count("crew-r2", 1)
    kinds = [r.kind for r in hooks.received]
    assert kinds == [
        "step",
        "task",
        "step",
        "step",
        "task",
        "human",  # kickoff addresses
        "step-r1",
        "step-r1",
        "task-r1",
        "human",  # the retry of draft_task
        "step-r2",
        "task-r2",
        "crew-r2",  # publish_task and completion
    ]
    retried = hooks.of_kind("task-r1")[0].json
    assert retried["name"] == "draft_task" and retried["output"].endswith("feedback: redo")
    assert all(r.json["meta"] == META for r in hooks.received)
    assert crew_service.execution(kickoff_id)["webhooks"] == {
        "task": hooks.url_for("task-r2"),
        "step": hooks.url_for("step-r2"),
        "crew": hooks.url_for("crew-r2"),
    }


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_failed_deliveries_are_recorded_and_do_not_stop_the_execution(
    api: Api, crew_service: LocalCrewService
) -> None:
    hooks = crew_service.webhooks
    hooks.respond_with(500)
    dead = f"http://127.0.0.1:{_closed_port()}/hooks/task"
    kickoff_id = api.kickoff(RESEARCH_INPUTS, taskWebhookUrl=dead, crewWebhookUrl=hooks.url_for("crew"))
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
    deliveries = crew_service.wait_for_deliveries(lambda ds: ds if len(ds) == 3 else None)
    by_kind = {d["kind"]: d for d in deliveries}
    task_delivery = by_kind["task"]
    assert task_delivery["url"] == dead
    assert task_delivery["ok"] is False and task_delivery["status"] is None
    assert "Connect" in task_delivery["error"]
    assert by_kind["crew"]["ok"] is False and by_kind["crew"]["status"] == 500
    assert by_kind["crew"]["error"] == "receiver answered HTTP 500"
    assert len(hooks.of_kind("crew")) == 1
