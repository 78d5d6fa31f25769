"""The api-server plugin's app, on its own: who gets in, what it reads, when it wakes, how often.

Its database side (finding the deferred waits, resuming one under a row lock) is replaced here by
recorders, to hold the timing and counting rules to a few hundred milliseconds; the real thing, on
a real api-server and database, is tests/e2e/test_webhook_wake_e2e.py.
"""

from __future__ import annotations

import base64
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_crew.hooks.webhook_receiver import (
    CrewWebhookReceiverHook,
    key_check,
    run_token,
    wake_path,
)
from airflow_provider_crew.plugins import webhook_app
from airflow_provider_crew.plugins.webhook_app import MAX_BODY_BYTES, Wait, create_app, execution_of
from airflow_provider_crew.testing import wait_until

KEY = "plugin-test-key-" + "k" * 20
OLD_KEY = "plugin-test-old-key-" + "o" * 20
DAG, RUN = "wake_dag", "manual__2026-11-24T02:09:28+00:00"


@pytest.fixture
def receiver(monkeypatch):
    def define(password: str = KEY, host: str = "http://127.0.0.1:8080") -> None:
        monkeypatch.setenv(
            "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
            json.dumps({"conn_type": "crew_webhook_receiver", "host": host, "password": password}),
        )

    define()
    return define


@pytest.fixture
def database(monkeypatch):
    """Recorders in place of the plugin's two database calls."""
    calls: dict[str, list[Any]] = {"find": [], "apply": []}
    waits: list[Wait] = []

    def find_waits(dag_id, run_id, kickoff_id, kind):
        calls["find"].append((dag_id, run_id, kickoff_id, kind))
        return [w for w in waits if w.kwargs["kickoff_id"] == kickoff_id]

    def apply_wake(wait, payload):
        calls["apply"].append((time.time(), wait, payload))
        return True

    monkeypatch.setattr(webhook_app, "find_waits", find_waits)
    monkeypatch.setattr(webhook_app, "apply_wake", apply_wake)
    return calls, waits


@pytest.fixture
def client(receiver, database):
    from fastapi.testclient import TestClient

    with TestClient(create_app()) as client:
        yield client


def post(
    client, body: Any, *, token: str | None, kind: str = "crew", run_id: str = RUN, bearer: bool = False
):
    """POST as the crew service does: the token in the address's ``token`` query parameter (the
    completion webhook), or as a bearer token (the human-input webhook)."""
    headers: dict[str, Any] = {"Content-Type": "application/json"}
    params = {}
    if token is not None:
        if bearer:
            headers["Authorization"] = f"Bearer {token}".encode()  # bytes: a UTF-8 one too
        else:
            params["token"] = token
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = wake_path(kind, DAG, run_id).removeprefix("/crew-webhooks")
    return client.post(path, content=data, headers=headers, params=params)


def wait_of(kickoff_id: str, *, not_before: float, wait_for: str = "completion") -> Wait:
    return Wait(
        "ti-1",
        7,
        {"kickoff_id": kickoff_id, "wait_for": wait_for, "not_before": not_before, "deadline": 1e10},
    )


# -- who gets in ---------------------------------------------------------------------------------------


def test_health_says_it_can_wake_and_proves_its_key(client):
    answer = client.get("/v1/health", params={"nonce": "abc"}).json()
    assert answer["plugin"] == "airflow-provider-crew" and answer["wake"] is True and answer["reason"] is None
    assert answer["key_check"] == key_check(KEY, "abc")
    assert KEY not in json.dumps(answer)


def test_health_signs_a_nonce_with_the_health_key_so_no_answer_is_a_run_token(client):
    """``/health`` signs any caller's nonce: under a key derived for it alone, never under the key the
    run tokens are made with (nor the receiver's key itself), so no nonce gets a run's token signed."""
    import hashlib
    import hmac

    from airflow_provider_crew.hooks.webhook_receiver import (
        _TOKEN_CONTEXT,
        HEALTH_KEY_PURPOSE,
        RUN_TOKEN_KEY_PURPOSE,
        derived_key,
    )

    # A caller asks /health to sign a run token's own input as its nonce.
    token_input = b"\0".join((_TOKEN_CONTEXT, DAG.encode(), RUN.encode()))
    nonce = token_input.decode()
    answer = client.get("/v1/health", params={"nonce": nonce}).json()["key_check"]
    signed = b"key-check\0" + nonce.encode()

    def sign(key: bytes) -> str:
        return hmac.new(key, signed, hashlib.sha256).hexdigest()

    assert answer == sign(derived_key(KEY, HEALTH_KEY_PURPOSE)) == key_check(KEY, nonce)
    assert answer != sign(derived_key(KEY, RUN_TOKEN_KEY_PURPOSE))  # not what a run token is signed with
    assert answer != sign(KEY.encode())  # nor the receiver's key as it is
    assert derived_key(KEY, HEALTH_KEY_PURPOSE) != derived_key(KEY, RUN_TOKEN_KEY_PURPOSE)
    # A run token is the run-token key's HMAC of the run; the health key's HMAC of the same bytes (what
    # /health would answer without its "key-check" prefix) is not it.
    run_key = derived_key(KEY, RUN_TOKEN_KEY_PURPOSE)
    expected = base64.urlsafe_b64encode(hmac.new(run_key, token_input, hashlib.sha256).digest())
    assert run_token(KEY, DAG, RUN) == expected.rstrip(b"=").decode()
    health_key = derived_key(KEY, HEALTH_KEY_PURPOSE)
    as_health = base64.urlsafe_b64encode(hmac.new(health_key, token_input, hashlib.sha256).digest())
    assert run_token(KEY, DAG, RUN) != as_health.rstrip(b"=").decode()


def test_health_without_the_receiver_connection_says_why_in_the_log_only(monkeypatch, database, caplog):
    from fastapi.testclient import TestClient

    monkeypatch.delenv("AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER", raising=False)
    with TestClient(create_app()) as client, caplog.at_level("WARNING", logger=webhook_app.__name__):
        answer = client.get("/v1/health").json()
    assert answer["wake"] is False and answer["reason"] == webhook_app.WHY_IN_THE_LOG
    assert "'crew_webhook_receiver' is not defined" in caplog.text


@pytest.mark.parametrize("failure", ["host", "backend"])
def test_health_tells_anyone_only_whether_the_wake_is_available(
    receiver, database, monkeypatch, caplog, failure
):
    """``/health`` needs no login: an error's text (the connection's host echoed back, a secrets
    backend's or a database's failure) goes to the api-server's log, never into the answer."""
    from airflow.models.connection import Connection
    from fastapi.testclient import TestClient

    secret_text = "internal-vault.example:8200 said: permission denied for role crew-prod"
    if failure == "host":
        receiver(host="ftp://internal-vault.example:8200")
    else:

        def unreadable(conn_id):
            raise RuntimeError(secret_text)

        monkeypatch.setattr(Connection, "get_connection_from_secrets", staticmethod(unreadable))
    with TestClient(create_app()) as client, caplog.at_level("WARNING", logger=webhook_app.__name__):
        answer = client.get("/v1/health", params={"nonce": "n"}).json()
    assert answer == {
        "plugin": "airflow-provider-crew",
        "version": webhook_app.__version__,
        "wake": False,
        "reason": webhook_app.WHY_IN_THE_LOG,
    }
    assert "Webhook wake is off in this api-server" in caplog.text and "internal-vault" in caplog.text


@pytest.mark.parametrize("bearer", [False, True], ids=["query", "bearer"])
@pytest.mark.parametrize(
    "token",
    [
        None,
        "",
        "x" * 43,
        "é" * 43,
        "x" * 10_000,
        run_token(KEY, DAG, "another-run"),
        run_token(KEY, "another-dag", RUN),
        run_token("z" * 30, DAG, RUN),
    ],
)
def test_a_wrong_token_gets_404_and_touches_nothing(client, database, token, bearer):
    calls, _ = database
    response = post(client, {"kickoff_id": "k-1"}, token=token, bearer=bearer)
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
    assert calls == {"find": [], "apply": []}


def test_the_token_in_a_basic_header_is_not_accepted(client, database):
    """The userinfo form (``https://wake:<token>@host/...``, sent as Basic) is gone."""
    basic = "Basic " + base64.b64encode(f"wake:{run_token(KEY, DAG, RUN)}".encode()).decode()
    path = wake_path("crew", DAG, RUN).removeprefix("/crew-webhooks")
    response = client.post(path, content=b'{"kickoff_id": "k-1"}', headers={"Authorization": basic})
    assert response.status_code == 404 and database[0] == {"find": [], "apply": []}


def test_an_unknown_kind_gets_404(client, database):
    assert post(client, {"kickoff_id": "k-1"}, token=run_token(KEY, DAG, RUN), kind="step").status_code == 404
    assert database[0]["find"] == []


def test_the_runs_token_as_query_parameter_or_bearer_is_accepted(client, database):
    token = run_token(KEY, DAG, RUN)
    assert post(client, {"kickoff_id": "k-1"}, token=token).status_code == 202
    assert post(client, {"execution_id": "k-2"}, token=token, kind="human", bearer=True).status_code == 202
    assert database[0]["find"] == [(DAG, RUN, "k-1", "crew"), (DAG, RUN, "k-2", "human")]


def test_the_address_the_hook_builds_is_accepted(client, database):
    from urllib.parse import urlsplit

    from airflow_provider_crew.connection import CrewConnectionConfig

    crew = CrewConnectionConfig(base_url="https://crew.example.test", token="t", safety_poll_interval=300)
    address = urlsplit(
        CrewWebhookReceiverHook()
        .addresses(SimpleNamespace(dag_id=DAG, run_id=RUN, task_id="kickoff", map_index=-1), crew)
        .crew_webhook_url
    )
    path = address.path.removeprefix("/crew-webhooks")
    response = client.post(f"{path}?{address.query}", content=b'{"kickoff_id": "k-1"}')
    assert response.status_code == 202 and database[0]["find"] == [(DAG, RUN, "k-1", "crew")]


def test_a_key_being_rotated_out_still_opens_its_runs(client, receiver, database):
    old_address = run_token(OLD_KEY, DAG, RUN)
    assert post(client, {"kickoff_id": "k-1"}, token=old_address).status_code == 404
    receiver(password=f"{KEY} {OLD_KEY}")
    from fastapi.testclient import TestClient

    with TestClient(create_app()) as rotated:  # a fresh app reads the connection again
        assert post(rotated, {"kickoff_id": "k-1"}, token=old_address).status_code == 202


# -- what it reads -------------------------------------------------------------------------------------


def test_a_body_over_the_cap_is_refused_unread(client, database):
    token = run_token(KEY, DAG, RUN)
    big = json.dumps({"kickoff_id": "k-1", "result": "x" * MAX_BODY_BYTES}).encode()
    response = post(client, big, token=token)
    assert response.status_code == 413 and database[0]["find"] == []


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[1, 2]", b'{"kickoff_id": 7}', b'{"result": "no id"}', b"[" * 100_000]
)
def test_a_body_without_an_execution_wakes_nothing(client, database, body):
    assert post(client, body, token=run_token(KEY, DAG, RUN)).status_code == 202
    assert database[0]["find"] == []


def test_the_execution_is_read_from_kickoff_id_or_execution_id():
    assert execution_of(b'{"kickoff_id": "a", "execution_id": "b"}') == "a"
    assert execution_of(b'{"execution_id": "b", "task_id": "t"}') == "b"
    assert execution_of(json.dumps({"kickoff_id": "x" * 201}).encode()) is None


# -- when and how often it wakes ----------------------------------------------------------------------


def test_a_wake_past_the_race_bound_is_applied_at_once_and_once(client, database):
    calls, waits = database
    not_before = time.time() - 0.1
    waits.append(wait_of("k-1", not_before=not_before))
    token = run_token(KEY, DAG, RUN)
    answers = [post(client, {"kickoff_id": "k-1"}, token=token) for _ in range(5)]  # sent again and again
    assert [(a.status_code, a.json()["waking"]) for a in answers] == [(202, 1)] + [(202, 0)] * 4
    assert len(calls["find"]) == 1  # one lookup for the repeats
    wait_until(lambda: calls["apply"], timeout=10)
    assert len(calls["apply"]) == 1
    applied_at, wait, payload = calls["apply"][0]
    assert applied_at - time.time() < 5  # at once, not held
    assert payload["outcome"] == "woken" and payload["kickoff_id"] == "k-1"
    assert payload["wait"] == wait.kwargs and payload["message"] == "Woken by the crew's completion webhook."
    # When the webhook came: the crew's end, from which the woken task measures crew.wait.end_lag.
    assert time.time() - 10 < payload["woken_at"] <= applied_at


def test_a_wake_before_the_race_bound_is_neither_held_nor_applied(client, database, monkeypatch, caplog):
    """Until ``not_before`` the trigger polls at most 5 s apart and ends the task itself: an early wake
    is dropped, said at debug, and not counted."""
    import logging

    calls, waits = database
    waits.append(wait_of("k-1", not_before=time.time() + 0.5))
    caplog.set_level(logging.DEBUG, logger="airflow_provider_crew")
    answer = post(client, {"kickoff_id": "k-1"}, token=run_token(KEY, DAG, RUN))
    assert (answer.status_code, answer.json()) == (202, {"accepted": True, "waking": 0})
    assert len(calls["find"]) == 1
    time.sleep(1.0)  # past the bound: nothing was kept to be applied then
    assert calls["apply"] == []
    said = [r for r in caplog.records if r.name == webhook_app.__name__ and r.levelno == logging.DEBUG]
    assert any("the trigger's own polls end the wait" in r.getMessage() for r in said), said
    # The same wait, woken again once the bound has passed (and the shared lookup expired): applied.
    monkeypatch.setattr(webhook_app, "LOOKUP_DEDUP_SECONDS", 0.0)
    again = post(client, {"kickoff_id": "k-1"}, token=run_token(KEY, DAG, RUN))
    assert again.json()["waking"] == 1
    wait_until(lambda: calls["apply"], timeout=10)


def test_a_lookup_made_again_later_does_not_wake_a_deferral_twice(client, database, monkeypatch):
    calls, waits = database
    waits.append(wait_of("k-1", not_before=0))
    token = run_token(KEY, DAG, RUN)
    assert post(client, {"kickoff_id": "k-1"}, token=token).json()["waking"] == 1
    wait_until(lambda: calls["apply"], timeout=10)
    monkeypatch.setattr(webhook_app, "LOOKUP_DEDUP_SECONDS", 0.0)  # the shared lookup has expired
    again = post(client, {"kickoff_id": "k-1"}, token=token)
    assert len(calls["find"]) == 2  # looked up again...
    assert again.json()["waking"] == 0 and len(calls["apply"]) == 1  # ...the same deferral: woken already


# -- the worker's check, over real HTTP ----------------------------------------------------------------


@pytest.fixture
def served(webhook_plugin, database):
    webhook_plugin.define_receiver(password=KEY)
    return str(webhook_plugin)


def test_the_worker_finds_the_plugin_with_the_same_key(served):
    assert CrewWebhookReceiverHook().health() == (True, "")


def test_the_worker_notices_another_key_on_the_api_server(served, monkeypatch):
    import requests

    requests.get(f"{served}/crew-webhooks/v1/health", timeout=10)  # the api-server reads its key now
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
        json.dumps({"conn_type": "crew_webhook_receiver", "host": served, "password": "another-" + KEY}),
    )
    usable, why = CrewWebhookReceiverHook().health()
    assert not usable and "holds another key" in why


def test_the_worker_notices_no_plugin_behind_the_address(monkeypatch):
    from airflow_provider_crew.hooks import webhook_receiver
    from airflow_provider_crew.testing import LocalCrewService

    webhook_receiver._health_cache.clear()
    with LocalCrewService() as elsewhere:  # an HTTP server that is not the plugin
        monkeypatch.setenv(
            "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
            json.dumps({"conn_type": "crew_webhook_receiver", "host": elsewhere.base_url, "password": KEY}),
        )
        usable, why = CrewWebhookReceiverHook().health()
    assert not usable and "without the provider's plugin behind it" in why


def test_the_test_action_asks_the_plugin_and_never_names_the_connection(served, monkeypatch):
    ok, message = CrewWebhookReceiverHook().test_connection()
    assert ok and message.startswith(f"OK: the provider's plugin at {served}/crew-webhooks wakes waits")
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
        json.dumps({"conn_type": "crew_webhook_receiver", "host": served, "password": "another-" + KEY}),
    )
    ok, message = CrewWebhookReceiverHook().test_connection()
    assert not ok and "holds another key" in message
    monkeypatch.setenv(
        "AIRFLOW_CONN_RANDOM_TEST_ID",
        json.dumps({"conn_type": "crew_webhook_receiver", "host": served, "password": "short"}),
    )
    ok, message = CrewWebhookReceiverHook("random_test_id").test_connection()
    assert not ok and "at least 24 characters" in message and "random_test_id" not in message


def test_answers_stay_whole_behind_the_api_servers_middleware(receiver, database):
    """The api-server streams answers through its middleware and gzips them, editing their headers in
    place: an answer object shared between requests came out marked gzip but plain the second time."""
    from fastapi import FastAPI, Request
    from fastapi.middleware.gzip import GZipMiddleware
    from fastapi.testclient import TestClient

    api_server = FastAPI()

    @api_server.middleware("http")
    async def passthrough(request: Request, call_next):  # a BaseHTTPMiddleware, as Airflow has
        return await call_next(request)

    api_server.add_middleware(GZipMiddleware, minimum_size=1, compresslevel=5)
    api_server.mount("/crew-webhooks", create_app())
    with TestClient(api_server) as client:
        path = wake_path("crew", DAG, RUN)
        for token in ("x" * 43, None, "y" * 43, run_token(KEY, DAG, RUN), run_token(KEY, DAG, RUN)):
            params = {"token": token} if token else {}
            answer = client.post(path, content=b'{"kickoff_id": "k-9"}', params=params)
            assert answer.json() in ({"detail": "Not Found"}, {"accepted": True, "waking": 0})


@pytest.mark.parametrize("change", ["removed", "other signature"])
def test_without_the_airflow_internal_it_wakes_nothing_and_says_why(
    receiver, database, monkeypatch, caplog, change
):
    """A future Airflow without ``handle_event_submit`` (or with another one): the health check says
    the wake is off, so that every task polls as before, the log says why, and a webhook gets 503
    and touches nothing."""
    import airflow.models.trigger as airflow_trigger
    from fastapi.testclient import TestClient

    if change == "removed":
        monkeypatch.delattr(airflow_trigger, "handle_event_submit")
    else:
        monkeypatch.setattr(airflow_trigger, "handle_event_submit", lambda event, *, ti, db: None)
    with TestClient(create_app()) as client, caplog.at_level("WARNING", logger=webhook_app.__name__):
        health = client.get("/v1/health", params={"nonce": "n"}).json()
        assert health["wake"] is False and health["reason"] == webhook_app.WHY_IN_THE_LOG
        answer = post(client, {"kickoff_id": "k-1"}, token=run_token(KEY, DAG, RUN))
    assert answer.status_code == 503 and database[0] == {"find": [], "apply": []}
    assert "handle_event_submit" in caplog.text
