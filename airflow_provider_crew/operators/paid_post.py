"""Nothing paid twice: the record of a run's paid POST (``POST /kickoff``, ``POST /resume``).

A paid POST starts an execution or applies feedback, and sending it twice starts a second execution
or applies the feedback twice. A task that sends one keeps one record of it in Airflow's task state
store (Airflow 3.3+), which outlives a try, so that no retry of the same run sends it again:

============  =====================================================  ================================
state         when                                                   what a retry of the run does
============  =====================================================  ================================
claimed       written right before the POST. Airflow refuses the     sends nothing: the try was
              write for a try it no longer runs, and that try then   stopped mid-request, so the
              sends nothing (:func:`claim_refused`)                  service may have acted
sent          written after the service's answer, with what a retry  returns what was kept instead
              needs (the execution's id, the answer)                 of sending
refused       the service said it did not act (a 4xx): the record   sends it once
              is dropped
failed        an error Airflow retries (never reached, busy past     sends it once
              the budget): the record is dropped
unknown       sent, and no answer tells what happened: the claim     sends nothing; this try fails
              stays                                                  without retry, saying an
                                                                     execution may be running
============  =====================================================  ================================

Before Airflow 3.3 there is no store: writes do nothing and a retry finds no record (each task says
what it does then; docs/reliability.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_crew import metrics
from airflow_provider_crew._compat import AirflowFailException, task_state_store
from airflow_provider_crew.exceptions import (
    CrewError,
    CrewKickoffNotRecordedError,
    CrewNotFoundError,
    CrewOutcomeUnknownError,
)
from airflow_provider_crew.status import CrewState
from airflow_provider_crew.waiting.rules import Outcome

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_crew.hooks.crew import CrewHook

Answer = TypeVar("Answer")

#: How long a record outlives the wait's ``timeout``: long enough for any retry.
RECORD_RETENTION_PAST_TIMEOUT = timedelta(days=7)


class RetryRecords:
    """What a task keeps in Airflow's task state store (3.3+) for a later try of the same run.

    Each record carries the task instance's ``max_tries`` when it was written. Airflow raises
    ``max_tries`` when it clears a task instance and never on a retry, so a record with another
    ``max_tries`` was written before the last clear, by an earlier run, and reads as absent (common.ai's
    usage budget tells runs apart the same way). The DAG's ``retries``, which an edit may change between
    two tries, plays no part. Every record expires ``retention`` after it was written.

    Before Airflow 3.3 there is no store: reads give None and writes do nothing.

    :param context: The task's context.
    :param timeout: The task's wait ``timeout`` in seconds; records are kept that long plus
        :data:`RECORD_RETENTION_PAST_TIMEOUT`.
    """

    def __init__(self, context: Context, timeout: float) -> None:
        self.store = task_state_store(context)
        self.max_tries = getattr(context["ti"], "max_tries", None)
        self.retention = timedelta(seconds=timeout) + RECORD_RETENTION_PAST_TIMEOUT

    @property
    def kept(self) -> bool:
        """Whether this Airflow keeps records (3.3+)."""
        return self.store is not None

    def get(self, key: str) -> dict[str, Any] | None:
        """The record under ``key`` when this run wrote it, else None."""
        record = self.store.get(key) if self.store is not None else None
        if isinstance(record, dict) and record.get("max_tries") == self.max_tries:
            return record
        return None

    def set(self, key: str, record: Mapping[str, Any]) -> None:
        """Keep ``record`` under ``key`` for this run; raises when Airflow refuses the write."""
        if self.store is not None:
            self.store.set(key, {**record, "max_tries": self.max_tries}, retention=self.retention)

    def delete(self, *keys: str) -> None:
        """Drop the records under ``keys``."""
        if self.store is not None:
            for key in keys:
                self.store.delete(key)


def claim_refused(request: str, error: BaseException) -> CrewError:
    """The error of a try whose claim, written right before a paid POST, Airflow refused: nothing is sent.

    :param request: The request, e.g. "POST /kickoff".
    :param error: Why the write failed.
    """
    return CrewError(
        f"{request} was not sent: Airflow refused to keep its record for a retry ({error}). Airflow no "
        "longer runs this try (it failed or reset it, e.g. apache/airflow#72716), so this try sends "
        "nothing; a retry sends it once."
    )


def stopped_while_sending(
    claim: Mapping[str, Any], *, set_out_to: str, unrecorded: str, unknown: str, fix: str
) -> CrewOutcomeUnknownError:
    """The error of a retry that finds an earlier try's claim ("claimed": that try was stopped during its
    paid POST, or its outcome was unknown). The service may have acted on it and nothing tells, so the
    retry sends nothing and fails without retry.

    :param claim: The claim, as :meth:`PaidPost.earlier` reads it (the try's number).
    :param set_out_to: What that try set out to do, e.g. "start a crew execution".
    :param unrecorded: What it did not record, e.g. "the execution's id".
    :param unknown: What may have happened since, and where to look.
    :param fix: What the user does next.
    """
    return CrewOutcomeUnknownError(
        f"Try {claim.get('try_number', '?')} of this task set out to {set_out_to} and was stopped before it "
        f"recorded {unrecorded}: {unknown} This retry sends nothing, so that nothing is applied twice; it "
        f"fails without retry. {fix}"
    )


def sent_nothing(error: CrewError) -> bool:
    """Whether a paid POST that raised ``error`` surely started or applied nothing (refused or failed), so
    that its claim may go and a retry may send it: an error Airflow retries. An unknown outcome, or an
    answer too large to read, fails without retry and keeps the claim."""
    return not isinstance(error, AirflowFailException)


class PaidPost:
    """The record of one paid POST of a run (module docstring): read it, then send through it.

    :param context: The task's context.
    :param task: The task sending it: its wait ``timeout`` in seconds (how long the record is kept) and
        its ``log``.
    :param key: The record's key in the task state store.
    :param kind: The ``request`` tag of ``crew.paid_post.unknown_outcome``: ``kickoff``, ``resume`` or
        ``review``.
    :param execution_id: The execution a resume is about (a record about another one reads as absent);
        None for a kickoff.
    """

    #: How long to keep writing "sent" while Airflow's API server is overloaded (its writes time out).
    patience = 120.0

    def __init__(
        self, context: Context, task: Any, *, key: str, kind: str, execution_id: str | None = None
    ) -> None:
        self.records = RetryRecords(context, task.timeout)
        self.key = key
        #: The request, for messages.
        self.request = (
            "POST /kickoff" if execution_id is None else f"POST /resume to crew execution {execution_id}"
        )
        self.kind = kind
        #: The task's metric tags, read once: the alerts below and the task's own metrics use them.
        self.task = metrics.task_tags(context["ti"])
        self.log = task.log
        self.execution_id = execution_id

    @property
    def kept(self) -> bool:
        """Whether this Airflow keeps records (3.3+)."""
        return self.records.kept

    def earlier(self) -> dict[str, Any] | None:
        """What an earlier try of this run kept (``state`` "claimed" or "sent", and its fields), or None."""
        record = self.records.get(self.key)
        if record is None or (
            self.execution_id is not None and record.get("kickoff_id") != self.execution_id
        ):
            return None
        # 1.0 wrote "sending" for a claim, and its kickoff record (the execution's id) without a state.
        state = record.get("state", "sent")
        return {**record, "state": "claimed" if state == "sending" else state}

    def send(
        self,
        post: Callable[[], Answer],
        *,
        claim: Mapping[str, Any],
        sent: Callable[[Answer], Mapping[str, Any]],
        unrecorded: Callable[[Answer, Exception], CrewError] | None = None,
    ) -> Answer:
        """Claim, send, and keep the outcome; the answer, or the POST's error.

        :param post: Sends the request; raises a ``CrewError`` when it fails.
        :param claim: What the claim keeps (the try's number, the time).
        :param sent: The record a retry reads instead of sending, made from the answer.
        :param unrecorded: The error to fail with when "sent" cannot be written within
            :attr:`patience`; without it a warning is logged, and the claim left makes a retry send
            nothing.
        """
        self._claim(claim)
        try:
            answer = post()
        except CrewError as error:
            if sent_nothing(error):  # refused or failed: the service did not act
                self.drop()
            else:  # unknown: the alerts a team pages on (docs/metrics.md)
                metrics.count("crew.paid_post.unknown_outcome", **self.task, request=self.kind)
                metrics.count("crew.execution.left_running", **self.task, why="unknown_outcome")
            raise
        store_error = self._keep_sent(sent(answer))
        if store_error is not None:
            if unrecorded is not None:
                raise unrecorded(answer, store_error) from store_error
            self.log.warning("Could not keep the record of %s for a retry: %s", self.request, store_error)
        return answer

    def drop(self) -> None:
        """Drop the record: a retry, or the next run, sends the request anew."""
        try:
            self.records.delete(self.key)
        except Exception as error:  # what was kept stays: a retry does not send blindly
            self.log.warning("Could not drop the record of %s: %s", self.request, error)

    def _claim(self, fields: Mapping[str, Any]) -> None:
        record = {**fields, "state": "claimed", "epoch_seconds": time.time()}
        if self.execution_id is not None:
            record["kickoff_id"] = self.execution_id
        try:  # one write replaces whatever an earlier try kept (a FAILED execution's id, say)
            self.records.set(self.key, record)
        except Exception as error:  # the SDK raises AirflowRuntimeError; any failure is the same here
            raise claim_refused(self.request, error) from None

    def _keep_sent(self, fields: Mapping[str, Any]) -> Exception | None:
        """Write "sent", again while Airflow's API is overloaded; the last error when it never took."""
        record = {"kickoff_id": self.execution_id, **fields, "state": "sent"}
        deadline, pause = time.monotonic() + self.patience, 1.0
        while True:
            try:
                self.records.set(self.key, record)
                return None
            except Exception as error:
                if time.monotonic() + pause > deadline:
                    return error
                self.log.warning(
                    "Could not keep the record of %s (%s); again in %.0f s.", self.request, error, pause
                )
                time.sleep(pause)
                pause = min(pause * 2, 15.0)


# -- the kickoff's record ---------------------------------------------------------------------------
# Claimed, then the execution's id and when it started, so that a retry follows that execution instead
# of starting another; only one that ended FAILED is started anew (that is what a retry is for). A retry
# finds it even when Airflow failed a try that had finished; after a clear it reads as absent.
KICKOFF_RECORD_KEY = "crew_kickoff_id"
#: Where 1.0 kept its claim, with the try's number and the time, beside a record of the id alone.
LEGACY_KICKOFF_CLAIM_KEY = "crew_kickoff_claim"


def kickoff_record(context: Context, task: Any) -> PaidPost:
    """The record of this run's ``POST /kickoff``; ``task`` is the kickoff task (its ``timeout``, ``log``)."""
    return PaidPost(context, task, key=KICKOFF_RECORD_KEY, kind="kickoff")


def execution_to_reattach(record: PaidPost, hook: CrewHook, *, meta: object) -> dict[str, Any] | None:
    """The record (``kickoff_id``, ``epoch_seconds``) of the execution an earlier try of this run
    started, for a retry to follow; None when no try started one, or when it ended FAILED.

    :param record: The kickoff's record (:func:`kickoff_record`).
    :param hook: Reads the execution's state.
    :param meta: The kickoff's ``meta``, named when an earlier try was stopped while sending.
    """
    earlier = record.earlier()
    # 1.0's record has no try number and no time: its claim has (delete a week after 1.1 is out).
    legacy_claim = record.records.get(LEGACY_KICKOFF_CLAIM_KEY)
    if legacy_claim is not None:
        earlier = {**legacy_claim, "state": "claimed", **(earlier or {})}
    if earlier is None:
        return None
    if earlier["state"] == "claimed":
        # The earlier try was stopped during POST /kickoff (or its outcome was unknown): an execution may
        # be running. Nothing tells it from a request that never arrived, so none is started.
        raise stopped_while_sending(
            earlier,
            set_out_to="start a crew execution",
            unrecorded="the execution's id",
            unknown="the service may have started one, which then runs unclaimed (look for it at the "
            f"service, meta {meta or {}}).",
            fix="Clear the task to start a new execution.",
        )
    kickoff_id = earlier["kickoff_id"]
    try:
        state: CrewState | None = hook.get_status(kickoff_id).state
    except CrewNotFoundError:
        state = None  # possibly still queued; the wait tolerates a short run of 404s
    if state is CrewState.FAILED:
        # The new claim replaces this record in one write: a later try that finds the claim knows this
        # try may have started an execution, instead of reading the old FAILED one.
        record.log.info("Crew execution %s of an earlier try FAILED; starting a new one.", kickoff_id)
        return None
    record.log.info(
        "Reattaching to crew execution %s started by an earlier try (state: %s) instead of starting a "
        "second one.",
        kickoff_id,
        state.value if state else "not visible yet",
    )
    return earlier


def start_execution(record: PaidPost, post: Callable[[], str], *, claim: Mapping[str, Any]) -> dict[str, Any]:
    """Send ``POST /kickoff`` through the kickoff's record (:meth:`PaidPost.send`): the new execution's
    record, kept before anything else can fail, with the time its id came back (the one XCom
    ``kicked_off_at`` publishes). An unknown outcome fails without retry and leaves the claim.

    :param record: The kickoff's record (:func:`kickoff_record`).
    :param post: Sends the request; the execution's id.
    :param claim: What the claim keeps (the try's number).
    """
    return record.send(
        lambda: {"kickoff_id": post(), "epoch_seconds": time.time()},
        claim=claim,
        sent=lambda started: started,
        unrecorded=_kickoff_not_recorded,
    )


def execution_ended(record: PaidPost, outcome: Outcome) -> None:
    """After the wait: a FAILED execution is forgotten, so that a retry starts anew. After any other end
    the record stays: a try Airflow failed after it had finished (its heartbeat was late, on an
    overloaded Airflow) leaves its retry the execution to reattach to, not a second one to start."""
    if outcome is Outcome.FAILED:
        forget_execution(record)


def forget_execution(record: PaidPost) -> None:
    """Drop the kickoff's record, and 1.0's claim: a retry, or the next run, starts anew."""
    record.drop()
    record.records.delete(LEGACY_KICKOFF_CLAIM_KEY)


def _kickoff_not_recorded(started: Mapping[str, Any], error: Exception) -> CrewError:
    """Without its record a retry would start a second execution: fail without retry, naming it."""
    kickoff_id = started["kickoff_id"]
    return CrewKickoffNotRecordedError(
        f"Crew execution {kickoff_id} started, but Airflow could not record its id for a retry to "
        f"reattach to ({type(error).__name__}: {error}). The task fails without retry so that no "
        "second execution starts; the execution keeps running: follow it with "
        f"CrewStatusSensor(kickoff_id={kickoff_id!r}) or cancel it at the service."
    )


__all__ = [
    "PaidPost",
    "RetryRecords",
    "claim_refused",
    "execution_ended",
    "execution_to_reattach",
    "forget_execution",
    "kickoff_record",
    "sent_nothing",
    "start_execution",
    "stopped_while_sending",
]
