"""Import time of the provider's operators and sensor, on top of Airflow's task SDK.

Runs, interleaved so that machine load hits both alike:

  baseline   python -c "import airflow.sdk"
  provider   python -c "import airflow.sdk, airflow_provider_crew.operators.crew,
                        airflow_provider_crew.sensors.crew"

each in a fresh interpreter, ``--runs`` times, and prints the median wall time and CPU time (user +
system; a loaded machine moves it less than wall time) of each, their difference, and what the
provider adds measured inside the provider's runs (a clock read after ``import airflow.sdk`` and
after the provider's imports: the same quantity without the noise of two whole interpreter starts),
and whether any OpenLineage module was imported by the
provider's modules (it must not be: the OpenLineage support imports it only inside the lineage
methods), and which HTTP stacks the provider's imports pulled in (``requests``, ``urllib3``,
``charset_normalizer``, ``aiohttp``: none should be, they are imported where a request is sent,
so a DAG file that only builds tasks never loads them). Then, from one ``python -X importtime``
run, the provider's modules and everything they imported beyond ``airflow.sdk``, costliest first.
Every interpreter reads byte code compiled beforehand, as from an installed wheel: the children run
without ``PYTHONDONTWRITEBYTECODE`` and with their own ``PYTHONPYCACHEPREFIX``, and an untimed
run of each command fills it first (an editable install with ``PYTHONDONTWRITEBYTECODE=1`` set
would otherwise compile the provider's sources at every import, and count that as import time).
Prints figures; it is not a pass/fail test.

With ``--before PATH`` (another checkout of the provider, e.g. ``git worktree add /tmp/before
<commit>``) it compares two trees instead: the provider's timed import runs with ``PYTHONPATH`` at
that tree and at this one, alternating (one of each per run, the order swapped every run, byte code
compiled beforehand for both), and prints both medians of what the provider adds after ``import
airflow.sdk`` and their ratio (after / before), then each tree's costliest modules.

    python benchmarks/import_time.py [--runs 21]
    python benchmarks/import_time.py --before /tmp/before-0466b00 [--runs 9]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = "import airflow.sdk"
PROVIDER_ONLY = "import airflow_provider_crew.operators.crew, airflow_provider_crew.sensors.crew"
PROVIDER = "import airflow.sdk; " + PROVIDER_ONLY
# The provider's run, timing its own imports after airflow.sdk's (printed in milliseconds).
PROVIDER_TIMED = (
    "import airflow.sdk, time; started = time.perf_counter(); "
    + PROVIDER_ONLY
    + "; print((time.perf_counter() - started) * 1000)"
)
# Run in a child: the OpenLineage modules loaded after the imports. Airflow's configuration reads
# every installed provider's metadata (``get_provider_info``) once, whoever asks first; that is not
# OpenLineage support being loaded, so it is left out.
OPENLINEAGE_PROBE = (
    "; import sys; "
    "print(sorted(m for m in sys.modules if (m.split('.')[0] == 'openlineage' "
    "or m.startswith('airflow.providers.openlineage.')) and not m.endswith('.get_provider_info')))"
)
HTTP_STACK_PROBE = (
    "; import sys; print(','.join(m for m in ('requests', 'urllib3', 'charset_normalizer', 'aiohttp') "
    "if m in sys.modules) or '-')"
)


def _child_env() -> dict[str, str]:
    """The children's environment: byte code read from (and written once to) a cache of their own."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "crew-import-time-pycache")
    return env


CHILD_ENV = _child_env()
THIS_TREE = Path(__file__).resolve().parents[1]


def run_child(arguments: list[str], tree: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a fresh interpreter; with ``tree`` (a checkout's root), the provider is imported from there.

    The child then runs in ``tree`` too: ``python -c`` puts its working directory first on the path.
    """
    env = CHILD_ENV if tree is None else {**CHILD_ENV, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, *arguments], check=True, capture_output=True, text=True, env=env, cwd=tree
    )


def timed_run(code: str, tree: Path | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system) of one fresh interpreter running ``code``, and its output."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    out = run_child(["-c", code], tree).stdout.strip()
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return wall, cpu, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=21, help="fresh interpreters per command (default 21)")
    parser.add_argument("--top", type=int, default=12, help="modules listed from the import profile")
    parser.add_argument(
        "--before",
        metavar="PATH",
        type=Path,
        help="another checkout of the provider: time its imports and this tree's, interleaved",
    )
    args = parser.parse_args()
    if args.before is not None:
        compare(args.before.resolve(), THIS_TREE, runs=args.runs, top=args.top)
        return

    # One untimed run of each first: byte-code compilation and a cold page cache are not import time.
    timed_run(BASELINE)
    timed_run(PROVIDER_TIMED)
    baseline: list[tuple[float, float, str]] = []
    provider: list[tuple[float, float, str]] = []
    for _ in range(args.runs):
        baseline.append(timed_run(BASELINE))
        provider.append(timed_run(PROVIDER_TIMED))
    inside = sorted(float(run[2]) for run in provider)

    def medians(runs: list[tuple[float, float, str]]) -> tuple[float, float]:
        return statistics.median(r[0] for r in runs) * 1000, statistics.median(r[1] for r in runs) * 1000

    (base_wall, base_cpu), (provider_wall, provider_cpu) = medians(baseline), medians(provider)
    installed = importlib.util.find_spec("airflow.providers.openlineage") is not None
    probes = {
        code: run_child(["-c", code + OPENLINEAGE_PROBE]).stdout.strip() for code in (BASELINE, PROVIDER)
    }
    print(f"python {sys.version.split()[0]}, {args.runs} interleaved runs each, a fresh interpreter per run")
    print(f"  {'':<34} {'median wall':>12} {'median CPU':>12}")
    print(f"  {'import airflow.sdk':<34} {base_wall:9.0f} ms {base_cpu:9.0f} ms")
    print(f"  {'+ operators.crew, sensors.crew':<34} {provider_wall:9.0f} ms {provider_cpu:9.0f} ms")
    print(f"  {'provider adds':<34} {provider_wall - base_wall:9.0f} ms {provider_cpu - base_cpu:9.0f} ms")
    deltas = sorted(p[0] - b[0] for b, p in zip(baseline, provider, strict=True))
    print(
        f"  provider adds, per interleaved pair: median {statistics.median(deltas) * 1000:.0f} ms, "
        f"quartiles {deltas[len(deltas) // 4] * 1000:.0f}-{deltas[3 * len(deltas) // 4] * 1000:.0f} ms"
    )
    print(
        f"  provider adds, timed inside its runs after `import airflow.sdk`: median "
        f"{statistics.median(inside):.1f} ms, quartiles {inside[len(inside) // 4]:.1f}-"
        f"{inside[3 * len(inside) // 4]:.1f} ms"
    )
    print(
        f"load average while measuring: {os.getloadavg()[0]:.1f} (CPU time is less affected than wall time)"
    )
    print(f"apache-airflow-providers-openlineage installed: {'yes' if installed else 'no'}")
    print(f"OpenLineage modules loaded by `import airflow.sdk`: {probes[BASELINE]}")
    print(f"OpenLineage modules loaded with the provider's operators: {probes[PROVIDER]}")
    stacks = run_child(
        ["-c", BASELINE + HTTP_STACK_PROBE + "; " + PROVIDER_ONLY + HTTP_STACK_PROBE]
    ).stdout.split()
    print(f"HTTP stacks loaded by `import airflow.sdk`: {stacks[0]}")
    print(f"HTTP stacks loaded with the provider's operators and sensor: {stacks[1]}")
    print(f"\nself time of what the provider adds (one -X importtime run, {args.top} costliest):")
    for module, self_us, cumulative_us in import_profile()[: args.top]:
        print(f"  {self_us / 1000:6.1f} ms self {cumulative_us / 1000:6.1f} ms cumulative  {module}")


def compare(before: Path, after: Path, *, runs: int, top: int) -> None:
    """What the provider adds after ``import airflow.sdk``, from ``before`` and ``after``, interleaved."""
    trees = {"before": before, "after": after}
    where = "import airflow_provider_crew as p, pathlib; print(pathlib.Path(p.__file__).parents[1])"
    for name, tree in trees.items():
        found = run_child(["-c", where], tree).stdout.strip()
        if Path(found).resolve() != tree:
            sys.exit(f"{name}: the provider was imported from {found}, not from {tree}")
        timed_run(PROVIDER_TIMED, tree)  # untimed: fills the byte-code cache
    inside: dict[str, list[float]] = {name: [] for name in trees}
    wall: dict[str, list[float]] = {name: [] for name in trees}
    for run in range(runs):
        for name in list(trees)[:: 1 if run % 2 == 0 else -1]:  # the order swapped every run
            seconds, _, out = timed_run(PROVIDER_TIMED, trees[name])
            inside[name].append(float(out))
            wall[name].append(seconds * 1000)
    print(f"python {sys.version.split()[0]}, {runs} interleaved runs per tree, a fresh interpreter per run")
    print("provider adds, timed inside each run after `import airflow.sdk` (wall: the whole interpreter):")
    for name, tree in trees.items():
        times = sorted(inside[name])
        print(
            f"  {name:<7} median {statistics.median(times):5.1f} ms, quartiles {times[len(times) // 4]:.1f}-"
            f"{times[3 * len(times) // 4]:.1f} ms (wall {statistics.median(wall[name]):.0f} ms)  {tree}"
        )
    ratio = statistics.median(inside["after"]) / statistics.median(inside["before"])
    print(f"  ratio after / before: {ratio:.2f}")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f}")
    if top <= 0:
        return
    for name, tree in trees.items():
        print(f"\n{name}: self time of what the provider adds (one -X importtime run, {top} costliest):")
        for module, self_us, cumulative_us in import_profile(tree)[:top]:
            print(f"  {self_us / 1000:6.1f} ms self {cumulative_us / 1000:6.1f} ms cumulative  {module}")


def _importtime(code: str, tree: Path | None = None) -> dict[str, tuple[int, int]]:
    err = run_child(["-X", "importtime", "-c", code], tree).stderr
    found: dict[str, tuple[int, int]] = {}
    for line in err.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            found[parts[2].strip()] = (int(parts[0]), int(parts[1]))
    return found


def import_profile(tree: Path | None = None) -> list[tuple[str, int, int]]:
    """Modules imported with the provider but not by ``import airflow.sdk``: (name, self µs, cum µs)."""
    base, full = _importtime(BASELINE, tree), _importtime(PROVIDER, tree)
    added = [(name, t[0], t[1]) for name, t in full.items() if name not in base]
    return sorted(added, key=lambda row: -row[1])


if __name__ == "__main__":
    main()
