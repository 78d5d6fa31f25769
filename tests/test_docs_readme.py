"""The README holds what a newcomer needs and nothing that can go stale: its first commands as CI runs
them, links that resolve, and first DAGs that run as written (``airflow dags test`` against the local
crew service, as the README says to)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from airflow_provider_crew.testing.dag_runs import airflow_env, dags_test, migrate_db

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()

FIRST_COMMANDS = """```bash
bash scripts/demo.sh    # set up .venv, run a real Airflow and review a crew's draft in it, end to end, against the bundled local crew service
bash scripts/test.sh    # set up .venv (if needed) and run the whole test suite
```"""
QUICK_TESTS = 'bash scripts/test.sh -m "not integration and not e2e and not browser" -q'


def test_the_readme_opens_with_the_demo_and_the_tests_then_the_quick_tests():
    assert README.split("\n", 2)[2].startswith(FIRST_COMMANDS)
    assert QUICK_TESTS in README.split("## ", 1)[0], "the quick test command belongs under the first two"


def test_the_readme_is_short_and_says_where_the_rest_is():
    assert len(README.splitlines()) <= 200
    for page in ("docs/quickstart.rst", "docs/api.md", "docs/troubleshooting.md", "docs/connection.md"):
        assert f"]({page})" in README, page
    assert "docs/howto/" in README


@pytest.mark.parametrize("document", ["README.md", "docs/troubleshooting.md"])
def test_every_relative_link_resolves(document):
    path = REPO / document
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert broken == []


def first_dags() -> dict[str, str]:
    """The README's DAG files, by DAG id: each ```python block that defines a @dag."""
    dags = {}
    for block in re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL):
        found = re.search(r"^@dag\(.*?\)\ndef (\w+)\(", block, re.MULTILINE | re.DOTALL)
        if found:
            dags[found[1]] = block
    return dags


def test_the_readme_shows_a_kickoff_and_a_task_crew_dag_and_the_command_that_runs_them():
    dags = first_dags()
    assert len(dags) == 2, list(dags)
    assert any("CrewKickoffOperator(" in code for code in dags.values())
    assert any("@task.crew" in code for code in dags.values())
    for dag_id in dags:
        assert f"airflow dags test {dag_id}" in README, dag_id
    assert "AIRFLOW_CONN_CREW_DEFAULT=" in README


@pytest.mark.integration
def test_the_readmes_first_dags_run_as_written(crew_service, tmp_path):
    dags_folder = tmp_path / "dags"
    dags_folder.mkdir()
    for dag_id, code in first_dags().items():
        (dags_folder / f"{dag_id}.py").write_text(code)
    env = airflow_env(tmp_path / "airflow-home", dags_folder)
    env["AIRFLOW_CONN_CREW_DEFAULT"] = json.dumps(crew_service.connection_dict())
    migrate_db(env)
    for dag_id in first_dags():
        run = dags_test(dag_id, env)
        assert run.state == "success", run.stdout[-3000:]
        assert run.xcom("research", "result"), dag_id
