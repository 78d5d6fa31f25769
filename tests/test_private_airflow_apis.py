"""Every Airflow name the provider uses that Airflow does not publish for providers: one test each.

docs/architecture.md ("Private Airflow APIs") lists them: where each is used, on which Airflow
releases, its public alternative, and what 3.4 changes. Each test checks, on the installed Airflow,
the shape the provider relies on (the path, the parameters it passes, the attributes and columns it
reads) and fails naming the Airflow name and the provider's use of it, so that a new Airflow release
says at once what to change. Nothing here starts an Airflow component or opens a database.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from airflow_provider_crew._compat import AIRFLOW_V_3_1_3_PLUS, AIRFLOW_V_3_1_PLUS, AIRFLOW_VERSION

REPO = Path(__file__).resolve().parents[1]

#: Each private name, and where the provider uses it (module: function). docs/architecture.md's table
#: names every one of them.
PRIVATE_APIS: dict[str, str] = {
    "airflow.models.trigger.handle_event_submit": (
        "plugins/airflow_db.py: submit_event, wake_internals_missing (for plugins/webhook_app.py: apply_wake, "
        "create_app)"
    ),
    "airflow.models.taskinstance.TaskInstance": (
        "plugins/airflow_db.py: task_instance_model, task_instance, task_instance_now, deferred_waits, "
        "lock_deferred, claim_deferred, run_xcoms (for plugins/webhook_app.py: find_waits, apply_wake; "
        "plugins/stop_listener.py: still_as_set; plugins/crew_views_data.py: task_view, _window, "
        "_review_request); its rows' columns read in plugins/stop_listener.py: abandoned_wait, "
        "plugins/crew_views_live.py: following"
    ),
    "airflow.models.trigger.Trigger": (
        "plugins/airflow_db.py: trigger_row, deferred_waits (for plugins/webhook_app.py: find_waits, "
        "apply_wake; plugins/stop_listener.py: abandoned_wait; plugins/crew_views_live.py: following)"
    ),
    "airflow.models.xcom.XComModel": (
        "plugins/airflow_db.py: xcom_model, xcom_value, task_xcoms, run_xcoms, of_task_instance (for "
        "plugins/crew_views_data.py: _task_xcoms, _review_request, _window)"
    ),
    "airflow.models.xcom.XComModel (a row written)": (
        "plugins/airflow_db.py: set_task_xcom, xcom_write_model, lock_task_instance, run_key_xcoms (for "
        "plugins/event_receiver.py: add_events; plugins/crew_views_events.py: crew_activity)"
    ),
    "airflow.models.renderedtifields.RenderedTaskInstanceFields": (
        "plugins/airflow_db.py: rendered_fields, of_task_instance (for plugins/crew_views_data.py: task_view)"
    ),
    "airflow.models.dagrun.DagRun": "plugins/airflow_db.py: dag_run_model (for plugins/crew_views_data.py: _window)",
    "airflow.models.dag.DagModel.get_team_name": (
        "plugins/airflow_db.py: may_read_task_instances (for plugins/crew_views.py's /api routes)"
    ),
    "airflow.models.serialized_dag.SerializedDagModel": (
        "plugins/airflow_db.py: serialized_dag (for plugins/crew_views_live.py: _version_tasks)"
    ),
    "airflow.models.connection.Connection.get_connection_from_secrets": (
        "plugins/airflow_db.py: connection (for plugins/webhook_app.py: ReceiverKeys._read)"
    ),
    "airflow.utils.session.create_session": (
        "plugins/airflow_db.py: session (for plugins/webhook_app.py, plugins/stop_listener.py, "
        "plugins/crew_views_data.py)"
    ),
    "airflow.utils.sqlalchemy.with_row_locks": (
        "plugins/airflow_db.py: lock_deferred (for plugins/webhook_app.py: apply_wake)"
    ),
    "airflow.utils.state.TaskInstanceState": (
        "plugins/airflow_db.py: deferred_waits, lock_deferred, claim_deferred (for plugins/webhook_app.py)"
    ),
    "airflow.api_fastapi.core_api.security.get_user": (
        "plugins/airflow_db.py: user_dependency (for plugins/crew_views.py: UserDep)"
    ),
    "airflow.api_fastapi.app.get_auth_manager": (
        "plugins/airflow_db.py: may_read_task_instances, readable_dag_ids (for plugins/crew_views.py's /api "
        "routes)"
    ),
    "airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS": (
        "_compat.py: running_in_process_test, warm_execution_api"
    ),
    "airflow.sdk.execution_time.task_runner.RuntimeTaskInstance.get_task_states": (
        "_compat.py: task_instance_state"
    ),
    "RuntimeTaskInstance._ti_context_from_server": "_compat.py: resumed_after_deferral (for links/crew.py: resumed)",
    "BaseOperator._post_execute_hook": (
        "_compat.py: has_post_execute (for operators/wait.py: CrewWaitMixin._trigger_success_outcomes)"
    ),
    "airflow.sdk.bases.decorator._TaskDecorator": "_compat.py: TaskDecoratorBase (for decorators/crew.py)",
    "airflow.sdk.definitions.xcom_arg.PlainXComArg": (
        "_compat.py: PlainXComArg (for waiting/xcom.py: _crew_xcom_arg_class, CrewXComArg)"
    ),
    "airflow.sdk.definitions.mappedoperator.OperatorPartial._expand": (
        "_compat.py: OperatorPartial (for waiting/xcom.py: crew_partial, _crew_mapping_classes, __class__ "
        "assignment; operators/wait.py: CrewWaitMixin.partial)"
    ),
    "BaseOperator.get_serialized_fields": "operators/wait.py: CrewWaitMixin.get_serialized_fields",
    "BaseOperator.resume_execution": (
        "operators/wait.py: CrewWaitMixin.resume_execution; decorators/crew.py: "
        "_CrewDecoratedOperator.resume_execution"
    ),
    "airflow.sdk.execution_time.xcom.XCom": (
        "triggers/crew.py: push_xcoms, through common-compat's XCom (public; the same object)"
    ),
    "airflow.sdk.execution_time.hitl.upsert_hitl_detail": "_compat.py: upsert_hitl_detail (for review/answer.py: ask)",
    "airflow.sdk.definitions.param": "_compat.py: hitl_params (ParamsDict); review/answer.py takes Param from common-compat",
    "airflow._shared.observability.metrics.stats": "_compat.py: stats_client (_STATS_CLIENTS)",
    "get_listener_manager().hook": "_compat.py: task_success_listeners",
    "api-server listeners on a user's mark": "plugins/stop_listener.py: StopListener, _on_state_set",
    "BaseTrigger.task_instance": (
        "triggers/crew.py: CrewStatusTrigger.run, stop_if_abandoned, _event; _compat.py: warm_execution_api"
    ),
}

AIRFLOW_V_3_2_PLUS = AIRFLOW_VERSION >= Version("3.2.0")
needs_3_1 = pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="used on Airflow 3.1+ only")


def changed(name: str, what: str) -> str:
    """The failure message: the Airflow name, what changed, and where the provider uses it."""
    return (
        f"Airflow {AIRFLOW_VERSION}: {name} {what}. The provider uses it in {PRIVATE_APIS[name]} "
        "(docs/architecture.md, 'Private Airflow APIs'): move that use to the public alternative named "
        "there, or adapt it."
    )


def imported(module: str, name: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        pytest.fail(changed(name, f"cannot be imported ({error})"))


def attribute(owner: Any, attr: str, name: str) -> Any:
    value = getattr(owner, attr, None)
    assert value is not None, changed(name, f"is missing ({attr!r} not found on {owner!r})")
    return value


def not_taking(function: Any, *names: str) -> list[str]:
    """The keyword arguments of ``names`` that ``function`` does not take (the provider passes them)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return [
            n for n in names if n in parameters and parameters[n].kind is inspect.Parameter.POSITIONAL_ONLY
        ]
    return [
        n for n in names if n not in parameters or parameters[n].kind is inspect.Parameter.POSITIONAL_ONLY
    ]


def first_parameter(function: Any) -> str | None:
    return next(iter(inspect.signature(function).parameters), None)


def orm_names(model: Any) -> set[str]:
    import sqlalchemy

    return set(sqlalchemy.inspect(model).all_orm_descriptors.keys())


def airflow_source(relative: str) -> str:
    """The text of one of Airflow's modules, without importing it (an api-server's route module)."""
    for root in importlib.import_module("airflow").__path__:
        if (Path(root) / relative).is_file():
            return (Path(root) / relative).read_text()
    return ""


# -- the api-server plugin: resuming a deferred task, and the ORM ----------------------------------


def test_handle_event_submit():
    name = "airflow.models.trigger.handle_event_submit"
    trigger_module = imported("airflow.models.trigger", name)
    handle = attribute(trigger_module, "handle_event_submit", name)
    assert not not_taking(handle, "task_instance", "session"), changed(
        name, f"no longer takes task_instance= and session= ({inspect.signature(handle)})"
    )
    assert first_parameter(handle) == "event", changed(name, "takes no event first")
    assert getattr(trigger_module, "TRIGGER_FAIL_REPR", None) == "__fail__", changed(
        name, "no longer marks an event it cannot store with next_method '__fail__'"
    )
    from airflow_provider_crew.plugins.airflow_db import wake_internals_missing

    missing = wake_internals_missing()
    assert missing is None, changed(name, f"fails the plugin's own probe: {missing}")


def test_task_instance_orm_columns():
    name = "airflow.models.taskinstance.TaskInstance"
    model = attribute(imported("airflow.models.taskinstance", name), "TaskInstance", name)
    read = {
        "id",
        "dag_id",
        "run_id",
        "task_id",
        "map_index",
        "state",
        "trigger_id",
        "next_method",
        "try_number",
        "operator",
        "custom_operator_name",
        "start_date",
        "end_date",
        "dag_version_id",
    }
    assert read <= orm_names(model), changed(name, f"has no column {sorted(read - orm_names(model))}")


def test_trigger_orm_columns():
    name = "airflow.models.trigger.Trigger"
    model = attribute(imported("airflow.models.trigger", name), "Trigger", name)
    read = {"id", "classpath", "triggerer_id"}
    assert read <= orm_names(model), changed(name, f"has no column {sorted(read - orm_names(model))}")
    assert isinstance(inspect.getattr_static(model, "kwargs", None), property), changed(
        name, "has no kwargs property (the trigger's decrypted kwargs)"
    )


def of_attempt_or_task_instance(name: str, model: Any, names: set[str]) -> str:
    """Which rows of ``model`` the door reads as a task instance's, checked against the model's shape:
    the attempt's (``task_instance_id``, 3.4) or its dag, run, task and map index (3.0-3.3)."""
    from airflow_provider_crew.plugins import airflow_db

    per_attempt = "task_instance_id" in names
    by_task = {"dag_id", "run_id", "task_id", "map_index"} <= names
    assert per_attempt or by_task, changed(
        name, f"has neither task_instance_id nor dag_id, run_id, task_id, map_index ({sorted(names)})"
    )
    clause = str(airflow_db.of_task_instance(model, airflow_db.task_instance_model()))
    assert ("task_instance_id" in clause) is per_attempt, changed(
        name,
        f"is read by the wrong columns for its shape ({clause}): plugins/airflow_db.py: of_task_instance",
    )
    return clause


def test_xcom_model_columns_and_decoding():
    """The Crew tab and the Crews page read a task instance's XComs: by its attempt where Airflow keeps
    them per attempt (3.4), else by its dag, run, task and map index (one row per key, 3.0-3.3)."""
    name = "airflow.models.xcom.XComModel"
    model = attribute(imported("airflow.models.xcom", name), "XComModel", name)
    from airflow_provider_crew.plugins import airflow_db

    assert airflow_db.xcom_model() is model, changed(name, "is not what plugins/airflow_db.py reads")
    # The Crews page selects and filters the four columns on every release (3.4's projection has them).
    read = {"dag_id", "run_id", "task_id", "map_index", "key", "value", "timestamp"}
    names = orm_names(model)
    assert read <= names, changed(name, f"has no column {sorted(read - names)}")
    of_attempt_or_task_instance(name, model, names)
    assert airflow_db.xcom_value({"a": [1, 2]}) == {"a": [1, 2]}, changed(
        name, "deserialize_value no longer decodes a row's JSON value"
    )


def test_an_xcom_row_is_written_as_the_execution_api_writes_it():
    """The api-server keeps a task instance's events as its XCom ``crew_events`` (the event stream): a
    row of these columns, its value the JSON as it is, and the task instance's run found by its
    ``dag_run`` relationship."""
    name = "airflow.models.xcom.XComModel (a row written)"
    attribute(imported("airflow.models.xcom", name), "XComModel", name)
    from airflow_provider_crew.plugins import airflow_db

    # 3.4's XComModel is a read-only projection (a subquery): the row goes to the table behind it.
    model = airflow_db.xcom_write_model()
    table = getattr(model, "__table__", None)
    assert table is not None and getattr(table, "name", None), changed(name, "has no table to write to")
    names = orm_names(model)
    if "task_instance_id" in names:  # 3.4: a row per attempt and key
        written = {"task_instance_id", "key", "value"}
    else:
        written = {"dag_run_id", "key", "value", "run_id", "task_id", "dag_id", "map_index"}
    assert written <= names, changed(name, f"has no column {sorted(written - names)}")
    task_instance = attribute(imported("airflow.models.taskinstance", name), "TaskInstance", name)
    assert "dag_run" in orm_names(task_instance) or hasattr(task_instance, "dag_run"), changed(
        name, "TaskInstance has no dag_run relationship"
    )


def test_rendered_task_instance_fields_columns():
    """Read by the task instance's attempt on 3.4 (``rtif_v2``, keyed by ``task_instance_id``), by its
    dag, run, task and map index before."""
    name = "airflow.models.renderedtifields.RenderedTaskInstanceFields"
    model = attribute(imported("airflow.models.renderedtifields", name), "RenderedTaskInstanceFields", name)
    from airflow_provider_crew.plugins import airflow_db

    assert airflow_db.rendered_fields_model() is model, changed(
        name, "is not what plugins/airflow_db.py reads"
    )
    names = orm_names(model)
    assert "rendered_fields" in names, changed(name, "has no column rendered_fields")
    of_attempt_or_task_instance(name, model, names)


def test_dag_run_columns():
    name = "airflow.models.dagrun.DagRun"
    model = attribute(imported("airflow.models.dagrun", name), "DagRun", name)
    read = {"dag_id", "run_id", "state"}
    assert read <= orm_names(model), changed(name, f"has no column {sorted(read - orm_names(model))}")


@needs_3_1
def test_dag_model_get_team_name():
    name = "airflow.models.dag.DagModel.get_team_name"
    model = attribute(imported("airflow.models.dag", name), "DagModel", name)
    get_team_name = attribute(model, "get_team_name", name)
    assert first_parameter(get_team_name) == "dag_id", changed(
        name, f"takes no dag_id first ({inspect.signature(get_team_name)})"
    )


@pytest.fixture(scope="module")
def crew_dag() -> Any:
    from airflow.sdk import DAG

    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    with DAG("private_airflow_apis", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        CrewStatusSensor(task_id="sensor", kickoff_id="k", crew_conn_id="one", poll_interval=7)
        CrewStatusSensor.partial(task_id="mapped", crew_conn_id="two").expand(kickoff_id=["a", "b"])
    return dag


@pytest.fixture(scope="module")
def read_back(crew_dag: Any) -> Any:
    """The DAG as the api-server reads it (SerializedDagModel.dag): serialized to JSON, read back."""
    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serializer
    except ImportError:  # Airflow < 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as Serializer  # type: ignore[no-redef]

    return Serializer.from_dict(json.loads(json.dumps(Serializer.to_dict(crew_dag))))


def test_serialized_dag_model_and_mapped_tasks_read_back(read_back):
    name = "airflow.models.serialized_dag.SerializedDagModel"
    model = attribute(imported("airflow.models.serialized_dag", name), "SerializedDagModel", name)
    assert "dag_version_id" in orm_names(model), changed(name, "has no column dag_version_id")
    assert isinstance(inspect.getattr_static(model, "dag", None), property), changed(
        name, "has no dag property"
    )
    mapped = read_back.task_dict["mapped"]
    partial = getattr(mapped, "partial_kwargs", None)
    assert isinstance(partial, dict) and partial.get("crew_conn_id") == "two", changed(
        name, f"reads a mapped task back without its partial_kwargs' crew_conn_id ({partial!r})"
    )
    value = getattr(getattr(mapped, "expand_input", None), "value", None)
    assert value == {"kickoff_id": ["a", "b"]}, changed(
        name, f"reads a mapped task back without its literal expand_input.value ({value!r})"
    )


def test_connection_get_connection_from_secrets():
    name = "airflow.models.connection.Connection.get_connection_from_secrets"
    model = attribute(imported("airflow.models.connection", name), "Connection", name)
    lookup = attribute(model, "get_connection_from_secrets", name)
    assert first_parameter(lookup) == "conn_id", changed(
        name, f"takes no conn_id first ({inspect.signature(lookup)})"
    )


def test_create_session():
    name = "airflow.utils.session.create_session"
    create_session = attribute(imported("airflow.utils.session", name), "create_session", name)
    required = [
        p.name
        for p in inspect.signature(create_session).parameters.values()
        if p.default is inspect.Parameter.empty
    ]
    assert required == [], changed(name, f"now requires {required}")


def test_with_row_locks():
    name = "airflow.utils.sqlalchemy.with_row_locks"
    with_row_locks = attribute(imported("airflow.utils.sqlalchemy", name), "with_row_locks", name)
    assert first_parameter(with_row_locks) == "query", changed(name, "takes no query first")
    assert not not_taking(with_row_locks, "session", "of"), changed(
        name, f"no longer takes session= and of= ({inspect.signature(with_row_locks)})"
    )


def test_task_instance_state_of_airflow_utils():
    name = "airflow.utils.state.TaskInstanceState"
    state = attribute(imported("airflow.utils.state", name), "TaskInstanceState", name)
    assert getattr(state, "DEFERRED", None) == "deferred", changed(name, "has no DEFERRED == 'deferred'")


@needs_3_1
def test_api_server_get_user():
    name = "airflow.api_fastapi.core_api.security.get_user"
    get_user = attribute(imported("airflow.api_fastapi.core_api.security", name), "get_user", name)
    assert inspect.iscoroutinefunction(get_user), changed(name, "is no longer a FastAPI async dependency")


@needs_3_1
def test_auth_manager_dag_checks():
    name = "airflow.api_fastapi.app.get_auth_manager"
    attribute(imported("airflow.api_fastapi.app", name), "get_auth_manager", name)
    base = imported("airflow.api_fastapi.auth.managers.base_auth_manager", name).BaseAuthManager
    details = imported("airflow.api_fastapi.auth.managers.models.resource_details", name)
    assert not not_taking(base.is_authorized_dag, "method", "access_entity", "details", "user"), changed(
        name, f"BaseAuthManager.is_authorized_dag changed ({inspect.signature(base.is_authorized_dag)})"
    )
    assert not not_taking(base.get_authorized_dag_ids, "user", "method"), changed(
        name,
        f"BaseAuthManager.get_authorized_dag_ids changed ({inspect.signature(base.get_authorized_dag_ids)})",
    )
    assert hasattr(details.DagAccessEntity, "TASK_INSTANCE"), changed(
        name, "has no DagAccessEntity.TASK_INSTANCE"
    )
    assert details.DagDetails(id="d", team_name=None).id == "d", changed(
        name, "DagDetails(id, team_name) changed"
    )


# -- the task SDK's execution time ------------------------------------------------------------------


def test_supervisor_comms_and_the_in_process_runner():
    name = "airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS"
    task_runner = imported("airflow.sdk.execution_time.task_runner", name)
    declared = "SUPERVISOR_COMMS" in vars(task_runner) or "SUPERVISOR_COMMS" in getattr(
        task_runner, "__annotations__", {}
    )
    assert declared, changed(name, "is no longer the task runner's module global")
    supervisor = imported("airflow.sdk.execution_time.supervisor", name)
    assert inspect.isclass(getattr(supervisor, "InProcessSupervisorComms", None)), changed(
        name,
        "is no longer an InProcessSupervisorComms in dag.test() (running_in_process_test matches that name)",
    )


def test_runtime_task_instance_get_task_states():
    """A static call, from a worker's task process or a trigger; a mapped instance keyed
    ``<task_id>_<map_index>`` in the execution API's answer."""
    name = "airflow.sdk.execution_time.task_runner.RuntimeTaskInstance.get_task_states"
    runtime_ti = imported("airflow.sdk.execution_time.task_runner", name).RuntimeTaskInstance
    assert isinstance(inspect.getattr_static(runtime_ti, "get_task_states", None), staticmethod), changed(
        name, "is no longer a static method"
    )
    assert not not_taking(runtime_ti.get_task_states, "dag_id", "map_index", "task_ids", "run_ids"), changed(
        name, f"changed ({inspect.signature(runtime_ti.get_task_states)})"
    )
    route = airflow_source("api_fastapi/execution_api/routes/task_instances.py")
    assert re.search(r'f"\{task\.task_id\}_\{\w+(\.map_index)?\}"', route), changed(
        name, "no longer keys a mapped task instance's state <task_id>_<map_index> (execution API)"
    )


def test_runtime_task_instance_context_from_server():
    name = "RuntimeTaskInstance._ti_context_from_server"
    runtime_ti = imported("airflow.sdk.execution_time.task_runner", name).RuntimeTaskInstance
    assert "_ti_context_from_server" in getattr(runtime_ti, "__private_attributes__", {}), changed(
        name, "is missing"
    )
    generated = imported("airflow.sdk.api.datamodels._generated", name)
    assert "next_method" in generated.TIRunContext.model_fields, changed(
        name, "TIRunContext has no next_method"
    )


def test_base_operator_post_execute_hook():
    from airflow_provider_crew._compat import BaseOperator

    name = "BaseOperator._post_execute_hook"

    def hook(context: Any, result: Any) -> None:
        return None

    operator = BaseOperator(task_id="post_execute_hook", post_execute=hook)
    assert getattr(operator, "_post_execute_hook", None) is hook, changed(
        name, "no longer holds the post_execute= callable"
    )


def test_task_decorator_subclass():
    name = "airflow.sdk.bases.decorator._TaskDecorator"
    decorator_module = imported("airflow.sdk.bases.decorator", name)
    task_decorator = attribute(decorator_module, "_TaskDecorator", name)
    import attr

    fields = set(attr.fields_dict(task_decorator))
    passed = {"function", "operator_class", "multiple_outputs", "kwargs", "decorator_name"}
    assert passed <= fields, changed(name, f"has no field {sorted(passed - fields)}")
    expand = inspect.signature(task_decorator._expand).parameters
    assert list(expand)[:2] == ["self", "expand_input"] and "strict" in expand, changed(
        name, f"_expand changed ({inspect.signature(task_decorator._expand)})"
    )
    from airflow.sdk import DAG

    from airflow_provider_crew.decorators.crew import crew_task

    def inputs(topic: str) -> dict[str, str]:
        return {"topic": topic}

    with DAG("private_task_decorator", schedule=None, start_date=datetime(2026, 1, 1)):
        plain = crew_task(crew_conn_id="c")(inputs)("t")
        mapped = crew_task(crew_conn_id="c")(inputs).expand(topic=["a", "b"])
    assert type(plain).__name__ == type(mapped).__name__ == "CrewXComArg", changed(
        name, f"no longer returns the subclass's XComArg ({type(plain).__name__}, {type(mapped).__name__})"
    )
    assert mapped.operator.is_mapped, changed(name, "_expand no longer builds the mapped task")


def test_plain_xcom_arg_subclass(crew_dag):
    name = "airflow.sdk.definitions.xcom_arg.PlainXComArg"
    xcom_arg = imported("airflow.sdk.definitions.xcom_arg", name)
    plain = attribute(xcom_arg, "PlainXComArg", name)
    assert not not_taking(plain, "operator", "key"), changed(name, f"changed ({inspect.signature(plain)})")
    assert "context" in inspect.signature(plain.resolve).parameters, changed(name, "resolve takes no context")
    from airflow_provider_crew.waiting.xcom import crew_output

    sensor = crew_dag.task_dict["sensor"]
    arg = crew_output(sensor)["result"]
    assert isinstance(arg, plain) and (arg.operator, arg.key) == (sensor, "result"), changed(
        name, "no longer keeps operator and key"
    )
    assert xcom_arg.serialize_xcom_arg(arg) == xcom_arg.serialize_xcom_arg(plain(sensor, "result")), changed(
        name, "serializes a subclass unlike itself (the scheduler must read CrewXComArg as a plain one)"
    )


def test_operator_partial_and_mapped_operator_class_swap():
    name = "airflow.sdk.definitions.mappedoperator.OperatorPartial._expand"
    mapped_module = imported("airflow.sdk.definitions.mappedoperator", name)
    partial_class = attribute(mapped_module, "OperatorPartial", name)
    mapped_class = attribute(mapped_module, "MappedOperator", name)
    expand = inspect.signature(attribute(partial_class, "_expand", name)).parameters
    assert list(expand)[:2] == ["self", "expand_input"] and "strict" in expand, changed(
        name, f"_expand changed ({inspect.signature(partial_class._expand)})"
    )
    from airflow.sdk import DAG

    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    with DAG("private_mapping", schedule=None, start_date=datetime(2026, 1, 1)):
        partial = CrewStatusSensor.partial(task_id="by_list", crew_conn_id="c")
        assert type(partial).__name__ == "CrewOperatorPartial", changed(
            name, "refuses the partial's __class__"
        )
        by_list = partial.expand(kickoff_id=["a"])
        by_kwargs = CrewStatusSensor.partial(task_id="by_kwargs").expand_kwargs([{"kickoff_id": "a"}])
    for mapped in (by_list, by_kwargs):
        assert isinstance(mapped, mapped_class) and type(mapped).__name__ == "CrewMappedOperator", changed(
            name, f"expand/expand_kwargs no longer pass through _expand ({type(mapped).__name__})"
        )
        assert type(mapped.output).__name__ == "CrewXComArg", changed(
            name, "the mapped task's output changed"
        )


def test_get_serialized_fields_reach_the_api_server(read_back):
    name = "BaseOperator.get_serialized_fields"
    from airflow_provider_crew._compat import BaseOperator
    from airflow_provider_crew.operators.wait import SERIALIZED_FOR_THE_UI
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    assert isinstance(inspect.getattr_static(BaseOperator, "get_serialized_fields", None), classmethod), (
        changed(name, "is no longer a classmethod")
    )
    assert SERIALIZED_FOR_THE_UI <= CrewStatusSensor.get_serialized_fields(), changed(
        name, "drops the override"
    )
    sensor = read_back.task_dict["sensor"]
    kept = {field: getattr(sensor, field, None) for field in ("crew_conn_id", "poll_interval")}
    assert kept == {"crew_conn_id": "one", "poll_interval": 7.0}, changed(
        name, f"no longer carries the extra fields to the deserialized task ({kept})"
    )


def test_resume_execution_override():
    name = "BaseOperator.resume_execution"
    from airflow_provider_crew._compat import BaseOperator

    parameters = list(inspect.signature(BaseOperator.resume_execution).parameters)
    assert parameters == ["self", "next_method", "next_kwargs", "context"], changed(
        name, f"changed ({parameters})"
    )
    runner = airflow_source("sdk/execution_time/task_runner.py")
    assert re.search(r"\btask\.resume_execution\b", runner), changed(
        name, "is no longer what the task runner calls to resume"
    )


def test_execution_time_xcom_set():
    name = "airflow.sdk.execution_time.xcom.XCom"
    xcom = attribute(imported("airflow.sdk.execution_time.xcom", name), "XCom", name)
    assert not not_taking(xcom.set, "key", "value", "dag_id", "task_id", "run_id", "map_index"), changed(
        name, f"XCom.set changed ({inspect.signature(xcom.set)})"
    )


@needs_3_1
def test_upsert_hitl_detail():
    name = "airflow.sdk.execution_time.hitl.upsert_hitl_detail"
    upsert = attribute(imported("airflow.sdk.execution_time.hitl", name), "upsert_hitl_detail", name)
    passed = ("ti_id", "subject", "body", "assigned_users", "options", "defaults", "multiple", "params")
    assert not not_taking(upsert, *passed), changed(name, f"changed ({inspect.signature(upsert)})")


def test_param_definitions_module():
    name = "airflow.sdk.definitions.param"
    params = imported("airflow.sdk.definitions.param", name)
    attribute(params, "Param", name)
    params_dict = attribute(params, "ParamsDict", name)
    if AIRFLOW_V_3_1_3_PLUS:
        assert callable(getattr(params_dict, "get_param", None)) and callable(params.Param.serialize), (
            changed(name, "has no ParamsDict.get_param / Param.serialize")
        )
    else:
        assert callable(getattr(params_dict, "dump", None)), changed(name, "has no ParamsDict.dump")
    from airflow_provider_crew._compat import hitl_params

    assert set(hitl_params({"feedback": params.Param("", type=["string", "null"])})) == {"feedback"}, changed(
        name, "no longer gives the form fields hitl_params builds"
    )


def test_stats_clients_of_each_process():
    name = "airflow._shared.observability.metrics.stats"
    from airflow_provider_crew._compat import _STATS_CLIENTS

    found = {}
    for module in _STATS_CLIENTS:
        try:
            found[module] = importlib.import_module(module)
        except ImportError:
            continue
    if not AIRFLOW_V_3_2_PLUS:
        assert found == {}, changed(name, f"exists before 3.2 ({sorted(found)}): stats_client would read it")
        return
    assert found, changed(name, f"and its SDK twin are gone ({_STATS_CLIENTS})")
    for module, client in found.items():
        assert hasattr(client, "_factory") and hasattr(client, "Stats"), changed(
            name, f"{module} has no module-level _factory (set by initialize) and Stats"
        )


def test_listener_manager_hook_callers():
    """Checked on a fresh manager: the process's own would load every plugin's listeners."""
    name = "get_listener_manager().hook"
    if AIRFLOW_V_3_2_PLUS:
        attribute(imported("airflow.sdk.listener", name), "get_listener_manager", name)
        manager = imported("airflow.sdk._shared.listeners.listener", name).ListenerManager()
        manager.add_hookspecs(imported("airflow.sdk._shared.listeners.spec.taskinstance", name))
    else:
        listener = imported("airflow.listeners.listener", name)
        attribute(listener, "get_listener_manager", name)
        manager = listener.ListenerManager()
    caller = getattr(getattr(manager, "hook", None), "on_task_instance_success", None)
    assert caller is not None and caller.get_hookimpls() == [], changed(
        name, "has no on_task_instance_success hook caller to ask for its implementations"
    )


def test_api_server_calls_listeners_on_a_users_mark():
    """apache/airflow#48941: a user's mark calls the listeners in the api-server, previous_state=None,
    with the ORM task instance of the request's session (the listener reads its trigger there)."""
    name = "api-server listeners on a user's mark"
    source = airflow_source("api_fastapi/core_api/services/public/task_instances.py") or airflow_source(
        "api_fastapi/core_api/routes/public/task_instances.py"
    )
    called = re.search(r"hook\.on_task_instance_failed\(\s*previous_state=None", source)
    assert called, changed(
        name, "no longer calls on_task_instance_failed(previous_state=None, ...) on a mark"
    )


def test_base_trigger_task_instance():
    name = "BaseTrigger.task_instance"
    from airflow.triggers.base import BaseTrigger

    class Probe(BaseTrigger):
        def serialize(self) -> tuple[str, dict[str, Any]]:
            return "probe", {}

        async def run(self) -> Any:
            yield None

    probe = Probe()
    assert hasattr(probe, "task_instance") and probe.task_instance is None, changed(
        name, "is no longer an attribute of every trigger (None until the triggerer sets it)"
    )
    assert callable(getattr(Probe, "logger", None)), changed(
        name, "BaseTrigger.logger() (the class's logger) is gone"
    )


# -- the list and the doc -------------------------------------------------------------------------


def test_every_private_name_is_in_the_architecture_doc():
    doc = (REPO / "docs" / "architecture.md").read_text()
    section = doc.partition("## Private Airflow APIs")[2].partition("\n## ")[0]
    assert section, "docs/architecture.md has no 'Private Airflow APIs' section"
    missing = [name for name in PRIVATE_APIS if f"`{name}`" not in section]
    assert missing == [], f"add to docs/architecture.md's 'Private Airflow APIs': {missing}"


def test_every_private_name_has_its_test():
    source = Path(__file__).read_text()
    untested = [name for name in PRIVATE_APIS if source.count(f'name = "{name}"') != 1]
    assert untested == [], f"one test per private name: {untested}"
