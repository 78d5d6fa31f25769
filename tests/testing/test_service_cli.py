"""The ``crew-service`` command and the subprocess runner."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from airflow_provider_crew.testing import CrewServiceProcess, wait_until
from airflow_provider_crew.testing.cli import build_parser, faults_from_args, main
from airflow_provider_crew.testing.crews import BUILTIN_CREWS_DIR
from airflow_provider_crew.testing.handle import DEFAULT_ORG_TOKEN, DEFAULT_USER_TOKEN

pytestmark = pytest.mark.integration

CONSOLE_SCRIPT = Path(sys.executable).with_name("crew-service")


def _start(command: list[str]) -> tuple[subprocess.Popen[str], list[str], str]:
    """Start the command; return (process, banner lines so far, base URL) once it prints its URL."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    while True:
        line = lines.get(timeout=15)
        assert line is not None, "exited early:\n" + "\n".join(seen)
        seen.append(line)
        if line.startswith("crew-service listening on "):
            url = line.rsplit(" ", 1)[1]
            break
    # The rest of the banner follows at once; read it up to its last line.
    while not seen[-1].startswith("State is kept in memory"):
        line = lines.get(timeout=5)
        assert line is not None
        seen.append(line)
    return proc, seen, url


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.terminate()
    return proc.wait(timeout=10)


@pytest.mark.skipif(not CONSOLE_SCRIPT.exists(), reason="console script not installed (pip install -e .)")
def test_console_script_serve_on_free_port() -> None:
    proc, banner, url = _start([str(CONSOLE_SCRIPT), "serve", "--port", "0"])
    try:
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        text = "\n".join(banner)
        assert f"organization token: {DEFAULT_ORG_TOKEN}" in text
        assert f"user token: {DEFAULT_USER_TOKEN}" in text
        assert "AIRFLOW_CONN_CREW_DEFAULT" in text
        resp = requests.get(url + "/", headers={"Authorization": f"Bearer {DEFAULT_ORG_TOKEN}"}, timeout=10)
        assert (resp.status_code, resp.text) == (200, "Healthy")
    finally:
        code = _stop(proc)
    assert code in (0, -15)  # uvicorn re-raises SIGTERM after a graceful shutdown
    assert proc.poll() is not None


def test_python_m_serve_with_options_and_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    command = [
        sys.executable,
        "-m",
        "airflow_provider_crew.testing",
        "serve",
        "--port",
        "0",
        "--crew",
        str(BUILTIN_CREWS_DIR / "review.yaml"),
        "--status-path",
        "deployed",
        "--org-token",
        "org-x",
        "--user-token",
        "user-y",
        "--rate-limit",
        "kickoff:1",
        "--retry-after",
        "4",
        "--ready-file",
        str(ready),
    ]
    proc, banner, url = _start(command)
    try:
        info = json.loads(ready.read_text())
        assert info == {
            "base_url": url,
            "org_token": "org-x",
            "user_token": "user-y",
            "pid": proc.pid,
            "crews": ["review"],
        }
        assert any("fault #1: error 429 x1 on kickoff (Retry-After 4.0)" in line for line in banner)
        headers = {"Authorization": "Bearer user-y"}
        assert requests.get(url + "/inputs", headers=headers, timeout=10).json() == {
            "inputs": ["topic", "audience"]
        }
        first = requests.post(url + "/kickoff", json={"inputs": {"topic": "AI"}}, headers=headers, timeout=10)
        assert (first.status_code, first.headers["retry-after"]) == (429, "4")
        kickoff = requests.post(
            url + "/kickoff", json={"inputs": {"topic": "AI"}}, headers=headers, timeout=10
        )
        kickoff_id = kickoff.json()["kickoff_id"]
        assert requests.get(f"{url}/status/{kickoff_id}", headers=headers, timeout=10).status_code == 200
        assert requests.get(f"{url}/{kickoff_id}/status", headers=headers, timeout=10).status_code == 404
        wrong = requests.get(url + "/", headers={"Authorization": f"Bearer {DEFAULT_ORG_TOKEN}"}, timeout=10)
        assert wrong.status_code == 401
    finally:
        _stop(proc)


def test_crew_service_process_runner_and_remote_faults() -> None:
    with CrewServiceProcess(
        "research", speed=10, faults=[{"kind": "drop_after", "endpoint": "kickoff", "count": 1}]
    ) as service:
        assert service.startup_seconds is not None and service.startup_seconds < 10
        assert service.is_healthy()
        assert [r["kind"] for r in service.faults.rules] == ["drop_after"]
        headers = service.auth_headers()
        body = {"inputs": {"topic": "AI", "current_year": "2025"}}
        with pytest.raises(requests.ConnectionError):
            requests.post(service.base_url + "/kickoff", json=body, headers=headers, timeout=10)
        (kickoff_id,) = service.executions
        assert service.wait_for_state(kickoff_id)["state"] == "SUCCESS"
        assert service.request_count("kickoff") == 1
        assert service.counters["faults"] == {"drop_after": 1}
        service.faults.unavailable(count=1, endpoint="inputs")
        assert requests.get(service.base_url + "/inputs", headers=headers, timeout=10).status_code == 503
        pid = service.pid
    assert service.proc is not None and service.proc.poll() is not None
    assert pid is not None


def test_crews_and_validate_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crews"]) == 0
    listing = capsys.readouterr().out
    assert "research:" in listing and "review:" in listing and "structured:" in listing

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "bad", "tasks": [{"name": "t"}]}))
    assert main(["validate", str(BUILTIN_CREWS_DIR / "research.json"), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "research.json: ok: crew research" in out
    assert "bad.json: INVALID: crew bad.tasks[0].agent: required string" in out


def test_serve_refuses_a_bad_crew(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "0", "--crew", "/no/such/crew.json"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["serve", "--port", "0", "--fault", "kind=teleport"]) == 2
    assert "unknown fault kind" in capsys.readouterr().err


def test_fault_flags_become_rules() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--latency",
            "0.2",
            "--latency",
            "status=0.1",
            "--rate-limit",
            "kickoff:2",
            "--unavailable",
            "3",
            "--retry-after",
            "5",
            "--status-404",
            "2",
            "--drop-before",
            "resume",
            "--drop-after",
            "kickoff:1",
            "--html-500",
            "inputs:2",
            "--slow-first",
            "1.5",
            "--fault",
            "kind=error,status=418,count=1,endpoint=health,retry_after=none",
            "--fault",
            '{"kind": "latency", "seconds": 0.01, "crew": "review"}',
        ]
    )
    described = [r.describe() for r in faults_from_args(args)]
    assert described == [
        "latency 0.2s until cleared on all endpoints",
        "latency 0.1s until cleared on status",
        "error 429 x2 on kickoff (Retry-After 5.0)",
        "error 503 x3 on all endpoints (Retry-After 5.0)",
        "status_404: first 2 polls of each new execution answer 404",
        "drop_before x1 on resume",
        "drop_after x1 on kickoff",
        "html_500 x2 on inputs",
        "slow_first 1.5s x1 on all endpoints",
        "error 418 x1 on health (Retry-After None)",
        "latency 0.01s x1 on all endpoints of crew review",
    ]


def test_port_in_use_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 1
    assert "cannot listen" in capsys.readouterr().err


def test_process_output_is_kept_for_diagnosis() -> None:
    service = CrewServiceProcess("research", extra_args=["--latency", "status=0.01"])
    service.start()
    try:
        wait_until(lambda: any("fault #1" in line for line in service.output), timeout=5)
    finally:
        service.stop()


def test_a_redirect_fault_in_key_value_form_keeps_its_location_as_text() -> None:
    args = build_parser().parse_args(
        ["serve", "--fault", "kind=redirect,status=302,endpoint=status,location=http://other.example:9"]
    )
    (rule,) = faults_from_args(args)
    assert (rule.kind, rule.status, rule.location) == ("redirect", 302, "http://other.example:9")
