"""What the crew tasks share beyond the wait: checks of their parameters, the webhook addresses a
resume sends again, and the records a task keeps for its retries.

The kickoff and resume operators, the status sensor and the review tasks import this module. The
wait itself (reading, deferring, XCom of the outcome) is :mod:`airflow_provider_crew.waiting.task`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import AirflowFailException, task_state_store
from airflow_provider_crew.exceptions import CrewConfigurationError, CrewError
from airflow_provider_crew.status import CrewState
from airflow_provider_crew.waiting.task import XCOM_WEBHOOKS

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_crew.hooks.webhook_receiver import WakeAddresses
    from airflow_provider_crew.status import CrewStatus

# The notification webhooks a kickoff gives and a resume must give again (the service forgets them).
WEBHOOK_PARAMETERS = ("task_webhook_url", "step_webhook_url", "crew_webhook_url")


def checked_kickoff_id(value: Any, parameter: str = "kickoff_id") -> str:
    """The rendered kickoff id, stripped; an error naming ``parameter`` when it is not a non-empty string.

    :param value: The parameter's value after templates and XComArgs were resolved.
    :param parameter: The parameter's name, for the error.
    """
    if not isinstance(value, str) or not value.strip():
        raise CrewConfigurationError(
            f"{parameter} rendered to {value!r}; it must be the execution's id, a non-empty string "
            "(usually kickoff.output)."
        )
    return value.strip()


# How Jinja renders a boolean (``"{{ params.approve }}"`` gives "True"), and the JSON spelling.
RENDERED_BOOLEANS = {"true": True, "false": False}


def rendered_bool(value: Any, parameter: str) -> bool:
    """A templated boolean parameter as a bool: ``True``/``False``, or its rendering as text
    (``"True"``, ``"false"``; case and surrounding blanks do not matter). Anything else fails,
    naming the parameter and the value.

    :param value: The parameter's value after templates were rendered.
    :param parameter: The parameter's name, for the error.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in RENDERED_BOOLEANS:
        return RENDERED_BOOLEANS[value.strip().lower()]
    raise CrewConfigurationError(
        f"{parameter} must be True or False (or a template rendering to True, False, true or false), "
        f"got {value!r}."
    )


def upstream_task_id(value: Any) -> str | None:
    """The task that produces ``value`` when it is an XComArg such as ``kickoff.output``."""
    from airflow.sdk import XComArg

    if isinstance(value, XComArg):
        operator = getattr(value, "operator", None)
        return getattr(operator, "task_id", None)
    return None


def is_template_or_xcom(value: Any) -> bool:
    """Whether ``value`` only gets its final form at task start; it is validated then.

    :param value: A parameter's value as given in the DAG.
    """
    from airflow.sdk import XComArg

    return isinstance(value, XComArg) or (isinstance(value, str) and "{{" in value)


def check_webhook_parameter(value: Any, parameter: str) -> None:
    """Fail, naming ``parameter``, when ``value`` is no http(s) URL. Empty and templated values pass.

    :param value: The webhook URL, None or empty for none.
    :param parameter: The parameter's name, for the error.
    """
    if value is None or value == "" or is_template_or_xcom(value):
        return
    from airflow_provider_crew.models import check_webhook_url  # here: a DAG without a URL never loads it

    try:
        check_webhook_url(value, parameter)
    except ValueError as error:
        raise CrewConfigurationError(str(error)) from None


def resume_webhook_addresses(
    context: Context, execution_id: str, task: Any, wake: WakeAddresses | None = None
) -> dict[str, str | None]:
    """The webhook addresses to send with ``POST /resume``: those the task was given, else the kickoff's.

    The service forgets webhook addresses at resume (docs/contract.md); the kickoff task kept its
    own in XCom (without credentials) so every resume can re-supply them. With webhook wake, the
    completion webhook is this run's address on Airflow's api-server, built again here.

    :param execution_id: The execution being resumed.
    :param task: The resuming task: its ``*_webhook_url`` parameters, ``carry_over_webhooks``,
        ``kickoff_task_id`` (whose XCom ``webhooks`` holds the kickoff's addresses) and logger.
    :param wake: The run's webhook-wake addresses, when the wake is on.
    """
    addresses = _given_or_kept(context, execution_id, task)
    if wake is not None:
        addresses["crew_webhook_url"] = wake.crew_webhook_url
    return addresses


def _given_or_kept(context: Context, execution_id: str, task: Any) -> dict[str, str | None]:
    given: dict[str, str | None] = {name: getattr(task, name) or None for name in WEBHOOK_PARAMETERS}
    kickoff_task_id, carry_over, log = task.kickoff_task_id, task.carry_over_webhooks, task.log
    if not carry_over or all(given.values()):
        return given
    if not kickoff_task_id:
        log.warning(
            "No kickoff task known for execution %s, so its webhook addresses cannot be carried over: "
            "notifications after this resume go only to the addresses given here (docs/contract.md). "
            "Pass kickoff_task_id, or kickoff_id=kickoff.output.",
            execution_id,
        )
        return given
    kept = context["ti"].xcom_pull(task_ids=kickoff_task_id, key=XCOM_WEBHOOKS)
    if isinstance(kept, list):  # a mapped kickoff pulled from an unmapped task: find ours
        kept = next(
            (item for item in kept if isinstance(item, dict) and item.get("kickoff_id") == execution_id), None
        )
    if not isinstance(kept, dict) or kept.get("kickoff_id") != execution_id:
        log.warning(
            "Task %r kept no webhook addresses for execution %s; notifications after this resume go only "
            "to the addresses given here (docs/contract.md).",
            kickoff_task_id,
            execution_id,
        )
        return given
    carried = {name: given[name] or kept.get(name) for name in WEBHOOK_PARAMETERS}
    log.info(
        "Carrying over the kickoff's webhook addresses for %s",
        ", ".join(name for name in WEBHOOK_PARAMETERS if carried[name] and not given[name]) or "nothing",
    )
    return carried


def try_number(context: Context) -> int:
    """This task instance's try number (1 when the context has none, as in ``dag.test()``)."""
    return int(getattr(context["ti"], "try_number", 1) or 1)


# -- what a task keeps for its retries ----------------------------------------------------------------

#: How long a record kept for retries outlives the wait's ``timeout``: long enough for any retry.
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

    def set(self, key: str, record: dict[str, Any]) -> None:
        """Keep ``record`` under ``key`` for this run; raises when Airflow refuses the write."""
        if self.store is not None:
            self.store.set(key, {**record, "max_tries": self.max_tries}, retention=self.retention)

    def delete(self, *keys: str) -> None:
        """Drop the records under ``keys``."""
        if self.store is not None:
            for key in keys:
                self.store.delete(key)


def claim_refused(request: str, error: BaseException) -> CrewError:
    """The error of a try whose record, written right before a paid POST, Airflow refused: nothing is sent.

    :param request: The request, e.g. "POST /kickoff".
    :param error: Why the write failed.
    """
    return CrewError(
        f"{request} was not sent: Airflow refused to keep its record for a retry ({error}). Airflow no "
        "longer runs this try (it failed or reset it, e.g. apache/airflow#72716), so this try sends "
        "nothing; a retry sends it once."
    )


def sent_nothing(error: CrewError) -> bool:
    """Whether a paid POST that raised ``error`` surely started or applied nothing, so that its claim may
    go and a retry may send it: an error Airflow retries (refused, busy past the budget, never reached).
    An unknown outcome, or an answer too large to read, fails without retry and keeps the claim."""
    return not isinstance(error, AirflowFailException)


class ResumeRecord:
    """The record of a run's one ``POST /resume`` (a resume task's or a review round's), so that no retry
    sends it twice.

    :meth:`claim` writes "sending" right before the POST. The write is also a fence: Airflow refuses it
    for a try it no longer runs, and that try then sends nothing (:func:`claim_refused`).
    :meth:`sent` writes "sent" with what a retry returns instead of sending. :meth:`refused` drops the
    claim when the service said it did not act, and :meth:`failed` after any error Airflow retries
    (refused, busy past the budget, never reached), so that a retry may send it. A record left
    "sending" means the try was stopped mid-request or the outcome is unknown: a retry does not send it.
    Before Airflow 3.3 each does nothing.

    :param records: The task's records.
    :param key: The record's key in the task state store.
    :param kickoff_id: The execution resumed; a record about another one reads as absent.
    :param log: The task's logger.
    """

    def __init__(self, records: RetryRecords, key: str, kickoff_id: str, log: Any) -> None:
        self.records = records
        self.key = key
        self.kickoff_id = kickoff_id
        self.log = log

    def earlier(self) -> dict[str, Any] | None:
        """What an earlier try of this run kept about resuming this execution (its ``state``), or None."""
        kept = self.records.get(self.key)
        return kept if kept is not None and kept.get("kickoff_id") == self.kickoff_id else None

    def claim(self, **fields: Any) -> None:
        """Keep "sending" with ``fields``; raise, before anything is sent, when Airflow refuses the write."""
        try:
            self.records.set(self.key, {**fields, "kickoff_id": self.kickoff_id, "state": "sending"})
        except Exception as error:
            raise claim_refused(f"POST /resume to crew execution {self.kickoff_id}", error) from None

    def sent(self, **fields: Any) -> None:
        """Keep "sent" with ``fields``: a retry returns them instead of sending."""
        try:
            self.records.set(self.key, {**fields, "kickoff_id": self.kickoff_id, "state": "sent"})
        except Exception as error:  # "sending" stays: a retry does not send it blindly
            self.log.warning("Could not record the resume for a retry: %s", error)

    def failed(self, error: CrewError) -> None:
        """After the POST failed: drop the claim when Airflow retries ``error`` (the service did not act);
        keep "sending" after an unknown outcome, which fails without retry."""
        if sent_nothing(error):
            self.refused()

    def refused(self) -> None:
        """Drop the claim: the service refused the resume, so nothing was applied."""
        try:
            self.records.delete(self.key)
        except Exception as error:  # "sending" stays: a retry does not send it blindly
            self.log.warning("Could not drop this try's resume record: %s", error)


def why_answer_is_outdated(status: CrewStatus, crew_task_id: str, answered_output: str | None) -> str | None:
    """Why an answer must not be sent (again): the execution no longer waits on the output it is about.

    ``None`` while it still waits on that output of that task.

    :param status: The execution's status now.
    :param crew_task_id: The paused crew task the answer is about.
    :param answered_output: The output the answer is about.
    """
    if status.state is CrewState.WAITING_FOR_HUMAN_INPUT and status.paused_task_id == crew_task_id:
        if status.paused_task_output == answered_output:
            return None
        return (
            f"The execution now waits on a different output of task {crew_task_id!r} than the one "
            "answered (redone, or resumed elsewhere); the answer would apply to text its author never saw."
        )
    return f"The execution moved on before the answer arrived (now: {status.describe()})."
