"""The pytest plugin, the fixtures, the webhook receiver and the Airflow connection helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import requests

from airflow_provider_crew.testing import LocalCrewService, WebhookReceiver

HEAVY = ("airflow", "uvicorn", "aiohttp", "yaml", "starlette", "fastapi", "httpx")


def test_plugin_is_registered_by_entry_point(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("crew_service")
    assert plugin is not None
    assert plugin.__name__ == "airflow_provider_crew.testing.pytest_plugin"


def test_plugin_import_is_cheap() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import airflow_provider_crew.testing.pytest_plugin
        import airflow_provider_crew.testing
        print([m for m in {HEAVY!r} if m in sys.modules])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", "the plugin must not import these at start-up"


def test_fixture_defaults(crew_service: LocalCrewService) -> None:
    assert crew_service.running
    assert crew_service.startup_seconds is not None and crew_service.startup_seconds < 2.0
    assert crew_service.app.root_crew == "research"
    assert list(crew_service.app.crews) == ["research", "review", "structured"]
    assert crew_service.base_url == f"http://127.0.0.1:{crew_service.port}"
    assert crew_service.org_token != crew_service.user_token
    assert crew_service.executions == {} and crew_service.faults.rules == []


@pytest.mark.crew_service("review", status_path="deployed", speed=4, org_token="o", user_token="u")
def test_marker_configures_the_fixture(crew_service: LocalCrewService) -> None:
    assert crew_service.app.root_crew == "review"
    assert crew_service.app.config()["status_path"] == "deployed"
    assert crew_service.app.engine.speed == 4
    assert (crew_service.org_token, crew_service.user_token) == ("o", "u")
    assert requests.get(crew_service.base_url + "/", headers={"Authorization": "Bearer u"}, timeout=10).ok


@pytest.mark.parametrize("crew_service", ["structured"], indirect=True)
def test_indirect_parametrization(crew_service: LocalCrewService) -> None:
    assert crew_service.app.root_crew == "structured"


def test_fresh_state_per_test_part_one(crew_service: LocalCrewService) -> None:
    crew_service.faults.rate_limit(count=3)
    requests.get(crew_service.base_url + "/", timeout=10)
    assert crew_service.request_count("health") == 1


def test_fresh_state_per_test_part_two(crew_service: LocalCrewService) -> None:
    assert crew_service.faults.rules == [] and crew_service.request_count("health") == 0


def test_session_fixture_is_shared_and_resettable(crew_service_session: LocalCrewService) -> None:
    crew_service_session.reset()
    headers = crew_service_session.auth_headers()
    assert requests.get(crew_service_session.base_url + "/", headers=headers, timeout=10).text == "Healthy"
    assert crew_service_session.request_count("health") == 1
    crew_service_session.reset()
    assert crew_service_session.request_count("health") == 0


def test_crew_connection_fixture_sets_the_env_var(
    crew_connection: str, crew_service: LocalCrewService
) -> None:
    assert crew_connection == "crew_default"
    conn = json.loads(os.environ["AIRFLOW_CONN_CREW_DEFAULT"])
    assert conn == {"conn_type": "crew", "host": crew_service.base_url, "password": crew_service.org_token}


def test_connection_helpers(crew_service: LocalCrewService) -> None:
    env = crew_service.connection_env("my_crew", token="user", crew="review", timeout=5)
    assert list(env) == ["AIRFLOW_CONN_MY_CREW"]
    assert json.loads(env["AIRFLOW_CONN_MY_CREW"]) == {
        "conn_type": "crew",
        "host": crew_service.url_for_crew("review"),
        "password": crew_service.user_token,
        "extra": {"timeout": 5},
    }
    uri = crew_service.connection_uri()
    assert uri.startswith("crew://:crew-test-org-token@http%3A%2F%2F127.0.0.1%3A")


def test_connection_uri_and_json_parse_in_airflow(crew_service: LocalCrewService, tmp_path: Path) -> None:
    """The strings work with Airflow's own Connection parser (run in a subprocess: Airflow is heavy)."""
    code = textwrap.dedent(
        """
        import json, sys
        from airflow.models.connection import Connection
        uri, js = sys.argv[1], sys.argv[2]
        out = []
        for conn in (Connection(conn_id="a", uri=uri), Connection.from_json(js, conn_id="b")):
            out.append([conn.conn_type, conn.host, conn.password])
        print(json.dumps(out))
        """
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    proc = subprocess.run(
        [sys.executable, "-c", code, crew_service.connection_uri(), crew_service.connection_json()],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if proc.returncode != 0 and "No module named 'airflow'" in proc.stderr:
        pytest.skip("Airflow not installed")
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = ["crew", crew_service.base_url, crew_service.org_token]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [expected, expected]


def test_webhook_receiver_records_and_waits(crew_webhooks: WebhookReceiver) -> None:
    url = crew_webhooks.url_for("task")
    assert url == f"http://127.0.0.1:{crew_webhooks.port}/hooks/task"
    resp = requests.post(url, json={"a": 1}, headers={"Authorization": "Bearer x"}, timeout=10)
    assert resp.status_code == 200
    record = crew_webhooks.wait_for(lambda recs: recs[0] if recs else None, timeout=5)
    assert (record.kind, record.method, record.path, record.json) == ("task", "POST", "/hooks/task", {"a": 1})
    assert record.authorization == "Bearer x" and record.body == b'{"a": 1}'

    crew_webhooks.respond_with(503, count=1)
    assert requests.post(crew_webhooks.url_for("x"), json={}, timeout=10).status_code == 503
    assert requests.post(crew_webhooks.url_for("x"), json={}, timeout=10).status_code == 200
    assert len(crew_webhooks.of_kind("x")) == 2

    with pytest.raises(TimeoutError, match="received"):
        crew_webhooks.wait_for_count("never", 1, timeout=0.05)
    crew_webhooks.clear()
    assert crew_webhooks.received == []


def test_service_start_stop_is_quick_and_repeatable() -> None:
    for _ in range(3):
        with LocalCrewService(speed=10) as service:
            assert service.startup_seconds is not None and service.startup_seconds < 2.0
            assert requests.get(service.base_url + "/", headers=service.auth_headers(), timeout=10).ok
        assert not service.running
        with pytest.raises(requests.ConnectionError):
            requests.get(service.base_url + "/", timeout=2)
