"""The package's shape: imports go one way, modules and functions stay readable, documented paths work.

The layer contract itself is in pyproject.toml (``[tool.importlinter]``) and CI runs ``lint-imports``;
these tests hold the rest of docs/architecture.md.
"""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "airflow_provider_crew"
MAX_MODULE_LINES = 450
# The local crew service (testing/) is the tests' machinery, not the provider: it may run longer.
MAX_TESTING_MODULE_LINES = 470
MAX_FUNCTION_BODY_LINES = 60


def import_graph():
    grimp = pytest.importorskip("grimp", reason="import-linter (the dev extra) brings grimp")
    return grimp.build_graph("airflow_provider_crew")


def test_no_module_imports_itself_back_through_others_function_local_imports_included():
    graph = import_graph()
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                cycles.append(" -> ".join((module, *back)))
    assert cycles == []


def test_compat_imports_nothing_of_the_package():
    graph = import_graph()
    assert graph.find_modules_directly_imported_by("airflow_provider_crew._compat") == set()


def test_the_layer_contract_is_kept():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint_imports is None:
        pytest.skip("import-linter (the dev extra) is not installed")
    done = subprocess.run([lint_imports], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def test_modules_stay_short_enough_to_read():
    long = {
        str(p.relative_to(REPO)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines()))
        > (MAX_TESTING_MODULE_LINES if "testing" in p.parts else MAX_MODULE_LINES)
    }
    assert long == {}


def test_version_flags_are_read_only_in_compat():
    """A module asks ``_compat`` for a capability by its name, never for an Airflow version."""
    flagged = [
        str(path.relative_to(REPO))
        for path in _modules()
        if path.name != "_compat.py" and "/testing/" not in str(path) and "AIRFLOW_V_" in path.read_text()
    ]
    assert flagged == []


def test_function_bodies_stay_short_enough_to_read():
    """Counted from the first statement after the docstring to the end of the function."""
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                first = (
                    body[1]
                    if len(body) > 1
                    and isinstance(body[0], ast.Expr)
                    and isinstance(getattr(body[0], "value", None), ast.Constant)
                    else body[0]
                )
                lines = (node.end_lineno or first.lineno) - first.lineno + 1
                if lines > MAX_FUNCTION_BODY_LINES:
                    long[f"{path.relative_to(REPO)}:{node.name}"] = lines
    assert long == {}


# -- import paths the README and the docs show -----------------------------------------------------


_DOC_IMPORT = re.compile(r"^\s*(from (airflow_provider_crew[\w.]*) import ([\w, ()]+))", re.MULTILINE)
_DOC_PATH = re.compile(r"\b(airflow_provider_crew(?:\.[A-Za-z_]\w*)+)")


def _documented() -> list[Path]:
    return [
        REPO / "README.md",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "docs").rglob("*.rst")),
    ]


# Modules that need an optional extra; without it they are checked by reading their source.
OPTIONAL = {"airflow_provider_crew.hooks.managed_agent": "airflow.providers.common.ai"}


def _extra_missing(module: str) -> bool:
    needed = OPTIONAL.get(module)
    return needed is not None and not _importable(needed)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _defines(module: str, names: list[str]) -> bool:
    """Whether ``module``'s source defines (or imports) each of ``names`` at its top level."""
    tree = ast.parse((REPO / (module.replace(".", "/") + ".py")).read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            top.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            top.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            top.update((a.asname or a.name).split(".")[0] for a in node.names)
    return set(names) <= top


def test_every_import_the_docs_show_works():
    found = {(m[1], m[2]) for doc in _documented() for m in _DOC_IMPORT.finditer(doc.read_text())}
    assert found, "the docs show no import: the pattern is wrong"
    for statement, module in sorted(found):
        if _extra_missing(module):
            names = re.findall(r"\w+", statement.partition(" import ")[2])
            assert _defines(module, names), statement
            continue
        exec(statement, {})


def test_every_dotted_path_the_docs_name_resolves():
    """``airflow_provider_crew.x.y.Name`` in prose, tables and directives: a module or a name in one."""
    unresolved = []
    for doc in _documented():
        for path in sorted(set(_DOC_PATH.findall(doc.read_text()))):
            if not _resolves(path):
                unresolved.append(f"{doc.relative_to(REPO)}: {path}")
    assert unresolved == []


def _resolves(path: str) -> bool:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        if _extra_missing(".".join(parts[:cut])):
            return len(parts) == cut or _defines(".".join(parts[:cut]), parts[cut : cut + 1])
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False
