"""The Crew tab's "At work" section: what the crew's event stream said of an execution (docs/crew-views.md).

The api-server keeps each subscribed task instance's events as its XCom ``crew_events``
(:mod:`.event_receiver`); a kickoff and each resume of the execution subscribe with their own task
instance, so the section adds up the run's logs of that execution: the latest says what is at work,
all of them what was spent and the last calls.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_crew.crew_events import RECENT_CALLS, XCOM_CREW_EVENTS
from airflow_provider_crew.plugins import airflow_db

#: How often the tab of a running task whose events arrive reloads (it reads the database; the
#: service is read no more often than its own pace: crew_views_live).
EVENTS_REFRESH_SECONDS = 3.0


def events_refresh(pace: float, activity: dict[str, Any] | None) -> float:
    """The tab's reload interval: the wait's pace, or at most :data:`EVENTS_REFRESH_SECONDS` while the
    crew's events come in."""
    return pace if activity is None else min(pace, EVENTS_REFRESH_SECONDS)


def crew_activity(session: Any, dag_id: str, run_id: str, kickoff_id: str) -> dict[str, Any] | None:
    """What the events of ``kickoff_id`` in the run say, or None when none came (no subscription, or a
    service without the event stream)."""
    logs = []
    for stored in airflow_db.run_key_xcoms(session, dag_id, run_id, XCOM_CREW_EVENTS):
        kept = airflow_db.xcom_value(stored)
        if isinstance(kept, dict) and kept.get("kickoff_id") == kickoff_id:
            logs.append(kept)
    if not logs:
        return None
    latest = max(logs, key=lambda kept: str(kept.get("last_event_at") or ""))
    activity = {key: latest.get(key) for key in ("task", "agent", "at_work_since", "ended", "error")}
    activity["last_event_at"] = latest.get("last_event_at")
    activity["received"] = sum(int(kept.get("received") or 0) for kept in logs)
    activity["tokens"] = sum(int((kept.get("usage") or {}).get("total_tokens") or 0) for kept in logs)
    for calls in ("model_calls", "tool_calls"):
        merged = [call for kept in logs for call in kept.get(calls) or [] if isinstance(call, dict)]
        activity[calls] = sorted(merged, key=lambda call: str(call.get("at")))[-RECENT_CALLS:]
    return activity
