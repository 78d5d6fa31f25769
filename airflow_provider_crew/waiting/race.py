"""Airflow's stale executor-event race, in one place: how long an event must wait before it resumes a
deferred task on a worker.

The race (apache/airflow#67287 and its family; the variant every supported release still has is
#72716): when a deferred task instance is queued again before the scheduler has read the executor's
report of the deferring process's exit, Airflow fails it ("finished with state success, but the task
instance's state attribute is queued"). 3.2.2 and 3.3 tolerate the report while the instance is
SCHEDULED; the QUEUED variant is fixed on Airflow's main (#68741) but in no release up to 3.3.2; the
RUNNING variant (#72716) is open. So the bound applies on every supported Airflow, 3.0 to 3.3.

Where the race does not exist, nothing waits: a trigger that ends its task itself
(``TaskSuccessEvent``, :mod:`airflow_provider_crew.triggers.crew`) never queues the instance, and the
scheduler's check only fails instances that look queued or running. What still waits for this bound:
an event that resumes a worker (a failure, which the worker raises so that retries and callbacks
work; a success whose end needs a worker: callbacks, listeners such as OpenLineage's, asset outlets;
a review round, which must ask its next question), the review's answer trigger on 3.1-3.2, and the
webhook plugin, which applies no wake before it.

A deployment whose Airflow has the fix (a release, or a patched build) turns the hold off without a
release of the provider: ``[crew] deferral_race_hold = off`` (``auto``, the default, holds wherever the
race exists). Delete this module, and the holds that use it, once the oldest Airflow the provider
supports has the fix of #72716 (one candidate, #73546, stamps the try's ``workload_run_id`` on the
executor's events): then ``AIRFLOW_DEFERRAL_RACE_FIXED`` in ``_compat`` is where to say so first.
"""

from __future__ import annotations

import asyncio
import time

from airflow_provider_crew._compat import AIRFLOW_DEFERRAL_RACE_FIXED, conf, running_in_process_test
from airflow_provider_crew.exceptions import CrewConfigurationError

#: The Airflow config option that turns the hold off: ``[crew] deferral_race_hold``.
RACE_HOLD_SECTION, RACE_HOLD_OPTION = "crew", "deferral_race_hold"
#: Its values: ``auto`` holds wherever the race exists (the default); ``off`` never holds.
RACE_HOLD_VALUES = ("auto", "off")

# Airflow's supervisor checks a lingering task process against ``[core] task_success_overtime`` only
# between its waits (up to ``[workers] min_heartbeat_interval``), then sends SIGTERM and, this long
# after, SIGKILL.
KILL_ESCALATION_SECONDS = 5.0
# Past that, the worker still has to report the exit and the scheduler to read it: a scheduler loop or
# two, generously.
SETTLE_MARGIN_SECONDS = 5.0


def deferral_settle_seconds() -> float:
    """How long after a task defers (or parks) an event may resume it on a worker.

    The deferring process can linger after it deferred (listeners, log shipping; 5 s is common, more
    under load); Airflow bounds it: ``[core] task_success_overtime`` after the deferral, noticed within
    ``[workers] min_heartbeat_interval``, it is terminated, killed at most 5 s later. Add a margin for
    the executor to report the exit and the scheduler to read it: 40 s with Airflow's defaults. Zero in
    ``dag.test()``, which has no executor and so no race, on an Airflow that fixed the race, and with
    ``[crew] deferral_race_hold = off`` (:func:`race_hold_enabled`).
    """
    if AIRFLOW_DEFERRAL_RACE_FIXED or running_in_process_test() or not race_hold_enabled():
        return 0.0
    overtime = conf.getfloat("core", "task_success_overtime", fallback=20.0)
    check_interval = conf.getfloat("workers", "min_heartbeat_interval", fallback=5.0)
    heartbeat = conf.getfloat("scheduler", "scheduler_heartbeat_sec", fallback=5.0)
    return overtime + check_interval + KILL_ESCALATION_SECONDS + max(SETTLE_MARGIN_SECONDS, 2 * heartbeat)


def race_hold_enabled() -> bool:
    """Whether ``[crew] deferral_race_hold`` leaves the hold on (``auto``, the default) or turns it off
    (``off``, for an Airflow with apache/airflow#72716 fixed); any other value fails, naming the option."""
    value = conf.get(RACE_HOLD_SECTION, RACE_HOLD_OPTION, fallback="auto")
    setting = str(value).strip().lower()
    if setting not in RACE_HOLD_VALUES:
        raise CrewConfigurationError(
            f"[{RACE_HOLD_SECTION}] {RACE_HOLD_OPTION} = {value!r} is not known; use one of "
            f"{', '.join(map(repr, RACE_HOLD_VALUES))} (or AIRFLOW__CREW__DEFERRAL_RACE_HOLD in the "
            "environment)."
        )
    return setting == "auto"


async def hold_until(not_before: float) -> None:
    """Sleep until ``not_before`` (epoch seconds, the deferral plus :func:`deferral_settle_seconds`);
    return at once when it has passed."""
    delay = not_before - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
