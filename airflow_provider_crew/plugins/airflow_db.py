"""The api-server's one door to Airflow's private parts: every Airflow name the plugin uses that Airflow
does not publish for providers is imported here, and nowhere else under ``plugins/``.

Why a door: the plugin runs inside Airflow's api-server and works on Airflow's metadata database (the
deferred task instances a webhook wakes, their triggers, the XComs and rendered fields the Crew views
show) and with its auth manager. Airflow has no public interface for any of it (its REST API is HTTP
only, and no public call resumes a deferred task with an event), so the plugin uses Airflow's models
and helpers. Behind one door, a new Airflow release changes one module: docs/architecture.md ("Private
Airflow APIs") lists every name with its public alternative, and tests/test_private_airflow_apis.py
fails naming the name when the installed Airflow removes or changes one. The differences between
releases are settled here too: Airflow 3.4 keeps XComs and rendered fields per attempt
(``task_instance_id``): :func:`of_task_instance` reads the attempt's rows there, and
:func:`set_task_xcom` writes the attempt's row to the table behind 3.4's read-only ``XComModel``.

Every import stays inside a function: each ``airflow`` command and component loads the plugin, and
importing ``airflow.models`` when a plugin module is imported would slow them all.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

#: What Airflow stores as a task's ``next_method`` when it cannot store a resume event (3.3).
EVENT_NOT_STORED = "__fail__"


# -- sessions and models ----------------------------------------------------------------------------


@contextmanager
def session() -> Iterator[Any]:
    """A database session committed at the end of the block, rolled back on an error."""
    from airflow.utils.session import create_session  # looked up at each call: a benchmark wraps it

    with create_session() as opened:
        yield opened


def task_instance_model() -> Any:
    """Airflow's ``TaskInstance`` model, for the Crews page's queries."""
    from airflow.models.taskinstance import TaskInstance

    return TaskInstance


def xcom_model() -> Any:
    """Airflow's ``XComModel``, to read XComs (3.4: a read-only projection over both XCom stores)."""
    from airflow.models.xcom import XComModel

    return XComModel


def xcom_write_model() -> Any:
    """The model a task instance's XCom row is written to: 3.4's ``XComModelV2`` (table ``xcom_v2``, a row
    per attempt and key), as its execution API writes one; before 3.4, ``XComModel`` itself."""
    try:
        from airflow.models.xcom import XComModelV2
    except ImportError:  # before 3.4
        return xcom_model()
    return XComModelV2


def rendered_fields_model() -> Any:
    """Airflow's ``RenderedTaskInstanceFields``."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    return RenderedTaskInstanceFields


def dag_run_model() -> Any:
    """Airflow's ``DagRun`` model, for the run's state on the Crews page."""
    from airflow.models.dagrun import DagRun

    return DagRun


def of_task_instance(model: Any, ti: Any) -> Any:
    """The rows of ``model`` (XComs, rendered fields) that the task instance ``ti`` wrote: ``ti`` is a row
    read, or the ``TaskInstance`` model itself to join to the instance that wrote them.

    Airflow 3.4 keeps these rows per attempt (``task_instance_id``): a read by dag, run, task and map
    index would also find an earlier try's, so there the attempt's id is matched. Before 3.4 the four
    columns name the task instance (Airflow's index on them).
    """
    if getattr(model, "task_instance_id", None) is not None:
        return model.task_instance_id == ti.id
    return (
        (model.dag_id == ti.dag_id)
        & (model.run_id == ti.run_id)
        & (model.task_id == ti.task_id)
        & (model.map_index == ti.map_index)
    )


# -- the Crew tab and the Crews page ----------------------------------------------------------------


def task_instance(db: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> Any:
    """The task instance (Airflow's ORM row; its latest try), or None."""
    from sqlalchemy import select

    TI = task_instance_model()
    where = (TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == task_id, TI.map_index == map_index)
    return db.scalars(select(TI).where(*where)).one_or_none()


def task_xcoms(db: Any, ti: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The XComs ``keys`` of the task instance ``ti`` (of its attempt on 3.4), by key, as stored."""
    from sqlalchemy import select

    XCom = xcom_model()
    query = select(XCom.key, XCom.value).where(of_task_instance(XCom, ti), XCom.key.in_(keys))
    return {key: value for key, value in db.execute(query)}


def run_xcoms(db: Any, dag_id: str, run_id: str, key: str, operator: str) -> list[tuple[str, int, Any]]:
    """(task id, map index, stored value) of the XComs ``key`` that the run's ``operator`` tasks pushed."""
    from sqlalchemy import select

    XCom, TI = xcom_model(), task_instance_model()
    query = (
        select(XCom.task_id, XCom.map_index, XCom.value)
        .join(TI, of_task_instance(XCom, TI))
        .where(XCom.dag_id == dag_id, XCom.run_id == run_id, XCom.key == key, TI.operator == operator)
    )
    return [tuple(row) for row in db.execute(query)]  # type: ignore[misc]


def rendered_fields(db: Any, ti: Any) -> dict[str, Any] | None:
    """The task instance's template fields as rendered (of its attempt on 3.4); None when not stored."""
    from sqlalchemy import select

    RTIF = rendered_fields_model()
    fields = db.scalars(select(RTIF.rendered_fields).where(of_task_instance(RTIF, ti))).first()
    return fields if isinstance(fields, dict) else None


def xcom_value(stored: Any) -> Any:
    """A stored XCom value as Airflow reads it back (its ``deserialize_value``, looked up once: the
    Crews page decodes thousands)."""
    return _xcom_decoder()(SimpleNamespace(value=stored))


@functools.cache
def _xcom_decoder() -> Any:
    return xcom_model().deserialize_value


def serialized_dag(db: Any, dag_version_id: Any) -> Any:
    """The DAG of one DAG version, deserialized by Airflow; None when it is not stored."""
    from airflow.models.serialized_dag import SerializedDagModel
    from sqlalchemy import select

    query = select(SerializedDagModel).where(SerializedDagModel.dag_version_id == dag_version_id)
    stored = db.scalars(query.limit(1)).first()
    return None if stored is None else stored.dag


def trigger_row(db: Any, trigger_id: int) -> Any:
    """The trigger row (``classpath``, ``kwargs`` decrypted, ``triggerer_id``), or None."""
    from airflow.models.trigger import Trigger

    return db.get(Trigger, trigger_id)


# -- who may read what (Airflow 3.1+: only there are the views mounted) -----------------------------


def user_dependency() -> Any:
    """Airflow's FastAPI dependency that finds the user (bearer token, else the UI's cookie)."""
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


def may_read_task_instances(user: Any, dag_id: str | None) -> bool:
    """Whether the auth manager lets ``user`` read the task instances of ``dag_id`` (None: of any DAG)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.models.dag import DagModel

    # With the DAG's team, as Airflow's own routes ask (requires_access_dag): in a multi-team
    # deployment an auth manager refuses another team's DAG only when it is told the team.
    team_name = DagModel.get_team_name(dag_id) if dag_id else None
    details = DagDetails(id=dag_id, team_name=team_name)
    return get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.TASK_INSTANCE, details=details, user=user
    )


def readable_dag_ids(user: Any) -> set[str]:
    """The DAGs whose task instances the auth manager lets ``user`` read."""
    from airflow.api_fastapi.app import get_auth_manager

    return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))


# -- waking a deferred task, and what a user left ---------------------------------------------------


def connection(conn_id: str) -> Any:
    """A connection as the api-server resolves it (secrets backends, environment, database); raises
    ``AirflowNotFoundException`` when it is not defined."""
    from airflow.models.connection import Connection

    return Connection.get_connection_from_secrets(conn_id)


def wake_internals_missing() -> str | None:
    """Why this Airflow cannot resume a deferred task with an event from a plugin, or None when it can."""
    try:
        from airflow.models.trigger import handle_event_submit
    except ImportError as error:
        return f"airflow.models.trigger.handle_event_submit is missing ({error})"
    parameters = inspect.signature(handle_event_submit).parameters
    if not {"event", "task_instance", "session"} <= set(parameters):
        return f"airflow.models.trigger.handle_event_submit takes {list(parameters)}, not what this sends"
    return None


def deferred_waits(dag_id: str, run_id: str, classpath: str) -> list[tuple[Any, int, dict[str, Any]]]:
    """(task instance id, trigger id, trigger kwargs) of the run's task instances deferred on a trigger
    of ``classpath``."""
    from airflow.models.trigger import Trigger
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    TI = task_instance_model()
    query = (
        select(TI.id, Trigger)
        .join(Trigger, TI.trigger_id == Trigger.id)
        .where(
            TI.dag_id == dag_id,
            TI.run_id == run_id,
            TI.state == TaskInstanceState.DEFERRED,
            Trigger.classpath == classpath,
        )
    )
    with session() as db:
        return [(ti_id, trigger.id, dict(trigger.kwargs)) for ti_id, trigger in db.execute(query)]


def _deferred_on(ti_id: Any, trigger_id: int) -> tuple[Any, ...]:
    from airflow.utils.state import TaskInstanceState

    TI = task_instance_model()
    return (TI.id == ti_id, TI.state == TaskInstanceState.DEFERRED, TI.trigger_id == trigger_id)


def lock_deferred(db: Any, ti_id: Any, trigger_id: int) -> Any:
    """The task instance, row-locked (PostgreSQL, MySQL) while it is deferred on ``trigger_id``; else None."""
    from airflow.utils.sqlalchemy import with_row_locks
    from sqlalchemy import select

    TI = task_instance_model()
    query = with_row_locks(select(TI).where(*_deferred_on(ti_id, trigger_id)), session=db, of=TI)
    return db.scalars(query).one_or_none()


def claim_deferred(db: Any, ti_id: Any, trigger_id: int) -> bool:
    """Claim the task instance while it is deferred on ``trigger_id``: an update that matches only then,
    which serialises a concurrent resume where there are no row locks (SQLite)."""
    from sqlalchemy import update

    claim = update(task_instance_model()).where(*_deferred_on(ti_id, trigger_id))
    done = db.execute(claim.values(trigger_id=trigger_id).execution_options(synchronize_session=False))
    return bool(done.rowcount == 1)


def submit_event(db: Any, ti: Any, payload: dict[str, Any]) -> bool:
    """Resume the deferred task instance ``ti`` with ``payload`` as its trigger's event, as the triggerer
    does; False when Airflow could not store the event (it fails the task then)."""
    from airflow.models.trigger import handle_event_submit
    from airflow.triggers.base import TriggerEvent

    handle_event_submit(TriggerEvent(payload), task_instance=ti, session=db)
    return ti.next_method != EVENT_NOT_STORED


def task_instance_now(dag_id: str, run_id: str, task_id: str, map_index: int) -> tuple[Any, int] | None:
    """(state, try number) of the task instance now, in a session of its own; None when it is gone."""
    with session() as db:
        ti = task_instance(db, dag_id, run_id, task_id, map_index)
        return None if ti is None else (ti.state, ti.try_number)


# -- the event stream -------------------------------------------------------------------------------


def lock_task_instance(db: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> Any:
    """The task instance, row-locked (PostgreSQL, MySQL) until the session ends, so that two deliveries
    to it, in any api-server process, update its events one after the other; None when it is gone."""
    from airflow.utils.sqlalchemy import with_row_locks
    from sqlalchemy import select

    TI = task_instance_model()
    where = (TI.dag_id == dag_id, TI.run_id == run_id, TI.task_id == task_id, TI.map_index == map_index)
    return db.scalars(with_row_locks(select(TI).where(*where), session=db, of=TI)).one_or_none()


def set_task_xcom(db: Any, ti: Any, key: str, value: Any) -> None:
    """Store ``value`` (JSON) as the task instance's XCom ``key``, replacing the one stored: before 3.4
    Airflow deletes it with the task instance's XComs when a new try starts, and with the DAG run; 3.4
    keeps it with the attempt that wrote it (its row, keyed by ``task_instance_id``), which a new try's
    reads do not see.

    Stored as a task's own push is (the execution API's row: the JSON as it is), so that ``xcom_pull``,
    the REST API and the UI read it as they read the task's: ``XComModel.set`` encodes the value to
    text first, which Airflow 3.0's REST API then returns as text. 3.4's ``XComModel`` takes no write
    (a projection: the delete is refused, an insert raises), so the row goes to :func:`xcom_write_model`.
    """
    from sqlalchemy import delete

    XCom = xcom_write_model()
    per_attempt = getattr(XCom, "task_instance_id", None) is not None
    row = _xcom_row(ti, key, per_attempt)
    db.execute(delete(XCom).where(*(getattr(XCom, column) == named for column, named in row.items())))
    if per_attempt:  # 3.4: the attempt's id and the key name the row (``xcom_v2_ti_key_uq``)
        db.add(XCom(value=value, **row))
    else:
        db.add(XCom(dag_run_id=ti.dag_run.id, value=value, **row))


def _xcom_row(ti: Any, key: str, per_attempt: bool) -> dict[str, Any]:
    """The columns that name the task instance's XCom ``key``: its attempt's id (3.4), else its dag, run,
    task and map index."""
    if per_attempt:
        return {"task_instance_id": ti.id, "key": key}
    return {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "key": key,
    }


def run_key_xcoms(db: Any, dag_id: str, run_id: str, key: str) -> list[Any]:
    """The stored values of every XCom ``key`` in the run (of each task instance's attempt on 3.4)."""
    from sqlalchemy import select

    XCom, TI = xcom_model(), task_instance_model()
    query = (
        select(XCom.value)
        .join(TI, of_task_instance(XCom, TI))
        .where(XCom.dag_id == dag_id, XCom.run_id == run_id, XCom.key == key)
    )
    return list(db.scalars(query))
