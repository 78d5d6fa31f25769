"""The human-input webhook's address and credential, read from an Airflow connection.

A kickoff that gives a human-input webhook tells the service where to announce a pause and which
credential to send there (docs/contract.md). The credential comes from a connection so that none
sits in DAG code; any connection type works, since only host, login, password and extra are read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_crew._compat import BaseHook
from airflow_provider_crew.connection_form import DEFAULT_RECEIVER_CONN_ID
from airflow_provider_crew.exceptions import CrewConfigurationError

if TYPE_CHECKING:
    # Imported where a kickoff builds the webhook: a DAG file imports this module with the operator.
    from airflow_provider_crew.models import HumanInputWebhook


def webhook_connection_extra(connection: Any, conn_id: str) -> dict[str, Any]:
    """The webhook connection's extra as a dict, read as a crew connection's is
    (:func:`~airflow_provider_crew.connection.connection_extra`); its one extra, ``strategy``, is no secret.

    :param connection: The Airflow connection.
    :param conn_id: Its id, for the error when the extra is not a JSON object.
    """
    from airflow_provider_crew.connection import connection_extra

    return connection_extra(
        connection,
        invalid=f"human_input_webhook_conn_id={conn_id!r}: the connection's extra is not a JSON object; "
        'use e.g. {"strategy": "bearer"} or leave it empty.',
    )


def check_pause_webhook(url: str | None, conn_id: str | None) -> None:
    """Fail, naming both parameters, when ``human_input_webhook_url`` and ``human_input_webhook_conn_id``
    do not go together (checked at DAG parse, at task start and when the webhook is built)."""
    if url and not conn_id:
        raise CrewConfigurationError(
            "human_input_webhook_url needs human_input_webhook_conn_id: a connection holding the bearer "
            "token (password) or login and password the service must send to it."
        )
    if url and conn_id == DEFAULT_RECEIVER_CONN_ID:
        raise CrewConfigurationError(
            f"human_input_webhook_url is set with human_input_webhook_conn_id={conn_id!r}: the webhook "
            "receiver builds each run's address itself. Leave human_input_webhook_url out."
        )


def human_input_webhook(
    url: str | None, conn_id: str, *, run: tuple[str, str] | None = None
) -> HumanInputWebhook:
    """Build ``humanInputWebhook`` from an Airflow connection, so no credential sits in DAG code.

    How its fields are read: ``human_input_webhook_conn_id`` in docs/api.md. Errors name the connection
    and the fields, never the credential. The webhook receiver's connection (``crew_webhook_receiver``)
    gives the run's own address on Airflow's api-server, so that a pause wakes the waits on it.

    :param url: Where the service announces a pause; None or empty: the connection's host.
    :param conn_id: The connection holding the credential the service must send there.
    :param run: ``(dag_id, run_id)`` of the run asking, for the webhook receiver's address.
    """
    check_pause_webhook(url, conn_id)
    if conn_id == DEFAULT_RECEIVER_CONN_ID:
        if run is None:
            raise CrewConfigurationError(f"{conn_id!r} gives a DAG run's address: it needs the run.")
        from airflow_provider_crew.hooks.webhook_receiver import CrewWebhookReceiverHook

        return CrewWebhookReceiverHook(conn_id).human_input_address(*run)
    from airflow_provider_crew.connection import defined_where_this_runs

    with defined_where_this_runs(conn_id):
        connection = BaseHook.get_connection(conn_id)
    url = url or connection.host
    if not url:
        raise CrewConfigurationError(
            f"No human-input webhook URL: give human_input_webhook_url, or put the URL in the host of "
            f"connection {conn_id!r}."
        )
    login, password = connection.login or None, connection.password or None
    extra = webhook_connection_extra(connection, conn_id)
    strategy = extra.get("strategy") or ("basic" if login else "bearer")
    if not password:
        raise CrewConfigurationError(
            f"human_input_webhook_conn_id={conn_id!r}: the connection has no password. Put the bearer token "
            "the service must send in its password field (or a login and password for basic auth)."
        )
    if strategy == "bearer":
        authentication: dict[str, Any] = {"strategy": "bearer", "token": password}
    elif strategy == "basic":
        if not login:
            raise CrewConfigurationError(
                f"human_input_webhook_conn_id={conn_id!r}: strategy 'basic' needs the connection's login."
            )
        authentication = {"strategy": "basic", "username": login, "password": password}
    else:
        raise CrewConfigurationError(
            f"human_input_webhook_conn_id={conn_id!r}: extra 'strategy' is {strategy!r}; "
            "use 'bearer' or 'basic'."
        )
    from airflow_provider_crew.models import HumanInputWebhook

    try:
        return HumanInputWebhook.model_validate({"url": url, "authentication": authentication})
    except ValueError:
        # The model's message could echo the credential; name the fields instead.
        raise CrewConfigurationError(
            f"human_input_webhook_url={url!r} with connection {conn_id!r} is not a valid human-input "
            "webhook: the URL must be http(s) and the connection must hold a token or a login and password."
        ) from None


__all__ = ["human_input_webhook", "webhook_connection_extra"]
