"""The Crew tab's reads of a running execution's status from its crew service, shared by every viewer
of the execution in this api-server process: one read at a time, at most once per
:data:`MIN_REFRESH_SECONDS`, each bounded by :data:`SERVICE_READ_SECONDS`. Viewers who ask while a read
is under way take its answer; when the service cannot be read, the last known status is kept.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_crew.status import CrewStatus

#: The tab never reads a service more often than this, whatever the wait's pace.
MIN_REFRESH_SECONDS = 2.0
#: How long one status read from the api-server may take, connecting included; no retry.
SERVICE_READ_SECONDS = 5.0
# Executions remembered before the memory is cleared (an api-server runs for weeks).
_MAX_REMEMBERED = 10_000


class LiveStatuses:
    """The last status read per (connection, execution); a read at most every ``min_age`` seconds."""

    def __init__(self, min_age: float = MIN_REFRESH_SECONDS) -> None:
        self.min_age = min_age
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], tuple[float, CrewStatus | None, str | None]] = {}
        self._reading: dict[tuple[str, str], threading.Lock] = {}

    def read(self, conn_id: str, kickoff_id: str) -> tuple[CrewStatus | None, str | None, float | None]:
        """(the newest status known, why the service could not be read now or None, its age in s)."""
        key = (conn_id, kickoff_id)
        with self._lock:
            reading = self._reading.setdefault(key, threading.Lock())
        with reading:  # one read per execution at a time: who waits here takes its answer below
            with self._lock:
                read_at, status, problem = self._last.get(key, (0.0, None, None))
            if time.monotonic() - read_at >= self.min_age:
                status, problem = self._read(conn_id, kickoff_id, status)
                read_at = time.monotonic()
                with self._lock:
                    if len(self._last) > _MAX_REMEMBERED:
                        self._last.clear()
                        self._reading.clear()
                    self._last[key] = (read_at, status, problem)
        return status, problem, time.monotonic() - read_at

    @staticmethod
    def _read(conn_id: str, kickoff_id: str, last: CrewStatus | None) -> tuple[CrewStatus | None, str | None]:
        from airflow_provider_crew.exceptions import CrewError
        from airflow_provider_crew.hooks.crew import CrewHook

        try:
            hook = CrewHook(crew_conn_id=conn_id, retry_limit=0)
            return hook.get_status(kickoff_id, deadline=time.time() + SERVICE_READ_SECONDS), None
        except CrewError as error:  # the message names no secret: the client's errors never carry one
            return last, f"The crew service could not be read: {error}"
        except Exception as error:  # a connection the api-server cannot look up, among others
            return last, f"The crew service could not be read ({type(error).__name__})."


LIVE = LiveStatuses()
