"""Real Airflow with the LocalExecutor whose components can be SIGKILLed and restarted.

Built on the e2e :class:`AirflowStack` (configuration, login, REST helpers) and the distributed
test's process handling (:func:`tests.distributed.cluster._kill_tree`: a component's process group
and every process seen under it, by pid). The LocalExecutor runs each task in a process group of
its own under the scheduler, so stopping a component by its group alone would leave tasks behind:
:meth:`FaultStack.stop` signals every process tree started here, killed and restarted ones included.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from ..distributed.cluster import FAILOVER_SETTINGS, CeleryCluster, Component, _kill_tree
from ..e2e.airflow_stack import COMPONENTS, LOAD_SETTINGS, AirflowStack, wait_for

# A restarted scheduler takes over the tasks of the one that died (defaults in brackets): the dead
# one is taken for dead 60 s after its last heartbeat [30], and the new one looks for orphaned
# tasks every 10 s [300]. Until then the dead scheduler's running tasks stay "running": the
# heartbeat timeout only fails tasks that the scheduler checking them queued itself. Not less than
# 60 s: with 20 s, a scheduler that stalled for 42 s beside two other CI jobs on this 2-core machine
# took its own job for dead and reset its own running tasks as orphans (the outage waits then
# needed Airflow retries that the suite rightly counts as failures).
SCHEDULER_FAILOVER_SETTINGS = {
    "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "60",
    "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "10",
}


class FaultStack(AirflowStack):
    """api-server, scheduler (LocalExecutor), dag-processor and triggerer; any of them can be killed.

    :param parallelism: LocalExecutor worker processes (``[core] parallelism``).
    """

    def __init__(self, home: Path, dags_folder: Path, env: Mapping[str, str], *, parallelism: int) -> None:
        super().__init__(
            home,
            dags_folder,
            {
                **FAILOVER_SETTINGS,
                **SCHEDULER_FAILOVER_SETTINGS,
                **LOAD_SETTINGS,
                "AIRFLOW__CORE__PARALLELISM": str(parallelism),
                "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(max(parallelism, 16)),
                **env,
            },
        )
        # Every process tree ever started here (restarts add to it), stopped in stop().
        self.started: list[tuple[Component, subprocess.Popen[bytes]]] = []
        self.components: dict[str, Component] = {}

    # A hundred task processes on SQLite can stall the api-server: repeat calls for up to 2 minutes.
    patience = 120.0

    # The distributed cluster's REST helpers for mapped task instances.
    task_instances = CeleryCluster.task_instances
    xcom_value = CeleryCluster.xcom_value
    task_log_records = CeleryCluster.task_log_records
    task_log = CeleryCluster.task_log

    def start(self, components: Sequence[str] = COMPONENTS) -> None:
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        for name in components:
            self._start_one(name)
        if "api-server" in components:
            wait_for(self._api_ready, timeout=180, what="the api-server to answer")
            self.login()

    def _start_one(self, name: str) -> None:
        args = [self.airflow, name]
        if name == "api-server":
            args += ["--port", str(self.port), "--host", "127.0.0.1", "--workers", "1"]
        component = Component(name, args, self.env)
        with (self.home / "logs" / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                args,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group
            )
        self.components[name] = component
        self.processes[name] = process
        self.started.append((component, process))
        component.known[process.pid] = psutil.Process(process.pid)  # stop() starts from it

    # The distributed cluster's own: fail fast on a component that died unkilled; SIGKILL one and
    # every process under it (its tasks too), returning the time.
    check_alive = CeleryCluster.check_alive
    kill = CeleryCluster.kill

    def restart(self, name: str) -> None:
        """Start a new process of a killed component."""
        assert self.components[name].killed_at is not None, f"{name} was not killed"
        self._start_one(name)

    def kill_task_process(self, ti_id: str) -> int:
        """SIGKILL one running task's process group (the task runner, as the OOM killer would).

        The task runner names itself ``airflow worker -- <task instance id>`` and leads its own
        process group; its supervisor (a LocalExecutor worker) stays alive and reports the death.
        """

        def find() -> int | None:
            for process in psutil.process_iter(["cmdline"]):
                cmdline = " ".join(process.info["cmdline"] or [])
                if f"airflow worker -- {ti_id}" in cmdline:
                    return process.pid
            return None

        pid = wait_for(find, timeout=60, what=f"the task process of task instance {ti_id}")
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """SIGTERM every process tree started here, then SIGKILL what is left after 15 s."""
        for component, process in self.started:
            _kill_tree(component, process, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for component, process in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            _kill_tree(component, process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self.session.close()
