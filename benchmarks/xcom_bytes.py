"""How many bytes a finished crew's output costs in XCom and in the trigger's event.

Runs the local crew service in this process with two one-task crews whose final output is about
``--mb`` MB (2 by default): ``text`` (the output in ``result`` and again as the last task's output,
as the bundled crews answer) and ``structured`` (``result_json`` too). For each it reports:

- **XCom bytes**: the sum of the value sizes in Airflow's ``xcom`` table for the kickoff task, by
  key, after a real ``airflow dags test`` run (SQLite, blocking wait; a deferred wait pushes the same);
- **event bytes**: the trigger's event for that execution's end, as JSON (what ``TriggerEvent``
  carries) and as Airflow stores it for the resumed task (``next_kwargs``, Airflow's serialisation).

Figures, not a pass/fail. To compare with another checkout (e.g. a ``git worktree`` of an earlier
commit), run this file with ``PYTHONPATH`` pointing at that checkout::

    python benchmarks/xcom_bytes.py [--mb 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_crew.operators.crew import CrewKickoffOperator

for name in ("text", "structured"):
    with DAG(dag_id=f"xcom_bytes_{name}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             catchup=False):
        CrewKickoffOperator(task_id="kickoff", crew_conn_id=f"crew_{name}", inputs={"topic": "tides"},
                            poll_interval=0.5, max_poll_interval=1, deferrable=False)
"""


def crews(size: int) -> list[dict[str, Any]]:
    """Two one-task crews whose output is about ``size`` characters (no steps: no ``last_step``)."""
    text = {
        "name": "text",
        "inputs": ["topic"],
        "pending_seconds": 0.05,
        "tasks": [{"name": "only_task", "agent": "Writer", "steps": 0, "expected_output": "x" * size}],
    }
    structured = {
        "name": "structured",
        "inputs": ["topic"],
        "pending_seconds": 0.05,
        "tasks": [
            {"name": "only_task", "agent": "Writer", "steps": 0, "output_template": {"text": "y" * size}}
        ],
    }
    return [text, structured]


def xcom_bytes(home: Path, dag_id: str) -> dict[str, int]:
    with sqlite3.connect(home / "airflow.db") as db:
        (run_id,) = db.execute(
            "SELECT run_id FROM dag_run WHERE dag_id=? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        rows = db.execute(
            "SELECT key, length(value) FROM xcom WHERE dag_id=? AND run_id=? AND task_id='kickoff'",
            (dag_id, run_id),
        ).fetchall()
    return {key: size or 0 for key, size in rows}


def event_bytes(service: Any, crew: str, kickoff_id: str) -> tuple[int, int | None]:
    """The trigger's event for this execution's end: JSON bytes, and bytes as Airflow stores it."""
    from airflow_provider_crew.status import CrewStatus
    from airflow_provider_crew.waiting.event import CrewWaitEvent
    from airflow_provider_crew.waiting.rules import Outcome, WaitResult

    request = urllib.request.Request(
        f"{service.url_for_crew(crew)}/{kickoff_id}/status",
        headers={"Authorization": f"Bearer {service.org_token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        status = CrewStatus.from_response(json.load(answer))
    result = WaitResult(outcome=Outcome.SUCCEEDED, message=status.describe(), last_status=status)
    payload = CrewWaitEvent.from_result(kickoff_id, result).payload()
    as_json = len(json.dumps(payload).encode())
    try:
        from airflow.serialization.serialized_objects import BaseSerialization

        stored = len(json.dumps(BaseSerialization.serialize({"event": payload})).encode())
    except Exception:  # pragma: no cover - another Airflow's internals
        stored = None
    return as_json, stored


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=2.0, help="size of the final output, in MB")
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)

    from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db
    from airflow_provider_crew.testing.server import LocalCrewService

    service = LocalCrewService(crews=crews(size))
    service.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home, dags = Path(tmp) / "home", Path(tmp) / "dags"
            home.mkdir()
            dags.mkdir()
            (dags / "xcom_bytes.py").write_text(DAG_FILE)
            env = airflow_env(home, dags)
            migrate_db(env)
            for name in ("text", "structured"):
                conn_id = f"crew_{name}"
                env.update(service.connection_env(conn_id, crew=name))
                before = set(service.executions)
                run = dags_test(f"xcom_bytes_{name}", env)
                (kickoff_id,) = set(service.executions) - before
                output = service.executions[kickoff_id]["result"]
                by_key = xcom_bytes(home, run.dag_id)
                as_json, stored = event_bytes(service, name, kickoff_id)
                print(f"{name}: final output {len(output.encode()):,} bytes; run {run.state}")
                print(f"  XCom bytes, kickoff task: {sum(by_key.values()):,}")
                for key, value in sorted(by_key.items(), key=lambda kv: -kv[1]):
                    print(f"    {key:<24} {value:>12,}")
                print(f"  trigger event: {as_json:,} bytes as JSON", end="")
                print(f", {stored:,} as Airflow stores it (next_kwargs)" if stored is not None else "")
    finally:
        service.stop()


if __name__ == "__main__":
    main()
