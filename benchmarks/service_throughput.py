"""Throughput of the local crew service's status endpoint, and its start-up time.

Starts ``crew-service serve`` in a subprocess pinned to one core, kicks off a few executions,
then polls their status from this process (pinned to another core) with aiohttp keep-alive
connections, bounded by a request count and a time limit. Loopback only. Prints requests per
second, latency percentiles, the server's CPU use, and start-up times. Not a pass/fail test.

    python benchmarks/service_throughput.py [--requests 30000] [--seconds 15] [--concurrency 32]
    python benchmarks/service_throughput.py --compare-fastapi   # same handler on FastAPI, for contrast
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import textwrap
import time

import aiohttp

from airflow_provider_crew.testing import CrewServiceProcess, LocalCrewService

FASTAPI_BASELINE = textwrap.dedent(
    """
    # A FastAPI app with the same status lookup, to show what the framework costs per request.
    import json, socket, sys, uvicorn
    from fastapi import FastAPI, Header, HTTPException
    from fastapi.responses import Response
    app = FastAPI()
    RECORDS = {}
    @app.post("/kickoff")
    async def kickoff(body: dict, authorization: str = Header(None)):
        kid = f"id-{len(RECORDS)}"
        RECORDS[kid] = json.dumps({"kickoff_id": kid, "state": "RUNNING", "status": "Running"}).encode()
        return {"kickoff_id": kid}
    @app.get("/{kickoff_id}/status")
    async def status(kickoff_id: str, authorization: str = Header(None)):
        if authorization != "Bearer crew-test-org-token":
            raise HTTPException(401)
        if kickoff_id not in RECORDS:
            raise HTTPException(404)
        return Response(RECORDS[kickoff_id], media_type="application/json")
    sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(4096)
    print(f"crew-service listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, http="httptools", log_level="warning", access_log=False)).run(
        sockets=[sock]
    )
    """
)


def _cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _hammer(
    base_url: str, paths: list[str], token: str, total: int, seconds: float, concurrency: int
) -> tuple[int, int, float, list[float]]:
    """Fire GETs until ``total`` are done or ``seconds`` pass; returns (ok, errors, elapsed, latencies)."""
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    latencies: list[float] = []
    ok = errors = 0
    issued = 0
    async with aiohttp.ClientSession(base_url, connector=connector, headers=headers) as session:
        deadline = time.perf_counter() + seconds

        async def worker(offset: int) -> None:
            nonlocal ok, errors, issued
            n = offset
            while issued < total and time.perf_counter() < deadline:
                issued += 1
                path = paths[n % len(paths)]
                n += 1
                t0 = time.perf_counter()
                async with session.get(path) as resp:
                    await resp.read()
                    if resp.status == 200:
                        ok += 1
                    else:
                        errors += 1
                latencies.append(time.perf_counter() - t0)

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
    return ok, errors, elapsed, latencies


async def _kickoffs(base_url: str, token: str, count: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    ids = []
    async with aiohttp.ClientSession(base_url, headers=headers) as session:
        for i in range(count):
            body = {"inputs": {"topic": f"benchmark {i}", "current_year": "2025"}}
            async with session.post("/kickoff", json=body) as resp:
                resp.raise_for_status()
                ids.append((await resp.json())["kickoff_id"])
    return ids


def _measure(label: str, base_url: str, token: str, pid: int, args: argparse.Namespace) -> None:
    ids = asyncio.run(_kickoffs(base_url, token, args.executions))
    paths = [f"/{kid}/status" for kid in ids]
    asyncio.run(_hammer(base_url, paths, token, args.warmup, 30, args.concurrency))  # warm-up
    cpu0 = _cpu_seconds(pid)
    ok, errors, elapsed, latencies = asyncio.run(
        _hammer(base_url, paths, token, args.requests, args.seconds, args.concurrency)
    )
    server_cpu = _cpu_seconds(pid) - cpu0
    done = ok + errors
    latencies.sort()
    p50 = statistics.median(latencies) * 1000 if latencies else float("nan")
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan")
    print(f"\n== {label}")
    print(f"status requests: {done} in {elapsed:.2f} s ({errors} not 200), concurrency {args.concurrency}")
    print(f"throughput: {done / elapsed:,.0f} requests/second")
    print(f"latency: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    busy = server_cpu / elapsed * 100 if elapsed else 0.0
    per_cpu = done / server_cpu if server_cpu else float("nan")
    print(
        f"server CPU: {server_cpu:.2f} s = {busy:.0f}% of its core -> {per_cpu:,.0f} requests per CPU-second"
    )
    if busy < 90:
        print("  (server core not saturated: the client was the bottleneck; per-CPU-second is the capacity)")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=30_000, help="status requests to send (max)")
    parser.add_argument("--seconds", type=float, default=15.0, help="time limit for the measurement")
    parser.add_argument("--concurrency", type=int, default=32, help="keep-alive connections")
    parser.add_argument("--executions", type=int, default=20, help="executions whose status is polled")
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--server-cpu", type=int, default=0, help="core for the service")
    parser.add_argument("--client-cpu", type=int, default=1, help="core for this client")
    parser.add_argument("--compare-fastapi", action="store_true", help="also measure a FastAPI baseline")
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    pin = hasattr(os, "sched_setaffinity") and cores > 1
    if pin:
        os.sched_setaffinity(0, {args.client_cpu % cores})
    server_cpus = {args.server_cpu % cores} if pin else None
    client = args.client_cpu if pin else "-"
    print(f"machine: {cores} cores; service pinned to {server_cpus}, client to {client}")

    # Start-up, in-process (background thread): the figure the pytest fixture pays per test.
    t0 = time.perf_counter()
    with LocalCrewService():
        first = time.perf_counter() - t0
    t0 = time.perf_counter()
    with LocalCrewService():
        again = time.perf_counter() - t0
    print(f"start-up, in-process thread: first {first * 1000:.0f} ms (imports), then {again * 1000:.0f} ms")

    # Long steps: the polled executions stay RUNNING, like real ones, for the whole measurement.
    service = CrewServiceProcess("research", speed=0.01, cpus=server_cpus)
    service.start()
    try:
        assert service.startup_seconds is not None and service.pid is not None
        print(
            f"start-up, subprocess (spawn -> GET / answers Healthy): {service.startup_seconds * 1000:.0f} ms"
        )
        _measure(
            "local crew service (bare ASGI on uvicorn+httptools)",
            service.base_url,
            service.org_token,
            service.pid,
            args,
        )
    finally:
        service.stop()

    if args.compare_fastapi:
        proc = subprocess.Popen(
            [sys.executable, "-c", FASTAPI_BASELINE],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            if server_cpus:
                os.sched_setaffinity(proc.pid, server_cpus)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            base_url = line.strip().rsplit(" ", 1)[-1]
            _measure("FastAPI baseline (same lookup)", base_url, "crew-test-org-token", proc.pid, args)
        finally:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
