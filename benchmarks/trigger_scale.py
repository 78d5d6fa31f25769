"""Many waits in one triggerer: N concurrent CrewStatusTrigger waits in one event loop.

Starts the local crew service (``crew-service serve``) in a subprocess pinned to one core, kicks
off executions that stay RUNNING for an hour, then runs each variant in a fresh child process
pinned to the other core. A child does what the triggerer does: it builds N triggers from their
kwargs and runs each ``trigger.run()`` async generator as a task in one asyncio loop (yielding to
the loop every few triggers while creating them, as the triggerer does), for ``--seconds``. It
measures:

- loop lag: how late a 10 ms timer fires (p50 / p99 / max over the run, creation included);
- RSS per wait: resident memory after the run minus before the triggers were built, over N;
- open fds at the end;
- polls/s achieved and intended: each wait's poll cycles are timed (the trigger's module sees an
  ``asyncio`` whose ``sleep`` notes the requested delay); a cycle of length c after a requested
  sleep d would have been c/d polls had every poll been instant, so intended = sum(c/d), achieved
  = the number of cycles (both over the run);
- client CPU per poll (this process's CPU over the run / polls), full GC collections and the
  longest one;
- errors: waits that ended (every execution runs for an hour, so any event is an error), tasks
  that raised, and warnings logged.

Variants: ``crew`` (CrewStatusTrigger, default poll intervals: 2 s growing to 15 s; ``crew-nopace``
without the first-poll pacer, ``crew-nocache`` with a connection lookup per poll), ``wake``
(CrewStatusTrigger as webhook wake defers it: one look after the first interval, then a safety
poll every 300 s; the webhooks that end these waits come through the api-server, not this loop) and ``http``
(Airflow's HttpSensorTrigger polling a URL that answers 404, every ``--http-interval`` seconds, a
new aiohttp session per poll as it does). Needs ``apache-airflow-providers-http`` (and
``requests-toolbelt``) importable; ``--http-path`` adds a ``pip install --target`` directory.

    python benchmarks/trigger_scale.py [--sizes 1000,10000] [--seconds 60] [--repeat 3] [--big 50000]
    python benchmarks/trigger_scale.py --quick          # N=1,000 only, 20 s per variant

Variants are interleaved (crew, http, crew, http, ...) so machine load hits them alike. Prints
figures; it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

CONN_ID = "crew_bench"
HTTP_CONN_ID = "http_bench"
BENCH_CREW = {
    "name": "bench",
    "inputs": ["topic"],
    "pending_seconds": 0.01,
    "tasks": [
        {"name": "research_task", "agent": "Researcher", "steps": 1, "step_seconds": 0.01},
        {"name": "writing_task", "agent": "Writer", "steps": 1, "step_seconds": 3600},
    ],
}
LAG_TICK = 0.010


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class CycleClock:
    """An ``asyncio`` stand-in for a trigger module: ``sleep`` times each wait's poll cycles."""

    def __init__(self, real: Any, started: float) -> None:
        self._real = real
        self.started = started
        self.last: dict[Any, tuple[float, float]] = {}
        self.cycles = 0
        self.intended = 0.0
        self.stopped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def sleep(self, delay: float, result: Any = None) -> Any:
        if not self.stopped:
            now = time.monotonic()
            task = self._real.current_task()
            previous = self.last.get(task)
            if previous is not None and previous[1] > 0:
                self.cycles += 1
                self.intended += (now - previous[0]) / previous[1]
            self.last[task] = (now, delay)
        return self._real.sleep(delay, result)


async def _child(args: argparse.Namespace) -> dict[str, Any]:
    """One variant in this process: N waits in this loop for ``args.seconds``."""
    logging.basicConfig(level=logging.WARNING)
    warnings = 0

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            nonlocal warnings
            warnings += 1

    logging.getLogger().addHandler(Count(logging.WARNING))
    ids: list[str] = json.loads(os.environ["BENCH_IDS"])
    n = args.n
    freeze = args.variant.endswith("-f")
    kind, _, without = args.variant.removesuffix("-f").partition("-no")
    if kind in ("crew", "wake"):
        from airflow_provider_crew.hooks import loop_connection
        from airflow_provider_crew.triggers import crew as module

        # Ablations, to see what a piece earns: "-nopace" polls first when the jitter says, without
        # FirstPollPacer; "-nocache" looks the connection up on every poll, not once per loop and
        # minute (here from an environment variable, the cheapest backend there is).
        if without == "pace":
            module.FirstPollPacer.delay = lambda self, wanted, now: wanted  # type: ignore[method-assign]
        elif without == "cache":
            loop_connection.CONNECTION_TTL_SECONDS = 0.0

        # "wake": the wait as webhook wake defers it: a first look, then a safety poll every 300 s.
        safety = 300.0 if kind == "wake" else 0.0

        def build(i: int) -> Any:
            now = time.time()
            return module.CrewStatusTrigger(
                kickoff_id=ids[i % len(ids)],
                crew_conn_id=CONN_ID,
                wait_for="completion",
                deadline=now + 3600,
                not_found_deadline=now + 60,
                execution_seen=True,
                safety_poll_interval=safety,
            )
    else:
        if args.http_path:
            import airflow

            sys.path.append(args.http_path)
            airflow.__path__.append(os.path.join(args.http_path, "airflow"))
        from airflow.providers.http.triggers import http as module  # type: ignore[no-redef]

        missing = os.environ["BENCH_MISSING_URL"]

        def build(i: int) -> Any:
            return module.HttpSensorTrigger(
                endpoint=f"{missing}-{i % len(ids)}/status",
                http_conn_id=HTTP_CONN_ID,
                headers={"Authorization": f"Bearer {os.environ['BENCH_TOKEN']}"},
                poke_interval=args.http_interval,
            )

    # Warm up outside the measurement: one wait to its first poll and back (imports, the
    # connection lookup, the shared session), then drop it.
    warm = build(0)
    warm_task = asyncio.ensure_future(_drain(warm.run()))
    await asyncio.sleep(0.1 if args.variant == "http" else 3.0)
    warm_task.cancel()
    await asyncio.gather(warm_task, return_exceptions=True)
    del warm, warm_task
    gc.collect()
    if freeze:
        # "-f": the process's heap so far (Airflow's imports, the warm-up) moved out of the collector's
        # sight, as Airflow's dag processor does before it forks: a full collection then scans only
        # what came after, the waits. Shows what the waits alone cost a full collection.
        gc.freeze()

    gc_runs: list[float] = []
    gc_started = [0.0]

    gc_at: list[tuple[float, float]] = []  # (seconds into the run, milliseconds) of each full GC
    gc_spans: list[tuple[float, float]] = []  # (start, end) of each full GC, monotonic
    wall0 = time.monotonic()  # set again when the run starts

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            gc_started[0] = time.perf_counter()
            gc_spans.append((time.monotonic(), float("inf")))
        else:
            gc_runs.append(time.perf_counter() - gc_started[0])
            gc_at.append((time.monotonic() - wall0, gc_runs[-1] * 1000))
            gc_spans[-1] = (gc_spans[-1][0], time.monotonic())

    gc.callbacks.append(on_gc)
    rss0, fds0 = _rss_bytes(), _open_fds()
    loop = asyncio.get_running_loop()
    clock = CycleClock(asyncio, time.monotonic())
    module.asyncio = clock  # type: ignore[attr-defined]
    lags: list[float] = []
    ticks: list[tuple[float, float]] = []  # (tick start, tick end), monotonic
    slow: list[tuple[float, float]] = []  # (seconds into the run, milliseconds) of lags over 50 ms

    async def lag_probe() -> None:
        while True:
            expected, started = loop.time() + LAG_TICK, time.monotonic()
            await asyncio.sleep(LAG_TICK)
            lags.append(loop.time() - expected)
            ticks.append((started, time.monotonic()))
            if lags[-1] > 0.05:
                slow.append((time.monotonic() - wall0, lags[-1] * 1000))

    cpu0, wall0 = time.process_time(), time.monotonic()
    probe = asyncio.ensure_future(lag_probe())
    tasks = []
    for i in range(n):
        tasks.append(asyncio.ensure_future(_drain(build(i).run())))
        if i % 20 == 19:
            await asyncio.sleep(0)
    created = time.monotonic() - wall0
    await asyncio.sleep(max(0.0, args.seconds - created))
    clock.stopped = True
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    rss1, fds1 = _rss_bytes(), _open_fds()
    ended = sum(1 for t in tasks if t.done() and not t.cancelled() and t.exception() is None)
    raised = sum(1 for t in tasks if t.done() and not t.cancelled() and t.exception() is not None)
    first_error = next(
        (repr(t.exception()) for t in tasks if t.done() and not t.cancelled() and t.exception()), ""
    )
    gc.callbacks.remove(on_gc)
    probe.cancel()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, probe, return_exceptions=True)
    return {
        "variant": args.variant,
        "n": n,
        "seconds": wall,
        "create_s": created,
        "lag_p50": _percentile(lags, 0.50) * 1000,
        "lag_p99": _percentile(lags, 0.99) * 1000,
        "lag_max": max(lags) * 1000 if lags else float("nan"),
        # The longest lag of a tick that no full collection overlapped: what the waits' own code held
        # the loop for.
        "lag_max_no_gc": max(
            (
                lag
                for lag, (a, b) in zip(lags, ticks, strict=True)
                if not any(s < b and a < e for s, e in gc_spans)
            ),
            default=float("nan"),
        )
        * 1000,
        "rss_per_wait": (rss1 - rss0) / n,
        "fds": fds1,
        "fds_added": fds1 - fds0,
        "polls": clock.cycles,
        "polls_s": clock.cycles / wall,
        "intended_s": clock.intended / wall,
        "cpu_per_poll_us": cpu / max(clock.cycles, 1) * 1e6,
        "cpu_share": cpu / wall,
        "full_gcs": len(gc_runs),
        "gc_max_ms": max(gc_runs, default=0.0) * 1000,
        "slow_lags": [(round(t, 1), round(ms)) for t, ms in slow][:20],
        "full_gcs_at": [(round(t, 1), round(ms)) for t, ms in gc_at][:20],
        "errors": ended + raised + warnings,
        "error_detail": f"ended={ended} raised={raised} warnings={warnings} {first_error}"[:300],
    }


async def _drain(events: Any) -> None:
    async for _ in events:
        return


def _run_child(variant: str, n: int, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--n",
        str(n),
        "--seconds",
        str(args.seconds),
        "--http-interval",
        str(args.http_interval),
    ]
    if args.http_path:
        command += ["--http-path", args.http_path]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.seconds * 4 + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} N={n} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


async def _kickoffs(base_url: str, token: str, count: int) -> list[str]:
    import aiohttp

    headers = {"Authorization": f"Bearer {token}"}
    ids: list[str] = []
    async with aiohttp.ClientSession(headers=headers) as session:

        async def one(i: int) -> None:
            async with session.post(f"{base_url}/kickoff", json={"inputs": {"topic": f"b{i}"}}) as resp:
                resp.raise_for_status()
                ids.append((await resp.json())["kickoff_id"])

        for start in range(0, count, 100):
            await asyncio.gather(*(one(i) for i in range(start, min(count, start + 100))))
        await asyncio.sleep(1.0)  # past the quick first task: every execution RUNNING, full record
    return ids


ROW = (
    "{variant:<6} {n:>6} {lag_p50:>7.2f} {lag_p99:>8.1f} {lag_max:>8.0f} {lag_max_no_gc:>7.0f} "
    "{rss_kib:>8.1f} {fds:>5} "
    "{polls_s:>8.0f} {intended_s:>8.0f} {ratio:>6.1%} {cpu_per_poll_us:>7.0f} {cpu_share:>5.0%} "
    "{full_gcs:>4} {gc_max_ms:>7.0f} {errors:>6}"
)
HEADER = (
    f"{'trig':<6} {'N':>6} {'lag p50':>7} {'lag p99':>8} {'lag max':>8} {'no GC2':>7} "
    f"{'RSS/wait':>8} {'fds':>5} "
    f"{'polls/s':>8} {'intended':>8} {'achvd':>6} {'CPU µs':>7} {'CPU':>5} {'GC2':>4} {'GC2 max':>7} "
    f"{'errors':>6}\n"
    f"{'':<6} {'':>6} {'ms':>7} {'ms':>8} {'ms':>8} {'max ms':>7} {'KiB':>8} {'':>5} {'':>8} {'':>8} {'':>6} "
    f"{'/poll':>7} {'':>5} {'':>4} {'ms':>7} {'':>6}"
)


def _print_row(r: dict[str, Any]) -> None:
    print(
        ROW.format(**r, rss_kib=r["rss_per_wait"] / 1024, ratio=r["polls_s"] / max(r["intended_s"], 1e-9)),
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000", help="numbers of waits (comma-separated)")
    parser.add_argument("--big", type=int, default=0, help="also run the crew trigger alone at this N")
    parser.add_argument("--seconds", type=float, default=60.0, help="run length per variant")
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; the median row is shown")
    parser.add_argument("--variants", default="crew,http")
    parser.add_argument("--http-interval", type=float, default=5.0, help="HttpSensorTrigger poke_interval")
    parser.add_argument("--http-path", default=os.environ.get("BENCH_HTTP_PATH", ""))
    parser.add_argument("--executions", type=int, default=2000, help="distinct executions polled")
    parser.add_argument("--quick", action="store_true", help="N=1,000, 20 s per variant (for CI)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    pin = hasattr(os, "sched_setaffinity") and cores > 1
    if args.child:
        if pin:
            os.sched_setaffinity(0, {1})
        args.variant = args.child
        print(json.dumps(asyncio.run(_child(args))))
        return 0
    if args.quick:
        args.sizes, args.seconds, args.big = "1000", 20.0, 0

    from airflow_provider_crew.testing import CrewServiceProcess

    sizes = [int(s) for s in args.sizes.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    if "http" in variants:
        probe = [sys.executable, "-c", "import airflow.providers.http.triggers.http"]
        if args.http_path:
            where = os.path.join(args.http_path, "airflow")
            probe[-1] = f"import sys, airflow; sys.path.append({args.http_path!r}); " + (
                f"airflow.__path__.append({where!r}); {probe[-1]}"
            )
        if subprocess.run(probe, capture_output=True).returncode != 0:
            print("HttpSensorTrigger not importable (install apache-airflow-providers-http): skipped")
            variants.remove("http")
    workdir = tempfile.TemporaryDirectory(prefix="crew-scale-")
    crew_file = os.path.join(workdir.name, "bench.json")
    with open(crew_file, "w") as fh:
        json.dump(BENCH_CREW, fh)
    service = CrewServiceProcess(crew_file, cpus={0} if pin else None, status_path="contract")
    service.start()
    try:
        ids = asyncio.run(_kickoffs(service.base_url, service.org_token, min(args.executions, max(sizes))))
        env = dict(os.environ)
        env.update(
            {
                f"AIRFLOW_CONN_{CONN_ID.upper()}": service.connection_json(status_path_style="contract"),
                f"AIRFLOW_CONN_{HTTP_CONN_ID.upper()}": json.dumps(
                    {"conn_type": "http", "host": service.base_url}
                ),
                "BENCH_IDS": json.dumps(ids),
                "BENCH_TOKEN": service.org_token,
                "BENCH_MISSING_URL": "/no-such-kickoff",
            }
        )
        print(
            f"python {sys.version.split()[0]}; {cores} cores; service pinned to core 0, each variant in a "
            f"fresh process pinned to core 1; {len(ids)} RUNNING executions polled; {args.seconds:g} s "
            f"per variant; load average {os.getloadavg()[0]:.1f}"
        )
        print(
            "crew: CrewStatusTrigger, poll interval 2 s growing to 15 s; "
            f"http: HttpSensorTrigger, poke_interval {args.http_interval:g} s, URL answering 404\n"
        )
        print(HEADER, flush=True)
        results: dict[tuple[str, int], list[dict[str, Any]]] = {}
        plan = [(v, n) for n in sizes for v in variants]
        if args.big:
            plan.append(("crew", args.big))
        for _ in range(args.repeat):
            for variant, n in plan:
                row = _run_child(variant, n, args, env)
                results.setdefault((variant, n), []).append(row)
                if args.repeat > 1:
                    print("  run: ", end="")
                _print_row(row)
        if args.repeat > 1:
            print(f"\nmedian of {args.repeat} (by p99 lag):")
            for rows in results.values():
                rows.sort(key=lambda r: r["lag_p99"])
                _print_row(rows[len(rows) // 2])
        for (variant, n), rows in results.items():
            for r in rows:
                if r["slow_lags"]:
                    print(f"{variant} N={n}: lags over 50 ms (s into the run, ms): {r['slow_lags']}")
                    print(f"{variant} N={n}: full GCs (s into the run, ms): {r['full_gcs_at']}")
                if r["errors"]:
                    print(f"{variant} N={n}: {r['error_detail']}")
        for n in sizes:
            crew, http = results.get(("crew", n)), results.get(("http", n))
            if crew and http:
                ratio = statistics.median(r["cpu_per_poll_us"] for r in crew) / statistics.median(
                    r["cpu_per_poll_us"] for r in http
                )
                print(f"N={n}: crew CPU per poll = {ratio:.2f}x HttpSensorTrigger's")
        answers = service.counters["responses"]["status"]
        print(f"service status answers: {answers}")
    finally:
        service.stop()
        workdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
