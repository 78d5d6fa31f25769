"""The README's demo (scripts/demo.py) tells the review story in the order it happened and says
which tasks of the example DAG played the reviewer."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

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
        "Webhooks received: {'human': 1, 'task': 1, 'step': 0, 'crew': 1}",
    )


def test_story_refuses_a_run_that_does_not_match_it():
    demo = load_demo()
    with pytest.raises(ValueError, match="expected 2 drafts and verdicts, got 2 and 1"):
        demo.story(["a", "b"], [{"is_approve": True, "feedback": ""}], "x", [])


@pytest.mark.integration
def test_the_demo_prints_the_story_in_order(tmp_path):
    done = subprocess.run(
        [sys.executable, str(DEMO), "--home", str(tmp_path / "airflow")],
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
        "Webhooks received: {'human': 2,",
    )
    assert out.count("Draft ") == 2
