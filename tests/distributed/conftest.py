"""The distributed test is opt-in: it installs and starts PostgreSQL and Redis and runs 7 Airflow
processes for several minutes, so a plain ``pytest`` (and ``scripts/test.sh``) skips it."""

from __future__ import annotations

import pytest

OPT_IN = "opt-in: select it with `-m distributed` (it starts PostgreSQL, Redis and a Celery deployment)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "distributed" in (config.getoption("markexpr") or ""):
        return
    for item in items:
        if item.get_closest_marker("distributed"):
            item.add_marker(pytest.mark.skip(reason=OPT_IN))
