"""Imports that moved between Airflow 3.0 and later 3.x releases, resolved in one place.

``apache-airflow-providers-common-compat`` already maps every moved name to the right module for
the running Airflow; this module adds the version flags the provider itself needs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow import __version__ as _airflow_version
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
    BaseHook,
    BaseOperator,
    BaseSensorOperator,
    conf,
)
from packaging.version import Version

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.definitions.connection import Connection
    from airflow.sdk.definitions.param import Param

AIRFLOW_VERSION = Version(Version(_airflow_version).base_version)
AIRFLOW_V_3_1_PLUS = AIRFLOW_VERSION >= Version("3.1.0")
AIRFLOW_V_3_1_3_PLUS = AIRFLOW_VERSION >= Version("3.1.3")
AIRFLOW_V_3_3_PLUS = AIRFLOW_VERSION >= Version("3.3.0")


async def aget_connection(conn_id: str) -> Connection:
    """Look a connection up without blocking the event loop (triggers run in the triggerer's loop).

    The common-compat helper picks ``BaseHook.aget_connection`` where it is safe (3.3.2+) and a
    worker thread elsewhere: before 3.3.2 ``aget_connection`` can deadlock on secret masking.
    """
    from airflow.providers.common.compat.connection import get_async_connection

    return await get_async_connection(conn_id)  # type: ignore[no-any-return]


# Past Airflow's own bound on a deferring task's process (``[core] task_success_overtime``), the
# LocalExecutor/Celery worker still has to report the exit and the scheduler to read it: a scheduler
# loop or two, generously.
SETTLE_MARGIN_SECONDS = 5.0


def running_in_process_test() -> bool:
    """True inside ``dag.test()`` / ``airflow dags test``: tasks run in-process, with no executor."""
    try:
        from airflow.sdk.execution_time import task_runner
    except ImportError:  # pragma: no cover - every supported Airflow has it
        return False
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    return type(comms).__name__ == "InProcessSupervisorComms"


def deferral_settle_seconds() -> float:
    """How long after a task defers (or parks) an event may resume it without tripping Airflow's
    stale executor-event race (apache/airflow#67287, #72716).

    When the task instance is queued again before the scheduler has read the executor's report of
    the deferring process's exit, Airflow fails it ("finished with state success, but the task
    instance's state attribute is queued"). Airflow bounds how long that process may live after it
    reported its state (``[core] task_success_overtime``, then it is killed); add a margin for the
    executor to report the exit and the scheduler to read it. Zero in ``dag.test()``, which has no
    executor and so no race.
    """
    if running_in_process_test():
        return 0.0
    overtime = conf.getfloat("core", "task_success_overtime", fallback=20.0)
    heartbeat = conf.getfloat("scheduler", "scheduler_heartbeat_sec", fallback=5.0)
    return overtime + max(SETTLE_MARGIN_SECONDS, 2 * heartbeat)


def hitl_params(params: Mapping[str, Param]) -> dict[str, Any]:
    """Human-in-the-loop form fields in the form the running Airflow stores (changed in 3.1.3)."""
    from airflow.sdk.definitions.param import ParamsDict

    params_dict = ParamsDict(dict(params))
    if not AIRFLOW_V_3_1_3_PLUS:
        return params_dict.dump()  # type: ignore[no-any-return]
    return {key: params_dict.get_param(key).serialize() for key in params_dict}


def park_for_human_input(
    task: Any,
    context: Context,
    *,
    options: list[str],
    subject: str,
    body: str,
    defaults: list[str] | None,
    params: dict[str, Any],
    assigned_users: list[dict[str, str]],
    response_timeout: timedelta | None,
    method_name: str,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Write a human-in-the-loop request for this task instance and wait for the answer, slot-free.

    Airflow 3.3+ parks the task in ``awaiting_input`` (the answer resumes it directly). Airflow
    3.1-3.2 defer it to a trigger that polls for the answer; ours holds the answer back until the
    parking process's exit is surely handled (:func:`deferral_settle_seconds`). Needs Airflow 3.1+.
    """
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    ti_id = context["task_instance"].id
    upsert_hitl_detail(
        ti_id=ti_id,
        options=options,
        subject=subject,
        body=body,
        defaults=defaults,
        multiple=False,
        params=params,
        assigned_users=assigned_users,  # type: ignore[arg-type]
    )
    if AIRFLOW_V_3_3_PLUS:
        from airflow.sdk.exceptions import TaskAwaitingInput

        raise TaskAwaitingInput(method_name=method_name, kwargs=kwargs, timeout=response_timeout)

    defer_until_answered(
        task,
        context,
        options=options,
        defaults=defaults,
        params=params,
        response_timeout=response_timeout,
        method_name=method_name,
        kwargs=kwargs,
    )


def defer_until_answered(
    task: Any,
    context: Context,
    *,
    options: list[str],
    defaults: list[str] | None,
    params: dict[str, Any],
    response_timeout: timedelta | None,
    method_name: str,
    kwargs: dict[str, Any],
) -> NoReturn:
    """Wait in the triggerer for the answer to this task instance's request, as it stands.

    The request is not written again, so an answer it already holds is kept: Airflow clears the
    answer when a try writes the request again. The answer is held back until the deferring
    process's exit is surely handled (:func:`deferral_settle_seconds`). Needs Airflow 3.1+.
    """
    from airflow.sdk.timezone import utcnow

    from airflow_provider_crew.triggers.human_review import CrewReviewAnswerTrigger

    task.defer(
        trigger=CrewReviewAnswerTrigger(
            ti_id=context["task_instance"].id,
            options=options,
            defaults=defaults,
            params=params,
            multiple=False,
            timeout_datetime=utcnow() + response_timeout if response_timeout else None,
            not_before=time.time() + deferral_settle_seconds(),
        ),
        method_name=method_name,
        kwargs=kwargs,
    )
    raise AssertionError("defer() returned")  # pragma: no cover - defer always raises


def require_human_in_the_loop(message: str) -> None:
    """Raise Airflow's optional-feature error, ``message`` formatted with the running version, when
    this Airflow has no human-in-the-loop API (it came in 3.1)."""
    if not AIRFLOW_V_3_1_PLUS:
        from airflow.providers.common.compat.sdk import AirflowOptionalProviderFeatureException

        raise AirflowOptionalProviderFeatureException(message.format(version=_airflow_version))


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


def default_deferrable() -> bool:
    """The deployment-wide default for ``deferrable``, read the way Airflow's own operators read it."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


__all__ = [
    "AIRFLOW_V_3_1_3_PLUS",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "aget_connection",
    "conf",
    "default_deferrable",
    "defer_until_answered",
    "deferral_settle_seconds",
    "hitl_params",
    "park_for_human_input",
    "require_human_in_the_loop",
    "running_in_process_test",
    "task_state_store",
]
