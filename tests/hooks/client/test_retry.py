"""The retry policy on its own (no I/O): every outcome of an attempt, for a GET and for a POST.

OUTCOMES below is docs/contract.md's "Retries: which answers are safe to repeat" as examples; the
POST rule in docs/reliability.md is checked to be the policy's own table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.exceptions import CrewOutcomeUnknownError, CrewTransportError
from airflow_provider_crew.hooks.client.request import Call, post_call
from airflow_provider_crew.hooks.client.response import Came, Response, TransportFailure, what_came_back
from airflow_provider_crew.hooks.client.retry import GET_RULE, POST_RULE, RetryPolicy, retry_after_seconds
from airflow_provider_crew.hooks.crew import KICKOFF_IF_UNKNOWN

DOCS = Path(__file__).resolve().parents[3] / "docs"
CONFIG = CrewConnectionConfig(base_url="https://crew.example.test", token="policy-token-a1b2")


def call(method: str, path: str = "/kickoff") -> Call:
    """A call as the hook builds it: a POST carries what its unknown outcome may mean."""
    if method == "POST":
        return post_call(CONFIG, path, {}, if_unknown=KICKOFF_IF_UNKNOWN)
    return Call(method=method, url=f"{CONFIG.base_url}{path}", endpoint=f"{method} {path}", headers={})


def answer(status: int, retry_after: str | None = None, body: bytes = b"{}") -> Response:
    return Response(status, {"Retry-After": retry_after} if retry_after else {}, body)


SERVICE_BUSY = b'{"error": "Service Unavailable", "message": "Try again shortly"}'
ENVOY_RESET = (
    b"upstream connect error or disconnect/reset before headers. reset reason: connection termination"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def policy(
    method: str, *, deadline: float | None = None, max_retries: int | None = None, **settings
) -> RetryPolicy:
    config = CrewConnectionConfig(base_url=CONFIG.base_url, token=CONFIG.token, **settings)
    return RetryPolicy(
        call(method, "/inputs" if method == "GET" else "/kickoff"),
        config,
        deadline=deadline,
        max_retries=max_retries,
        clock=Clock(),
        jitter=lambda low, high: high,  # the top of the jitter range: worst case, and exact
    )


SAFE = "retry"
UNSAFE = "outcome unknown"
ANSWER = "answer"
FAIL = "transport error"

OUTCOMES = [
    # outcome of the attempt,                           GET,   POST
    (TransportFailure(Came.NOTHING, "refused"), SAFE, SAFE),
    (TransportFailure(Came.LOST, "read timed out"), SAFE, UNSAFE),
    (TransportFailure(Came.REFUSED, "certificate verify failed"), FAIL, FAIL),
    (answer(429), SAFE, SAFE),
    (answer(503, "1"), SAFE, SAFE),  # the service's own "busy": it did not act
    (answer(503, body=SERVICE_BUSY), SAFE, SAFE),
    (answer(503, body=b'{"detail": "Service Unavailable"}'), SAFE, SAFE),
    (answer(503, body=ENVOY_RESET), SAFE, UNSAFE),  # a gateway's own: it may have passed it on
    (answer(503, body=b"no healthy upstream"), SAFE, UNSAFE),
    # API gateways' own 503s in JSON, after they may have passed the request on: AWS API Gateway's
    # integration time-out, Kong's, Azure API Management's, ESPv2's (Envoy's error as JSON).
    (answer(503, body=b'{"message": "Service Unavailable"}'), SAFE, UNSAFE),
    (answer(503, body=b'{"message": "failure to get a peer from the ring-balancer"}'), SAFE, UNSAFE),
    (answer(503, body=b'{"statusCode": 503, "message": "Service is unavailable."}'), SAFE, UNSAFE),
    (
        answer(503, body=b'{"code": 503, "message": "upstream connect error or disconnect/reset"}'),
        SAFE,
        UNSAFE,
    ),
    (answer(503, body=b'{"error": {"code": 503, "status": "UNAVAILABLE"}}'), SAFE, UNSAFE),
    (answer(503), SAFE, UNSAFE),  # "{}" says nothing of the service's
    (answer(502), SAFE, UNSAFE),
    (answer(504), SAFE, UNSAFE),
    (answer(500), ANSWER, UNSAFE),  # the service failed while handling it: it may have acted
    (answer(400), ANSWER, ANSWER),
    (answer(404), ANSWER, ANSWER),
    (answer(200), ANSWER, ANSWER),
]


def verdict(step: float | Response | Exception) -> str:
    if isinstance(step, float):
        return SAFE
    if isinstance(step, CrewOutcomeUnknownError):
        return UNSAFE
    if isinstance(step, CrewTransportError):
        return FAIL
    assert isinstance(step, Response)
    return ANSWER


@pytest.mark.parametrize(("outcome", "get", "post"), OUTCOMES)
def test_which_outcomes_are_safe_to_repeat(outcome, get, post):
    assert verdict(policy("GET").decide(outcome)) == get
    assert verdict(policy("POST").decide(outcome)) == post


def test_each_answer_falls_in_its_row_of_the_rules():
    assert what_came_back(answer(429)) is Came.TOO_MANY
    assert what_came_back(answer(503, "Wed, 21 Oct 2015 07:28:00 GMT")) is Came.SERVICE_BUSY
    assert what_came_back(answer(503, body=SERVICE_BUSY)) is Came.SERVICE_BUSY
    assert what_came_back(answer(503, body=ENVOY_RESET)) is Came.GATEWAY_BUSY
    assert what_came_back(answer(503, body=b'["not", "an", "error"]')) is Came.GATEWAY_BUSY
    for code in (502, 504):
        assert what_came_back(answer(code, body=SERVICE_BUSY)) is Came.GATEWAY_FAILED
    for code in (500, 599):
        assert what_came_back(answer(code, body=SERVICE_BUSY)) is Came.SERVER_FAILED
    for code in (200, 307, 400, 401, 404, 422):
        assert what_came_back(answer(code)) is Came.ANSWER
    assert set(POST_RULE) == set(GET_RULE) == set(Came)


def docs_table(page: Path, heading: str) -> list[list[str]]:
    """The cells of the first table under ``heading`` in ``page``."""
    text = page.read_text().split(f"\n{heading}\n", 1)[1]
    rows = []
    for line in text.split("\n\n| ", 1)[1].splitlines()[2:]:  # after the header and its rule
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_the_post_rule_in_the_docs_is_the_table_the_policy_reads():
    table = docs_table(DOCS / "reliability.md", "## Paid requests: nothing sent twice")

    assert [(row[0], row[2]) for row in table] == [
        (came.value, step.value) for came, step in POST_RULE.items()
    ]


def test_a_gateway_503_to_a_post_says_why_it_is_not_repeated():
    step = policy("POST").decide(answer(503, body=ENVOY_RESET))

    assert isinstance(step, CrewOutcomeUnknownError)
    assert "HTTP 503 without Retry-After or the service's error body: a gateway's own answer" in str(step)


def test_an_unknown_outcome_names_what_may_have_happened_and_never_the_token():
    step = policy("POST").decide(answer(504))

    assert isinstance(step, CrewOutcomeUnknownError)
    message = str(step)
    assert "POST /kickoff" in message and "HTTP 504 from a gateway" in message
    assert "an execution may have started" in message and "not repeated" in message
    assert CONFIG.token not in message


def test_busy_answers_are_bounded_by_the_retry_budget_not_the_retry_limit():
    p = policy("POST", retry_limit=0, retry_delay=1.0, retry_budget=60.0)
    delays = []
    while isinstance(step := p.decide(answer(429, "1")), float):
        delays.append(step)
        p.clock.now += step

    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0]  # the next (32 s) would end past 60 s
    assert sum(delays) <= 60
    assert isinstance(step, Response)
    assert "Gave up after 6 attempt(s) in 31 s: the connection's retry_budget of 60 s is used up" in step.note


def test_retry_after_is_a_floor_and_the_backoff_grows_to_its_cap():
    p = policy("GET", retry_delay=1.0, retry_budget=10_000.0)
    delays = []
    for _ in range(9):
        step = p.decide(answer(503, "5"))
        assert isinstance(step, float)
        delays.append(step)
        p.clock.now += step

    assert delays == [5.0, 5.0, 5.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_failures_that_do_not_say_when_to_come_back_are_bounded_by_the_retry_limit():
    p = policy("GET", retry_limit=2)
    outcomes = [p.decide(TransportFailure(Came.NOTHING, "refused")) for _ in range(3)]

    assert [type(step) for step in outcomes] == [float, float, CrewTransportError]
    error = outcomes[-1]
    assert isinstance(error, CrewTransportError)
    assert str(error) == f"GET /inputs to {CONFIG.base_url}/inputs failed after 3 attempt(s): refused"


def test_no_retry_sleeps_past_the_deadline_and_the_last_attempt_still_gets_a_moment():
    clock_start = 1_000_000.0
    p = policy("GET", deadline=clock_start + 3, retry_budget=300.0)

    assert p.limits().total == 3  # the attempt may not outlast the deadline
    step = p.decide(answer(429, "30"))
    assert isinstance(step, Response)
    assert "the next retry would pass the wait's deadline" in step.note

    p.clock.now += 10  # past the deadline: a last read of the status is still allowed a second
    assert p.limits().total == 1.0


def test_a_one_try_call_never_retries():
    p = policy("GET", max_retries=0)

    step = p.decide(answer(503, "1"))

    assert isinstance(step, Response) and "this call tries only once" in step.note


def test_the_attempt_time_bound_is_connect_plus_read_timeout():
    p = policy("GET", connect_timeout=4.0, read_timeout=20.0, max_response_bytes=1234)
    limits = p.limits()
    assert (limits.total, limits.read_timeout, limits.connect_timeout, limits.max_bytes) == (
        24.0,
        20.0,
        4.0,
        1234,
    )


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("3", 3.0), ("0.5", 0.5), ("-1", 0.0), ("soon", None), ("", None)],
)
def test_retry_after_forms(value, seconds):
    assert retry_after_seconds({"Retry-After": value}) == seconds


def test_retry_after_as_an_http_date():
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
