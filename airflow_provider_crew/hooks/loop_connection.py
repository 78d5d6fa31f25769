"""The ``crew`` connection as the waits of one event loop share it: looked up once per loop and
:data:`CONNECTION_TTL_SECONDS`, with its status requests' headers; a triggerer may hold thousands.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_crew._compat import aget_connection

if TYPE_CHECKING:
    from airflow_provider_crew.connection import CrewConnectionConfig

# How long a connection looked up for the waits of an event loop is used before it is looked up
# again: a rotated token or a moved service is picked up within this long (at once, when the service
# refuses the token it holds: CrewHook.aget_status).
CONNECTION_TTL_SECONDS = 60.0


@dataclass(slots=True)
class SharedConnection:
    """A connection's settings as every wait in one event loop uses them, until ``expires``."""

    conn_id: str
    config: CrewConnectionConfig
    # A status request's headers, shared by every wait's requests; they hold the token: no repr.
    headers: dict[str, str] = field(repr=False)
    expires: float  # loop.time()


# Per event loop (the triggerer runs one): conn_id -> the connection, or the lookup in flight.
_loop_connections: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, SharedConnection | asyncio.Task[SharedConnection]]
] = weakref.WeakKeyDictionary()


async def shared_connection(
    conn_id: str, *, ttl: float | None = None, stale: SharedConnection | None = None
) -> SharedConnection:
    """``conn_id`` looked up once per event loop and ``ttl`` seconds, for every wait that uses it.

    Waits that ask while a lookup is in flight share it; a failed lookup is not kept (the next
    call looks up again). The lookup does not block the loop (Airflow's async connection lookup).

    :param conn_id: The ``crew`` connection.
    :param ttl: Seconds the lookup is used; :data:`CONNECTION_TTL_SECONDS` by default.
    :param stale: A lookup the service refused the token of: looked up again, unless another wait
        already did.
    """
    loop = asyncio.get_running_loop()
    connections = _loop_connections.get(loop)
    if connections is None:
        connections = _loop_connections[loop] = {}
    entry = connections.get(conn_id)
    if isinstance(entry, SharedConnection) and entry.expires > loop.time() and entry is not stale:
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
    from airflow_provider_crew.connection import config_from_connection, defined_where_this_runs
    from airflow_provider_crew.hooks.client.request import request_headers

    this = asyncio.current_task()
    try:
        with defined_where_this_runs(conn_id):
            connection = await aget_connection(conn_id)
        config = config_from_connection(connection, conn_id)
    except BaseException:
        if connections.get(conn_id) is this:
            del connections[conn_id]
        raise
    loop_time = asyncio.get_running_loop().time()
    shared = SharedConnection(conn_id, config, request_headers(config), loop_time + ttl)
    connections[conn_id] = shared
    return shared


__all__ = ["CONNECTION_TTL_SECONDS", "SharedConnection", "shared_connection"]
