"""The service in a subprocess: ``python -m airflow_provider_crew.testing serve``, steered over HTTP."""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .faults import FaultRule
from .handle import DEFAULT_ORG_TOKEN, DEFAULT_USER_TOKEN, RemoteCrewService, wait_until

__all__ = ["CrewServiceProcess"]

# The first line of the CLI's banner: how the parent learns the port the child listens on.
BANNER_RE = re.compile(r"crew-service listening on (http://\S+)")


class CrewServiceProcess(RemoteCrewService):
    """``python -m airflow_provider_crew.testing serve --port 0 ...`` in a subprocess.

    For tests that start real Airflow components (or need the service to outlive a thread).
    ``start()`` returns once ``GET /`` answers ``Healthy``. Steer it with ``.faults`` and inspect it
    with ``.counters`` / ``.executions`` over the control API.
    """

    def __init__(
        self,
        crews: Sequence[str | Path] | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        org_token: str = DEFAULT_ORG_TOKEN,
        user_token: str = DEFAULT_USER_TOKEN,
        status_path: str = "both",
        speed: float = 1.0,
        faults: Iterable[FaultRule | Mapping[str, Any]] = (),
        stop_endpoint: str = "enabled",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cpus: set[int] | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        super().__init__("http://pending", org_token, user_token)
        crew_args: list[str] = []
        if crews is not None:
            for crew in [crews] if isinstance(crews, str | Path) else crews:
                crew_args += ["--crew", str(crew)]
        fault_args: list[str] = []
        for rule in faults:
            data = rule.to_dict() if isinstance(rule, FaultRule) else dict(rule)
            data = {k: v for k, v in data.items() if k not in ("id", "fired", "remaining")}
            fault_args += ["--fault", json.dumps(data)]
        self.command = [
            sys.executable,
            "-m",
            "airflow_provider_crew.testing",
            "serve",
            "--host",
            host,
            "--port",
            str(port),
            "--status-path",
            status_path,
            "--org-token",
            org_token,
            "--user-token",
            user_token,
            "--speed",
            str(speed),
            *(["--stop-endpoint", stop_endpoint] if stop_endpoint != "enabled" else []),
            *crew_args,
            *fault_args,
            *extra_args,
        ]
        self.env = dict(os.environ if env is None else env)
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.cpus = cpus
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[str] | None = None
        self.output: collections.deque[str] = collections.deque(maxlen=500)
        self.startup_seconds: float | None = None

    def start(self) -> CrewServiceProcess:
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        if self.cpus:
            os.sched_setaffinity(self.proc.pid, self.cpus)
        lines: queue.Queue[str | None] = queue.Queue()

        def drain() -> None:
            # Keep reading so the child never blocks on a full pipe; keep the tail for errors.
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain, daemon=True, name="crew-service-output").start()
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                line = ""
            if line is None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("crew-service did not start:\n" + "\n".join(self.output))
            match = BANNER_RE.search(line)
            if match:
                self.base_url = match.group(1)
                break
        self.control.base_url = self.base_url
        wait_until(self.is_healthy, timeout=max(deadline - time.monotonic(), 1.0), interval=0.02)
        self.startup_seconds = time.perf_counter() - started
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """Terminate (SIGTERM, then SIGKILL after ``timeout``); returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        return proc.returncode

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> CrewServiceProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
