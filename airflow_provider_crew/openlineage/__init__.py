"""OpenLineage support for crew tasks: which execution a task followed and how it ended.

With ``apache-airflow-providers-openlineage`` installed, its listener calls
``get_openlineage_facets_on_complete`` / ``..._on_failure`` on each task that has them, in the task's
own process, after the task's last step. :class:`CrewOpenLineageMixin` answers from what the task
kept of its wait (``crew_execution``, :class:`~airflow_provider_crew.waiting.rules.FollowedExecution`),
with no request to the crew service. The OpenLineage modules are imported only inside those methods,
so without the OpenLineage provider nothing of it is imported. The facets: docs/lineage.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from airflow_provider_crew.status import CrewStatus, whole_counts
from airflow_provider_crew.waiting.budget import prices_of
from airflow_provider_crew.waiting.rules import FollowedExecution, Outcome, WaitResult

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_crew.connection import CrewConnectionConfig

# Run facet names in the events.
CREW_EXECUTION_FACET = "crewExecution"
EXTERNAL_QUERY_FACET = "externalQuery"
ERROR_MESSAGE_FACET = "errorMessage"


def public_base_url(base_url: str) -> str:
    """The base URL without login, password, query or fragment: safe to put in a lineage event.

    :param base_url: The crew's base URL from the connection.
    """
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _json_safe(value: Any) -> Any:
    """A copy the event's JSON encoder takes whatever the crew or the DAG put in it."""
    return json.loads(json.dumps(value, default=str))


def _token_usage(record: Mapping[str, Any]) -> dict[str, int] | None:
    """Whole-number token counts from the status record (``usage_metrics``; ``token_usage`` in
    crew webhooks), or None when it has none."""
    return whole_counts(record.get("usage_metrics")) or whole_counts(record.get("token_usage")) or None


class CrewOpenLineageMixin:
    """OpenLineage facets for the tasks that follow a crew execution, from their ``crew_execution``
    (kept by :class:`~airflow_provider_crew.operators.wait.CrewWaitMixin`)."""

    #: Send the input values and the output to lineage backends too (they may be private).
    openlineage_include_values: bool = False
    crew_execution: FollowedExecution | None = None
    crew_conn_id: str
    log: Any

    # -- called by the OpenLineage provider ------------------------------------------------------

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        """Facets for the COMPLETE event: the execution and how it ended.

        :param task_instance: The finished task instance (unused: the operator holds what it needs).
        """
        return self._crew_lineage(failed=False)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage | None:
        """Facets for the FAIL event: the execution, how it ended, and the error.

        :param task_instance: The failed task instance (unused: the operator holds what it needs).
        """
        return self._crew_lineage(failed=True)

    # -- building the facets ---------------------------------------------------------------------

    def _crew_lineage(self, *, failed: bool) -> OperatorLineage | None:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.facet_v2 import error_message_run, external_query_run

        from airflow_provider_crew.openlineage.facets import CrewExecutionRunFacet

        followed = self.crew_execution or FollowedExecution()
        result = followed.result
        error = self._lineage_error(result)
        run_facets: dict[str, Any] = {}
        if failed and error:
            run_facets[ERROR_MESSAGE_FACET] = error_message_run.ErrorMessageRunFacet(
                message=error, programmingLanguage="python"
            )
        kickoff_id = followed.kickoff_id or self._rendered_kickoff_id()
        if not kickoff_id:
            # Failed before an execution existed (bad inputs, kickoff refused): nothing ran.
            return OperatorLineage(run_facets=run_facets) if run_facets else None

        config = self._lineage_connection(followed)
        if config is not None:
            run_facets[EXTERNAL_QUERY_FACET] = external_query_run.ExternalQueryRunFacet(
                externalQueryId=kickoff_id, source=public_base_url(config.base_url)
            )
        status = result.last_status if result is not None else None
        progress = status.progress if status is not None else None
        include_values = bool(self.openlineage_include_values)
        inputs = self._lineage_inputs()
        run_facets[CREW_EXECUTION_FACET] = CrewExecutionRunFacet(
            executionId=kickoff_id,
            outcome=result.outcome.value if result is not None else None,
            state=(status.raw_state or status.state.value) if status is not None else None,
            tasksCompleted=progress.completed if progress is not None else None,
            tasksTotal=progress.total if progress is not None else None,
            tokenUsage=_token_usage(status.raw) if status is not None else None,
            cost=self._lineage_cost(config, status),
            inputNames=sorted(inputs) if inputs is not None else None,
            inputs=_json_safe(dict(inputs)) if include_values and inputs is not None else None,
            output=_json_safe(self._lineage_output(result)) if include_values else None,
            error=error,
            executionUrl=followed.url or (config.execution_url(kickoff_id) if config is not None else None),
            stopped=followed.stopped,
        )
        return OperatorLineage(run_facets=run_facets)

    @staticmethod
    def _lineage_cost(config: CrewConnectionConfig | None, status: CrewStatus | None) -> float | None:
        """The execution's cost from the connection's prices, as XCom ``usage`` has it (None without)."""
        prices = prices_of(config) if config is not None else None
        return prices.cost(status.usage) if prices is not None and status is not None else None

    def _lineage_connection(self, followed: FollowedExecution) -> CrewConnectionConfig | None:
        """The connection's settings: those the task read, else the connection itself.

        After a deferral the task resumes in a new process that never built a hook; reading the
        Airflow connection then is a lookup in Airflow, not a request to the crew service.
        """
        if followed.config is None:
            from airflow_provider_crew.hooks.crew import CrewHook

            try:
                followed.config = CrewHook(crew_conn_id=self.crew_conn_id).config
            except Exception:
                self.log.warning(
                    "OpenLineage: could not read connection %r; the event has no externalQuery facet.",
                    self.crew_conn_id,
                    exc_info=True,
                )
                return None
        return followed.config

    def _rendered_kickoff_id(self) -> str | None:
        """The ``kickoff_id`` parameter of the sensor and the resume and review operators, rendered:
        what they follow when they failed before recording it (e.g. a time-out after a deferral)."""
        value = getattr(self, "kickoff_id", None)
        return value.strip() if isinstance(value, str) and value.strip() and "{{" not in value else None

    def _lineage_inputs(self) -> Mapping[str, Any] | None:
        inputs = getattr(self, "inputs", None)
        return inputs if isinstance(inputs, Mapping) else None

    @staticmethod
    def _lineage_output(result: WaitResult | None) -> Any:
        status = result.last_status if result is not None else None
        if status is None:
            return None
        if result is not None and result.outcome is Outcome.PAUSED:
            return status.paused_task_output
        return status.output

    @staticmethod
    def _lineage_error(result: WaitResult | None) -> str | None:
        if result is None or result.outcome in (Outcome.SUCCEEDED, Outcome.PAUSED):
            return None
        status = result.last_status
        if result.outcome is Outcome.FAILED and status is not None and status.error:
            return status.error
        return result.message


__all__ = ["CREW_EXECUTION_FACET", "CrewOpenLineageMixin", "public_base_url"]
