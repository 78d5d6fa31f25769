"""Write the code of the quick start and the how-to pages into them, from the example DAGs, or check it.

    python scripts/howto_snippets.py           # rewrite the snippets of docs/quickstart.rst, docs/howto/*.rst
    python scripts/howto_snippets.py --check   # exit 1 when a page's snippet differs from its example file

Every snippet on those pages is code of an example DAG (``example_dags/*.py``, which the test suite
runs with ``airflow dags test``) between its ``# [START howto_...]`` and ``# [END howto_...]`` lines.
The page holds a copy of it as a literal ``.. code-block:: python``, so that the code shows where the
``.rst`` source is read (GitHub) as well as on the documentation site. A page marks each copy with
two comments, which readers do not see; write the first, and an empty second, to add one:

    .. BEGIN GENERATED SNIPPET: example_dags/example_crew_mapped.py howto_operator_crew_kickoff_mapped

    .. END GENERATED SNIPPET

This script writes the code between them: the lines between the markers, without the marker lines
of snippets nested in them, dedented. ``tests/test_docs_snippets.py`` fails when a copy is stale.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
EXAMPLE_DAGS = REPO / "example_dags"

BEGIN = ".. BEGIN GENERATED SNIPPET: "
END = ".. END GENERATED SNIPPET"
# A generated block: its BEGIN comment (the example file and the marker name), whatever the script
# wrote last, and its END comment.
BLOCK = re.compile(
    r"^\.\. BEGIN GENERATED SNIPPET: (?P<path>example_dags/[\w.-]+\.py) (?P<name>howto_\w+)[ \t]*\n"
    r"(?P<body>.*?)"
    r"^\.\. END GENERATED SNIPPET[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
# The marker lines of an example DAG (nested snippets' ones are dropped from the copy).
MARKER = re.compile(r"^\s*# \[(START|END) (howto_\w+)\]\s*$")
INDENT = "    "


@dataclass(frozen=True)
class Snippet:
    """One generated block of a page: which example file and marker it copies."""

    page: Path
    path: Path  # the example DAG, absolute
    name: str  # the marker, e.g. howto_operator_crew_kickoff_mapped

    @property
    def start(self) -> str:
        return f"[START {self.name}]"

    @property
    def end(self) -> str:
        return f"[END {self.name}]"


def pages() -> list[Path]:
    """The pages whose code comes from the example DAGs."""
    return [DOCS / "quickstart.rst", *sorted((DOCS / "howto").glob("*.rst"))]


def snippets(page: Path) -> list[Snippet]:
    """Every generated block of ``page``, in order."""
    return [Snippet(page, REPO / m["path"], m["name"]) for m in BLOCK.finditer(page.read_text())]


def code(path: Path, name: str) -> str:
    """The lines of ``path`` between ``# [START name]`` and ``# [END name]``, without nested markers,
    dedented; ``SystemExit`` naming the file when the markers are missing, repeated or out of order."""
    lines = path.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if MARKER.match(line) and line.strip() == f"# [START {name}]"]
    ends = [i for i, line in enumerate(lines) if MARKER.match(line) and line.strip() == f"# [END {name}]"]
    if len(starts) != 1 or len(ends) != 1 or starts[0] > ends[0]:
        raise SystemExit(
            f"{path.relative_to(REPO)}: needs one '# [START {name}]' line and, after it, one '# [END {name}]'"
        )
    body = [line for line in lines[starts[0] + 1 : ends[0]] if not MARKER.match(line)]
    return textwrap.dedent("\n".join(body)).strip("\n")


def block(path: Path, name: str) -> str:
    """The text a page holds between the BEGIN and END comments of ``name``: a literal code block."""
    indented = "\n".join(INDENT + line if line.strip() else "" for line in code(path, name).splitlines())
    return f"\n.. code-block:: python\n\n{indented}\n\n"


def render(text: str) -> str:
    """``text`` (a page) with every generated block rewritten from its example DAG."""

    def fresh(match: re.Match[str]) -> str:
        path = REPO / match["path"]
        if not path.is_file():
            raise SystemExit(f"{match['path']}: no such example DAG (named in a {BEGIN.strip()} comment)")
        return f"{BEGIN}{match['path']} {match['name']}\n{block(path, match['name'])}{END}"

    return BLOCK.sub(fresh, text)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check", action="store_true", help="only check; exit 1 when a page's snippet is stale"
    )
    args = parser.parse_args()
    stale = []
    for page in pages():
        current = page.read_text()
        updated = render(current)
        if updated == current:
            continue
        stale.append(page.relative_to(REPO).as_posix())
        if not args.check:
            page.write_text(updated)
            print(f"{page.relative_to(REPO)}: snippets rewritten from the example DAGs.")
    if args.check and stale:
        print(f"{', '.join(stale)} out of date: run python scripts/howto_snippets.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
