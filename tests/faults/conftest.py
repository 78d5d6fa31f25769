"""The fault suite is opt-in: it runs a real Airflow (LocalExecutor) for several minutes and kills
its components, so a plain ``pytest`` (and ``scripts/test.sh``) skips it. Select it with ``-m faults``.

Each fault test adds rows to one table; the table is printed at the end of the session and written
to ``test-artifacts/faults/table.md``.
"""

from __future__ import annotations

import pytest

OPT_IN = (
    "opt-in: select it with `-m faults` (it runs a real Airflow for several minutes and kills its components)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "faults" in (config.getoption("markexpr") or ""):
        return
    for item in items:
        if item.get_closest_marker("faults"):
            item.add_marker(pytest.mark.skip(reason=OPT_IN))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from .table import TABLE

    if TABLE.rows:
        terminalreporter.write_sep("=", "fault suite")
        terminalreporter.write_line(TABLE.render())
