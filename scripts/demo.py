"""The main job: run example_crew_human_review end to end against the bundled local crew service.

Starts the local crew service (with a webhook receiver), gives Airflow a fresh SQLite database in
``.demo/airflow``, runs ``airflow dags test example_crew_human_review`` and prints what happened:
draft 1, the changes requested with their feedback, draft 2, the approval, the final output and the
webhooks received, in that order, and which tasks of the DAG played the reviewer.
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
# The reviewer in example_crew_human_review is not a person: two scripted CrewResumeOperator tasks.
REVIEWER_TASKS = ("request_changes", "approve")
# The tasks whose XCom "human_input" holds each draft the crew paused on.
DRAFT_TASKS = ("kickoff", "request_changes")


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
        drafts = [run.xcom(task, key="human_input")["task_output"] for task in DRAFT_TASKS]
        final = run.xcom("approve", key="output")
        feedback = service.executions[kickoff_id]["feedback"]
        kinds = [hook.kind for hook in receiver.received]

    print(f"\nDAG run {run.run_id}: {run.state} in {seconds:.0f} s; crew execution {kickoff_id}\n")
    try:
        lines = story(drafts, feedback, final, kinds)
    except ValueError as error:
        print(f"The run did not tell the expected story: {error}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def story(drafts: list[str], feedback: list[dict], final: object, webhook_kinds: list[str]) -> list[str]:
    """The run in the order it happened: draft, verdict, draft, verdict, final output, webhooks.

    :param drafts: The output of the paused crew task at each pause, in order.
    :param feedback: The feedback the crew service received, in order (``is_approve``, ``feedback``).
    :param final: The execution's final output.
    :param webhook_kinds: The kind of each webhook received (``human``, ``task``, ``step``, ``crew``).
    """
    if len(drafts) != len(REVIEWER_TASKS) or len(feedback) != len(REVIEWER_TASKS):
        raise ValueError(
            f"expected {len(REVIEWER_TASKS)} drafts and verdicts, got {len(drafts)} and {len(feedback)}"
        )
    lines = [
        f"The reviewer in {DAG_ID} is two scripted tasks of the DAG, not a person: "
        f"{REVIEWER_TASKS[0]!r} (CrewResumeOperator, is_approve=False) requests changes and "
        f"{REVIEWER_TASKS[1]!r} (CrewResumeOperator, is_approve=True) approves. To have a person review "
        "in the Airflow UI, see example_crew_review_in_airflow (CrewHumanReviewOperator).",
    ]
    rounds = zip(drafts, feedback, REVIEWER_TASKS, strict=True)
    for number, (draft, verdict, task) in enumerate(rounds, start=1):
        word = "approved" if verdict["is_approve"] else "requested changes"
        lines += [
            "",
            f"Draft {number} (the crew paused for review):",
            textwrap.indent(draft, "  "),
            f"Task {task!r} {word}, feedback: {verdict['feedback']!r}",
        ]
    lines += ["", "Final output:", textwrap.indent(str(final), "  ")]
    counts = {kind: webhook_kinds.count(kind) for kind in ("human", "task", "step", "crew")}
    lines += ["", f"Webhooks received: {counts}"]
    return lines


if __name__ == "__main__":
    sys.exit(main())
