"""How soon a crew task ends after its crew: the wait's end latency per waiting mode, on a real Airflow.

Starts a real api-server (with the provider's plugin), scheduler, dag-processor and triggerer
(SQLite in WAL mode, LocalExecutor; :class:`tests.e2e.airflow_stack.AirflowStack` with the e2e
suite's ``LOAD_SETTINGS``) and the local crew service in its own process, which sends its real
webhooks, as ``benchmarks/wake_cost.py`` does. For each crew length (3, 12, 30 and 75 s by default)
and each mode, one DAG:

- ``blocking``: ``CrewKickoffOperator(deferrable=False)``, the worker polls;
- ``deferrable``: ``CrewKickoffOperator(deferrable=True)``, the triggerer polls;
- ``sensor``: ``CrewKickoffOperator(wait_for_completion=False)`` then
  ``CrewStatusSensor(kickoff_id=kickoff.output, deferrable=True)`` (the sensor's end is measured);
- ``wake``: ``CrewKickoffOperator(deferrable=True)`` on a connection with ``wake_by_webhook: true``
  (safety poll every 300 s, the default) and ``crew_webhook_receiver`` pointing at the api-server.

It reports, per mode and crew length, the median over ``--runs`` DAG runs of the **end latency**:
from the crew finishing (the service's ``finished_at``) to the waiting task instance ending (its
``end_date``). Runs that failed or were retried (``try_number`` > 1) are counted, not measured, and
the scheduler's log and audit log are searched for Airflow's deferral race ("state mismatch",
"finished with state ..., but the task instance's state attribute is ...").

Each round triggers one DAG run per mode and length at once and waits for all of them; an unmeasured
warm-up round (one run per mode of the shortest crew, on every stack) comes first. With
``--before PATH`` (a source tree of the provider, e.g. a git worktree of an older commit) a second
complete stack runs that tree's ``airflow_provider_crew`` (``PYTHONPATH=PATH`` first, ahead of the
editable install's finder; checked in a child process and printed); both stacks stay up for the
whole benchmark and the rounds alternate (before 1, after 1, before 2, ...), so both see the same
machine load. The DAG file, the harness and the crew service come from this tree for both.

A fresh triggerer's first round is slower (Airflow builds its in-process execution API on first
use): to measure only that round, run ``--no-warmup --runs 1`` several times (new stacks each time),
with ``--after-first`` every other time so that neither tree always goes first.

Figures, not a pass/fail::

    python benchmarks/wait_latency.py [--lengths 3,12,30,75] [--runs 2] [--before /tmp/before]
        [--no-warmup] [--after-first]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from wake_cost import crew as crew_minutes  # noqa: E402

MODES = ("blocking", "deferrable", "sensor", "wake")
MODE_LABELS = {
    "blocking": "blocking",
    "deferrable": "deferrable kickoff",
    "sensor": "kickoff + deferrable sensor",
    "wake": "deferrable kickoff, wake on",
}
# Airflow's stale executor-event race, as the scheduler words it (apache/airflow#67287, #72716).
RACE_SIGNS = ("state mismatch", "finished with state")

DAG_FILE = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_crew.operators.crew import CrewKickoffOperator
from airflow_provider_crew.sensors.crew import CrewStatusSensor

for length in {lengths!r}:
    for mode in {modes!r}:
        conn_id = f"crew_{{length}}s_wake" if mode == "wake" else f"crew_{{length}}s"
        with DAG(dag_id=f"wl_{{mode}}_{{length}}s", schedule=None,
                 start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, max_active_runs=50):
            if mode == "sensor":
                kickoff = CrewKickoffOperator(task_id="kickoff", crew_conn_id=conn_id,
                                              inputs={{"topic": "tides"}}, wait_for_completion=False)
                CrewStatusSensor(task_id="wait", crew_conn_id=conn_id, kickoff_id=kickoff.output,
                                 deferrable=True)
            else:
                CrewKickoffOperator(task_id="kickoff", crew_conn_id=conn_id, inputs={{"topic": "tides"}},
                                    deferrable=mode != "blocking")
"""

# Run in each stack's environment: which provider tree its components import, and the settings that
# make the race bound (the provider's own computation of it, wherever that tree keeps it).
PROBE = """
import json, airflow_provider_crew
from airflow.configuration import conf
try:
    from airflow_provider_crew.waiting.race import deferral_settle_seconds
except ImportError:
    from airflow_provider_crew.waiting.task import deferral_settle_seconds  # trees before 1.0
print(json.dumps({
    "file": airflow_provider_crew.__file__,
    "task_success_overtime": conf.getfloat("core", "task_success_overtime"),
    "min_heartbeat_interval": conf.getfloat("workers", "min_heartbeat_interval"),
    "scheduler_heartbeat_sec": conf.getfloat("scheduler", "scheduler_heartbeat_sec"),
    "parallelism": conf.getint("core", "parallelism"),
    "race_bound": deferral_settle_seconds(),
}))
"""


def crew(seconds: int) -> dict[str, Any]:
    """A crew made like ``wake_cost.crew()``, ``seconds`` long, named by its length."""
    spec = crew_minutes(seconds / 60)
    spec["name"] = f"crew_{seconds}s"
    return spec


def parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class Sample:
    round: int
    run_id: str
    state: str  # the measured task instance's state (or "timeout")
    latency: float | None = None
    retried: bool = False
    ended_by: str = "?"  # how the wait ended, from the task's logs


@dataclass
class Variant:
    name: str
    tree: str | None  # a provider source tree put first on PYTHONPATH, None: the installed one
    stack: Any = None
    probe: dict[str, Any] = field(default_factory=dict)
    samples: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)
    race_lines: list[str] = field(default_factory=list)
    mismatch_events: int = 0


def ended_by(stack: Any, dag_id: str, run_id: str, task_id: str, mode: str) -> str:
    """How the wait ended, as its logs tell: the triggerer ended it, a webhook woke it, or a poll."""
    if mode == "blocking":
        return "worker"
    folder = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    text = "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file())
    if "The triggerer ends the task" in text:
        return "trigger"
    if "Woken by the crew's" in text:
        return "webhook"
    if not any(folder.glob("*trigger*")):
        return "worker"  # ended before it deferred
    return "resumed"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", default="3,12,30,75", help="crew lengths in seconds, comma-separated")
    parser.add_argument("--runs", type=int, default=2, help="DAG runs per cell (one per round)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"modes, comma-separated, of {MODES}")
    parser.add_argument("--before", type=Path, help="an older source tree of the provider to compare with")
    parser.add_argument("--settle", type=float, default=15, help="seconds between rounds")
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="skip the unmeasured first round (one run per mode of the shortest crew on each stack)",
    )
    parser.add_argument(
        "--after-first",
        action="store_true",
        help="in each round, run this tree's stack before the --before one",
    )
    args = parser.parse_args()

    from airflow_provider_crew.testing import CrewServiceProcess
    from tests.e2e.airflow_stack import LOAD_SETTINGS, AirflowStack, wait_for

    started = time.monotonic()
    lengths = [int(s) for s in args.lengths.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    variants = [Variant("after", None)]
    if args.before is not None:
        before = args.before.resolve()
        if not (before / "airflow_provider_crew" / "__init__.py").is_file():
            parser.error(f"{before} holds no airflow_provider_crew package")
        variants.insert(0, Variant("before", str(before)))

    tmp = Path(tempfile.mkdtemp(prefix="crew-wait-latency-"))
    # Every process started here (the crew service, Airflow's components and their children) runs in
    # ``tmp``: a ``python -m``/``-c`` child puts its working directory first on sys.path, and in this
    # repository that would import this tree's airflow_provider_crew ahead of PYTHONPATH's.
    os.chdir(tmp)
    specs = [crew(s) for s in lengths]
    crew_files = []
    for spec in specs:
        path = tmp / f"{spec['name']}.json"
        path.write_text(json.dumps(spec))
        crew_files.append(path)
    dag_code = DAG_FILE.format(lengths=lengths, modes=modes)
    dag_ids = {(mode, length): f"wl_{mode}_{length}s" for mode in modes for length in lengths}
    print(
        f"wait_latency: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load "
        f"{'/'.join(f'{x:.1f}' for x in os.getloadavg())}; crews {lengths} s, modes {modes}, "
        f"{args.runs} run(s) per cell, variants {[v.name for v in variants]}; work dir {tmp}",
        flush=True,
    )

    with CrewServiceProcess(crew_files) as service:
        try:
            for variant in variants:
                home = tmp / variant.name
                dags = home / "dags"
                dags.mkdir(parents=True)
                (dags / "wait_latency.py").write_text(dag_code)
                env = {**LOAD_SETTINGS, "AIRFLOW__CORE__PARALLELISM": "64"}
                if variant.tree:
                    env["PYTHONPATH"] = os.pathsep.join([variant.tree, LOAD_SETTINGS["PYTHONPATH"]])
                stack = AirflowStack(home / "home", dags, env)
                stack.patience = 120.0
                for length in lengths:
                    name = f"crew_{length}s"
                    stack.env.update(service.connection_env(name, crew=name, status_path_style="contract"))
                    stack.env.update(
                        service.connection_env(
                            f"{name}_wake", crew=name, status_path_style="contract", wake_by_webhook=True
                        )
                    )
                stack.env["AIRFLOW_CONN_CREW_WEBHOOK_RECEIVER"] = json.dumps(
                    {
                        "conn_type": "crew_webhook_receiver",
                        "host": stack.base_url,
                        "password": secrets.token_urlsafe(32),
                    }
                )
                variant.stack = stack
                probe = subprocess.run(
                    [sys.executable, "-c", PROBE],
                    env=stack.env,
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                if probe.returncode != 0:
                    raise RuntimeError(f"{variant.name}: probe failed:\n{probe.stderr[-3000:]}")
                variant.probe = json.loads(probe.stdout.strip().splitlines()[-1])
                expected = variant.tree or str(REPO)
                where = variant.probe["file"]
                print(
                    f"{variant.name}: its Airflow processes import airflow_provider_crew from {where}",
                    flush=True,
                )
                if not where.startswith(expected.rstrip("/") + "/"):
                    raise RuntimeError(f"{variant.name}: expected airflow_provider_crew under {expected}")
                stack.migrate()
                stack.use_wal()
                stack.start()
                health = stack.session.get(f"{stack.base_url}/crew-webhooks/v1/health", timeout=30).json()
                print(f"{variant.name}: api-server plugin health: wake={health.get('wake')}", flush=True)
                if "wake" in modes and health.get("wake") is not True:
                    raise RuntimeError(f"{variant.name}: the webhook wake is off: {health}")
            for variant in variants:
                for dag_id in dag_ids.values():
                    variant.stack.wait_for_dag(dag_id, timeout=180)
            print(f"stacks ready after {time.monotonic() - started:.0f} s", flush=True)
            if args.warmup:
                # Not measured: a fresh triggerer's first XCom push from a trigger (and its other
                # first uses) took 11-15 s here, during which its other triggers' calls waited.
                warm = {
                    (variant.name, key): (variant.stack, dag_id, variant.stack.trigger(dag_id))
                    for variant in variants
                    for key, dag_id in dag_ids.items()
                    if key[1] == min(lengths)
                }
                wait_for(
                    lambda: all(
                        stack.dag_run_state(dag_id, run_id) in ("success", "failed")
                        for stack, dag_id, run_id in warm.values()
                    ),
                    timeout=min(lengths) + 420,
                    interval=3,
                    what="the warm-up runs to end",
                )
                print(
                    f"warm-up ({len(warm)} runs of the {min(lengths)} s crew, not measured) done after "
                    f"{time.monotonic() - started:.0f} s",
                    flush=True,
                )
                time.sleep(args.settle)

            longest = max(lengths)
            for round_no in range(1, args.runs + 1):
                for variant in variants[::-1] if args.after_first else variants:
                    stack = variant.stack
                    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
                    round_start = time.monotonic()
                    runs = {key: stack.trigger(dag_id) for key, dag_id in dag_ids.items()}

                    def all_ended(stack: Any = stack, runs: dict[Any, str] = runs) -> bool:
                        stack.check_alive()
                        return all(
                            stack.dag_run_state(dag_ids[key], run_id) in ("success", "failed")
                            for key, run_id in runs.items()
                        )

                    # A wait no webhook woke ends at its 300 s safety poll at the latest.
                    timed_out = False
                    try:
                        wait_for(all_ended, timeout=longest + 420, interval=3, what="every run to end")
                    except TimeoutError:
                        timed_out = True
                    for (mode, length), run_id in runs.items():
                        dag_id = dag_ids[(mode, length)]
                        task_id = "wait" if mode == "sensor" else "kickoff"
                        tis = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")[
                            "task_instances"
                        ]
                        retried = any((ti.get("try_number") or 0) > 1 for ti in tis)
                        ti = next(t for t in tis if t["task_id"] == task_id)
                        sample = Sample(round_no, run_id, ti["state"] or "none", retried=retried)
                        if ti["state"] == "success" and not retried:
                            kickoff_id = stack.xcom(dag_id, run_id, "kickoff", key="kickoff_id")
                            execution = service.executions[kickoff_id]
                            sample.latency = parse_time(ti["end_date"]) - execution["finished_at"]
                            sample.ended_by = ended_by(stack, dag_id, run_id, task_id, mode)
                        variant.samples.setdefault((mode, length), []).append(sample)
                    bad = sum(1 for s in (v[-1] for v in variant.samples.values()) if s.latency is None)
                    print(
                        f"round {round_no} {variant.name}: {len(runs)} runs in "
                        f"{time.monotonic() - round_start:.0f} s (load at start {load})"
                        f"{', TIMED OUT' if timed_out else ''}; {bad} failed/retried/unfinished",
                        flush=True,
                    )
                    time.sleep(args.settle)
            for variant in variants:
                stack = variant.stack
                variant.race_lines = [
                    line
                    for line in stack.log_tail("scheduler", 10**9).splitlines()
                    if any(sign in line for sign in RACE_SIGNS)
                ]
                events = stack.api("GET", "/eventLogs", params={"event": "state mismatch", "limit": 1000})
                variant.mismatch_events = int(events.get("total_entries", 0))
        except BaseException:
            for variant in variants:
                if variant.stack is not None:
                    for component in variant.stack.processes:
                        tail = variant.stack.log_tail(component, 3000)
                        print(f"----- {variant.name} {component} -----\n{tail}")
            raise
        finally:
            for variant in variants:
                if variant.stack is not None:
                    variant.stack.stop()

    report(variants, modes, lengths, args.runs, time.monotonic() - started)


def median(samples: list[Sample]) -> float | None:
    values = [s.latency for s in samples if s.latency is not None]
    return statistics.median(values) if values else None


def report(variants: list[Variant], modes: list[str], lengths: list[int], runs: int, elapsed: float) -> None:
    probe = variants[-1].probe
    print(
        "\nSettings (both stacks): [core] task_success_overtime = "
        f"{probe['task_success_overtime']:g} s, [workers] min_heartbeat_interval = "
        f"{probe['min_heartbeat_interval']:g} s, [scheduler] scheduler_heartbeat_sec = "
        f"{probe['scheduler_heartbeat_sec']:g} s, [core] parallelism = {probe['parallelism']}; race bound "
        "(the provider's deferral_settle_seconds: overtime + check interval + 5 s kill delay + "
        "max(5 s, 2 heartbeats)) = " + ", ".join(f"{v.probe['race_bound']:g} s ({v.name})" for v in variants)
    )
    label_width = max(len(MODE_LABELS[m]) for m in modes)
    header = f"{'mode':<{label_width}}" + "".join(f"{f'{length} s crew':>16}" for length in lengths)
    for variant in variants:
        print(
            f"\n{variant.name}: median seconds from crew end to task end ({runs} run(s) per cell; "
            f"[f/r] = runs failed/retried, not measured)"
        )
        print(header)
        for mode in modes:
            cells = []
            for length in lengths:
                samples = variant.samples.get((mode, length), [])
                value = median(samples)
                failed = sum(1 for s in samples if s.state != "success")
                retried = sum(1 for s in samples if s.retried)
                text = "-" if value is None else f"{value:.1f}"
                if failed or retried:
                    text += f" [{failed}f/{retried}r]"
                cells.append(f"{text:>16}")
            print(f"{MODE_LABELS[mode]:<{label_width}}" + "".join(cells))
        total = sum(len(s) for s in variant.samples.values())
        failed = sum(1 for s in variant.samples.values() for x in s if x.state != "success")
        retried = sum(1 for s in variant.samples.values() for x in s if x.retried)
        print(
            f"{variant.name}: {total} runs, {failed} failed, {retried} retried; scheduler log race lines "
            f"('state mismatch' / 'finished with state'): {len(variant.race_lines)}; "
            f"'state mismatch' audit-log events: {variant.mismatch_events}"
        )
        for line in variant.race_lines[:5]:
            print(f"  {line[:400]}")
    if len(variants) == 2:
        before, after = variants
        print("\nratio after/before of the medians (< 1: the wait ends sooner)")
        print(header)
        for mode in modes:
            cells = []
            for length in lengths:
                b = median(before.samples.get((mode, length), []))
                a = median(after.samples.get((mode, length), []))
                cells.append(f"{(f'{a / b:.2f}' if a is not None and b else '-'):>16}")
            print(f"{MODE_LABELS[mode]:<{label_width}}" + "".join(cells))
    print(
        "\nEach run: latency s (how the wait ended: trigger = the triggerer ended the task, webhook = woken,"
    )
    print("resumed = a trigger event resumed it on a worker, worker = ended on the worker, never deferred)")
    for variant in variants:
        for mode in modes:
            parts = []
            for length in lengths:
                samples = variant.samples.get((mode, length), [])
                got = ", ".join(
                    f"{s.latency:.1f} {s.ended_by}" if s.latency is not None else s.state for s in samples
                )
                parts.append(f"{length} s: {got}")
            print(f"  {variant.name:<6} {mode:<10} " + "; ".join(parts))
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nwait_latency: done in {elapsed / 60:.1f} min, load now {load}")


if __name__ == "__main__":
    main()
