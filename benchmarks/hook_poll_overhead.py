"""The provider's own CPU per status poll, without the network.

``CrewHook.aget_status`` runs with the async transport's ``send`` replaced by one that returns a
canned ``200`` status record at once, so what is measured is the hook, the retry policy and the
reading of the record: the provider's part of a trigger's poll, without aiohttp and the service
(``benchmarks/trigger_poll_cpu.py`` measures the whole poll). Prints CPU µs per poll.

To compare trees, run it with ``PYTHONPATH`` at each checkout, interleaved, several times:

    python benchmarks/hook_poll_overhead.py [--polls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

CONN_ID = "crew_bench"
RECORD = json.dumps(
    {
        "state": "RUNNING",
        "status": "running",
        "result": None,
        "progress": {"completed": 1, "total": 2, "current_task": "writing_task"},
        "last_step": {"agent": "Writer", "thought": "x" * 200},
        "last_executed_task": {"name": "research_task", "output": "y" * 300},
    }
).encode()
HEADERS = {"Content-Type": "application/json", "Content-Length": str(len(RECORD))}


async def _polls(count: int, warmup: int) -> float:
    from airflow_provider_crew.hooks.crew import CrewHook

    hook = CrewHook(CONN_ID)
    for _ in range(warmup):
        await hook.aget_status("k-1")
    started = time.process_time()
    for _ in range(count):
        await hook.aget_status("k-1")
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--polls", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args()
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {
            "conn_type": "crew",
            "host": "http://127.0.0.1:9",
            "password": "bench-token-not-sent",
            "extra": {"status_path_style": "contract"},
        }
    )
    from airflow_provider_crew.hooks.client import transport
    from airflow_provider_crew.hooks.client.response import Response

    async def canned(self: object, call: object, limits: object) -> Response:
        return Response(200, HEADERS, RECORD)

    transport.AsyncTransport.send = canned  # type: ignore[method-assign,assignment]
    print(f"{asyncio.run(_polls(args.polls, args.warmup)):.1f} µs CPU per poll")


if __name__ == "__main__":
    main()
