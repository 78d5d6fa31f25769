"""Run the provider's demo: a crew's draft reviewed in Airflow, end to end, against a local crew service.

By default (Airflow 3.1+) it starts a real Airflow in ``.demo/airflow`` (api-server, scheduler with
the LocalExecutor, dag-processor and triggerer; SQLite), runs ``example_crew_review_in_airflow`` and
plays the reviewer through Airflow's REST API, the same call the UI's Required Actions page makes:
it prints each round's request as the reviewer sees it, requests changes in round 1, approves in
round 2, then prints the final output, the review record and the webhooks received.

``--ui`` leaves the answering to you: it prints the address, user and password of the Airflow UI,
and waits while you review in the browser (Ctrl-C stops everything).

``--scripted`` (and Airflow 3.0, which has no human-in-the-loop) runs ``example_crew_human_review``
with ``airflow dags test`` instead, where two ``CrewResumeOperator`` tasks play the reviewer.

``--home`` chooses another AIRFLOW_HOME. The demo deletes and recreates its home on each run, so it
only takes a folder that is new, empty or made by an earlier demo run (it has the ``.crew-demo-home``
marker file); the DAGs folder is inside the home. Anything else is refused before anything is touched.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from airflow_provider_crew.testing import LocalCrewService
from airflow_provider_crew.testing.dag_runs import airflow_env, crew_connections_env, dags_test, migrate_db

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "example_crew_human_review"
# The reviewer in example_crew_human_review is not a person: two scripted CrewResumeOperator tasks.
REVIEWER_TASKS = ("request_changes", "approve")
# The tasks whose XCom "human_input" holds each draft the crew paused on.
DRAFT_TASKS = ("kickoff", "request_changes")

REVIEW_DAG_ID = "example_crew_review_in_airflow"
FEEDBACK = "Add a section on schema evolution."
APPROVAL = "Good now, publish it."
ANSWERS = {1: ("Request changes", FEEDBACK), 2: ("Approve", APPROVAL)}
RUN_TIMEOUT = 600
# A round waits for its answer in these states: ``awaiting_input`` on Airflow 3.3+, ``deferred`` on 3.1-3.2.
WAITING_STATES = ("awaiting_input", "deferred")
BODY_LINES = 40  # of each request's body printed; the whole body is in the UI
# A person reads the request before answering. An answer within a second or so of the request can
# meet Airflow 3.3's stale-event race (apache/airflow#72716, docs/human-review.md): Airflow fails
# the round and its retry asks again. The pause plays the reader, so the demo shows the usual path.
READING_SECONDS = 3.0

DEFAULT_HOME = REPO / ".demo" / "airflow"  # the repository's own (git-ignored): recreated freely
# Written in each home the demo makes: the demo deletes only a home that has it (or the default).
HOME_MARKER = ".crew-demo-home"
HOME_MARKER_TEXT = (
    "This folder was made by the airflow_provider_crew demo (scripts/demo.py) as its AIRFLOW_HOME.\n"
    "The demo deletes and recreates it on each run that uses it as --home.\n"
)


class HomeRefused(Exception):
    """The ``--home`` given is a folder the demo did not make: it will not delete it."""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ui", action="store_true", help="you review in the Airflow UI; the demo waits")
    parser.add_argument(
        "--scripted", action="store_true", help="the scripted-reviewer DAG under `airflow dags test` instead"
    )
    parser.add_argument(
        "--blocking", action="store_true", help="with --scripted: wait in the worker instead of deferring"
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=DEFAULT_HOME,
        help=(
            "the folder the demo uses as AIRFLOW_HOME (its database, logs and DAGs folder; default: "
            ".demo/airflow in the repository). It must be new, empty or made by an earlier demo run: "
            "it is deleted and recreated on each run"
        ),
    )
    args = parser.parse_args()

    try:  # first thing: a folder the demo did not make is refused before anything is touched
        prepare_home(args.home)
    except HomeRefused as refused:
        print(f"demo: error: {refused}", file=sys.stderr)
        return 2
    if not args.scripted and not human_in_the_loop_available():
        print("This Airflow has no human-in-the-loop (it came in 3.1): running the scripted review instead.")
        args.scripted = True
    if args.scripted:
        return scripted_review(args.home, blocking=args.blocking)
    return review_in_airflow(args.home, ui=args.ui)


def prepare_home(home: Path) -> None:
    """Delete and recreate the demo's AIRFLOW_HOME, with the marker that says the demo made it.

    The demo deletes only what it made: a new folder, an empty one, one with the marker of an earlier
    run, or the default ``.demo/airflow``. Anything else raises :class:`HomeRefused`, untouched.
    """
    if home_refusal := refusal(home):
        raise HomeRefused(home_refusal)
    if home.exists() and any(home.iterdir()):
        shutil.rmtree(home)
    home.mkdir(parents=True, exist_ok=True)
    (home / HOME_MARKER).write_text(HOME_MARKER_TEXT)


def refusal(home: Path) -> str | None:
    """Why the demo will not use ``home`` as its AIRFLOW_HOME, or None when it can."""
    if not home.exists() and not home.is_symlink():
        return None  # new: the demo makes it
    if home.is_symlink() or not home.is_dir():
        why = "is a file or a link, not a folder made by the demo"
    elif home.resolve() == DEFAULT_HOME.resolve() or (home / HOME_MARKER).is_file():
        return None  # the demo's own
    elif not any(home.iterdir()):
        return None  # empty: nothing to lose
    else:
        why = f"is not empty and was not made by the demo (it has no {HOME_MARKER} file)"
    return (
        f"--home {home.absolute()} {why}, and the demo deletes and recreates its home on each run: "
        "it will not delete what it did not make, so it stops here and nothing was changed. Choose "
        "another folder for --home, a new or empty one, or leave out --home to use the default "
        f"{DEFAULT_HOME}, which the demo recreates freely."
    )


def dags_folder(home: Path) -> Path:
    """The demo's DAGs folder: inside its home, so the demo never touches anything beside the home."""
    return home / "dags"


#: The crew's webhooks, by kind, as the closing lines name them.
WEBHOOK_WORDS = {"human": "human input", "task": "task done", "step": "agent step", "crew": "crew done"}


def webhooks_line(webhook_kinds: list[str]) -> str:
    """What the crew's webhooks told the receiver, counted by kind, in words."""
    counts = ", ".join(f"{webhook_kinds.count(kind)} {word}" for kind, word in WEBHOOK_WORDS.items())
    return f"Webhooks the crew sent (received by the local receiver): {counts}."


def human_in_the_loop_available() -> bool:
    from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS

    return AIRFLOW_V_3_1_PLUS


# -- the review in Airflow: a real api-server, scheduler, dag-processor and triggerer ---------------


def review_in_airflow(home: Path, *, ui: bool) -> int:
    sys.path.insert(0, str(REPO))
    from tests.e2e.airflow_stack import FAST_SETTLE, AirflowStack

    dags = dags_folder(home)  # prepare_home has just recreated the home: the folder is new
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "example_dags" / f"{REVIEW_DAG_ID}.py", dags)  # only this DAG: parsing stays quick
    # Agent steps of 1 s (the bundled crews take 0.05 s): the run reads like a real one.
    with LocalCrewService("review", speed=0.05) as service:
        receiver = service.webhooks
        env = {
            **service.connection_env("crew_review"),
            "AIRFLOW_CONN_CREW_REVIEW_WEBHOOK": json.dumps(
                {"conn_type": "http", "host": receiver.url_for("human"), "password": "demo-webhook-token"}
            ),
            "CREW_EXAMPLE_WEBHOOK_BASE": receiver.url_for("").rstrip("/"),
            **FAST_SETTLE,  # the review rounds' holds last seconds, not 40 s
        }
        airflow = AirflowStack(home, dags, env)
        print(f"Local crew service: {service.base_url} (crew: review)")
        print(f"Airflow home: {home} (SQLite). Migrating the database…", flush=True)
        try:
            airflow.migrate()
            print("Starting the api-server, scheduler, dag-processor and triggerer…", flush=True)
            airflow.start()
            airflow.wait_for_dag(REVIEW_DAG_ID)
            run_id = airflow.trigger(REVIEW_DAG_ID)
            print(f"Triggered {REVIEW_DAG_ID}, run {run_id}.\n", flush=True)
            if ui:
                return wait_for_a_person(airflow, run_id)
            started = time.monotonic()
            state = answer_each_round(airflow, run_id)
            seconds = time.monotonic() - started
            if state != "success":
                print(
                    f"DAG run {run_id} ended {state}: {airflow.task_states(REVIEW_DAG_ID, run_id)}",
                    file=sys.stderr,
                )
                return 1
            history = airflow.xcom(REVIEW_DAG_ID, run_id, "review.result", key="review_history")
            final = airflow.xcom(REVIEW_DAG_ID, run_id, "review.result", key="result")
            kinds = [hook.kind for hook in receiver.received]
        except BaseException:
            for component in airflow.processes:
                print(f"----- {component} -----\n{airflow.log_tail(component)}", file=sys.stderr)
            raise
        finally:
            airflow.stop()
    print(f"\nDAG run {run_id}: success in {seconds:.0f} s.\n")
    print("\n".join(review_record(history, final, kinds)))
    print("\n".join(["", *closing_lines(REVIEW_DAG_ID, home, run_id=run_id)]))
    return 0


def answer_each_round(airflow: Any, run_id: str) -> str:
    """Answer each round's request as soon as it can be answered; the run's final state.

    A round asked again (Airflow failed the round and its retry asks anew; see docs/human-review.md)
    is answered again the same way.
    """
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        airflow.check_alive()
        state = airflow.dag_run_state(REVIEW_DAG_ID, run_id)
        if state in ("success", "failed"):
            return state
        states = airflow.task_states(REVIEW_DAG_ID, run_id)
        for round_number, (option, feedback) in ANSWERS.items():
            task_id = f"review.round_{round_number}"
            if states.get(task_id) not in WAITING_STATES:
                continue
            detail = airflow.api("GET", airflow.hitl_path(REVIEW_DAG_ID, run_id, task_id), expect=(200, 404))
            if not detail or detail.get("response_received"):
                continue
            print("\n".join(request_as_seen(detail)), flush=True)
            time.sleep(READING_SECONDS)
            airflow.api(
                "PATCH",
                airflow.hitl_path(REVIEW_DAG_ID, run_id, task_id),
                json={"chosen_options": [option], "params_input": {"feedback": feedback}},
            )
            print(f"The reviewer answers {option!r} with feedback {feedback!r}.\n", flush=True)
        time.sleep(0.5)  # the next look at the run; the loop's own deadline bounds it
    return airflow.dag_run_state(REVIEW_DAG_ID, run_id)


def request_as_seen(detail: dict[str, Any]) -> list[str]:
    """A request as the Required Actions page shows it: subject, body (its first lines, as plain text:
    the page renders its Markdown), options."""
    body = plain_text(str(detail.get("body") or "")).splitlines()
    shown = body[:BODY_LINES] + (
        [f"… ({len(body) - BODY_LINES} more lines in the UI)"] if len(body) > BODY_LINES else []
    )
    return [
        f"== Required action: {detail.get('subject')}",
        textwrap.indent("\n".join(shown), "   | ", lambda _: True),
        f"   Options: {', '.join(detail.get('options') or [])}; a 'feedback' field.",
    ]


_HEADING = re.compile(r"^#{1,6}\s+")
_QUOTE = re.compile(r"^>\s?")
_FENCE = re.compile(r"^(`{3,}|~{3,})")
_CODE = re.compile(r"(`+)(.+?)\1")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EMPHASIS = re.compile(r"(?<![*\w])\*(?=\S)(.+?)(?<=\S)\*(?![*\w])")


def plain_text(markdown: str) -> str:
    """Markdown as a terminal shows it best: without ``#`` headings, ``**``/``*`` emphasis, inline
    code's backticks, ``>`` quotes and ``\\|`` escapes. A fenced block (the crew's output) is kept
    verbatim, without its fence lines."""
    lines: list[str] = []
    fence = ""  # the open fence's backticks (or tildes), while in a fenced block
    for line in markdown.splitlines():
        opening = _FENCE.match(line)
        if fence:
            if line.strip() == fence:
                fence = ""
            else:
                lines.append(line)
            continue
        if opening:
            fence = opening.group(1)
            continue
        text = _QUOTE.sub("", _HEADING.sub("", line))
        text = _EMPHASIS.sub(r"\1", _STRONG.sub(r"\1", _CODE.sub(r"\2", text)))
        lines.append(text.replace("\\|", "|"))
    return "\n".join(lines)


def review_record(history: list[dict[str, Any]], final: object, webhook_kinds: list[str]) -> list[str]:
    """What Airflow kept of the review (XCom ``review_history``), the final output and the webhooks."""
    lines = ["The review, as recorded by each round's task (XCom review_history of review.result):"]
    for record in history:
        who = (record.get("responded_by") or {}).get("name") or "?"
        lines.append(
            f"  round {record['round']}: {record['answer']!r} by {who}, feedback {record['feedback']!r}, "
            f"sent to the crew: {record['applied']}"
        )
    lines += ["", "Final output:", textwrap.indent(str(final), "  ")]
    lines += ["", webhooks_line(webhook_kinds)]
    return lines


def wait_for_a_person(airflow: Any, run_id: str) -> int:
    print(
        f"Review it yourself: open {airflow.base_url}/required_actions and log in as "
        f"{airflow.username!r} with password {airflow.password!r}.\n"
        f"The run: {airflow.base_url}/dags/{REVIEW_DAG_ID}/runs/{run_id}\n"
        "Request changes with some feedback, then approve the redone draft. Ctrl-C stops everything.",
        flush=True,
    )
    try:
        while (state := airflow.dag_run_state(REVIEW_DAG_ID, run_id)) not in ("success", "failed"):
            airflow.check_alive()
            time.sleep(2)
    except KeyboardInterrupt:
        return 130
    print(f"DAG run {run_id} ended {state}. Ctrl-C stops Airflow.", flush=True)
    try:
        while True:
            time.sleep(60)
    except KeyboardInterrupt:
        return 0 if state == "success" else 1


# -- the scripted review: airflow dags test, two CrewResumeOperator tasks play the reviewer --------


def scripted_review(home: Path, *, blocking: bool) -> int:
    env = airflow_env(
        home,
        REPO / "example_dags",
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=str(not blocking),
    )
    print(f"Airflow home: {home} (SQLite). Migrating the database…", flush=True)
    migrate_db(env)

    with LocalCrewService(["research", "review", "structured"]) as service:
        receiver = service.webhooks
        print(f"Local crew service: {service.base_url} (crews: research, review, structured)")
        env.update(crew_connections_env(service))
        env["CREW_EXAMPLE_WEBHOOK_BASE"] = receiver.url_for("").rstrip("/")
        mode = "blocking" if blocking else "deferrable"
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
        final = run.xcom("approve", key="result")
        feedback = service.executions[kickoff_id]["feedback"]
        kinds = [hook.kind for hook in receiver.received]

    print(f"\nDAG run {run.run_id}: {run.state} in {seconds:.0f} s; crew execution {kickoff_id}\n")
    try:
        lines = story(drafts, feedback, final, kinds)
    except ValueError as error:
        print(f"The run did not tell the expected story: {error}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    print("\n".join(["", *closing_lines(DAG_ID, home, scripted=True)]))
    return 0


def closing_lines(dag_id: str, home: Path, *, run_id: str | None = None, scripted: bool = False) -> list[str]:
    """The demo's last lines: what ran, with which crew, where its logs are, and what to try next.

    :param dag_id: The DAG that ran (``example_dags/<dag_id>.py``).
    :param home: The demo's AIRFLOW_HOME.
    :param run_id: The DAG run, for the path of its task logs (the review in a real Airflow).
    :param scripted: The run was ``airflow dags test`` of the scripted review.
    """
    from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_VERSION

    dag_file = f"example_dags/{dag_id}.py"
    logs = home / "logs"
    if scripted:
        how = f"with `airflow dags test` on Airflow {AIRFLOW_VERSION}"
        where = [
            "Logs: `airflow dags test` prints the task logs rather than keeping them in files, and the demo",
            "  shows them only when the run fails.",
        ]
        if AIRFLOW_V_3_1_PLUS:
            where.append(f"  The demo without --scripted keeps every task's log under {logs}.")
    else:
        how = f"in a real Airflow {AIRFLOW_VERSION} (api-server, scheduler, dag-processor, triggerer)"
        where = [
            "Logs, kept until the next demo run:",
            f"  each task's: {logs / f'dag_id={dag_id}' / f'run_id={run_id}'}/task_id=<task>/attempt=<n>.log",
            f"  each Airflow component's: {logs}/<component>.log (scheduler.log, triggerer.log...)",
        ]
    ui = (
        "  - Review the drafts yourself in the browser: bash scripts/demo.sh --ui"
        if AIRFLOW_V_3_1_PLUS
        else "  - Review the drafts yourself in the browser: Airflow 3.1+, then bash scripts/demo.sh --ui"
    )
    return [
        f"What ran: the DAG {dag_id} ({dag_file}),",
        f"  {how}, with SQLite in {home}.",
        "The crew was the bundled local stand-in (airflow_provider_crew.testing): scripted agents that",
        "  return canned text, with no model, no API key and nothing leaving this machine.",
        *where,
        "Next:",
        ui,
        f"  - Run it against your deployed crew: copy {dag_file}",
        "    into your DAGs folder and set its connections crew_review (host = the crew's base URL,",
        "    password = its bearer token) and crew_review_webhook (where the crew announces a pause);",
        "    docs/quickstart.rst shows how.",
    ]


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
        "in the Airflow UI, see example_crew_review_in_airflow (crew_human_review): the demo without "
        "--scripted.",
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
    lines += ["", webhooks_line(webhook_kinds)]
    return lines


if __name__ == "__main__":
    sys.exit(main())
