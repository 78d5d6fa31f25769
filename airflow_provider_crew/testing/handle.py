"""What a test holds on to: one interface for an in-process, a subprocess or an already running service.

:class:`CrewServiceHandle` gives the base URL, the tokens, Airflow connection helpers and waiting
helpers. :class:`RemoteCrewService` implements it over the ``/_control`` HTTP API, so a service
started elsewhere (CLI, another process) can be steered and inspected the same way.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from .faults import FaultRule, FaultsAPI

__all__ = [
    "DEFAULT_ORG_TOKEN",
    "DEFAULT_USER_TOKEN",
    "ControlAPIError",
    "ControlClient",
    "CrewServiceHandle",
    "RemoteCrewService",
    "RemoteFaults",
    "wait_until",
]

# Well-known test tokens: the service is for tests, never for real secrets.
DEFAULT_ORG_TOKEN = "crew-test-org-token"
DEFAULT_USER_TOKEN = "crew-test-user-token"

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 5.0,
    interval: float = 0.01,
    message: str | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy; raise TimeoutError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(message or f"condition not met within {timeout}s (last value: {value!r})")
        time.sleep(interval)


class CrewServiceHandle(ABC):
    """Common API of :class:`LocalCrewService`, :class:`CrewServiceProcess` and :class:`RemoteCrewService`."""

    base_url: str
    org_token: str
    user_token: str

    # -- inspection and steering (implemented in-process or over HTTP)
    @property
    @abstractmethod
    def faults(self) -> FaultsAPI:
        """Arm, list and clear faults."""

    @property
    @abstractmethod
    def counters(self) -> dict[str, Any]:
        """``{"requests": {endpoint: n}, "responses": {endpoint: {code: n}}, "auth": ..., "faults": ...}``."""

    @property
    @abstractmethod
    def executions(self) -> dict[str, dict[str, Any]]:
        """Snapshots of every execution by kickoff id (status fields, inputs, feedback history...)."""

    @property
    @abstractmethod
    def webhook_deliveries(self) -> list[dict[str, Any]]:
        """Every webhook the service tried to send (kind, url, payload, status, ok, error)."""

    @abstractmethod
    def sent_events(self, kickoff_id: str) -> list[dict[str, Any]]:
        """The events an execution's ``webhooks`` stream sent (or has pending), in emission order,
        each once; ``[]`` without a stream. KeyError for an unknown kickoff id."""

    @abstractmethod
    def reset(self) -> None:
        """Forget executions, deliveries, counters and faults."""

    @abstractmethod
    def configure(
        self, *, status_path: str | None = None, speed: float | None = None, stop_endpoint: str | None = None
    ) -> dict[str, Any]:
        """Change the status path style ("contract", "deployed", "both"), the speed factor, or the
        stop endpoint ("enabled", "absent": an unknown path, 404; "405": method not allowed)."""

    # -- conveniences built on the above
    def execution(self, kickoff_id: str) -> dict[str, Any]:
        return self.executions[kickoff_id]

    def request_count(self, endpoint: str) -> int:
        """Requests received on ``endpoint`` (health, inputs, kickoff, status, resume, stop, other)."""
        return int(self.counters["requests"].get(endpoint, 0))

    @property
    def stops(self) -> list[str]:
        """Kickoff ids stopped by ``POST /stop/{kickoff_id}`` (answered 200), in order."""
        return list(self.counters.get("stops", []))

    def url_for_crew(self, name: str) -> str:
        """Base URL of one crew when the service serves several (``/crews/<name>``)."""
        return f"{self.base_url}/crews/{name}"

    def token(self, kind: str = "org") -> str:
        if kind not in ("org", "user"):
            raise ValueError("token kind is 'org' or 'user'")
        return self.org_token if kind == "org" else self.user_token

    def auth_headers(self, kind: str = "org") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(kind)}"}

    def wait_for_state(self, kickoff_id: str, *states: str, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until the execution is in one of ``states`` (default: finished); returns its snapshot."""
        wanted = set(states or ("SUCCESS", "FAILED"))

        def reached() -> dict[str, Any] | None:
            snap = self.executions.get(kickoff_id)
            return snap if snap is not None and snap["state"] in wanted else None

        return wait_until(reached, timeout, message=f"execution {kickoff_id} never reached {sorted(wanted)}")

    def wait_for_deliveries(
        self, predicate: Callable[[list[dict[str, Any]]], T | None], timeout: float = 5.0
    ) -> T:
        """Wait until ``predicate(webhook_deliveries)`` is truthy (deliveries are recorded once finished)."""

        def check() -> T | None:
            done = [d for d in self.webhook_deliveries if d["ok"] is not None]
            return predicate(done)

        return wait_until(check, timeout, interval=0.02)

    # -- Airflow connection helpers (no Airflow import: plain strings)
    def connection_dict(self, token: str = "org", crew: str | None = None, **extra: Any) -> dict[str, Any]:
        conn: dict[str, Any] = {
            "conn_type": "crew",
            "host": self.url_for_crew(crew) if crew else self.base_url,
            "password": self.token(token),
        }
        if extra:
            conn["extra"] = extra
        return conn

    def connection_json(self, token: str = "org", crew: str | None = None, **extra: Any) -> str:
        """JSON for ``AIRFLOW_CONN_<ID>``: conn_type ``crew``, host = base URL, password = token."""
        return json.dumps(self.connection_dict(token, crew, **extra))

    def connection_uri(self, token: str = "org", crew: str | None = None) -> str:
        """The same connection as an Airflow URI (the host, a URL itself, is percent-encoded)."""
        host = self.url_for_crew(crew) if crew else self.base_url
        return f"crew://:{quote(self.token(token), safe='')}@{quote(host, safe='')}"

    def connection_env(
        self, conn_id: str = "crew_default", token: str = "org", crew: str | None = None, **extra: Any
    ) -> dict[str, str]:
        """``{"AIRFLOW_CONN_CREW_DEFAULT": <json>}``, ready for ``monkeypatch.setenv`` or a subprocess env."""
        return {f"AIRFLOW_CONN_{conn_id.upper()}": self.connection_json(token, crew, **extra)}


# --------------------------------------------------------------------------------------------------
# Over HTTP


class ControlAPIError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"control API answered HTTP {status}: {body}")
        self.status = status
        self.body = body


class ControlClient:
    """Tiny stdlib client for the ``/_control`` API (the service must not need requests/httpx)."""

    def __init__(self, base_url: str, org_token: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.org_token = org_token
        self.timeout = timeout

    def call(self, method: str, route: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.base_url}/_control/{route.lstrip('/')}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.org_token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise ControlAPIError(exc.code, exc.read().decode("utf-8", "replace")) from None


class RemoteFaults(FaultsAPI):
    """The fault builders, sent to a running service over its control API."""

    def __init__(self, client: ControlClient) -> None:
        self._client = client

    def add(self, rule: FaultRule | Mapping[str, Any]) -> dict[str, Any]:
        data = rule.to_dict() if isinstance(rule, FaultRule) else dict(rule)
        data = {k: v for k, v in data.items() if k not in ("id", "fired", "remaining")}
        return self._client.call("POST", "faults", data)["rules"][0]

    def clear(self) -> None:
        self._client.call("DELETE", "faults")

    def remove(self, rule_id: int) -> None:
        self._client.call("DELETE", f"faults/{rule_id}")

    @property
    def rules(self) -> list[dict[str, Any]]:
        return self._client.call("GET", "faults")["rules"]

    @property
    def counts(self) -> dict[str, int]:
        return self._client.call("GET", "faults")["counts"]


class RemoteCrewService(CrewServiceHandle):
    """A handle on a service running elsewhere (e.g. ``crew-service serve`` in another shell)."""

    def __init__(
        self, base_url: str, org_token: str = DEFAULT_ORG_TOKEN, user_token: str = DEFAULT_USER_TOKEN
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.org_token = org_token
        self.user_token = user_token
        self.control = ControlClient(self.base_url, org_token)
        self._faults = RemoteFaults(self.control)

    @property
    def faults(self) -> RemoteFaults:
        return self._faults

    @property
    def counters(self) -> dict[str, Any]:
        return self.control.call("GET", "counters")

    @property
    def executions(self) -> dict[str, dict[str, Any]]:
        return {e["kickoff_id"]: e for e in self.control.call("GET", "executions")["executions"]}

    def execution(self, kickoff_id: str) -> dict[str, Any]:
        try:
            return self.control.call("GET", f"executions/{kickoff_id}")
        except ControlAPIError as exc:
            if exc.status == 404:
                raise KeyError(kickoff_id) from None
            raise

    @property
    def webhook_deliveries(self) -> list[dict[str, Any]]:
        return self.control.call("GET", "webhooks")["deliveries"]

    def sent_events(self, kickoff_id: str) -> list[dict[str, Any]]:
        try:
            return self.control.call("GET", f"events/{kickoff_id}")["events"]
        except ControlAPIError as exc:
            if exc.status == 404:
                raise KeyError(kickoff_id) from None
            raise

    def reset(self) -> None:
        self.control.call("POST", "reset")

    def configure(
        self, *, status_path: str | None = None, speed: float | None = None, stop_endpoint: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if status_path is not None:
            body["status_path"] = status_path
        if speed is not None:
            body["speed"] = speed
        if stop_endpoint is not None:
            body["stop_endpoint"] = stop_endpoint
        return self.control.call("POST", "config", body)

    def is_healthy(self, timeout: float = 2.0) -> bool:
        """True when ``GET /`` answers 200 ``Healthy`` (with the organization token)."""
        req = urllib.request.Request(self.base_url + "/", headers=self.auth_headers())
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status == 200 and resp.read() == b"Healthy"
        except (OSError, urllib.error.URLError):
            return False
