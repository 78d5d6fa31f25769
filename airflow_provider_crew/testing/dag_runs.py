"""Run real DAGs against the local crew service: ``airflow dags test`` in a subprocess.

Used by this project's integration tests and demo, and usable for your own DAG tests. No Airflow
import here: Airflow runs in the subprocess, configured only through environment variables (the
way deployments configure it), with SQLite as its metadata database.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sqlite3
import subprocess
import sys
import unittest
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .handle import CrewServiceHandle

DEFAULT_HUMAN_WEBHOOK_TOKEN = "human-webhook-token-4f1c9"


def airflow_executable() -> str:
    """The ``airflow`` command of the running interpreter's environment."""
    return str(Path(sys.executable).with_name("airflow"))


def airflow_env(home: Path, dags_folder: Path, **overrides: str) -> dict[str, str]:
    """A clean environment for Airflow: no AIRFLOW_* leaking in from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CREW_EXAMPLE"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
    )
    env.update(overrides)
    return env


def crew_connections_env(
    service: CrewServiceHandle,
    *,
    human_webhook_url: str | None = None,
    human_webhook_token: str = DEFAULT_HUMAN_WEBHOOK_TOKEN,
) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` for the example DAGs: one connection per bundled crew, plus the
    human-input webhook connection (host = the receiver URL, password = the token to send).

    The receiver defaults to the service's own recording receiver (``service.webhooks``).
    """
    env: dict[str, str] = {}
    env.update(service.connection_env("crew_default"))
    env.update(service.connection_env("crew_review", crew="review"))
    env.update(service.connection_env("crew_structured", crew="structured"))
    if human_webhook_url is None:
        receiver = getattr(service, "webhooks", None)
        if receiver is None:
            raise ValueError("pass human_webhook_url: this service handle has no webhook receiver")
        human_webhook_url = receiver.url_for("human")
    env["AIRFLOW_CONN_CREW_REVIEW_WEBHOOK"] = json.dumps(
        {"conn_type": "http", "host": human_webhook_url, "password": human_webhook_token}
    )
    return env


def migrate_db(env: dict[str, str], timeout: float = 300) -> None:
    """``airflow db migrate`` (creates the SQLite database on first use)."""
    done = subprocess.run(
        [airflow_executable(), "db", "migrate"], env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@dataclass
class DagRun:
    """One finished ``airflow dags test`` run, read back from Airflow's own metadata database."""

    dag_id: str
    run_id: str
    state: str
    stdout: str
    home: Path

    def flowing(self) -> str:
        """The output as flowing text, one space between words: Airflow 3.0 prints errors in boxed,
        wrapped tracebacks, which break a message over lines and frame it in box-drawing characters."""
        return " ".join(re.sub(r"[\u2500-\u257f]", " ", self.stdout).split())

    def _query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            return db.execute(sql, args).fetchall()

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        rows = self._query(
            "SELECT value FROM xcom WHERE dag_id=? AND run_id=? AND task_id=? AND key=? AND map_index=?",
            self.dag_id,
            self.run_id,
            task_id,
            key,
            map_index,
        )
        if not rows:
            raise KeyError(f"no XCom {key!r} for {task_id}[{map_index}] in run {self.run_id}")
        value = rows[0][0]
        return json.loads(value) if isinstance(value, (str, bytes)) else value

    def task_states(self) -> dict[tuple[str, int], str]:
        rows = self._query(
            "SELECT task_id, map_index, state FROM task_instance WHERE dag_id=? AND run_id=?",
            self.dag_id,
            self.run_id,
        )
        return {(task_id, map_index): state for task_id, map_index, state in rows}


class DagsTestUnavailable(unittest.SkipTest):
    """``airflow dags test`` cannot run on the installed Airflow. A ``unittest.SkipTest``, so that a
    pytest test skips with the reason; anything else fails with it."""


def dags_test_unavailable() -> str | None:
    """Why ``airflow dags test`` cannot run on the installed Airflow, or None.

    Airflow 3.2 fails every DAG's first task at its start, a plain ``@task`` too: its in-process
    execution API answers before its start-up has set it up ("'State' object has no attribute
    'svcs_registry'"; apache/airflow#65945, 3.3 waits for the start-up). Delete when 3.2 is no longer
    a target.
    """
    version = importlib.metadata.version("apache-airflow-core")
    if version.split(".")[:2] == ["3", "2"]:
        return (
            f"airflow dags test fails on Airflow {version} (apache/airflow#65945): run the DAG on a "
            "scheduler, or use Airflow 3.3"
        )
    return None


def dags_test(
    dag_id: str, env: dict[str, str], *, timeout: float = 300, cwd: Path | None = None, check: bool = True
) -> DagRun:
    """Run ``airflow dags test DAG_ID`` and return the run it recorded.

    With ``check`` (the default) a non-zero exit raises; pass ``check=False`` when the run is
    expected to fail and assert on ``DagRun.state`` instead. Raises :class:`DagsTestUnavailable`
    where Airflow's ``dags test`` cannot run (:func:`dags_test_unavailable`).
    """
    unavailable = dags_test_unavailable()
    if unavailable:
        raise DagsTestUnavailable(unavailable)
    done = subprocess.run(
        [airflow_executable(), "dags", "test", dag_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    output = done.stdout + done.stderr
    if check and done.returncode != 0:
        raise RuntimeError(f"airflow dags test {dag_id} exited {done.returncode}:\n{output[-5000:]}")
    home = Path(env["AIRFLOW_HOME"])
    with sqlite3.connect(home / "airflow.db") as db:
        row = db.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id=? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
    if row is None:
        raise RuntimeError(f"airflow dags test {dag_id} recorded no DAG run:\n{output[-5000:]}")
    return DagRun(dag_id=dag_id, run_id=row[0], state=row[1], stdout=output, home=home)
