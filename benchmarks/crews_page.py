"""How long the Crews page's and the Crew tab's database reads take with 10,000 crew task instances.

Creates a fresh Airflow metadata database (SQLite, ``airflow db migrate`` in a temporary
``AIRFLOW_HOME``) and fills it with bulk inserts, in one transaction: ``--dags`` DAGs (20 by
default), each with DAG runs spread over the last 7 days, five crew task instances a run
(``CrewKickoffOperator`` twice, ``CrewReviewRoundOperator``, ``CrewStatusSensor`` and a
``@task.crew``), ``--task-instances`` of them in all (10,000 by default), and two
``PythonOperator`` task instances a run, which the page must leave out. The newest runs of each
DAG still run (a review round deferred, a sensor running, a crew waiting for a person). Each
finished crew task holds the XComs the provider pushes (``return_value`` and ``kickoff_id``,
``status``, ``usage``, ``result``: a 2 kB output, ``execution_url``; ``human_input`` for about 5 %);
each ``PythonOperator`` a small ``return_value``.

It then times, in this process and against that database, as Airflow's api-server runs them:

- ``crews_view(7, None, show)`` for ``show`` in ``all``, ``running``, ``waiting``, and
  ``crews_view(7, <half the DAGs>, "all")`` (a user who may read half of them): min / median / max
  over ``--repeat`` calls after one warm-up, the rows listed (at most 500) and the counts;
- ``task_view`` for one finished crew task instance among them;
- where one ``crews_view(7, None, "all")`` spends its time: the task instance query and the XCom
  query (executed and read through SQLAlchemy, JSON decoding included), the same SQL on a bare
  ``sqlite3`` connection, ``XComModel.deserialize_value`` and the rest (Python building the rows).

Figures, not a pass/fail::

    python benchmarks/crews_page.py [--task-instances 10000] [--dags 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DAYS = 7
#: The crew tasks of every run: (task_id, operator, custom_operator_name).
CREW_TASKS = (
    ("kickoff", "CrewKickoffOperator", None),
    ("review_round", "CrewReviewRoundOperator", None),
    ("kickoff_revision", "CrewKickoffOperator", None),
    ("wait_for_crew", "CrewStatusSensor", None),
    ("summarise", "_CrewDecoratedOperator", "@task.crew"),
)
OTHER_TASKS = ("extract", "publish")
RUNNING_RUNS_PER_DAG = 3
OUTPUT = "The tides of the North Sea, summarised. " * 50  # about 2 kB, the crew's final output


def configure(home: Path) -> None:
    """Point Airflow at a fresh SQLite database in ``home`` (before anything imports airflow)."""
    for name in [name for name in os.environ if name.startswith("AIRFLOW")]:
        del os.environ[name]
    os.environ.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
    )
    done = subprocess.run(
        [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def _ti(
    run: dict[str, Any], task_id: str, operator: str, custom: str | None, **fields: Any
) -> dict[str, Any]:
    from uuid6 import uuid7

    row = {
        "id": uuid7(),
        "dag_id": run["dag_id"],
        "run_id": run["run_id"],
        "task_id": task_id,
        "map_index": -1,
        "state": None,
        "start_date": None,
        "end_date": None,
        "duration": None,
        "try_number": 1,
        "max_tries": 0,
        "hostname": "worker-1",
        "pool": "default_pool",
        "pool_slots": 1,
        "queue": "default",
        "priority_weight": 1,
        "operator": operator,
        "custom_operator_name": custom,
        "executor": None,
        "dag_version_id": run["created_dag_version_id"],
        "trigger_id": None,
        "next_method": None,
        "next_kwargs": None,
    }
    row.update(fields)
    if row["start_date"] is not None and row["end_date"] is not None:
        row["duration"] = (row["end_date"] - row["start_date"]).total_seconds()
    return row


def _xcom(ti: dict[str, Any], run: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {
        "dag_run_id": run["id"],
        "dag_id": ti["dag_id"],
        "run_id": ti["run_id"],
        "task_id": ti["task_id"],
        "map_index": -1,
        "key": key,
        "value": value,
        "dag_result": False,
        "timestamp": ti["end_date"] or ti["start_date"],
    }


def _finished_crew_xcoms(
    ti: dict[str, Any], run: dict[str, Any], n: int, paused: bool
) -> list[dict[str, Any]]:
    """What a finished crew task pushes (``waiting.xcom.result_xcoms`` and the kickoff's own)."""
    kickoff_id = str(uuid.uuid4())
    usage = {
        "input_tokens": 1_000 + n % 5_000,
        "output_tokens": 300 + n % 2_000,
        "total_tokens": 1_300 + n % 5_000 + n % 2_000,
        "requests": 3 + n % 7,
    }
    status = {"state": "SUCCESS", "kickoff_id": kickoff_id, "progress": {"completed": 2, "total": 2}}
    rows = [
        _xcom(ti, run, "return_value", kickoff_id),
        _xcom(ti, run, "kickoff_id", kickoff_id),
        _xcom(ti, run, "execution_url", f"https://crews.example.com/executions/{kickoff_id}"),
        _xcom(ti, run, "status", status),
        _xcom(ti, run, "usage", usage),
        _xcom(ti, run, "result", OUTPUT),
    ]
    if paused:
        answer = {"execution_id": kickoff_id, "task_id": "research_task", "task_output": OUTPUT[:500]}
        rows.append(_xcom(ti, run, "human_input", answer))
    return rows


def seed(task_instances: int, dags: int) -> dict[str, Any]:
    """Bulk-insert the DAGs, runs, task instances and XComs; returns what was inserted."""
    from airflow.models.dag import DagModel
    from airflow.models.dag_version import DagVersion
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType
    from sqlalchemy import insert
    from uuid6 import uuid7

    now = datetime.now(timezone.utc)
    first = now - timedelta(days=DAYS) + timedelta(hours=1)
    runs_per_dag = -(-task_instances // (dags * len(CREW_TASKS)))
    step = (now - timedelta(minutes=30) - first) / runs_per_dag
    dag_ids = [f"crew_pipeline_{d:02d}" for d in range(dags)]
    dag_rows = [
        {
            "dag_id": dag_id,
            "is_paused": False,
            "is_stale": False,
            "fileloc": f"/dags/{dag_id}.py",
            "relative_fileloc": f"{dag_id}.py",
            "bundle_name": "dags-folder",
            "timetable_type": "",
            "partition_mapper_info": [],
            "max_active_tasks": 16,
            "max_active_runs": 16,
            "max_consecutive_failed_dag_runs": 0,
            "has_task_concurrency_limits": False,
        }
        for dag_id in dag_ids
    ]
    versions = {dag_id: uuid7() for dag_id in dag_ids}
    version_rows = [
        {
            "id": versions[dag_id],
            "version_number": 1,
            "dag_id": dag_id,
            "bundle_name": "dags-folder",
            "created_at": first - timedelta(days=1),
            "last_updated": first - timedelta(days=1),
        }
        for dag_id in dag_ids
    ]
    runs, tis, xcoms = [], [], []
    crew_tis = 0
    for r in range(runs_per_dag):
        for d, dag_id in enumerate(dag_ids):
            if crew_tis >= task_instances:
                break
            start = first + step * r + timedelta(minutes=d)
            running = r >= runs_per_dag - RUNNING_RUNS_PER_DAG
            run = {
                "id": len(runs) + 1,
                "dag_id": dag_id,
                "run_id": f"scheduled__{start.isoformat()}",
                "run_type": "scheduled",
                "logical_date": start,
                "run_after": start,
                "queued_at": start,
                "start_date": start,
                "end_date": None if running else start + timedelta(minutes=50),
                "state": "running" if running else ("failed" if r % 40 == 7 else "success"),
                "data_interval_start": start - timedelta(hours=1),
                "data_interval_end": start,
                "created_dag_version_id": versions[dag_id],
                "clear_number": 0,
                "span_status": "not_started",
                "triggered_by": DagRunTriggeredByType.TIMETABLE,
            }
            runs.append(run)
            shape = (r + d) % RUNNING_RUNS_PER_DAG
            for t, (task_id, operator, custom) in enumerate(CREW_TASKS):
                if crew_tis >= task_instances:
                    break
                crew_tis += 1
                begin, end = start + timedelta(minutes=1 + 10 * t), start + timedelta(minutes=9 + 10 * t)
                if not running:
                    state = "failed" if (run["state"] == "failed" and t == len(CREW_TASKS) - 1) else "success"
                    ti = _ti(run, task_id, operator, custom, state=state, start_date=begin, end_date=end)
                    tis.append(ti)
                    if state == "success":
                        xcoms += _finished_crew_xcoms(ti, run, crew_tis, paused=crew_tis % 20 == 0)
                    continue
                # a running run: the kickoff finished; then, by shape, a crew waits for a person
                # (its kickoff paused, nothing after), a review round waits for its reviewer, or
                # a sensor and a deferred kickoff are still at it.
                if t == 0:
                    ti = _ti(run, task_id, operator, custom, state="success", start_date=begin, end_date=end)
                    xcoms += _finished_crew_xcoms(ti, run, crew_tis, paused=shape == 0)
                elif shape == 0:
                    ti = _ti(run, task_id, operator, custom, state=None)
                elif shape == 1 and operator == "CrewReviewRoundOperator":
                    ti = _ti(run, task_id, operator, custom, state="deferred", start_date=begin)
                elif shape == 2 and t in (2, 3):
                    state = "deferred" if t == 2 else "running"
                    ti = _ti(run, task_id, operator, custom, state=state, start_date=begin)
                    xcoms.append(_xcom(ti, run, "kickoff_id", str(uuid.uuid4())))
                else:
                    ti = _ti(run, task_id, operator, custom, state="scheduled")
                tis.append(ti)
            for t, task_id in enumerate(OTHER_TASKS):
                begin = start + timedelta(minutes=2 + 20 * t)
                state = "running" if running and t else "success"
                end = None if state == "running" else begin + timedelta(minutes=3)
                ti = _ti(run, task_id, "PythonOperator", None, state=state, start_date=begin, end_date=end)
                tis.append(ti)
                if end is not None:
                    rows = [{"id": i, "path": f"s3://bucket/{dag_id}/{i}.json"} for i in range(5)]
                    xcoms.append(_xcom(ti, run, "return_value", {"rows": 5 * r + t, "files": rows}))
    started = time.perf_counter()
    with create_session() as session:
        session.execute(insert(DagBundleModel.__table__), [{"name": "dags-folder", "active": True}])
        session.execute(insert(DagModel.__table__), dag_rows)
        session.execute(insert(DagVersion.__table__), version_rows)
        session.execute(insert(DagRun.__table__), runs)
        session.execute(insert(TaskInstance.__table__), tis)
        session.execute(insert(XComModel.__table__), xcoms)
    return {
        "dag_ids": dag_ids,
        "runs": runs,
        "crew_tis": crew_tis,
        "other_tis": len(tis) - crew_tis,
        "xcoms": len(xcoms),
        "insert_seconds": time.perf_counter() - started,
        "finished_ti": next(
            ti
            for ti in tis[len(tis) // 2 :]
            if ti["operator"] == "CrewKickoffOperator" and ti["state"] == "success"
        ),
    }


def timed(call: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    """One warm-up call, then ``repeat`` timed ones: (seconds each, the last result)."""
    result = call()
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return seconds, result


def ms(seconds: list[float]) -> str:
    low, mid, high = min(seconds), statistics.median(seconds), max(seconds)
    return f"{low * 1000:8.1f} {mid * 1000:8.1f} {high * 1000:8.1f}"


@contextlib.contextmanager
def breakdown_probes(
    marks: list[float], statements: list[tuple[str, Any]], decode: list[float]
) -> Iterator[None]:
    """Notes, for the calls made inside: when each ``session.execute`` starts and when the session's
    block ends, every SQL statement sent, and the time spent in ``_xcom_value``."""
    import airflow.utils.session as airflow_session
    from airflow import settings
    from sqlalchemy import event

    from airflow_provider_crew.plugins import crew_views_data

    real_create_session, real_xcom_value = airflow_session.create_session, crew_views_data._xcom_value

    @contextlib.contextmanager
    def create_session(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_create_session(*args, **kwargs) as session:
            real_execute = session.execute

            def execute(*a: Any, **k: Any) -> Any:
                marks.append(time.perf_counter())
                return real_execute(*a, **k)

            marks.append(time.perf_counter())
            session.execute = execute
            try:
                yield session
            finally:
                marks.append(time.perf_counter())
                del session.execute

    def xcom_value(value: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_xcom_value(value)
        finally:
            decode.append(time.perf_counter() - started)

    def note(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            statements.append((statement, parameters))

    airflow_session.create_session = create_session
    crew_views_data._xcom_value = xcom_value
    event.listen(settings.engine, "before_cursor_execute", note)
    try:
        yield
    finally:
        event.remove(settings.engine, "before_cursor_execute", note)
        airflow_session.create_session = real_create_session
        crew_views_data._xcom_value = real_xcom_value


def bare_sql(db: Path, statement: str, parameters: Any, repeat: int) -> tuple[float, list[tuple], list[str]]:
    """(median seconds to run and fetch all rows, the rows, the query plan) on a bare sqlite3 connection."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        plan = [row[-1] for row in connection.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]
        seconds, rows = [], []
        for _ in range(repeat + 1):
            started = time.perf_counter()
            rows = connection.execute(statement, parameters).fetchall()
            seconds.append(time.perf_counter() - started)
    return statistics.median(seconds[1:]), rows, plan


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--task-instances", type=int, default=10_000, help="crew task instances in the window"
    )
    parser.add_argument("--dags", type=int, default=20, help="DAGs they are spread over")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls of each read (after one warm-up)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="crews_page_") as tmp:
        home = Path(tmp)
        (home / "dags").mkdir()
        started = time.perf_counter()
        configure(home)
        migrate_seconds = time.perf_counter() - started

        import airflow
        from airflow import settings

        from airflow_provider_crew.plugins.crew_views_data import crews_view, task_view

        started = time.perf_counter()
        seeded = seed(args.task_instances, args.dags)
        seed_seconds = time.perf_counter() - started

        print(
            f"Python {platform.python_version()}, Airflow {airflow.__version__}, "
            f"database {settings.engine.dialect.name}"
        )
        print(
            f"SQLite file {home / 'airflow.db'}, created by `airflow db migrate` in {migrate_seconds:.1f} s"
        )
        print(
            f"seeded in {seed_seconds:.1f} s ({seeded['insert_seconds']:.1f} s of inserts, one transaction): "
            f"{args.dags} DAGs, {len(seeded['runs']):,} DAG runs over {DAYS} days, "
            f"{seeded['crew_tis']:,} crew task instances, {seeded['other_tis']:,} PythonOperator ones, "
            f"{seeded['xcoms']:,} XComs"
        )
        half = set(seeded["dag_ids"][: len(seeded["dag_ids"]) // 2])
        cases = [
            ('crews_view(7, None, "all")', lambda: crews_view(DAYS, None, "all")),
            ('crews_view(7, None, "running")', lambda: crews_view(DAYS, None, "running")),
            ('crews_view(7, None, "waiting")', lambda: crews_view(DAYS, None, "waiting")),
            (f'crews_view(7, <{len(half)} DAGs>, "all")', lambda: crews_view(DAYS, half, "all")),
        ]
        print(f"\n{args.repeat} calls each after one warm-up, ms:")
        print(f"{'read':<34} {'min':>8} {'median':>8} {'max':>8}   rows (+more)  counts all/running/waiting")
        for name, call in cases:
            seconds, view = timed(call, args.repeat)
            counts = view["counts"]
            listed = f"{len(view['rows'])} (+{view['more']:,})"
            print(
                f"{name:<34} {ms(seconds)}   {listed:<13} "
                f"{counts['all']:,} / {counts['running']:,} / {counts['waiting']:,}"
            )
        ti = seeded["finished_ti"]
        key = (ti["dag_id"], ti["run_id"], ti["task_id"], ti["map_index"])
        seconds, view = timed(lambda: task_view(*key), args.repeat)
        label = f"task_view(<finished {ti['task_id']}>)"
        print(f"{label:<34} {ms(seconds)}   state {view.get('ti_state')}, tokens {view.get('tokens')}")

        marks: list[float] = []
        statements: list[tuple[str, Any]] = []
        decode: list[float] = []
        with breakdown_probes(marks, statements, decode):
            started = time.perf_counter()
            crews_view(DAYS, None, "all")
            total = time.perf_counter() - started
        opened, ti_query, xcom_query, closed = marks[:4]
        db = home / "airflow.db"
        ti_sql, ti_rows, ti_plan = bare_sql(db, *statements[0], args.repeat)
        xcom_sql, xcom_rows, xcom_plan = bare_sql(db, *statements[1], args.repeat)
        crew_keys = {tuple(row[:4]) for row in ti_rows}
        for_crew = sum(tuple(row[:4]) in crew_keys for row in xcom_rows)
        print(f'\nWhere one crews_view(7, None, "all") spends its {total * 1000:.0f} ms:')
        print(
            f"  task instance query, via SQLAlchemy: {(xcom_query - ti_query) * 1000:7.1f} ms "
            f"({len(ti_rows):,} rows; bare sqlite3: {ti_sql * 1000:.1f} ms)"
        )
        print(
            f"  XCom query and its loop, SQLAlchemy: {(closed - xcom_query) * 1000:7.1f} ms "
            f"({len(xcom_rows):,} rows, {len(xcom_rows) - for_crew:,} of them not of a listed crew task; "
            f"bare sqlite3: {xcom_sql * 1000:.1f} ms)"
        )
        print(f"  XComModel.deserialize_value:         {sum(decode) * 1000:7.1f} ms ({len(decode):,} calls)")
        rest = total - (closed - opened) - sum(decode)
        print(f"  the rest (session, building rows):   {rest * 1000:7.1f} ms")
        print(f"  task instance query plan: {'; '.join(ti_plan)}")
        print(f"  XCom query plan: {'; '.join(xcom_plan)}")


if __name__ == "__main__":
    main()
