"""Serving with uvicorn: in a background thread with its own event loop, or in the foreground (CLI).

The subprocess runner, :class:`~.process.CrewServiceProcess`, is in :mod:`.process`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .crews import CrewSource, load_crew
from .faults import FaultRule, Faults
from .handle import DEFAULT_ORG_TOKEN, DEFAULT_USER_TOKEN, CrewServiceHandle
from .process import CrewServiceProcess  # re-exported: it used to live here
from .webhooks import WebhookReceiver

__all__ = ["DEFAULT_CREWS", "CrewServiceProcess", "LocalCrewService", "build_app", "serve_forever"]

T = TypeVar("T")

# Served when no crew is named: the first is also at the root path.
DEFAULT_CREWS = ("research", "review", "structured")

CrewArg = CrewSource | Sequence[CrewSource] | None


def _crew_list(crews: CrewArg) -> list[Any]:
    if crews is None:
        return list(DEFAULT_CREWS)
    if isinstance(crews, str | Path | Mapping) or not isinstance(crews, Sequence):
        return [crews]
    return list(crews)


def build_app(
    crews: CrewArg = None,
    *,
    org_token: str = DEFAULT_ORG_TOKEN,
    user_token: str = DEFAULT_USER_TOKEN,
    status_path: str = "both",
    speed: float = 1.0,
    faults: Iterable[FaultRule | Mapping[str, Any]] | Faults = (),
    webhook_timeout: float = 5.0,
    stop_endpoint: str = "enabled",
) -> Any:
    """Build the ASGI app (``CrewServiceApp``) for any ASGI server.

    ``stop_endpoint``: "enabled" serves ``POST /stop/{kickoff_id}``; "absent" answers it as an
    unknown path (404) and "405" as a refused method, as an older or third-party service would.
    """
    from .app import CrewServiceApp

    store = faults if isinstance(faults, Faults) else Faults(faults)
    return CrewServiceApp(
        [load_crew(c) for c in _crew_list(crews)],
        org_token=org_token,
        user_token=user_token,
        status_path=status_path,
        speed=speed,
        faults=store,
        webhook_timeout=webhook_timeout,
        stop_endpoint=stop_endpoint,
    )


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _uvicorn_config(app: Any, *, quiet: bool) -> Any:
    import uvicorn

    try:
        import httptools  # noqa: F401  # the fast parser; h11 is the pure-Python fallback

        http = "httptools"
    except ImportError:  # pragma: no cover
        http = "h11"
    kwargs: dict[str, Any] = {
        "http": http,
        "lifespan": "on",
        "access_log": False,
        "log_level": "warning",
        "proxy_headers": False,
        "server_header": False,
        "timeout_keep_alive": 30,
        "backlog": 4096,
    }
    if quiet:
        # In-process: do not reconfigure the host program's (pytest's) logging.
        kwargs["log_config"] = None
    return uvicorn.Config(app, **kwargs)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening before the loop runs: early clients queue in the backlog instead of being refused.
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _ThreadServer:
    """uvicorn.Server tuned for start/stop inside tests: stops on an event, not a 0.1 s tick."""

    def __init__(self, config: Any) -> None:
        import uvicorn

        outer = self

        class Server(uvicorn.Server):
            async def main_loop(self) -> None:
                await outer.stop_event.wait()

            async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                for server in self.servers:
                    server.close()
                for connection in list(self.server_state.connections):
                    connection.shutdown()  # idle keep-alive connections close at once
                deadline = time.monotonic() + 2.0
                while self.server_state.connections and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                for task in list(self.server_state.tasks):
                    task.cancel()
                await self.lifespan.shutdown()

        self.stop_event = asyncio.Event()
        self.server = Server(config)


class LocalCrewService(CrewServiceHandle):
    """The service on a free loopback port, served by a background thread with its own event loop.

    >>> with LocalCrewService("review") as svc:
    ...     requests.get(svc.base_url + "/inputs", headers=svc.auth_headers())

    ``crews`` is one crew or a list (file paths, built-in names, dicts or CrewSpec); the first is
    served at the root, each also at ``/crews/<name>``. State lives in memory only.
    """

    def __init__(
        self,
        crews: CrewArg = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        org_token: str = DEFAULT_ORG_TOKEN,
        user_token: str = DEFAULT_USER_TOKEN,
        status_path: str = "both",
        speed: float = 1.0,
        faults: Iterable[FaultRule | Mapping[str, Any]] = (),
        webhook_timeout: float = 5.0,
        startup_timeout: float = 10.0,
        stop_endpoint: str = "enabled",
    ) -> None:
        self.host = host
        self.org_token = org_token
        self.user_token = user_token
        self.startup_timeout = startup_timeout
        self._faults = Faults(faults)
        self.app = build_app(
            crews,
            org_token=org_token,
            user_token=user_token,
            status_path=status_path,
            speed=speed,
            faults=self._faults,
            webhook_timeout=webhook_timeout,
            stop_endpoint=stop_endpoint,
        )
        self._requested_port = port
        self.port = 0
        self.base_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: _ThreadServer | None = None
        self._error: BaseException | None = None
        self._receiver: WebhookReceiver | None = None
        self.startup_seconds: float | None = None

    # -- lifecycle
    def start(self) -> LocalCrewService:
        """Start serving; returns once the port answers (raises if that takes > startup_timeout)."""
        if self._thread is not None:
            return self
        started = time.perf_counter()
        sock = _bind(self.host, self._requested_port)
        self.port = sock.getsockname()[1]
        self.base_url = _url(self.host, self.port)
        self._runner = _ThreadServer(_uvicorn_config(self.app, quiet=True))
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(sock, ready), name=f"crew-service-{self.port}", daemon=True
        )
        self._thread.start()
        if not ready.wait(self.startup_timeout) or self._error is not None:
            self.stop()
            raise RuntimeError(f"local crew service did not start: {self._error!r}")
        self.startup_seconds = time.perf_counter() - started
        return self

    def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        loop = _new_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        runner = self._runner
        assert runner is not None

        async def main() -> None:
            serving = asyncio.ensure_future(runner.server.serve(sockets=[sock]))
            while not runner.server.started and not serving.done():
                await asyncio.sleep(0.002)
            ready.set()
            await serving

        try:
            loop.run_until_complete(main())
        except BaseException as exc:  # SystemExit from a failed lifespan startup, too
            self._error = exc
        finally:
            ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                sock.close()

    def stop(self) -> None:
        """Stop serving, cancel running executions and stop the webhook receiver (idempotent)."""
        thread, loop, runner = self._thread, self._loop, self._runner
        if thread is not None and loop is not None and runner is not None and thread.is_alive():
            runner.server.should_exit = True
            with contextlib.suppress(RuntimeError):  # the loop may have closed already
                loop.call_soon_threadsafe(runner.stop_event.set)
            thread.join(timeout=10)
        self._thread = None
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None

    def __enter__(self) -> LocalCrewService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def call_in_loop(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn`` in the serving loop (state is only touched there) and return its result."""
        loop = self._loop
        if loop is None or not self.running or loop.is_closed():
            return fn()
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return fut.result(timeout)

    def run_coroutine(self, coro: Any, timeout: float = 10.0) -> Any:
        loop = self._loop
        if loop is None or not self.running:
            raise RuntimeError("the service is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    # -- CrewServiceHandle
    @property
    def faults(self) -> Faults:
        return self._faults

    @property
    def counters(self) -> dict[str, Any]:
        snap = self.call_in_loop(self.app.counters.snapshot)
        snap["faults"] = self._faults.counts
        return snap

    @property
    def executions(self) -> dict[str, dict[str, Any]]:
        return self.call_in_loop(lambda: {k: ex.snapshot() for k, ex in self.app.engine.executions.items()})

    @property
    def webhook_deliveries(self) -> list[dict[str, Any]]:
        return self.call_in_loop(lambda: self.app.sender.deliveries)

    def sent_events(self, kickoff_id: str) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            stream = self.app.engine.executions[kickoff_id].events
            return list(stream.sent) if stream is not None else []

        return self.call_in_loop(read)

    def reset(self) -> None:
        if self.running:
            self.run_coroutine(self.app.reset())
        if self._receiver is not None:
            self._receiver.clear()

    def configure(
        self, *, status_path: str | None = None, speed: float | None = None, stop_endpoint: str | None = None
    ) -> dict[str, Any]:
        def apply() -> dict[str, Any]:
            if status_path is not None:
                self.app.status_path = status_path
            if speed is not None:
                self.app.engine.speed = speed
            if stop_endpoint is not None:
                self.app.stop_endpoint = stop_endpoint
            return self.app.config()

        return self.call_in_loop(apply)

    @property
    def webhooks(self) -> WebhookReceiver:
        """A webhook receiver on a free port, started on first use and stopped with the service."""
        if self._receiver is None:
            self._receiver = WebhookReceiver(self.host if ":" not in self.host else "127.0.0.1").start()
        return self._receiver


# --------------------------------------------------------------------------------------------------
# Foreground (CLI)


def serve_forever(
    app: Any,
    host: str,
    port: int,
    announce: Callable[[str], None],
) -> None:
    """Serve in the foreground until SIGINT/SIGTERM; ``announce(base_url)`` once accepting."""
    import uvicorn

    sock = _bind(host, port)
    base_url = _url(host, sock.getsockname()[1])
    server = uvicorn.Server(_uvicorn_config(app, quiet=False))

    async def main() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.002)
        if server.started:
            announce(base_url)
        await serving

    loop = _new_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        sock.close()
