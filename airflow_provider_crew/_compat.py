"""Imports that moved between Airflow 3.0 and later 3.x releases, resolved in one place.

``apache-airflow-providers-common-compat`` already maps every moved name to the right module for
the running Airflow; this module adds the version flags the provider itself needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow import __version__ as _airflow_version
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    BaseHook,
    BaseOperator,
    BaseSensorOperator,
    conf,
)
from packaging.version import Version

if TYPE_CHECKING:
    from airflow.sdk.definitions.connection import Connection

AIRFLOW_VERSION = Version(Version(_airflow_version).base_version)
AIRFLOW_V_3_1_PLUS = AIRFLOW_VERSION >= Version("3.1.0")
AIRFLOW_V_3_3_PLUS = AIRFLOW_VERSION >= Version("3.3.0")


async def aget_connection(conn_id: str) -> Connection:
    """Look a connection up without blocking the event loop (triggers run in the triggerer's loop).

    The common-compat helper picks ``BaseHook.aget_connection`` where it is safe (3.3.2+) and a
    worker thread elsewhere: before 3.3.2 ``aget_connection`` can deadlock on secret masking.
    """
    from airflow.providers.common.compat.connection import get_async_connection

    return await get_async_connection(conn_id)  # type: ignore[no-any-return]


def default_deferrable() -> bool:
    """The deployment-wide default for ``deferrable``, read the way Airflow's own operators read it."""
    return conf.getboolean("operators", "default_deferrable", fallback=False)


__all__ = [
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "BaseHook",
    "BaseOperator",
    "BaseSensorOperator",
    "aget_connection",
    "conf",
    "default_deferrable",
]
