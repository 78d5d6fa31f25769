"""Write the README's parameter reference, generated from the code, or check that it is current.

    python scripts/reference_tables.py           # rewrite the generated section of README.md
    python scripts/reference_tables.py --check   # exit 1 if README.md is out of date

The tables come from docs/_ext/crew_reference.py, which also renders them on the documentation
site: signatures, ``template_fields`` and the docstrings' ``:param`` and ``:xcom`` lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BEGIN = "<!-- BEGIN GENERATED: parameter reference (python scripts/reference_tables.py) -->"
END = "<!-- END GENERATED: parameter reference -->"

sys.path.insert(0, str(REPO / "docs" / "_ext"))
from crew_reference import readme_section  # noqa: E402


def render(readme: str) -> str:
    """``readme`` with the text between the markers replaced by freshly generated tables."""
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md lacks the markers {BEGIN!r} and {END!r}.")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{readme_section()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when README.md is stale")
    args = parser.parse_args()
    current = README.read_text()
    fresh = render(current)
    if args.check:
        if fresh != current:
            print("README.md's parameter reference is out of date: run python scripts/reference_tables.py")
            return 1
        return 0
    if fresh != current:
        README.write_text(fresh)
        print("README.md's parameter reference rewritten.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
