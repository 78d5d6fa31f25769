"""Helpers for the local crew service conformance suite (plain HTTP with requests, not our hook)."""

from __future__ import annotations

from typing import Any

import requests

from airflow_provider_crew.testing import LocalCrewService

# Crews for tests that need exact control; steps are short so runs finish in tens of ms.
FAST = {"pending_seconds": 0.005, "step_seconds": 0.005}


def crew(name: str, *tasks: dict[str, Any], inputs: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A crew dict with fast defaults."""
    return {
        "name": name,
        "inputs": inputs if inputs is not None else ["topic"],
        **FAST,
        **extra,
        "tasks": list(tasks),
    }


def task(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "agent": f"{name} agent",
        "description": f"Do {name} about {{topic}}",
        "steps": 1,
        **extra,
    }


class Api:
    """Requests against one service with a chosen token; every call returns the raw Response."""

    def __init__(self, service: LocalCrewService, token: str = "org", base_url: str | None = None) -> None:
        self.service = service
        self.base_url = base_url or service.base_url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {service.token(token)}"

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.session.get(self.base_url + path, timeout=10, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> requests.Response:
        return self.session.post(self.base_url + path, json=json, timeout=10, **kw)

    def kickoff(self, inputs: dict[str, Any] | None = None, **body: Any) -> str:
        resp = self.post("/kickoff", {"inputs": inputs if inputs is not None else {"topic": "AI"}, **body})
        assert resp.status_code == 200, resp.text
        return resp.json()["kickoff_id"]

    def status(self, kickoff_id: str) -> dict[str, Any]:
        resp = self.get(f"/{kickoff_id}/status")
        assert resp.status_code == 200, resp.text
        return resp.json()

    def resume(
        self, kickoff_id: str, task_id: str, feedback: str, approve: bool, **body: Any
    ) -> requests.Response:
        return self.post(
            "/resume",
            {
                "execution_id": kickoff_id,
                "task_id": task_id,
                "human_feedback": feedback,
                "is_approve": approve,
                **body,
            },
        )

    def close(self) -> None:
        self.session.close()


def human_hook(service: LocalCrewService, strategy: str = "bearer") -> dict[str, Any]:
    """A humanInputWebhook object pointing at the service's receiver."""
    auth: dict[str, Any] = {"strategy": strategy}
    if strategy == "bearer":
        auth["token"] = "hook-secret"
    else:
        auth.update(username="alice", password="s3cret")
    return {"url": service.webhooks.url_for("human"), "authentication": auth}


def all_hooks(service: LocalCrewService, suffix: str = "") -> dict[str, str]:
    """task/step/crew webhook URLs on the receiver; ``suffix`` tells rounds apart (e.g. "-after")."""
    return {
        "taskWebhookUrl": service.webhooks.url_for("task" + suffix),
        "stepWebhookUrl": service.webhooks.url_for("step" + suffix),
        "crewWebhookUrl": service.webhooks.url_for("crew" + suffix),
    }
