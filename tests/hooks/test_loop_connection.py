"""The status read of an event loop's waits (hooks/loop_connection.py), without a service: a token
rotated within the lifetime of the loop's lookup is looked up again at its first refusal and sent
once more; a refusal of the token the connection still holds stands, and is not sent again."""

from __future__ import annotations

import json

import pytest

from airflow_provider_crew.exceptions import CrewAuthenticationError
from airflow_provider_crew.hooks.client import transport
from airflow_provider_crew.hooks.client.response import Response
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.status import CrewState
from tests.conftest import BASE_URL, close_shared_sessions

KICKOFF_ID = "k-rotated"
REFUSED = b'{"error": "Unauthorized", "message": "Invalid or missing bearer token"}'


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    """A service that takes only the token ``new-token``: the tokens sent to it, in order."""
    tokens: list[str] = []

    async def send(self, call, limits) -> Response:
        tokens.append(call.headers["Authorization"].removeprefix("Bearer "))
        if tokens[-1] != "new-token":
            return Response(401, {}, REFUSED)
        return Response(200, {}, b'{"state": "RUNNING"}')

    monkeypatch.setattr(transport.AsyncTransport, "send", send)
    return tokens


def connect(monkeypatch, token: str) -> None:
    connection = {"conn_type": "crew", "host": BASE_URL, "password": token}
    connection["extra"] = {"status_path_style": "contract"}
    monkeypatch.setenv("AIRFLOW_CONN_CREW_LOOP", json.dumps(connection))


async def test_a_token_rotated_within_the_lookups_lifetime_is_looked_up_again_at_its_refusal(
    monkeypatch, sent
):
    connect(monkeypatch, "old-token")
    hook = CrewHook("crew_loop")
    try:
        await hook.aget_config()  # the loop looks the connection up: the old token, kept for a minute
        connect(monkeypatch, "new-token")
        status = await hook.aget_status(KICKOFF_ID)
    finally:
        await close_shared_sessions()

    assert status.state is CrewState.RUNNING
    assert sent == ["old-token", "new-token"]


async def test_a_refused_token_the_connection_still_holds_is_not_sent_again(monkeypatch, sent):
    connect(monkeypatch, "old-token")
    try:
        with pytest.raises(CrewAuthenticationError, match="of connection 'crew_loop'"):
            await CrewHook("crew_loop").aget_status(KICKOFF_ID)
    finally:
        await close_shared_sessions()

    assert sent == ["old-token"]  # looked up again, found the same token: the refusal stands
