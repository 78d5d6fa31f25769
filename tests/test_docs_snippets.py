"""The code on the quick start and the how-to pages is the example DAGs' code: each page holds a copy
(``.. code-block:: python``, so that GitHub shows it too) that ``scripts/howto_snippets.py`` writes from
the example DAG between its ``# [START howto_...]`` and ``# [END howto_...]`` lines. These tests fail
when a copy and its example file differ; ``python scripts/howto_snippets.py`` rewrites them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import howto_snippets  # noqa: E402

PAGES = howto_snippets.pages()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(REPO).as_posix())
def test_every_snippet_of_the_page_is_its_example_dags_code(page):
    text = page.read_text()
    assert howto_snippets.render(text) == text, (
        f"{page.relative_to(REPO)}: a snippet differs from its example DAG; run python scripts/howto_snippets.py"
    )


def test_every_page_that_shows_code_has_generated_snippets():
    counts = {page.name: len(howto_snippets.snippets(page)) for page in PAGES}
    assert all(counts.values()), f"pages without a generated snippet: {counts}"
    assert sum(counts.values()) >= 10, counts


def test_a_snippet_is_the_code_between_its_markers_without_nested_markers_dedented(tmp_path, monkeypatch):
    dag = tmp_path / "example_dags" / "example_x.py"
    dag.parent.mkdir()
    dag.write_text(
        "with DAG('x'):\n"
        "    # [START howto_outer]\n"
        "    a = 1\n"
        "\n"
        "    # [START howto_inner]\n"
        "    b = 2\n"
        "    # [END howto_inner]\n"
        "    # [END howto_outer]\n"
    )
    monkeypatch.setattr(howto_snippets, "REPO", tmp_path)
    page = (
        "Text.\n\n"
        ".. BEGIN GENERATED SNIPPET: example_dags/example_x.py howto_outer\n"
        "stale text\n"
        ".. END GENERATED SNIPPET\n\nMore text.\n"
    )
    assert howto_snippets.render(page) == (
        "Text.\n\n"
        ".. BEGIN GENERATED SNIPPET: example_dags/example_x.py howto_outer\n\n"
        ".. code-block:: python\n\n"
        "    a = 1\n"
        "\n"
        "    b = 2\n\n"
        ".. END GENERATED SNIPPET\n\nMore text.\n"
    )
    # Rendering is idempotent, and a marker the file lacks is named.
    assert howto_snippets.render(howto_snippets.render(page)) == howto_snippets.render(page)
    with pytest.raises(SystemExit, match="howto_missing"):
        howto_snippets.render(page.replace("howto_outer", "howto_missing"))


def test_the_check_mode_passes_on_the_repository():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "howto_snippets.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
