"""The README's demo (scripts/demo.py): by default a real Airflow where the demo plays the reviewer
through the REST API (Airflow 3.1+); with ``--scripted`` (or on 3.0) ``airflow dags test`` of the DAG
whose tasks play the reviewer. Both tell the review story in the order it happened."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "scripts" / "demo.py"
FEEDBACK = "Add a section on schema evolution."  # the example DAG's params.feedback


def load_demo():
    spec = importlib.util.spec_from_file_location("crew_demo", DEMO)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_in_order(text: str, *parts: str) -> None:
    position = 0
    for part in parts:
        found = text.find(part, position)
        assert found >= 0, f"{part!r} missing after position {position} in:\n{text}"
        position = found + len(part)


def test_the_reviewer_tasks_the_demo_names_are_resume_tasks_of_the_example_dag():
    demo = load_demo()
    source = (REPO / "example_dags" / f"{demo.DAG_ID}.py").read_text()
    resume_tasks = {
        next(kw.value.value for kw in node.keywords if kw.arg == "task_id"): {
            kw.arg: getattr(kw.value, "value", None) for kw in node.keywords
        }
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "CrewResumeOperator"
    }
    first, second = demo.REVIEWER_TASKS
    assert resume_tasks[first]["is_approve"] is False
    assert resume_tasks[second]["is_approve"] is True


def test_story_puts_each_verdict_after_the_draft_it_judged():
    demo = load_demo()
    lines = demo.story(
        ["DRAFT-ONE", "DRAFT-TWO"],
        [{"is_approve": False, "feedback": "more please"}, {"is_approve": True, "feedback": "ok"}],
        "FINAL",
        ["human", "task", "crew"],
    )
    assert_in_order(
        "\n".join(lines),
        "'request_changes'",
        "'approve'",
        "Draft 1",
        "DRAFT-ONE",
        "Task 'request_changes' requested changes, feedback: 'more please'",
        "Draft 2",
        "DRAFT-TWO",
        "Task 'approve' approved, feedback: 'ok'",
        "Final output:",
        "FINAL",
        "Webhooks the crew sent (received by the local receiver): 1 human input, 1 task done, 0 agent step, 1 crew done.",
    )


def test_story_refuses_a_run_that_does_not_match_it():
    demo = load_demo()
    with pytest.raises(ValueError, match="expected 2 drafts and verdicts, got 2 and 1"):
        demo.story(["a", "b"], [{"is_approve": True, "feedback": ""}], "x", [])


def test_a_request_is_printed_as_the_required_actions_page_shows_it():
    demo = load_demo()
    body = "\n".join(f"line {n}" for n in range(1, demo.BODY_LINES + 6))
    lines = demo.request_as_seen(
        {
            "subject": "Review crew task draft_task (round 1 of 3)",
            "body": body,
            "options": ["Approve", "Request changes"],
        }
    )
    text = "\n".join(lines)
    assert_in_order(
        text,
        "Required action: Review crew task draft_task (round 1 of 3)",
        "| line 1\n",
        "Options: Approve, Request changes",
    )
    assert f"line {demo.BODY_LINES}" in text and f"line {demo.BODY_LINES + 1}" not in text
    assert "(5 more lines in the UI)" in text


def test_a_request_body_is_printed_as_plain_text_and_the_crews_output_verbatim():
    from airflow_provider_crew.review.request import review_body
    from airflow_provider_crew.status import CrewStatus

    demo = load_demo()
    output = "draft_task by Writer (attempt 1): **Data contracts**\n# kept as the crew wrote it\n`x`"
    status = CrewStatus.from_response(
        {
            "state": "PAUSED",
            "status": "Pending Human Input",
            "last_executed_task": {
                "task_id": "t-1",
                "name": "draft_task",
                "agent": "Writer",
                "output": output,
            },
        }
    )
    round_2 = SimpleNamespace(
        round_number=2,
        round_task_ids=["round_1", "round_2", "round_3"],
        inputs={"topic": "data contracts"},
        response_timeout=None,
        approve_on_timeout=False,
    )
    markdown = review_body(
        round_2,
        "k-1",
        status,
        [{"round": 1, "answer": "Request changes", "feedback": "a | b", "applied": True}],
        retried=True,
        stops_crew=False,
    )
    assert "**" in markdown and "### " in markdown and "`k-1`" in markdown  # what the UI renders

    text = "\n".join(demo.request_as_seen({"subject": "Review", "body": markdown, "options": ["Approve"]}))

    assert_in_order(
        text,
        "| Review round 2 of 3: crew execution k-1 waits for your review of task draft_task.",
        "| Asked again:",
        "| Output\n",
        "| draft_task by Writer (attempt 1): **Data contracts**\n",  # the output as the crew wrote it
        "| # kept as the crew wrote it\n   | `x`\n",
        "| Inputs\n",
        "| - topic: data contracts",
        "| Earlier rounds\n",
        "| 1. Request changes by time-out default: a | b",
        "| How to answer\n",
        "| - Approve: the crew continues",
        "| - Request changes: say what to change in Feedback (required)",
    )
    outside_the_output = text.replace(output.replace("\n", "\n   | "), "")
    for marker in ("**", "### ", "> ", "```", "\\|", "`k-1`", "*Feedback*"):
        assert marker not in outside_the_output, marker


@pytest.mark.parametrize("scripted", [False, True], ids=["review-in-airflow", "scripted"])
def test_the_closing_lines_say_what_ran_with_which_crew_where_the_logs_are_and_what_next(tmp_path, scripted):
    demo = load_demo()
    dag_id = demo.DAG_ID if scripted else demo.REVIEW_DAG_ID
    home = tmp_path / "airflow"
    lines = demo.closing_lines(dag_id, home, run_id="manual__2026-01-01", scripted=scripted)
    text = "\n".join(lines)

    assert (REPO / "example_dags" / f"{dag_id}.py").is_file()  # the file the text names exists
    logs = (
        "shows them only when the run fails"
        if scripted
        else f"{home}/logs/dag_id={dag_id}/run_id=manual__2026-01-01/task_id=<task>/attempt=<n>.log"
    )
    assert_in_order(
        text,
        f"What ran: the DAG {dag_id} (example_dags/{dag_id}.py)",
        "`airflow dags test`" if scripted else "in a real Airflow",
        f"with SQLite in {home}.",
        "The crew was the bundled local stand-in",
        "no model, no API key",
        "Logs",
        logs,
        "Next:",
        "bash scripts/demo.sh --ui",
        f"copy example_dags/{dag_id}.py",
        "into your DAGs folder and set its connections crew_review",
        "docs/quickstart.rst",
    )
    assert lines[-1].strip() == "docs/quickstart.rst shows how."
    if not scripted:
        assert f"{home}/logs/<component>.log" in text
    assert max(len(line) for line in lines if "/" not in line) <= 110  # reads in a terminal


def test_the_review_record_names_each_round_its_answer_and_who_gave_it():
    demo = load_demo()
    lines = demo.review_record(
        [
            {
                "round": 1,
                "answer": "Request changes",
                "feedback": "more",
                "applied": True,
                "responded_by": {"name": "admin"},
            },
            {"round": 2, "answer": "Approve", "feedback": "ok", "applied": True, "responded_by": None},
        ],
        "FINAL",
        ["human", "human", "crew"],
    )
    assert_in_order(
        "\n".join(lines),
        "round 1: 'Request changes' by admin, feedback 'more', sent to the crew: True",
        "round 2: 'Approve' by ?, feedback 'ok'",
        "Final output:",
        "FINAL",
        "Webhooks the crew sent (received by the local receiver): 2 human input, 0 task done, 0 agent step, 1 crew done.",
    )


@pytest.mark.e2e
@pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="human-in-the-loop needs Airflow 3.1+")
def test_the_demo_reviews_in_a_real_airflow_round_by_round(tmp_path):
    done = subprocess.run(
        [sys.executable, str(DEMO), "--home", str(tmp_path / "airflow")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert_in_order(
        out,
        "Starting the api-server, scheduler, dag-processor and triggerer",
        "Triggered example_crew_review_in_airflow",
        "== Required action: Review crew task draft_task (round 1 of 3)",
        "draft_task by Writer (attempt 1)",
        "The reviewer answers 'Request changes' with feedback 'Add a section on schema evolution.'",
        "== Required action: Review crew task draft_task (round 2 of 3)",
        "draft_task by Writer (attempt 2)",
        "The reviewer answers 'Approve'",
        ": success in ",
        "round 1: 'Request changes' by admin, feedback 'Add a section on schema evolution.', sent to the crew: True",
        "round 2: 'Approve' by admin",
        "Final output:",
        "publish_task by Editor",
        "Webhooks the crew sent (received by the local receiver): 2 human input,",
    )


@pytest.mark.integration
def test_the_scripted_demo_prints_the_story_in_order(tmp_path):
    done = subprocess.run(
        [sys.executable, str(DEMO), "--scripted", "--home", str(tmp_path / "airflow")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert_in_order(
        out,
        "Running `airflow dags test example_crew_human_review` (deferrable)",
        ": success in ",
        "two scripted tasks of the DAG, not a person: 'request_changes'",
        "Draft 1 (the crew paused for review):",
        "draft_task by Writer (attempt 1)",
        f"Task 'request_changes' requested changes, feedback: {FEEDBACK!r}",
        "Draft 2 (the crew paused for review):",
        "draft_task by Writer (attempt 2)",
        f"feedback: {FEEDBACK}",  # draft 2 was written with the feedback
        "Task 'approve' approved, feedback: 'Approved, publish it.'",
        "Final output:",
        "publish_task by Editor",
        "Webhooks the crew sent (received by the local receiver): 2 human input,",
    )
    assert out.count("Draft ") == 2


# -- --home: the demo deletes only the home it made, and nothing beside it --------------------------


def a_folder_of_someone_else(tmp_path: Path) -> tuple[Path, Path]:
    """An AIRFLOW_HOME the demo did not make (``~/airflow``) and the ``dags`` folder beside it."""
    home = tmp_path / "airflow"
    (home / "plugins").mkdir(parents=True)
    (home / "airflow.cfg").write_text("[core]\nmine = true\n")
    (home / "plugins" / "plugin.py").write_text("MINE = 1\n")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "my_dag.py").write_text("# my DAG\n")
    return home, dags


def assert_untouched(home: Path, dags: Path) -> None:
    assert (home / "airflow.cfg").read_text() == "[core]\nmine = true\n"
    assert (home / "plugins" / "plugin.py").read_text() == "MINE = 1\n"
    assert (dags / "my_dag.py").read_text() == "# my DAG\n"
    assert sorted(p.name for p in home.iterdir()) == ["airflow.cfg", "plugins"]  # no marker written
    assert sorted(p.name for p in dags.iterdir()) == ["my_dag.py"]


def test_a_home_the_demo_did_not_make_is_refused_and_left_as_it_was(tmp_path):
    demo = load_demo()
    home, dags = a_folder_of_someone_else(tmp_path)
    with pytest.raises(demo.HomeRefused) as refused:
        demo.prepare_home(home)
    message = str(refused.value)
    assert f"--home {home} is not empty and was not made by the demo" in message
    assert f"(it has no {demo.HOME_MARKER} file)" in message
    assert "Choose another folder for --home, a new or empty one" in message
    assert str(demo.DEFAULT_HOME) in message
    assert "\n" not in message  # one paragraph
    assert_untouched(home, dags)


def test_a_file_as_home_is_refused_and_left_as_it_was(tmp_path):
    demo = load_demo()
    home = tmp_path / "airflow"
    home.write_text("not a folder\n")
    with pytest.raises(demo.HomeRefused, match="is a file or a link, not a folder made by the demo"):
        demo.prepare_home(home)
    assert home.read_text() == "not a folder\n"


def test_a_home_made_by_an_earlier_run_is_deleted_and_recreated(tmp_path):
    demo = load_demo()
    home = tmp_path / "airflow"
    demo.prepare_home(home)
    (home / "airflow.db").write_text("the last run's database")
    (home / "dags").mkdir()
    (home / "dags" / "old.py").write_text("# the last run's DAG\n")
    beside = tmp_path / "dags"
    beside.mkdir()
    (beside / "my_dag.py").write_text("# my DAG\n")

    demo.prepare_home(home)

    assert sorted(p.name for p in home.iterdir()) == [demo.HOME_MARKER]
    assert "made by the airflow_provider_crew demo" in (home / demo.HOME_MARKER).read_text()
    assert (beside / "my_dag.py").read_text() == "# my DAG\n"


def test_an_empty_home_is_used_and_marked(tmp_path):
    demo = load_demo()
    home = tmp_path / "airflow"
    home.mkdir()
    demo.prepare_home(home)
    assert sorted(p.name for p in home.iterdir()) == [demo.HOME_MARKER]


def test_a_new_home_is_made_and_marked(tmp_path):
    demo = load_demo()
    home = tmp_path / "new" / "airflow"
    demo.prepare_home(home)
    assert sorted(p.name for p in home.iterdir()) == [demo.HOME_MARKER]


def test_the_default_home_is_recreated_even_without_the_marker(tmp_path, monkeypatch):
    demo = load_demo()
    default = tmp_path / ".demo" / "airflow"  # as an earlier demo, before the marker, left it
    default.mkdir(parents=True)
    (default / "airflow.db").write_text("old")
    monkeypatch.setattr(demo, "DEFAULT_HOME", default)
    demo.prepare_home(default)
    assert sorted(p.name for p in default.iterdir()) == [demo.HOME_MARKER]


class StackStarted(Exception):
    """Raised by the fake AirflowStack: the test has what it wanted to see."""


def test_the_dags_folder_the_demo_uses_is_inside_its_home(tmp_path, monkeypatch):
    demo = load_demo()
    home = tmp_path / "airflow"
    assert demo.dags_folder(home).parent == home
    started = {}

    def airflow_stack(home: Path, dags_folder: Path, env: dict) -> None:
        started.update(home=home, dags=dags_folder, files=sorted(p.name for p in dags_folder.iterdir()))
        raise StackStarted

    class Webhooks:
        def url_for(self, path: str) -> str:
            return f"http://127.0.0.1:1/{path}"

    class CrewService:
        base_url, webhooks = "http://127.0.0.1:1", Webhooks()

        def __init__(self, *args, **kwargs) -> None: ...
        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None: ...
        def connection_env(self, conn_id: str) -> dict:
            return {}

    stack = type(sys)("tests.e2e.airflow_stack")
    stack.AirflowStack, stack.FAST_SETTLE = airflow_stack, {}
    monkeypatch.setitem(sys.modules, "tests.e2e.airflow_stack", stack)
    monkeypatch.setattr(demo, "LocalCrewService", CrewService)
    monkeypatch.setattr(sys, "path", list(sys.path))  # review_in_airflow adds the repository to it

    demo.prepare_home(home)
    with pytest.raises(StackStarted):
        demo.review_in_airflow(home, ui=False)

    assert started["home"] == home
    assert started["dags"] == home / "dags"
    assert started["files"] == [f"{demo.REVIEW_DAG_ID}.py"]
    assert not (tmp_path / "dags").exists()  # nothing beside the home


def test_the_demo_refuses_a_home_it_did_not_make_before_starting_anything(tmp_path):
    home, dags = a_folder_of_someone_else(tmp_path)
    done = subprocess.run(
        [sys.executable, str(DEMO), "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"demo: error: --home {home} is not empty and was not made by the demo" in done.stderr
    assert "nothing was changed" in done.stderr
    assert done.stdout == ""  # no service, no Airflow: nothing started
    assert_untouched(home, dags)


def test_the_demo_skips_its_set_up_when_the_environment_is_current(tmp_path):
    """A second run of the README's main command does not install again: a stamp for this
    pyproject.toml and these extras in the environment says it is set up (the first run writes it)."""
    import hashlib

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # this environment's, which imports airflow and the provider
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / f".crew-demo-setup-{digest}-testing").touch()

    done = subprocess.run(
        ["bash", "scripts/demo.sh", "--help"],
        cwd=REPO,
        env={**os.environ, "VENV": str(venv)},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"Environment {venv} is set up"), done.stdout[:500]
    assert "Setting up" not in done.stdout and "usage:" in done.stdout
