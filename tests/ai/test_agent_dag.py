"""A real DAG run: an agent task of ``common.ai`` with an offline model consults a deployed crew.

``airflow dags test`` in a subprocess, against the local crew service over HTTP; also ``common.ai``'s
failover client over two local crew services, one of them answering 503 or refusing the token.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("airflow.providers.common.ai.toolsets", reason="needs the 'ai' extra")

from airflow.providers.common.ai.managed_agents.base import ManagedAgentRequest
from airflow.providers.common.ai.managed_agents.failover import FailoverManagedAgentClient
from airflow.providers.common.ai.toolsets import ManagedAgentToolset
from pydantic_ai import Agent
from pydantic_ai.models.function import FunctionModel

from airflow_provider_crew.hooks.managed_agent import SAFE_TO_FAIL_OVER, CrewManagedAgentHook
from airflow_provider_crew.testing import LocalCrewService
from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db

pytestmark = pytest.mark.integration

DAG_FILE = Path(__file__).resolve().parent / "dags" / "crew_agent.py"
REPO = Path(__file__).resolve().parents[2]


def test_an_agent_task_consults_the_crew_once_and_reports_what_it_said(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags / DAG_FILE.name)
    with LocalCrewService() as service:
        env = airflow_env(tmp_path / "home", dags)
        migrate_db(env)
        env["AIRFLOW_CONN_CREW_RESEARCH"] = service.connection_json(status_path_style="contract")
        # pydantic-ai's offline TestModel: it calls the crew tool once (with a generated prompt) and
        # answers with what the tool returned.
        env["AIRFLOW_CONN_PYDANTICAI_DEFAULT"] = json.dumps(
            {"conn_type": "pydanticai", "extra": {"model": "test"}}
        )
        run = dags_test("crew_as_agent_tool", env, cwd=REPO)

        assert run.state == "success", run.stdout[-3000:]
        (kickoff_id,) = service.executions  # one call, one execution
        execution = service.executions[kickoff_id]
        assert (
            set(execution["inputs"]) == {"topic", "current_year"}
            and execution["inputs"]["current_year"] == "2026"
        )
        answer = run.xcom("research")
        assert json.loads(answer) == {"ask_research_crew": execution["result"]}
        usage = execution["usage_metrics"]
        # The crew's own usage and trace reference, in the task log (the toolset hands the model only
        # the text; the agent task's usage XCom counts the calling model's tokens).
        assert f"Crew execution {kickoff_id} answered (trace_ref {kickoff_id})" in run.stdout
        assert f"{usage['prompt_tokens']} input and {usage['completion_tokens']} output tokens" in run.stdout
        model_usage = run.xcom("research", key="usage")
        assert model_usage["tool_calls"] == 1 and model_usage["requests"] == 2


def tool_then_answer(messages, info):
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart

    for part in messages[-1].parts:
        if isinstance(part, ToolReturnPart):
            return ModelResponse(parts=[TextPart(f"The crew reported: {part.content}")])
    return ModelResponse(parts=[ToolCallPart(info.function_tools[0].name, {"prompt": "tidal energy"})])


@pytest.mark.parametrize("primary_fault", ["503", "bad token"])
def test_the_failover_client_asks_the_standby_crew_when_the_first_cannot_serve(primary_fault, monkeypatch):
    with LocalCrewService() as primary, LocalCrewService() as standby:
        primary_conn = json.loads(primary.connection_json(status_path_style="contract", retry_budget=0))
        if primary_fault == "bad token":
            primary_conn["password"] = "not-the-token"
        else:
            primary.faults.error(503, count=None, retry_after=None)
        monkeypatch.setenv("AIRFLOW_CONN_CREW_PRIMARY", json.dumps(primary_conn))
        monkeypatch.setenv("AIRFLOW_CONN_CREW_STANDBY", standby.connection_json(status_path_style="contract"))
        group = FailoverManagedAgentClient(
            [
                CrewManagedAgentHook("crew_primary").agent("topic"),
                CrewManagedAgentHook("crew_standby").agent("topic"),
            ],
            failover_on=SAFE_TO_FAIL_OVER,
        )
        toolset = ManagedAgentToolset(
            group,
            tool_name="ask_research_crew",
            timeout=60,
            vendor_options={"inputs": {"current_year": "2026"}},
        )
        result = Agent(FunctionModel(tool_then_answer), toolsets=[toolset]).run_sync("Research tidal energy.")

        (kickoff_id,) = standby.executions
        assert standby.executions[kickoff_id]["result"] in result.output
        assert primary.executions == {}  # nothing started on the crew that could not serve
        direct = group.invoke(
            ManagedAgentRequest(
                prompt="waves", timeout=60, vendor_options={"inputs": {"current_year": "2026"}}
            )
        )
        assert direct.trace_ref in standby.executions
