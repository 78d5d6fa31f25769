"""Client CPU per status poll: what one trigger poll costs the triggerer, by HTTP client strategy.

Starts ``crew-service serve`` in a subprocess (pinned to one core when there are two or more),
kicks off a few long-running executions, then polls their status from this process (pinned to
another core) with each strategy, measuring ``time.process_time()`` (this process's CPU) around
a bounded number of polls. Loopback only. Prints figures; it is not a pass/fail test.

Strategies:

  new-session      a new aiohttp.ClientSession per poll: what Airflow's HttpSensorTrigger does
                   (``async with aiohttp.ClientSession()`` inside its poll loop); every poll pays
                   for a session, a connector and a TCP connection.
  shared-aiohttp   one aiohttp.ClientSession for the event loop, keep-alive connections reused
                   (the transport under CrewHook.aget_status).
  CrewHook         CrewHook.aget_status itself, end to end: request building, the shared session,
                   retry bookkeeping and parsing the record into a CrewStatus.
  shared-httpx     one httpx.AsyncClient for the event loop, for comparison.

Every strategy reads the body and decodes the JSON, so the raw transports compare like for like.

    python benchmarks/trigger_poll_cpu.py [--polls 2000] [--concurrency 20] [--repeat 3] [--seconds 20]

Each figure is the median of ``--repeat`` runs (by client CPU per poll).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import httpx

from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.testing import CrewServiceProcess

CONN_ID = "crew_bench"
# One quick task, then one that runs for an hour: every polled execution is RUNNING with a full
# record (progress, last step, last executed task), like a real one mid-way.
BENCH_CREW = {
    "name": "bench",
    "inputs": ["topic"],
    "pending_seconds": 0.01,
    "tasks": [
        {"name": "research_task", "agent": "Researcher", "steps": 1, "step_seconds": 0.01},
        {"name": "writing_task", "agent": "Writer", "steps": 1, "step_seconds": 3600},
    ],
}

Poll = Callable[[str], Awaitable[object]]


def _cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of another process, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Figure:
    strategy: str
    mode: str
    polls: int
    client_cpu: float
    server_cpu: float
    wall: float

    def row(self) -> str:
        per = self.client_cpu / self.polls * 1e6
        server = self.server_cpu / self.polls * 1e6
        rate = self.polls / self.wall
        return (
            f"{self.strategy:<15} {self.mode:<14} {self.polls:>6} {per:>10.0f} {server:>11.0f} {rate:>9,.0f}"
        )


class Strategies:
    """The four ways to poll. Each method creates what it shares on first use; ``close()`` frees it."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.session: aiohttp.ClientSession | None = None
        self.client: httpx.AsyncClient | None = None
        self.hook: CrewHook | None = None

    def url(self, kickoff_id: str) -> str:
        return f"{self.base_url}/{kickoff_id}/status"

    async def new_session(self, kickoff_id: str) -> object:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url(kickoff_id), headers=self.headers) as resp,
        ):
            return json.loads(await resp.text())

    async def shared_aiohttp(self, kickoff_id: str) -> object:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256, limit_per_host=64))
        async with self.session.get(self.url(kickoff_id), headers=self.headers) as resp:
            return json.loads(await resp.text())

    async def crew_hook(self, kickoff_id: str) -> object:
        if self.hook is None:
            self.hook = CrewHook(CONN_ID)
        return await self.hook.aget_status(kickoff_id)

    async def shared_httpx(self, kickoff_id: str) -> object:
        if self.client is None:
            self.client = httpx.AsyncClient(limits=httpx.Limits(max_connections=256))
        resp = await self.client.get(self.url(kickoff_id), headers=self.headers)
        return json.loads(resp.text)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        self.hook = None


async def _sequential(poll: Poll, ids: list[str], count: int, deadline: float) -> int:
    done = 0
    while done < count and time.perf_counter() < deadline:
        await poll(ids[done % len(ids)])
        done += 1
    return done


async def _concurrent(poll: Poll, ids: list[str], count: int, deadline: float, workers: int) -> int:
    done = 0

    async def worker(offset: int) -> None:
        nonlocal done
        n = offset
        while done < count and time.perf_counter() < deadline:
            done += 1
            await poll(ids[n % len(ids)])
            n += 1

    await asyncio.gather(*(worker(i) for i in range(workers)))
    return done


async def _measure(
    name: str,
    poll_of: Callable[[Strategies], Poll],
    strategies: Strategies,
    ids: list[str],
    server_pid: int,
    args: argparse.Namespace,
) -> list[Figure]:
    figures = []
    poll = poll_of(strategies)
    modes: list[tuple[str, int]] = [("sequential", 1)]
    if args.concurrency > 1:
        modes.append((f"{args.concurrency} concurrent", args.concurrency))
    for mode, workers in modes:
        # Warm-up: imports, first connections, the connection lookup, code paths.
        await _sequential(poll, ids, args.warmup, time.perf_counter() + 30)
        runs = []
        for _ in range(args.repeat):
            server0 = _cpu_seconds(server_pid)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            deadline = wall0 + args.seconds
            if workers == 1:
                done = await _sequential(poll, ids, args.polls, deadline)
            else:
                done = await _concurrent(poll, ids, args.polls, deadline, workers)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            runs.append(Figure(name, mode, done, cpu, _cpu_seconds(server_pid) - server0, wall))
        # The median run by client CPU per poll: other load on the machine only ever adds.
        runs.sort(key=lambda f: f.client_cpu / max(f.polls, 1))
        figures.append(runs[len(runs) // 2])
    await strategies.close()
    return figures


async def _kickoffs(base_url: str, token: str, count: int) -> tuple[list[str], bytes]:
    """Start ``count`` executions; wait until all are RUNNING; return their ids and one record."""
    headers = {"Authorization": f"Bearer {token}"}
    ids = []
    async with aiohttp.ClientSession(headers=headers) as session:
        for i in range(count):
            async with session.post(f"{base_url}/kickoff", json={"inputs": {"topic": f"bench {i}"}}) as resp:
                resp.raise_for_status()
                ids.append((await resp.json())["kickoff_id"])
        deadline = time.monotonic() + 10
        for kickoff_id in ids:
            while True:
                async with session.get(f"{base_url}/{kickoff_id}/status") as resp:
                    body = await resp.read()
                if json.loads(body)["progress"]["completed"] >= 1 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
    return ids, body


STRATEGIES: list[tuple[str, Callable[[Strategies], Poll]]] = [
    ("new-session", lambda s: s.new_session),
    ("shared-aiohttp", lambda s: s.shared_aiohttp),
    ("CrewHook", lambda s: s.crew_hook),
    ("shared-httpx", lambda s: s.shared_httpx),
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--polls", type=int, default=2_000, help="polls per strategy and mode (max)")
    parser.add_argument("--concurrency", type=int, default=20, help="concurrent pollers (1: sequential only)")
    parser.add_argument("--seconds", type=float, default=20.0, help="time limit per strategy and mode")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per strategy and mode; the median is shown"
    )
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--executions", type=int, default=10, help="executions whose status is polled")
    parser.add_argument("--server-cpu", type=int, default=0, help="core for the service")
    parser.add_argument("--client-cpu", type=int, default=1, help="core for this client")
    args = parser.parse_args()
    # httpx logs every request at INFO (Airflow 3.0's logging config shows them): not what we measure.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    cores = os.cpu_count() or 1
    pin = hasattr(os, "sched_setaffinity") and cores > 1
    if pin:
        os.sched_setaffinity(0, {args.client_cpu % cores})
    server_cpus = {args.server_cpu % cores} if pin else None
    print(f"python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}, httpx {httpx.__version__}")
    client = args.client_cpu % cores if pin else "-"
    print(f"machine: {cores} cores; service pinned to {server_cpus}, client to {client}")
    print("client loop: default asyncio (as the triggerer runs it)")

    workdir = tempfile.TemporaryDirectory(prefix="crew-bench-")
    crew_file = os.path.join(workdir.name, "bench.json")
    with open(crew_file, "w") as fh:
        json.dump(BENCH_CREW, fh)
    service = CrewServiceProcess(crew_file, cpus=server_cpus)
    service.start()
    try:
        assert service.pid is not None
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = service.connection_json(
            status_path_style="contract", retry_limit=0
        )
        ids, record = asyncio.run(_kickoffs(service.base_url, service.org_token, args.executions))
        state = json.loads(record)["state"]
        print(f"polled: {len(ids)} {state} executions at {service.base_url}/{{id}}/status")
        print(f"status record: {len(record)} bytes of JSON")
        print(
            f"each row: median of {args.repeat} runs of up to {args.polls} polls (by client CPU per poll)\n"
        )
        print(
            f"{'strategy':<15} {'mode':<14} {'polls':>6} {'client µs':>10} {'server µs':>11} {'polls/s':>9}"
        )
        print(f"{'':<15} {'':<14} {'':>6} {'CPU/poll':>10} {'CPU/poll':>11} {'(wall)':>9}")
        figures: list[Figure] = []
        for name, poll_of in STRATEGIES:

            async def run(name: str = name, poll_of: Callable[[Strategies], Poll] = poll_of) -> list[Figure]:
                return await _measure(
                    name,
                    poll_of,
                    Strategies(service.base_url, service.org_token),
                    ids,
                    service.pid or 0,
                    args,
                )

            for figure in asyncio.run(run()):
                figures.append(figure)
                print(figure.row(), flush=True)
        counters = service.counters
        answers = counters["responses"]["status"]
        print(f"\nservice saw {counters['requests']['status']} status requests, answers {answers}")
        sequential = {f.strategy: f for f in figures if f.mode == "sequential"}
        if "new-session" in sequential and "shared-aiohttp" in sequential:
            new, shared = sequential["new-session"], sequential["shared-aiohttp"]
            ratio = (new.client_cpu / new.polls) / (shared.client_cpu / shared.polls)
            print(f"new session per poll costs {ratio:.1f}x the client CPU of a shared session (sequential)")
    finally:
        service.stop()
        workdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
