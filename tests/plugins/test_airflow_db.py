"""The api-server's door to Airflow's private parts (:mod:`airflow_provider_crew.plugins.airflow_db`).

That no other plugin module goes around it; that its reads of XComs and rendered fields pick the
rows of the task instance's attempt where Airflow keeps them per attempt (3.4: ``task_instance_id``)
and the rows of its dag, run, task and map index before; and that it writes a task instance's XCom
where each release keeps it (3.4: the attempt's row in ``xcom_v2``, behind a read-only ``XComModel``).
Airflow 3.4 is not installed here: its shape is stood in for by mapped models on an in-memory SQLite
database (3.4's ``XComModel`` is a read-only projection of the ``xcom_v2`` rows with their attempt's
four columns; its task instance table holds one row per attempt, of which the ORM sees the live one),
next to the four-column shape of 3.0-3.3.
"""

from __future__ import annotations

import ast
import contextlib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Integer,
    String,
    Table,
    UniqueConstraint,
    create_engine,
    event,
    select,
)
from sqlalchemy import inspect as inspect_model
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, declarative_base

from airflow_provider_crew.crew_events import XCOM_CREW_EVENTS, CrewEvent
from airflow_provider_crew.plugins import airflow_db, event_receiver
from airflow_provider_crew.plugins import crew_views_data as data
from airflow_provider_crew.waiting.xcom import XCOM_STATUS, XCOM_USAGE

PLUGINS = Path(airflow_db.__file__).parent
#: The Airflow modules a plugin module may import itself: the ones Airflow publishes for plugins.
PUBLIC = {"airflow.plugins_manager", "airflow.listeners"}
NOW = datetime.now(timezone.utc)


def _airflow_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "airflow":
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "airflow"]
    return found


def test_no_plugin_module_but_the_door_imports_a_private_airflow_name():
    around = {
        f"{path.name}:{line}": module
        for path in sorted(PLUGINS.glob("*.py"))
        if path.name != "airflow_db.py"
        for line, module in _airflow_imports(ast.parse(path.read_text()))
        if module not in PUBLIC
    }
    assert around == {}, "import these through plugins/airflow_db.py"


def test_the_door_imports_airflow_only_when_called():
    """Every ``airflow`` command loads the plugin: importing the door must not import Airflow's models."""
    tree = ast.parse(Path(airflow_db.__file__).read_text())
    at_import = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert _airflow_imports(ast.Module(body=at_import, type_ignores=[])) == []


# -- Airflow's shapes, stood in for ------------------------------------------------------------------


Base: Any = declarative_base()  # SQLAlchemy 1.4 (Airflow 3.0) and 2.0 alike


class TaskInstance(Base):
    """The live attempt of each task instance (what Airflow's ORM selects see, 3.4 included)."""

    __tablename__ = "task_instance"
    id = Column(String, primary_key=True)
    dag_id = Column(String)
    run_id = Column(String)
    task_id = Column(String)
    map_index = Column(Integer)
    state = Column(String)
    operator = Column(String)
    custom_operator_name = Column(String, nullable=True)
    start_date = Column(DateTime(timezone=True), nullable=True)
    end_date = Column(DateTime(timezone=True), nullable=True)


class DagRun(Base):
    __tablename__ = "dag_run"
    dag_id = Column(String, primary_key=True)
    run_id = Column(String, primary_key=True)
    state = Column(String)


class _Coordinates:
    dag_id = Column(String, primary_key=True)
    run_id = Column(String, primary_key=True)
    task_id = Column(String, primary_key=True)
    map_index = Column(Integer, primary_key=True)


class XComByTask(_Coordinates, Base):
    """3.0-3.3: one row per task instance and key, read and written (``XComModel``)."""

    __tablename__ = "xcom"
    key = Column(String, primary_key=True)
    dag_run_id = Column(Integer, nullable=True)
    value = Column(JSON)
    timestamp = Column(DateTime(timezone=True), default=NOW)


class Attempt(Base):
    """3.4's task instance table as its XCom projection joins it: every attempt, an earlier try's too."""

    __tablename__ = "attempt"
    id = Column(String, primary_key=True)
    dag_id = Column(String)
    run_id = Column(String)
    task_id = Column(String)
    map_index = Column(Integer)


class XComRowsByAttempt(Base):
    """3.4's ``XComModelV2`` (``xcom_v2``), where an XCom is written: one row per attempt and key, no dag,
    run, task nor map index."""

    __tablename__ = "xcom_v2"
    id = Column(String, primary_key=True, default=lambda: uuid4().hex)
    task_instance_id = Column(String, nullable=False)
    key = Column(String, nullable=False)
    value = Column(JSON)
    timestamp = Column(DateTime(timezone=True), default=NOW, nullable=False)
    dag_result = Column(Boolean, default=False)
    __table_args__ = (UniqueConstraint("task_instance_id", "key", name="xcom_v2_ti_key_uq"),)


class XComByAttempt(Base):
    """3.4's ``XComModel``: a read-only projection of the ``xcom_v2`` rows with their attempt's four
    columns (Airflow's also unions in the ``xcom_v1`` rows an upgrade left)."""

    __table__ = (
        select(
            XComRowsByAttempt.task_instance_id,
            XComRowsByAttempt.key,
            XComRowsByAttempt.value,
            XComRowsByAttempt.timestamp,
            Attempt.dag_id,
            Attempt.run_id,
            Attempt.task_id,
            Attempt.map_index,
        )
        .join(Attempt, XComRowsByAttempt.task_instance_id == Attempt.id)
        .subquery("xcom")
    )
    __mapper_args__ = {"primary_key": [__table__.c.task_instance_id, __table__.c.key]}


def _read_only(mapper: Any, connection: Any, target: Any) -> None:
    raise TypeError("XCom read projection is read-only")  # as 3.4's _reject_projection_write


for _mutation in ("before_insert", "before_update", "before_delete"):
    event.listen(XComByAttempt, _mutation, _read_only)


class RenderedByTask(_Coordinates, Base):
    """3.0-3.3."""

    __tablename__ = "rendered_task_instance_fields"
    rendered_fields = Column(JSON)


class RenderedByAttempt(Base):
    """3.4 (``rtif_v2``): no dag, run, task nor map index."""

    __tablename__ = "rtif_v2"
    task_instance_id = Column(String, primary_key=True)
    rendered_fields = Column(JSON)


TASK = {"dag_id": "d", "run_id": "r", "task_id": "kickoff", "map_index": -1}


@pytest.fixture
def db(monkeypatch):
    """An in-memory database with a crew task at its second try (``try-2``; ``try-1`` failed), and the
    door's models and sessions pointed at it."""
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(DagRun(dag_id="d", run_id="r", state="running"))
        session.add(
            TaskInstance(id="try-2", state="failed", operator="CrewKickoffOperator", start_date=NOW, **TASK)
        )
        session.add_all([Attempt(id="try-1", **TASK), Attempt(id="try-2", **TASK)])
        session.commit()

    @contextlib.contextmanager
    def opened():
        with Session(engine) as session:
            yield session
            session.commit()

    monkeypatch.setattr(airflow_db, "session", opened)
    monkeypatch.setattr(airflow_db, "task_instance_model", lambda: TaskInstance)
    monkeypatch.setattr(airflow_db, "dag_run_model", lambda: DagRun)
    return engine


def store(engine: Any, *rows: Any) -> None:
    with Session(engine) as session:
        session.add_all(rows)
        session.commit()


def use(monkeypatch, *, xcom: Any = None, written: Any = None, rendered: Any = None) -> None:
    if xcom is not None:
        monkeypatch.setattr(airflow_db, "xcom_model", lambda: xcom)
    if written is not None:
        monkeypatch.setattr(airflow_db, "xcom_write_model", lambda: written)
    if rendered is not None:
        monkeypatch.setattr(airflow_db, "rendered_fields_model", lambda: rendered)


def live_ti(engine: Any) -> Any:
    with Session(engine) as session:
        return session.scalars(select(TaskInstance)).one()


# -- which rows are the task instance's --------------------------------------------------------------


def test_the_rows_of_a_task_instance_are_its_attempts_where_the_model_has_one():
    ti = SimpleNamespace(id="try-2", **TASK)
    by_attempt = str(airflow_db.of_task_instance(XComByAttempt, ti).compile())
    assert "task_instance_id" in by_attempt and "dag_id" not in by_attempt
    by_task = str(airflow_db.of_task_instance(XComByTask, ti).compile())
    assert "task_instance_id" not in by_task
    assert all(f"xcom.{column}" in by_task for column in TASK)
    joined = str(airflow_db.of_task_instance(RenderedByAttempt, TaskInstance).compile())
    assert joined == "rtif_v2.task_instance_id = task_instance.id"


def test_the_installed_airflows_models_take_the_branch_their_shape_calls_for():
    pytest.importorskip("airflow.models.xcom")
    for model in (airflow_db.xcom_model(), airflow_db.rendered_fields_model()):
        clause = str(airflow_db.of_task_instance(model, airflow_db.task_instance_model()))
        per_attempt = getattr(model, "task_instance_id", None) is not None
        assert ("task_instance_id" in clause) is per_attempt, clause
        assert ("map_index" in clause) is not per_attempt, clause


def test_a_task_instances_xcoms_are_its_attempts_on_3_4(db, monkeypatch):
    use(monkeypatch, xcom=XComByAttempt)
    store(
        db,
        XComRowsByAttempt(task_instance_id="try-1", key="kickoff_id", value='"k-old"'),
        XComRowsByAttempt(task_instance_id="try-1", key=XCOM_STATUS, value='{"state": "FAILED"}'),
        XComRowsByAttempt(task_instance_id="try-2", key="kickoff_id", value='"k-new"'),
    )
    with airflow_db.session() as session:
        ti = live_ti(db)
        assert airflow_db.task_xcoms(session, ti, ("kickoff_id", XCOM_STATUS)) == {"kickoff_id": '"k-new"'}
        assert airflow_db.run_xcoms(session, "d", "r", "kickoff_id", "CrewKickoffOperator") == [
            ("kickoff", -1, '"k-new"')
        ]


def test_a_task_instances_xcoms_are_its_dag_run_task_and_map_indexs_before_3_4(db, monkeypatch):
    use(monkeypatch, xcom=XComByTask)
    store(
        db,
        XComByTask(key="kickoff_id", value='"k-1"', **TASK),
        XComByTask(key="kickoff_id", value='"k-x"', **{**TASK, "map_index": 0}),
    )
    with airflow_db.session() as session:
        assert airflow_db.task_xcoms(session, live_ti(db), ("kickoff_id",)) == {"kickoff_id": '"k-1"'}
        assert airflow_db.run_xcoms(session, "d", "r", "kickoff_id", "CrewKickoffOperator") == [
            ("kickoff", -1, '"k-1"')
        ]


@pytest.mark.parametrize("model", [RenderedByAttempt, RenderedByTask])
def test_rendered_fields_are_the_attempts_on_3_4_and_the_task_instances_before(db, monkeypatch, model):
    use(monkeypatch, rendered=model)
    if model is RenderedByAttempt:  # 3.4 has no dag, run, task nor map index to read by
        store(
            db,
            RenderedByAttempt(task_instance_id="try-1", rendered_fields={"kickoff_id": "k-old"}),
            RenderedByAttempt(task_instance_id="try-2", rendered_fields={"kickoff_id": "k-new"}),
        )
    else:
        store(db, RenderedByTask(rendered_fields={"kickoff_id": "k-new"}, **TASK))
    attempt = SimpleNamespace(id="try-2", **TASK)  # as the tab keeps it past its first session
    with airflow_db.session() as session:
        assert airflow_db.rendered_fields(session, attempt) == {"kickoff_id": "k-new"}
        assert (
            airflow_db.rendered_fields(session, SimpleNamespace(**{**TASK, "id": "gone", "task_id": "x"}))
            is None
        )


def test_the_crews_page_shows_each_task_instances_current_attempt_on_3_4(db, monkeypatch):
    """An earlier try's usage and its over-budget status must not reach the page's row."""
    use(monkeypatch, xcom=XComByAttempt)
    stopped = '{"state": "RUNNING", "stopped": {"answer": "stopped"}}'
    store(
        db,
        XComRowsByAttempt(task_instance_id="try-1", key=XCOM_STATUS, value=stopped),
        XComRowsByAttempt(task_instance_id="try-1", key=XCOM_USAGE, value='{"total_tokens": 999}'),
        XComRowsByAttempt(task_instance_id="try-2", key=XCOM_USAGE, value='{"total_tokens": 7}'),
    )
    tis, xcoms = data._window(NOW - timedelta(days=1), None)
    assert [(ti.task_id, ti.run_state) for ti in tis] == [("kickoff", "running")]
    assert xcoms == {("d", "r", "kickoff", -1): {XCOM_USAGE: '{"total_tokens": 7}'}}


# -- a task instance's XCom written (the event stream's ``crew_events``) ----------------------------


def test_the_installed_airflows_xcom_is_written_to_a_table_of_the_shape_its_reads_take():
    """3.4's ``XComModel`` is a projection that refuses writes: the door writes the table behind it
    (``XComModelV2``), keyed as the reads are, and only with columns that table has."""
    pytest.importorskip("airflow.models.xcom")
    written = airflow_db.xcom_write_model()
    assert isinstance(inspect_model(written).local_table, Table), "not a table: Airflow refuses the write"
    per_attempt = getattr(written, "task_instance_id", None) is not None
    assert per_attempt is (getattr(airflow_db.xcom_model(), "task_instance_id", None) is not None)
    ti = SimpleNamespace(id="attempt", **TASK)
    columns = {*airflow_db._xcom_row(ti, XCOM_CREW_EVENTS, per_attempt), "value"}
    if not per_attempt:
        columns.add("dag_run_id")
    assert columns <= set(inspect_model(written).columns.keys())


def test_a_task_instances_xcom_is_written_to_its_attempts_row_on_3_4(db, monkeypatch):
    """Replaced in the attempt's own row (``try-2``), read back through the projection; an earlier try's
    row is left to it. 3.4's ``XComModel`` itself takes no write (the door's write before 3.4 failed)."""
    use(monkeypatch, xcom=XComByAttempt, written=XComRowsByAttempt)
    store(
        db, XComRowsByAttempt(task_instance_id="try-1", key=XCOM_CREW_EVENTS, value={"kickoff_id": "k-old"})
    )
    with airflow_db.session() as session:
        ti = airflow_db.lock_task_instance(session, *TASK.values())
        for events in ([1], [1, 2]):
            airflow_db.set_task_xcom(session, ti, XCOM_CREW_EVENTS, {"kickoff_id": "k-new", "events": events})
    kept = {"kickoff_id": "k-new", "events": [1, 2]}  # the JSON as it is, as the execution API stores it
    with airflow_db.session() as session:
        assert airflow_db.task_xcoms(session, live_ti(db), (XCOM_CREW_EVENTS,)) == {XCOM_CREW_EVENTS: kept}
        assert airflow_db.run_key_xcoms(session, "d", "r", XCOM_CREW_EVENTS) == [kept]
        rows = select(XComRowsByAttempt.task_instance_id, XComRowsByAttempt.value)
        assert session.execute(rows.order_by(XComRowsByAttempt.task_instance_id)).all() == [
            ("try-1", {"kickoff_id": "k-old"}),
            ("try-2", kept),
        ]
    use(monkeypatch, written=XComByAttempt)
    with airflow_db.session() as session, pytest.raises((ArgumentError, TypeError)):
        airflow_db.set_task_xcom(session, live_ti(db), XCOM_CREW_EVENTS, kept)


def test_a_task_instances_xcom_is_replaced_by_its_dag_run_task_and_map_index_before_3_4(db, monkeypatch):
    """The statements 3.0-3.3 get are the execution API's: a delete by the four columns and the key, then
    an insert with the run's id; another map index's row is left to it."""
    use(monkeypatch, xcom=XComByTask, written=XComByTask)
    store(
        db,
        XComByTask(key=XCOM_CREW_EVENTS, value={"kickoff_id": "k-old"}, dag_run_id=7, **TASK),
        XComByTask(
            key=XCOM_CREW_EVENTS, value={"kickoff_id": "k-x"}, dag_run_id=7, **{**TASK, "map_index": 0}
        ),
    )
    statements: list[tuple[str, Any]] = []

    def sent(connection, cursor, statement, parameters, context, executemany):
        statements.append((statement, parameters))

    event.listen(db, "before_cursor_execute", sent)
    ti = SimpleNamespace(dag_run=SimpleNamespace(id=7), **TASK)
    with airflow_db.session() as session:
        airflow_db.set_task_xcom(session, ti, XCOM_CREW_EVENTS, {"kickoff_id": "k-new"})
    event.remove(db, "before_cursor_execute", sent)
    delete, insert = statements
    assert delete == (
        "DELETE FROM xcom WHERE xcom.dag_id = ? AND xcom.run_id = ? AND xcom.task_id = ? "
        'AND xcom.map_index = ? AND xcom."key" = ?',
        ("d", "r", "kickoff", -1, XCOM_CREW_EVENTS),
    )
    assert insert[0].startswith("INSERT INTO xcom ") and "task_instance_id" not in insert[0]
    with airflow_db.session() as session:
        rows = select(XComByTask.map_index, XComByTask.dag_run_id, XComByTask.value)
        assert session.execute(rows.order_by(XComByTask.map_index)).all() == [
            (-1, 7, {"kickoff_id": "k-new"}),
            (0, 7, {"kickoff_id": "k-x"}),
        ]


def test_the_event_stream_keeps_a_task_instances_events_on_3_4(db, monkeypatch):
    """Through the receiver's own storing (``add_events``): deliveries add up in the attempt's row."""
    use(monkeypatch, xcom=XComByAttempt, written=XComRowsByAttempt)
    monkeypatch.setattr(airflow_db, "xcom_value", lambda stored: stored)  # the stand-in's JSON, decoded
    where = ("d", "r", "kickoff", -1)

    def delivered(number: int) -> list[CrewEvent]:
        stamp = f"2026-12-01T10:00:0{number}+00:00"
        return [CrewEvent(id=f"e-{number}", execution_id="k-1", timestamp=stamp, type="task_started")]

    assert [e.id for e in event_receiver.add_events(where, "k-1", delivered(1), False)[0]] == ["e-1"]
    new, event_log = event_receiver.add_events(where, "k-1", delivered(2), False)
    assert [e.id for e in new] == ["e-2"]
    with airflow_db.session() as session:
        stored = airflow_db.task_xcoms(session, live_ti(db), (XCOM_CREW_EVENTS,))[XCOM_CREW_EVENTS]
        assert stored == event_log.model_dump(mode="json") and stored["kickoff_id"] == "k-1"
        assert session.scalars(select(XComRowsByAttempt.task_instance_id)).all() == ["try-2"]
