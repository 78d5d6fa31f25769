"""The provider must not make Airflow log "Skipping masking for a secret as it's too short (<5 chars)".

Airflow's ``Connection.extra_dejson`` hands every extra value to the secret masker, which logs that
warning once per process for any string shorter than 5 characters, secret or not: ``"true"``,
``"120"`` (the URI form makes every extra a string), ``"auto"``. The provider reads extras without
``extra_dejson`` and masks only the secret an extra can hold (``token``).

Airflow 3.1+ also walks the extra itself when it looks a connection up (``get_uri()`` for its
secret cache), so with short string extras the line can still come from Airflow. The tests below
check the provider's part: it never calls ``extra_dejson``, and a real run with the connections in
the documented JSON form prints no such line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

import pytest

from airflow_provider_crew.testing.dag_runs import DEFAULT_HUMAN_WEBHOOK_TOKEN

NOISE = "Skipping masking for a secret"
SHORT_EXTRAS = {"read_timeout": "120", "verify_tls": "true", "retry_limit": "2", "status_path_style": "auto"}


def connection_classes() -> list[type]:
    """The connection classes a lookup can return on the running Airflow version."""
    classes = []
    for module in ("airflow.sdk.definitions.connection", "airflow.models.connection"):
        with contextlib.suppress(ImportError):
            classes.append(__import__(module, fromlist=["Connection"]).Connection)
    return classes


@pytest.fixture
def extra_dejson_callers(monkeypatch) -> list[str]:
    """The modules that read ``extra_dejson`` / ``aextra_dejson`` directly, recorded as they do."""
    callers: list[str] = []
    for klass in connection_classes():
        if isinstance(vars(klass).get("extra_dejson"), property):
            original = vars(klass)["extra_dejson"]

            def spy(self, _original=original):
                callers.append(sys._getframe(1).f_globals.get("__name__", "?"))
                return _original.fget(self)

            monkeypatch.setattr(klass, "extra_dejson", property(spy))
        if "aextra_dejson" in vars(klass):
            async_original = vars(klass)["aextra_dejson"]

            async def async_spy(self, _original=async_original):
                callers.append(sys._getframe(1).f_globals.get("__name__", "?"))
                return await _original(self)

            monkeypatch.setattr(klass, "aextra_dejson", async_spy)
    return callers


def test_the_provider_never_hands_connection_extras_to_the_masker(monkeypatch, extra_dejson_callers):
    from airflow_provider_crew.hooks.crew import CrewHook
    from airflow_provider_crew.hooks.human_input import human_input_webhook

    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_SHORT",
        json.dumps(
            {
                "conn_type": "crew",
                "host": "https://crew.example.test",
                "password": "tok-123456",
                "extra": SHORT_EXTRAS,
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_HOOK_SHORT",
        json.dumps(
            {
                "conn_type": "generic",
                "host": "https://hooks.example.test/h",
                "password": "tok-654321",
                "extra": {"strategy": "bearer", "note": "ok"},
            }
        ),
    )

    config = CrewHook(crew_conn_id="crew_short").config
    async_config = asyncio.run(CrewHook(crew_conn_id="crew_short").aget_config())
    webhook = human_input_webhook(None, "hook_short").to_wire()

    # The extras were read, with their meaning...
    assert (config.read_timeout, config.verify_tls, config.retry_limit) == (120.0, True, 2)
    assert config.status_path_style.value == "auto"
    assert async_config == config
    assert webhook["authentication"] == {"strategy": "bearer", "token": "tok-654321"}
    # ...and not through extra_dejson, which would log the warning for "120", "true", "2", "auto".
    assert [caller for caller in extra_dejson_callers if caller.startswith("airflow_provider_crew")] == []


def test_a_token_kept_in_the_extra_is_still_masked(monkeypatch):
    from airflow.providers.common.compat.sdk import redact

    from airflow_provider_crew.hooks.crew import CrewHook

    token = "tok-in-extra-5d81c0"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_EXTRA_TOKEN",
        json.dumps(
            {
                "conn_type": "crew",
                "host": "https://crew.example.test",
                "extra": {"token": token, "verify_tls": True},
            }
        ),
    )
    config = CrewHook(crew_conn_id="crew_extra_token").config

    assert config.token == token
    assert redact(f"sent {token} there") == "sent *** there"


# Steps of 1 s: a task reads the status once before deferring, and the review crew's 0.2 s phases end
# before that read on a loaded machine; this test is about the trigger's (async) connection path.
@pytest.mark.integration
@pytest.mark.crew_service(speed=0.05)
def test_a_run_with_connection_extras_in_the_documented_form_logs_no_masking_warning(run_dag, crew_service):
    receiver = crew_service.webhooks
    crew = crew_service.connection_dict(crew="review")
    crew["extra"] = {"read_timeout": 120, "verify_tls": True, "retry_limit": 2}
    webhook = {
        "conn_type": "generic",
        "host": receiver.url_for("human"),
        "password": DEFAULT_HUMAN_WEBHOOK_TOKEN,
        "extra": {"strategy": "bearer"},
    }
    run = run_dag(
        "example_crew_human_review",
        deferrable=True,
        extra_env={
            "AIRFLOW_CONN_CREW_REVIEW": json.dumps(crew),
            "AIRFLOW_CONN_CREW_REVIEW_WEBHOOK": json.dumps(webhook),
        },
    )

    assert run.state == "success", run.stdout[-3000:]
    assert "CrewStatusTrigger" in run.stdout  # the triggerer's (async) connection path ran too
    assert receiver.wait_for_count("human", 2, timeout=10)  # the webhook connection was read and used
    assert [line for line in run.stdout.splitlines() if NOISE in line] == []
