"""What the waits of one event loop share (a triggerer may hold thousands), and their status read
through it (:func:`aread_status`): the ``crew`` connection, looked up once per loop and
:data:`CONNECTION_TTL_SECONDS` with its status requests' headers (again at once when the service
refuses its token), and one ``aiohttp`` session (:func:`shared_session`), closed when the loop ends.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import AirflowNotFoundException, aget_connection
from airflow_provider_crew.exceptions import CrewAuthenticationError

if TYPE_CHECKING:
    import aiohttp

    from airflow_provider_crew.connection import CrewConnectionConfig
    from airflow_provider_crew.status import CrewStatus

# How long a connection looked up for the waits of an event loop is used before it is looked up
# again: a rotated token or a moved service is picked up within this long (at once, when the service
# refuses the token it holds: aread_status).
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
    from airflow_provider_crew.connection import config_from_connection, not_defined_where_this_runs
    from airflow_provider_crew.hooks.client.request import request_headers

    this = asyncio.current_task()
    try:
        try:
            connection = await aget_connection(conn_id)
        except AirflowNotFoundException:
            raise not_defined_where_this_runs(conn_id) from None
        config = config_from_connection(connection, conn_id)
    except BaseException:
        if connections.get(conn_id) is this:
            del connections[conn_id]
        raise
    loop_time = asyncio.get_running_loop().time()
    shared = SharedConnection(conn_id, config, request_headers(config), loop_time + ttl)
    connections[conn_id] = shared
    return shared


def with_overrides(config: CrewConnectionConfig, overrides: Mapping[str, Any]) -> CrewConnectionConfig:
    """``config`` with a hook's overrides of its settings (``retry_limit``, ``retry_delay``), if any."""
    return config.model_copy(update=overrides) if overrides else config


# -- the status read ------------------------------------------------------------------------------------


async def aread_status(
    conn_id: str,
    kickoff_id: str,
    *,
    deadline: float | None,
    overrides: Mapping[str, Any],
    named_conn_id: str | None,
    clock: Callable[[], float],
) -> CrewStatus:
    """:meth:`.crew.CrewHook.aget_status`: ``kickoff_id``'s status read with ``conn_id`` as the loop's
    waits share it (the hook passes its ``overrides``, how its errors name the connection and the clock
    of its retry policy). A token rotated within :data:`CONNECTION_TTL_SECONDS` is refused: the
    connection is looked up again at once, and the status read once more unless the token is the same.
    """
    from airflow_provider_crew.hooks.client.request import Call, read_status
    from airflow_provider_crew.hooks.client.retry import RetryPolicy, asend_with_retries
    from airflow_provider_crew.hooks.client.transport import AsyncTransport

    async def read_with(shared: SharedConnection) -> CrewStatus:
        """One read with ``shared``: each request of :func:`.client.request.read_status` sent under the
        retry policy through the loop's session."""
        config = with_overrides(shared.config, overrides)
        read = read_status(config, kickoff_id, headers=shared.headers, conn_id=named_conn_id)
        step = next(read)
        while isinstance(step, Call):
            policy = RetryPolicy(step, config, deadline=deadline, clock=clock)
            step = read.send(await asend_with_retries(AsyncTransport(shared_session()).send, policy))
        return step

    shared = await shared_connection(conn_id)
    try:
        return await read_with(shared)
    except CrewAuthenticationError:  # a token rotated within the loop's TTL: look it up again, once
        fresh = await shared_connection(conn_id, stale=shared)
        if fresh.config.token == shared.config.token:
            raise
        return await read_with(fresh)


# -- the session ----------------------------------------------------------------------------------------

# One aiohttp session per event loop, shared by every trigger in a triggerer: measured here a
# shared session costs ~170 µs CPU per poll against ~660 µs for a new session per poll. Each entry
# holds the task that closes its session when the loop ends (the loop keeps only a weak reference).
SHARED_SESSIONS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, asyncio.Task[None]]
] = weakref.WeakKeyDictionary()


async def _close_when_the_loop_ends(session: aiohttp.ClientSession) -> None:
    """Wait until cancelled, then close ``session`` and forget it.

    ``asyncio.run`` (the triggerer, ``airflow dags test``) and pytest's loop runner cancel the
    tasks left when their main coroutine ends: this is how the shared session gets closed inside
    its own loop, instead of being found unclosed ("Unclosed client session") after the loop is gone.
    Forgetting it matters too: the session refers to its loop, so an entry left in the weak-keyed
    map would keep the loop, its connector and the session alive until the process ends.
    """
    loop = asyncio.get_running_loop()
    try:
        await asyncio.Event().wait()
    finally:
        entry = SHARED_SESSIONS.get(loop)
        if entry is not None and entry[0] is session:
            del SHARED_SESSIONS[loop]
        await session.close()


def shared_session() -> aiohttp.ClientSession:
    """The running loop's shared session, created on first use and closed when the loop ends."""
    loop = asyncio.get_running_loop()
    entry = SHARED_SESSIONS.get(loop)
    if entry is None or entry[0].closed:
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256, limit_per_host=64, keepalive_timeout=30),
            raise_for_status=False,
        )
        closer = loop.create_task(
            _close_when_the_loop_ends(session), name="airflow-provider-crew: close the shared session"
        )
        entry = SHARED_SESSIONS[loop] = (session, closer)
    return entry[0]


__all__ = [
    "CONNECTION_TTL_SECONDS",
    "SHARED_SESSIONS",
    "SharedConnection",
    "aread_status",
    "shared_connection",
    "shared_session",
    "with_overrides",
]
