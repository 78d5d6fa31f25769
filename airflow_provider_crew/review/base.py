"""What the review's rounds and result task share: :class:`ReviewTaskBase`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_provider_crew._compat import BaseOperator, require_human_in_the_loop, task_instance_states
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.links.crew import CrewExecutionLink
from airflow_provider_crew.openlineage import CrewOpenLineageMixin
from airflow_provider_crew.operators.base import (
    CrewTaskParameters,
    checked_kickoff_id,
    required_kickoff_id,
    upstream_task_id,
)
from airflow_provider_crew.operators.wait import DEFAULT_TIMEOUT, CrewWaitMixin
from airflow_provider_crew.operators.wait_stop import BUDGET_TEMPLATE_FIELDS, checked_stop_crew
from airflow_provider_crew.review.record import RoundRecord, is_round_record
from airflow_provider_crew.waiting.rules import DEFAULT_MAX_POLL_INTERVAL, DEFAULT_POLL_INTERVAL
from airflow_provider_crew.waiting.xcom import XCOM_KICKOFF_ID

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The states of a round that never ran (skipped by the scheduler after an earlier round skipped).
NEVER_RAN = frozenset({"skipped", "upstream_failed", "removed"})
NEEDS_3_1 = (
    "Human review in the Airflow UI needs Airflow 3.1+ (it uses Airflow's human-in-the-loop API); this "
    "is Airflow {version}. On 3.0, use CrewKickoffOperator(on_human_input='return') and CrewResumeOperator."
)


class ReviewTaskBase(CrewOpenLineageMixin, CrewWaitMixin, CrewTaskParameters, BaseOperator):
    """
    What rounds and the result share: the execution, the connection, the polling settings, the
    "Crew execution" link and the lineage facets; its ``__init__`` is the one definition of their shared
    parameters (the texts of those every crew task takes: :class:`CrewTaskParameters`).

    :param kickoff_id: The execution under review (templated), usually ``kickoff.output``.
    :param round_task_ids: Task ids of every round of the group, in order.
    :param inputs: The crew's inputs, shown to the reviewer (templated; optional).
    """

    template_fields: Sequence[str] = ("kickoff_id", "inputs", *BUDGET_TEMPLATE_FIELDS)
    operator_extra_links = (CrewExecutionLink(),)
    template_fields_renderers: ClassVar[dict[str, str]] = {"inputs": "json"}

    def __init__(
        self,
        *,
        kickoff_id: str | Any,
        round_task_ids: Sequence[str],
        crew_conn_id: str = CrewHook.default_conn_name,
        inputs: Mapping[str, Any] | Any | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        timeout: timedelta | float = DEFAULT_TIMEOUT,
        openlineage_include_values: bool = False,
        stop_crew: bool | None = None,
        max_tokens: int | str | None = None,
        max_cost: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        require_human_in_the_loop(NEEDS_3_1)
        super().__init__(**kwargs)
        self.kickoff_id = required_kickoff_id(kickoff_id, "the execution under review")
        self.round_task_ids = list(round_task_ids)
        self.crew_conn_id = crew_conn_id
        self.inputs = inputs
        self.openlineage_include_values = openlineage_include_values
        self.stop_crew = checked_stop_crew(stop_crew)
        self._set_budget(max_tokens, max_cost)
        # Waiting never holds a worker slot: the trigger waits for the crew, Airflow's
        # human-in-the-loop machinery for the reviewer.
        self.deferrable = True
        self._set_wait_timing(
            poll_interval=poll_interval, max_poll_interval=max_poll_interval, timeout=timeout
        )
        self.kickoff_task_id: str | None = upstream_task_id(kickoff_id)

    def _start(self, context: Context) -> str:
        """The checked kickoff id, pushed to XCom with the execution's page URL before any waiting."""
        kickoff_id = checked_kickoff_id(self.kickoff_id)
        context["ti"].xcom_push(key=XCOM_KICKOFF_ID, value=kickoff_id)
        self._follow_execution(context, CrewHook(crew_conn_id=self.crew_conn_id), kickoff_id)
        return kickoff_id

    def _rounds_before(self, context: Context, task_ids: Sequence[str]) -> list[RoundRecord]:
        """The records of the given rounds that ran, in order (a skipped round has none).

        A round that never ran is not read: reading its XCom makes Airflow log an "XCom not found"
        error. All are read when their states cannot be.
        """
        ti = context["ti"]
        try:
            states = task_instance_states(ti.dag_id, ti.run_id, list(task_ids), getattr(ti, "map_index", -1))
        except Exception:
            states = {}
        ran = [task_id for task_id in task_ids if states.get(task_id) not in NEVER_RAN]
        if not ran:
            return []
        values = ti.xcom_pull(task_ids=ran, map_indexes=ti.map_index)  # a list: task_ids is one
        return [value for value in values if is_round_record(value)]


# ReviewTaskBase is left out: a base for the review's operators, not one for DAGs.
__all__ = ["NEEDS_3_1"]
