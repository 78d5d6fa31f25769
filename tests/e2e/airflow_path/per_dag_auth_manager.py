"""An auth manager with one per-DAG rule, for tests: Airflow's SimpleAuthManager, except that the user
``outsider`` may not read the DAGs named in ``CREW_TEST_HIDDEN_DAGS`` (comma-separated).

SimpleAuthManager has roles but no per-DAG rules; FAB's auth manager has them but is not installed
here. This one lets a test prove that the provider's views ask the auth manager about the DAG, as
Airflow's own routes do, and honour its answer. Configure it with
``AIRFLOW__CORE__AUTH_MANAGER=per_dag_auth_manager.PerDagAuthManager``.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

OUTSIDER = "outsider"


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        hidden = set(filter(None, os.environ.get("CREW_TEST_HIDDEN_DAGS", "").split(",")))
        if user.get_name() == OUTSIDER and details is not None and details.id in hidden:
            return False
        return super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
