"""CrewHook over mocked HTTP: the failure modes a real service cannot be made to produce on demand.

The same paths run over real HTTP against the local crew service in tests/integration.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests
import urllib3.exceptions

from airflow_provider_crew._compat import AirflowFailException
from airflow_provider_crew.connection_form import StatusPathStyle
from airflow_provider_crew.exceptions import (
    CrewAuthenticationError,
    CrewBadRequestError,
    CrewConfigurationError,
    CrewNotFoundError,
    CrewOutcomeUnknownError,
    CrewRateLimitedError,
    CrewServerError,
    CrewTransportError,
    CrewValidationError,
)
from airflow_provider_crew.hooks.client.request import LEARNED_STATUS_PATHS
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.models import ResumeStatus
from airflow_provider_crew.status import CrewState
from tests.conftest import BASE_URL, TOKEN

KICKOFF_ID = "5d3b6f1e-2f55-4b7e-9d3c-3c2f1d0e9a11"


def fake_time(hook: CrewHook) -> list[float]:
    """Make the hook's sleeps instant: each one moves its clock on instead. Returns the sleeps."""
    sleeps: list[float] = []
    now = [time.time()]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    hook._sleep = sleep
    hook._clock = lambda: now[0]
    return sleeps


@pytest.fixture
def hook(crew_conn) -> CrewHook:
    hook = CrewHook()
    hook.sleeps = fake_time(hook)  # type: ignore[attr-defined]
    return hook


def refused() -> requests.exceptions.ConnectionError:
    reason = urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: refused")  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(None, BASE_URL, reason))  # type: ignore[arg-type]


def reset_after_send() -> requests.exceptions.ConnectionError:
    return requests.exceptions.ConnectionError(
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "reset"))
    )


def test_a_dag_file_importing_the_crew_tasks_loads_no_client_models_or_connection_validation():
    """They load where a request is made (benchmarks/import_time.py measures what the tasks cost)."""
    code = (
        "import sys, airflow_provider_crew.operators.crew, airflow_provider_crew.sensors.crew; "
        "print(sorted(m for m in sys.modules if m.startswith('airflow_provider_crew.hooks.client') "
        "or m in ('airflow_provider_crew.models', 'airflow_provider_crew.connection')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


# -- requests as sent ---------------------------------------------------------------------------


def test_kickoff_sends_the_contract_body_and_headers(hook, requests_mock):
    requests_mock.post(f"{BASE_URL}/kickoff", json={"kickoff_id": KICKOFF_ID})

    kickoff_id = hook.kickoff(
        {"topic": "tides"},
        meta={"dag": "d1"},
        task_webhook_url="https://hooks.example.test/task",
        human_input_webhook={
            "url": "https://hooks.example.test/human",
            "authentication": {"strategy": "bearer", "token": "hook-token-xyz"},
        },
    )

    assert kickoff_id == KICKOFF_ID
    sent = requests_mock.last_request
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["User-Agent"].startswith("airflow-provider-crew/")
    assert sent.timeout == (10.0, 60.0)
    assert sent.json() == {
        "inputs": {"topic": "tides"},
        "meta": {"dag": "d1"},
        "taskWebhookUrl": "https://hooks.example.test/task",
        "humanInputWebhook": {
            "url": "https://hooks.example.test/human",
            "authentication": {"strategy": "bearer", "token": "hook-token-xyz"},
        },
    }


def test_resume_sends_the_contract_body(hook, requests_mock):
    requests_mock.post(f"{BASE_URL}/resume", json={"status": "retrying", "message": "Retrying task"})

    result = hook.resume(
        KICKOFF_ID, "review", "Shorter, please", False, crew_webhook_url="http://h.test/crew"
    )

    assert result.status is ResumeStatus.RETRYING
    assert requests_mock.last_request.json() == {
        "execution_id": KICKOFF_ID,
        "task_id": "review",
        "human_feedback": "Shorter, please",
        "is_approve": False,
        "crewWebhookUrl": "http://h.test/crew",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": ["topic", "current_year"]},
        {"inputs": {"topic": "string", "current_year": "string"}},
        {"inputs": [{"name": "topic", "required": True}, {"name": "current_year"}]},
        ["topic", "current_year"],
    ],
)
def test_get_inputs_normalises_every_observed_shape(hook, requests_mock, body):
    requests_mock.get(f"{BASE_URL}/inputs", json=body)
    assert hook.get_inputs() == ["topic", "current_year"]


def test_get_inputs_rejects_an_unknown_shape(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/inputs", json={"inputs": [42]})
    with pytest.raises(CrewServerError, match="GET /inputs answered 200 with a body that cannot be read"):
        hook.get_inputs()


# -- bad input, caught before any request ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"inputs": ["topic"]}, "inputs: inputs must be a mapping"),
        (
            {"inputs": {"topic": "x"}, "task_webhook_url": "ftp://h.test/x"},
            "task_webhook_url must be an absolute",
        ),
        ({"inputs": {"topic": "x"}, "crew_webhook_url": "/relative"}, "crew_webhook_url must be an absolute"),
        ({"inputs": {"topic": "x"}, "meta": "m"}, "meta must be a dict"),
    ],
)
def test_kickoff_rejects_bad_input_naming_the_field(hook, requests_mock, kwargs, expected):
    with pytest.raises(CrewConfigurationError, match=expected):
        hook.kickoff(**kwargs)
    assert requests_mock.call_count == 0


@pytest.mark.parametrize(
    "authentication",
    [
        {"strategy": "bearer"},
        {"strategy": "bearer", "token": "hook-secret-token", "username": "u"},
        {"strategy": "basic", "username": "u"},
        {"strategy": "basic", "username": "u", "password": "hook-secret-token", "token": "x"},
        {"strategy": "digest", "token": "hook-secret-token"},
    ],
)
def test_human_input_webhook_auth_must_be_bearer_token_or_basic_user_password(
    hook, requests_mock, authentication
):
    with pytest.raises(CrewConfigurationError, match=r"humanInputWebhook|human_input_webhook") as caught:
        hook.kickoff(
            {"topic": "x"}, human_input_webhook={"url": "https://h.test/h", "authentication": authentication}
        )
    assert "hook-secret-token" not in str(caught.value)
    assert requests_mock.call_count == 0


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"is_approve": "yes"}, "is_approve"),
        ({"is_approve": False, "human_feedback": "  "}, "human_feedback must say what to change"),
        ({"task_id": ""}, "task_id must be a non-empty string"),
    ],
)
def test_resume_rejects_bad_input(hook, requests_mock, kwargs, expected):
    call = {
        "execution_id": KICKOFF_ID,
        "task_id": "review",
        "human_feedback": "ok",
        "is_approve": True,
    } | kwargs
    with pytest.raises(CrewConfigurationError, match=expected):
        hook.resume(**call)
    assert requests_mock.call_count == 0


# -- error statuses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "error_type", "expected"),
    [
        (
            400,
            {"error": "Bad Request", "message": "inputs must be an object"},
            CrewBadRequestError,
            "POST /kickoff answered 400: Bad Request: inputs must be an object",
        ),
        (
            401,
            {"error": "Unauthorized", "message": "Invalid or missing bearer token"},
            CrewAuthenticationError,
            r"answered 401: Unauthorized: Invalid or missing bearer token\. The crew service rejected the "
            r"token \(401\): check 'Bearer token' \(the password\) of connection 'crew_default'",
        ),
        (404, {"error": "Not Found", "message": "no such crew"}, CrewNotFoundError, "answered 404"),
        (
            422,
            {
                "error": "Validation Error",
                "message": "Missing required inputs",
                "details": {"missing_inputs": ["topic"]},
            },
            CrewValidationError,
            r"Missing required inputs \(missing inputs: topic\)",
        ),
        (
            422,
            {"detail": [{"loc": ["body", "inputs", "current_year"], "msg": "field required"}]},
            CrewValidationError,
            r"missing inputs: current_year",
        ),
    ],
)
def test_error_statuses_raise_typed_errors_quoting_the_service(
    hook, requests_mock, status, body, error_type, expected
):
    if isinstance(body, str):
        requests_mock.post(f"{BASE_URL}/kickoff", status_code=status, text=body)
    else:
        requests_mock.post(f"{BASE_URL}/kickoff", status_code=status, json=body)

    with pytest.raises(error_type, match=expected) as caught:
        hook.kickoff({"topic": "x"})

    assert caught.value.http_status == status
    assert TOKEN not in str(caught.value)
    assert requests_mock.call_count == 1  # none of these is retried
    if error_type is CrewValidationError:
        assert caught.value.missing_inputs in (["topic"], ["current_year"])


def test_a_500_is_a_server_error_for_a_get_and_an_unknown_outcome_for_a_post(hook, requests_mock):
    page = "<html><body>Internal Server Error</body></html>"
    requests_mock.get(f"{BASE_URL}/inputs", status_code=500, text=page)
    with pytest.raises(CrewServerError, match="answered 500: no error message") as caught:
        hook.get_inputs()
    assert caught.value.http_status == 500 and page not in str(caught.value)

    # The service failed while handling a kickoff: it may have started the execution first.
    requests_mock.post(f"{BASE_URL}/kickoff", status_code=500, text=page)
    with pytest.raises(CrewOutcomeUnknownError, match="HTTP 500: the service failed while handling it"):
        hook.kickoff({"topic": "x"})
    assert requests_mock.call_count == 2  # the GET once, the POST once: neither repeated


def test_status_404_raises_not_found(hook, requests_mock, crew_conn):
    crew_conn(status_path_style="contract")
    requests_mock.get(f"{BASE_URL}/{KICKOFF_ID}/status", status_code=404, json={"error": "Not Found"})
    with pytest.raises(CrewNotFoundError):
        CrewHook().get_status(KICKOFF_ID)


# -- retry rules ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_get_retries_on_retryable_statuses_honouring_retry_after(hook, requests_mock, status):
    requests_mock.get(
        f"{BASE_URL}/inputs",
        [
            {"status_code": status, "headers": {"Retry-After": "7"}, "json": {"error": "busy"}},
            {"status_code": status, "json": {"error": "busy"}},
            {"status_code": 200, "json": {"inputs": ["topic"]}},
        ],
    )
    assert hook.get_inputs() == ["topic"]
    assert requests_mock.call_count == 3
    assert hook.sleeps[0] == 7.0  # Retry-After wins
    assert 1.0 <= hook.sleeps[1] <= 2.0  # then back-off with jitter: retry_delay * 2**1, halved at most


@pytest.mark.parametrize("status", [502, 504])
def test_get_gives_up_on_a_failing_gateway_after_the_retry_limit(crew_conn, requests_mock, status):
    crew_conn(retry_limit=2, retry_delay=0.5)
    hook = CrewHook()
    sleeps = fake_time(hook)
    requests_mock.get(f"{BASE_URL}/inputs", status_code=status, json={"message": "upstream down"})
    with pytest.raises(
        CrewServerError,
        match=rf"answered {status}: upstream down\. Gave up after 3 attempt\(s\).*retry_limit of 2 is used up",
    ):
        hook.get_inputs()
    assert requests_mock.call_count == 3
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0  # doubling, jittered


@pytest.mark.parametrize(("status", "error_type"), [(429, CrewRateLimitedError), (503, CrewServerError)])
def test_busy_answers_are_retried_for_the_retry_budget_not_a_count(
    crew_conn, requests_mock, status, error_type
):
    crew_conn(retry_limit=0, retry_delay=1, retry_budget=40)  # retry_limit does not govern 429/503
    hook = CrewHook()
    sleeps = fake_time(hook)
    requests_mock.get(
        f"{BASE_URL}/inputs", status_code=status, headers={"Retry-After": "1"}, json={"error": "busy"}
    )

    with pytest.raises(error_type, match=rf"answered {status}.*retry_budget of 40 s is used up") as caught:
        hook.get_inputs()

    assert caught.value.http_status == status
    assert requests_mock.call_count == len(sleeps) + 1 >= 5  # 1, 1-2, 2-4, 4-8, 8-16 s fit in 40 s
    assert sum(sleeps) <= 40


def test_retry_after_is_a_floor_under_a_growing_jittered_backoff(crew_conn, requests_mock):
    crew_conn(retry_delay=1)
    hook = CrewHook()
    sleeps = fake_time(hook)
    busy = {"status_code": 429, "headers": {"Retry-After": "1"}, "json": {"error": "slow down"}}
    requests_mock.get(f"{BASE_URL}/inputs", [busy] * 7 + [{"json": {"inputs": ["topic"]}}])

    assert hook.get_inputs() == ["topic"]

    assert len(sleeps) == 7
    for retry, delay in enumerate(sleeps):
        ceiling = min(60.0, 2.0**retry)
        assert max(1.0, ceiling / 2) <= delay <= max(1.0, ceiling)  # never under Retry-After, then growing
    assert sleeps[6] >= 30  # half the 60 s cap at least, not Retry-After's 1 s: many callers spread out


def test_a_long_retry_after_is_honoured_up_to_five_minutes(hook, requests_mock):
    requests_mock.get(
        f"{BASE_URL}/inputs",
        [{"status_code": 503, "headers": {"Retry-After": "7200"}}, {"json": {"inputs": []}}],
    )
    hook.get_inputs()  # the budget (300 s) still allows one pause of the longest honoured length
    assert hook.sleeps == [300.0]


def test_get_retries_connection_errors_of_any_kind(hook, requests_mock):
    requests_mock.get(
        f"{BASE_URL}/inputs",
        [
            {"exc": refused()},
            {"exc": reset_after_send()},
            {"exc": requests.exceptions.ReadTimeout("slow")},
            {"json": {"inputs": []}},
        ],
    )
    assert hook.get_inputs() == []
    assert requests_mock.call_count == 4


@pytest.mark.parametrize("status", [429, 503])
def test_kickoff_is_retried_when_the_service_says_it_did_not_act(hook, requests_mock, status):
    requests_mock.post(
        f"{BASE_URL}/kickoff",
        [{"status_code": status, "headers": {"Retry-After": "2"}}, {"json": {"kickoff_id": KICKOFF_ID}}],
    )
    assert hook.kickoff({"topic": "x"}) == KICKOFF_ID
    assert requests_mock.call_count == 2
    assert hook.sleeps == [2.0]


def test_kickoff_is_retried_when_the_connection_was_refused(hook, requests_mock):
    requests_mock.post(f"{BASE_URL}/kickoff", [{"exc": refused()}, {"json": {"kickoff_id": KICKOFF_ID}}])
    assert hook.kickoff({"topic": "x"}) == KICKOFF_ID
    assert requests_mock.call_count == 2


def test_kickoff_is_retried_after_a_connect_timeout(hook, requests_mock):
    requests_mock.post(
        f"{BASE_URL}/kickoff",
        [{"exc": requests.exceptions.ConnectTimeout("connect")}, {"json": {"kickoff_id": KICKOFF_ID}}],
    )
    assert hook.kickoff({"topic": "x"}) == KICKOFF_ID


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        ({"exc": requests.exceptions.ReadTimeout("read timed out")}, "ReadTimeout"),
        ({"exc": reset_after_send()}, "ConnectionError"),
        ({"status_code": 502, "text": "bad gateway"}, "HTTP 502 from a gateway"),
        ({"status_code": 504, "text": "gateway timeout"}, "HTTP 504 from a gateway"),
    ],
)
def test_kickoff_is_never_repeated_when_its_outcome_is_unknown(hook, requests_mock, outcome, reason):
    requests_mock.post(f"{BASE_URL}/kickoff", [outcome, {"json": {"kickoff_id": "second-execution"}}])

    with pytest.raises(
        CrewOutcomeUnknownError, match=f"outcome is unknown.*{reason}.*may have started"
    ) as caught:
        hook.kickoff({"topic": "x"})

    assert requests_mock.call_count == 1
    assert TOKEN not in str(caught.value)
    # Airflow fails a task on this error without using its retries: no retry can start a second run.
    assert isinstance(caught.value, AirflowFailException)
    assert str(caught.value).endswith("Failing without retry.")


def test_resume_is_never_repeated_when_its_outcome_is_unknown(hook, requests_mock):
    requests_mock.post(
        f"{BASE_URL}/resume",
        [{"exc": requests.exceptions.ReadTimeout("read")}, {"json": {"status": "resumed", "message": ""}}],
    )
    with pytest.raises(
        CrewOutcomeUnknownError,
        match=f"the feedback may have been applied to execution {KICKOFF_ID}, which may run again",
    ):
        hook.resume(KICKOFF_ID, "review", "ok", True)
    assert requests_mock.call_count == 1


def test_transport_failure_after_retries_names_the_endpoint(crew_conn, requests_mock):
    crew_conn(retry_limit=1)
    hook = CrewHook()
    fake_time(hook)
    requests_mock.get(f"{BASE_URL}/inputs", exc=refused())
    with pytest.raises(
        CrewTransportError, match=r"GET /inputs to https://crew.example.test/inputs failed after 2"
    ):
        hook.get_inputs()


def test_tls_errors_are_not_retried(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/inputs", exc=requests.exceptions.SSLError("certificate verify failed"))
    with pytest.raises(CrewTransportError, match="certificate verify failed"):
        hook.get_inputs()
    assert requests_mock.call_count == 1


def test_tls_verification_follows_the_connection(crew_conn, requests_mock):
    crew_conn(verify_tls="false", connect_timeout=2, read_timeout=30)
    requests_mock.get(f"{BASE_URL}/inputs", json={"inputs": []})
    CrewHook().get_inputs()
    assert requests_mock.last_request.verify is False
    assert requests_mock.last_request.timeout == (2.0, 30.0)


# -- status ---------------------------------------------------------------------------------------


def test_get_status_parses_the_record(hook, requests_mock):
    requests_mock.get(
        f"{BASE_URL}/{KICKOFF_ID}/status",
        json={"state": "SUCCESS", "status": "Completed", "result": "a report", "result_json": None},
    )
    status = hook.get_status(KICKOFF_ID)
    assert status.state is CrewState.SUCCEEDED
    assert status.output == "a report"


@pytest.mark.parametrize(
    ("style", "path"),
    [
        (StatusPathStyle.CONTRACT, f"/{KICKOFF_ID}/status"),
        (StatusPathStyle.DEPLOYED, f"/status/{KICKOFF_ID}"),
    ],
)
def test_status_path_style_is_taken_from_the_connection(crew_conn, requests_mock, style, path):
    crew_conn(status_path_style=style.value)
    requests_mock.get(f"{BASE_URL}{path}", json={"state": "RUNNING"})
    assert CrewHook().get_status(KICKOFF_ID).state is CrewState.RUNNING
    assert requests_mock.call_count == 1


def test_auto_status_path_learns_the_deployed_form_on_first_404(hook, requests_mock):
    contract = requests_mock.get(
        f"{BASE_URL}/{KICKOFF_ID}/status", status_code=404, json={"detail": "Not Found"}
    )
    deployed = requests_mock.get(f"{BASE_URL}/status/{KICKOFF_ID}", json={"state": "RUNNING"})

    assert hook.get_status(KICKOFF_ID).state is CrewState.RUNNING
    assert hook.get_status(KICKOFF_ID).state is CrewState.RUNNING

    assert contract.call_count == 1  # tried once, then the learned form is used directly
    assert deployed.call_count == 2


def test_auto_status_path_does_not_learn_from_two_404s(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/{KICKOFF_ID}/status", status_code=404, json={})
    requests_mock.get(f"{BASE_URL}/status/{KICKOFF_ID}", status_code=404, json={})
    with pytest.raises(CrewNotFoundError):
        hook.get_status(KICKOFF_ID)
    assert LEARNED_STATUS_PATHS == {}


def test_auto_status_path_learns_only_from_a_status_record_that_parses(hook, requests_mock):
    # A proxy's 200 page at the contract's path is no status record: it must not teach the path.
    requests_mock.get(f"{BASE_URL}/{KICKOFF_ID}/status", text="<html>maintenance</html>")
    with pytest.raises(CrewServerError):
        hook.get_status(KICKOFF_ID)
    assert LEARNED_STATUS_PATHS == {}

    requests_mock.get(f"{BASE_URL}/{KICKOFF_ID}/status", json={"state": "RUNNING"})
    assert hook.get_status(KICKOFF_ID).state is CrewState.RUNNING
    assert LEARNED_STATUS_PATHS == {BASE_URL: StatusPathStyle.CONTRACT}


def test_kickoff_id_is_quoted_in_the_status_path(crew_conn, requests_mock):
    crew_conn(status_path_style="contract")
    requests_mock.get(f"{BASE_URL}/a%3Fb/status", json={"state": "RUNNING"})
    assert CrewHook().get_status("a?b").state is CrewState.RUNNING


def test_non_json_success_body_is_a_server_error(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/{KICKOFF_ID}/status", text="<html>oops</html>")
    with pytest.raises(CrewServerError, match="not JSON"):
        hook.get_status(KICKOFF_ID)


@pytest.mark.parametrize(
    ("answer", "detail"),
    [({"json": {"id": "x"}}, "kickoff_id"), ({"text": "<html>OK</html>"}, "not JSON: '<html>OK</html>'")],
)
def test_a_kickoff_answer_that_cannot_be_read_is_an_unknown_outcome(hook, requests_mock, answer, detail):
    """The service said 200: it may have started an execution, so no one may send the kickoff again."""
    requests_mock.post(f"{BASE_URL}/kickoff", [answer, {"json": {"kickoff_id": "second"}}])

    with pytest.raises(
        CrewOutcomeUnknownError, match="answered 200 with a body that cannot be read"
    ) as caught:
        hook.kickoff({"topic": "x"})

    assert detail in str(caught.value) and "an execution may have started" in str(caught.value)
    assert isinstance(caught.value, AirflowFailException)  # Airflow does not retry the task either
    assert requests_mock.call_count == 1


# -- connection test button -----------------------------------------------------------------------


def test_test_connection_ok_lists_inputs_and_starts_nothing(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/", text="Healthy")
    requests_mock.get(f"{BASE_URL}/inputs", json={"inputs": ["topic"]})
    ok, message = hook.test_connection()
    assert ok is True
    assert message == f"OK: the crew at {BASE_URL} expects inputs ['topic'] (organization token)."
    assert all(request.method == "GET" for request in requests_mock.request_history)


def test_test_connection_tells_a_bad_token(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/", text="Healthy")
    requests_mock.get(f"{BASE_URL}/inputs", status_code=401, json={"error": "Unauthorized"})
    ok, message = hook.test_connection()
    assert (ok, message) == (
        False,
        f"Bad token: the crew at {BASE_URL} rejected the token (401). Put the token from the crew's status "
        "tab in 'Bearer token'.",
    )
    assert TOKEN not in message


def test_test_connection_tells_unreachable_without_retrying(hook, requests_mock):
    requests_mock.get(f"{BASE_URL}/", exc=refused())
    ok, message = hook.test_connection()
    assert ok is False
    assert message.startswith("Unreachable: GET / to")
    assert requests_mock.call_count == 1


def test_test_connection_reports_bad_configuration_by_field_not_by_connection_id(crew_conn):
    # Airflow's Test action runs the hook under a random id such as this one.
    crew_conn("DUILOSWE", host="crew.example.test")
    ok, message = CrewHook("DUILOSWE").test_connection()
    assert (ok, message) == (
        False,
        "'Crew base URL' 'crew.example.test' has no scheme. Write the full address, e.g. https://crew.example.test.",
    )


def test_test_connection_reports_a_missing_connection(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    ok, message = CrewHook("nowhere").test_connection()
    assert ok is False
    assert message.startswith("Connection 'nowhere' is not defined where this runs.")


def test_wrong_connection_type_is_named(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", json.dumps({"conn_type": "http", "host": BASE_URL}))
    with pytest.raises(
        CrewConfigurationError, match="has type 'http'; the crew provider needs a connection of type 'crew'"
    ):
        CrewHook().config  # noqa: B018


def test_retries_stop_at_the_callers_deadline_even_when_the_service_asks_for_more(hook, requests_mock):
    requests_mock.get(
        f"{BASE_URL}/{KICKOFF_ID}/status",
        [{"status_code": 429, "headers": {"Retry-After": "100"}}, {"json": {"state": "RUNNING"}}],
    )
    with pytest.raises(CrewRateLimitedError):
        hook.get_status(KICKOFF_ID, deadline=time.time() + 5)
    assert hook.sleeps == []  # sleeping 100 s would overshoot the deadline: give the answer back instead
    assert requests_mock.call_count == 1


def test_a_missing_connection_is_named_with_the_fix(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    with pytest.raises(
        CrewConfigurationError,
        match=r"Connection 'nowhere' is not defined where this runs.*AIRFLOW_CONN_NOWHERE",
    ):
        CrewHook(crew_conn_id="nowhere").config  # noqa: B018


def test_a_one_try_call_is_sent_once_even_when_the_service_says_busy(hook, requests_mock):
    """What the connection test relies on: ``retry_limit=0`` means one request, whatever the answer."""
    from airflow_provider_crew.hooks.client.request import get_call

    requests_mock.get(f"{BASE_URL}/", status_code=503, headers={"Retry-After": "1"})

    response = hook._send(get_call(hook.config, "/"), retry_limit=0)

    assert response.status_code == 503
    assert "this call tries only once" in response.note
    assert requests_mock.call_count == 1 and hook.sleeps == []


@pytest.mark.parametrize("raw", ["[1, 2]", "not json", '"text"'])
def test_an_extra_that_is_not_a_json_object_fails_naming_the_connection_or_the_parameter(raw):
    from types import SimpleNamespace

    from airflow_provider_crew.connection import connection_extra
    from airflow_provider_crew.exceptions import CrewConfigurationError
    from airflow_provider_crew.hooks.human_input import webhook_connection_extra

    with pytest.raises(CrewConfigurationError, match=r"Connection 'crew_x': the extra is not a JSON object"):
        connection_extra(SimpleNamespace(conn_id="crew_x", extra=raw))
    with pytest.raises(
        CrewConfigurationError, match=r"human_input_webhook_conn_id='hook_x'.*not a JSON object"
    ):
        webhook_connection_extra(SimpleNamespace(conn_id="hook_x", extra=raw), "hook_x")
    assert connection_extra(SimpleNamespace(conn_id="crew_x", extra="")) == {}


# -- stop (not in the contract; crewAI's hosted service has POST /stop/{kickoff_id}) -------------------


@pytest.mark.parametrize(
    ("status", "body", "outcome", "detail"),
    [
        (200, {"status": "stopped", "kickoffId": KICKOFF_ID}, "stopped", ""),
        (400, {"detail": "Cannot stop execution. Current state: SUCCESS"}, "already finished", "SUCCESS"),
        (404, {"detail": "Not Found"}, "not supported by this service", "HTTP 404"),  # no such route
        (405, {"detail": "Method Not Allowed"}, "not supported by this service", "HTTP 405"),
        (404, {"detail": "Execution not found"}, "unknown", "Execution not found"),  # no such execution
        (500, {"error": "Internal Server Error"}, "unknown", "HTTP 500"),
    ],
)
def test_stop_says_what_happened_and_never_raises(hook, requests_mock, status, body, outcome, detail):
    stop = requests_mock.post(f"{BASE_URL}/stop/{KICKOFF_ID}", status_code=status, json=body)
    result = hook.stop(KICKOFF_ID)
    assert result.outcome.value == outcome and detail in result.detail
    assert stop.last_request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in result.describe()


def test_stop_is_retried_once_like_a_read_and_an_unreachable_service_is_unknown(hook, requests_mock):
    requests_mock.post(
        f"{BASE_URL}/stop/{KICKOFF_ID}",
        [{"status_code": 502, "text": "bad gateway"}, {"status_code": 200, "json": {"status": "stopped"}}],
    )
    assert hook.stop(KICKOFF_ID).outcome.value == "stopped"  # stopping twice does nothing more

    requests_mock.post(f"{BASE_URL}/stop/{KICKOFF_ID}", exc=refused())
    result = hook.stop(KICKOFF_ID)
    assert result.outcome.value == "unknown" and "failed after 2 attempt(s)" in result.detail
