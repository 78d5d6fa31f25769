"""The main job: run example_crew_human_review end to end against the bundled local crew service.

Starts the local crew service (with a webhook receiver), gives Airflow a fresh SQLite database in
``.demo/airflow``, runs ``airflow dags test example_crew_human_review`` and prints what happened:
the draft, the redraft after feedback, the final output and the notifications received.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
import time
from pathlib import Path

from airflow_provider_crew.testing import LocalCrewService
from airflow_provider_crew.testing.dag_runs import airflow_env, crew_connections_env, dags_test, migrate_db

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "example_crew_human_review"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocking", action="store_true", help="wait in the worker instead of deferring")
    parser.add_argument(
        "--home", type=Path, default=REPO / ".demo" / "airflow", help="AIRFLOW_HOME to (re)create"
    )
    args = parser.parse_args()

    shutil.rmtree(args.home, ignore_errors=True)
    args.home.mkdir(parents=True)
    env = airflow_env(
        args.home,
        REPO / "example_dags",
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(not args.blocking),
    )
    print(f"Airflow home: {args.home} (SQLite). Migrating the database…", flush=True)
    migrate_db(env)

    with LocalCrewService(["research", "review", "structured"]) as service:
        receiver = service.webhooks
        print(f"Local crew service: {service.base_url} (crews: research, review, structured)")
        env.update(crew_connections_env(service))
        env["CREW_EXAMPLE_WEBHOOK_BASE"] = receiver.url_for("").rstrip("/")
        mode = "blocking" if args.blocking else "deferrable"
        print(f"Running `airflow dags test {DAG_ID}` ({mode})…", flush=True)
        started = time.monotonic()
        run = dags_test(DAG_ID, env, cwd=REPO)
        seconds = time.monotonic() - started
        if run.state != "success":
            print(run.stdout[-5000:])
            print(f"DAG run {run.run_id} ended {run.state}", file=sys.stderr)
            return 1
        kickoff_id = run.xcom("kickoff")
        first = run.xcom("kickoff", key="human_input")
        second = run.xcom("request_changes", key="human_input")
        final = run.xcom("approve", key="output")
        feedback = service.executions[kickoff_id]["feedback"]
        kinds = [hook.kind for hook in receiver.received]

    print(f"\nDAG run {run.run_id}: {run.state} in {seconds:.0f} s; crew execution {kickoff_id}\n")
    print("First draft (paused for review):\n" + textwrap.indent(first["task_output"], "  "))
    for item in feedback:
        verdict = "approved" if item["is_approve"] else "requested changes"
        print(f"Reviewer {verdict}: {item['feedback']!r}")
    print("\nRedraft after feedback:\n" + textwrap.indent(second["task_output"], "  "))
    print("\nFinal output:\n" + textwrap.indent(str(final), "  "))
    counts = {kind: kinds.count(kind) for kind in ("human", "task", "step", "crew")}
    print(f"\nWebhooks received: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
