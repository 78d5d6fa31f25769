"""The api-server plugin of the provider: crews' webhooks wake the deferred waits on their executions.

Airflow loads it in every component through the package's ``airflow.plugins`` entry point; only the
api-server mounts its app (:mod:`.webhook_app`, at ``/crew-webhooks``), and only there is the app
imported. Check that it is loaded: ``GET /crew-webhooks/v1/health`` on the api-server, or its
``GET /api/v2/plugins``.
"""

from __future__ import annotations

import sys
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_crew.hooks.webhook_receiver import PLUGIN_PREFIX

# The same test Airflow's own Edge provider makes: an api-server was started as `airflow api-server`.
RUNNING_ON_APISERVER = len(sys.argv) > 1 and sys.argv[1] == "api-server"


def _apps() -> list[dict[str, Any]]:
    if not RUNNING_ON_APISERVER:
        return []
    from airflow_provider_crew.plugins.webhook_app import create_app

    return [{"app": create_app(), "url_prefix": PLUGIN_PREFIX, "name": "Crew webhooks"}]


class CrewWebhooksPlugin(AirflowPlugin):
    """Receives crews' webhooks in the api-server and wakes the deferred waits on their executions."""

    name = "airflow_provider_crew"
    fastapi_apps = _apps()
