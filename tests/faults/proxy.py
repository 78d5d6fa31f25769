"""A TCP forwarder in front of the crew service, whose port can refuse connections for a while.

A real outage of the service's host: while :meth:`TcpForwarder.refuse` is in effect nothing
listens on the port (connections are refused by the kernel, ``ECONNREFUSED``) and every open
connection is closed. :meth:`TcpForwarder.accept` listens again on the same port. The crew service
behind it keeps its state (executions keep running), as a service behind a failed load balancer or
a host that lost its network would.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpForwarder:
    def __init__(self, target_host: str, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.port = 0
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.accepted = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def accept(self) -> TcpForwarder:
        """Listen (again) on the port, the first time on a free one."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(256)
        listener.settimeout(0.2)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._thread = threading.Thread(
            target=self._serve, args=(listener,), daemon=True, name="tcp-forwarder"
        )
        self._thread.start()
        return self

    def refuse(self) -> None:
        """Stop listening and close every open connection: new connections are refused."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    stop = refuse

    def _serve(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            self.accepted += 1
            with self._lock:
                self._open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Copy one direction; when either side ends, close both (HTTP does not half-close)."""
        with contextlib.suppress(OSError):
            src.settimeout(None)
            while data := src.recv(65536):
                dst.sendall(data)
        with self._lock:
            self._open.discard(src)
            self._open.discard(dst)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
