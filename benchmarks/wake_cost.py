"""What the webhook wake saves and costs, on a real Airflow: status reads and how late a wait ends.

Starts a real api-server (with the provider's plugin), scheduler, dag-processor and triggerer
(SQLite, LocalExecutor) and the local crew service in its own process, which sends its real
webhooks. Each DAG run is one deferrable ``CrewKickoffOperator``; for each crew length (1 and 10
minutes by default) some runs use a connection that opts in to the wake (``wake_by_webhook``,
safety poll every 300 s, the default) and some poll as before. Every run starts at once; the whole
benchmark lasts about as long as the longest crew plus two minutes.

For each wait it reports:

- **status reads**: ``GET /{kickoff_id}/status`` requests the crew service counted for the
  execution (the worker's read before deferring, the trigger's polls, the read after a wake);
- **end latency**: from the crew finishing (the service's ``finished_at``) to the task instance
  ending (its ``end_date``): what a downstream task waits for beyond the crew itself.

Figures, not a pass/fail::

    python benchmarks/wake_cost.py [--minutes 1,10] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_crew.operators.crew import CrewKickoffOperator

for conn_id in {conn_ids!r}:
    with DAG(dag_id=f"bench_{{conn_id}}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
             catchup=False, max_active_runs=50):
        CrewKickoffOperator(task_id="kickoff", crew_conn_id=conn_id, inputs={{"topic": "tides"}},
                            deferrable=True)
"""


def crew(minutes: float) -> dict[str, Any]:
    steps = max(1, int(minutes * 6))
    return {
        "name": f"crew_{minutes:g}m".replace(".", "_"),
        "inputs": ["topic"],
        "pending_seconds": 0.2,
        "tasks": [
            {"name": "only_task", "agent": "Worker", "steps": steps, "step_seconds": minutes * 60 / steps}
        ],
    }


def parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", default="1,10", help="crew lengths in minutes, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="DAG runs per crew length and mode")
    args = parser.parse_args()

    from airflow_provider_crew.testing import CrewServiceProcess
    from tests.e2e.airflow_stack import AirflowStack, wait_for

    lengths = [float(m) for m in args.minutes.split(",")]
    specs = [crew(m) for m in lengths]
    tmp = Path(tempfile.mkdtemp(prefix="crew-wake-bench-"))
    crew_files = []
    for spec in specs:
        path = tmp / f"{spec['name']}.json"
        path.write_text(json.dumps(spec))
        crew_files.append(path)
    conn_ids = {(spec["name"], mode): f"{spec['name']}_{mode}" for spec in specs for mode in ("wake", "poll")}
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "bench_wake.py").write_text(DAG_FILE.format(conn_ids=sorted(conn_ids.values())))

    with CrewServiceProcess(crew_files) as service:
        airflow = AirflowStack(tmp / "home", dags, {"AIRFLOW__CORE__PARALLELISM": "64"})
        for (name, mode), conn_id in conn_ids.items():
            extra: dict[str, Any] = {"wake_by_webhook": True} if mode == "wake" else {}
            airflow.env.update(
                service.connection_env(conn_id, crew=name, status_path_style="contract", **extra)
            )
        airflow.env["AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER"] = json.dumps(
            {
                "conn_type": "crew_webhook_receiver",
                "host": airflow.base_url,
                "password": secrets.token_urlsafe(32),
            }
        )
        try:
            airflow.migrate()
            airflow.start()
            runs = []
            for conn_id in conn_ids.values():
                airflow.wait_for_dag(f"bench_{conn_id}")
            for conn_id in conn_ids.values():
                runs += [(conn_id, airflow.trigger(f"bench_{conn_id}")) for _ in range(args.runs)]
            longest = max(lengths) * 60
            print(f"{len(runs)} runs started; the longest crew takes {longest / 60:g} min", flush=True)

            def all_ended() -> bool:
                airflow.check_alive()
                return all(airflow.dag_run_state(f"bench_{c}", r) in ("success", "failed") for c, r in runs)

            wait_for(all_ended, timeout=longest + 600, interval=10, what="every run to end")
            rows: dict[str, list[tuple[int, float, str]]] = {}
            for conn_id, run_id in runs:
                dag_id = f"bench_{conn_id}"
                kickoff_id = airflow.xcom(dag_id, run_id, "kickoff")
                execution = service.executions[kickoff_id]
                ti = airflow.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/kickoff")
                latency = parse_time(ti["end_date"]) - execution["finished_at"]
                rows.setdefault(conn_id, []).append((execution["polls"], latency, ti["state"]))
        finally:
            airflow.stop()

    print("\ncrew     mode  runs  status reads (each)      end latency s: median  max   states")
    for spec in specs:
        for mode in ("poll", "wake"):
            got = rows[conn_ids[(spec["name"], mode)]]
            reads = sorted(r for r, _, _ in got)
            latencies = [lat for _, lat, _ in got]
            states = ",".join(sorted({s for _, _, s in got}))
            print(
                f"{spec['name']:<8} {mode:<5} {len(got):>4}  {reads!s:<24} "
                f"{statistics.median(latencies):>20.1f} {max(latencies):>5.1f}   {states}"
            )


if __name__ == "__main__":
    main()
