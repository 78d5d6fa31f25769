"""How far past its cap a crew spends before its wait stops it, per waiting mode and spending rate.

The local crew service runs a crew that spends steadily (``tokens_per_second``) and never ends until it
is stopped. For each rate (500, 2,000 and 10,000 tokens a second by default) and each mode, one
execution with ``max_tokens`` of ``--cap`` (10,000) is waited for by the provider's own code, as a task
drives it:

- ``blocking``: the worker's wait (``Poller`` + ``wait_blocking`` over ``CrewHook.get_status``), then the
  task's stop (``waiting.stopping.stop``);
- ``deferred``: the worker's reads before it defers (until it knows the spending rate, and on while the
  cap is nearer than a deferral's gap: then it stops the crew itself), then ``CrewStatusTrigger.run`` in
  an event loop from the kwargs the task defers with (its budget and pace), which stops the crew at the
  cap;
- ``woken``: the same trigger with the webhook wake on (a 300 s safety poll): a wait with a cap keeps
  reading at its spending pace.

It prints the tokens spent past the cap when the stop landed (the service's own count after its
``POST /stop``), that overshoot as a share of the allowance (the larger of 10% of the cap and one second
of spending: the goal is at most 100%), and the status reads the wait made. Figures, not a pass/fail::

    python benchmarks/budget_overshoot.py [--rates 500,2000,10000] [--cap 10000] [--runs 1]

Not measured here: the gap between a task's deferral and its triggerer starting the trigger (seconds on
a loaded Airflow). A task reads on in the worker while its cap is nearer than that gap
(``DEFERRAL_GAP_SECONDS``), so the gap falls only where the cap is farther away than it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODES = ("blocking", "deferred", "woken")
CONN_ID = "crew_budget_bench"
LOG = logging.getLogger("budget_overshoot")


def spender(rate: float) -> dict[str, Any]:
    return {
        "name": f"spender_{int(rate)}",
        "inputs": ["topic"],
        "pending_seconds": 0.05,
        "step_seconds": 1,
        "tokens_per_second": rate,
        "tasks": [{"name": "spend", "agent": "Spender", "endless": True}],
    }


def wait_once(mode: str, cap: int) -> str:
    """Kick off one execution and wait for it with ``mode`` until its cap stops it; its kickoff id."""
    from airflow_provider_crew.hooks.crew import CrewHook
    from airflow_provider_crew.hooks.stop import stop
    from airflow_provider_crew.operators.wait_stop import read_before_deferring
    from airflow_provider_crew.triggers.crew import CrewStatusTrigger
    from airflow_provider_crew.waiting import stopping
    from airflow_provider_crew.waiting.budget import Budget
    from airflow_provider_crew.waiting.rules import Outcome, Poller, WaitFor, WaitResult, wait_blocking

    hook = CrewHook(CONN_ID)
    kickoff_id = hook.kickoff({"topic": "budgets"})
    now = time.time()
    poller = Poller(
        kickoff_id,
        wait_for=WaitFor.COMPLETION,
        deadline=now + 300,
        not_found_deadline=now + 60,
        poll_interval=2.0,
        max_poll_interval=15.0,
        log=LOG,
        kicked_off_at=now,
        budget=Budget(max_tokens=cap),
    )
    if mode == "blocking":
        result = wait_blocking(poller, lambda kid: hook.get_status(kid, deadline=poller.deadline))
        assert result.outcome is Outcome.OVER_BUDGET, result
        stop(hook, kickoff_id, stopping.OVER_BUDGET, LOG, patience=10, owner={})
        return kickoff_id
    # The task's reads before it defers: until it knows the rate, and on while the cap is near.
    step = read_before_deferring(
        poller, lambda: poller.poll(lambda: hook.get_status(kickoff_id, deadline=poller.deadline))
    )
    if isinstance(step, WaitResult):  # the cap came before a deferral would have: the task stops it
        assert step.outcome is Outcome.OVER_BUDGET, step
        stop(hook, kickoff_id, stopping.OVER_BUDGET, LOG, patience=10, owner={})
        return kickoff_id
    assert poller.budget is not None and poller.pace is not None
    trigger = CrewStatusTrigger(
        kickoff_id=kickoff_id,
        crew_conn_id=CONN_ID,
        wait_for=WaitFor.COMPLETION.value,
        deadline=poller.deadline,
        not_found_deadline=poller.not_found_deadline,
        execution_seen=poller.execution_seen,
        kicked_off_at=now,
        last_running_at=poller.last_running_at,
        safety_poll_interval=300.0 if mode == "woken" else 0.0,
        stop_crew=True,
        budget=poller.budget.to_kwargs(),
        pace=poller.pace.to_kwargs(),
    )

    async def first_event() -> Any:
        async for event in trigger.run():
            return event
        return None

    event = asyncio.run(first_event())
    assert event.payload["outcome"] == Outcome.OVER_BUDGET.value, event.payload
    assert event.payload["stopped"]["answer"] == "stopped", event.payload
    return kickoff_id


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="500,2000,10000", help="tokens a second (comma-separated)")
    parser.add_argument("--cap", type=int, default=10_000, help="max_tokens of each execution")
    parser.add_argument("--runs", type=int, default=1, help="executions per mode and rate (the median)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    from airflow_provider_crew.testing import LocalCrewService

    rates = [float(rate) for rate in args.rates.split(",") if rate]
    print(
        f"python {sys.version.split()[0]}; {os.cpu_count()} cores; cap {args.cap:,} tokens; "
        f"{args.runs} run(s) per cell (median); load average {os.getloadavg()[0]:.1f}"
    )
    columns = ("tokens/s", 9), ("over the cap", 13), ("of allowance", 13), ("reads", 6), ("to the stop", 12)
    print(f"{'mode':<9} " + " ".join(f"{name:>{width}}" for name, width in columns))
    for rate in rates:
        allowance = max(0.1 * args.cap, rate * 1.0)
        with LocalCrewService(spender(rate)) as service:
            os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = service.connection_json(
                status_path_style="contract"
            )
            for mode in MODES:  # interleaved: every mode meets the same machine
                overs, reads, seconds = [], [], []
                for _ in range(args.runs):
                    before = service.request_count("status")
                    began = time.monotonic()
                    kickoff_id = wait_once(mode, args.cap)
                    seconds.append(time.monotonic() - began)
                    reads.append(service.request_count("status") - before)
                    execution = service.executions[kickoff_id]
                    assert execution["state"] == "REVOKED", execution["state"]
                    overs.append(execution["usage_metrics"]["total_tokens"] - args.cap)
                over = statistics.median(overs)
                print(
                    f"{mode:<9} {rate:>9,.0f} {over:>13,.0f} {over / allowance:>12.0%} "
                    f"{statistics.median(reads):>6.0f} {statistics.median(seconds):>11.1f}s",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
