"""The completion address, called for real by the HTTP clients crew services send webhooks with.

The plugin's app is served by uvicorn on a loopback port (the ``webhook_plugin`` fixture, mounted at
``/crew-webhooks`` as the api-server mounts it), and each client POSTs a crew completion body to the
address :class:`CrewWebhookReceiverHook` builds for the run, as it is: the local crew service's own
webhook sender (aiohttp, through a real kickoff), Python's ``urllib.request`` and Node's ``fetch``.
The userinfo address these tests replace (``https://wake:<token>@host/...``) could not be called
by the last two at all. The database side (finding the deferred waits, resuming one) is faked; the
real thing is tests/e2e/test_webhook_wake_e2e.py.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.hooks.webhook_receiver import CrewWebhookReceiverHook, run_token
from airflow_provider_crew.plugins import webhook_app
from airflow_provider_crew.plugins.webhook_app import Wait
from airflow_provider_crew.testing import wait_until

from ..conftest import RECEIVER_KEY

DAG, RUN = "wake_dag", "manual__2026-11-24T02:09:28.215668+00:00"
CREW = CrewConnectionConfig(base_url="https://crew.example.test", token="t", safety_poll_interval=300)
# A crew of one short task, so that the local crew service's completion webhook comes at once.
QUICK_CREW = {
    "name": "quick",
    "inputs": ["topic"],
    "pending_seconds": 0.005,
    "step_seconds": 0.005,
    "tasks": [{"name": "only_task", "agent": "Worker", "description": "Do {topic}", "steps": 1}],
}
NODE_POST = """
const [url, body] = process.argv.slice(1);
fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body})
  .then(async (answer) => console.log(JSON.stringify({status: answer.status, body: await answer.text()})))
  .catch((error) => { console.error(String(error), error.cause ? String(error.cause) : ""); process.exit(2); });
"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """urllib (and a Node started from here) would send loopback calls to a proxy from the environment."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def database(monkeypatch):
    """The plugin's two database calls, faked: every execution asked about has one deferred wait of
    the run (its own task instance), past its trigger's race bound unless ``not_before`` says else."""
    state: dict[str, Any] = {"not_before": 0.0, "find": [], "apply": []}

    def find_waits(dag_id, run_id, kickoff_id, kind):
        state["find"].append((dag_id, run_id, kickoff_id, kind))
        kwargs = {"kickoff_id": kickoff_id, "wait_for": "completion", "not_before": state["not_before"]}
        return [Wait(f"ti-{kickoff_id}", 7, kwargs)]

    def apply_wake(wait, payload):
        state["apply"].append((time.time(), wait, payload))
        return True

    monkeypatch.setattr(webhook_app, "find_waits", find_waits)
    monkeypatch.setattr(webhook_app, "apply_wake", apply_wake)
    return state


@pytest.fixture
def address(webhook_plugin, database) -> str:
    """The run's completion address as the hook builds it, pointing at the served plugin."""
    ti = SimpleNamespace(dag_id=DAG, run_id=RUN, task_id="kickoff", map_index=-1)
    url = CrewWebhookReceiverHook().addresses(ti, CREW).crew_webhook_url
    assert url.startswith(f"{webhook_plugin}/crew-webhooks/v1/crew/")
    assert parse_qs(urlsplit(url).query) == {"token": [run_token(RECEIVER_KEY, DAG, RUN)]}
    return url


def with_token(url: str, token: str) -> str:
    return url.split("?", 1)[0] + f"?token={token}"


def body_of(kickoff_id: str) -> bytes:
    return json.dumps({"kickoff_id": kickoff_id, "result": "The crew's answer."}).encode()


# -- the clients ------------------------------------------------------------------------------------


def urllib_post(url: str, body: bytes) -> tuple[int, Any]:
    """A plain ``urllib.request`` POST, as a Python crew service without extra packages sends it."""
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def node_post(url: str, body: bytes) -> tuple[int, Any]:
    """Node's built-in ``fetch``, in a ``node`` process."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node's fetch is not tested: `node` is not on PATH")
    done = subprocess.run(
        [node, "-e", NODE_POST, url, body.decode()], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"node's fetch failed: {done.stderr}"
    answer = json.loads(done.stdout)
    return answer["status"], json.loads(answer["body"])


CLIENTS = {"urllib": urllib_post, "node-fetch": node_post}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_completion_address_wakes_the_wait_from_the_client(address, database, client):
    status, answer = CLIENTS[client](address, body_of(f"k-{client}"))
    assert (status, answer) == (202, {"accepted": True, "waking": 1})
    assert database["find"] == [(DAG, RUN, f"k-{client}", "crew")]
    wait_until(lambda: database["apply"], timeout=10)
    (_, wait, payload), *more = database["apply"]
    assert not more and wait.ti_id == f"ti-k-{client}"
    assert payload["outcome"] == "woken" and payload["message"] == "Woken by the crew's completion webhook."


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    "token",
    [
        "x" * 43,
        run_token(RECEIVER_KEY, DAG, "another-run"),
        run_token("another-key-" + "z" * 30, DAG, RUN),
    ],
    ids=["forged", "other-run", "other-key"],
)
def test_a_wrong_token_gets_404_from_the_client(address, database, client, token):
    status, answer = CLIENTS[client](with_token(address, token), body_of("k-1"))
    assert (status, answer) == (404, {"detail": "Not Found"})
    assert database["find"] == [] and database["apply"] == []


@pytest.mark.parametrize("client", CLIENTS)
def test_an_address_without_its_token_gets_404_from_the_client(address, database, client):
    status, answer = CLIENTS[client](address.split("?", 1)[0], body_of("k-1"))
    assert (status, answer) == (404, {"detail": "Not Found"})
    assert database["find"] == []


@pytest.mark.crew_service(QUICK_CREW)
@pytest.mark.parametrize("right", [True, False], ids=["its-token", "wrong-token"])
def test_the_local_crew_services_own_webhook_sender_wakes_the_wait(crew_service, address, database, right):
    """A real kickoff on the local crew service, given the address as its ``crewWebhookUrl``: the
    service's own sender (aiohttp) calls it when the execution completes."""
    import requests

    url = address if right else with_token(address, "x" * 43)
    answer = requests.post(
        f"{crew_service.base_url}/kickoff",
        json={"inputs": {"topic": "tides"}, "crewWebhookUrl": url},
        headers=crew_service.auth_headers(),
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    kickoff_id = answer.json()["kickoff_id"]
    crew_service.wait_for_state(kickoff_id, "SUCCESS")
    [delivery] = crew_service.wait_for_deliveries(
        lambda done: [d for d in done if d["kind"] == "crew"] or None
    )
    assert delivery["url"] == url and delivery["payload"]["kickoff_id"] == kickoff_id
    if right:
        assert (delivery["status"], delivery["ok"]) == (202, True), delivery
        wait_until(lambda: database["apply"], timeout=10)
        assert database["find"] == [(DAG, RUN, kickoff_id, "crew")]
        assert [wait.kwargs["kickoff_id"] for _, wait, _ in database["apply"]] == [kickoff_id]
    else:
        assert delivery["status"] == 404, delivery
        assert database["find"] == [] and database["apply"] == []


# -- the race bound, and the logs -----------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_a_wake_before_the_race_bound_is_neither_held_nor_applied(address, database, client):
    # The receiver's first request looks its connection up (seconds on a loaded machine): made first,
    # with a wrong token, so that the early wake below comes within the bound.
    assert urllib_post(with_token(address, "x" * 43), body_of("warm-up"))[0] == 404
    # 3 s: a client that starts a process (node-fetch) takes a second or more to send on a loaded CI.
    database["not_before"] = time.time() + 3.0
    status, answer = CLIENTS[client](address, body_of(f"early-{client}"))
    assert (status, answer) == (202, {"accepted": True, "waking": 0})
    assert database["find"] == [(DAG, RUN, f"early-{client}", "crew")]
    time.sleep(max(0.0, database["not_before"] - time.time()) + 0.5)  # past the bound: nothing kept
    assert database["apply"] == []


def test_the_token_is_in_no_log_line_nor_exception_of_the_plugin(
    address, database, monkeypatch, caplog, capfd
):
    """Every path a webhook takes through the plugin, logged at debug: applied, too early, a wrong
    token, a wake whose database work keeps failing, and a lookup that raises (a 500)."""
    token = run_token(RECEIVER_KEY, DAG, RUN)
    caplog.set_level(logging.DEBUG)
    assert urllib_post(address, body_of("k-applied"))[0] == 202
    wait_until(lambda: database["apply"], timeout=10)
    database["not_before"] = time.time() + 60
    assert urllib_post(address, body_of("k-early"))[0] == 202
    assert urllib_post(with_token(address, token[::-1]), body_of("k-wrong"))[0] == 404

    database["not_before"] = 0.0
    failures: list[BaseException] = []

    def failing_apply(wait, payload):
        failures.append(RuntimeError("database is locked"))
        raise failures[-1]

    monkeypatch.setattr(webhook_app, "apply_wake", failing_apply)
    assert urllib_post(address, body_of("k-failing"))[0] == 202
    wait_until(lambda: len(failures) == 3, timeout=10)  # tried three times, then logged and given up
    wait_until(lambda: any(r.levelno == logging.ERROR for r in caplog.records), timeout=10)

    def failing_find(*args):
        raise RuntimeError("lookup failed")

    monkeypatch.setattr(webhook_app, "find_waits", failing_find)
    request = urllib.request.Request(address, data=body_of("k-500"), method="POST")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 500 and token not in raised.value.read().decode()
    time.sleep(0.2)  # the server's own error log, written after the answer

    assert any(r.name == "uvicorn.error" and r.exc_info for r in caplog.records)  # the 500's traceback
    plugin = [r for r in caplog.records if r.name.startswith("airflow_provider_crew")]
    said = "\n".join(r.getMessage() for r in plugin)
    assert "Woke task instance ti-k-applied" in said and "the trigger's own polls end the wait" in said
    assert "Could not wake task instance ti-k-failing" in said
    for record in caplog.records:  # the plugin's and the server's (uvicorn's access log is off here)
        assert token not in record.getMessage(), record
        assert not record.exc_info or token not in logging.Formatter().formatException(record.exc_info)
    assert token not in caplog.text
    out, err = capfd.readouterr()
    assert token not in out and token not in err
    assert all(token not in str(error) for error in failures)
