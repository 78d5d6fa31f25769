"""``@task.crew``: the function's return value is the inputs; the task is a kickoff that waits.

The real DAG runs (blocking and deferrable, a single call and ``.expand()``) are in
tests/integration/test_example_dags.py (``example_crew_task_decorator``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any
from unittest import mock

import pytest
from airflow.sdk import DAG, task

from airflow_provider_crew.decorators.crew import _CrewDecoratedOperator, crew_task
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.waiting.xcom import NONE_WHEN_ABSENT

KICKOFF_ID = "0b6f3c1e-0000-4000-8000-000000000001"


class FakeTI:
    dag_id = "d"

    def __init__(self, pushed: dict[str, Any] | None = None) -> None:
        self.xcom: dict[str, Any] = dict(pushed or {})

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(
        self, *, task_ids: Any = None, key: str = "return_value", default: Any = None, **_: Any
    ) -> Any:
        return self.xcom.get(key, default)


def build(function=None, /, **kwargs):
    """The XComArg of one call of a ``@task.crew`` function inside a DAG."""

    def research(topic: str, current_year: str = "2026") -> dict[str, str]:
        return {"topic": topic, "current_year": current_year}

    with DAG("d", schedule=None):
        return crew_task(**kwargs)(function or research)("tides")


def test_task_crew_is_registered_through_the_provider_info():
    assert task.crew is crew_task


def test_a_call_builds_a_kickoff_task_that_returns_the_kickoff_id():
    arg = build(crew_conn_id="my_crew", deferrable=True, poll_interval=3)
    op = arg.operator
    assert isinstance(op, _CrewDecoratedOperator) and isinstance(op, CrewKickoffOperator)
    assert (op.task_id, op.crew_conn_id, op.deferrable, op.poll_interval) == (
        "research",
        "my_crew",
        True,
        3.0,
    )
    assert op.custom_operator_name == "@task.crew"
    # A function annotated "-> dict" would push each key with plain @task; this one returns the kickoff id.
    assert op.multiple_outputs is False
    assert {"op_args", "op_kwargs", "inputs", "meta", "task_webhook_url"} <= set(op.template_fields)
    capped = build(max_tokens=5000, max_cost="{{ params.cost }}").operator
    assert (capped.max_tokens, capped.max_cost) == (5000, "{{ params.cost }}")
    assert {"max_tokens", "max_cost"} <= set(capped.template_fields)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": {"topic": "x"}}, "takes the crew's inputs from what the function returns"),
        ({"multiple_outputs": True}, "multiple_outputs must stay False"),
        ({"poll_interval": 0}, "poll_interval must be greater than 0"),
        ({"on_human_input": "ignore"}, "on_human_input='ignore' is not known"),
        ({"task_webhook_url": "ftp://h.test/t"}, "task_webhook_url must be an absolute http"),
        ({"max_tokens": -5}, "max_tokens must be a positive whole number of tokens"),
        ({"max_cost": 1, "stop_crew": False}, "max_tokens and max_cost stop the execution at the cap"),
    ],
)
def test_bad_arguments_fail_at_dag_parse_naming_them(kwargs, message):
    with pytest.raises(CrewConfigurationError, match=message):
        build(**kwargs)


def test_the_task_and_its_keys_read_as_the_kickoff_operators_do():
    """A key a wait's end may leave out resolves to None, on the call's XComArg and on ``.output``."""
    arg = build()
    for xcom_arg in (arg, arg.operator.output):
        for key in sorted(NONE_WHEN_ABSENT):
            assert xcom_arg[key].resolve({"ti": FakeTI({"return_value": KICKOFF_ID})}) is None
            assert xcom_arg[key].resolve({"ti": FakeTI({key: "v"})}) == "v"
        assert xcom_arg.resolve({"ti": FakeTI({"return_value": KICKOFF_ID})}) == KICKOFF_ID


def test_expand_and_partial_map_over_the_functions_arguments():
    with DAG("d", schedule=None):

        @task.crew(crew_conn_id="c")
        def research(topic: str, current_year: str) -> dict[str, str]:
            return {"topic": topic, "current_year": current_year}

        mapped = research.partial(current_year="2026").expand(topic=["tides", "glaciers"])
    assert type(mapped["result"]).__name__ == "CrewXComArg"
    assert mapped.operator.partial_kwargs["crew_conn_id"] == "c"
    assert mapped.operator.partial_kwargs["op_kwargs"] == {"current_year": "2026"}
    assert mapped.operator.multiple_outputs is False
    assert mapped.operator.operator_name == "@task.crew"


def test_a_decorated_task_logs_under_the_kickoff_operators_name_not_a_private_class(capsys):
    """Its log lines read ``[airflow.task.operators....CrewKickoffOperator]`` and Airflow's own lines
    ``task=<Task(@task.crew): research>``, single or mapped (a mapped task is unmapped in the worker)."""
    with DAG("d", schedule=None):

        @task.crew(crew_conn_id="c")
        def research(topic: str) -> dict[str, str]:
            return {"topic": topic}

        single = research("tides").operator
        mapped = research.expand(topic=["tides", "glaciers"]).operator
    unmapped = mapped.unmap({"op_kwargs": {"topic": "tides"}})

    for op in (single, unmapped):
        capsys.readouterr()
        op.log.info("Started crew execution %s", KICKOFF_ID)
        logged = "".join(capsys.readouterr())
        assert f"Started crew execution {KICKOFF_ID}" in logged
        assert (
            logged_under(op, logged)
            == "airflow.task.operators.airflow_provider_crew.operators.crew.CrewKickoffOperator"
        )
        assert repr(op) == f"<Task(@task.crew): {op.task_id}>"
        assert "_CrewDecoratedOperator" not in logged + repr(op)
        assert op.operator_name == "@task.crew"
    own = build(logger_name="my_team.crews").operator
    own.log.info("Mine")
    assert logged_under(own, "".join(capsys.readouterr())) == "airflow.task.operators.my_team.crews"


def logged_under(op: Any, logged: str) -> str | None:
    """The logger a task's line went out under: 3.1+ prints it (``[airflow.task.operators...]``); 3.0's
    standard logging prints the file instead, and the logger's name is the task log's ``name``."""
    printed = re.search(r"\[(airflow\.task\.operators\.[^\]]+)\]", logged)
    return printed.group(1) if printed else getattr(op.log, "name", None)


def run(op: CrewKickoffOperator, context: dict[str, Any]):
    """Execute ``op`` with the kickoff's own work replaced: what inputs it would start the crew with."""
    started: list[Any] = []

    def kickoff(self, context):
        started.append(self.inputs)
        return KICKOFF_ID

    with mock.patch.object(CrewKickoffOperator, "execute", kickoff):
        return op.execute(context), started


def test_execute_calls_the_function_with_its_arguments_and_the_context_and_starts_the_crew():
    def research(topic: str, current_year: str, run_id=None) -> dict[str, str]:
        return {"topic": topic, "current_year": current_year, "run": run_id}

    with DAG("d", schedule=None):
        op = crew_task(research)("tides", current_year="2026").operator
    returned, started = run(op, {"ti": FakeTI(), "run_id": "manual__1"})
    assert returned == KICKOFF_ID
    assert started == [{"topic": "tides", "current_year": "2026", "run": "manual__1"}]


@pytest.mark.parametrize("returned", [None, ["topic"], "topic=tides"])
def test_a_function_that_returns_no_mapping_fails_naming_it_and_starts_nothing(returned):
    def make_inputs():
        return returned

    with DAG("d", schedule=None):
        op = crew_task(make_inputs)().operator
    with pytest.raises(
        CrewConfigurationError, match=r"make_inputs\(\) must return the crew's inputs"
    ) as error:
        run(op, {"ti": FakeTI()})
    assert f"it returned {type(returned).__name__}" in str(error.value)
    assert "Nothing was started" in str(error.value)


def test_a_deferred_task_resumes_as_the_kickoff_operator_does_without_calling_the_function_again():
    called = []

    def research(topic: str) -> dict[str, str]:
        called.append(topic)
        return {"topic": topic}

    op, ti = build(research, deferrable=True).operator, FakeTI()
    event = {
        "outcome": "succeeded",
        "kickoff_id": KICKOFF_ID,
        "message": "m",
        "record": {"state": "SUCCESS", "result": "out"},
    }
    assert op.execute_complete({"ti": ti}, event) == KICKOFF_ID
    assert ti.xcom["result"] == "out" and called == []


@pytest.mark.parametrize("include_values", [False, True])
def test_a_deferred_task_carries_its_inputs_for_the_lineage_of_the_worker_that_resumes_it(include_values):
    """The worker that resumes a deferred task rebuilds it without the function's inputs; OpenLineage's
    COMPLETE event must still name them (their values only when asked)."""
    deferred = build(openlineage_include_values=include_values).operator
    deferred.inputs = {"topic": "tides", "current_year": "2026"}
    carried = deferred._resume_kwargs({"kickoff_id": KICKOFF_ID})
    expected = (
        {"topic": "tides", "current_year": "2026"}
        if include_values
        else {"topic": None, "current_year": None}
    )
    assert carried["crew_inputs"] == expected

    resumed = build(openlineage_include_values=include_values).operator
    seen = {}
    resumed.execute_complete = lambda context, event=None, **kwargs: seen.update(kwargs) or KICKOFF_ID
    resumed.resume_execution("execute_complete", carried, {"ti": FakeTI()})
    assert resumed._lineage_inputs() == expected
    assert "crew_inputs" not in seen  # taken out before execute_complete is called


def test_importing_the_tasks_does_not_import_the_decorator_and_the_decorator_is_cheap():
    code = (
        "import sys, airflow_provider_crew.operators.crew, airflow_provider_crew.sensors.crew; "
        "print('airflow_provider_crew.decorators' in sys.modules); "
        "import airflow_provider_crew.decorators.crew; "
        "print(sorted(m for m in sys.modules if m.startswith('airflow_provider_crew.hooks.client') "
        "or m in ('airflow_provider_crew.models', 'airflow_provider_crew.connection', "
        "'airflow_provider_crew.triggers.crew')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-2:] == ["False", "[]"]


@pytest.mark.integration
def test_a_decorated_task_starts_the_crew_and_waits_against_the_local_service(crew_service, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json())

    def research(topic: str) -> dict[str, str]:
        return {"topic": topic, "current_year": "2026"}

    with DAG("d", schedule=None):
        op = crew_task(research, deferrable=False, poll_interval=0.1)("tides").operator
    ti = FakeTI()
    kickoff_id = op.execute({"ti": ti})
    assert crew_service.executions[kickoff_id]["inputs"] == {"topic": "tides", "current_year": "2026"}
    assert "tides" in ti.xcom["result"] and ti.xcom["kickoff_id"] == kickoff_id
