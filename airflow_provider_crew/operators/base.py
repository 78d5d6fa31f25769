"""What the crew tasks share beyond the wait: checks of their parameters and the webhook addresses a
resume sends again. The record of a paid POST a retry reads is :mod:`.paid_post`.

The kickoff and resume operators, the status sensor and the review tasks import this module. The
wait itself (reading, deferring, XCom of the outcome) is :mod:`airflow_provider_crew.operators.wait`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import conf
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.status import CrewState
from airflow_provider_crew.waiting.xcom import XCOM_WEBHOOKS, asset_event_extra

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_crew.connection import CrewConnectionConfig
    from airflow_provider_crew.hooks.webhook_receiver import WakeAddresses
    from airflow_provider_crew.status import CrewStatus
    from airflow_provider_crew.waiting.rules import WaitResult

# The notification webhooks a kickoff gives and a resume must give again (the service forgets them).
WEBHOOK_PARAMETERS = ("task_webhook_url", "step_webhook_url", "crew_webhook_url")


class CrewTaskParameters:
    """The texts of the parameters crew tasks share, each written once: every crew task has this class
    among its bases, and its docstring names the ones it takes, saying only what differs for it.
    docs/api.md shows each once ("The same words on every task"). The wait's own parameters are
    :class:`~airflow_provider_crew.operators.wait.CrewWaitMixin`'s, the stop's and the budget's
    :class:`~airflow_provider_crew.operators.wait_stop.CrewStopMixin`'s.

    :param crew_conn_id: The ``crew`` connection: base URL and bearer token. A task that follows an
        execution takes the connection it was started with.
    :param on_human_input: What the wait does when the execution pauses for human input:
        ``"return"`` ends the task successfully and pushes the paused task to XCom ``human_input``
        for a review downstream; ``"fail"`` fails the task without retry (the execution stays
        paused); ``"wait"`` keeps waiting for someone to resume it outside this task.
    :param timeout: How long to wait, in seconds or as a timedelta. Passing it fails the task and,
        unless ``stop_crew=False``, stops the execution.
    :param openlineage_include_values: With the OpenLineage provider installed, also send the
        output, and the input values of a task given ``inputs``, to lineage backends. Off by default,
        since they may be private; the input names, the state, the progress and the token usage are
        always sent (docs/lineage.md).
    :param task_webhook_url: URL the service calls after each crew task (http or https).
    :param step_webhook_url: URL the service calls after each agent step.
    :param crew_webhook_url: URL the service calls when the execution completes.
    :param human_input_webhook_url: URL where the service announces a pause for human input; needs
        ``human_input_webhook_conn_id``. Without it, the connection's host is the URL. Crew tasks
        that ask for human input pause only when the kickoff gives a human-input webhook; otherwise
        they run through.
    :param human_input_webhook_conn_id: Connection holding the credential the service must send to
        the human-input webhook: password alone = bearer token; login and password = basic auth;
        extra ``{"strategy": "bearer"}`` or ``"basic"`` overrides that guess. Any connection type
        works (``generic`` is built into Airflow); only host, login, password and extra are read.
    :param kickoff_task_id: The task that started the execution, whose XCom this task reads:
        ``kicked_off_at`` (404 answers count as "queued" for a while after it) and ``webhooks`` (the
        addresses a resume sends again). Found from ``kickoff_id`` when that is the kickoff's XComArg
        (``kickoff.output``).
    """


def default_deferrable() -> bool:
    """The deployment-wide default for ``deferrable``, read the way Airflow's own operators read it."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


def seconds(value: timedelta | float | int, parameter: str) -> float:
    """A duration given as timedelta or seconds, checked to be positive; errors name the parameter."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CrewConfigurationError(
            f"{parameter} must be a number of seconds or a timedelta, got {value!r}."
        )
    if value <= 0:
        raise CrewConfigurationError(f"{parameter} must be greater than 0 seconds, got {value!r}.")
    return float(value)


def required_kickoff_id(value: Any, what: str) -> Any:
    """``kickoff_id`` as a task was given it (an id, a template, an XComArg); at DAG parse, an error
    naming ``what`` the task needs it for when it is missing or blank."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise CrewConfigurationError(f"kickoff_id is required: {what}, usually kickoff_id=kickoff.output.")
    return value


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


def refuse_own_crew_webhook(task: Any, config: CrewConnectionConfig) -> None:
    """Fail, naming both, when a task's ``crew_webhook_url`` meets a connection that wakes by webhook."""
    if config.wake_by_webhook and getattr(task, "crew_webhook_url", None):
        raise CrewConfigurationError(
            f"crew_webhook_url is set, and connection {task.crew_conn_id!r} wakes waits by webhook "
            "(wake_by_webhook): both need the crew's one completion webhook. Drop crew_webhook_url, "
            "or turn 'Wake waits by webhook' off on the connection."
        )


def resume_webhook_addresses(
    context: Context, execution_id: str, task: Any, wake: WakeAddresses | None = None
) -> dict[str, Any]:
    """The webhook addresses to send with ``POST /resume``: those the task was given, else the kickoff's.

    The service forgets webhook addresses at resume (docs/contract.md); the kickoff task kept its
    own in XCom (without credentials) so every resume can re-supply them. With webhook wake, the
    completion webhook is this run's address on Airflow's api-server, built again here, and so is the
    event stream's subscription (whether the service keeps it over a resume is not known).

    :param execution_id: The execution being resumed.
    :param task: The resuming task: its ``*_webhook_url`` parameters, ``carry_over_webhooks``,
        ``kickoff_task_id`` (whose XCom ``webhooks`` holds the kickoff's addresses) and logger.
    :param wake: The run's webhook-wake addresses, when the wake is on.
    """
    addresses: dict[str, Any] = _given_or_kept(context, execution_id, task)
    if wake is not None:
        addresses["crew_webhook_url"] = wake.crew_webhook_url
        addresses["event_stream"] = wake.event_stream
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


def name_execution_in_asset_events(
    context: Context, task: Any, kickoff_id: str, result: WaitResult | None
) -> None:
    """Put the execution (:func:`~airflow_provider_crew.waiting.xcom.asset_event_extra`) in the
    ``extra`` of the asset event each of the task's asset outlets records when it succeeds.

    A downstream DAG scheduled on the asset reads it from ``triggering_asset_events``. An asset alias
    is left alone: which asset it stands for is the DAG author's to add, with the extra they choose.
    """
    from airflow.sdk import Asset

    assets = [outlet for outlet in getattr(task, "outlets", None) or () if isinstance(outlet, Asset)]
    if not assets:
        return
    followed = task.crew_execution
    budget = followed.budget if followed is not None else None
    extra = asset_event_extra(
        kickoff_id,
        result,
        followed.url if followed is not None else None,
        budget.prices if budget is not None else None,
    )
    events = context["outlet_events"]
    for asset in assets:
        events[asset].extra.update(extra)
