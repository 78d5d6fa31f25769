"""Every endpoint, both token kinds, both status path styles, and every error code, over real HTTP."""

from __future__ import annotations

import json
import uuid

import pytest
import requests

from airflow_provider_crew.testing import LocalCrewService, wait_until

from ._helpers import Api, crew, task

pytestmark = pytest.mark.crew_service(speed=10)

STATUS_KEYS = {
    "kickoff_id",
    "state",
    "status",
    "result",
    "result_json",
    "progress",
    "last_step",
    "last_executed_task",
    "usage_metrics",
}
UNAUTHORIZED = {"error": "Unauthorized", "message": "Invalid or missing bearer token"}
RESEARCH_INPUTS = {"topic": "AI", "current_year": "2025"}


def test_health_answers_plain_text_healthy(api: Api) -> None:
    resp = api.get("/")
    assert resp.status_code == 200
    assert resp.text == "Healthy"
    assert resp.headers["content-type"].startswith("text/plain")


def test_inputs_lists_input_names_per_crew(api: Api, crew_service: LocalCrewService) -> None:
    assert api.get("/inputs").json() == {"inputs": ["topic", "current_year"]}
    review = api.get("/crews/review/inputs")
    assert review.status_code == 200
    assert review.json() == {"inputs": ["topic", "audience"]}


def test_kickoff_returns_uuid_and_execution_runs_to_success(api: Api, crew_service: LocalCrewService) -> None:
    resp = api.post("/kickoff", {"inputs": RESEARCH_INPUTS})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert set(resp.json()) == {"kickoff_id"}
    kickoff_id = resp.json()["kickoff_id"]
    assert str(uuid.UUID(kickoff_id)) == kickoff_id

    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    record = api.status(kickoff_id)
    assert set(record) == STATUS_KEYS  # no error key, no extra fields such as human_feedback
    assert record["kickoff_id"] == kickoff_id
    assert record["state"] == "SUCCESS"
    assert record["status"] == "Crew execution completed"
    assert record["result_json"] is None
    assert record["result"].startswith("reporting_task by Reporting Analyst (attempt 1)")
    assert "inputs: current_year=2025; topic=AI" in record["result"]
    assert record["progress"] == {"completed": 2, "total": 2, "current": None, "current_agent": None}
    assert set(record["last_step"]) == {"agent", "thought", "tool", "tool_input", "result"}
    assert record["last_step"]["agent"] == "Reporting Analyst"
    last = record["last_executed_task"]
    assert set(last) == {"task_id", "name", "agent", "output"}
    assert (last["name"], last["output"]) == ("reporting_task", record["result"])
    usage = record["usage_metrics"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert usage["successful_requests"] == 6  # 2 tasks x (2 steps + 1 answer)


@pytest.mark.crew_service(crew("slow", task("first"), task("second"), pending_seconds=60))
def test_status_is_pending_right_after_kickoff(api: Api) -> None:
    record = api.status(api.kickoff())
    assert record["state"] == "PENDING"
    assert record["result"] == "" and record["result_json"] is None
    assert record["progress"] == {"completed": 0, "total": 2, "current": None, "current_agent": None}
    assert record["last_step"] is None and record["last_executed_task"] is None


@pytest.mark.crew_service(crew("slow", task("first", step_seconds=60), task("second"), pending_seconds=0))
def test_status_while_running_names_current_task(api: Api) -> None:
    kickoff_id = api.kickoff()
    record = wait_until(lambda: (r := api.status(kickoff_id))["state"] == "RUNNING" and r)
    assert record["status"] == "Running task 1 of 2: first"
    assert record["progress"] == {
        "completed": 0,
        "total": 2,
        "current": "first",
        "current_agent": "first agent",
    }
    assert record["result"] == ""


@pytest.mark.parametrize(
    ("crew_service", "contract_code", "deployed_code"),
    [({"status_path": "contract"}, 200, 404), ({"status_path": "deployed"}, 404, 200), ({}, 200, 200)],
    indirect=["crew_service"],
    ids=["contract", "deployed", "both"],
)
def test_status_path_styles(
    api: Api, crew_service: LocalCrewService, contract_code: int, deployed_code: int
) -> None:
    kickoff_id = api.kickoff(RESEARCH_INPUTS)
    contract = api.get(f"/{kickoff_id}/status")
    deployed = api.get(f"/status/{kickoff_id}")
    assert (contract.status_code, deployed.status_code) == (contract_code, deployed_code)
    for resp in (contract, deployed):
        if resp.status_code == 200:
            assert resp.json()["kickoff_id"] == kickoff_id
        else:
            assert resp.json()["error"] == "Not Found"
    counters = crew_service.counters
    assert counters["status_paths"] == {"contract": 1, "deployed": 1}
    assert counters["requests"]["status"] == 2


def test_status_path_can_be_switched_at_run_time(api: Api, crew_service: LocalCrewService) -> None:
    kickoff_id = api.kickoff(RESEARCH_INPUTS)
    assert crew_service.configure(status_path="deployed")["status_path"] == "deployed"
    assert api.get(f"/{kickoff_id}/status").status_code == 404
    assert api.get(f"/status/{kickoff_id}").status_code == 200
    crew_service.configure(status_path="contract")
    assert api.get(f"/{kickoff_id}/status").status_code == 200
    assert api.get(f"/status/{kickoff_id}").status_code == 404


@pytest.mark.parametrize("token", ["org", "user"])
def test_both_token_kinds_work_on_every_endpoint(crew_service: LocalCrewService, token: str) -> None:
    client = Api(crew_service, token=token)
    assert client.get("/").status_code == 200
    assert client.get("/inputs").status_code == 200
    kickoff_id = client.kickoff(RESEARCH_INPUTS)
    assert client.get(f"/{kickoff_id}/status").status_code == 200
    assert client.get(f"/status/{kickoff_id}").status_code == 200
    resume = client.resume(kickoff_id, "t", "fb", True)
    assert resume.status_code == 400  # authenticated: refused only because nothing is paused
    auth = crew_service.counters["auth"]
    assert auth[token] == 6
    assert auth["org" if token == "user" else "user"] == 0
    assert crew_service.execution(kickoff_id)["token_kind"] == token


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", "Basic Y3Jldy10ZXN0LW9yZy10b2tlbjo=", "Bearer", "crew-test-org-token"],
    ids=["missing", "wrong", "basic-scheme", "empty-bearer", "no-scheme"],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/inputs"),
        ("POST", "/kickoff"),
        ("GET", "/{id}/status"),
        ("GET", "/status/{id}"),
        ("POST", "/resume"),
    ],
)
def test_missing_or_wrong_token_is_401(
    crew_service: LocalCrewService, authorization: str | None, method: str, path: str
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    url = crew_service.base_url + path.replace("{id}", str(uuid.uuid4()))
    body = {"inputs": RESEARCH_INPUTS} if path == "/kickoff" else None
    resp = requests.request(method, url, headers=headers, json=body, timeout=10)
    assert resp.status_code == 401
    assert resp.json() == UNAUTHORIZED
    assert resp.headers["www-authenticate"] == "Bearer"
    assert crew_service.executions == {}


def _bad(api: Api, path: str, data: bytes | str, content_type: str | None = "application/json") -> dict:
    headers = {"Content-Type": content_type} if content_type else {}
    resp = api.session.post(api.base_url + path, data=data, headers=headers, timeout=10)
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["error"] == "Bad Request"
    return body


@pytest.mark.parametrize("path", ["/kickoff", "/resume"])
def test_malformed_json_is_400(api: Api, path: str) -> None:
    assert "Malformed JSON" in _bad(api, path, b'{"inputs": ')["message"]
    assert "must be a JSON object" in _bad(api, path, b"[1, 2]")["message"]
    assert "Content-Type" in _bad(api, path, b"{}", content_type="text/plain")["message"]


def _hook(auth: object) -> dict:
    return {"inputs": RESEARCH_INPUTS, "humanInputWebhook": {"url": "http://h/x", "authentication": auth}}


BAD_KICKOFFS = [
    ({"inputs": "topic=AI"}, "'inputs' must be an object"),
    ({"inputs": ["AI"]}, "'inputs' must be an object"),
    ({"inputs": RESEARCH_INPUTS, "meta": "x"}, "'meta' must be an object"),
    ({"inputs": RESEARCH_INPUTS, "taskWebhookUrl": "not a url"}, "taskWebhookUrl"),
    ({"inputs": RESEARCH_INPUTS, "stepWebhookUrl": "ftp://example.com/x"}, "stepWebhookUrl"),
    ({"inputs": RESEARCH_INPUTS, "crewWebhookUrl": 42}, "crewWebhookUrl"),
    ({"inputs": RESEARCH_INPUTS, "humanInputWebhook": "http://x"}, "'humanInputWebhook' must be an object"),
    ({"inputs": RESEARCH_INPUTS, "humanInputWebhook": {"url": "nope"}}, "humanInputWebhook.url"),
    (_hook("bearer"), "'humanInputWebhook.authentication' must be an object"),
    (_hook({"strategy": "bearer"}), "strategy 'bearer' needs a non-empty 'token'"),
    (
        _hook({"strategy": "bearer", "token": "t", "username": "u", "password": "p"}),
        "takes a token, not username/password",
    ),
    (_hook({"strategy": "basic", "username": "u"}), "strategy 'basic' needs 'username' and 'password'"),
    (
        _hook({"strategy": "basic", "username": "u", "password": "p", "token": "t"}),
        "takes username/password, not a token",
    ),
    (_hook({"strategy": "oauth", "token": "t"}), "must be 'bearer' or 'basic'"),
]


@pytest.mark.parametrize(("body", "message"), BAD_KICKOFFS)
def test_wrongly_typed_kickoff_fields_are_400(
    api: Api, crew_service: LocalCrewService, body: dict, message: str
) -> None:
    resp = api.post("/kickoff", body)
    assert resp.status_code == 400
    assert resp.json()["error"] == "Bad Request"
    assert message in resp.json()["message"]
    assert crew_service.executions == {}


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        ({"inputs": {"topic": "AI"}}, ["current_year"]),
        ({"inputs": {}}, ["topic", "current_year"]),
        ({}, ["topic", "current_year"]),
        ({"inputs": {"topic": None, "current_year": "2025"}}, ["topic"]),
    ],
)
def test_missing_inputs_are_422(
    api: Api, crew_service: LocalCrewService, body: dict, missing: list[str]
) -> None:
    resp = api.post("/kickoff", body)
    assert resp.status_code == 422
    assert resp.json() == {
        "error": "Validation Error",
        "message": "Missing required inputs",
        "details": {"missing_inputs": missing},
    }
    assert crew_service.executions == {}


def test_optional_input_takes_its_default(api: Api, crew_service: LocalCrewService) -> None:
    resp = api.post("/crews/review/kickoff", {"inputs": {"topic": "AI"}})
    assert resp.status_code == 200
    snapshot = crew_service.wait_for_state(resp.json()["kickoff_id"], "SUCCESS")
    assert snapshot["inputs"] == {"topic": "AI", "audience": "general readers"}
    assert "audience=general readers" in snapshot["result"]


def test_unknown_execution_route_and_crew_are_404(api: Api) -> None:
    unknown = str(uuid.uuid4())
    for path in (f"/{unknown}/status", f"/status/{unknown}"):
        resp = api.get(path)
        assert resp.status_code == 404
        assert resp.json() == {"error": "Not Found", "message": f"Execution {unknown} not found"}
    resp = api.get("/no/such/route")
    assert resp.status_code == 404 and resp.json()["error"] == "Not Found"
    resp = api.get("/crews/nope/inputs")
    assert resp.status_code == 404 and "Unknown crew" in resp.json()["message"]


def test_wrong_method_is_405_with_allow(api: Api) -> None:
    resp = api.get("/kickoff")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "POST"
    assert api.post("/inputs", {}).status_code == 405


def test_internal_error_is_500_json_and_service_keeps_serving(
    api: Api, crew_service: LocalCrewService
) -> None:
    kickoff_id = api.kickoff(RESEARCH_INPUTS)
    engine = crew_service.app.engine
    original = engine.poll

    def broken(kid: str) -> bytes:
        raise RuntimeError("status store unavailable")

    engine.poll = broken  # type: ignore[method-assign]
    try:
        resp = api.get(f"/{kickoff_id}/status")
    finally:
        engine.poll = original  # type: ignore[method-assign]
    assert resp.status_code == 500
    assert resp.json() == {
        "error": "Internal Server Error",
        "message": "RuntimeError: status store unavailable",
    }
    assert api.get(f"/{kickoff_id}/status").status_code == 200
    assert crew_service.counters["responses"]["status"] == {"500": 1, "200": 1}


def test_each_crew_is_served_under_its_prefix(api: Api, crew_service: LocalCrewService) -> None:
    prefixed = Api(crew_service, base_url=crew_service.url_for_crew("structured"))
    kickoff_id = prefixed.kickoff({"company": "ACME"})
    snapshot = crew_service.wait_for_state(kickoff_id, "SUCCESS")
    assert snapshot["crew"] == "structured"
    assert prefixed.status(kickoff_id)["result_json"]["company"] == "ACME"
    # the root crew is also reachable by name
    root = Api(crew_service, base_url=crew_service.url_for_crew("research"))
    assert root.get("/inputs").json() == {"inputs": ["topic", "current_year"]}
    by_crew = crew_service.counters["by_crew"]
    assert by_crew["structured"]["kickoff"] == 1
    assert "kickoff" not in by_crew.get("research", {})


def test_head_and_json_content_type_details(api: Api) -> None:
    kickoff_id = api.kickoff(RESEARCH_INPUTS)
    resp = api.get(f"/{kickoff_id}/status")
    assert resp.headers["content-type"] == "application/json"
    assert int(resp.headers["content-length"]) == len(resp.content)
    assert json.loads(resp.content)["kickoff_id"] == kickoff_id
