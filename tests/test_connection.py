"""The `crew` connection: every way users write it, and every bad configuration named."""

from __future__ import annotations

import json

import pytest

from airflow_provider_crew.connection import (
    CrewConnectionConfig,
    CrewConnectionError,
    StatusPathStyle,
    TokenKind,
)
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.crew import CrewHook


def config(**fields):
    base = {"conn_id": "crew_default", "host": "https://crew.example.test", "password": "s3cret-tok", "extra": {}}
    return CrewConnectionConfig.from_connection_fields(**(base | fields))


def test_defaults():
    cfg = config()
    assert cfg.base_url == "https://crew.example.test"
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.verify_tls, cfg.retry_limit) == (10.0, 60.0, True, 3)
    assert cfg.status_path_style is StatusPathStyle.AUTO
    assert cfg.token_kind is TokenKind.ORGANIZATION
    assert "s3cret-tok" not in repr(cfg)


def test_extras_plain_and_with_the_old_form_prefix():
    cfg = config(
        extra={
            "read_timeout": "12.5",
            "extra__crew__connect_timeout": 3,
            "verify_tls": "false",
            "retry_limit": "0",
            "status_path_style": "Deployed",
            "token_kind": "user",
        }
    )
    assert (cfg.read_timeout, cfg.connect_timeout, cfg.verify_tls, cfg.retry_limit) == (12.5, 3.0, False, 0)
    assert cfg.status_path_style is StatusPathStyle.DEPLOYED
    assert cfg.token_kind is TokenKind.USER


def test_base_url_keeps_a_path_and_drops_the_trailing_slash():
    assert config(host="https://gw.example.test/crews/abc/").base_url == "https://gw.example.test/crews/abc"


def test_uri_form_puts_port_and_path_back():
    assert config(host="http://127.0.0.1", port=8787, schema="v1").base_url == "http://127.0.0.1:8787/v1"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"host": None}, "no host. Set 'Crew base URL'"),
        ({"host": "  "}, "no host"),
        ({"host": "crew.example.test"}, "has no scheme. Write the full base URL, e.g. https://crew.example.test"),
        ({"host": "ftp://crew.example.test"}, "is not an http\\(s\\) URL"),
        ({"password": ""}, "empty bearer token"),
        ({"password": None}, "empty bearer token"),
        ({"extra": {"status_path_style": "sideways"}}, "'status_path_style' is 'sideways'; it must be one of"),
        ({"extra": {"read_timeout": -1}}, "'read_timeout' must not be negative"),
        ({"extra": {"connect_timeout": "soon"}}, "'connect_timeout' must be a number of seconds"),
        ({"extra": {"retry_limit": 1.5}}, "'retry_limit' must be a whole number"),
        ({"extra": {"verify_tls": "maybe"}}, "'verify_tls' must be true or false"),
        ({"extra": {"token_kind": "admin"}}, "'token_kind' is 'admin'"),
    ],
)
def test_bad_configuration_names_the_field(fields, expected):
    with pytest.raises(CrewConnectionError, match=expected) as caught:
        config(**fields)
    assert str(caught.value).startswith("Connection 'crew_default': ")


@pytest.mark.parametrize(
    "env_value",
    [
        json.dumps({"conn_type": "crew", "host": "https://crew.example.test/v1", "password": "t0ken-from-json",
                    "extra": {"read_timeout": 5}}),
        "crew://https://:t0ken-from-json@crew.example.test%2Fv1?read_timeout=5",
    ],
    ids=["json", "uri"],
)
def test_connection_from_environment_as_json_and_uri(monkeypatch, env_value):
    monkeypatch.setenv("AIRFLOW_CONN_MY_CREW", env_value)
    cfg = CrewHook(crew_conn_id="my_crew").config
    assert cfg.base_url == "https://crew.example.test/v1"
    assert cfg.token == "t0ken-from-json"
    assert cfg.read_timeout == 5.0


def test_hook_wraps_configuration_errors_as_crew_configuration_error(crew_conn):
    crew_conn(host="https://crew.example.test", read_timeout=-5)
    with pytest.raises(CrewConfigurationError, match="'read_timeout' must not be negative"):
        CrewHook().config  # noqa: B018
