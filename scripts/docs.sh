#!/usr/bin/env bash
# Build the documentation site into docs/_build/html with warnings as errors (as CI does), after
# setting up the environment (scripts/setup.sh) and adding the docs extra (Sphinx, MyST, Furo).
#   VENV=.venv               the environment to build in
#   DOCS_OUT=docs/_build/html  where the site goes (a test builds it elsewhere, beside CI's docs job)
# Open docs/_build/html/index.html in a browser afterwards. Extra arguments go to sphinx-build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
OUT="${DOCS_OUT:-docs/_build/html}"
# CI installs the docs extra with its setup, before its jobs, and says so with CREW_SETUP_DONE=1: an
# install here would reinstall the provider under the other jobs that run in the same environment.
if [ "${CREW_SETUP_DONE:-}" != 1 ]; then
  bash scripts/setup.sh >/dev/null
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -e ".[docs]"
fi
# A fresh build every time: an incremental one does not repeat the warnings of unchanged pages.
if [ -e "$OUT" ] && [ ! -f "$OUT/.buildinfo" ]; then  # only a site Sphinx built is deleted
  echo "DOCS_OUT=$OUT exists and is not a Sphinx build: not deleting it. Choose another folder." >&2
  exit 2
fi
rm -rf "$OUT"
# sphinx-build, with Python's root logger at WARNING: the theme's accessible-pygments styles call
# logging.basicConfig(level=INFO) on import, so importing Airflow printed its INFO lines ("Reading the
# config from ...", "Configured default timezone UTC"). Configured first, that call does nothing;
# Sphinx's own warnings have their own logger and still fail the build.
"$VENV/bin/python" -c '
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
from sphinx.cmd.build import main
sys.exit(main(sys.argv[1:]))
' -W --keep-going -q -b html docs "$OUT" "$@"
echo "Documentation built: $OUT/index.html"
