"""Memory and event-loop cost of hostile answers in a triggerer-like process.

A triggerer runs the waits of every DAG in one process and one event loop. This starts the local
crew service in a subprocess, then, for each hostile answer, a fresh child process that plays the
triggerer: ``--neighbours`` deferred-style waits poll a healthy execution every 0.2 s through
``CrewHook.aget_status`` while one more status read meets the hostile answer. The child reports:

  growth     peak resident memory (VmHWM) during the bad read minus the resident memory before it
  bad read   how that read ended, and after how long
  stall      the longest the event loop went without running a 10 ms ticker
  polls      healthy polls answered during the bad read, and the slowest of them

Cases: ``oversized`` (a JSON body of SIZE bytes), ``gzip_bomb`` (gzip that inflates to SIZE
bytes), ``trickle`` (the answer one byte every 0.5 s; the read ends at the connection's time bound,
here connect 1 s + read 2 s). ``--uncapped`` adds, for the two body cases, the same read done the
way an unguarded client does it (aiohttp's ``read()`` with its own decompression): what the cap
saves. Prints figures; it is not a pass/fail test.

    python benchmarks/hostile_answers_memory.py [--cap-mib 32] [--size-mib 256 512 1024] [--uncapped]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
BENCH_CREWS = [
    {
        "name": "bench",
        "inputs": ["topic"],
        "pending_seconds": 0.01,
        "tasks": [{"name": "long_task", "agent": "Writer", "steps": 1, "step_seconds": 3600}],
    },
    {
        "name": "bad",
        "inputs": ["topic"],
        "pending_seconds": 0.01,
        "tasks": [{"name": "long_task", "agent": "Writer", "steps": 1, "step_seconds": 3600}],
    },
]


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    """Make VmHWM start again from the current RSS (Linux: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


async def _child(config: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_crew.hooks.crew import CrewHook

    good_hook = CrewHook("crew_good")
    bad_hook = CrewHook("crew_bad")
    good_id, bad_id = config["good_id"], config["bad_id"]
    stop = asyncio.Event()
    poll_seconds: list[float] = []
    stall = 0.0

    async def neighbour() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            await good_hook.aget_status(good_id)
            poll_seconds.append(time.perf_counter() - started)
            await asyncio.sleep(0.2)

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            stall = max(stall, now - last - 0.01)
            last = now

    async def uncapped_read() -> str:
        import aiohttp

        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{config['bad_url']}/{bad_id}/status", headers={"Authorization": f"Bearer {config['token']}"}
            ) as resp,
        ):
            body = await resp.read()
            return f"read {len(body) / MiB:.0f} MiB, state {json.loads(body)['state']}"

    neighbours = [asyncio.create_task(neighbour()) for _ in range(config["neighbours"])]
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(1.0)  # warm: sessions, connections, connection lookups
    poll_seconds.clear()
    stall = 0.0
    before = _status_kib("VmRSS")
    _reset_peak()
    started = time.perf_counter()
    try:
        if config["uncapped"]:
            outcome = await uncapped_read()
        else:
            status = await bad_hook.aget_status(bad_id)
            outcome = f"read, state {status.state.value}"
    except Exception as error:  # the point: which error, and that only this read failed
        outcome = f"{type(error).__name__}: {str(error)[:70]}..."
    bad_seconds = time.perf_counter() - started
    peak = _status_kib("VmHWM")
    answered = list(poll_seconds)
    stop.set()
    await asyncio.gather(*neighbours, tick)
    return {
        "growth_mib": (peak - before) / 1024,
        "outcome": outcome,
        "bad_seconds": bad_seconds,
        "stall_ms": stall * 1000,
        "polls": len(answered),
        "slowest_poll_ms": max(answered, default=0.0) * 1000,
    }


def _run_child(config: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cap-mib", type=int, default=32, help="max_response_bytes, in MiB (default 32)")
    parser.add_argument("--size-mib", type=int, nargs="+", default=[256, 512], help="hostile body sizes")
    parser.add_argument("--neighbours", type=int, default=50, help="healthy waits polling meanwhile")
    parser.add_argument("--uncapped", action="store_true", help="also read each body the unguarded way")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(json.loads(args.child)))))
        return 0

    from airflow_provider_crew.testing import CrewServiceProcess
    from airflow_provider_crew.testing.dag_runs import airflow_env

    workdir = tempfile.TemporaryDirectory(prefix="crew-bench-")
    crew_files = []
    for crew in BENCH_CREWS:
        path = os.path.join(workdir.name, f"{crew['name']}.json")
        with open(path, "w") as fh:
            json.dump(crew, fh)
        crew_files.append(path)
    cores = os.cpu_count() or 1
    service = CrewServiceProcess(crew_files, cpus={0} if cores > 1 else None)
    service.start()
    try:
        import requests

        def kickoff(base: str) -> str:
            resp = requests.post(
                f"{base}/kickoff",
                json={"inputs": {"topic": "bench"}},
                headers=service.auth_headers(),
                timeout=10,
            )
            resp.raise_for_status()
            return str(resp.json()["kickoff_id"])

        bad_url = service.url_for_crew("bad")
        good_id, bad_id = kickoff(service.base_url), kickoff(bad_url)
        settings = {
            "status_path_style": "contract",
            "max_response_bytes": args.cap_mib * MiB,
            "connect_timeout": 1,
            "read_timeout": 2,
            "retry_limit": 0,
        }
        env = airflow_env(Path(workdir.name), Path(workdir.name))
        env.update(service.connection_env("crew_good", **settings))
        env.update(service.connection_env("crew_bad", crew="bad", **settings))
        if cores > 1:
            os.sched_setaffinity(0, set(range(1, cores)))  # children inherit: the service keeps core 0

        cases: list[tuple[str, dict[str, Any], bool]] = []
        for size in args.size_mib:
            for kind in ("oversized", "gzip_bomb"):
                rule = {"kind": kind, "size": size * MiB, "endpoint": "status", "count": None, "crew": "bad"}
                cases.append((f"{kind} {size} MiB", rule, False))
                if args.uncapped:
                    cases.append((f"{kind} {size} MiB", rule, True))
        trickle = {"kind": "trickle", "seconds": 0.5, "endpoint": "status", "count": None, "crew": "bad"}
        cases.append(("trickle 1 byte / 0.5 s", trickle, False))

        print(f"python {sys.version.split()[0]}; {cores} cores; service on core 0, the child on the others")
        print(f"cap {args.cap_mib} MiB; {args.neighbours} healthy waits polling every 0.2 s\n")
        print(
            f"{'answer':<24} {'read by':<9} {'growth MiB':>10} {'bad read':>9} {'stall ms':>9} "
            f"{'polls':>6} {'slowest ms':>10}  outcome"
        )
        for name, rule, uncapped in cases:
            service.faults.clear()
            service.faults.add(rule)
            if rule["kind"] == "gzip_bomb":
                # The service builds a bomb once per size: do that now, not inside the measurement.
                url = f"{bad_url}/{bad_id}/status"
                requests.get(url, headers=service.auth_headers(), stream=True, timeout=60).close()
            config = {
                "good_id": good_id,
                "bad_id": bad_id,
                "bad_url": bad_url,
                "token": service.org_token,
                "neighbours": args.neighbours,
                "uncapped": uncapped,
            }
            row = _run_child(config, env)
            who = "aiohttp" if uncapped else "CrewHook"
            print(
                f"{name:<24} {who:<9} {row['growth_mib']:>10.0f} {row['bad_seconds']:>8.2f}s "
                f"{row['stall_ms']:>9.0f} {row['polls']:>6} {row['slowest_poll_ms']:>10.0f}  "
                f"{row['outcome']}",
                flush=True,
            )
    finally:
        service.stop()
        workdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
