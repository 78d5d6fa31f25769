#!/usr/bin/env bash
# Set up the environment if needed and run the whole test suite (unit, local-service conformance,
# real DAG runs against the local crew service, real Airflow components, a real browser). Extra
# arguments go to pytest. Debian's Chromium is installed (as root) only when browser tests are
# selected (tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
# CI sets up its environments once, before its jobs, and says so with CREW_SETUP_DONE=1.
[ "${CREW_SETUP_DONE:-}" = 1 ] || bash scripts/setup.sh >/dev/null
exec "$VENV/bin/python" -m pytest "$@"
