"""The api-server's door to Airflow's private parts (:mod:`airflow_provider_crew.plugins.airflow_db`).

That no other plugin module goes around it; and that its reads of XComs and rendered fields pick the
rows of the task instance's attempt where Airflow keeps them per attempt (3.4: ``task_instance_id``)
and the rows of its dag, run, task and map index before. Airflow 3.4 is not installed here: its shape
is stood in for by mapped models on an in-memory SQLite database (3.4's ``XComModel`` projects both the
attempt's id and the four columns; its task instance table holds one row per attempt, of which the ORM
sees the live one), next to the four-column shape of 3.0-3.3.
"""

from __future__ import annotations

import ast
import contextlib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import JSON, Column, DateTime, Integer, String, create_engine, select
from sqlalchemy.orm import Session, declarative_base

from airflow_provider_crew.plugins import airflow_db
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
    """3.0-3.3: one row per task instance and key."""

    __tablename__ = "xcom"
    key = Column(String, primary_key=True)
    value = Column(JSON)
    timestamp = Column(DateTime(timezone=True), default=NOW)


class XComByAttempt(Base):
    """3.4: one row per attempt and key; the projection also carries the task instance's four columns."""

    __tablename__ = "xcom_v2"
    task_instance_id = Column(String, primary_key=True)
    key = Column(String, primary_key=True)
    dag_id = Column(String)
    run_id = Column(String)
    task_id = Column(String)
    map_index = Column(Integer)
    value = Column(JSON)
    timestamp = Column(DateTime(timezone=True), default=NOW)


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


def use(monkeypatch, *, xcom: Any = None, rendered: Any = None) -> None:
    if xcom is not None:
        monkeypatch.setattr(airflow_db, "xcom_model", lambda: xcom)
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
        XComByAttempt(task_instance_id="try-1", key="kickoff_id", value='"k-old"', **TASK),
        XComByAttempt(task_instance_id="try-1", key=XCOM_STATUS, value='{"state": "FAILED"}', **TASK),
        XComByAttempt(task_instance_id="try-2", key="kickoff_id", value='"k-new"', **TASK),
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
        XComByAttempt(task_instance_id="try-1", key=XCOM_STATUS, value=stopped, **TASK),
        XComByAttempt(task_instance_id="try-1", key=XCOM_USAGE, value='{"total_tokens": 999}', **TASK),
        XComByAttempt(task_instance_id="try-2", key=XCOM_USAGE, value='{"total_tokens": 7}', **TASK),
    )
    tis, xcoms = data._window(NOW - timedelta(days=1), None)
    assert [(ti.task_id, ti.run_state) for ti in tis] == [("kickoff", "running")]
    assert xcoms == {("d", "r", "kickoff", -1): {XCOM_USAGE: '{"total_tokens": 7}'}}
