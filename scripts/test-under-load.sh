#!/usr/bin/env bash
# Run the whole test suite RUNS times in a row (default 3) while CPU-bound processes keep every core
# busy, stopping at the first red run. Shows that no test leans on a timing window a loaded machine
# can miss. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
VENV="${VENV:-.venv}"
bash scripts/setup.sh >/dev/null
burners=()
stop_burners() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_burners EXIT
for _ in $(seq "$(nproc)"); do
  "$VENV/bin/python" -c "while True: pass" &
  burners+=("$!")
done
echo "$(nproc) CPU burners running (pids ${burners[*]})"
for run in $(seq "$RUNS"); do
  started=$SECONDS
  echo "== run $run of $RUNS =="
  bash scripts/test.sh -q -p no:cacheprovider "$@"
  echo "== run $run of $RUNS passed in $(( SECONDS - started )) s =="
done
