"""A local stand-in for a deployed crew HTTP service, for testing DAGs and the provider offline.

Nothing here imports Airflow, and importing this package is cheap: the server pieces (uvicorn,
aiohttp) load only when a service starts. Main entry points::

    from airflow_provider_crew.testing import LocalCrewService      # in-process, background thread
    from airflow_provider_crew.testing import CrewServiceProcess    # subprocess (crew-service serve)
    from airflow_provider_crew.testing import RemoteCrewService     # a service running elsewhere

The pytest plugin (``crew_service`` fixture) is registered through the ``pytest11`` entry point.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .crew_spec import CrewInput, CrewSpec, TaskSpec
    from .crews import CrewDefinitionError, builtin_crew_names, load_crew
    from .faults import FaultRule, Faults, FaultsAPI
    from .handle import (
        DEFAULT_ORG_TOKEN,
        DEFAULT_USER_TOKEN,
        CrewServiceHandle,
        RemoteCrewService,
        wait_until,
    )
    from .process import CrewServiceProcess
    from .server import LocalCrewService, build_app
    from .webhooks import ReceivedWebhook, WebhookReceiver

_EXPORTS = {
    "CrewDefinitionError": "crews",
    "CrewInput": "crew_spec",
    "CrewSpec": "crew_spec",
    "TaskSpec": "crew_spec",
    "builtin_crew_names": "crews",
    "load_crew": "crews",
    "FaultRule": "faults",
    "Faults": "faults",
    "FaultsAPI": "faults",
    "DEFAULT_ORG_TOKEN": "handle",
    "DEFAULT_USER_TOKEN": "handle",
    "CrewServiceHandle": "handle",
    "RemoteCrewService": "handle",
    "wait_until": "handle",
    "CrewServiceProcess": "process",
    "LocalCrewService": "server",
    "build_app": "server",
    "ReceivedWebhook": "webhooks",
    "WebhookReceiver": "webhooks",
}

__all__ = [
    "DEFAULT_ORG_TOKEN",
    "DEFAULT_USER_TOKEN",
    "CrewDefinitionError",
    "CrewInput",
    "CrewServiceHandle",
    "CrewServiceProcess",
    "CrewSpec",
    "FaultRule",
    "Faults",
    "FaultsAPI",
    "LocalCrewService",
    "ReceivedWebhook",
    "RemoteCrewService",
    "TaskSpec",
    "WebhookReceiver",
    "build_app",
    "builtin_crew_names",
    "load_crew",
    "wait_until",
]


def __getattr__(name: str) -> Any:
    # Lazy: the pytest plugin imports this package at pytest start-up and must stay cheap.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
