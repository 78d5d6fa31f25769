"""An agent task of Airflow's common.ai that consults a deployed crew as a tool (tests/ai/test_agent_dag.py).

The model comes from the ``pydanticai_default`` connection; the test gives it pydantic-ai's offline
``TestModel`` (extra ``{"model": "test"}``), which calls every tool once. The crew is ``crew_research``.
The how-to (docs/managed-agent.md) shows the part between the markers.
"""

from __future__ import annotations

import pendulum
from airflow.providers.common.ai.operators.agent import AgentOperator
from airflow.providers.common.ai.toolsets import ManagedAgentToolset
from airflow.sdk import DAG

from airflow_provider_crew.hooks.managed_agent import CrewManagedAgentHook

with DAG(dag_id="crew_as_agent_tool", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    # [START howto_crew_as_agent_tool]
    research_crew = CrewManagedAgentHook(crew_conn_id="crew_research").agent(
        "topic"
    )  # prompt -> input "topic"

    AgentOperator(
        task_id="research",
        prompt="What should our data team know about tidal energy? Ask the research crew.",
        llm_conn_id="pydanticai_default",
        toolsets=[
            ManagedAgentToolset(
                research_crew,
                tool_name="ask_research_crew",
                description="Runs the deployed research crew on a topic and returns its report.",
                timeout=300,  # seconds for the whole call: kickoff, the crew's work, its answer
                vendor_options={"inputs": {"current_year": "2026"}},  # the crew's other inputs
            )
        ],
    )
    # [END howto_crew_as_agent_tool]
