"""Write the README's parameter reference and docs/api.md, generated from the code, or check them.

    python scripts/reference_tables.py           # rewrite README.md's generated section and docs/api.md
    python scripts/reference_tables.py --check   # exit 1 if either is out of date

The tables come from docs/_ext/crew_reference.py, which also renders them on the documentation
site: signatures, ``template_fields`` and the docstrings' ``:param`` and ``:xcom`` lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
API = REPO / "docs" / "api.md"
BEGIN = "<!-- BEGIN GENERATED: parameter reference (python scripts/reference_tables.py) -->"
END = "<!-- END GENERATED: parameter reference -->"

sys.path.insert(0, str(REPO / "docs" / "_ext"))
from crew_reference import api_page, readme_section, render_metrics_page  # noqa: E402

METRICS_PAGE = REPO / "docs" / "metrics.md"


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
    api_current = API.read_text() if API.exists() else ""
    api_fresh = api_page()
    metrics_current = METRICS_PAGE.read_text()
    metrics_fresh = render_metrics_page(metrics_current)
    pages = (
        ("README.md", fresh, current),
        ("docs/api.md", api_fresh, api_current),
        ("docs/metrics.md", metrics_fresh, metrics_current),
    )
    if args.check:
        stale = [name for name, a, b in pages if a != b]
        if stale:
            print(f"{', '.join(stale)} out of date: run python scripts/reference_tables.py")
            return 1
        return 0
    if fresh != current:
        README.write_text(fresh)
        print("README.md's parameter reference rewritten.")
    if api_fresh != api_current:
        API.write_text(api_fresh)
        print("docs/api.md rewritten.")
    if metrics_fresh != metrics_current:
        METRICS_PAGE.write_text(metrics_fresh)
        print("docs/metrics.md's table rewritten.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
