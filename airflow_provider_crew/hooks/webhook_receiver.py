"""Where a crew announces that an execution finished or paused, so that Airflow wakes the wait at once.

The crew's webhooks reach Airflow's api-server, where the provider's plugin
(:mod:`airflow_provider_crew.plugins.crew`) wakes the deferred waits on that execution. The
address is built here, per DAG run, from the ``crew_webhook_receiver`` connection
(:class:`CrewWebhookReceiverHook`).

The contract's crew webhook carries no credentials, so the address itself is the credential: the
run's token rides in its query string, which every HTTP client sends as it is; the human-input
webhook sends it as its bearer token. Where it is logged, and what a leaked one allows:
docs/webhook-wake.md, "Security".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from airflow_provider_crew import __version__
from airflow_provider_crew._compat import AirflowNotFoundException, BaseHook
from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.connection_form import (
    DEFAULT_RECEIVER_CONN_ID,
    RECEIVER_CONN_TYPE,
    RECEIVER_UI_FIELD_BEHAVIOUR,
)
from airflow_provider_crew.exceptions import CrewConfigurationError
from airflow_provider_crew.hooks.client.request import USER_AGENT
from airflow_provider_crew.models import EventSubscription, HumanInputWebhook
from airflow_provider_crew.urls import CrewConnectionError, normalise_base_url

log = logging.getLogger(__name__)

#: Where the plugin is mounted on the api-server; the only path an ingress needs to expose.
PLUGIN_PREFIX = "/crew-webhooks"
API_VERSION = "v1"
#: The kinds of webhook that wake a wait: completion (crew) and a pause for human input (human).
KINDS = ("crew", "human")
#: The query parameter of the completion address that carries the run's token.
TOKEN_PARAMETER = "token"
MIN_KEY_LENGTH = 24
# How long a worker process trusts one check of the plugin's health.
HEALTH_TTL_SECONDS = 300.0

_TOKEN_CONTEXT = b"airflow-provider-crew/wake/v1"
# The receiver's key is never used as it is: each use signs with its own key derived from it, so that
# what ``/health`` signs for anyone (a caller's nonce) can never be a run's token, whatever the nonce.
HEALTH_KEY_PURPOSE = b"crew-wake health v1"
RUN_TOKEN_KEY_PURPOSE = b"crew-wake run-token v1"
# The event stream's bearer token is a run token of its own: the completion address's token rides in a
# query string that proxies may log, and must not let its reader post events.
EVENTS_TOKEN_KEY_PURPOSE = b"crew-events run-token v1"
#: The path of the event stream's deliveries, under the plugin's version.
EVENTS = "events"
#: The query parameter with which a subscription asks the receiver to keep model responses (the crew
#: connection's ``event_stream_content``); the address is built by the task, behind the run's token.
CONTENT_PARAMETER = "content"
# The longest token looked at: a run's token is 43 characters.
MAX_TOKEN_LENGTH = 256


def derived_key(key: str, purpose: bytes) -> bytes:
    """The key for one ``purpose`` (:data:`HEALTH_KEY_PURPOSE`, :data:`RUN_TOKEN_KEY_PURPOSE`):
    HMAC-SHA256 of the purpose under the receiver's key."""
    return hmac.new(key.encode(), purpose, hashlib.sha256).digest()


def run_token(key: str, dag_id: str, run_id: str, purpose: bytes = RUN_TOKEN_KEY_PURPOSE) -> str:
    """The secret of one DAG run's webhook address: an HMAC of the run, under the key derived from
    ``key`` for ``purpose`` (the wake's webhooks, or :data:`EVENTS_TOKEN_KEY_PURPOSE`).

    :param key: The receiver connection's key.
    :param dag_id: The run's DAG.
    :param run_id: The run.
    """
    message = b"\0".join((_TOKEN_CONTEXT, dag_id.encode(), run_id.encode()))
    digest = hmac.new(derived_key(key, purpose), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def token_matches(
    keys: tuple[str, ...], dag_id: str, run_id: str, token: str, purpose: bytes = RUN_TOKEN_KEY_PURPOSE
) -> bool:
    """Whether ``token`` is the run's secret for ``purpose`` under any of ``keys``, compared in constant
    time. Every key is tried, so the time does not tell which one (or whether any) matched.
    """
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(run_token(key, dag_id, run_id, purpose), token)
    return matched


def usable_token(token: str | None) -> str | None:
    """``token`` when it can be a run's token (present, ASCII, at most :data:`MAX_TOKEN_LENGTH`), else
    None: such a request is refused as a wrong token is."""
    if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        return None
    return token


def bearer_token(authorization: str) -> str | None:
    """The bearer token of an ``Authorization`` header's value, when it can be a run's token."""
    scheme, _, value = authorization.partition(" ")
    return usable_token(value.strip()) if scheme.lower() == "bearer" else None


def key_check(key: str, nonce: str) -> str:
    """A proof of holding ``key`` for ``nonce``: the worker and the api-server compare theirs.

    Signed with the health key derived from ``key``, never with the key run tokens are made with:
    the api-server signs any caller's nonce.
    """
    message = b"key-check\0" + nonce.encode()
    return hmac.new(derived_key(key, HEALTH_KEY_PURPOSE), message, hashlib.sha256).hexdigest()


def wake_path(kind: str, dag_id: str, run_id: str) -> str:
    """The plugin's path for ``kind`` webhooks of one run, each part quoted."""
    return f"{PLUGIN_PREFIX}/{API_VERSION}/{kind}/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


@dataclass(frozen=True)
class ReceiverConfig:
    """The receiver connection, validated: the api-server's address as crews reach it, and its keys."""

    base_url: str
    keys: tuple[str, ...] = field(repr=False)  # the first signs; all of them verify (rotation)

    @classmethod
    def from_connection(
        cls, connection: Any, conn_id: str, *, name_connection: bool = True
    ) -> ReceiverConfig:
        """Validate the receiver connection; errors name the field, and the connection unless told not to
        (Airflow's Test action runs under a random id)."""
        where = f"Connection {conn_id!r}" if name_connection else "The connection"
        try:
            label = RECEIVER_UI_FIELD_BEHAVIOUR["relabeling"]["host"]
            base_url = normalise_base_url(
                connection.host, port=connection.port, path=connection.schema, label=label
            )
        except CrewConnectionError as error:
            raise CrewConfigurationError(f"{where}: {error}") from None
        keys = tuple(part for part in (connection.password or "").replace(",", " ").split() if part)
        if not keys:
            raise CrewConfigurationError(
                f"{where} has no key: put a random key of at least {MIN_KEY_LENGTH} characters in its "
                "password (python -c 'import secrets; print(secrets.token_urlsafe(32))')."
            )
        if any(len(key) < MIN_KEY_LENGTH for key in keys):
            raise CrewConfigurationError(
                f"{where}: every key in the password must have at least {MIN_KEY_LENGTH} "
                "characters (keys are separated by spaces; the first one signs new addresses)."
            )
        return cls(base_url=base_url, keys=keys)


def receiver_config(
    get_connection: Callable[[str], Any],
    conn_id: str,
    *,
    name_connection: bool = True,
    where: str = "where this runs",
) -> ReceiverConfig:
    """The receiver connection, looked up with ``get_connection`` and validated: the one check of the
    webhook's credentials, for a worker (the hook) and for the api-server (the plugin) alike.

    :param get_connection: Airflow's lookup where this runs; raises ``AirflowNotFoundException``.
    :param conn_id: The connection.
    :param name_connection: Name it in errors (not for Airflow's Test action, which runs under a random id).
    :param where: Where it is looked up, for the error when it is not defined.
    :raises CrewConfigurationError: It is not defined, or not usable (the error names the field).
    """
    try:
        connection = get_connection(conn_id)
    except AirflowNotFoundException:
        named = f"Connection {conn_id!r}" if name_connection else "The connection"
        raise CrewConfigurationError(f"{named} is not defined {where}.") from None
    return ReceiverConfig.from_connection(connection, conn_id, name_connection=name_connection)


@dataclass(frozen=True)
class WakeAddresses:
    """What a kickoff or resume sends so that the crew's webhooks wake this run's waits.

    :param crew_webhook_url: The completion webhook, the run's token in its ``token`` query parameter.
    :param human_input_webhook: The human-input webhook: the address and the token as bearer.
    :param safety_poll_interval: Seconds between the status polls a woken wait still makes.
    :param event_stream: The ``webhooks`` object that subscribes to the crew's events, when the crew
        connection opts in (``event_stream``): this task instance's address, the run's events token.
    """

    crew_webhook_url: str = field(repr=False)
    human_input_webhook: HumanInputWebhook = field(repr=False)
    safety_poll_interval: float
    event_stream: EventSubscription | None = field(default=None, repr=False)


class CrewWebhookReceiverHook(BaseHook):
    """
    The address where crews announce that an execution finished or paused: Airflow's api-server.

    :param receiver_conn_id: The ``crew_webhook_receiver`` connection: host = the api-server's
        address as the crew service reaches it; password = the key (or keys, separated by spaces,
        the first one signing: rotation) the runs' secrets are derived with.
    """

    conn_name_attr = "receiver_conn_id"
    default_conn_name = DEFAULT_RECEIVER_CONN_ID
    conn_type = RECEIVER_CONN_TYPE
    hook_name = "Crew webhook receiver"

    def __init__(self, receiver_conn_id: str = DEFAULT_RECEIVER_CONN_ID) -> None:
        super().__init__()
        self.receiver_conn_id = receiver_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: the address and the key (Airflow < 3.2; 3.2+ reads provider info)."""
        return dict(RECEIVER_UI_FIELD_BEHAVIOUR)

    @cached_property
    def config(self) -> ReceiverConfig:
        """The validated connection (looked up once per hook)."""
        return receiver_config(self.get_connection, self.receiver_conn_id)

    def addresses(self, task_instance: Any, crew: CrewConnectionConfig) -> WakeAddresses:
        """The webhook addresses of one task instance's DAG run, for a crew at ``crew``.

        :param task_instance: The task instance (its DAG, run, task and map index).
        :param crew: The crew connection (its safety poll interval and event stream settings).
        """
        dag_id, run_id = task_instance.dag_id, task_instance.run_id
        url, token = self._address("crew", dag_id, run_id)
        crew_url = f"{url}?{urlencode({TOKEN_PARAMETER: token})}"
        human = self.human_input_address(dag_id, run_id)
        events = self.event_subscription(task_instance, crew) if crew.event_stream else None
        return WakeAddresses(crew_url, human, crew.safety_poll_interval, events)

    def event_subscription(self, task_instance: Any, crew: CrewConnectionConfig) -> EventSubscription:
        """The ``webhooks`` object: the events the provider uses, posted to this task instance's address
        with the run's events token as bearer token (no secret in the address)."""
        from airflow_provider_crew.crew_events import SUBSCRIBED_EVENTS

        ti = task_instance
        url, token = self._address(EVENTS, ti.dag_id, ti.run_id, EVENTS_TOKEN_KEY_PURPOSE)
        url += f"/{quote(ti.task_id, safe='')}/{-1 if ti.map_index is None else ti.map_index}"
        if crew.event_stream_content:
            url += f"?{urlencode({CONTENT_PARAMETER: 1})}"
        return EventSubscription.model_validate(
            {
                "events": list(SUBSCRIBED_EVENTS),
                "url": url,
                "realtime": crew.event_stream_realtime,
                "authentication": {"strategy": "bearer", "token": token},
            }
        )

    def human_input_address(self, dag_id: str, run_id: str) -> HumanInputWebhook:
        """The run's human-input webhook: the plugin's address, the run's token as bearer token."""
        url, token = self._address("human", dag_id, run_id)
        return HumanInputWebhook.model_validate(
            {"url": url, "authentication": {"strategy": "bearer", "token": token}}
        )

    def _address(
        self, kind: str, dag_id: str, run_id: str, purpose: bytes = RUN_TOKEN_KEY_PURPOSE
    ) -> tuple[str, str]:
        """The plugin's address for ``kind`` webhooks of the run, under the base URL, and the run's token
        for ``purpose`` (:func:`run_token`)."""
        config = self.config
        parts = urlsplit(config.base_url)
        url = parts._replace(path=f"{parts.path.rstrip('/')}{wake_path(kind, dag_id, run_id)}").geturl()
        return url, run_token(config.keys[0], dag_id, run_id, purpose)

    def test_connection(self) -> tuple[bool, str]:
        """For Airflow's Test action: ask the plugin behind the address, as a worker does; wakes nothing.

        :return: (success, message for the person who clicked Test; it never names the connection id).
        """
        try:
            config = receiver_config(self.get_connection, self.receiver_conn_id, name_connection=False)
        except CrewConfigurationError as error:
            return False, str(error)
        usable, why = self._ask_health(config)
        if not usable:
            return False, f"Webhook wake would be off: {why}."
        return True, (
            f"OK: the provider's plugin at {config.base_url}{PLUGIN_PREFIX} wakes waits with this key. "
            "Crew connections opt in with the extra wake_by_webhook."
        )

    def health(self) -> tuple[bool, str]:
        """Ask the plugin, through the address crews call, whether it wakes waits with the same key.

        :return: (usable, why not); cached per process for :data:`HEALTH_TTL_SECONDS`.
        """
        config = self.config
        cached = _health_cache.get(config.base_url)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1], cached[2]
        usable, why = self._ask_health(config)
        _health_cache[config.base_url] = (time.monotonic() + HEALTH_TTL_SECONDS, usable, why)
        return usable, why

    @staticmethod
    def _ask_health(config: ReceiverConfig) -> tuple[bool, str]:
        import secrets

        import requests

        nonce = secrets.token_hex(16)
        url = f"{config.base_url}{PLUGIN_PREFIX}/{API_VERSION}/health"
        try:
            answer = requests.get(
                url,
                params={"nonce": nonce},
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                timeout=(5, 10),
                allow_redirects=False,
            )
            body = answer.json() if answer.status_code == 200 and len(answer.content) < 65536 else None
        except (requests.RequestException, ValueError) as error:
            return False, f"{url} could not be read from this worker ({type(error).__name__})"
        if not isinstance(body, dict) or body.get("plugin") != "airflow-provider-crew":
            return False, f"{url} answered {answer.status_code} without the provider's plugin behind it"
        if not body.get("wake"):
            return (
                False,
                f"the api-server's plugin cannot wake waits: {body.get('reason') or 'no reason given'}",
            )
        if body.get("key_check") != key_check(config.keys[0], nonce):
            theirs = body.get("version")
            if theirs != __version__:
                # Another release may derive the keys differently: the same password would not do.
                return False, (
                    f"the api-server's plugin (provider {theirs}) does not prove the key this worker "
                    f"(provider {__version__}) holds: install the same provider release on both, with "
                    "the same receiver connection"
                )
            return False, (
                "the api-server holds another key for the receiver connection than this worker: "
                "define the same connection for both"
            )
        return True, ""


# Per worker process: base URL -> (valid until (monotonic), usable, why not).
_health_cache: dict[str, tuple[float, bool, str]] = {}


def wake_for_run(config: CrewConnectionConfig, task_instance: Any, log: Any) -> WakeAddresses | None:
    """A task run's webhook addresses when the crew connection opts in (``wake_by_webhook``) and the
    api-server's plugin answers with the same key; else None, the task log saying why (waits then
    poll as usual)."""
    if not config.wake_by_webhook:
        return None
    wake: WakeAddresses | None = None
    receiver = CrewWebhookReceiverHook()
    try:
        usable, why = receiver.health()
        if usable:
            wake = receiver.addresses(task_instance, config)
    except CrewConfigurationError as error:
        why = str(error)
    if wake is None:
        log.warning("Webhook wake is off for this task, which polls as usual: %s", why)
    else:
        log.info(
            "Webhook wake is on: the crew's webhooks wake this task's waits, which poll every "
            "%.0f s as a safety net.",
            wake.safety_poll_interval,
        )
    return wake


__all__ = [
    "CrewWebhookReceiverHook",
    "ReceiverConfig",
    "WakeAddresses",
    "receiver_config",
    "run_token",
    "token_matches",
    "wake_for_run",
]
