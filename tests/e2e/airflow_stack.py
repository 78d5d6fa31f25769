"""Real Airflow components for end-to-end tests: api-server, scheduler, dag-processor, triggerer.

Everything runs from the Airflow installation of the running interpreter, in a temporary
AIRFLOW_HOME with a SQLite database and the LocalExecutor, on a free loopback port. Each component
is started in its own process group and :meth:`AirflowStack.stop` kills every group it started,
whatever state the test left them in.

The stack authenticates as a real client does, on every Airflow 3 minor: SimpleAuthManager with one
configured user and a password written to its passwords file beforehand, a JWT from
``POST /auth/token``, and that token as ``Authorization: Bearer`` on every REST call. It does not rely
on ``simple_auth_manager_all_admins`` (Airflow 3.1.8 wants a token even in that mode). A browser logs
in to the UI with the same :attr:`AirflowStack.username` and :attr:`AirflowStack.password`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import requests

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
T = TypeVar("T")


# On the components' PYTHONPATH: modules their configuration names, alone in their folder so that
# nothing else here shadows a top-level import.
AIRFLOW_PATH = Path(__file__).resolve().parent / "airflow_path"

# What Airflow on SQLite and 2 CPUs needs under load (the fault suite's hundred task processes, the
# wake soak's 50 runs). A component whose write waits longer than sqlite3's 5 s for the lock exits
# ("database is locked"): wait up to 30 s (airflow_path/sqlite_connect_args.py), and in WAL mode
# (:meth:`AirflowStack.migrate` switches a stack with these settings to it) readers never block the
# one writer. Task processes then wait up to 60 s for the api-server's answer instead of 5 s, as
# Airflow's docs advise under high load, instead of failing their task after 5 tries. A dag-processor stalled on the lock for a minute (seen in the
# wake soak) must not kill its parse at 50 s and deactivate every DAG of the file as stale: it gets
# five minutes for both.
LOAD_SETTINGS = {
    "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "300",
    "AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD": "300",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(AIRFLOW_PATH), os.environ.get("PYTHONPATH")])),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "sqlite_connect_args.CONNECT_ARGS",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "sqlite_connect_args.CONNECT_ARGS",
    "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
}

# Airflow's bound on a deferring task's process, lowered so that a deferral settles in seconds (16 s
# instead of 40 s): the provider's hold before a trigger fires or an answer applies follows it
# (airflow_provider_crew.waiting.race.deferral_settle_seconds).
FAST_SETTLE = {"AIRFLOW__CORE__TASK_SUCCESS_OVERTIME": "5", "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1"}


def metadata_database(stack: contextlib.ExitStack) -> dict[str, str]:
    """Settings for Airflow's metadata database of a stack under load: SQLite tuned for load
    (:data:`LOAD_SETTINGS`; :meth:`AirflowStack.migrate` switches it to WAL), or, with
    ``CREW_E2E_POSTGRES=1``, PostgreSQL (``scripts/distributed-services.sh``, as in the distributed
    test; needs ``psycopg2`` and ``asyncpg``), stopped when ``stack`` closes.

    CI sets it where other Airflow stacks run beside a loaded one: on a busy machine SQLite's single
    writer can stall long enough that the scheduler's write gives up and the scheduler exits
    ("database is locked"), which says nothing about the provider. Airflow supports SQLite for
    trying it out, not for concurrent work.
    """
    if os.environ.get("CREW_E2E_POSTGRES") != "1":
        return dict(LOAD_SETTINGS)
    from tests.distributed.cluster import Services

    services = Services().start()  # fails the fixture, saying why, when PostgreSQL cannot start
    stack.callback(services.stop)
    settings = {
        name: value for name, value in LOAD_SETTINGS.items() if "SQL_ALCHEMY_CONNECT_ARGS" not in name
    }
    return {**settings, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": services.database_url}


def epoch(stamp: str) -> float:
    """An Airflow REST API timestamp (ISO 8601, ``Z`` or an offset) as epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.5) -> T:
    """Call ``check`` until it returns something truthy, or fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class AirflowStack:
    """Start, talk to (REST API v2) and stop one set of Airflow components.

    :param home: An empty directory to use as AIRFLOW_HOME (logs end up there too).
    :param dags_folder: The folder the dag-processor parses.
    :param env: Extra environment, e.g. ``AIRFLOW_CONN_*`` for the DAGs' connections.
    :param username: The one user of the stack, for the REST client and for a browser.
    :param role: That user's SimpleAuthManager role (``admin``, ``op``, ``user`` or ``viewer``).
    :param url_path: A path Airflow is served under (``[api] base_url``'s), e.g. ``/airflow``.
    """

    #: The api-server's worker processes, behind its one address.
    api_workers = 1

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        env: Mapping[str, str],
        *,
        username: str = "admin",
        role: str = "admin",
        url_path: str = "",
    ) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.username = username
        self.password = secrets.token_urlsafe(18)
        # SimpleAuthManager generates a password only for users missing from this file: writing ours
        # first makes the password known to the test without reading Airflow's output.
        passwords_file = home / "simple_auth_manager_passwords.json"
        passwords_file.write_text(json.dumps({username: self.password}))
        passwords_file.chmod(0o600)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}{url_path}"
        self.airflow = str(Path(sys.executable).with_name("airflow"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "CREW_"))}
        self.env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__CORE__DAGS_FOLDER=str(dags_folder),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__UNIT_TEST_MODE="False",
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__CORE__PARALLELISM="4",
            AIRFLOW__CORE__AUTH_MANAGER=(
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{username}:{role}",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords_file),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base_url}/execution/",
            AIRFLOW__API__BASE_URL=self.base_url,
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__PORT=str(self.port),
            # Every component must sign and check task tokens with the same key.
            AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(32),
            # Airflow 3.0 signs tokens with iss=None when no issuer is set, which PyJWT 2.10+ refuses
            # ("Issuer (iss) must be a string"): POST /auth/token answers 500. Airflow recommends it anyway.
            AIRFLOW__API_AUTH__JWT_ISSUER="airflow-provider-crew-tests",
            AIRFLOW__CORE__FERNET_KEY="",
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
            # Airflow's default: no test changes a DAG file once its stack runs, and parsing every file
            # every 5 s kept the dag-processor at 0.13 of a core per idle stack (0.03 at 30 s).
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="30",
            AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC="1",
            AIRFLOW__LOGGING__LOGGING_LEVEL="INFO",
            # Airflow 3.0's REST API returns an XCom value deserialized (as :meth:`xcom` asks) only with
            # this on; later versions no longer have the setting.
            AIRFLOW__API__ENABLE_XCOM_DESERIALIZE_SUPPORT="True",
            # The workers' and triggerer's log servers default to fixed ports (8793, 8794): take free
            # ones so two stacks (or anything else on this machine) never clash.
            AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
            AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
        )
        self.env.update(env)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.session = requests.Session()

    # -- lifecycle -------------------------------------------------------------------------------

    def migrate(self) -> None:
        """``airflow db migrate``. A SQLite database is a copy of the first one this Airflow installation
        migrated on this machine: a migration costs about 6 s of CPU, and CI starts about 35 stacks."""
        sqlite = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in self.env
        template = Path(tempfile.gettempdir()) / f"crew-e2e-migrated-{self._installation()}.db"
        if sqlite and template.exists():
            shutil.copyfile(template, self.home / "airflow.db")
        else:
            done = subprocess.run(
                [self.airflow, "db", "migrate"], env=self.env, capture_output=True, text=True, timeout=240
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"airflow db migrate failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
                )
            if sqlite:  # written whole, then renamed: a stack migrating beside this one reads it whole
                partial = template.with_suffix(f".{os.getpid()}.partial")
                shutil.copyfile(self.home / "airflow.db", partial)
                os.replace(partial, template)
        if "sqlite_connect_args" in self.env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", ""):
            self.use_wal()  # a SQLite stack set up for load (LOAD_SETTINGS)

    def _installation(self) -> str:
        """The Airflow installation's version and path, as a file name's part."""
        from importlib.metadata import version

        where = hashlib.sha256(self.airflow.encode()).hexdigest()[:12]
        return f"{version('apache-airflow')}-{where}"

    def use_wal(self) -> None:
        """Switch the SQLite database to WAL mode (the file keeps it): for a stack under load."""
        with contextlib.closing(sqlite3.connect(self.home / "airflow.db")) as database:
            mode = database.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        assert mode == "wal", f"SQLite refused WAL mode: {mode}"

    def start(self, components: Sequence[str] = COMPONENTS) -> None:
        """Start ``components`` (default: all four); with the api-server, wait for it and log in.

        :param components: A subset of :data:`COMPONENTS`, e.g. ``("api-server",)`` for a UI test.
        """
        unknown = set(components) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"Unknown Airflow components {sorted(unknown)}; choose from {COMPONENTS}")
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        for component in components:
            args = [self.airflow, component]
            if component == "api-server":
                args += ["--port", str(self.port), "--host", "127.0.0.1", "--workers", str(self.api_workers)]
            log = (self.home / "logs" / f"{component}.log").open("ab")  # a restart adds to the log
            self.processes[component] = subprocess.Popen(
                args,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: stop() kills its workers too
            )
            log.close()
        if "api-server" in components:
            wait_for(self._api_ready, timeout=120, what="the api-server to answer")
            self.login()

    def _api_ready(self) -> bool:
        self.check_alive()
        try:
            # /version needs no token: it tells "up" apart from "up and we are logged in".
            return self.session.get(f"{self.base_url}/api/v2/version", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def login(self) -> str:
        """Get a JWT for :attr:`username` from ``POST /auth/token`` and send it on every later call.

        :return: The access token (a browser test can reuse it; the password works as well).
        """
        response = self.session.post(
            f"{self.base_url}/auth/token",
            json={"username": self.username, "password": self.password},
            timeout=30,
        )
        if response.status_code not in (200, 201):
            raise AssertionError(
                f"POST /auth/token as {self.username!r} answered {response.status_code}: {response.text[:500]}"
            )
        token = str(response.json()["access_token"])
        self.session.headers["Authorization"] = f"Bearer {token}"
        return token

    def check_alive(self) -> None:
        """Fail fast, with the component's log tail, when a component died."""
        for component, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"airflow {component} exited with {process.returncode}:\n{self.log_tail(component)}"
                )

    def log_tail(self, component: str, size: int = 4000) -> str:
        path = self.home / "logs" / f"{component}.log"
        return path.read_bytes()[-size:].decode(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM every process group started here, then SIGKILL what is left after 15 s."""
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Workers and children may outlive the leader: kill the whole group regardless.
            _signal_group(process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        self.session.close()

    # -- REST API v2 -----------------------------------------------------------------------------

    #: Seconds to keep repeating a REST call while the api-server is swamped; 0: answer at once. Under
    #: load (the fault suite, the wake soak) Airflow on SQLite can hold a call past its 30 s: that is
    #: the load under test, not an answer. A read is repeated after a time-out, any call after a 500
    #: "Database error" (its transaction was rolled back), and :meth:`trigger` names its run so that
    #: it can repeat its POST too.
    patience = 0.0

    def api(
        self,
        method: str,
        path: str,
        expect: int | tuple[int, ...] = 200,
        *,
        idempotent: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """A REST call; repeated for up to :attr:`patience` seconds while the api-server is swamped.

        :param idempotent: Whether a call that timed out may be sent again (default: GET only).
        """
        deadline = time.monotonic() + self.patience
        repeatable = method == "GET" if idempotent is None else idempotent
        while True:
            try:
                return self._api_once(method, path, expect, **kwargs)
            except requests.Timeout:
                if not repeatable or time.monotonic() > deadline:
                    raise
            except AssertionError as error:
                if " answered 500" not in str(error) or "Database error" not in str(error):
                    raise
                if time.monotonic() > deadline:
                    raise
            time.sleep(2)

    def _api_once(self, method: str, path: str, expect: int | tuple[int, ...] = 200, **kwargs: Any) -> Any:
        response = self.session.request(method, f"{self.base_url}/api/v2{path}", timeout=30, **kwargs)
        codes = (expect,) if isinstance(expect, int) else expect
        if response.status_code not in codes:
            raise AssertionError(f"{method} {path} answered {response.status_code}: {response.text[:1000]}")
        if response.status_code == 404:
            return None  # an expected "not there (yet)"; its body is only an error message
        return response.json() if response.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 90) -> None:
        def parsed() -> bool:
            self.check_alive()
            response = self.session.get(f"{self.base_url}/api/v2/dags/{dag_id}", timeout=10)
            return response.status_code == 200

        wait_for(parsed, timeout=timeout, what=f"the dag-processor to parse {dag_id}")
        errors = self.api("GET", "/importErrors")
        assert not errors["import_errors"], errors

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}, idempotent=True)
        body = {"logical_date": None, "conf": dict(conf or {})}
        if not self.patience:
            return str(self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"])
        # A run named here: a POST repeated after a time-out finds it created (409) instead of
        # creating a second one.
        run_id = f"manual__{time.strftime('%Y-%m-%dT%H:%M:%S')}_{secrets.token_hex(4)}"
        deadline = time.monotonic() + self.patience
        while True:
            try:
                self.api(
                    "POST", f"/dags/{dag_id}/dagRuns", expect=(200, 409), json={**body, "dag_run_id": run_id}
                )
                return run_id
            except requests.Timeout:
                if time.monotonic() > deadline:
                    raise

    def dag_run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        tis = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in tis}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        entry = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            params={"deserialize": "true", "stringify": "false"},
        )
        return entry["value"]

    def hitl_path(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
        return f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails"

    def hitl_opened_at(self, dag_id: str, run_id: str, task_id: str) -> float:
        """When Airflow wrote the task's request for an answer (epoch seconds): the moment a person
        could answer it, without the lag of whoever looked for it."""
        detail = self.api("GET", self.hitl_path(dag_id, run_id, task_id))
        return epoch(detail["created_at"])

    def task_times(self, dag_id: str, run_id: str, task_id: str) -> tuple[float, float | None]:
        """When a task instance's try started and ended (epoch seconds; no end while it runs)."""
        ti = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
        assert ti["start_date"], ti
        return epoch(ti["start_date"]), epoch(ti["end_date"]) if ti["end_date"] else None

    def check_review_round_asked_at_the_pause(
        self, dag_id: str, run_id: str, round_number: int, paused_at: float
    ) -> None:
        """A review round's request opens as soon as Airflow runs the round after the crew paused.

        What the provider decides is asserted: the round's sensor (``review.wait_<n>``) ended within
        10 s of the crew pausing while it watched (the bound of every wait), and the round asked at its
        first status read, before any deferral. Between the sensor's end and the round's start is
        Airflow's scheduler starting the next task, which a loaded machine slows by seconds: printed,
        not bounded (CI read 11.6 s for the whole on a 2-core machine running three jobs).
        """
        wait_task, round_task = f"review.wait_{round_number}", f"review.round_{round_number}"
        wait_started, wait_ended = self.task_times(dag_id, run_id, wait_task)
        round_started, _ = self.task_times(dag_id, run_id, round_task)
        asked = self.hitl_opened_at(dag_id, run_id, round_task)
        assert wait_ended is not None, wait_task
        print(
            f"{round_task} asked {asked - paused_at:.1f}s after the crew paused: {wait_task} ended "
            f"{wait_ended - paused_at:.1f}s after the pause (it started {wait_started - paused_at:+.1f}s "
            f"from it), {round_task} started {round_started - wait_ended:.1f}s after that and asked "
            f"{asked - round_started:.1f}s into its run"
        )
        sensed = wait_ended - max(paused_at, wait_started)
        assert 0 <= sensed <= 10, f"{wait_task} ended {sensed:.1f}s after the pause it watched for"
        self.check_review_round_asked_at_its_first_read(dag_id, run_id, round_number)

    def check_review_round_asked_at_its_first_read(self, dag_id: str, run_id: str, round_number: int) -> None:
        """A round that started after the pause asks at its first status read: its one deferral, if
        any, waits for the answer (3.1-3.2), after the request (from the round's task log)."""
        log = self.task_log(dag_id, run_id, f"review.round_{round_number}")
        asked_at = log.find(f"Review round {round_number}: crew execution")
        deferred_at = log.find("as DEFERRED")
        assert asked_at >= 0 and (deferred_at == -1 or asked_at < deferred_at), log

    def log_folder(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Path:
        """Where Airflow writes a task instance's logs: ``attempt=N.log`` per try, and its trigger's
        beside it (``attempt=N.log.trigger.*.log``)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return folder / f"map_index={map_index}" if map_index >= 0 else folder

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """Every attempt's log of a task instance, as the task wrote it (JSON lines)."""
        folder = self.log_folder(dag_id, run_id, task_id)
        return "\n".join(path.read_text(errors="replace") for path in sorted(folder.glob("attempt=*.log")))

    def failures(self, dag_id: str, run_ids: Sequence[str], tail: int = 6000) -> str:
        """For an assertion message: the runs that did not succeed, their task states, and the end of
        each failed task's log and of the scheduler's and triggerer's logs."""
        parts = []
        for run_id in run_ids:
            if self.dag_run_state(dag_id, run_id) == "success":
                continue
            states = self.task_states(dag_id, run_id)
            parts.append(f"===== run {run_id}: {states}")
            for task_id, state in states.items():
                if state in ("failed", "upstream_failed", "up_for_retry"):
                    parts.append(
                        f"----- {task_id} ({state}) -----\n{self.task_log(dag_id, run_id, task_id)[-tail:]}"
                    )
        if parts:
            parts.append(self.scheduler_and_triggerer_logs(tail))
        return "\n".join(parts)

    def scheduler_and_triggerer_logs(self, tail: int = 4000) -> str:
        """For an assertion message: the end of the scheduler's and the triggerer's logs."""
        return "\n".join(f"----- {c} -----\n{self.log_tail(c, tail)}" for c in ("scheduler", "triggerer"))


@contextlib.contextmanager
def running_stack(
    home: Path,
    dags_folder: Path,
    env: Mapping[str, str],
    dag_ids: Sequence[str],
    components: Sequence[str] = COMPONENTS,
    env_for: Callable[[AirflowStack], Mapping[str, str]] | None = None,
) -> Iterator[AirflowStack]:
    """A migrated stack running ``components``, once its DAGs ``dag_ids`` are parsed; stopped on exit,
    with each component's log tail printed when the setup or the tests fail.

    :param env_for: More settings, from the stack before it starts (e.g. a connection to its address).
    """
    airflow = AirflowStack(home, dags_folder, env)
    if env_for is not None:
        airflow.env.update(env_for(airflow))
    airflow.patience = 60.0
    try:
        airflow.migrate()
        airflow.start(components)
        for dag_id in dag_ids:
            airflow.wait_for_dag(dag_id)
        yield airflow
    except BaseException:
        for component in airflow.processes:
            print(f"----- {component} -----\n{airflow.log_tail(component, 6000)}")
        raise
    finally:
        airflow.stop()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
