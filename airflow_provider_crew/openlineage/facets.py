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

    Field names are camelCase as in OpenLineage's own facets; fields the task does not know are left
    out of the event. What each means: docs/lineage.md and the JSON schema.
    """

    executionId: str
    outcome: str | None = attr.field(default=None)
    state: str | None = attr.field(default=None)
    tasksCompleted: int | None = attr.field(default=None)
    tasksTotal: int | None = attr.field(default=None)
    tokenUsage: dict[str, int] | None = attr.field(default=None)
    cost: float | None = attr.field(default=None)
    inputNames: list[str] | None = attr.field(default=None)
    inputs: dict[str, Any] | None = attr.field(default=None)
    output: Any = attr.field(default=None)
    error: str | None = attr.field(default=None)
    executionUrl: str | None = attr.field(default=None)
    stopped: dict[str, str] | None = attr.field(default=None)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL
