"""Errors about a connection's settings name the connection and the form's field, over real HTTP
against the local crew service (issue #49): a rejected token says "check 'Bearer token' (the
password) of connection '<id>'", keeping what the service said; Airflow's Test action, which runs
under an id the user never chose, names no id."""

from __future__ import annotations

import json

import pytest

from airflow_provider_crew.exceptions import CrewAuthenticationError
from airflow_provider_crew.hooks.crew import CrewHook
from tests.conftest import close_shared_sessions

WRONG_TOKEN = "not-the-crew-token-2c9d"
INPUTS = {"topic": "tides", "current_year": "2026"}
KICKOFF_ID = "0b6f3c1e-0000-4000-8000-00000000beef"
REJECTED = (
    "The crew service rejected the token (401): check 'Bearer token' (the password) of connection "
    "'crew_prod'; it must hold the token from the crew's status tab."
)


@pytest.fixture
def connect(crew_service, monkeypatch):
    """A hook on connection ``conn_id`` to the local service, with ``password`` as its token."""

    def install(conn_id: str = "crew_prod", password: str | None = None) -> CrewHook:
        connection = crew_service.connection_dict(status_path_style="contract")
        connection["password"] = password or connection["password"]
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
        return CrewHook(conn_id)

    return install


async def aget_status(hook: CrewHook, kickoff_id: str):
    try:
        return await hook.aget_status(kickoff_id)
    finally:
        await close_shared_sessions()


def test_a_rejected_token_names_the_field_and_the_connection_and_keeps_what_the_service_said(
    crew_service, connect
):
    hook = connect(password=WRONG_TOKEN)

    with pytest.raises(CrewAuthenticationError) as caught:
        hook.get_inputs()

    error = caught.value
    assert (
        str(error) == f"GET /inputs answered 401: Unauthorized: Invalid or missing bearer token. {REJECTED}"
    )
    assert (error.http_status, error.service_message) == (401, "Invalid or missing bearer token")
    assert WRONG_TOKEN not in str(error) and crew_service.org_token not in str(error)


@pytest.mark.parametrize("request_name", ["kickoff", "resume", "get_status", "aget_status"])
async def test_every_request_names_the_connection_when_the_token_is_rejected(
    crew_service, connect, request_name
):
    hook = connect(password=WRONG_TOKEN)
    requests = {
        "kickoff": lambda: hook.kickoff(INPUTS),
        "resume": lambda: hook.resume(KICKOFF_ID, "draft", "Looks good.", True),
        "get_status": lambda: hook.get_status(KICKOFF_ID),
    }

    with pytest.raises(CrewAuthenticationError) as caught:
        if request_name == "aget_status":
            await aget_status(hook, KICKOFF_ID)
        else:
            requests[request_name]()

    message = str(caught.value)
    assert "answered 401: Unauthorized: Invalid or missing bearer token." in message
    assert message.endswith(REJECTED)
    assert WRONG_TOKEN not in message
    assert crew_service.executions == {}


def test_a_403_names_the_connection_too(crew_service, connect):
    hook = connect("crew_default")
    crew_service.faults.error(403, endpoint="kickoff", retry_after=None)

    with pytest.raises(CrewAuthenticationError) as caught:
        hook.kickoff(INPUTS)

    assert str(caught.value) == (
        "POST /kickoff answered 403: Forbidden: Injected 403 fault. The crew service rejected the token "
        "(403): check 'Bearer token' (the password) of connection 'crew_default'; it must hold the token "
        "from the crew's status tab."
    )


def test_a_redirect_names_the_host_field_of_the_connection(crew_service, connect):
    hook = connect()
    crew_service.faults.redirect("https://elsewhere.example.test", endpoint="inputs")

    with pytest.raises(Exception, match="redirect") as caught:
        hook.get_inputs()

    assert "Set 'Crew base URL' (the host) of connection 'crew_prod' to the address" in str(caught.value)


def test_the_test_action_names_no_connection_id(crew_service, connect):
    """Airflow tests a connection under a random id: the messages say "the connection"."""
    hook = connect("crew_random_f00d")
    crew_service.faults.redirect("https://elsewhere.example.test", endpoint="inputs")

    ok, message = hook.test_connection()

    assert not ok
    assert "Set 'Crew base URL' (the host) of the connection to the address" in message
    assert "crew_random_f00d" not in message
