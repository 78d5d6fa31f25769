#!/usr/bin/env bash
# The wheel, as users install it. Builds the sdist and the wheel into a temporary folder, checks them
# (twine check; the sdist holds what a rebuild needs and nothing a local run leaves behind; both hold
# every file of the package), installs Airflow and the wheel (not editable, with the testing extra)
# in a clean virtual environment, and from a folder outside the repository: migrates a fresh SQLite
# database, finds the provider in `airflow providers list` and its plugin in `airflow
# plugins`, starts `crew-service` on a free loopback port and runs one example DAG against it with
# `airflow dags test`. Nothing is written to the repository but setuptools' egg-info (ignored by git).
#   AIRFLOW_VERSION=                     an Airflow 3.x version to pin (default: the newest 3.x), as scripts/setup.sh
#   PYTHON=python3                       the interpreter of the build tools and of the clean environment
#   WHEEL_CHECK_DAG=example_crew_mapped.py  the file of example_dags/ to run (its crews: the local service's)
#   KEEP=1                               keep the temporary folder (its path is printed)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PYTHON="${PYTHON:-python3}"
DAG_FILE="${WHEEL_CHECK_DAG:-example_crew_mapped.py}"
started=$SECONDS
stage() { echo "== wheel-check: $* (at $((SECONDS - started)) s) =="; }
fail() { echo "wheel-check FAILED: $*" >&2; exit 1; }
show_log() { echo "---- last 60 lines of $1 ----" >&2; tail -n 60 "$1" >&2 || true; echo "----" >&2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/wheel-check.XXXXXX")"
service_pid=""
cleanup() {
  local status=$?
  if [ -n "$service_pid" ] && kill -0 "$service_pid" 2>/dev/null; then
    kill "$service_pid" 2>/dev/null || true
    wait "$service_pid" 2>/dev/null || true
    echo "crew-service (pid $service_pid) stopped"
  fi
  if [ "$status" -ne 0 ] && [ -s "$work/crew-service.log" ]; then show_log "$work/crew-service.log"; fi
  if [ -n "${KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)"
[ -n "$version" ] || fail "no version = \"...\" line in pyproject.toml"
[ -f "example_dags/$DAG_FILE" ] || fail "no example_dags/$DAG_FILE"
echo "wheel-check of airflow-provider-crew $version in $work"

stage "build tools: uv, build, twine (own environment)"
"$PYTHON" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install --quiet --disable-pip-version-check uv
"$work/tools/bin/uv" pip install --quiet --python "$work/tools/bin/python" "build>=1.2" "twine>=6.1"
uv="$work/tools/bin/uv"

stage "python -m build: the sdist, then the wheel from the sdist"
"$work/tools/bin/python" -m build --installer uv --outdir "$work/dist" "$REPO" > "$work/build.log" 2>&1 \
  || { show_log "$work/build.log"; fail "python -m build"; }
# Warnings worth reading (deprecations in the configuration, say), not the routine ones.
grep -i "warning" "$work/build.log" | grep -v -e "no previously-included files" -e "byte-compiling is disabled" \
  | sort -u | sed 's/^/  build: /' || true
sdist="$work/dist/airflow_provider_crew-$version.tar.gz"
wheel="$work/dist/airflow_provider_crew-$version-py3-none-any.whl"
[ -f "$sdist" ] && [ -f "$wheel" ] || { ls -l "$work/dist"; fail "expected $(basename "$sdist") and $(basename "$wheel")"; }
ls -l "$work/dist" | sed 1d

stage "twine check --strict (the metadata and README as PyPI renders them)"
COLUMNS=200 "$work/tools/bin/twine" --no-color check --strict "$sdist" "$wheel"

stage "the sdist's and the wheel's files"
# Every file of the package in the repository must be in both: modules, py.typed and the data files
# (crew files, the OpenLineage facet schema); a new data file that pyproject's package-data misses
# fails here. Not caches, logs, hidden files or editors' backups.
find airflow_provider_crew -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' ! -name '*.log' \
  ! -name '.*' ! -name '*~' ! -name '*.swp' | sort > "$work/package-files.txt"
"$work/tools/bin/python" - "$sdist" "$wheel" "$work/package-files.txt" <<'EOF'
import re
import sys
import tarfile
import zipfile

sdist_path, wheel_path, package_list = sys.argv[1:]
with tarfile.open(sdist_path) as tar:
    sdist = sorted(m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() and "/" in m.name)
with zipfile.ZipFile(wheel_path) as whl:
    wheel = sorted(n for n in whl.namelist() if not n.endswith("/"))
package = [line.strip() for line in open(package_list) if line.strip()]

FORBIDDEN = re.compile(
    r"(^|/)(\.?venv[^/]*|\.ci-venv[^/]*|env|site-packages|pyvenv\.cfg|__pycache__|\.ci-logs|\.demo|"
    r"test-artifacts|\.mypy_cache|\.ruff_cache|\.pytest_cache|\.git|airflow-home|_build|dist|build)(/|$)"
    r"|\.log$|\.py[co]$|\.whl$|\.tar\.gz$|airflow\.db$"
)
problems = []
python_files = [f for f in sdist if f.startswith("airflow_provider_crew/") and f.endswith(".py")]
print(f"sdist: {len(sdist)} files ({len(python_files)} modules under airflow_provider_crew/), others:")
for name in sdist:
    if name not in python_files:
        print(f"  {name}")
for name in sdist:
    if FORBIDDEN.search(name):
        problems.append(f"sdist holds {name}, which a local run leaves behind")
for required in ["LICENSE", "README.md", "pyproject.toml", "PKG-INFO", "docs/index.rst", "docs/conf.py"]:
    if required not in sdist:
        problems.append(f"sdist lacks {required}")
for name in package:
    if name not in sdist:
        problems.append(f"sdist lacks {name}")
    if name not in wheel:
        problems.append(f"wheel lacks {name}")

dist_info = [n for n in wheel if ".dist-info/" in n]
top = sorted({n.split("/", 1)[0] for n in wheel if ".dist-info/" not in n})
print(f"wheel: {len(wheel)} files; top level: {', '.join(top)}; dist-info: "
      + ", ".join(n.split(".dist-info/", 1)[1] for n in dist_info))
if top != ["airflow_provider_crew"]:
    problems.append(f"wheel installs more than the package at the top level: {top}")
if not any(n.endswith(".dist-info/licenses/LICENSE") for n in dist_info):
    problems.append("wheel lacks its LICENSE (dist-info/licenses/LICENSE)")
for name in wheel:
    if FORBIDDEN.search(name):
        problems.append(f"wheel holds {name}")
print(f"package files checked in both: {len(package)} "
      f"({', '.join(n for n in package if not n.endswith('.py'))} among them)")
if problems:
    print("\n".join(f"PROBLEM: {p}" for p in problems), file=sys.stderr)
    sys.exit(1)
EOF

stage "a clean environment: Airflow ${AIRFLOW_VERSION:-(newest 3.x)} and the wheel with the testing extra"
# The same pins and constraints as scripts/setup.sh.
airflow_spec="apache-airflow>=3.0,<4"
constraints=()
if [ -n "${AIRFLOW_VERSION:-}" ]; then
  airflow_spec="apache-airflow==${AIRFLOW_VERSION}"
  case "$AIRFLOW_VERSION" in
    3.0.*) constraints=(--constraint "$REPO/.ci/constraints-airflow-3.0.txt") ;;
    3.2.*) constraints=(--constraint "$REPO/.ci/constraints-airflow-3.2.txt") ;;
  esac
fi
venv="$work/venv"
"$PYTHON" -m venv "$venv"
"$uv" pip install --quiet --compile-bytecode --python "$venv/bin/python" "${constraints[@]}" \
  "$airflow_spec" "$wheel[testing]"

# From here on as a user: the environment's commands first on PATH, a working directory outside the
# repository, nothing of the caller's Airflow settings or Python path.
mkdir -p "$work/run" "$work/dags" "$work/airflow-home"
cd "$work/run"
for name in $(compgen -e); do
  case "$name" in AIRFLOW*|CREW_EXAMPLE*|PYTHONPATH|PYTHONHOME|PYTHONSTARTUP|PYTHONUSERBASE) unset "$name" ;; esac
done
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" PYTHONNOUSERSITE=1
export AIRFLOW_HOME="$work/airflow-home" AIRFLOW__CORE__DAGS_FOLDER="$work/dags" AIRFLOW__CORE__LOAD_EXAMPLES=False

stage "the installed package: from site-packages, not editable, version $version, its data files"
python - "$REPO" "$version" "$work/package-files.txt" <<'EOF'
import json
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

repo, version, package_list = Path(sys.argv[1]).resolve(), sys.argv[2], sys.argv[3]
import airflow
import airflow_provider_crew

site = Path(sysconfig.get_paths()["purelib"]).resolve()
location = Path(airflow_provider_crew.__file__).resolve()
assert site in location.parents, f"airflow_provider_crew imported from {location}, not from {site}"
on_path = [p for p in sys.path if p and (Path(p).resolve() == repo or repo in Path(p).resolve().parents)]
assert not on_path, f"the repository is on sys.path: {on_path}"
assert airflow_provider_crew.__version__ == version, f"__version__ {airflow_provider_crew.__version__} != {version}"
dist = metadata.distribution("airflow-provider-crew")
assert dist.version == version, f"installed metadata says {dist.version}, pyproject {version}"
direct = json.loads(dist.read_text("direct_url.json") or "{}")
assert direct.get("url", "").endswith(".whl"), f"not installed from the wheel: {direct}"
assert not direct.get("dir_info", {}).get("editable"), f"installed editable: {direct}"
package_root = location.parent.parent
missing = [
    name
    for name in (line.strip() for line in open(package_list))
    if name and not (package_root / name).is_file()
]
assert not missing, f"not installed: {missing}"
print(f"airflow_provider_crew {version} from {location.parent} (Airflow {airflow.__version__}, "
      f"Python {sys.version.split()[0]}); all {sum(1 for _ in open(package_list))} package files installed")
EOF

# JSON out of an Airflow command's output (warnings may come before it on stdout).
json_of() { python -c '
import json, sys
text = sys.stdin.read()
starts = [i for i, c in enumerate(text) if c in "[{" and (i == 0 or text[i - 1] == "\n")]
for i in starts:
    try:
        print(json.dumps(json.JSONDecoder().raw_decode(text[i:])[0])); break
    except ValueError:
        pass
else:
    sys.exit("no JSON in: " + text[-2000:])
'; }

stage "airflow db migrate (SQLite in $AIRFLOW_HOME)"
timeout 600 airflow db migrate > "$work/migrate.log" 2>&1 || { show_log "$work/migrate.log"; fail "airflow db migrate"; }

stage "airflow providers list: airflow-provider-crew $version"
airflow providers list -o json 2>"$work/providers.err" | json_of > "$work/providers.json" \
  || { show_log "$work/providers.err"; fail "airflow providers list"; }
python - "$work/providers.json" "$version" <<'EOF'
import json, sys
providers = json.load(open(sys.argv[1]))
ours = [p for p in providers if p["package_name"] == "airflow-provider-crew"]
assert ours, f"airflow-provider-crew not in: {[p['package_name'] for p in providers]}"
assert ours[0]["version"] == sys.argv[2], f"listed as version {ours[0]['version']}, expected {sys.argv[2]}"
print(f"airflow-provider-crew {ours[0]['version']}: {ours[0]['description']}")
EOF

stage "airflow plugins: the provider's plugin (its airflow.plugins entry point)"
plugin_name="$(python -c '
from importlib.metadata import distribution
(ep,) = [ep for ep in distribution("airflow-provider-crew").entry_points if ep.group == "airflow.plugins"]
print(ep.load().name)')"
airflow plugins -o json 2>"$work/plugins.err" | json_of > "$work/plugins.json" \
  || { show_log "$work/plugins.err"; fail "airflow plugins"; }
python - "$work/plugins.json" "$plugin_name" "$version" <<'EOF'
import json, sys
plugins, name, version = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
ours = [p for p in plugins if p["name"] == name]
assert ours, f"plugin {name!r} not in: {[p['name'] for p in plugins]}"
assert f"airflow-provider-crew=={version}" in ours[0]["source"], f"loaded from {ours[0]['source']}"
print(f"plugin {name}: {ours[0]['source']}")
EOF

stage "crew-service on a free loopback port"
crew-service serve --host 127.0.0.1 --port 0 --ready-file "$work/crew-service.json" \
  > "$work/crew-service.log" 2>&1 &
service_pid=$!
deadline=$((SECONDS + 60))
until [ -s "$work/crew-service.json" ]; do
  kill -0 "$service_pid" 2>/dev/null || fail "crew-service exited before serving"
  [ "$SECONDS" -lt "$deadline" ] || fail "crew-service did not write its ready file within 60 s"
  sleep 0.2
done
# The ready file says it listens; GET / with its token says it answers.
python - "$work/crew-service.json" <<'EOF'
import json, sys, time, urllib.request
info = json.load(open(sys.argv[1]))
request = urllib.request.Request(info["base_url"] + "/", headers={"Authorization": f"Bearer {info['org_token']}"})
deadline = time.monotonic() + 30
while True:
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            body = answer.read().decode()
        break
    except OSError as error:
        if time.monotonic() > deadline:
            sys.exit(f"crew-service at {info['base_url']} does not answer: {error}")
        time.sleep(0.2)
assert body.strip() == "Healthy", f"GET / answered {body!r}"
print(f"crew-service (pid {info['pid']}) at {info['base_url']}: crews {', '.join(info['crews'])}; GET / Healthy")
EOF

stage "example_dags/$DAG_FILE: its DAG id and connections, read from the file"
cp "$REPO/example_dags/$DAG_FILE" "$work/dags/"
# The DAG id and the crew connections the DAG uses, read from its source (not hard-coded: the
# example may change); each connection gets an AIRFLOW_CONN_* pointing at the local service:
# crew_default at its root crew, crew_<name> at its crew <name>.
settings="$(python - "$work/dags/$DAG_FILE" "$work/crew-service.json" <<'EOF'
import ast, json, shlex, sys
tree = ast.parse(open(sys.argv[1]).read())
info = json.load(open(sys.argv[2]))

def constant(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

dag_ids, conn_ids = [], {"crew_default"}
for node in ast.walk(tree):
    if isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg == "dag_id" and constant(keyword.value):
                dag_ids.append(constant(keyword.value))
            if keyword.arg == "crew_conn_id" and constant(keyword.value):
                conn_ids.add(constant(keyword.value))
    if isinstance(node, ast.FunctionDef) and not dag_ids:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if getattr(target, "id", getattr(target, "attr", None)) == "dag":
                dag_ids.append(node.name)
if len(set(dag_ids)) != 1:
    sys.exit(f"expected one DAG id in {sys.argv[1]}, found {dag_ids}")
print(f"dag_id={shlex.quote(dag_ids[0])}")
for conn_id in sorted(conn_ids):
    crew = None if conn_id == "crew_default" else conn_id.removeprefix("crew_")
    if crew is not None and crew not in info["crews"]:
        sys.exit(f"the DAG uses connection {conn_id!r}: no crew {crew!r} in the local service ({info['crews']})")
    host = info["base_url"] + (f"/crews/{crew}" if crew else "")
    conn = json.dumps({"conn_type": "crew", "host": host, "password": info["org_token"]})
    print(f"export AIRFLOW_CONN_{conn_id.upper()}={shlex.quote(conn)}")
    print(f"echo {shlex.quote(f'connection {conn_id}: {host}')}")
EOF
)" || fail "reading example_dags/$DAG_FILE"
eval "$settings"
echo "DAG id: $dag_id"

stage "airflow dags test $dag_id"
dag_started=$SECONDS
rc=0
timeout 900 airflow dags test "$dag_id" > "$work/dags-test.log" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { show_log "$work/dags-test.log"; fail "airflow dags test $dag_id exited $rc"; }
# The run's state and its task instances' from Airflow's metadata database (SQLite here), as
# `airflow dags test` recorded them: `airflow dags list-runs` would do on 3.1+, but Airflow 3.0's
# `dags test` leaves the DAG out of its dag table, where list-runs looks first.
python - "$AIRFLOW_HOME/airflow.db" "$work/crew-service.json" "$dag_id" "$((SECONDS - dag_started))" <<'EOF' \
  || { show_log "$work/dags-test.log"; fail "the run of $dag_id did not succeed"; }
import collections, json, sqlite3, sys, urllib.request
database, service, dag_id, seconds = sys.argv[1:]
with sqlite3.connect(database) as db:
    runs = db.execute("SELECT run_id, state FROM dag_run WHERE dag_id = ?", (dag_id,)).fetchall()
    assert len(runs) == 1, f"expected the one run of airflow dags test, got {runs}"
    ((run_id, state),) = runs
    assert state == "success", f"run {run_id} ended {state}"
    states = db.execute(
        "SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ?", (dag_id, run_id)
    ).fetchall()
assert states and {state for _, _, state in states} == {"success"}, f"task states: {states}"
info = json.load(open(service))
request = urllib.request.Request(
    info["base_url"] + "/_control/executions", headers={"Authorization": f"Bearer {info['org_token']}"}
)
with urllib.request.urlopen(request, timeout=10) as answer:
    executions = json.load(answer)["executions"]
crew_states = collections.Counter(e["state"] for e in executions)
assert executions and set(crew_states) == {"SUCCESS"}, f"crew executions: {dict(crew_states)}"
print(f"run {run_id} of {dag_id}: success in {seconds} s; {len(states)} task instances, all success "
      f"({', '.join(sorted({task_id for task_id, _, _ in states}))}); "
      f"crew-service ran {len(executions)} executions, all SUCCESS")
EOF

echo "== wheel-check passed: airflow-provider-crew $version, built and installed as users install it, in $((SECONDS - started)) s =="
