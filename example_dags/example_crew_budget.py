"""Bound what a crew spends: a token cap on a task, a cost cap from the connection's prices, one cap per
mapped execution, and the usage (with its cost) downstream (docs/howto/budget.rst)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_provider_crew.operators.crew import CrewKickoffOperator

TOPICS = ["tides", "glaciers"]

with DAG(
    dag_id="example_crew_budget",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "crew"],
) as dag:
    # [START howto_budget_max_tokens]
    research = CrewKickoffOperator(
        task_id="research",
        inputs={"topic": "tidal energy", "current_year": "2026"},
        # At 50,000 tokens (the service's total, across review rounds) the crew is stopped and the
        # task fails without retry: a retry would start paying again.
        max_tokens=50_000,
    )
    # [END howto_budget_max_tokens]

    # [START howto_budget_max_cost]
    # The crew_default connection has prices ('Input price', 'Output price' per million tokens):
    # the cap is in their currency.
    priced = CrewKickoffOperator(
        task_id="research_priced",
        inputs={"topic": "wave energy", "current_year": "2026"},
        max_cost=0.50,
    )
    # [END howto_budget_max_cost]

    # [START howto_budget_mapped]
    # One cap per execution: only a map index that reaches its own cap fails.
    per_topic = CrewKickoffOperator.partial(task_id="per_topic", max_tokens=20_000).expand(
        inputs=[{"topic": topic, "current_year": "2026"} for topic in TOPICS]
    )
    # [END howto_budget_mapped]

    # [START howto_budget_usage]
    @task
    def report(usage: dict, mapped_usage: list[dict]) -> dict:
        # XCom "usage": common.ai's shape, and its cost from the connection's prices (None without).
        print(f"research: {usage['total_tokens']} tokens, cost {usage['cost']}")
        return {"research": usage["cost"], "per_topic": sum(u["cost"] for u in mapped_usage)}

    report(priced.output["usage"], per_topic.output["usage"])
    # [END howto_budget_usage]
    research >> priced


if __name__ == "__main__":
    dag.test()
