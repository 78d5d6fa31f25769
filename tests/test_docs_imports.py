"""Every ``from airflow_provider_crew... import ...`` the README and the documentation show imports for
real, and no page tells a reader to import from a module that does not hold the names (the provider's
top-level package holds none a DAG uses: ``from airflow_provider_crew import CrewKickoffOperator`` is
an ImportError)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A whole import statement, a parenthesised one over several lines included.
IMPORT = re.compile(
    r"^[ \t]*(from[ \t]+airflow_provider_crew[\w.]*[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*))", re.MULTILINE
)
# Prose that says where names import from: "import from ``airflow_provider_crew.x``", "imported from `...`".
PROSE = re.compile(r"\bimport(?:s|ed)?\s+(?:them\s+)?from\s+`+(airflow_provider_crew[\w.]*)`+")


def documents() -> list[Path]:
    docs = REPO / "docs"
    pages = [*docs.glob("*.md"), *docs.rglob("*.rst"), *docs.glob("reference/*.md")]
    return [REPO / "README.md", *sorted(p for p in pages if "_build" not in p.parts)]


def statements() -> list[tuple[str, str]]:
    found = []
    for document in documents():
        for statement in IMPORT.findall(document.read_text()):
            statement = re.sub(r"#[^\n]*", "", statement)  # a comment after a name
            found.append((document.relative_to(REPO).as_posix(), " ".join(statement.split())))
    return sorted(set(found))


STATEMENTS = statements()


def test_the_docs_show_imports():
    assert len(STATEMENTS) >= 10, STATEMENTS
    shown = {document for document, _ in STATEMENTS}
    assert {"README.md", "docs/quickstart.rst", "docs/api.md"} <= shown, shown


@pytest.mark.parametrize(("document", "statement"), STATEMENTS, ids=[f"{d}: {s}" for d, s in STATEMENTS])
def test_every_import_line_of_the_docs_imports(document, statement):
    try:
        exec(statement, {})
    except ModuleNotFoundError as error:
        # A module of an optional extra (common.ai for the managed agent) where it is not installed.
        if error.name and not error.name.startswith("airflow_provider_crew"):
            pytest.skip(f"{statement}: needs {error.name}, an optional extra not installed here")
        raise AssertionError(f"{document}: {statement} fails: {error}") from error
    except ImportError as error:
        raise AssertionError(f"{document}: {statement} fails: {error}") from error
    except Exception as error:
        # The managed agent's module says which extra it needs (AirflowOptionalProviderFeatureException).
        if "OptionalProviderFeature" in type(error).__name__:
            pytest.skip(f"{statement}: {error}")
        raise


def test_prose_names_modules_that_hold_the_names():
    wrong = []
    for document in documents():
        for module in PROSE.findall(document.read_text()):
            if module == "airflow_provider_crew":
                wrong.append(
                    f"{document.name}: names import from the bare package, which exports no DAG name"
                )
                continue
            try:
                importlib.import_module(module)
            except ImportError as error:
                wrong.append(f"{document.name}: {module}: {error}")
    assert wrong == []


def test_the_bare_package_holds_no_operator():
    """Why the check above exists: the wrong sentence of an earlier quick start."""
    with pytest.raises(ImportError):
        exec("from airflow_provider_crew import CrewKickoffOperator", {})
