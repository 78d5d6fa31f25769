"""docs/troubleshooting.md quotes the provider's error messages as the code writes them: every quoted
message (a ```text block, ``<...>`` standing for what varies) must still be in the code, clause by
clause, so the page cannot drift from the messages a user meets."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "troubleshooting.md"
PACKAGE = REPO / "airflow_provider_crew"

HOLE = "\x00"  # what varies in a message: an f-string's {...}, a log line's %s
_PERCENT = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdrgfiex]")
# Where a quote is cut into clauses: a message is often built from several strings (a constant, a
# helper's sentence), each of which holds whole clauses.
_CLAUSE = re.compile(r"(?<=[.;:,!?])\s+")
_EDGES = " \t.,:;!?'\"()[]`"
MIN_CLAUSE = 8  # shorter pieces ("s", "and") say nothing about a message


def _text(node: ast.AST) -> str | None:
    """A string literal's text, with each interpolation as ``HOLE``; None for other nodes."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _PERCENT.sub(HOLE, node.value)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(_PERCENT.sub(HOLE, value.value))
            else:
                parts.append(HOLE)
        return "".join(parts)
    return None


def code_strings() -> str:
    """Every string literal of the package, one per line, whitespace collapsed."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            text = _text(node)
            if text:
                found.append(" ".join(text.split()))
    return "\n".join(found)


def quotes() -> list[str]:
    """Every message the page quotes: its ```text blocks."""
    return [
        " ".join(block.split()) for block in re.findall(r"^```text\n(.*?)^```", PAGE.read_text(), re.M | re.S)
    ]


def clauses(quote: str) -> list[str]:
    """The parts of ``quote`` the code must hold: cut at each ``<...>`` and at clause punctuation."""
    found = []
    for piece in re.split(r"<[^<>]*>", quote):
        for clause in _CLAUSE.split(piece):
            clause = clause.strip(_EDGES)
            if len(clause) >= MIN_CLAUSE:
                found.append(clause)
    return found


CODE = code_strings()


def test_the_page_quotes_the_messages_a_user_meets():
    text = " ".join(quotes())
    for words in (
        "rejected the token",
        "uses http://",
        "failed after",
        "inputs do not match what the crew expects",
        "the outcome is unknown",
        "Timed out waiting for crew execution",
        "on_human_input='fail'",
        "not supported by this service",
        "no webhook woke this wait",
        "reached its budget",
        "cannot be enforced",
        "needs prices",
        "it is not resumed",
    ):
        assert words in text, f"docs/troubleshooting.md quotes no message with {words!r}"


@pytest.mark.parametrize("quote", quotes(), ids=lambda quote: quote[:60])
def test_every_quoted_message_is_in_the_code(quote):
    missing = [clause for clause in clauses(quote) if clause not in CODE]
    assert missing == [], (
        f"docs/troubleshooting.md quotes words the code no longer writes: {missing}. Quote the message "
        "as the code writes it now, with <...> for what varies."
    )


def test_a_changed_message_is_caught():
    assert clauses("The task <id> fails: <x>; retry it, or not.") == ["The task", "retry it"]
    assert "the crew service rejected the token silently" not in CODE
    assert all(clause in CODE for clause in clauses("The crew service rejected the token (<401>)"))
    assert not all(clause in CODE for clause in clauses("The crew service refused the token (<401>)"))
