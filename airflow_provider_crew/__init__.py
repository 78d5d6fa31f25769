"""Apache Airflow provider for deployed crews (teams of AI agents behind an HTTP service)."""

from __future__ import annotations

from typing import Any

__version__ = "1.0.0"

PACKAGE_NAME = "airflow-provider-crew"
INTEGRATION_NAME = "Crew"


# Options under Airflow's [crew] section (airflow_provider_crew.waiting.race reads the one there is).
CONFIG: dict[str, Any] = {
    "crew": {
        "description": "Options of airflow-provider-crew.",
        "options": {
            "deferral_race_hold": {
                "description": (
                    "Whether a deferred crew wait holds back an event that resumes a worker "
                    "until Airflow's stale executor-event race (apache/airflow#72716) is past: "
                    "``auto`` holds wherever the race exists (about 40 s after each deferral with "
                    "Airflow's defaults); ``off`` never holds, for an Airflow with the race fixed. "
                    "Read by the worker when a task defers; any other value fails the crew tasks "
                    "that start executions at DAG parse."
                ),
                "version_added": "1.1.0",
                "type": "string",
                "example": "off",
                "default": "auto",
            }
        },
    }
}


def get_provider_info() -> dict[str, Any]:
    """Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point.

    It must stay importable without importing Airflow: the connection form fields come from
    :mod:`airflow_provider_crew.connection_form`, which has no Airflow import.
    """
    from airflow_provider_crew.connection_form import (
        CONN_FIELDS,
        CONN_TYPE,
        RECEIVER_UI_FIELD_BEHAVIOUR,
        UI_FIELD_BEHAVIOUR,
    )

    def form(behaviour: dict[str, Any]) -> dict[str, Any]:
        keys = ("hidden_fields", "relabeling", "placeholders")
        return {key.replace("_", "-"): behaviour[key] for key in keys}

    def modules(*names: str) -> list[dict[str, Any]]:
        return [
            {
                "integration-name": INTEGRATION_NAME,
                "python-modules": [f"airflow_provider_crew.{name}" for name in names],
            }
        ]

    return {
        "package-name": PACKAGE_NAME,
        "name": "Crew",
        "description": "Start, watch and steer deployed crew executions from Airflow DAGs.",
        "integrations": [
            {
                "integration-name": INTEGRATION_NAME,
                "tags": ["service"],
            }
        ],
        "hooks": modules("hooks.crew", "hooks.webhook_receiver"),
        "operators": modules(
            "operators.crew", "operators.resume", "review.group", "review.round", "review.result"
        ),
        "sensors": modules("sensors.crew"),
        "triggers": modules("triggers.crew", "review.answer"),
        "extra-links": ["airflow_provider_crew.links.crew.CrewExecutionLink"],
        "task-decorators": [
            {"name": "crew", "class-name": "airflow_provider_crew.decorators.crew.crew_task"}
        ],
        "config": CONFIG,
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": "airflow_provider_crew.hooks.crew.CrewHook",
                "hook-name": "Crew",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": form(UI_FIELD_BEHAVIOUR),
            },
            {
                "connection-type": "crew_webhook_receiver",
                "hook-class-name": "airflow_provider_crew.hooks.webhook_receiver.CrewWebhookReceiverHook",
                "hook-name": "Crew webhook receiver",
                "ui-field-behaviour": form(RECEIVER_UI_FIELD_BEHAVIOUR),
            },
        ],
    }
