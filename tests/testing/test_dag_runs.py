"""airflow_provider_crew.testing.dag_runs: where ``airflow dags test`` cannot run, ``dags_test`` says why
before it starts anything, and a pytest test skips with that reason (the real DAG runs run in
tests/integration and the other DAG-run tests)."""

from __future__ import annotations

import unittest
from pathlib import Path

import pytest

from airflow_provider_crew.testing import dag_runs


@pytest.mark.parametrize(
    ("version", "unavailable"), [("3.0.6", False), ("3.1.8", False), ("3.2.2", True), ("3.3.2", False)]
)
def test_airflow_3_2_cannot_run_dags_test_and_says_why(monkeypatch, version, unavailable):
    monkeypatch.setattr(dag_runs.importlib.metadata, "version", lambda name: version)

    why = dag_runs.dags_test_unavailable()

    assert (why is not None) is unavailable
    if unavailable:
        assert why is not None and f"Airflow {version} (apache/airflow#65945)" in why


def test_dags_test_raises_a_skip_with_the_reason_before_running_anything(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(dag_runs.importlib.metadata, "version", lambda name: "3.2.2")
    started = []
    monkeypatch.setattr(dag_runs.subprocess, "run", lambda *args, **kwargs: started.append(args))

    with pytest.raises(dag_runs.DagsTestUnavailable, match="apache/airflow#65945") as raised:
        dag_runs.dags_test("any", {"AIRFLOW_HOME": str(tmp_path)})

    assert isinstance(raised.value, unittest.SkipTest)  # what pytest reports as a skip
    assert started == []
