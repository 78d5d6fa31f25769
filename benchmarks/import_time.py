"""Import time of the provider's operators and sensor, on top of Airflow's task SDK.

Runs, interleaved so that machine load hits both alike:

  baseline   python -c "import airflow.sdk"
  provider   python -c "import airflow.sdk, airflow_provider_crew.operators.crew,
                        airflow_provider_crew.sensors.crew"

each in a fresh interpreter, ``--runs`` times, and prints the median wall time and CPU time (user +
system; a loaded machine moves it less than wall time) of each, their difference (what the
provider adds), and whether any OpenLineage module was imported by the
provider's modules (it must not be: the OpenLineage support imports it only inside the lineage
methods), and which HTTP stacks the provider's imports pulled in (``requests``, ``urllib3``,
``charset_normalizer``, ``aiohttp``: none should be, they are imported where a request is sent,
so a DAG file that only builds tasks never loads them). Then, from one ``python -X importtime``
run, the provider's modules and everything they imported beyond ``airflow.sdk``, costliest first.
Prints figures; it is not a pass/fail test.

    python benchmarks/import_time.py [--runs 21]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time

BASELINE = "import airflow.sdk"
PROVIDER_ONLY = "import airflow_provider_crew.operators.crew, airflow_provider_crew.sensors.crew"
PROVIDER = "import airflow.sdk; " + PROVIDER_ONLY
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


def timed_run(code: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one fresh interpreter running ``code``."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=21, help="fresh interpreters per command (default 21)")
    parser.add_argument("--top", type=int, default=12, help="modules listed from the import profile")
    args = parser.parse_args()

    # One untimed run of each first: byte-code compilation and a cold page cache are not import time.
    timed_run(BASELINE)
    timed_run(PROVIDER)
    baseline: list[tuple[float, float]] = []
    provider: list[tuple[float, float]] = []
    for _ in range(args.runs):
        baseline.append(timed_run(BASELINE))
        provider.append(timed_run(PROVIDER))

    def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(r[0] for r in runs) * 1000, statistics.median(r[1] for r in runs) * 1000

    (base_wall, base_cpu), (provider_wall, provider_cpu) = medians(baseline), medians(provider)
    installed = importlib.util.find_spec("airflow.providers.openlineage") is not None
    probes = {
        code: subprocess.run(
            [sys.executable, "-c", code + OPENLINEAGE_PROBE], check=True, capture_output=True, text=True
        ).stdout.strip()
        for code in (BASELINE, PROVIDER)
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
        f"load average while measuring: {os.getloadavg()[0]:.1f} (CPU time is less affected than wall time)"
    )
    print(f"apache-airflow-providers-openlineage installed: {'yes' if installed else 'no'}")
    print(f"OpenLineage modules loaded by `import airflow.sdk`: {probes[BASELINE]}")
    print(f"OpenLineage modules loaded with the provider's operators: {probes[PROVIDER]}")
    stacks = subprocess.run(
        [sys.executable, "-c", BASELINE + HTTP_STACK_PROBE + "; " + PROVIDER_ONLY + HTTP_STACK_PROBE],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    print(f"HTTP stacks loaded by `import airflow.sdk`: {stacks[0]}")
    print(f"HTTP stacks loaded with the provider's operators and sensor: {stacks[1]}")
    print(f"\nself time of what the provider adds (one -X importtime run, {args.top} costliest):")
    for module, self_us, cumulative_us in import_profile()[: args.top]:
        print(f"  {self_us / 1000:6.1f} ms self {cumulative_us / 1000:6.1f} ms cumulative  {module}")


def _importtime(code: str) -> dict[str, tuple[int, int]]:
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True, text=True
    ).stderr
    found: dict[str, tuple[int, int]] = {}
    for line in err.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            found[parts[2].strip()] = (int(parts[0]), int(parts[1]))
    return found


def import_profile() -> list[tuple[str, int, int]]:
    """Modules imported with the provider but not by ``import airflow.sdk``: (name, self µs, cum µs)."""
    base, full = _importtime(BASELINE), _importtime(PROVIDER)
    added = [(name, t[0], t[1]) for name, t in full.items() if name not in base]
    return sorted(added, key=lambda row: -row[1])


if __name__ == "__main__":
    main()
