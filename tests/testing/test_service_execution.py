"""The execution state machine: human input (approve, reject-retry-approve), resume errors, failure."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from airflow_provider_crew.testing import LocalCrewService, load_crew

from ._helpers import Api, crew, human_hook, task

pytestmark = pytest.mark.crew_service("review", "research", speed=10)


def _paused(crew_service: LocalCrewService, count: int = 1) -> dict:
    """Wait for the ``count``-th human-input notification and return its payload."""
    return crew_service.webhooks.wait_for_count("human", count)[count - 1].json


def test_human_review_pauses_then_approval_completes(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff({"topic": "AI"}, humanInputWebhook=human_hook(crew_service))
    note = _paused(crew_service)
    record = api.status(kickoff_id)
    assert record["state"] == "PAUSED"
    assert record["status"] == "Pending Human Input"
    assert record["progress"] == {
        "completed": 1,
        "total": 3,
        "current": "draft_task",
        "current_agent": "Writer",
    }
    paused_task = record["last_executed_task"]
    assert paused_task["name"] == "draft_task"
    assert (paused_task["task_id"], paused_task["output"]) == (note["task_id"], note["task_output"])
    assert record["result"] == ""

    resp = api.resume(kickoff_id, paused_task["task_id"], "looks good", True)
    assert resp.status_code == 200
    assert resp.json()["status"] == "resumed"
    assert resp.json()["message"]
    snapshot = crew_service.wait_for_state(kickoff_id, "SUCCESS")
    assert snapshot["result"].startswith("publish_task by Editor (attempt 1)")
    assert snapshot["result"].endswith("feedback: looks good")
    assert [(f["task_name"], f["feedback"], f["is_approve"]) for f in snapshot["feedback"]] == [
        ("draft_task", "looks good", True)
    ]
    assert len(crew_service.webhooks.of_kind("human")) == 1


def test_reject_retry_approve_loop_carries_all_feedback(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff({"topic": "AI"}, humanInputWebhook=human_hook(crew_service))
    first = _paused(crew_service, 1)
    assert "(attempt 1)" in first["task_output"] and "feedback:" not in first["task_output"]

    resp = api.resume(kickoff_id, first["task_id"], "add numbers", False)
    assert resp.json()["status"] == "retrying"
    second = _paused(crew_service, 2)
    assert second["task_id"] == first["task_id"]
    assert "draft_task by Writer (attempt 2)" in second["task_output"]
    assert second["task_output"].endswith("feedback: add numbers")
    assert api.status(kickoff_id)["last_executed_task"]["output"] == second["task_output"]

    resp = api.resume(kickoff_id, second["task_id"], "cite sources", False)
    assert resp.json()["status"] == "retrying"
    third = _paused(crew_service, 3)
    assert "(attempt 3)" in third["task_output"]
    assert third["task_output"].endswith("feedback: add numbers\nfeedback: cite sources")

    assert api.resume(kickoff_id, third["task_id"], "ship it", True).json()["status"] == "resumed"
    snapshot = crew_service.wait_for_state(kickoff_id, "SUCCESS")
    # the later task saw every round of feedback, and the accepted draft is the third attempt
    assert snapshot["result"].endswith("feedback: add numbers\nfeedback: cite sources\nfeedback: ship it")
    assert "context: draft_task by Writer (attempt 3)" in snapshot["result"]
    assert snapshot["attempts"] == {"outline_task": 1, "draft_task": 3, "publish_task": 1}
    assert [(f["round"], f["attempt"], f["is_approve"]) for f in snapshot["feedback"]] == [
        (1, 1, False),
        (2, 2, False),
        (3, 3, True),
    ]
    assert [t["attempt"] for t in snapshot["tasks"]] == [1, 3, 1]


REVIEW_LAST = crew("review_last", task("write"), task("check", human_input=True))


@pytest.mark.crew_service(REVIEW_LAST)
def test_approving_the_last_task_answers_completed(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff(humanInputWebhook=human_hook(crew_service))
    note = _paused(crew_service)
    retry = api.resume(kickoff_id, note["task_id"], "again", False)
    assert retry.json()["status"] == "retrying"
    note = _paused(crew_service, 2)
    resp = api.resume(kickoff_id, note["task_id"], "final ok", True)
    assert resp.status_code == 200
    assert resp.json()["status"] == "completed"
    # completed means completed: the very next poll says so, no waiting
    record = api.status(kickoff_id)
    assert record["state"] == "SUCCESS"
    assert record["result"] == note["task_output"]
    assert record["progress"]["completed"] == 2


def test_human_input_task_without_webhook_runs_through(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff({"topic": "AI"}, taskWebhookUrl=crew_service.webhooks.url_for("task"))
    snapshot = crew_service.wait_for_state(kickoff_id)
    assert snapshot["state"] == "SUCCESS"
    assert snapshot["feedback"] == []
    assert [d["kind"] for d in crew_service.webhook_deliveries] == ["task", "task", "task"]


def test_resume_errors(api: Api, crew_service: LocalCrewService) -> None:
    unknown = str(uuid.uuid4())
    resp = api.resume(unknown, "t", "fb", True)
    assert resp.status_code == 404
    assert resp.json() == {"error": "Not Found", "message": f"Execution {unknown} not found"}

    kickoff_id = api.kickoff({"topic": "AI"}, humanInputWebhook=human_hook(crew_service))
    note = _paused(crew_service)
    wrong = api.resume(kickoff_id, "not-the-task", "fb", True)
    assert wrong.status_code == 400
    assert note["task_id"] in wrong.json()["message"] and "draft_task" in wrong.json()["message"]

    ids = {"execution_id": kickoff_id, "task_id": note["task_id"]}
    bad_bodies = [
        ({**ids, "human_feedback": "x"}, "is_approve"),
        ({**ids, "human_feedback": "x", "is_approve": "true"}, "'is_approve' must be a boolean"),
        ({**ids, "human_feedback": 3, "is_approve": True}, "'human_feedback' must be a string"),
        ({**ids, "human_feedback": "x", "is_approve": True, "taskWebhookUrl": "nope"}, "taskWebhookUrl"),
        ({}, "execution_id, task_id, human_feedback, is_approve"),
    ]
    for body, message in bad_bodies:
        resp = api.post("/resume", body)
        assert resp.status_code == 400, body
        assert message in resp.json()["message"], resp.json()
    # none of the refused requests moved the execution on
    assert api.status(kickoff_id)["state"] == "PAUSED"
    assert crew_service.execution(kickoff_id)["feedback"] == []

    # the task name is accepted as well as the id
    assert api.resume(kickoff_id, "draft_task", "fine", True).json()["status"] == "resumed"
    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    again = api.resume(kickoff_id, note["task_id"], "late", True)
    assert again.status_code == 400
    assert again.json() == {
        "error": "Bad Request",
        "message": f"Execution {kickoff_id} is not waiting for human input (current state: SUCCESS)",
    }


@pytest.mark.crew_service(crew("slow", task("first", step_seconds=60)))
def test_resume_while_running_names_the_state(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff()
    crew_service.wait_for_state(kickoff_id, "RUNNING")
    resp = api.resume(kickoff_id, "first", "fb", True)
    assert resp.status_code == 400
    assert "current state: RUNNING" in resp.json()["message"]


def test_declared_failure_ends_failed_with_error(api: Api, crew_service: LocalCrewService) -> None:
    research = Api(crew_service, base_url=crew_service.url_for_crew("research"))
    kickoff_id = research.kickoff({"topic": "fail", "current_year": "2025"})
    crew_service.wait_for_state(kickoff_id, "FAILED")
    record = research.status(kickoff_id)
    assert record["state"] == "FAILED"
    assert record["status"] == "Crew execution failed"
    assert record["error"] == "research_task failed: the search tool returned no results for 'fail'"
    assert record["result"] == "" and record["result_json"] is None
    assert record["progress"]["current"] == "research_task"
    assert record["last_executed_task"] is None
    # the same crew succeeds for other inputs
    ok = research.kickoff({"topic": "AI", "current_year": "2025"})
    assert crew_service.wait_for_state(ok)["state"] == "SUCCESS"


@pytest.mark.crew_service(
    crew("boom", task("one"), task("two", fails=True, error="disk full"), task("three"))
)
def test_failing_task_stops_the_execution(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff(crewWebhookUrl=crew_service.webhooks.url_for("crew"))
    snapshot = crew_service.wait_for_state(kickoff_id)
    assert (snapshot["state"], snapshot["error"]) == ("FAILED", "disk full")
    assert [t["name"] for t in snapshot["tasks"]] == ["one"]
    assert snapshot["last_executed_task"]["name"] == "one"
    assert crew_service.webhook_deliveries == []  # no crew notification for a failed run


@pytest.mark.crew_service("structured", speed=10)
def test_structured_crew_returns_result_json(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff({"company": "ACME"})
    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    record = api.status(kickoff_id)
    data = record["result_json"]
    assert data["company"] == "ACME"
    assert data["quarter"] == "Q1"  # optional input default
    assert data["score"] == 7 and data["feedback"] == []
    assert data["based_on"] == ["collect_task by Data Collector (attempt 1): Key figures of ACME"]
    assert json.loads(record["result"]) == data


STRUCTURED_REVIEW = crew(
    "structured_review",
    task("draft", human_input=True),
    task("final", output_template={"topic": "{topic}", "notes": "{feedback_list}", "n": "{feedback_count}"}),
)


@pytest.mark.crew_service(STRUCTURED_REVIEW)
def test_feedback_reaches_structured_output(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff({"topic": "AI"}, humanInputWebhook=human_hook(crew_service))
    api.resume(kickoff_id, _paused(crew_service)["task_id"], "shorter", False)
    api.resume(kickoff_id, _paused(crew_service, 2)["task_id"], "good", True)
    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    assert api.status(kickoff_id)["result_json"] == {"topic": "AI", "notes": ["shorter", "good"], "n": 2}


def test_outputs_are_deterministic(crew_service: LocalCrewService) -> None:
    research = Api(crew_service, base_url=crew_service.url_for_crew("research"))
    ids = [research.kickoff({"topic": "AI", "current_year": "2025"}) for _ in range(2)]
    results = [crew_service.wait_for_state(kid)["result"] for kid in ids]
    assert results[0] == results[1] != ""


@pytest.mark.crew_service(crew("many", task("a", step_seconds=0.2), task("b", step_seconds=0.2)), speed=1)
def test_thousands_of_executions_run_concurrently(crew_service: LocalCrewService) -> None:
    spec = load_crew(crew_service.app.crews["many"])
    engine = crew_service.app.engine
    count = 2000

    async def start_all() -> list[str]:
        return [engine.kickoff(spec, {"topic": str(i)}).kickoff_id for i in range(count)]

    started = time.monotonic()
    ids = crew_service.run_coroutine(start_all())

    def all_done() -> bool:
        return crew_service.call_in_loop(lambda: all(engine.executions[k].finished for k in ids))

    deadline = time.monotonic() + 30
    while not all_done():
        assert time.monotonic() < deadline, "executions did not finish"
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    states = {snap["state"] for snap in crew_service.executions.values()}
    assert states == {"SUCCESS"}
    # One after another they would need 2000 x 0.4 s; concurrently about 0.4 s plus overhead.
    assert elapsed < 20, elapsed


def test_resume_and_status_from_another_event_loop(crew_service: LocalCrewService) -> None:
    """The service runs in its own loop: an asyncio client in the test's loop works alongside."""
    import aiohttp

    async def scenario() -> str:
        headers = crew_service.auth_headers("user")
        async with aiohttp.ClientSession(crew_service.base_url, headers=headers) as session:
            async with session.post(
                "/kickoff", json={"inputs": {"topic": "AI"}, "humanInputWebhook": human_hook(crew_service)}
            ) as resp:
                kickoff_id = (await resp.json())["kickoff_id"]
            note = await asyncio.to_thread(_paused, crew_service)
            body = {
                "execution_id": kickoff_id,
                "task_id": note["task_id"],
                "human_feedback": "ok",
                "is_approve": True,
            }
            async with session.post("/resume", json=body) as resp:
                assert (await resp.json())["status"] == "resumed"
            return kickoff_id

    kickoff_id = asyncio.run(scenario())
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
