"""The `crew` connection: every way users write it, and every bad configuration named."""

from __future__ import annotations

import json
import logging
import socket
from types import SimpleNamespace

import pytest

from airflow_provider_crew.connection import config_from_connection
from airflow_provider_crew.connection_form import CONN_FIELDS, StatusPathStyle, TokenKind
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.crew import CrewHook


def config(conn_id: str | None = "crew_default", **fields):
    """A ``crew`` connection with ``fields`` read as the hook reads it; errors name ``conn_id`` (None: none)."""
    base = {"conn_type": "crew", "host": "https://crew.example.test", "password": "s3cret-tok", "extra": {}}
    connection = SimpleNamespace(**({"schema": None, "port": None} | base | fields), conn_id=conn_id)
    return config_from_connection(connection, str(conn_id), name_connection=conn_id is not None)


def test_defaults():
    cfg = config()
    assert cfg.base_url == "https://crew.example.test"
    assert (cfg.connect_timeout, cfg.read_timeout, cfg.verify_tls, cfg.retry_limit) == (10.0, 60.0, True, 3)
    assert cfg.status_path_style is StatusPathStyle.AUTO
    assert cfg.credential_kind is TokenKind.ORGANIZATION
    assert "s3cret-tok" not in repr(cfg)


def test_extras_plain_and_with_the_old_form_prefix():
    cfg = config(
        extra={
            "read_timeout": "12.5",
            "extra__crew__connect_timeout": 3,
            "verify_tls": "false",
            "retry_limit": "0",
            "status_path_style": "Deployed",
            "credential_kind": "user",
        }
    )
    assert (cfg.read_timeout, cfg.connect_timeout, cfg.verify_tls, cfg.retry_limit) == (12.5, 3.0, False, 0)
    assert cfg.status_path_style is StatusPathStyle.DEPLOYED
    assert cfg.credential_kind is TokenKind.USER


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"credential_kind": "user"}, TokenKind.USER),
        ({"extra__crew__credential_kind": "user"}, TokenKind.USER),
        ({"credential_kind": ""}, TokenKind.ORGANIZATION),
        # No other name is read for it: an extra the form does not know is left alone.
        ({"token_kind": "user"}, TokenKind.ORGANIZATION),
    ],
    ids=["plain", "form-prefix", "empty", "unknown-name"],
)
def test_the_token_kind_is_read_from_credential_kind_only(extra, expected):
    assert config(extra=extra).credential_kind is expected


def test_base_url_keeps_a_path_and_drops_the_trailing_slash():
    assert config(host="https://gw.example.test/crews/abc/").base_url == "https://gw.example.test/crews/abc"


def test_uri_form_puts_port_and_path_back():
    assert config(host="http://127.0.0.1", port=8787, schema="v1").base_url == "http://127.0.0.1:8787/v1"


@pytest.mark.parametrize(
    ("host", "port", "base_url"),
    [
        ("https://crew.example.test", 8443, "https://crew.example.test:8443"),
        ("https://crew.example.test", 443, "https://crew.example.test"),  # the scheme's default: left out
        ("https://crew.example.test:8443/v1", 8443, "https://crew.example.test:8443/v1"),  # both agree
        ("https://crew.example.test:8443", None, "https://crew.example.test:8443"),
        # Airflow's Test action sends port 0 for an empty Port field (Number(null) in its UI).
        ("https://crew.example.test", 0, "https://crew.example.test"),
    ],
)
def test_the_port_field(host, port, base_url):
    assert config(host=host, port=port).base_url == base_url


@pytest.mark.parametrize(
    "host",
    [
        "http://127.0.0.1:8787",
        "http://127.9.0.1",
        "http://localhost:8080/crew",
        "http://LOCALHOST",
        "http://[::1]:8787",
        "https://crew.example.test",
        "https://10.0.0.5:8443",
    ],
)
def test_https_everywhere_http_only_on_this_machine(host):
    assert config(host=host).base_url == host.rstrip("/")


@pytest.mark.parametrize(
    "host",
    [
        "http://crew.internal.example",
        "http://10.0.0.5:8787",
        "http://localhost.example.com",
        "http://0.0.0.0:8787",
        "http://[::ffff:10.0.0.5]",
    ],
)
def test_http_to_another_machine_is_refused_with_the_rule(host):
    with pytest.raises(CrewConfigurationError) as caught:
        config(host=host)
    message = str(caught.value)
    assert f"'Crew base URL' {host!r} uses http://. Write https://{host.split('://')[1]}: " in message
    assert "accepted only for a service on the same machine (localhost, 127.0.0.1 or [::1])" in message
    assert "unencrypted" in message


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"host": None}, "'Crew base URL' is empty. Set it to the https:// address."),
        ({"host": "  "}, "'Crew base URL' is empty"),
        (
            {"host": "crew.example.test"},
            "'Crew base URL' 'crew.example.test' has no scheme. Write the full address, e.g. https://crew.example.test",
        ),
        (
            {"host": "ftp://crew.example.test"},
            "'Crew base URL' 'ftp://crew.example.test' is not an https:// URL. Write it as https://",
        ),
        (
            {"host": "https://crew.example.test:99999"},
            "'Crew base URL' 'https://crew.example.test:99999' is not a valid URL (Port out of range",
        ),
        ({"host": "https://[::1"}, "'Crew base URL' 'https://[::1' is not a valid URL (Invalid IPv6 URL)"),
        (
            {"host": "https://crew.example.test:8443", "port": 9443},
            "'Crew base URL' 'https://crew.example.test:8443' says port 8443 but 'Port' says 9443. Make them agree",
        ),
        ({"port": 70000}, "'Port' must be a number from 1 to 65535 or empty, got 70000."),
        (
            {"password": ""},
            "'Bearer token' (the connection's password) is empty. Put the token from the crew's",
        ),
        ({"password": None}, "'Bearer token' (the connection's password) is empty"),
        (
            {"extra": {"status_path_style": "sideways"}},
            "'Status path style' (extra 'status_path_style') must be one of 'contract', 'deployed', 'auto', "
            "got 'sideways'. Leave it empty for the default, \"auto\".",
        ),
        (
            {"extra": {"read_timeout": -1}},
            "'Read time-out (s)' (extra 'read_timeout') must be 0 or more, got -1. Leave it empty for the "
            "default, 60.",
        ),
        ({"extra": {"safety_poll_interval": 0}}, "(extra 'safety_poll_interval') must be 1 or more, got 0."),
        (
            {"extra": {"event_stream": True}},
            "'Hear the crew's event stream' (extra 'event_stream') needs 'Wake waits by webhook' (extra "
            "'wake_by_webhook'): the events reach Airflow through the same receiver.",
        ),
        (
            {"extra": {"connect_timeout": "soon"}},
            "(extra 'connect_timeout') must be a number of seconds, got 'soon'",
        ),
        ({"extra": {"retry_limit": 1.5}}, "(extra 'retry_limit') must be a whole number, got 1.5."),
        ({"extra": {"retry_limit": True}}, "(extra 'retry_limit') must be a whole number, got 'True'."),
        (
            {"extra": {"verify_tls": "maybe"}},
            "'Verify TLS certificate' (extra 'verify_tls') must be true or false (yes/no, on/off and 1/0 are "
            "read too), got 'maybe'. Leave it empty for the default, true.",
        ),
        (
            {"extra": {"credential_kind": "admin"}},
            "(extra 'credential_kind') must be one of 'organization', 'user', got 'admin'",
        ),
    ],
)
def test_bad_configuration_names_the_field(fields, expected):
    with pytest.raises(CrewConfigurationError) as caught:
        config(**fields)
    assert str(caught.value).startswith("Connection 'crew_default': ")
    assert expected in str(caught.value)


@pytest.mark.parametrize("raw", ["1e309", "-1e309", "nan", "inf", float("inf"), float("nan")])
@pytest.mark.parametrize("name", ["connect_timeout", "read_timeout", "retry_delay", "retry_budget"])
def test_a_number_of_seconds_that_is_not_finite_is_named_as_such(name, raw):
    """1e309 reads as infinity: it was reported as "negative". The message says what is wrong."""
    with pytest.raises(CrewConfigurationError) as caught:
        config(extra={name: raw})
    label = CONN_FIELDS[name]["label"]
    assert f"'{label}' (extra '{name}') must be a finite number of seconds, got {raw!r}." in str(caught.value)
    assert "negative" not in str(caught.value)


@pytest.mark.parametrize("raw", ["1e309", float("inf")])
def test_a_whole_number_that_is_not_finite_is_named_as_such(raw):
    with pytest.raises(CrewConfigurationError, match=r"\(extra 'retry_limit'\) must be a whole number, got "):
        config(extra={"retry_limit": raw})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("FALSE", False),
        ("yes", True),
        ("no", False),
        ("on", True),
        ("off", False),
        ("1", True),
        ("0", False),
    ],
)
def test_a_boolean_extra_reads_the_spellings_its_error_names(raw, expected):
    """The URI form makes every extra a string: each spelling the error message names is read as it says."""
    assert config(extra={"verify_tls": raw, "wake_by_webhook": raw}).verify_tls is expected


@pytest.mark.parametrize(
    ("fields", "expected", "secret"),
    [
        ({"password": "sk-live-SECRET\nPART2"}, "holds U\\+000A at character 15", "SECRET"),
        ({"password": "sk-live-SECRET\r\nPART2"}, "holds U\\+000D at character 15", "SECRET"),
        ({"password": "abc\u200bdefSECRET"}, "holds U\\+200B at character 4", "SECRET"),
        ({"password": "sk live SECRET"}, "holds U\\+0020 at character 3", "SECRET"),
        ({"host": "https://admin:SECRET@crew.example.test"}, "holds a login or password", "SECRET"),
        ({"host": "admin:SECRET@crew.example.test"}, "holds a login or password", "SECRET"),
    ],
)
def test_a_token_or_address_that_would_leak_fails_without_showing_the_secret(fields, expected, secret):
    """A token an HTTP header cannot carry failed every request late, in errors quoting the header; a
    login in the address appeared in every log line naming it."""
    with pytest.raises(CrewConfigurationError, match=expected) as caught:
        config(**fields)
    assert secret not in str(caught.value)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("https://crew.example.test/?env=prod", "has a query or fragment"),
        ("https://crew.example.test/v1#top", "has a query or fragment"),
        ("https://crew example.test", "contains a space"),
    ],
)
def test_an_address_requests_could_not_be_appended_to_is_refused(host, expected):
    with pytest.raises(CrewConfigurationError, match=expected):
        config(host=host)


def test_a_blank_password_leaves_the_token_extra_in_place():
    assert config(password="   ", extra={"token": "extra-token-1"}).token == "extra-token-1"


def test_without_a_connection_id_errors_name_only_the_field():
    """Airflow's Test action tests under a random id: its messages leave the id out."""
    with pytest.raises(CrewConfigurationError) as caught:
        config(conn_id=None, host="crew.example.test")
    assert str(caught.value) == (
        "'Crew base URL' 'crew.example.test' has no scheme. Write the full address, e.g. https://crew.example.test."
    )


@pytest.mark.parametrize(
    "env_value",
    [
        json.dumps(
            {
                "conn_type": "crew",
                "host": "https://crew.example.test/v1",
                "password": "t0ken-from-json",
                "extra": {"read_timeout": 5},
            }
        ),
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


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Airflow's Test action tests a connection under a random id like this one.
RANDOM_ID = "DUiloSWe"


def airflow_test_action(monkeypatch, **fields) -> tuple[bool, str]:
    """What Airflow's api-server does for the Test action: the connection under a random id,
    exported as a URI in AIRFLOW_CONN_<ID>, then ``Connection.test_connection()``."""
    from airflow.models.connection import Connection

    conn = Connection(conn_id=RANDOM_ID, conn_type="crew", **fields)
    monkeypatch.setenv(f"AIRFLOW_CONN_{RANDOM_ID.upper()}", conn.get_uri())
    ok, message = conn.test_connection()
    assert RANDOM_ID.lower() not in message.lower()
    return ok, message


@pytest.mark.integration
@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("{base_url}", None),
        ("{base_url}", 0),  # an empty Port field, as Airflow 3.1-3.2's Test action sends it
        ("http://127.0.0.1", "{port}"),  # the port in the Port field
        ("{base_url}", "{port}"),  # in both
    ],
    ids=["port-in-url", "port-0", "port-field", "both"],
)
def test_airflows_test_action_with_a_good_token(crew_service, monkeypatch, host, port):
    service_port = int(crew_service.base_url.rsplit(":", 1)[1])
    ok, message = airflow_test_action(
        monkeypatch,
        host=host.format(base_url=crew_service.base_url),
        port=int(port.format(port=service_port)) if isinstance(port, str) else port,
        password=crew_service.user_token,
        extra=json.dumps({"credential_kind": "user", "read_timeout": 5}),
    )
    assert (ok, message) == (
        True,
        f"OK: the crew at {crew_service.base_url} expects inputs ['topic', 'current_year'] (user token).",
    )
    assert crew_service.request_count("kickoff") == 0


@pytest.mark.integration
def test_the_test_action_and_the_task_name_an_extra_the_provider_does_not_read(
    crew_service, monkeypatch, caplog
):
    """A misspelt extra is ignored and its default used: say so where the user looks."""
    extra = json.dumps({"read_timout": 5, "extra__crew__verify_tls": True, "colour": "blue"})
    ok, message = airflow_test_action(
        monkeypatch, host=crew_service.base_url, port=None, password=crew_service.user_token, extra=extra
    )
    assert ok and message.endswith(
        "Extras the crew provider does not read: 'read_timout' (did you mean 'read_timeout'?), 'colour'."
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_TYPO",
        json.dumps(
            {
                "conn_type": "crew",
                "host": crew_service.base_url,
                "password": "tok-12345",
                "extra": {"read_timout": 5},
            }
        ),
    )
    # Airflow's task logger does not reach caplog: read the hook's lines from a plain logger.
    monkeypatch.setattr(CrewHook, "log", property(lambda self: logging.getLogger("tests.connection")))
    with caplog.at_level("WARNING", logger="tests.connection"):
        assert CrewHook("crew_typo").config.read_timeout == 60  # the default: the extra was not read
    assert "Connection 'crew_typo': Extras the crew provider does not read: 'read_timout'" in caplog.text


@pytest.mark.integration
def test_airflows_test_action_with_a_bad_token(crew_service, monkeypatch):
    ok, message = airflow_test_action(monkeypatch, host=crew_service.base_url, password="not-the-token-123")
    assert ok is False
    assert message.startswith(f"Bad token: the crew at {crew_service.base_url} rejected the token (401).")
    assert "not-the-token-123" not in message


@pytest.mark.integration
def test_airflows_test_action_with_nothing_listening(monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    ok, message = airflow_test_action(monkeypatch, host=url, password="tok-abcdef")
    assert ok is False
    assert message.startswith(f"Unreachable: GET / to {url}/ failed after 1 attempt(s)")
    assert "tok-abcdef" not in message


@pytest.mark.integration
def test_airflows_test_action_names_the_field_not_the_random_id(monkeypatch):
    ok, message = airflow_test_action(monkeypatch, host="http://crew.internal.example", password="tok-abcdef")
    assert ok is False
    assert message.startswith("'Crew base URL' 'http://crew.internal.example' uses http://.")


def test_hook_wraps_configuration_errors_as_crew_configuration_error(crew_conn):
    crew_conn(host="https://crew.example.test", read_timeout=-5)
    with pytest.raises(CrewConfigurationError, match=r"\(extra 'read_timeout'\) must be 0 or more, got -5"):
        CrewHook().config  # noqa: B018


def test_the_event_stream_rides_on_the_wake_and_is_off_by_default():
    assert (config().event_stream, config().event_stream_realtime, config().event_stream_content) == (
        False,
        False,
        False,
    )
    streaming = config(extra={"wake_by_webhook": True, "event_stream": True, "event_stream_realtime": "yes"})
    assert (streaming.event_stream, streaming.event_stream_realtime) == (True, True)
