"""A DAG file that imports the crew tasks pays no HTTP stack at parse time.

The dag-processor imports every DAG file again and again; the HTTP libraries (requests, urllib3,
charset-normalizer, aiohttp) are needed only when a task runs or a trigger polls.
"""

from __future__ import annotations

import json
import subprocess
import sys

HTTP_STACK = ("requests", "urllib3", "charset_normalizer", "aiohttp")


def test_importing_the_operators_and_the_sensor_loads_no_http_library_beyond_airflow_sdk():
    code = (
        "import json, sys, airflow.sdk; before = set(sys.modules); "
        "import airflow_provider_crew.operators.crew, airflow_provider_crew.operators.resume, "
        "airflow_provider_crew.review, airflow_provider_crew.sensors.crew; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in set(sys.modules) - before}} & set({HTTP_STACK!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
