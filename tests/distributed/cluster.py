"""A distributed Airflow deployment on one machine, for tests: PostgreSQL, Redis, CeleryExecutor.

:class:`Services` runs ``scripts/distributed-services.sh`` (PostgreSQL 15 and Redis from Debian's
packages, on loopback, data in a temporary directory). :class:`CeleryCluster` starts the
api-server, scheduler, dag-processor, and any number of Celery workers and triggerers from the
running interpreter's Airflow installation. Each component gets its own host name
(``[core] hostname_callable``) and its own log server port, as separate machines would have.

Every process is started in its own process group. :meth:`CeleryCluster.kill` SIGKILLs a
component as a machine failure would: its group and the groups of its descendants (Airflow runs
each task in a process group of its own). :meth:`CeleryCluster.stop` does the same to whatever is
left, whatever state the test left it in.

The REST client is the e2e :class:`AirflowStack`'s: it authenticates as a real client does, with a
token from ``POST /auth/token`` for a user name and password (no all-admins mode).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ..e2e.airflow_stack import AirflowStack, free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
SERVICES_SCRIPT = REPO / "scripts" / "distributed-services.sh"
HERE = Path(__file__).resolve().parent

# Fast failover, with Airflow's own settings (defaults in brackets):
FAILOVER_SETTINGS = {
    # A triggerer heartbeats every 2 s [5] and is taken for dead after 10 s without one [30]; its
    # triggers then go to a live triggerer.
    "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
    "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
    # A running task whose worker stopped heartbeating for 20 s [300] is failed (up for retry);
    # the scheduler looks for such tasks every 5 s [10].
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
}


class ServicesUnavailable(RuntimeError):
    """PostgreSQL or Redis could not be installed or started here."""


class Services:
    """PostgreSQL and Redis, started and stopped (by pid) through ``scripts/distributed-services.sh``."""

    def __init__(self) -> None:
        # Not pytest's tmp_path: that is private to root (0700), and PostgreSQL runs as `postgres`.
        self.dir = Path(tempfile.mkdtemp(prefix="crew-dist-services-"))
        self.values: dict[str, str] = {}

    def start(self) -> Services:
        try:
            done = subprocess.run(
                ["bash", str(SERVICES_SCRIPT), "start", str(self.dir)],
                capture_output=True,
                text=True,
                timeout=600,  # may apt-get install first
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ServicesUnavailable(f"{SERVICES_SCRIPT.name} start: {error}") from error
        if done.returncode != 0:
            self.stop()  # whatever did start
            raise ServicesUnavailable((done.stderr or done.stdout).strip()[-1500:])
        for line in (self.dir / "services.env").read_text().splitlines():
            name, _, value = line.partition("=")
            self.values[name] = value
        return self

    @property
    def database_url(self) -> str:
        return self.values["PG_URL"]

    @property
    def broker_url(self) -> str:
        return self.values["REDIS_URL"]

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(SERVICES_SCRIPT), "stop", str(self.dir)],
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Component:
    """One Airflow process; its children are found through it (see :func:`_kill_tree`)."""

    name: str
    args: list[str]
    env: dict[str, str]
    killed_at: float | None = None
    # Every process seen under it, so none is left behind when its parent exits first.
    known: dict[int, psutil.Process] = field(default_factory=dict)


class CeleryCluster(AirflowStack):
    """Airflow with the CeleryExecutor on PostgreSQL and Redis, several workers and triggerers.

    Built on the e2e :class:`AirflowStack`: the same base configuration, login (a token from
    ``POST /auth/token`` with a user name and password) and REST helpers.

    :param home: An empty directory to use as AIRFLOW_HOME (component logs go to ``home/logs``).
    :param dags_folder: The folder the dag-processor parses.
    :param services: Started :class:`Services`.
    :param env: Extra environment for every component, e.g. ``AIRFLOW_CONN_*``.
    :param workers: How many Celery workers (``worker-1``...).
    :param triggerers: How many triggerers (``triggerer-1``...).
    :param worker_concurrency: Task slots per worker.
    """

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        services: Services,
        env: Mapping[str, str],
        *,
        workers: int = 2,
        triggerers: int = 2,
        worker_concurrency: int = 4,
    ) -> None:
        database = services.database_url
        super().__init__(
            home,
            dags_folder,
            {
                # The module behind [core] hostname_callable.
                "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "component_hostname.hostname",
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CORE__PARALLELISM": "32",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database,
                "AIRFLOW__CELERY__BROKER_URL": services.broker_url,
                "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + database,
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(worker_concurrency),
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                **FAILOVER_SETTINGS,
                **env,
            },
        )
        self.components: dict[str, Component] = {}

        def add(name: str, args: list[str], **own_env: str) -> None:
            component_env = {**self.env, "CREW_DIST_HOSTNAME": name, **own_env}
            self.components[name] = Component(name, [self.airflow, *args], component_env)

        add("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"])
        add("scheduler", ["scheduler"])
        add("dag-processor", ["dag-processor"])
        for n in range(1, triggerers + 1):
            # Each triggerer serves its logs on its own port, as on its own machine.
            add(f"triggerer-{n}", ["triggerer"], AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()))
        for n in range(1, workers + 1):
            add(
                f"worker-{n}",
                # Celery node names must differ too; mingle and gossip only cost CPU here.
                [
                    "celery",
                    "worker",
                    "--celery-hostname",
                    f"worker-{n}@%h",
                    "--without-mingle",
                    "--without-gossip",
                ],
                AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            )

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, components: Sequence[str] = ()) -> None:
        """Start every component (``components`` is ignored: this cluster has its own list), then log in."""
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        for component in self.components.values():
            with (self.home / "logs" / f"{component.name}.log").open("wb") as log:
                self.processes[component.name] = subprocess.Popen(
                    component.args,
                    env=component.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group
                )
        wait_for(self._api_ready, timeout=180, what="the api-server to answer")
        self.login()

    def check_alive(self) -> None:
        """Fail fast, with its log tail, when a component died that the test did not kill."""
        for name, process in self.processes.items():
            if self.components[name].killed_at is None and process.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {process.returncode}:\n{self.log_tail(name)}")

    def kill(self, name: str) -> float:
        """SIGKILL a component and every process under it, as if its machine died; returns the time."""
        component = self.components[name]
        component.killed_at = time.monotonic()
        _kill_tree(component, self.processes[name], signal.SIGKILL)
        self.processes[name].wait(timeout=30)
        return component.killed_at

    def stop(self) -> None:
        """SIGTERM every component's process tree, then SIGKILL what is left after 15 s."""
        for name, process in self.processes.items():
            _kill_tree(self.components[name], process, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for name, process in self.processes.items():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            _kill_tree(self.components[name], process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self.session.close()

    # -- REST API v2, for mapped tasks -----------------------------------------------------------

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        return list(self.api("GET", path, params={"limit": 100})["task_instances"])

    def xcom_value(self, dag_id: str, run_id: str, task_id: str, map_index: int, key: str) -> Any:
        """An XCom value of one (mapped) task instance, or None while there is none."""
        entry = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            expect=(200, 404),
            params={"map_index": map_index, "deserialize": "true", "stringify": "false"},
        )
        return None if entry is None else entry["value"]

    def task_log_records(
        self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int
    ) -> dict[str, Any] | None:
        """One try's log as the REST API answers it (records with their error details), or None."""
        return self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            expect=(200, 404),
            params={"map_index": map_index, "full_content": "true"},
            headers={"Accept": "application/json"},
        )

    def task_log(self, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
        """The text of one try's log, as the UI shows it ("" while there is none)."""
        body = self.task_log_records(dag_id, run_id, task_id, map_index, try_number)
        if body is None:
            return ""
        content = body["content"]
        if isinstance(content, str):
            return content
        return "\n".join(line.get("event", "") if isinstance(line, dict) else str(line) for line in content)


def _kill_tree(component: Component, process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the component's process group, and each process under it by pid.

    Airflow's task supervisor puts each task in a process group of its own, so the component's
    group alone would leave running tasks behind. Processes seen once are remembered (psutil checks
    that a pid was not reused before signalling), so a later SIGKILL still reaches children whose
    parent already exited.
    """
    with contextlib.suppress(psutil.Error):
        component.known.setdefault(process.pid, psutil.Process(process.pid))
    for known in list(component.known.values()):
        with contextlib.suppress(psutil.Error):
            for child in known.children(recursive=True):
                component.known.setdefault(child.pid, child)
    if process.poll() is None:  # not reaped yet: the group id is still ours
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
    for known in component.known.values():
        with contextlib.suppress(psutil.Error):
            known.send_signal(sig)
