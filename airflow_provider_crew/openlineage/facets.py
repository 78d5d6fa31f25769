"""The OpenLineage run facet of a crew execution.

This module imports the OpenLineage client: only the lineage methods of
:class:`~airflow_provider_crew.openlineage.CrewOpenLineageMixin` import it, when the OpenLineage
provider asks for facets. Its JSON schema ships next to it (``CrewExecutionRunFacet.json``).
"""

from __future__ import annotations

from typing import Any

import attr
from openlineage.client.facet_v2 import RunFacet

from airflow_provider_crew import __version__

# The schema's JSON pointer. The schema itself is the JSON file next to this module; the URL names
# the package release it comes with.
SCHEMA_URL = (
    f"https://pypi.org/project/airflow-provider-crew/{__version__}/"
    "#airflow_provider_crew/openlineage/CrewExecutionRunFacet.json#/$defs/CrewExecutionRunFacet"
)


@attr.define
class CrewExecutionRunFacet(RunFacet):
    """What a crew task knows about the execution it followed, when the task ended.

    Field names are camelCase as in OpenLineage's own facets. Fields the task does not know are
    left out of the event.
    """

    executionId: str
    """The execution's id (the kickoff id)."""
    outcome: str | None = attr.field(default=None)
    """How the task's wait ended: succeeded, paused, failed, not_found, timeout or error; left out
    when the task did not wait."""
    state: str | None = attr.field(default=None)
    """The execution's state as the service last reported it, e.g. SUCCESS, FAILED, PAUSED."""
    tasksCompleted: int | None = attr.field(default=None)
    """Crew tasks done, from the last status record."""
    tasksTotal: int | None = attr.field(default=None)
    """Crew tasks in all, from the last status record."""
    tokenUsage: dict[str, int] | None = attr.field(default=None)
    """Token counts from the status record's ``usage_metrics``, e.g. total_tokens, prompt_tokens."""
    inputNames: list[str] | None = attr.field(default=None)
    """The names of the inputs the execution was started with (kickoff tasks)."""
    inputs: dict[str, Any] | None = attr.field(default=None)
    """The input values; only with ``openlineage_include_values=True``."""
    output: Any = attr.field(default=None)
    """The final output, or the paused task's output; only with ``openlineage_include_values=True``."""
    error: str | None = attr.field(default=None)
    """Why the execution or the wait failed."""
    executionUrl: str | None = attr.field(default=None)
    """The execution's page, when the connection has an execution page URL template."""
    stopped: dict[str, str] | None = attr.field(default=None)
    """When the task stopped the execution (``POST /stop``): ``{"reason", "answer"}``."""

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL
