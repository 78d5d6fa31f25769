"""The human-input webhook from an Airflow connection: its credential, and errors that name the
connection and its fields, never the credential."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.human_input import human_input_webhook, webhook_connection_extra


@pytest.mark.parametrize(
    ("conn", "message"),
    [
        ({"conn_type": "http", "host": "https://h.test/x"}, "has no password"),
        (
            {
                "conn_type": "http",
                "host": "https://h.test/x",
                "password": "p4ssw0rd-x",
                "extra": {"strategy": "basic"},
            },
            "strategy 'basic' needs the connection's login",
        ),
        (
            {
                "conn_type": "http",
                "host": "https://h.test/x",
                "password": "p4ssw0rd-x",
                "extra": {"strategy": "digest"},
            },
            "extra 'strategy' is 'digest'",
        ),
        ({"conn_type": "http", "password": "p4ssw0rd-x"}, "No human-input webhook URL"),
        (
            {"conn_type": "http", "host": "ftp://h.test/x", "password": "p4ssw0rd-x"},
            "is not a valid human-input webhook",
        ),
    ],
)
def test_human_input_webhook_connection_of_the_wrong_shape_is_named(monkeypatch, conn, message):
    monkeypatch.setenv("AIRFLOW_CONN_HUMAN_HOOK", json.dumps(conn))
    with pytest.raises(CrewConfigurationError, match=message) as caught:
        human_input_webhook(None, "human_hook")
    assert "p4ssw0rd-x" not in str(caught.value)


def test_human_input_webhook_from_connection_bearer_and_basic(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUMAN_HOOK",
        json.dumps({"conn_type": "http", "host": "https://h.test/x", "password": "tok-123456"}),
    )
    bearer = human_input_webhook(None, "human_hook").to_wire()
    assert bearer == {
        "url": "https://h.test/x",
        "authentication": {"strategy": "bearer", "token": "tok-123456"},
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUMAN_HOOK", json.dumps({"conn_type": "http", "login": "u", "password": "pw-123456"})
    )
    basic = human_input_webhook("https://other.test/h", "human_hook").to_wire()
    assert basic == {
        "url": "https://other.test/h",
        "authentication": {"strategy": "basic", "username": "u", "password": "pw-123456"},
    }


@pytest.mark.parametrize("raw", ["[1, 2]", "not json", '"text"'])
def test_an_extra_that_is_not_a_json_object_fails_naming_the_parameter(raw):
    with pytest.raises(
        CrewConfigurationError, match=r"human_input_webhook_conn_id='hook_x'.*not a JSON object"
    ):
        webhook_connection_extra(SimpleNamespace(conn_id="hook_x", extra=raw), "hook_x")


@pytest.mark.parametrize(
    ("raw", "expected"), [("", {}), (None, {}), ('{"strategy": "basic"}', {"strategy": "basic"})]
)
def test_an_empty_or_json_object_extra_is_read_as_a_dict(raw, expected):
    assert webhook_connection_extra(SimpleNamespace(conn_id="hook_x", extra=raw), "hook_x") == expected
