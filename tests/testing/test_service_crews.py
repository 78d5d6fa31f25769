"""Crews as data: loading, validation, templates and the deterministic agent (no HTTP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_crew.testing import (
    CrewDefinitionError,
    CrewSpec,
    TaskSpec,
    builtin_crew_names,
    load_crew,
)
from airflow_provider_crew.testing.crews import (
    AgentContext,
    DeterministicAgent,
    FeedbackNote,
    render_template,
)

from ._helpers import crew, task


def test_builtin_crews() -> None:
    assert builtin_crew_names() == ["research", "review", "spender", "structured"]
    research = load_crew("research")
    assert research.input_names == ["topic", "current_year"]
    assert [t.name for t in research.tasks] == ["research_task", "reporting_task"]
    review = load_crew("review")
    assert [t.human_input for t in review.tasks] == [False, True, False]
    assert review.missing_inputs({"topic": "x"}) == []  # audience is optional
    structured = load_crew("structured")
    assert structured.tasks[-1].output_template is not None
    # short default step times keep tests and demos quick
    for spec in (research, review, structured):
        assert all(spec.seconds_per_step(t) <= 0.2 for t in spec.tasks)


def test_load_from_json_yaml_dict_and_spec(tmp_path: Path) -> None:
    data = crew("mine", task("one"), task("two", human_input=True))
    json_file = tmp_path / "mine.json"
    json_file.write_text(json.dumps(data))
    yaml_file = tmp_path / "other.yaml"
    yaml_file.write_text("tasks:\n  - name: one\n    agent: A\n    steps: 3\ninputs: [x]\n")
    from_json = load_crew(json_file)
    assert from_json == load_crew(data) == load_crew(str(json_file))
    assert from_json.tasks[1].human_input is True
    from_yaml = load_crew(yaml_file)
    assert from_yaml.name == "other"  # defaults to the file name
    assert from_yaml.tasks[0].steps == 3 and from_yaml.input_names == ["x"]
    spec = CrewSpec("direct", (TaskSpec("t", "A"),))
    assert load_crew(spec) is spec


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "c", "tasks": []}, "crew c.tasks: must be a non-empty list"),
        ({"name": "c", "tasks": [{"name": "t", "agent": "a"}] * 2}, "duplicate task names"),
        ({"name": "c", "tasks": [{"name": "t", "agent": "a", "steps": -1}]}, "tasks[0].steps"),
        ({"name": "c", "tasks": [{"name": "t", "agent": "a", "colour": 1}]}, "unknown fields ['colour']"),
        ({"name": "c", "tasks": [{"name": "t", "agent": "a", "human_input": "yes"}]}, "human_input"),
        ({"name": "c", "inputs": [3], "tasks": [{"name": "t", "agent": "a"}]}, "inputs[0]"),
        (
            {"name": "c", "inputs": ["x", "x"], "tasks": [{"name": "t", "agent": "a"}]},
            "duplicate input names",
        ),
        ({"name": "c", "step_seconds": -1, "tasks": [{"name": "t", "agent": "a"}]}, "step_seconds"),
        ({"name": "bad name", "tasks": [{"name": "t", "agent": "a"}]}, "crew.name"),
        ({"name": "c", "extra": 1, "tasks": [{"name": "t", "agent": "a"}]}, "unknown fields ['extra']"),
    ],
)
def test_invalid_crews_are_refused_with_the_field_named(data: dict, message: str) -> None:
    with pytest.raises(CrewDefinitionError) as err:
        load_crew(data)
    assert message in str(err.value)


def test_missing_or_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(CrewDefinitionError, match="not found"):
        load_crew(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CrewDefinitionError, match="invalid JSON"):
        load_crew(broken)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(CrewDefinitionError, match="must hold an object"):
        load_crew(listed)


def test_render_template() -> None:
    variables = {"topic": "AI", "items": ["a", "b"], "n": 2}
    assert render_template("About {topic} ({unknown})", variables) == "About AI ({unknown})"
    assert render_template("{items}", variables) == ["a", "b"]  # a lone placeholder keeps its type
    assert render_template("n={n} {items}", variables) == 'n=2 ["a", "b"]'
    assert render_template({"k": ["{topic}", 3, None]}, variables) == {"k": ["AI", 3, None]}


def test_agent_output_uses_inputs_context_and_all_feedback() -> None:
    spec = load_crew(crew("c", task("t1", expected_output="notes on {topic}"), task("t2")))
    agent = DeterministicAgent()
    ctx = AgentContext(
        crew=spec,
        task=spec.tasks[1],
        inputs={"topic": "AI", "year": 2025},
        earlier=[("t1", "t1 by t1 agent (attempt 1): notes on AI")],
        feedback=[FeedbackNote("t1", "more depth", False), FeedbackNote("t1", "good", True)],
        attempt=2,
    )
    out = agent.write(ctx)
    assert out.raw.splitlines() == [
        "t2 by t2 agent (attempt 2): done",
        "task: Do t2 about AI",
        "inputs: topic=AI; year=2025",
        "context: t1 by t1 agent (attempt 1): notes on AI",
        "feedback: more depth",
        "feedback: good",
    ]
    assert out.json is None and out.summary == out.raw.splitlines()[0]
    assert agent.write(ctx) == out  # deterministic
    step = agent.step(ctx, 1)
    assert (step.tool, step.agent) == ("search", "t2 agent")
    assert json.loads(step.tool_input) == {"query": "Do t2 about AI", "step": 1}


def test_fail_when_matches_inputs() -> None:
    spec = TaskSpec("t", "a", fail_when={"topic": "fail"})
    assert spec.should_fail({"topic": "fail"}) and not spec.should_fail({"topic": "AI"})
    assert TaskSpec("t", "a", fails=True).should_fail({})
