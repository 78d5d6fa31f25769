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
    run_token,
    token_matches,
)

KEY = "k" * 20 + "-receiver-key-0001"
OLD_KEY = "o" * 20 + "-receiver-key-0000"
RUN = "manual__2026-11-24T02:09:28.215668+00:00"
CREW = CrewConnectionConfig(base_url="https://crew.example.test", token="t", safety_poll_interval=120)


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
    wake = CrewWebhookReceiverHook().addresses("crew/dag", RUN, CREW)
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
