"""What Airflow's metrics clients send, received in the test: a StatsD UDP listener and an OTLP/HTTP
metrics receiver, each telling which Airflow component sent what.

Both keep every sample they receive (thread-safe) and wait for a condition with a deadline
(:meth:`Received.wait_for`), never a hopeful sleep. A sample's ``component`` names the Airflow
component whose process tree sent it (``scheduler`` covers the LocalExecutor's task processes, the
workers: the scheduler itself emits no ``crew.*`` metric), found from the sending process (StatsD: the
owner of the UDP source port, from ``/proc``; OTLP: the export's ``process.pid`` resource attribute)
and its parent processes.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from ..e2e.airflow_stack import wait_for

T = TypeVar("T")

# name[,tag=value...]:value|type[|@rate][|#tag:value,...]: plain StatsD, InfluxDB-style tags in the
# name (statsd_influxdb_enabled) and DogStatsD tags after '#' (statsd_datadog_enabled).
STATSD_LINE = re.compile(
    r"^(?P<name>[^:|,]+)(?P<influx>(?:,[^:|]*)?):(?P<value>[^|]+)\|(?P<type>[a-z]+)"
    r"(?:\|@(?P<rate>[0-9.]+))?(?:\|#(?P<tags>.*))?$"
)


@dataclass(frozen=True)
class Sample:
    """One received value. ``kind``: ``c`` counter, ``ms`` timer, ``g`` gauge (StatsD's letters; OTLP's
    sums, histograms and gauges are given the same letters)."""

    name: str
    value: float
    kind: str
    tags: Mapping[str, str] = field(default_factory=dict)
    rate: float = 1.0
    component: str | None = None  # filled in when read (Received.samples): see Senders
    count: int = 1  # observations behind ``value``: an OTLP histogram's count (its ``value`` is their sum)
    sender: tuple[int, ...] = ()  # the sending process and its parents, as found at its receipt


def parse_statsd(line: str, sender: tuple[int, ...] = ()) -> Sample:
    """One StatsD line as a :class:`Sample`; a line that is not StatsD raises ``ValueError``."""
    match = STATSD_LINE.match(line.strip())
    if match is None:
        raise ValueError(f"not a StatsD line: {line!r}")
    tags: dict[str, str] = {}
    for pair in filter(None, match["influx"].split(",")):
        key, _, value = pair.partition("=")
        tags[key] = value
    for pair in filter(None, (match["tags"] or "").split(",")):
        key, _, value = pair.partition(":")
        tags[key] = value
    return Sample(
        name=match["name"],
        value=float(match["value"]),
        kind=match["type"],
        tags=tags,
        rate=float(match["rate"] or 1),
        sender=sender,
    )


class Received:
    """Samples collected from any thread, and waits on them with a deadline."""

    def __init__(self, senders: Senders | None = None) -> None:
        self.senders = senders or Senders()
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self.errors: list[str] = []  # what could not be parsed: a failing test shows it

    def add(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)

    def samples(self, name: str | None = None, **tags: str) -> list[Sample]:
        """Every sample so far, or those named ``name`` (exactly) with these tag values."""
        with self._lock:
            found = list(self._samples)
        return self._select(found, name, tags)

    def _select(self, found: list[Sample], name: str | None, tags: Mapping[str, str]) -> list[Sample]:
        if name is not None:
            found = [s for s in found if s.name == name]
        return [
            replace(s, component=self.senders.component(s.sender))
            for s in found
            if all(s.tags.get(k) == v for k, v in tags.items())
        ]

    def names(self, prefix: str = "") -> list[str]:
        return sorted({s.name for s in self.samples() if s.name.startswith(prefix)})

    def total(self, name: str, **tags: str) -> float:
        """A counter's total: the sum of its increments (for StatsD; OTLP's totals are kept per process)."""
        return sum(s.value for s in self.samples(name, **tags))

    def wait_for(self, check: Callable[[], T | None], *, timeout: float, what: str) -> T:
        """Call ``check`` until it returns something truthy, or fail at the deadline saying what was
        awaited and which crew metrics did arrive."""
        try:
            return wait_for(check, timeout=timeout, what=what, interval=0.2)
        except TimeoutError as error:
            crew = [n for n in self.names() if ".crew." in f".{n}"]
            raise AssertionError(
                f"{error}. Crew metrics received: {crew or 'none'}; {len(self.samples())} samples in all; "
                f"not understood: {self.errors[:5]}"
            ) from None

    def wait_for_total(self, name: str, at_least: float, *, timeout: float = 30, **tags: str) -> float:
        return self.wait_for(
            lambda: (total := self.total(name, **tags)) >= at_least and total,
            timeout=timeout,
            what=f"{name} {tags or ''} to reach {at_least:g}",
        )


# -- which component sent it ------------------------------------------------------------------------


class Senders:
    """Tells which process sent a sample, and which component's process tree that process is in.

    :attr:`components` maps the pid of each component's first process to its name: the stack fills it
    once its components run (a sample received earlier is named when it is read).
    """

    def __init__(self) -> None:
        self.components: dict[int, str] = {}
        self._by_port: dict[tuple[str, int], tuple[int, ...]] = {}
        self._by_pid: dict[int, tuple[int, ...]] = {}

    def sender(self, protocol: str, port: int) -> tuple[int, ...]:
        """The process (and its parents) owning the local ``protocol`` (``udp`` or ``tcp``) socket on
        ``port``: looked up at a datagram's receipt, while that socket is open. The process last found
        on the port is asked first (a StatsD client keeps its socket); a port can serve another
        process later."""
        inodes = _socket_inodes(protocol, port)
        known = self._by_port.get((protocol, port))
        if not (known and _holds(known[0], inodes)):
            senders = [chain[0] for chain in self._by_port.values()]  # those seen before, first
            pid = next((p for p in [*senders, *_pids()] if _holds(p, inodes)), None) if inodes else None
            if pid is None:
                return ()
            self._by_port[(protocol, port)] = known = tuple(_ancestors(pid))
        return known

    def of_pid(self, pid: int) -> tuple[int, ...]:
        """Process ``pid`` and its parents, as found the first time it was named (while it ran)."""
        if pid not in self._by_pid:
            chain = tuple(_ancestors(pid)) if os.path.exists(f"/proc/{pid}") else ()
            if not chain:
                return ()
            self._by_pid[pid] = chain
        return self._by_pid[pid]

    def component(self, sender: tuple[int, ...]) -> str | None:
        return next((self.components[pid] for pid in sender if pid in self.components), None)


def _socket_inodes(protocol: str, port: int) -> set[str]:
    """The ``socket:[inode]`` links of the local ``protocol`` sockets bound to ``port`` (Linux)."""
    inodes = set()
    for table in (f"/proc/net/{protocol}", f"/proc/net/{protocol}6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                    inodes.add(f"socket:[{fields[9]}]")
    return inodes


def _pids() -> Iterator[int]:
    return (int(proc.name) for proc in Path("/proc").iterdir() if proc.name.isdigit())


def _holds(pid: int, inodes: set[str]) -> bool:
    """Whether process ``pid`` has one of these sockets open."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return True
    return False


def _ancestors(pid: int) -> Iterator[int]:
    while pid > 1:
        yield pid
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        pid = int(re.search(r"^PPid:\s*(\d+)", status, re.M)[1])  # type: ignore[index]


# -- StatsD -----------------------------------------------------------------------------------------


class StatsdListener(Received):
    """A UDP StatsD server on 127.0.0.1 and a free port, in a thread."""

    def __init__(self, senders: Senders | None = None) -> None:
        super().__init__(senders)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._running = True
        self._thread = threading.Thread(target=self._serve, daemon=True, name="statsd-listener")
        self._thread.start()

    def env(self, **extra: str) -> dict[str, str]:
        """Airflow's settings that send its metrics here (plain StatsD unless ``extra`` says more)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            **extra,
        }

    def _serve(self) -> None:
        while self._running:
            try:
                data, (_, port) = self._sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            sender = self.senders.sender("udp", port)
            for line in data.decode(errors="replace").splitlines():  # a client may batch lines
                if not line.strip():
                    continue
                try:
                    self.add(parse_statsd(line, sender))
                except ValueError as error:
                    self.errors.append(str(error))

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=5)
        self._sock.close()


# -- OTLP/HTTP --------------------------------------------------------------------------------------


class OtlpReceiver(Received):
    """An OTLP/HTTP metrics receiver (``POST /v1/metrics``, protobuf) on 127.0.0.1, in a thread.

    The SDK exports cumulative values again at every interval: a counter's or a histogram's value is
    the latest export of each process's stream (told apart by the stream's start time, in
    nanoseconds), and :meth:`total` adds those up across processes. An export that cannot be decoded
    is kept in :attr:`errors` (answered 400); the next export of its process carries the same
    cumulative values again. :attr:`attributes` keeps every data
    point's attributes.
    """

    def __init__(self, senders: Senders | None = None) -> None:
        super().__init__(senders)
        # (name, attributes, the stream's start time: one per process) -> its latest cumulative sample
        self._latest: dict[tuple[Any, ...], Sample] = {}
        self.requests = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(ConnectionError):  # a task process may end mid-request
                    super().handle()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if len(body) < int(self.headers.get("Content-Length", 0)):
                    return  # the sender ended mid-request (a task process killed): nothing to decode
                try:
                    gzipped = self.headers.get("Content-Encoding") == "gzip"
                    receiver._export(gzip.decompress(body) if gzipped else body)
                    self.send_response(200)
                except Exception as error:
                    headers = {
                        k: self.headers[k] for k in ("Content-Type", "Content-Encoding", "Content-Length")
                    }
                    receiver.errors.append(f"{self.path} {headers} {len(body)} bytes: {error!r}")
                    self.send_response(400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="otlp")
        self._thread.start()

    def env(self, interval_ms: int = 1000) -> dict[str, str]:
        """Airflow's settings that export its OpenTelemetry metrics here every ``interval_ms``."""
        return {
            "AIRFLOW__METRICS__OTEL_ON": "True",
            "AIRFLOW__METRICS__OTEL_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__OTEL_PORT": str(self.port),
            "AIRFLOW__METRICS__OTEL_SSL_ACTIVE": "False",
            "AIRFLOW__METRICS__OTEL_INTERVAL_MILLISECONDS": str(interval_ms),
            # The OTel SDK's process detector: each export names its process (resource process.pid).
            "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "process",
        }

    def _export(self, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        self.requests += 1
        for resource in request.resource_metrics:
            pid = next((a.value.int_value for a in resource.resource.attributes if a.key == "process.pid"), 0)
            sender = self.senders.of_pid(pid) if pid else ()
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for kind, point, value, count in _points(metric):
                        attributes = {a.key: _any_value(a.value) for a in point.attributes}
                        sample = Sample(metric.name, value, kind, attributes, count=count, sender=sender)
                        key = (metric.name, tuple(sorted(attributes.items())), point.start_time_unix_nano)
                        with self._lock:
                            self._latest[key] = sample

    def samples(self, name: str | None = None, **tags: str) -> list[Sample]:
        with self._lock:
            found = list(self._latest.values())
        return self._select(found, name, tags)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _points(metric: Any) -> Iterator[tuple[str, Any, float, int]]:
    """(kind, data point, value, count) of an OTLP metric: a sum's or a gauge's value; a histogram's
    sum and count."""
    data = metric.WhichOneof("data")
    if data in ("sum", "gauge"):
        for point in getattr(metric, data).data_points:
            yield ("c" if data == "sum" else "g"), point, _number(point), 1
    elif data in ("histogram", "exponential_histogram"):
        for point in getattr(metric, data).data_points:
            yield "ms", point, float(point.sum), int(point.count)


def _number(point: Any) -> float:
    return float(point.as_int if point.WhichOneof("value") == "as_int" else point.as_double)


def _any_value(value: Any) -> str:
    kind = value.WhichOneof("value")
    return str(getattr(value, kind)) if kind else ""
