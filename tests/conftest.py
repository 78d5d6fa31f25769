"""Shared fixtures: a `crew` connection from the environment, as users configure it."""

from __future__ import annotations

import json

import pytest

TOKEN = "test-token-s3cr3t-value"
BASE_URL = "https://crew.example.test"


def crew_connection_json(host: str = BASE_URL, token: str = TOKEN, **extra: object) -> str:
    return json.dumps({"conn_type": "crew", "host": host, "password": token, "extra": extra})


@pytest.fixture
def crew_conn(monkeypatch: pytest.MonkeyPatch):
    """Install `crew_default` (and return a setter for other connections) through AIRFLOW_CONN_*."""

    def install(conn_id: str = "crew_default", host: str = BASE_URL, token: str = TOKEN, **extra: object) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", crew_connection_json(host, token, **extra))
        return conn_id

    install()
    return install


@pytest.fixture(autouse=True)
def _forget_learned_status_paths():
    """The hook learns a service's status path per process; every test starts without that memory."""
    from airflow_provider_crew.hooks.client.request import LEARNED_STATUS_PATHS

    LEARNED_STATUS_PATHS.forget()
    yield
    LEARNED_STATUS_PATHS.forget()
