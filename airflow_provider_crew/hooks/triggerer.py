"""The triggers' async path: status reads shared by every wait in a triggerer's event loop.

A triggerer may hold thousands of waits in one loop. They share the connection looked up for
their connection id (again after :data:`CONNECTION_TTL_SECONDS`), its status request headers and
the loop's aiohttp session (:mod:`.async_transport`). :meth:`CrewHook.aget_status` reads through
:func:`aread_status` as well.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_crew.connection import CrewConnectionConfig, StatusPathStyle
from airflow_provider_crew.exceptions import CrewError
from airflow_provider_crew.hooks.airflow_connection import aread_config
from airflow_provider_crew.hooks.answers import read_get_answer
from airflow_provider_crew.hooks.async_transport import AsyncTransport
from airflow_provider_crew.hooks.calls import USER_AGENT, request_headers, status_call
from airflow_provider_crew.hooks.retry import RetryPolicy, asend_with_retries
from airflow_provider_crew.hooks.status_path import LEARNED_STATUS_PATHS
from airflow_provider_crew.hooks.transport import Call, Response
from airflow_provider_crew.models import CrewStatus

# How long a connection looked up for the waits of an event loop is used before it is looked up
# again: a rotated token or a moved service is picked up within this long.
CONNECTION_TTL_SECONDS = 60.0

_ASYNC_TRANSPORT = AsyncTransport(USER_AGENT)


async def asend(
    call: Call, config: CrewConnectionConfig, *, deadline: float | None, clock: Callable[[], float]
) -> Response:
    """Send a GET under the retry policy, through the loop's shared session.

    :param call: The request; only a GET (kickoff and resume stay sync).
    :param config: The connection's settings (limits, retries).
    :param deadline: Epoch seconds; no attempt or retry is made to run past it.
    :param clock: The clock the retry policy reads (epoch seconds).
    """
    if not call.idempotent:
        raise CrewError("the async transport only sends GET requests")  # kickoff/resume stay sync
    policy = RetryPolicy(call, config, deadline=deadline, clock=clock)
    return await asend_with_retries(_ASYNC_TRANSPORT.send, policy)


async def aread_status(
    config: CrewConnectionConfig,
    call_for: Callable[[StatusPathStyle], Call],
    *,
    deadline: float | None,
    clock: Callable[[], float] = time.time,
) -> CrewStatus:
    """An execution's status, asking each status path style to try until one answers.

    :param config: The connection's settings.
    :param call_for: The status request in a given style.
    :param deadline: Epoch seconds; no attempt or retry is made to run past it.
    :param clock: The clock the retry policy reads (epoch seconds).
    """
    styles = LEARNED_STATUS_PATHS.styles_to_try(config)
    for index, style in enumerate(styles):
        call = call_for(style)
        response = await asend(call, config, deadline=deadline, clock=clock)
        if response.status_code == 404 and index + 1 < len(styles):
            continue
        LEARNED_STATUS_PATHS.learn(config, style, response)
        return read_get_answer(call, response, CrewStatus.from_response)
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(slots=True)
class SharedConnection:
    """A connection's settings as every wait in one event loop uses them, until ``expires``."""

    conn_id: str
    config: CrewConnectionConfig
    headers: dict[str, str]  # a status request's headers, shared by every wait's requests
    expires: float  # loop.time()

    def status_call(self, kickoff_id: str, style: StatusPathStyle) -> Call:
        """The status request for ``kickoff_id`` in ``style``, with the shared headers."""
        return status_call(self.config.base_url, self.headers, kickoff_id, style)


# Per event loop (the triggerer runs one): conn_id -> the connection, or the lookup in flight.
_loop_connections: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, SharedConnection | asyncio.Task[SharedConnection]]
] = weakref.WeakKeyDictionary()


async def shared_connection(conn_id: str, *, ttl: float | None = None) -> SharedConnection:
    """``conn_id`` looked up once per event loop and ``ttl`` seconds, for every wait that uses it.

    Waits that ask while a lookup is in flight share it; a failed lookup is not kept (the next
    call looks up again). Connection errors raise as :meth:`CrewHook.aget_config` raises them.

    :param conn_id: The ``crew`` connection.
    :param ttl: Seconds the lookup is used; :data:`CONNECTION_TTL_SECONDS` by default.
    """
    loop = asyncio.get_running_loop()
    connections = _loop_connections.get(loop)
    if connections is None:
        connections = _loop_connections[loop] = {}
    entry = connections.get(conn_id)
    if isinstance(entry, SharedConnection) and entry.expires > loop.time():
        return entry
    if not isinstance(entry, asyncio.Task):
        lifetime = CONNECTION_TTL_SECONDS if ttl is None else ttl
        entry = loop.create_task(_look_up(conn_id, lifetime, connections))
        connections[conn_id] = entry
    # shield: a wait cancelled meanwhile does not cancel the lookup the other waits share.
    return await asyncio.shield(entry)


async def _look_up(
    conn_id: str, ttl: float, connections: dict[str, SharedConnection | asyncio.Task[SharedConnection]]
) -> SharedConnection:
    this = asyncio.current_task()
    try:
        config = await aread_config(conn_id)
    except BaseException:
        if connections.get(conn_id) is this:
            del connections[conn_id]
        raise
    loop_time = asyncio.get_running_loop().time()
    shared = SharedConnection(conn_id, config, request_headers(config), loop_time + ttl)
    connections[conn_id] = shared
    return shared


def forget_shared_connections() -> None:
    """Drop the running loop's looked-up connections (tests)."""
    _loop_connections.pop(asyncio.get_running_loop(), None)


async def aget_status_shared(
    connection: SharedConnection, kickoff_id: str, *, deadline: float | None = None
) -> CrewStatus:
    """:meth:`CrewHook.aget_status` for a wait in a triggerer, with its loop's shared connection.

    :param connection: The loop's connection (:func:`shared_connection`).
    :param kickoff_id: The execution.
    :param deadline: Epoch seconds; retries that would sleep past it are not made.
    """
    base_url, headers = connection.config.base_url, connection.headers
    return await aread_status(
        connection.config,
        lambda style: status_call(base_url, headers, kickoff_id, style),
        deadline=deadline,
    )
