#!/usr/bin/env bash
# Set up the environment if needed and run the whole test suite (unit, local-service conformance,
# real DAG runs against the local crew service, real Airflow components, a real browser). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
# CI sets up its environments once, before its jobs, and says so with CREW_SETUP_DONE=1.
[ "${CREW_SETUP_DONE:-}" = 1 ] || bash scripts/setup.sh >/dev/null
bash scripts/browser-setup.sh
exec "$VENV/bin/python" -m pytest "$@"
