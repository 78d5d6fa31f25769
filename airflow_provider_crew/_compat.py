"""What differs between the Airflow releases the provider supports (3.0 to 3.3), in one place.

Version flags, names that moved between releases (``apache-airflow-providers-common-compat``
already maps most of them to the right module for the running Airflow) and small probes of what
the running Airflow has. Nothing here builds a trigger, defers a task or imports from the rest of
the package: behaviour that depends on these lives with its concept.

It is also the task side's one door to Airflow's private parts (the api-server's is
``plugins/airflow_db.py``): every name Airflow does not publish for providers that a task, a trigger
or a DAG file uses is reached here, so that one file shows what a new Airflow can break
(docs/architecture.md, "Private Airflow APIs"; tests/test_private_airflow_apis.py checks each).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow import __version__ as _airflow_version
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowOptionalProviderFeatureException,
    AirflowSkipException,
    BaseHook,
    BaseOperator,
    BaseSensorOperator,
    Stats,
    conf,
)
from packaging.version import Version

if TYPE_CHECKING:
    from airflow.providers.standard.triggers.hitl import HITLTrigger as HITLTrigger
    from airflow.sdk.bases.decorator import _TaskDecorator as TaskDecoratorBase
    from airflow.sdk.definitions.connection import Connection
    from airflow.sdk.definitions.mappedoperator import OperatorPartial as OperatorPartial
    from airflow.sdk.definitions.param import Param
    from airflow.sdk.definitions.xcom_arg import PlainXComArg as PlainXComArg

AIRFLOW_VERSION = Version(Version(_airflow_version).base_version)
AIRFLOW_V_3_1_PLUS = AIRFLOW_VERSION >= Version("3.1.0")
AIRFLOW_V_3_1_3_PLUS = AIRFLOW_VERSION >= Version("3.1.3")
AIRFLOW_V_3_3_PLUS = AIRFLOW_VERSION >= Version("3.3.0")
# apache/airflow#72716 (a deferred task resumed before the scheduler read its deferral's exit is
# failed) is open, so no release is free of it yet: set this from the first release that fixes it.
# airflow_provider_crew.waiting.race holds the workaround.
AIRFLOW_DEFERRAL_RACE_FIXED = False
# 3.3+ call a trigger's on_kill when a user ends its deferred task (or another triggerer takes it
# over); before, the trigger only sees its task cancelled.
TRIGGER_ON_KILL = AIRFLOW_V_3_3_PLUS


async def aget_connection(conn_id: str) -> Connection:
    """Look a connection up without blocking the event loop (triggers run in the triggerer's loop).

    The common-compat helper picks ``BaseHook.aget_connection`` where it is safe (3.3.2+) and a
    worker thread elsewhere: before 3.3.2 ``aget_connection`` can deadlock on secret masking.
    """
    from airflow.providers.common.compat.connection import get_async_connection

    return await get_async_connection(conn_id)  # type: ignore[no-any-return]


def running_in_process_test() -> bool:
    """True inside ``dag.test()`` / ``airflow dags test``: tasks run in-process, with no executor."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - every supported Airflow has it
        return False
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    return type(comms).__name__ == "InProcessSupervisorComms"


def hitl_params(params: Mapping[str, Param]) -> dict[str, Any]:
    """Human-in-the-loop form fields in the form the running Airflow stores (changed in 3.1.3)."""
    from airflow.sdk.definitions.param import ParamsDict

    params_dict = ParamsDict(dict(params))
    if not AIRFLOW_V_3_1_3_PLUS:
        return params_dict.dump()  # type: ignore[no-any-return]
    return {key: params_dict.get_param(key).serialize() for key in params_dict}


def require_human_in_the_loop(message: str) -> None:
    """Raise Airflow's optional-feature error, ``message`` formatted with the running version, when
    this Airflow has no human-in-the-loop API (it came in 3.1)."""
    if not AIRFLOW_V_3_1_PLUS:
        raise AirflowOptionalProviderFeatureException(message.format(version=_airflow_version))


def task_awaiting_input(method_name: str, kwargs: dict[str, Any], timeout: Any) -> BaseException | None:
    """What parks a task for a human-in-the-loop answer without a trigger (``TaskAwaitingInput``,
    Airflow 3.3+; the answer resumes the task in ``method_name``); None before 3.3, which defers."""
    if not AIRFLOW_V_3_3_PLUS:
        return None
    from airflow.sdk.exceptions import TaskAwaitingInput

    return TaskAwaitingInput(method_name=method_name, kwargs=kwargs, timeout=timeout)


#: Private classes the task side subclasses, looked up when first imported (each loads more of Airflow's
#: task SDK than a DAG file that does not use it needs): name -> (module, attribute).
_PRIVATE_CLASSES = {
    # @task.crew's decorator: task_decorator_factory cannot change the XComArg its tasks give.
    "TaskDecoratorBase": ("airflow.sdk.bases.decorator", "_TaskDecorator"),
    # A crew task's .output (waiting/xcom.py): a subclass that Airflow serialises as its plain XComArg.
    "PlainXComArg": ("airflow.sdk.definitions.xcom_arg", "PlainXComArg"),
    # A crew task's partial()/expand(): OperatorPartial._expand builds the mapped task on every minor.
    "OperatorPartial": ("airflow.sdk.definitions.mappedoperator", "OperatorPartial"),
}


def __getattr__(name: str) -> Any:
    """``HITLTrigger`` and :data:`_PRIVATE_CLASSES`, looked up when first imported. ``HITLTrigger``
    (it loads Airflow's models and aiohttp) is the standard provider's on 3.1+; on 3.0, which has no
    human-in-the-loop and refuses to import it, the plain trigger base, so that the review package
    still imports and refuses at DAG parse."""
    import importlib

    if name == "HITLTrigger" and AIRFLOW_V_3_1_PLUS:
        module, attribute = "airflow.providers.standard.triggers.hitl", "HITLTrigger"
    elif name == "HITLTrigger":
        module, attribute = "airflow.triggers.base", "BaseTrigger"
    elif name in _PRIVATE_CLASSES:
        module, attribute = _PRIVATE_CLASSES[name]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(importlib.import_module(module), attribute)
    globals()[name] = found
    return found


def resumed_after_deferral(ti: Any) -> bool | None:
    """Whether this run of the task instance resumed after a deferral or a park (the server's
    ``next_method``); None where the running Airflow does not say (a private attribute of the task
    SDK's ``RuntimeTaskInstance`` on 3.0-3.3)."""
    context = getattr(ti, "_ti_context_from_server", None)
    if context is None:
        return None
    return bool(getattr(context, "next_method", None))


def has_post_execute(task: Any) -> bool:
    """Whether ``task`` runs something after ``execute``: its class overrides ``post_execute``, or it
    was given a ``post_execute`` callable (``BaseOperator``'s private ``_post_execute_hook``, 3.0-3.3)."""
    overridden = type(task).post_execute is not BaseOperator.post_execute
    return overridden or bool(getattr(task, "_post_execute_hook", None))


def upsert_hitl_detail(**fields: Any) -> None:
    """Write this task instance's human-in-the-loop request (the task SDK's private
    ``execution_time.hitl.upsert_hitl_detail``, 3.1-3.3: the standard provider's ``HITLOperator``
    writes its requests with it too; there is no public call)."""
    from airflow.sdk.execution_time import hitl

    hitl.upsert_hitl_detail(**fields)


def task_instance_state(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str | None:
    """A task instance's state as Airflow's API answers it now (``None`` after a clear), asked from a
    worker's task process or a trigger through the task SDK; raises when the API does not answer.

    Every supported minor serves ``get_task_states`` to both; a mapped task instance is keyed
    ``<task_id>_<map_index>`` there.
    """
    return task_instance_states(dag_id, run_id, [task_id], map_index)[task_id]


def task_instance_states(
    dag_id: str, run_id: str, task_ids: list[str], map_index: int | None
) -> dict[str, str | None]:
    """:func:`task_instance_state` of several tasks of one run (the same map index), by task id."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    index = -1 if map_index is None else map_index
    states = RuntimeTaskInstance.get_task_states(
        dag_id=dag_id, map_index=None if index < 0 else index, task_ids=list(task_ids), run_ids=[run_id]
    )[run_id]
    found = {task_id: states.get(task_id if index < 0 else f"{task_id}_{index}") for task_id in task_ids}
    return {
        task_id: None if state is None else str(getattr(state, "value", state))
        for task_id, state in found.items()
    }


# Airflow builds a triggerer's in-process execution API (its Cadwyn versioned routes) on the first
# request that reaches it: 3-5 s here, during which the triggerer answers none of its triggers'
# requests. Without this, that first request is the XCom push of the first trigger that ends its task.
# Measured on 3.3.2 (docs/performance.md); delete it once Airflow builds that API when the triggerer
# starts.
_execution_api_warmed = False
_background: set[asyncio.Task[None]] = set()


def warm_execution_api(task_instance: Any) -> None:
    """Once per triggerer process, in the background: ask Airflow for ``task_instance``'s state, so
    that the in-process execution API is built before a trigger needs it. Never raises; does nothing
    outside a task-SDK process (no supervisor comms) or where the call does not exist."""
    global _execution_api_warmed
    if _execution_api_warmed or task_instance is None:
        return
    _execution_api_warmed = True
    try:
        from airflow.sdk.execution_time import task_runner

        if getattr(task_runner, "SUPERVISOR_COMMS", None) is None:
            return
        task = asyncio.get_running_loop().create_task(_warm(task_instance))
    except Exception as error:  # pragma: no cover - every supported Airflow has both
        logging.getLogger(__name__).debug("Not warming the execution API: %r", error)
        return
    _background.add(task)  # a reference, so that the task is not collected while it runs
    task.add_done_callback(_background.discard)


async def _warm(ti: Any) -> None:
    from asgiref.sync import sync_to_async

    started = time.monotonic()
    try:
        await sync_to_async(task_instance_state)(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
    except Exception as error:
        logging.getLogger(__name__).debug("Warming the execution API failed: %r", error)
    else:
        logging.getLogger(__name__).debug("Execution API warmed in %.1f s.", time.monotonic() - started)


def is_task_timeout(error: BaseException | None) -> bool:
    """Whether ``error`` is Airflow's ``execution_timeout`` (``AirflowTaskTimeout``, which moved to the
    task SDK in 3.2): matched by name on every minor."""
    return type(error).__name__ == "AirflowTaskTimeout"


def xcom_not_found() -> type[Exception]:
    """Airflow's ``XComNotFound`` (``airflow.sdk.exceptions`` from 3.2, ``airflow.exceptions`` in 3.0-3.1)."""
    try:
        from airflow.sdk.exceptions import XComNotFound
    except ImportError:  # Airflow 3.0-3.1
        from airflow.exceptions import XComNotFound  # type: ignore[no-redef,attr-defined]
    return XComNotFound  # type: ignore[no-any-return]


def task_success_listeners() -> bool:
    """Whether a listener (OpenLineage's, a plugin's) is registered to see tasks succeed in their worker
    (``on_task_instance_success``); the listener manager moved to the task SDK in 3.2."""
    try:
        from airflow.sdk.listener import get_listener_manager
    except ImportError:  # Airflow 3.0-3.1
        from airflow.listeners.listener import get_listener_manager  # type: ignore[assignment]
    return bool(get_listener_manager().hook.on_task_instance_success.get_hookimpls())


#: Airflow 3.2+'s two metrics clients, each a module with its own settings: the task SDK's (set up by
#: the task runner) and the core's (set up by the scheduler, the triggerer, the api-server and the
#: dag-processor). Triggers run in the triggerer's runner process, forked from the triggerer's job,
#: which sets up only the core's: the SDK's ``Stats`` that common-compat gives would drop what a
#: trigger emits there.
_STATS_CLIENTS = (
    "airflow.sdk._shared.observability.metrics.stats",
    "airflow._shared.observability.metrics.stats",
)


def stats_client() -> Any:
    """Airflow's ``Stats`` that this process set up: the first of :data:`_STATS_CLIENTS` given a
    backend (``initialize``) here, else common-compat's ``Stats`` (3.0-3.1: ``airflow.stats``, which
    sets itself up from ``[metrics]`` in any process)."""
    import importlib

    for name in _STATS_CLIENTS:
        try:
            client = importlib.import_module(name)
        except ImportError:
            continue
        if _stats_initialized(client):
            return client.Stats
    return Stats


def _stats_initialized(client: Any) -> bool:
    """Whether this process gave ``client``'s ``Stats`` a backend: 3.3 keeps the factory
    ``initialize`` sets in the module (``_factory``), 3.2 on the ``Stats`` class itself (``factory``,
    which a use before ``initialize`` sets to ``NoStatsLogger``)."""
    if getattr(client, "_factory", None) is not None:
        return True
    stats = getattr(client, "Stats", None)
    factory = vars(stats).get("factory") if isinstance(stats, type) else None
    return factory is not None and getattr(factory, "__name__", None) != "NoStatsLogger"


def task_state_store(context: Mapping[str, Any]) -> Any:
    """The task instance's state store (Airflow 3.3+), which outlives a try; None before 3.3.

    The kickoff operator keeps its execution id there so that a retry reattaches to it. The SDK's
    ``ResumableJobMixin`` (3.3+) wraps the same store, but it owns ``execute()`` and polls in the
    worker itself; here the wait may be deferred and the id must also reach XCom and the link
    before it, so the operator uses the store directly, through this one function.
    """
    if not AIRFLOW_V_3_3_PLUS:
        return None
    return context.get("task_state_store")


__all__ = [
    "AIRFLOW_DEFERRAL_RACE_FIXED",
    "AIRFLOW_V_3_1_3_PLUS",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "TRIGGER_ON_KILL",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowOptionalProviderFeatureException",
    "AirflowSkipException",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "HITLTrigger",
    "OperatorPartial",
    "PlainXComArg",
    "TaskDecoratorBase",
    "aget_connection",
    "conf",
    "has_post_execute",
    "hitl_params",
    "is_task_timeout",
    "require_human_in_the_loop",
    "resumed_after_deferral",
    "running_in_process_test",
    "stats_client",
    "task_awaiting_input",
    "task_instance_state",
    "task_state_store",
    "task_success_listeners",
    "upsert_hitl_detail",
    "warm_execution_api",
    "xcom_not_found",
]
