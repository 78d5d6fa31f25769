"""The webhook receiver: each DAG run's secret, the addresses a kickoff sends, the connection's checks.

The api-server side (the plugin) is in tests/plugins; the whole loop, with a real api-server and the
crew service's real webhooks, in tests/e2e/test_webhook_wake_e2e.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.webhook_receiver import (
    CrewWebhookReceiverHook,
    ReceiverConfig,
    receiver_config,
    run_token,
    token_matches,
)

KEY = "k" * 20 + "-receiver-key-0001"
OLD_KEY = "o" * 20 + "-receiver-key-0000"
RUN = "manual__2026-11-24T02:09:28.215668+00:00"
CREW = CrewConnectionConfig(base_url="https://crew.example.test", token="t", safety_poll_interval=120)


def task_instance(dag_id: str = "dag", task_id: str = "kickoff", map_index: int = -1) -> SimpleNamespace:
    return SimpleNamespace(dag_id=dag_id, run_id=RUN, task_id=task_id, map_index=map_index)


def receiver_env(monkeypatch, host: str = "https://airflow.example.test/base", password: str = KEY) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
        json.dumps({"conn_type": "crew_webhook_receiver", "host": host, "password": password}),
    )


def test_a_run_token_is_bound_to_its_key_dag_and_run():
    token = run_token(KEY, "dag", RUN)
    assert token == run_token(KEY, "dag", RUN)
    assert (
        len(
            {
                token,
                run_token(KEY, "dag", RUN + "x"),
                run_token(KEY, "dag2", RUN),
                run_token(OLD_KEY, "dag", RUN),
            }
        )
        == 4
    )
    # The parts are separated, so moving characters between dag and run makes another token.
    assert run_token(KEY, "ab", "c") != run_token(KEY, "a", "bc")
    assert token_matches((KEY,), "dag", RUN, token)
    assert not token_matches((KEY,), "dag", "other-run", token)
    assert not token_matches((KEY,), "dag", RUN, token[:-1] + ("A" if token[-1] != "A" else "B"))


def test_rotation_accepts_addresses_signed_with_a_key_still_listed():
    """New addresses are signed with the first key; every listed key verifies (docs/webhook-wake.md)."""
    old_address = run_token(OLD_KEY, "dag", RUN)
    assert token_matches((KEY, OLD_KEY), "dag", RUN, old_address)  # during the rotation
    assert not token_matches((KEY,), "dag", RUN, old_address)  # once the old key is dropped


def test_the_completion_address_carries_the_token_as_its_token_query_parameter(monkeypatch):
    receiver_env(monkeypatch)
    wake = CrewWebhookReceiverHook().addresses(task_instance("crew/dag"), CREW)
    token = run_token(KEY, "crew/dag", RUN)

    crew = urlsplit(wake.crew_webhook_url)
    assert crew.scheme == "https" and crew.netloc == "airflow.example.test"  # no userinfo
    assert crew.username is None and crew.password is None and "@" not in wake.crew_webhook_url
    assert parse_qs(crew.query, strict_parsing=True) == {"token": [token]} and crew.fragment == ""
    assert token not in crew.path
    assert (
        crew.path == "/base/crew-webhooks/v1/crew/crew%2Fdag/manual__2026-11-24T02%3A09%3A28.215668%2B00%3A00"
    )
    assert unquote(crew.path.rsplit("/", 1)[1]) == RUN
    assert wake.crew_webhook_url == f"https://airflow.example.test{crew.path}?token={token}"

    human = wake.human_input_webhook.to_wire()
    assert human["authentication"] == {"strategy": "bearer", "token": token}
    assert token not in human["url"] and human["url"].endswith(
        "/crew-webhooks/v1/human/crew%2Fdag/" + crew.path.rsplit("/", 1)[1]
    )
    assert wake.safety_poll_interval == 120
    assert token not in repr(wake) and KEY not in repr(CrewWebhookReceiverHook().config)


def test_a_run_token_needs_no_quoting_in_a_query_string():
    """URL-safe base64 without padding: the query value is the token as it is, for any client."""
    from urllib.parse import quote

    for run in (RUN, "x", "é/?&=#" * 10):
        token = run_token(KEY, "dag", run)
        assert quote(token, safe="") == token and len(token) == 43


@pytest.mark.parametrize(
    ("host", "password", "message"),
    [
        ("", KEY, r"'Airflow address as crews reach it' is empty"),
        ("http://airflow.example.test", KEY, r"uses http://"),
        ("airflow.example.test", KEY, r"has no scheme"),
        ("https://airflow.example.test", "", r"has no key: put a random key of at least 24"),
        ("https://airflow.example.test", "short", r"every key in the password must have at least 24"),
        ("https://airflow.example.test", f"{KEY} short", r"every key in the password must have at least 24"),
    ],
)
def test_a_wrong_receiver_connection_names_the_connection_and_the_field(host, password, message):
    connection = SimpleNamespace(host=host, password=password, port=None, schema=None)
    with pytest.raises(CrewConfigurationError, match=rf"Connection 'crew_webhook_receiver'.*{message}"):
        ReceiverConfig.from_connection(connection, "crew_webhook_receiver")


def test_keys_are_listed_new_first_separated_by_spaces_or_commas():
    connection = SimpleNamespace(
        host="http://127.0.0.1:8080", password=f" {KEY}, {OLD_KEY} ", port=None, schema=None
    )
    config = ReceiverConfig.from_connection(connection, "crew_webhook_receiver")
    assert config.keys == (KEY, OLD_KEY) and config.base_url == "http://127.0.0.1:8080"


def test_a_missing_receiver_connection_says_so(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER", raising=False)
    with pytest.raises(
        CrewConfigurationError, match=r"'crew_webhook_receiver' is not defined where this runs"
    ):
        CrewWebhookReceiverHook().config  # noqa: B018


def test_one_check_of_the_receiver_connection_for_the_worker_and_the_api_server():
    """The hook (a worker, Airflow's Test action) and the plugin (the api-server) look the connection up
    each their own way, and check it with the same function: only where it is missing differs."""
    from airflow_provider_crew._compat import AirflowNotFoundException

    def missing(conn_id):
        raise AirflowNotFoundException(conn_id)

    with pytest.raises(CrewConfigurationError, match=r"^Connection 'r' is not defined for the api-server\.$"):
        receiver_config(missing, "r", where="for the api-server")
    with pytest.raises(CrewConfigurationError, match=r"^The connection is not defined where this runs\.$"):
        receiver_config(missing, "r", name_connection=False)
    keyless = SimpleNamespace(host="http://127.0.0.1:8080", password="", port=None, schema=None)
    with pytest.raises(CrewConfigurationError, match=r"^The connection has no key"):
        receiver_config(lambda conn_id: keyless, "r", name_connection=False)
    good = SimpleNamespace(host="http://127.0.0.1:8080", password=KEY, port=None, schema=None)
    assert receiver_config(lambda conn_id: good, "r") == ReceiverConfig("http://127.0.0.1:8080", (KEY,))


def test_the_health_proof_and_the_run_tokens_use_keys_derived_apart():
    """The api-server signs any caller's nonce for ``/health``: with a key derived for that alone, so
    no nonce (not even a run token's own input) gets a run's token signed (docs/webhook-wake.md)."""
    import base64
    import hashlib
    import hmac

    from airflow_provider_crew.hooks.webhook_receiver import (
        _TOKEN_CONTEXT,
        HEALTH_KEY_PURPOSE,
        RUN_TOKEN_KEY_PURPOSE,
        derived_key,
        key_check,
    )

    def as_token(digest: bytes) -> str:
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    health, runs = derived_key(KEY, HEALTH_KEY_PURPOSE), derived_key(KEY, RUN_TOKEN_KEY_PURPOSE)
    assert len({health, runs, KEY.encode()}) == 3
    assert derived_key(OLD_KEY, HEALTH_KEY_PURPOSE) != health  # each key derives its own
    token_input = b"\0".join((_TOKEN_CONTEXT, b"dag", RUN.encode()))
    token = run_token(KEY, "dag", RUN)
    assert token == as_token(hmac.new(runs, token_input, hashlib.sha256).digest())
    # A health proof for a run token's own input as nonce is not the token...
    assert as_token(bytes.fromhex(key_check(KEY, token_input.decode()))) != token
    # ...nor would it be without its "key-check" prefix: the health key is another key.
    assert as_token(hmac.new(health, token_input, hashlib.sha256).digest()) != token


class _Answer:
    def __init__(self, body: dict) -> None:
        self.status_code, self.content, self._body = 200, json.dumps(body).encode(), body

    def json(self) -> dict:
        return self._body


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        (None, "holds another key for the receiver connection than this worker"),
        ("0.9.0", "the api-server's plugin (provider 0.9.0) does not prove the key this worker"),
    ],
)
def test_the_health_check_refuses_a_proof_under_another_key(monkeypatch, version, reason):
    """A plugin proving another key (or one another release derives otherwise) turns the wake off."""
    import requests

    from airflow_provider_crew import __version__
    from airflow_provider_crew.hooks.webhook_receiver import key_check

    receiver_env(monkeypatch)

    def get(url, params, **_):
        return _Answer(
            {
                "plugin": "airflow-provider-crew",
                "version": version or __version__,
                "wake": True,
                "key_check": key_check(OLD_KEY, params["nonce"]),
            }
        )

    monkeypatch.setattr(requests, "get", get)
    usable, why = CrewWebhookReceiverHook._ask_health(CrewWebhookReceiverHook().config)
    assert not usable and reason in why
    monkeypatch.setattr(
        requests,
        "get",
        lambda url, params, **_: _Answer(
            {"plugin": "airflow-provider-crew", "wake": True, "key_check": key_check(KEY, params["nonce"])}
        ),
    )
    assert CrewWebhookReceiverHook._ask_health(CrewWebhookReceiverHook().config) == (True, "")


def test_the_event_stream_subscription_names_the_task_instance_and_carries_its_own_token(monkeypatch):
    from airflow_provider_crew.crew_events import SUBSCRIBED_EVENTS
    from airflow_provider_crew.hooks.webhook_receiver import EVENTS_TOKEN_KEY_PURPOSE

    receiver_env(monkeypatch)
    streaming = CREW.model_copy(update={"wake_by_webhook": True, "event_stream": True})
    wake = CrewWebhookReceiverHook().addresses(task_instance("crew/dag", "review.round_1", 3), streaming)
    subscription = wake.event_stream
    assert subscription is not None
    body = subscription.to_wire()
    token = run_token(KEY, "crew/dag", RUN, EVENTS_TOKEN_KEY_PURPOSE)
    assert body == {
        "events": list(SUBSCRIBED_EVENTS),
        "url": "https://airflow.example.test/base/crew-webhooks/v1/events/crew%2Fdag/"
        "manual__2026-11-24T02%3A09%3A28.215668%2B00%3A00/review.round_1/3",
        "realtime": False,
        "authentication": {"strategy": "bearer", "token": token},
    }
    # Its own token: the completion address's (in a query string a proxy may log) does not post events.
    assert token != run_token(KEY, "crew/dag", RUN) and token not in body["url"]
    assert token not in repr(wake) and token not in repr(subscription)
    assert CrewWebhookReceiverHook().addresses(task_instance(), CREW).event_stream is None
    # The connection's opt-in to keep model responses rides in the address, for the receiver to read.
    keeping = streaming.model_copy(update={"event_stream_content": True})
    kept = CrewWebhookReceiverHook().addresses(task_instance(), keeping).event_stream
    assert kept is not None and kept.url.endswith("/kickoff/-1?content=1")
