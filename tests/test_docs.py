"""The documentation is generated from, or copied from, code that runs: every parameter of every
operator, sensor and trigger is documented; every snippet of the quick start and the how-tos is an
example DAG's code between markers; docs/api.md, the one parameter reference outside the site, is
current and the README links to it. (The site's own build, with warnings as errors, is
``bash scripts/docs.sh``; the snippets' copies are checked in tests/test_docs_snippets.py.)"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
EXAMPLE_DAGS = REPO / "example_dags"
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(REPO / "scripts"))

import crew_reference  # noqa: E402
import howto_snippets  # noqa: E402

CLASSES = crew_reference.public_classes()


def test_the_reference_finds_the_operators_sensor_and_trigger():
    names = {klass.__name__ for klass in CLASSES}
    assert {"CrewKickoffOperator", "CrewResumeOperator", "CrewStatusSensor", "CrewStatusTrigger"} <= names


@pytest.mark.parametrize("klass", CLASSES, ids=lambda klass: klass.__name__)
def test_every_parameter_has_a_param_line_and_every_param_line_a_parameter(klass):
    ref = crew_reference.reference(klass)
    assert ref.parameters, f"{ref.name}: no parameters found"
    assert ref.undocumented == [], f"{ref.name}: add ':param name:' lines for {ref.undocumented}"
    assert ref.unknown == [], f"{ref.name}: ':param' lines for parameters it does not take: {ref.unknown}"


@pytest.mark.parametrize(
    "klass", [k for k in CLASSES if crew_reference.kind_of(k) != "trigger"], ids=lambda klass: klass.__name__
)
def test_every_operator_and_sensor_says_what_it_pushes_to_xcom(klass):
    ref = crew_reference.reference(klass)
    assert "return_value" in ref.xcom, (
        f"{ref.name}: add ':xcom return_value:' (and every other key) to its docstring"
    )


def api_sections() -> dict[str, str]:
    """docs/api.md by ``## Name`` heading."""
    page = (DOCS / "api.md").read_text()
    return {part.split("\n", 1)[0]: part for part in page.split("\n## ")[1:]}


def test_every_parameter_appears_in_the_generated_tables():
    sections = api_sections()
    for klass in CLASSES:
        ref = crew_reference.reference(klass)
        rst = "\n".join(crew_reference.rst_lines(ref))
        markdown = crew_reference.markdown(ref)
        if ref.kind == "trigger":  # internal: the DAG author's pages name it, without its arguments
            assert markdown.startswith(f"**{ref.name}** (internal)") and "| `" not in markdown, ref.name
        assert ref.name in sections, f"docs/api.md has no section '## {ref.name}'"
        for parameter in ref.parameters:
            assert f"``{parameter.name}``" in rst, (ref.name, parameter.name)
            assert ref.kind == "trigger" or f"| `{parameter.name}` |" in markdown, (ref.name, parameter.name)
            assert ref.kind == "trigger" or f"| `{parameter.name}` |" in sections[ref.name], (
                f"docs/api.md, {ref.name}: no row for {parameter.name}"
            )
        for key in ref.xcom:
            assert f"``{key}``" in rst and f"| `{key}` |" in markdown, (ref.name, key)


def row(markdown: str, parameter: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| `{parameter}` |"))
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_the_tables_say_what_a_dag_author_must_type():
    resume = crew_reference.markdown(
        crew_reference.reference("airflow_provider_crew.operators.resume.CrewResumeOperator")
    )
    # name, type, default, templated, meaning
    assert row(resume, "kickoff_id")[2:4] == ["required", "yes"]
    assert row(resume, "crew_task_id")[2:4] == ["required", "yes"]
    assert row(resume, "is_approve")[2:4] == ["required", "yes"]
    assert row(resume, "wait_for_completion")[2] == "`True`"
    assert row(resume, "on_human_input")[2] == "`'return'`"
    assert '`"fail"`' in row(resume, "on_human_input")[4] and '`"wait"`' in row(resume, "on_human_input")[4]
    assert not any(line.startswith("| `execution_id`") for line in resume.splitlines())
    assert row(resume, "deferrable")[2].startswith("`[operators] default_deferrable`")

    kickoff = crew_reference.markdown(
        crew_reference.reference("airflow_provider_crew.operators.crew.CrewKickoffOperator")
    )
    for webhook in ("task_webhook_url", "step_webhook_url", "crew_webhook_url"):
        assert row(kickoff, webhook)[2:4] == ["`None`", "yes"]
    assert row(kickoff, "timeout")[2] == "`86400` s (24 h)"

    sensor = crew_reference.markdown(
        crew_reference.reference("airflow_provider_crew.sensors.crew.CrewStatusSensor")
    )
    assert row(sensor, "kickoff_id")[2:4] == ["required", "yes"]
    assert row(sensor, "crew_conn_id")[2:4] == ["`'crew_default'`", "no"]


def test_the_readme_links_to_the_parameter_reference_and_repeats_none_of_it():
    """One source: docs/api.md holds the generated tables (scripts/reference_tables.py); the README
    only links to it."""
    readme = (REPO / "README.md").read_text()
    assert "(docs/api.md)" in readme
    assert "GENERATED" not in readme and "<details>" not in readme
    assert not re.search(r"^\| `\w+` \| `", readme, re.MULTILINE), "a parameter table in the README"


def test_the_api_page_is_the_code_at_a_glance():
    generated = crew_reference.api_page()
    if crew_reference.UNIMPORTABLE:  # e.g. the managed-agent hook without common.ai, or HITL on 3.0
        pytest.skip(f"on this Airflow some modules do not import: {crew_reference.UNIMPORTABLE}")
    page = (REPO / "docs" / "api.md").read_text()
    assert generated == page, "run: python scripts/reference_tables.py"
    # The vocabulary holds: the same default for each shared word on every task that takes it.
    tasks = [crew_reference.reference(path) for path in crew_reference.API_TASKS]
    for name in crew_reference.SHARED_PARAMETERS:
        defaults = {p.default for ref in tasks for p in ref.parameters if p.name == name}
        assert len(defaults) <= 1, f"{name} has different defaults: {defaults}"
    # Every crew task returns the kickoff id, and the final output is XCom "result" everywhere.
    for ref in tasks[:3]:
        assert ref.xcom["return_value"] == "The kickoff id.", ref.name
        assert "result" in ref.xcom and "output" not in ref.xcom, ref.name


def test_the_metrics_page_table_is_the_metrics_table_of_the_code():
    page = (DOCS / "metrics.md").read_text()
    assert crew_reference.render_metrics_page(page) == page, "run: python scripts/reference_tables.py"
    # The alerts are named as such, each with a Prometheus rule and a Datadog monitor query.
    from airflow_provider_crew.metrics import METRICS

    for metric in (m for m in METRICS if m.alert):
        underscored = metric.name.replace(".", "_")
        assert f"airflow_{underscored}" in page, metric.name
        assert f"airflow.{metric.name}" in page, metric.name


def test_the_grafana_dashboard_has_the_panels_the_metrics_page_shows_over_mapped_series():
    import json

    dashboard = json.loads((DOCS / "grafana-crew-dashboard.json").read_text())
    page = (DOCS / "metrics.md").read_text()
    shown = re.findall(r"^\| (.+?) \| `(.+)` \|$", page.split("## A Grafana dashboard")[1], re.MULTILINE)
    assert [(p["title"], p["targets"][-1]["expr"]) for p in dashboard["panels"]] == shown
    mapped = set(re.findall(r"name: (airflow_crew_\w+)", page))
    used = {name.removesuffix("_bucket") for name in re.findall(r"airflow_crew_\w+", json.dumps(dashboard))}
    assert used and used <= mapped


def test_examples_and_how_tos_use_only_names_the_api_page_shows():
    page = (REPO / "docs" / "api.md").read_text()
    documented = set(re.findall(r"`(\w+)`", page))
    texts = [p.read_text() for p in (REPO / "example_dags").glob("*.py")]
    texts += [p.read_text() for p in (REPO / "docs" / "howto").glob("*.rst")]
    for text in texts:
        for call in re.finditer(
            r"\b(Crew\w+Operator|CrewStatusSensor|crew_human_review)\((.*?)\n\s*\)", text, re.S
        ):
            for keyword in re.findall(r"^\s*(\w+)=", call.group(2), re.M):
                assert keyword in documented or keyword == "task_id", f"{call.group(1)}({keyword}=...)"


# -- snippets come from the example DAGs -------------------------------------------------------------


def snippets() -> list[howto_snippets.Snippet]:
    return [snippet for page in howto_snippets.pages() for snippet in howto_snippets.snippets(page)]


def test_every_snippet_comes_from_an_example_dag_between_markers():
    found = snippets()
    assert len(found) >= 6
    for snippet in found:
        assert snippet.path.parent == EXAMPLE_DAGS, (
            f"{snippet.page.name} copies {snippet.path}, not an example DAG"
        )
        text = snippet.path.read_text()
        assert text.count(f"# {snippet.start}") == 1 and text.count(f"# {snippet.end}") == 1, (
            f"{snippet.path.name}: {snippet.start} must appear once, and its END once"
        )
        assert text.index(snippet.start) < text.index(snippet.end)


def test_no_page_includes_code_the_repository_does_not_show():
    """The quick start and the how-tos hold their code (GitHub shows no included file): no
    ``literalinclude``, no ``exampleinclude``."""
    for page in howto_snippets.pages():
        text = page.read_text()
        assert not re.search(r"^\.\. (literalinclude|exampleinclude)::", text, re.MULTILINE), page.name


def test_every_marker_in_the_example_dags_is_closed_and_used_on_the_site():
    used = {snippet.start for snippet in snippets()}
    for dag_file in sorted(EXAMPLE_DAGS.glob("*.py")):
        text = dag_file.read_text()
        starts = re.findall(r"# \[START (howto_\w+)\]", text)
        ends = re.findall(r"# \[END (howto_\w+)\]", text)
        assert sorted(starts) == sorted(ends), f"{dag_file.name}: unpaired markers"
        for name in starts:
            assert f"[START {name}]" in used, f"{dag_file.name}: marker {name} is not shown on any page"


def test_every_page_is_in_a_toctree():
    pages = {
        page.relative_to(DOCS).with_suffix("").as_posix()
        for page in [*DOCS.rglob("*.rst"), *DOCS.rglob("*.md")]
        if not {"_build", "_ext", "_static"} & set(page.parts)
    }
    listed: set[str] = set()
    for page in [*DOCS.rglob("*.rst")]:
        for block in re.findall(r"\.\. toctree::\n((?:[ \t]+.*\n|\n)*)", page.read_text()):
            base = page.parent.relative_to(DOCS)
            for entry in re.findall(r"^[ \t]+([\w./-]+)[ \t]*$", block, re.MULTILINE):
                listed.add((base / entry).as_posix().removeprefix("./"))
    assert pages - listed == {"index"}, f"pages in no toctree: {sorted(pages - listed - {'index'})}"


# -- the XCom tables list what the tasks really push --------------------------------------------------


class RecordingTI:
    def __init__(self, pulls: dict | None = None) -> None:
        self.xcom: dict[str, object] = {}
        self.pulls = pulls or {}

    def xcom_push(self, key: str, value: object) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids=None, key="return_value", **_):
        return self.pulls.get((task_ids, key))


def documented_xcom(path: str) -> set[str]:
    return set(crew_reference.reference(path).xcom)


@pytest.mark.integration
def test_the_kickoff_and_resume_push_only_documented_xcom_keys(crew_service, crew_webhooks, monkeypatch):
    import json

    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.operators.resume import CrewResumeOperator

    monkeypatch.setenv("AIRFLOW_CONN_CREW_DEFAULT", crew_service.connection_json(crew="review"))
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUMAN_HOOK",
        json.dumps(
            {"conn_type": "generic", "host": crew_webhooks.url_for("human"), "password": "hook-token-1"}
        ),
    )
    kickoff = CrewKickoffOperator(
        task_id="kickoff",
        inputs={"topic": "t", "audience": "a"},
        human_input_webhook_conn_id="human_hook",
        task_webhook_url=crew_webhooks.url_for("task"),
        deferrable=False,
        poll_interval=0.1,
    )
    kickoff_ti = RecordingTI()
    kickoff_id = kickoff.execute({"ti": kickoff_ti})
    paused = kickoff_ti.xcom["human_input"]

    resume = CrewResumeOperator(
        task_id="approve",
        kickoff_id=kickoff_id,
        kickoff_task_id="kickoff",
        crew_task_id=paused["task_id"],
        is_approve=True,
        deferrable=False,
        poll_interval=0.1,
    )
    resume_ti = RecordingTI(pulls={("kickoff", "webhooks"): kickoff_ti.xcom["webhooks"]})
    assert resume.execute({"ti": resume_ti}) == kickoff_id

    kickoff_keys = {*kickoff_ti.xcom, "return_value"}
    resume_keys = {*resume_ti.xcom, "return_value"}
    assert kickoff_keys <= documented_xcom("airflow_provider_crew.operators.crew.CrewKickoffOperator")
    assert resume_keys <= documented_xcom("airflow_provider_crew.operators.resume.CrewResumeOperator")
    assert {"kickoff_id", "webhooks", "human_input", "status"} <= kickoff_keys
    assert "result" not in kickoff_keys  # returned at the pause, as the table says
    assert {"result", "status", "resume", "kickoff_id"} <= resume_keys


def test_the_site_builds_printing_only_its_last_line(tmp_path):
    """``bash scripts/docs.sh`` (as CI runs it, set up already) says only where the site is: no INFO
    lines from Airflow, which the theme's pygments styles turned on ("Reading the config from ...",
    "Configured default timezone UTC")."""
    import shutil
    import subprocess

    pytest.importorskip("sphinx", reason="the docs extra builds the site")
    if shutil.which("sphinx-build", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("sphinx-build is not in this environment")
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "docs.sh")],
        # Into a folder of its own: CI's docs job builds docs/_build/html at the same time.
        env={
            **os.environ,
            "CREW_SETUP_DONE": "1",
            "VENV": str(Path(sys.executable).parents[1]),
            "DOCS_OUT": str(tmp_path / "html"),
            "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (done.stdout + done.stderr).splitlines() == [
        f"Documentation built: {tmp_path / 'html'}/index.html"
    ]
