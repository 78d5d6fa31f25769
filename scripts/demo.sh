#!/usr/bin/env bash
# Set up the environment if needed, then run the human-review example DAG end to end against the
# bundled local crew service (SQLite as Airflow's database) and print the final output.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
bash scripts/setup.sh
exec "$VENV/bin/python" scripts/demo.py "$@"
