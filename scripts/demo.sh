#!/usr/bin/env bash
# Set up the environment if needed, then run a real Airflow (SQLite) and review a crew's draft in it
# against the bundled local crew service (scripts/demo.py; --ui, --scripted, --blocking).
#   VENV=.venv        where the environment is (the test command's too)
#   EXTRAS=testing    the provider's extras the demo installs: Airflow, the provider and the local crew
#                     service, not the development tools (scripts/test.sh adds those)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
EXTRAS="${EXTRAS:-testing}"
# Set up once per pyproject.toml and extras: a stamp in the environment says it is current.
stamp="$VENV/.crew-demo-setup-$(sha256sum pyproject.toml | cut -c1-16)-${EXTRAS//,/-}"
if [ -f "$stamp" ] && "$VENV/bin/python" -c "import airflow, airflow_provider_crew" 2>/dev/null; then
  echo "Environment $VENV is set up (scripts/setup.sh runs again when pyproject.toml changes)."
else
  echo "Setting up $VENV: Apache Airflow, the provider and the local crew service (extras: $EXTRAS)."
  echo "The first time this downloads Airflow and its dependencies, a few minutes..."
  started=$SECONDS
  EXTRAS="$EXTRAS" VENV="$VENV" bash scripts/setup.sh
  touch "$stamp"
  echo "Set up in $((SECONDS - started)) s."
fi
exec "$VENV/bin/python" scripts/demo.py "$@"
