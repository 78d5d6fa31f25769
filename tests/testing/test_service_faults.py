"""Every fault knob, through the Python handle and the HTTP control API, and its counters."""

from __future__ import annotations

import gzip
import http.client
import json
import time
from urllib.parse import urlsplit

import pytest
import requests

from airflow_provider_crew.testing import FaultRule, LocalCrewService, RemoteCrewService
from airflow_provider_crew.testing.cli import build_parser, faults_from_args
from airflow_provider_crew.testing.handle import ControlAPIError

from ._helpers import Api, crew, task

pytestmark = pytest.mark.crew_service("research", "review", speed=10)

INPUTS = {"topic": "AI", "current_year": "2025"}


def test_latency_delays_matching_requests(api: Api, crew_service: LocalCrewService) -> None:
    rule = crew_service.faults.latency(0.3, endpoint="inputs")
    started = time.monotonic()
    assert api.get("/inputs").status_code == 200
    assert time.monotonic() - started >= 0.3
    assert api.get("/").status_code == 200  # other endpoints untouched
    assert crew_service.faults.counts == {"latency": 1}
    assert crew_service.faults.rules[0]["fired"] == 1 and rule["count"] is None


def test_slow_first_call_delays_only_the_first_request(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.slow_first(0.3)
    started = time.monotonic()
    assert api.get("/").status_code == 200
    assert time.monotonic() - started >= 0.3
    assert api.get("/").status_code == 200
    assert crew_service.faults.counts == {"slow_first": 1}
    assert crew_service.faults.rules[0]["remaining"] == 0


@pytest.mark.parametrize("status", [429, 503])
def test_error_responses_with_retry_after_then_recovery(
    api: Api, crew_service: LocalCrewService, status: int
) -> None:
    crew_service.faults.error(status, count=2, endpoint="kickoff", retry_after=2)
    for _ in range(2):
        resp = api.post("/kickoff", {"inputs": INPUTS})
        assert resp.status_code == status
        assert resp.headers["retry-after"] == "2"
        body = resp.json()
        assert body["error"] == ("Too Many Requests" if status == 429 else "Service Unavailable")
        assert "retry after 2 s" in body["message"]
    kickoff_id = api.kickoff(INPUTS)
    assert list(crew_service.executions) == [kickoff_id]  # the refused kickoffs started nothing
    counters = crew_service.counters
    assert counters["requests"]["kickoff"] == 3
    assert counters["responses"]["kickoff"] == {str(status): 2, "200": 1}
    assert counters["faults"] == {f"error_{status}": 2}


def test_error_faults_answer_before_authentication(crew_service: LocalCrewService) -> None:
    crew_service.faults.unavailable(count=1, retry_after=0.5)
    resp = requests.get(crew_service.base_url + "/inputs", timeout=10)  # no token at all
    assert resp.status_code == 503
    assert resp.headers["retry-after"] == "0.5"  # fractions only when a test asks for them
    assert requests.get(crew_service.base_url + "/inputs", timeout=10).status_code == 401


def test_status_404_on_first_polls_of_each_new_execution(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.status_404(polls=2)
    for _ in range(2):
        kickoff_id = api.kickoff(INPUTS)
        first, second = api.get(f"/{kickoff_id}/status"), api.get(f"/status/{kickoff_id}")
        assert (first.status_code, second.status_code) == (404, 404)
        assert first.json() == {"error": "Not Found", "message": f"Execution {kickoff_id} not found"}
        assert api.get(f"/{kickoff_id}/status").status_code == 200
    assert crew_service.faults.counts == {"status_404": 4}
    assert crew_service.counters["responses"]["status"] == {"404": 4, "200": 2}


def test_drop_before_resets_without_acting(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.drop_before("kickoff")
    with pytest.raises(requests.ConnectionError):
        api.post("/kickoff", {"inputs": INPUTS})
    assert crew_service.executions == {}
    counters = crew_service.counters
    assert counters["requests"]["kickoff"] == 1
    assert counters["responses"]["kickoff"] == {"dropped": 1}
    assert counters["faults"] == {"drop_before": 1}
    api.kickoff(INPUTS)  # once only
    assert len(crew_service.executions) == 1


def test_drop_after_acts_then_resets(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.drop_after("kickoff")
    with pytest.raises(requests.ConnectionError):
        api.post("/kickoff", {"inputs": INPUTS})
    # the client saw no answer, yet exactly one execution was started and runs to the end
    executions = crew_service.executions
    assert len(executions) == 1
    (kickoff_id,) = executions
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
    counters = crew_service.counters
    assert counters["requests"]["kickoff"] == 1
    assert counters["faults"] == {"drop_after": 1}


def test_drop_after_on_resume_applies_the_feedback(crew_service: LocalCrewService) -> None:
    review = Api(crew_service, base_url=crew_service.url_for_crew("review"))
    kickoff_id = review.kickoff(
        {"topic": "AI"}, humanInputWebhook={"url": crew_service.webhooks.url_for("h")}
    )
    note = crew_service.webhooks.wait_for_count("h", 1)[0].json
    crew_service.faults.drop_after("resume")
    with pytest.raises(requests.ConnectionError):
        review.resume(kickoff_id, note["task_id"], "approved", True)
    assert crew_service.wait_for_state(kickoff_id)["feedback"][0]["feedback"] == "approved"


def test_html_500(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.html_500(count=1, endpoint="status")
    kickoff_id = api.kickoff(INPUTS)
    resp = api.get(f"/{kickoff_id}/status")
    assert resp.status_code == 500
    assert resp.headers["content-type"].startswith("text/html")
    assert resp.text.startswith("<!DOCTYPE html>")
    assert api.get(f"/{kickoff_id}/status").status_code == 200
    assert crew_service.faults.counts == {"html_500": 1}


# -- a gateway's own answers (Envoy, Istio, cloud load balancers): text/plain, no Retry-After

ENVOY_RESET = "upstream connect error or disconnect/reset before headers. reset reason: "


def assert_gateway_answer(resp: requests.Response, status: int, text: str) -> None:
    assert resp.status_code == status
    assert resp.headers["content-type"] == "text/plain"
    assert "retry-after" not in resp.headers
    assert resp.headers["server"] == "envoy"
    assert resp.text == text


def test_gateway_503_after_passing_on_starts_exactly_one_execution(
    api: Api, crew_service: LocalCrewService
) -> None:
    rule = crew_service.faults.gateway("kickoff")
    assert (rule["kind"], rule["status"], rule["after"], rule["retry_after"]) == ("gateway", 503, True, None)

    resp = api.post("/kickoff", {"inputs": INPUTS})

    assert_gateway_answer(resp, 503, ENVOY_RESET + "connection termination")
    (kickoff_id,) = crew_service.executions  # the client saw a 503, yet the execution started
    assert crew_service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
    counters = crew_service.counters
    assert counters["requests"]["kickoff"] == 1
    assert counters["responses"]["kickoff"] == {"503": 1}
    assert counters["faults"] == {"gateway_503": 1}
    api.kickoff(INPUTS)  # once only
    assert len(crew_service.executions) == 2


def test_gateway_503_without_passing_on_starts_nothing(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.gateway("kickoff", count=2, after=False)

    for _ in range(2):
        assert_gateway_answer(api.post("/kickoff", {"inputs": INPUTS}), 503, "no healthy upstream")

    assert crew_service.executions == {}
    assert crew_service.faults.counts == {"gateway_503": 2}
    assert crew_service.faults.rules[0]["remaining"] == 0
    api.kickoff(INPUTS)
    assert len(crew_service.executions) == 1
    assert crew_service.counters["responses"]["kickoff"] == {"503": 2, "200": 1}


def test_gateway_counts_increment_on_every_firing(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.gateway("kickoff", count=None)
    crew_service.faults.gateway("inputs", count=None, after=False)

    for expected in (1, 2, 3):
        assert api.post("/kickoff", {"inputs": INPUTS}).status_code == 503
        assert api.get("/inputs").status_code == 503
        assert crew_service.faults.counts == {"gateway_503": 2 * expected}
    assert len(crew_service.executions) == 3  # only the rule that passes requests on acted
    assert [r["fired"] for r in crew_service.faults.rules] == [3, 3]


@pytest.mark.parametrize(
    ("status", "after", "text"),
    [
        (502, True, ENVOY_RESET + "protocol error"),
        (504, True, "upstream request timeout"),
        (502, False, ENVOY_RESET + "connection failure"),
        (504, False, ENVOY_RESET + "connection timeout"),
    ],
)
def test_gateway_502_and_504_act_only_after_passing_on(
    api: Api, crew_service: LocalCrewService, status: int, after: bool, text: str
) -> None:
    crew_service.faults.gateway("kickoff", status=status, after=after)

    assert_gateway_answer(api.post("/kickoff", {"inputs": INPUTS}), status, text)

    assert len(crew_service.executions) == (1 if after else 0)
    assert crew_service.faults.counts == {f"gateway_{status}": 1}


def test_gateway_on_resume_applies_the_feedback_once(crew_service: LocalCrewService) -> None:
    review = Api(crew_service, base_url=crew_service.url_for_crew("review"))
    kickoff_id = review.kickoff(
        {"topic": "AI"}, humanInputWebhook={"url": crew_service.webhooks.url_for("h")}
    )
    note = crew_service.webhooks.wait_for_count("h", 1)[0].json
    crew_service.faults.gateway("resume")

    resp = review.resume(kickoff_id, note["task_id"], "approved", True)

    assert_gateway_answer(resp, 503, ENVOY_RESET + "connection termination")
    feedback = crew_service.wait_for_state(kickoff_id)["feedback"]
    assert [(f["feedback"], f["is_approve"]) for f in feedback] == [("approved", True)]


def test_gateway_without_passing_on_applies_no_resume(crew_service: LocalCrewService) -> None:
    review = Api(crew_service, base_url=crew_service.url_for_crew("review"))
    kickoff_id = review.kickoff(
        {"topic": "AI"}, humanInputWebhook={"url": crew_service.webhooks.url_for("h")}
    )
    note = crew_service.webhooks.wait_for_count("h", 1)[0].json
    crew_service.faults.gateway("resume", after=False)

    assert review.resume(kickoff_id, note["task_id"], "approved", True).status_code == 503

    snapshot = crew_service.executions[kickoff_id]
    assert snapshot["state"] == "PAUSED" and snapshot["feedback"] == []


def test_gateway_faults_travel_through_the_control_api_the_cli_and_crew_files(
    api: Api, remote: RemoteCrewService
) -> None:
    added = remote.faults.gateway("kickoff", status=504)
    assert (added["kind"], added["status"], added["after"]) == ("gateway", 504, True)
    before = remote.faults.add({"kind": "gateway", "endpoint": "inputs", "after": False})
    assert before["after"] is False and before["status"] == 503
    assert api.post("/kickoff", {"inputs": INPUTS}).status_code == 504
    assert api.get("/inputs").text == "no healthy upstream"
    assert remote.faults.counts == {"gateway_504": 1, "gateway_503": 1}
    assert len(remote.executions) == 1

    args = build_parser().parse_args(
        [
            "serve",
            "--gateway-503",
            "kickoff:2",
            "--no-healthy-upstream",
            "3",
            "--fault",
            "kind=gateway,status=502,after=false,endpoint=resume",
        ]
    )
    assert [r.describe() for r in faults_from_args(args)] == [
        "gateway 503 after passing the request on x2 on kickoff",
        "gateway 503 without passing the request on x3 on all endpoints",
        "gateway 502 without passing the request on x1 on resume",
    ]
    flaky = crew("flaky", task("one"), faults=[{"kind": "gateway", "endpoint": "kickoff", "count": 1}])
    with LocalCrewService([flaky], speed=10) as service:
        resp = Api(service).post("/kickoff", {"inputs": {"topic": "x"}})
        assert resp.status_code == 503 and "retry-after" not in resp.headers
        assert len(service.executions) == 1
        assert service.faults.counts == {"gateway_503": 1}


def test_html_200_answers_a_maintenance_page_and_acts_on_nothing(
    api: Api, crew_service: LocalCrewService
) -> None:
    crew_service.faults.garbage("html_200", endpoint="kickoff")
    resp = api.post("/kickoff", {"inputs": INPUTS})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    assert resp.text.startswith("<!DOCTYPE html>")
    assert crew_service.executions == {}
    assert crew_service.faults.counts == {"html_200": 1}


def test_truncated_json_acts_then_cuts_the_answer(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.garbage("truncated_json", endpoint="kickoff")
    resp = api.post("/kickoff", {"inputs": INPUTS})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    with pytest.raises(ValueError):
        resp.json()
    assert resp.text.startswith('{"kickoff_id"')
    assert len(crew_service.executions) == 1  # the kickoff was acted on
    assert int(resp.headers["content-length"]) == len(resp.content)
    assert crew_service.faults.counts == {"truncated_json": 1}


def test_wrong_content_type_acts_and_labels_the_json_as_html(
    api: Api, crew_service: LocalCrewService
) -> None:
    kickoff_id = api.kickoff(INPUTS)
    crew_service.faults.garbage("wrong_content_type", endpoint="status")
    resp = api.get(f"/{kickoff_id}/status")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    assert "state" in resp.json()  # the body itself is the real status record
    assert api.get(f"/{kickoff_id}/status").headers["content-type"] == "application/json"
    assert crew_service.faults.counts == {"wrong_content_type": 1}


def test_unknown_state_answers_a_state_the_contract_does_not_know(
    api: Api, crew_service: LocalCrewService
) -> None:
    kickoff_id = api.kickoff(INPUTS)
    crew_service.faults.garbage("unknown_state", endpoint="status", count=2)
    for _ in range(2):
        resp = api.get(f"/{kickoff_id}/status")
        assert resp.status_code == 200 and resp.json()["state"] == "QUARANTINED"
    assert api.get(f"/{kickoff_id}/status").json()["state"] != "QUARANTINED"
    assert crew_service.faults.counts == {"unknown_state": 2}


def test_garbage_refuses_other_kinds(crew_service: LocalCrewService) -> None:
    with pytest.raises(ValueError, match="unknown garbage kind"):
        crew_service.faults.garbage("latency")


def test_garbage_kinds_travel_through_the_control_api(api: Api, remote: RemoteCrewService) -> None:
    rule = remote.faults.garbage("html_200", endpoint="inputs")
    assert rule["kind"] == "html_200"
    assert api.get("/inputs").text.startswith("<!DOCTYPE html>")
    assert remote.faults.counts == {"html_200": 1}


def test_faults_can_target_one_crew(api: Api, crew_service: LocalCrewService) -> None:
    crew_service.faults.error(503, count=None, endpoint="kickoff", crew="review")
    review = Api(crew_service, base_url=crew_service.url_for_crew("review"))
    assert review.post("/kickoff", {"inputs": {"topic": "AI"}}).status_code == 503
    assert review.post("/kickoff", {"inputs": {"topic": "AI"}}).status_code == 503  # unlimited
    api.kickoff(INPUTS)  # the root crew is not affected
    crew_service.faults.clear()
    review.kickoff({"topic": "AI"})
    assert crew_service.faults.counts == {"error_503": 2}


def test_rules_can_be_removed_one_by_one(api: Api, crew_service: LocalCrewService) -> None:
    first = crew_service.faults.rate_limit(count=5, endpoint="inputs")
    crew_service.faults.html_500(count=5, endpoint="health")
    crew_service.faults.remove(first["id"])
    assert api.get("/inputs").status_code == 200
    assert api.get("/").status_code == 500
    assert [r["kind"] for r in crew_service.faults.rules] == ["html_500"]
    with pytest.raises(KeyError):
        crew_service.faults.remove(999)


def test_faults_given_at_start_and_in_crew_files() -> None:
    flaky = crew(
        "flaky", task("one"), faults=[{"kind": "error", "status": 429, "endpoint": "kickoff", "count": 1}]
    )
    with LocalCrewService(
        ["research", flaky],
        faults=[FaultRule("html_500", "inputs", 1), {"kind": "status_404", "count": 1}],
        speed=10,
    ) as service:
        root = Api(service)
        assert root.get("/inputs").status_code == 500
        kickoff_id = root.kickoff(INPUTS)  # the crew-file fault is scoped to crew "flaky"
        assert root.get(f"/{kickoff_id}/status").status_code == 404
        assert root.get(f"/{kickoff_id}/status").status_code == 200
        flaky_api = Api(service, base_url=service.url_for_crew("flaky"))
        assert flaky_api.post("/kickoff", {"inputs": {"topic": "x"}}).status_code == 429
        flaky_api.kickoff({"topic": "x"})
        assert service.faults.counts == {"html_500": 1, "status_404": 1, "error_429": 1}
        assert {r["crew"] for r in service.faults.rules} == {None, "flaky"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "nope"}, "unknown fault kind"),
        ({"kind": "error", "endpoint": "everything"}, "unknown endpoint"),
        ({"kind": "latency"}, "latency needs seconds > 0"),
        ({"kind": "error", "status": 200}, "HTTP error code"),
        ({"kind": "status_404", "count": None}, "needs a count"),
        ({"kind": "error", "colour": "red"}, "unknown fault fields"),
        ({"endpoint": "status"}, "needs a 'kind'"),
        ({"kind": "oversized"}, "oversized needs size >= 64"),
        ({"kind": "gzip_bomb", "size": -1}, "size must be a whole number"),
        ({"kind": "trickle"}, "trickle needs seconds > 0"),
        ({"kind": "redirect"}, "redirect needs a location"),
        ({"kind": "redirect", "location": "http://h.test", "status": 300}, "redirect status must be one of"),
        ({"kind": "gateway", "status": 500}, "gateway status must be one of 502, 503, 504"),
        ({"kind": "gateway", "after": "yes"}, "after must be true or false"),
    ],
)
def test_invalid_fault_rules_are_refused(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultRule.from_dict(data)


# -- hostile answers: what a client must survive without harm to its process


MiB = 1024 * 1024


def test_oversized_answers_with_a_large_json_body_and_acts_on_nothing(
    api: Api, crew_service: LocalCrewService
) -> None:
    crew_service.faults.oversized(5 * MiB, endpoint="kickoff")

    resp = api.post("/kickoff", {"inputs": INPUTS})

    assert resp.status_code == 200
    assert resp.headers["content-length"] == str(5 * MiB) and len(resp.content) == 5 * MiB
    assert resp.json()["state"] == "SUCCESS"  # read whole, it even parses
    assert crew_service.executions == {}
    assert crew_service.faults.counts == {"oversized": 1}
    assert crew_service.counters["responses"]["kickoff"] == {"200": 1}


def test_gzip_bomb_is_small_on_the_wire_and_inflates_to_its_size(
    api: Api, crew_service: LocalCrewService
) -> None:
    crew_service.faults.gzip_bomb(64 * MiB, endpoint="inputs")

    resp = api.get("/inputs", stream=True)
    wire = resp.raw.read(decode_content=False)

    assert resp.status_code == 200 and resp.headers["content-encoding"] == "gzip"
    assert len(wire) < 64 * MiB / 500
    body = gzip.decompress(wire)
    assert len(body) == 64 * MiB and json.loads(body)["state"] == "SUCCESS"
    assert crew_service.faults.counts == {"gzip_bomb": 1}


def test_trickle_acts_then_sends_the_answer_one_byte_at_a_time(crew_service: LocalCrewService) -> None:
    crew_service.faults.trickle(0.02, endpoint="kickoff")
    url = urlsplit(crew_service.base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    body = json.dumps({"inputs": INPUTS})
    headers = {**crew_service.auth_headers(), "Content-Type": "application/json"}
    started = time.monotonic()
    connection.request("POST", "/kickoff", body=body, headers=headers)
    resp = connection.getresponse()
    pieces = []
    while piece := resp.read1(1024):
        pieces.append(piece)
    connection.close()

    answer = b"".join(pieces)
    assert json.loads(answer)["kickoff_id"] in crew_service.executions  # it acted, then trickled
    assert time.monotonic() - started >= 0.02 * (len(answer) - 1)  # one pause per byte, at least
    assert len(pieces) > 1
    assert crew_service.faults.counts == {"trickle": 1}


@pytest.mark.parametrize(
    ("status", "endpoint", "path"), [(307, "kickoff", "/kickoff"), (302, "inputs", "/inputs")]
)
def test_redirect_points_elsewhere_and_acts_on_nothing(
    api: Api, crew_service: LocalCrewService, status, endpoint, path
) -> None:
    crew_service.faults.redirect("http://elsewhere.example.test:8080/base/", status=status, endpoint=endpoint)

    resp = api.session.request(
        "POST" if endpoint == "kickoff" else "GET",
        api.base_url + path,
        json={"inputs": INPUTS},
        allow_redirects=False,
        timeout=10,
    )

    assert resp.status_code == status
    assert resp.headers["location"] == f"http://elsewhere.example.test:8080/base{path}"
    assert crew_service.executions == {}
    assert crew_service.faults.counts == {"redirect": 1}


def test_a_redirect_rule_defaults_to_307_and_new_fields_travel_through_the_control_api(
    remote: RemoteCrewService,
) -> None:
    added = remote.faults.redirect("http://other.test:1")
    assert (added["kind"], added["status"], added["location"]) == ("redirect", 307, "http://other.test:1")
    big = remote.faults.add({"kind": "gzip_bomb", "size": 1024.0, "endpoint": "status"})
    assert big["size"] == 1024  # the CLI's key=value form sends numbers as floats
    assert (
        FaultRule.from_dict({"kind": "trickle", "seconds": 0.5}).describe()
        == "trickle one byte every 0.5s x1 on all endpoints"
    )


# -- the same knobs over the HTTP control API, as a test would steer a separately running service


@pytest.fixture
def remote(crew_service: LocalCrewService) -> RemoteCrewService:
    return RemoteCrewService(crew_service.base_url, crew_service.org_token, crew_service.user_token)


def test_control_api_faults_and_counters(api: Api, remote: RemoteCrewService) -> None:
    added = remote.faults.rate_limit(count=1, endpoint="kickoff", retry_after=3)
    assert added["kind"] == "error" and added["status"] == 429 and added["id"] >= 1
    remote.faults.drop_after("status", count=1)
    remote.faults.latency(0.05, endpoint="health", count=1)
    remote.faults.slow_first(0.05, endpoint="inputs")
    remote.faults.html_500(count=1, endpoint="resume")
    remote.faults.status_404(polls=1)
    remote.faults.drop_before("health", count=1)
    assert len(remote.faults.rules) == 7

    assert api.post("/kickoff", {"inputs": INPUTS}).headers["retry-after"] == "3"
    kickoff_id = api.kickoff(INPUTS)
    with pytest.raises(requests.ConnectionError):
        api.get(f"/{kickoff_id}/status")  # the hidden-poll 404 is produced, then dropped
    assert api.get(f"/{kickoff_id}/status").status_code == 200
    with pytest.raises(requests.ConnectionError):
        api.get("/")
    assert api.get("/").status_code == 200
    assert api.get("/inputs").status_code == 200
    assert api.post("/resume", {}).status_code == 500

    counters = remote.counters
    assert counters["requests"] == {
        "health": 2,
        "inputs": 1,
        "kickoff": 2,
        "status": 2,
        "resume": 1,
        "stop": 0,
        "other": 0,
    }
    assert counters["faults"] == {
        "error_429": 1,
        "drop_after": 1,
        "latency": 1,
        "slow_first": 1,
        "html_500": 1,
        "status_404": 1,
        "drop_before": 1,
    }
    assert remote.faults.counts == counters["faults"]
    remote.faults.clear()
    assert remote.faults.rules == []


def test_control_api_executions_webhooks_config_and_reset(
    crew_service: LocalCrewService, remote: RemoteCrewService
) -> None:
    review = Api(crew_service, base_url=crew_service.url_for_crew("review"))
    hook = {"url": crew_service.webhooks.url_for("human")}
    kickoff_id = review.kickoff({"topic": "AI"}, humanInputWebhook=hook)
    note = crew_service.webhooks.wait_for_count("human", 1)[0].json
    review.resume(kickoff_id, note["task_id"], "needs a chart", False)
    crew_service.webhooks.wait_for_count("human", 2)

    snapshot = remote.execution(kickoff_id)
    assert snapshot["crew"] == "review" and snapshot["state"] == "PAUSED"
    assert [f["feedback"] for f in snapshot["feedback"]] == ["needs a chart"]
    assert snapshot["paused_task_id"] == note["task_id"]
    assert list(remote.executions) == [kickoff_id]
    with pytest.raises(KeyError):
        remote.execution("nope")

    deliveries = remote.wait_for_deliveries(lambda ds: ds if len(ds) == 2 else None)
    assert [(d["kind"], d["ok"]) for d in deliveries] == [("human_input", True)] * 2
    assert deliveries[1]["payload"]["task_output"].endswith("feedback: needs a chart")

    config = remote.configure(status_path="deployed", speed=20)
    assert config == {
        "status_path": "deployed",
        "speed": 20.0,
        "root_crew": "research",
        "crews": ["research", "review"],
        "stop_endpoint": "enabled",
    }
    crews = remote.control.call("GET", "crews")
    assert crews["root"] == "research"
    assert [c["name"] for c in crews["crews"]] == ["research", "review"]
    assert "POST /_control/reset" in remote.control.call("GET", "")["routes"]

    remote.faults.rate_limit(count=2)
    assert review.get("/").status_code == 429
    assert remote.faults.counts == {"error_429": 1}
    remote.reset()
    assert remote.executions == {}
    assert remote.webhook_deliveries == []
    assert remote.faults.rules == [] and remote.faults.counts == {}
    assert remote.counters["requests"]["kickoff"] == 0


def test_control_api_needs_the_organization_token(crew_service: LocalCrewService) -> None:
    url = crew_service.base_url + "/_control/counters"
    assert requests.get(url, timeout=10).status_code == 401
    user = requests.get(url, headers=crew_service.auth_headers("user"), timeout=10)
    assert user.status_code == 403
    assert user.json()["error"] == "Forbidden"
    assert requests.get(url, headers=crew_service.auth_headers("org"), timeout=10).status_code == 200
    # control traffic is not counted as client traffic
    assert crew_service.counters["requests"] == dict.fromkeys(
        ("health", "inputs", "kickoff", "status", "resume", "stop", "other"), 0
    )


def test_control_api_refuses_bad_input(remote: RemoteCrewService) -> None:
    with pytest.raises(ControlAPIError) as bad_rule:
        remote.faults.add({"kind": "latency", "seconds": -1})
    assert bad_rule.value.status == 400
    with pytest.raises(ControlAPIError) as bad_config:
        remote.configure(status_path="sideways")
    assert bad_config.value.status == 400
    with pytest.raises(ControlAPIError) as unknown:
        remote.control.call("GET", "nothing-here")
    assert unknown.value.status == 404
    with pytest.raises(ControlAPIError) as missing_rule:
        remote.faults.remove(12345)
    assert missing_rule.value.status == 404
