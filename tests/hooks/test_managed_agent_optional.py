"""The ``ai`` extra is optional: without it nothing of ``common.ai`` is imported, and its one module
says what to install. Runs with and without the extra (CI runs the older Airflow versions without it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest


def common_ai_installed() -> bool:
    try:
        return importlib.util.find_spec("airflow.providers.common.ai") is not None
    except ModuleNotFoundError:
        return False


def test_what_dag_code_imports_loads_nothing_of_common_ai():
    """Beyond what ``import airflow.sdk`` loads itself (Airflow reads every provider's info)."""
    code = (
        "import json, sys\n"
        "import airflow.sdk\n"
        "before = set(sys.modules)\n"
        "import airflow_provider_crew.operators.crew, airflow_provider_crew.sensors.crew\n"
        "import airflow_provider_crew.hooks.crew, airflow_provider_crew.review\n"
        "added = set(sys.modules) - before\n"
        "print(json.dumps(sorted(m for m in added if m.startswith(('airflow.providers.common.ai', 'pydantic_ai')))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


@pytest.mark.skipif(common_ai_installed(), reason="the ai extra is installed here: tests/ai covers the hook")
def test_without_the_extra_the_managed_agent_module_names_what_to_install():
    from airflow_provider_crew._compat import AirflowOptionalProviderFeatureException

    with pytest.raises(
        AirflowOptionalProviderFeatureException, match=r"pip install 'airflow-provider-crew\[ai\]'"
    ):
        import airflow_provider_crew.hooks.managed_agent  # noqa: F401
