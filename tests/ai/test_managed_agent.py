"""A deployed crew as a managed agent of ``common.ai``: the hook over real HTTP to the local crew
service, each of the contract's error classes from the service's own faults, and ``common.ai``'s
consumers (its toolset in a pydantic-ai agent with an offline model, its failover client).

The whole loop in a real DAG run is tests/ai/test_agent_dag.py. These tests need the ``ai`` extra;
without it they skip, saying so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("airflow.providers.common.ai.managed_agents.base", reason="needs the 'ai' extra")

from airflow.providers.common.ai.exceptions import ManagedAgentRejected
from airflow.providers.common.ai.managed_agents.base import ManagedAgentRequest

from airflow_provider_crew._compat import AirflowFailException
from airflow_provider_crew.exceptions import CrewExecutionTimeoutError, CrewServerError
from airflow_provider_crew.hooks.managed_agent import (
    CrewAgentExecutionError,
    CrewAgentOutcomeUnknownError,
    CrewAgentUnavailableError,
    CrewManagedAgentHook,
)
from airflow_provider_crew.testing import LocalCrewService

pytestmark = pytest.mark.integration

YEAR = {"inputs": {"current_year": "2026"}}


@pytest.fixture
def crew_agent(crew_service, crew_connection):
    """The research crew (inputs topic, current_year) as an agent asked through ``topic``."""
    return CrewManagedAgentHook().agent("topic")


def ask(agent, prompt: str = "tidal energy", **request: Any):
    options = request.pop("vendor_options", YEAR)
    return agent.invoke(ManagedAgentRequest(prompt=prompt, vendor_options=options, **request))


def test_one_call_runs_one_execution_and_reads_its_answer(crew_service, crew_agent):
    response = ask(crew_agent, timeout=60)

    (kickoff_id,) = crew_service.executions
    execution = crew_service.executions[kickoff_id]
    assert execution["inputs"] == {"topic": "tidal energy", "current_year": "2026"}
    assert crew_service.request_count("kickoff") == 1
    assert response.trace_ref == kickoff_id
    assert response.text == execution["result"] and "tidal energy" in response.text
    assert response.raw["state"] == "SUCCESS" and response.raw["result"] == execution["result"]
    usage = execution["usage_metrics"]
    assert (response.usage.input_tokens, response.usage.output_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert response.structured is None  # the research crew answers in text


@pytest.mark.crew_service("structured")
def test_structured_output_comes_back_as_structured(crew_service, crew_connection):
    expected = json.loads(
        Path(__file__)
        .resolve()
        .parents[2]
        .joinpath("airflow_provider_crew/testing/crews/structured.json")
        .read_text()
    )["inputs"]
    inputs = {name if isinstance(name, str) else name["name"]: "x" for name in expected}
    prompt_input = next(iter(inputs))
    inputs.pop(prompt_input)
    response = ask(CrewManagedAgentHook().agent(prompt_input), vendor_options={"inputs": inputs}, timeout=60)
    assert isinstance(response.structured, dict) and response.structured
    assert json.loads(response.text) == response.structured  # what a model reads: the same, as JSON


def test_naming_an_agent_and_its_capabilities_makes_no_request(crew_service, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_CREW_DEFAULT", raising=False)  # not even a connection lookup
    agent = CrewManagedAgentHook().agent("topic")
    assert (agent.ref.platform, agent.ref.name) == ("crew.deployed", "crew_default:topic")
    assert not agent.capabilities.sessions and agent.capabilities.usage and agent.capabilities.trace
    assert crew_service.counters["requests"] == dict.fromkeys(crew_service.counters["requests"], 0)


def test_both_names_of_the_capabilities_answer_under_common_ai_1_0():
    # 1.0.0's BaseManagedAgentHook declares get_agent_capabilities abstract; the hook is concrete.
    assert CrewManagedAgentHook.__abstractmethods__ == frozenset()
    hook = CrewManagedAgentHook()
    assert hook.get_agent_capabilities("topic") == hook.agent_capabilities("topic")


NEXT_RELEASE_BASE = """
import abc
from airflow.providers.common.ai.managed_agents import base

class NextReleaseBase(abc.ABC):  # the base class of apache/airflow's main branch: only the new name
    agent = base.BaseManagedAgentHook.agent

    @abc.abstractmethod
    def resolve_agent(self, agent): ...

    @abc.abstractmethod
    def agent_capabilities(self, agent): ...

    @abc.abstractmethod
    def invoke_agent(self, agent, request): ...

base.BaseManagedAgentHook = NextReleaseBase
from airflow_provider_crew.hooks.managed_agent import CrewManagedAgentHook

assert NextReleaseBase in CrewManagedAgentHook.__mro__
capabilities = CrewManagedAgentHook().agent_capabilities("topic")
print(sorted(CrewManagedAgentHook.__abstractmethods__), capabilities.structured_output, capabilities.sessions)
"""


def test_the_hook_can_be_created_under_a_base_class_that_declares_only_the_new_name():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", NEXT_RELEASE_BASE], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "True", "False"]


# -- the three error classes ------------------------------------------------------------------------


def test_missing_or_unknown_inputs_are_rejected_before_anything_starts(crew_service, crew_agent):
    with pytest.raises(ManagedAgentRejected, match=r"missing \['current_year'\]"):
        ask(crew_agent, vendor_options={})
    with pytest.raises(ManagedAgentRejected, match=r"unknown \['tone'\]"):
        ask(crew_agent, vendor_options={"inputs": {"current_year": "2026", "tone": "dry"}})
    assert crew_service.request_count("kickoff") == 0


def test_a_422_from_the_service_is_rejected_for_the_model_to_rephrase(crew_service, crew_agent):
    crew_service.faults.error(422, endpoint="kickoff", retry_after=None)
    with pytest.raises(ManagedAgentRejected, match="422"):
        ask(crew_agent)


def test_a_bad_token_is_terminal(crew_service, crew_connection, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DEFAULT",
        crew_service.connection_json(token="user").replace(crew_service.user_token, "not-the-token"),
    )
    with pytest.raises(CrewAgentUnavailableError, match="401"):
        ask(CrewManagedAgentHook().agent("topic"))
    assert crew_service.request_count("kickoff") == 0


def test_an_input_the_crew_does_not_have_is_terminal(crew_service, crew_connection):
    with pytest.raises(
        CrewAgentUnavailableError, match=r"has no input 'question'.*takes \['topic', 'current_year'\]"
    ):
        ask(CrewManagedAgentHook().agent("question"))


def test_a_crew_the_service_does_not_have_is_terminal(crew_service, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="no_such_crew"))
    with pytest.raises(CrewAgentUnavailableError, match="404"):
        ask(CrewManagedAgentHook().agent("topic"))
    assert crew_service.request_count("kickoff") == 0


def test_a_revoked_execution_is_terminal_and_named(monkeypatch, requests_mock):
    """The local service cannot revoke an execution (the contract has no call for it: it is done in
    the crew's dashboard), so the service's answers are mocked here."""
    base = "https://crew.example.test"
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DEFAULT",
        json.dumps(
            {
                "conn_type": "crew",
                "host": base,
                "password": "t" * 20,
                "extra": {"status_path_style": "contract"},
            }
        ),
    )
    requests_mock.get(f"{base}/inputs", json={"inputs": ["topic"]})
    requests_mock.post(f"{base}/kickoff", json={"kickoff_id": "k-revoked"})
    requests_mock.get(
        f"{base}/k-revoked/status",
        json={"state": "REVOKED", "status": "Revoked by an operator", "result": None},
    )
    with pytest.raises(CrewAgentExecutionError, match=r"k-revoked ended failed: .*Revoked by an operator"):
        ask(CrewManagedAgentHook().agent("topic"), vendor_options={})
    assert [r.method for r in requests_mock.request_history].count("POST") == 1


def test_options_that_would_retarget_the_call_are_refused(crew_service, crew_agent):
    for options in ({"base_url": "https://elsewhere"}, {"crew_conn_id": "other"}, {"token": "t"}):
        with pytest.raises(CrewAgentUnavailableError, match="vendor_options"):
            ask(crew_agent, vendor_options={**YEAR, **options})
    with pytest.raises(CrewAgentUnavailableError, match="the input the prompt goes to"):
        ask(crew_agent, vendor_options={"inputs": {"topic": "x", "current_year": "2026"}})
    assert crew_service.request_count("kickoff") == 0


def test_a_busy_service_propagates_unchanged(crew_service, crew_agent, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_CREW_DEFAULT",
        crew_service.connection_json(retry_budget=0, status_path_style="contract"),
    )
    crew_service.faults.error(503, count=None, endpoint="inputs", retry_after=None)
    with pytest.raises(CrewServerError, match="503"):
        ask(CrewManagedAgentHook().agent("topic"))
    assert crew_service.request_count("kickoff") == 0


def test_a_failed_execution_is_terminal_and_named(crew_service, crew_agent):
    with pytest.raises(CrewAgentExecutionError, match=r"ended failed: .*") as failed:
        ask(crew_agent, "fail")  # the research crew fails for topic=fail
    (kickoff_id,) = crew_service.executions
    assert kickoff_id in str(failed.value)


def test_a_pause_for_human_input_ends_the_call_naming_the_execution(tmp_path, monkeypatch, capsys):
    crew_file = tmp_path / "pausing.json"
    crew_file.write_text(
        json.dumps(
            {
                "name": "pausing",
                "inputs": ["topic"],
                "pause_without_webhook": True,
                "pending_seconds": 0.05,
                "tasks": [
                    {
                        "name": "draft_task",
                        "agent": "Writer",
                        "steps": 1,
                        "step_seconds": 0.05,
                        "human_input": True,
                    },
                    {"name": "publish_task", "agent": "Editor", "steps": 1, "step_seconds": 0.05},
                ],
            }
        )
    )
    with LocalCrewService(crew_file) as service:
        monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", service.connection_json())
        with pytest.raises(CrewAgentExecutionError, match="paused for human input on task") as paused:
            ask(CrewManagedAgentHook().agent("topic"), vendor_options={}, timeout=30)
        (kickoff_id,) = service.executions
        assert kickoff_id in str(paused.value) and "stays paused" in str(paused.value)
        assert service.executions[kickoff_id]["state"] == "PAUSED"
    assert kickoff_id in capsys.readouterr().out  # said in the task log too, not left silently


def test_the_timeout_holds_for_the_whole_call_not_each_read(crew_service, crew_agent):
    crew_service.configure(speed=0.02)  # the research crew now runs for minutes
    crew_service.faults.latency(0.8, endpoint="status")  # each read is slow too
    started = time.monotonic()
    with pytest.raises(CrewExecutionTimeoutError, match="The execution was stopped: nobody waits for it"):
        ask(crew_agent, timeout=3)
    assert time.monotonic() - started < 3 + 2 + 2  # the deadline, one read in flight, the stop
    assert crew_service.request_count("kickoff") == 1
    [kickoff_id] = crew_service.executions
    assert crew_service.stops == [kickoff_id]  # nobody waits for it any more


@pytest.mark.crew_service(stop_endpoint="absent")
def test_a_timed_out_call_to_a_service_without_stop_says_the_execution_runs_on(crew_service, crew_agent):
    crew_service.configure(speed=0.02)
    with pytest.raises(CrewExecutionTimeoutError, match="may still be running"):
        ask(crew_agent, timeout=2)
    assert crew_service.stops == []


def test_a_kickoff_whose_outcome_is_unknown_is_not_repeated(crew_service, crew_agent):
    crew_service.faults.drop_after(endpoint="kickoff")  # the service acts, then resets the connection
    with pytest.raises(CrewAgentOutcomeUnknownError, match="not repeated") as caught:
        ask(crew_agent)
    assert crew_service.request_count("kickoff") == 1 and len(crew_service.executions) == 1
    # Airflow does not retry the agent task either: its next try would ask the crew again.
    assert isinstance(caught.value, AirflowFailException)


@pytest.mark.crew_service(
    {
        "name": "spender",
        "inputs": ["topic"],
        "tokens_per_second": 2000,
        "step_seconds": 1,
        "tasks": [{"name": "spend", "agent": "Spender", "endless": True}],
    }
)
def test_a_call_over_its_connections_cap_is_stopped_once_and_fails_without_retry(crew_service, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(max_usage=3000))

    with pytest.raises(AirflowFailException) as caught:
        ask(CrewManagedAgentHook().agent("topic"), vendor_options={}, timeout=60)

    (kickoff_id,) = crew_service.executions
    assert crew_service.stops == [kickoff_id]
    spent = crew_service.executions[kickoff_id]["usage_metrics"]["total_tokens"]
    assert 3000 <= spent <= 3000 + 2000, spent  # within the allowance: one second of spending
    message = str(caught.value)
    assert f"Crew execution {kickoff_id} reached its budget" in message and "(max_tokens=3000)" in message
    assert "raise 'Max tokens per execution' (extra 'max_usage')" in message
