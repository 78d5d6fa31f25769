#!/usr/bin/env bash
# Create (or update) a virtual environment with the provider, its test tools and Airflow.
#   VENV=.venv             where to put it
#   AIRFLOW_VERSION=       an Airflow 3.x version to pin (default: the newest 3.x)
#   EXTRAS=dev,openlineage,ai  the provider's extras to install (the tests use all three)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv

airflow_spec="apache-airflow>=3.0,<4"
constraints=()
if [ -n "${AIRFLOW_VERSION:-}" ]; then
  airflow_spec="apache-airflow==${AIRFLOW_VERSION}"
  case "$AIRFLOW_VERSION" in
    3.0.*) constraints=(--constraint .ci/constraints-airflow-3.0.txt) ;;
    3.2.*) constraints=(--constraint .ci/constraints-airflow-3.2.txt) ;;
  esac
fi
# Byte code compiled at install (as pip does; uv does not by default): with PYTHONDONTWRITEBYTECODE
# set, every Airflow process the tests start would otherwise compile Airflow again (1.5 s each here).
"$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python" "${constraints[@]}" \
  "$airflow_spec" -e ".[${EXTRAS:-dev,openlineage,ai}]"
"$VENV/bin/python" -c "import airflow, airflow_provider_crew; print(f'Airflow {airflow.__version__}, airflow-provider-crew {airflow_provider_crew.__version__} in $VENV')"
