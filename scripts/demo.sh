#!/usr/bin/env bash
# Set up the environment if needed, then run a real Airflow (SQLite) and review a crew's draft in it
# against the bundled local crew service (scripts/demo.py; --ui, --scripted, --blocking).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
bash scripts/setup.sh
exec "$VENV/bin/python" scripts/demo.py "$@"
