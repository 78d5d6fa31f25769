"""The api-server plugin of the provider: crews' webhooks wake the deferred waits on their executions,
a listener stops a deferred wait's execution that a user ends while no triggerer holds its trigger,
and on Airflow 3.1+ a "Crew" tab on every task instance and a "Crews" page under Browse.

Airflow loads it in every component through the package's ``airflow.plugins`` entry point; only the
api-server mounts its apps (:mod:`.webhook_app` at ``/crew-webhooks``, :mod:`.crew_views` at
``/crew-ui``), and only there are they imported. Check that it is loaded: ``GET
/crew-webhooks/v1/health`` on the api-server, or its ``GET /api/v2/plugins``.

Airflow 3.0 has no ``external_views``: there the plugin adds no tab and no page, only the webhooks.
"""

from __future__ import annotations

import sys
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_crew.hooks.webhook_receiver import PLUGIN_PREFIX

# The same test Airflow's own Edge provider makes: an api-server was started as `airflow api-server`.
RUNNING_ON_APISERVER = len(sys.argv) > 1 and sys.argv[1] == "api-server"
# Airflow 3.1 added views a plugin shows in the UI.
HAS_EXTERNAL_VIEWS = hasattr(AirflowPlugin, "external_views")


#: Where the api-server mounts the views' app (:mod:`.crew_views`).
UI_PREFIX = "/crew-ui"
#: The tab on every task instance (the UI fills in the placeholders; a task that is not mapped keeps
#: ``{MAP_INDEX}``, read as -1) and the page under Browse. Their pages run in the UI's iframe. The
#: addresses are relative: the UI's page resolves them against its base (``[api] base_url``'s path),
#: so they hold for an Airflow served under a path too.
EXTERNAL_VIEWS = [
    {
        "name": "Crew",
        "href": f"{UI_PREFIX[1:]}/task-instance/{{DAG_ID}}/{{RUN_ID}}/{{TASK_ID}}/{{MAP_INDEX}}",
        "destination": "task_instance",
        "url_route": "crew",
    },
    {
        "name": "Crews",
        "href": f"{UI_PREFIX[1:]}/crews",
        "destination": "nav",
        "category": "browse",
        "url_route": "crews",
    },
]


def _apps() -> list[dict[str, Any]]:
    if not RUNNING_ON_APISERVER:
        return []
    from airflow_provider_crew.plugins.webhook_app import create_app

    apps = [{"app": create_app(), "url_prefix": PLUGIN_PREFIX, "name": "Crew webhooks"}]
    if HAS_EXTERNAL_VIEWS:
        from airflow_provider_crew.plugins import crew_views

        apps.append({"app": crew_views.create_app(), "url_prefix": UI_PREFIX, "name": "Crew views"})
    return apps


def _listeners() -> list[Any]:
    """The api-server's stop of a deferred crew wait a user ends while no triggerer holds its trigger
    (:mod:`.stop_listener`): Airflow calls listeners there when a user sets a task instance's state."""
    if not RUNNING_ON_APISERVER:
        return []
    from airflow_provider_crew.plugins.stop_listener import StopListener

    return [StopListener()]


class CrewPlugin(AirflowPlugin):
    """Receives crews' webhooks in the api-server, stops the crews of deferred tasks a user ends there
    while no triggerer holds them; shows the Crew tab and the Crews page (3.1+)."""

    name = "airflow_provider_crew"
    fastapi_apps = _apps()
    external_views = EXTERNAL_VIEWS if HAS_EXTERNAL_VIEWS else []
    listeners = _listeners()
