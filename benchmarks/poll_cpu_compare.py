"""Client CPU of one trigger poll, this checkout against another one, interleaved in one run.

Each round runs one child process per tree (``PYTHONPATH`` points at that tree's package); the
children take turns, so both meet the same machine load. A child starts the local crew service in a
subprocess (pinned to another core when there are two), kicks off a few long-running executions and
makes, in one event loop, the very call ``CrewStatusTrigger.run`` makes per poll in that tree:

- ``CrewHook(conn_id).aget_status(kickoff_id)`` where the trigger polls through the hook;
- ``aget_status_shared(shared_connection(conn_id), kickoff_id)`` (``hooks/triggerer.py``) in trees
  from before the hook became the triggers' one face for HTTP.

It prints each round's figure per tree and the medians. Figures, not a pass/fail.

    git worktree add /tmp/before <commit>
    python benchmarks/poll_cpu_compare.py --before /tmp/before [--rounds 7 --polls 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import asyncio, json, os, sys, time
from airflow_provider_crew.testing import CrewServiceProcess

CONN_ID = "crew_bench"
CREW = {"name": "bench", "inputs": ["topic"], "pending_seconds": 0.01, "tasks": [
    {"name": "research_task", "agent": "Researcher", "steps": 1, "step_seconds": 0.01},
    {"name": "writing_task", "agent": "Writer", "steps": 1, "step_seconds": 3600}]}

def poll_function():
    try:
        from airflow_provider_crew.hooks.triggerer import aget_status_shared, shared_connection
    except ImportError:
        from airflow_provider_crew.hooks.crew import CrewHook
        hooks = {}
        async def poll(kickoff_id):
            hook = hooks.get(kickoff_id) or hooks.setdefault(kickoff_id, CrewHook(CONN_ID))
            return await hook.aget_status(kickoff_id)
        return "CrewHook.aget_status", poll
    async def poll(kickoff_id):
        return await aget_status_shared(await shared_connection(CONN_ID), kickoff_id)
    return "aget_status_shared", poll

async def measure(ids, polls, concurrency):
    name, poll = poll_function()
    for kickoff_id in ids:  # warm up: connection lookup, session, learned status path
        await poll(kickoff_id)
    done = 0
    async def worker(n):
        nonlocal done
        while done < polls:
            done += 1
            await poll(ids[n % len(ids)])
    cpu = time.process_time()
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    cpu = time.process_time() - cpu
    # The shared session is left open: the child exits next (where a tree closes it has moved).
    return name, cpu / done * 1e6

service_cpu, client_cpu, polls, concurrency = (int(a) for a in sys.argv[1:5])
pin = (os.cpu_count() or 1) > 1
crew_file = os.path.join(sys.argv[5], "bench.json")
with open(crew_file, "w") as fh:
    json.dump(CREW, fh)
with CrewServiceProcess(crew_file, cpus={service_cpu} if pin else None) as service:
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = service.connection_json(status_path_style="contract")
    import requests
    ids = [
        requests.post(f"{service.base_url}/kickoff", json={"inputs": {"topic": f"t{i}"}},
                      headers=service.auth_headers(), timeout=10).json()["kickoff_id"]
        for i in range(10)
    ]
    for kickoff_id in ids:
        service.wait_for_state(kickoff_id, "RUNNING")
    if pin:
        os.sched_setaffinity(0, {client_cpu})
    name, per_poll = asyncio.run(measure(ids, polls, concurrency))
print(json.dumps({"call": name, "us_per_poll": per_poll}))
"""


def run_child(tree: Path, args: argparse.Namespace, workdir: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "0", "1", str(args.polls), str(args.concurrency), workdir],
        env=env,
        cwd=workdir,  # not a checkout: ``python -c`` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the tree to compare with")
    parser.add_argument(
        "--after", type=Path, default=REPO, help="the tree measured against it (default: this one)"
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--polls", type=int, default=3000, help="polls per child")
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    workdir = tempfile.TemporaryDirectory(prefix="crew-poll-compare-")
    figures: dict[str, list[float]] = {"before": [], "after": []}
    calls: dict[str, str] = {}
    for round_number in range(1, args.rounds + 1):
        order = ("before", "after") if round_number % 2 else ("after", "before")
        for label in order:
            child = run_child(args.before if label == "before" else args.after, args, workdir.name)
            calls[label] = str(child["call"])
            figures[label].append(float(child["us_per_poll"]))  # type: ignore[arg-type]
        before, after = figures["before"][-1], figures["after"][-1]
        print(f"round {round_number}: before {before:.0f} µs, after {after:.0f} µs")
    before, after = statistics.median(figures["before"]), statistics.median(figures["after"])
    print(f"before ({calls['before']}): median {before:.0f} µs per poll")
    print(f"after  ({calls['after']}): median {after:.0f} µs per poll")
    print(f"after / before: {after / before:.3f}")
    ratios = [a / b for a, b in zip(figures["after"], figures["before"], strict=True)]
    print(
        f"per-round ratios: {', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
