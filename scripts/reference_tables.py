"""Write docs/api.md and docs/metrics.md's table, generated from the code, or check them.

    python scripts/reference_tables.py           # rewrite docs/api.md and docs/metrics.md's table
    python scripts/reference_tables.py --check   # exit 1 if either is out of date

docs/api.md is the one parameter reference outside the site: every public name, its import line, its
parameters (type, default, templated or not, meaning) and its XCom keys. The README links to it and
repeats none of it. The tables come from docs/_ext/crew_reference.py, which also renders them on the
documentation site: signatures, ``template_fields`` and the docstrings' ``:param`` and ``:xcom`` lines.
The code snippets of the how-to pages have their own script, scripts/howto_snippets.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
API = REPO / "docs" / "api.md"
METRICS_PAGE = REPO / "docs" / "metrics.md"

sys.path.insert(0, str(REPO / "docs" / "_ext"))
from crew_reference import api_page, render_metrics_page  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when a page is stale")
    args = parser.parse_args()
    api_current = API.read_text() if API.exists() else ""
    metrics_current = METRICS_PAGE.read_text()
    pages = (
        (API, api_page(), api_current, "docs/api.md rewritten."),
        (
            METRICS_PAGE,
            render_metrics_page(metrics_current),
            metrics_current,
            "docs/metrics.md's table rewritten.",
        ),
    )
    if args.check:
        stale = [path.relative_to(REPO).as_posix() for path, fresh, current, _ in pages if fresh != current]
        if stale:
            print(f"{', '.join(stale)} out of date: run python scripts/reference_tables.py")
            return 1
        return 0
    for path, fresh, current, said in pages:
        if fresh != current:
            path.write_text(fresh)
            print(said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
