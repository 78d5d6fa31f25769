"""Shared fixtures: a `crew` connection from the environment, as users configure it; and Chromium
installed when, and only when, browser tests are selected."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import aiohttp

TOKEN = "test-token-s3cr3t-value"
BASE_URL = "https://crew.example.test"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Selected browser tests (marker ``browser``) and no Chromium: run scripts/browser-setup.sh, which
    installs Debian's ``chromium`` as root (and says why it cannot otherwise). A run without them, such
    as the quick one, installs nothing."""
    selected = sum(1 for item in session.items if item.get_closest_marker("browser"))
    if not selected:
        return
    from tests.browser.harness import CHROMIUM

    if CHROMIUM.is_file():
        return
    print(f"\n{selected} browser tests selected and no Chromium at {CHROMIUM}: scripts/browser-setup.sh")
    setup = Path(__file__).resolve().parents[1] / "scripts" / "browser-setup.sh"
    subprocess.run(["bash", str(setup)], check=False)


def crew_connection_json(host: str = BASE_URL, token: str = TOKEN, **extra: object) -> str:
    return json.dumps({"conn_type": "crew", "host": host, "password": token, "extra": extra})


@pytest.fixture
def crew_conn(monkeypatch: pytest.MonkeyPatch):
    """Install `crew_default` (and return a setter for other connections) through AIRFLOW_CONN_*."""

    def install(
        conn_id: str = "crew_default", host: str = BASE_URL, token: str = TOKEN, **extra: object
    ) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", crew_connection_json(host, token, **extra))
        return conn_id

    install()
    return install


@pytest.fixture(autouse=True)
def _forget_what_a_process_learned():
    """The hook learns a service's status path, and the stop rule which services have no /stop, per
    process; every test starts without that memory."""
    from airflow_provider_crew.hooks.client.request import LEARNED_STATUS_PATHS
    from airflow_provider_crew.waiting.stopping import _NO_STOP_ENDPOINT

    for learned in (LEARNED_STATUS_PATHS, _NO_STOP_ENDPOINT):
        learned.clear()
    yield
    for learned in (LEARNED_STATUS_PATHS, _NO_STOP_ENDPOINT):
        learned.clear()


def loop_session() -> aiohttp.ClientSession | None:
    """The running loop's shared aiohttp session (the hook's async transport), if it has one."""
    from airflow_provider_crew.hooks.loop_connection import SHARED_SESSIONS

    entry = SHARED_SESSIONS.get(asyncio.get_running_loop())
    return None if entry is None else entry[0]


async def close_shared_sessions() -> None:
    """Close the running loop's shared aiohttp session now, as the end of the loop would."""
    from airflow_provider_crew.hooks.loop_connection import SHARED_SESSIONS

    entry = SHARED_SESSIONS.get(asyncio.get_running_loop())
    if entry is not None:
        session, closer = entry
        closer.cancel()  # its finally closes and forgets the session
        await asyncio.wait([closer])
        await session.close()  # closed already unless the closer had ended before


@pytest.fixture
def webhook_plugin(monkeypatch: pytest.MonkeyPatch):
    """The api-server plugin's app behind uvicorn on a loopback port (mounted at /crew-webhooks, as
    the api-server mounts it), and the ``crew_webhook_receiver`` connection pointing at it.

    Yields the address; ``define_receiver(password=...)`` on it changes the connection's key.
    """
    import socket
    import threading

    import uvicorn
    from fastapi import FastAPI

    from airflow_provider_crew.hooks import webhook_receiver
    from airflow_provider_crew.plugins.webhook_app import create_app
    from airflow_provider_crew.testing import wait_until

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"http://127.0.0.1:{port}"

    def define_receiver(password: str = RECEIVER_KEY, host: str = address) -> None:
        monkeypatch.setenv(
            "AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER",
            json.dumps({"conn_type": "crew_webhook_receiver", "host": host, "password": password}),
        )
        webhook_receiver._health_cache.clear()

    define_receiver()
    root = FastAPI()
    root.mount("/crew-webhooks", create_app())
    server = uvicorn.Server(uvicorn.Config(root, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=10)

    class Plugin(str):
        pass

    plugin = Plugin(address)
    plugin.define_receiver = define_receiver  # type: ignore[attr-defined]
    yield plugin
    server.should_exit = True
    thread.join(10)
    webhook_receiver._health_cache.clear()


RECEIVER_KEY = "receiver-key-for-tests-" + "r" * 16
