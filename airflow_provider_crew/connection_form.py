"""The Airflow UI's form for the provider's connection types: their fields, labels, defaults and choices.

Nothing here imports Airflow: the provider metadata reads it, and :mod:`~airflow_provider_crew.connection`
validates a ``crew`` connection against it.
"""

from __future__ import annotations

import enum
from typing import Any

CONN_TYPE = "crew"


class StatusPathStyle(str, enum.Enum):
    """Which form of the status path a service answers."""

    CONTRACT = "contract"  # GET /{kickoff_id}/status, as the service contract says
    DEPLOYED = "deployed"  # GET /status/{kickoff_id}, as deployed services answer
    AUTO = "auto"  # try the contract form, learn from the first 404 which one works


class TokenKind(str, enum.Enum):
    """Which kind of bearer token the connection holds; informative: the service decides what it may do."""

    ORGANIZATION = "organization"
    USER = "user"


# The form's names for the standard fields the crew connection uses (UI_FIELD_BEHAVIOUR relabels
# them): error messages name a field as the user sees it.
HOST_LABEL = "Crew base URL"
PORT_LABEL = "Port"
TOKEN_LABEL = "Bearer token"


# One definition of the extra fields: the provider metadata ("conn-fields"), the legacy form
# widgets and the connection model (types, defaults, minimums, messages) all read it. No key may
# contain a word Airflow treats as secret ("token", "password", "secret", "proxy", "bearer", "dsn"
# and the others of [core] sensitive_var_conn_names): Airflow would show the value as "***" in the
# REST API and the form, and the form could not show it when a connection is reopened
# (tests/test_provider_info.py checks this against Airflow's own masker).
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "credential_kind": {
        "label": "Credential kind",
        "description": "Organization bearer token (full access) or user bearer token (user-scoped). "
        "Informative: shown in logs and the connection test.",
        "schema": {
            "type": ["string", "null"],
            "enum": [k.value for k in TokenKind],
            "default": "organization",
        },
    },
    "connect_timeout": {
        "label": "Connect time-out (s)",
        "description": "Seconds to wait for a TCP/TLS connection to the crew service.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 10},
    },
    "read_timeout": {
        "label": "Read time-out (s)",
        "description": "Seconds to wait for a response once the request is sent. Cold services can be slow.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 60},
    },
    "verify_tls": {
        "label": "Verify TLS certificate",
        "description": "Keep on unless you know why; off disables certificate checks.",
        "schema": {"type": ["boolean", "null"], "default": True},
    },
    "retry_limit": {
        "label": "Retry limit",
        "description": "Retries after failures that do not say when to come back: connection errors, "
        "and 502, 504 or time-outs on reads (429 and 503 are governed by the retry budget). "
        "A kickoff or resume is never repeated when the service may have received it.",
        "schema": {"type": ["integer", "null"], "minimum": 0, "default": 3},
    },
    "retry_delay": {
        "label": "Retry base delay (s)",
        "description": "First back-off delay; doubles each retry (capped at 60 s), with jitter. The "
        "service's Retry-After is a floor under it.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 1},
    },
    "retry_budget": {
        "label": "Retry budget (s)",
        "description": "Seconds during which answers of 429 (rate limited) and 503 (unavailable) are "
        "retried, with a growing, jittered back-off that never waits less than the service's "
        "Retry-After. A wait's deadline ends the retries sooner. A kickoff or resume is retried only "
        "on the service's own 503 (Retry-After or its JSON error), never on a gateway's.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": 300},
    },
    "max_response_bytes": {
        "label": "Max response size (bytes)",
        "description": "Largest answer body read from the service, counted after decompression "
        "(default 32 MiB). A larger answer fails the task with an error naming this field.",
        "schema": {"type": ["integer", "null"], "minimum": 1, "default": 32 * 1024 * 1024},
    },
    "status_path_style": {
        "label": "Status path style",
        "description": "'contract': GET /{kickoff_id}/status; 'deployed': GET /status/{kickoff_id}; "
        "'auto': learn which one the service answers.",
        "schema": {"type": ["string", "null"], "enum": [s.value for s in StatusPathStyle], "default": "auto"},
    },
    "stop_executions": {
        "label": "Stop executions nobody waits for",
        "description": "Stop an execution (POST /stop/{kickoff_id}) when the task that owns it is killed, "
        "times out, is marked failed or success, or is cleared. A service without /stop is noted once "
        "and left alone. Off: such executions run on.",
        "schema": {"type": ["boolean", "null"], "default": True},
    },
    "wake_by_webhook": {
        "label": "Wake waits by webhook",
        "description": "The crew's completion and pause webhooks wake deferred waits through Airflow's "
        "api-server (the provider's plugin and the crew_webhook_receiver connection); polling then only "
        "backs them up. Needs the crew service to reach the api-server (docs/webhook-wake.md).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "safety_poll_interval": {
        "label": "Safety poll interval (s)",
        "description": "With webhook wake: seconds between the status polls that still find failures and "
        "revocations, which the crew announces by no webhook.",
        "schema": {"type": ["number", "null"], "minimum": 1, "default": 300},
    },
    # The crew's event stream (docs/webhook-wake.md, "The event stream"): it rides on the wake's receiver.
    "event_stream": {
        "label": "Hear the crew's event stream",
        "description": "With webhook wake: each kickoff subscribes to the crew's events (the service's "
        "webhooks object). A failed crew then ends its wait within seconds, model calls count toward the "
        "budget between status reads, and the Crew tab shows the task, agent, model and tool calls at work.",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "event_stream_realtime": {
        "label": "Events one by one",
        "description": "Ask the service to post each event alone, as it happens, instead of in batches. "
        "The service says this slows the crew; batches are seconds apart.",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "event_stream_content": {
        "label": "Keep model responses",
        "description": "Keep the text of model responses with the events, shown on the Crew tab. Off: only "
        "models, token counts and tool names are kept, since a crew's prompts and answers may be private.",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    # What one execution may spend (docs/howto/budget.rst): a task's max_tokens and max_cost override
    # these. The token cap is "max_usage": a key holding "token" would be masked (above).
    "max_usage": {
        "label": "Max tokens per execution",
        "description": "Default token cap of each execution started or waited for through this "
        "connection (the total the service counts, across review rounds). At the cap the crew is "
        "stopped and its task fails without retry. A task's max_tokens overrides it. Empty: no cap.",
        "schema": {"type": ["integer", "null"], "minimum": 1, "default": None},
    },
    "max_cost": {
        "label": "Max cost per execution",
        "description": "Default cost cap of each execution, in the currency of the prices below (which "
        "it needs). A task's max_cost overrides it. Empty: no cap.",
        "schema": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": None},
    },
    "input_price": {
        "label": "Input price (per million)",
        "description": "Price of a million prompt (input) tokens: gives the usage XCom its cost and "
        "makes max_cost possible.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": None},
    },
    "output_price": {
        "label": "Output price (per million)",
        "description": "Price of a million completion (output) tokens.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": None},
    },
    "cached_input_price": {
        "label": "Cached input price (per million)",
        "description": "Price of a million cached prompt tokens, where the service reports them "
        "(cached_prompt_tokens). Empty: they cost the input price.",
        "schema": {"type": ["number", "null"], "minimum": 0, "default": None},
    },
    "execution_url_template": {
        "label": "Execution page URL",
        "description": "Optional. The address of one execution's page in the crew's dashboard, with "
        "{kickoff_id} where the execution id goes, e.g. https://app.example.com/executions/{kickoff_id}. "
        "Crew tasks then show a 'Crew execution' link to it.",
        "schema": {"type": ["string", "null"], "default": None},
    },
}

# The webhook receiver's connection (hooks/webhook_receiver.py): its type, the one id it is read
# under, and its form (the api-server's address and the key).
RECEIVER_CONN_TYPE = "crew_webhook_receiver"
DEFAULT_RECEIVER_CONN_ID = "crew_webhook_receiver"
RECEIVER_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "login", "extra"],
    "relabeling": {"host": "Airflow address as crews reach it", "password": "Key"},
    "placeholders": {
        "host": "https://airflow.example.com (the api-server, through the ingress crews reach)",
        "password": "a random key of 24+ characters; while rotating: new key, space, old key",
    },
}

# Port stays visible: on Airflow 3.3.1 and 3.3.2 the connections list's Test action sends port 0
# for a connection without a port and the api-server refuses it as "a different host or port"
# (apache/airflow#73298); a connection with its port filled in tests fine there.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden_fields": ["schema", "login", "extra"],
    "relabeling": {"host": HOST_LABEL, "port": PORT_LABEL, "password": TOKEN_LABEL},
    "placeholders": {
        "host": "https://my-crew-1234.example.com (http:// only for localhost)",
        "port": "optional: 443 for https; the Test action of Airflow 3.3.1-3.3.2 needs it",
        "password": "bearer token from the crew's status tab",
    },
}


def connection_form_widgets() -> dict[str, Any]:
    """The connection form's extra fields for Airflow < 3.2 (3.2+ reads ``conn-fields`` from provider info).

    Airflow 3.0 and 3.1 call this with stand-ins for wtforms and flask-appbuilder when those are
    not installed; the stand-ins take only label, validators, description, default and widget,
    and turn an ``any_of`` validator into a drop-down.
    """
    from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
    from flask_babel import lazy_gettext
    from wtforms import BooleanField, IntegerField, StringField
    from wtforms.validators import Optional, any_of

    widgets: dict[str, Any] = {}
    for name, spec in CONN_FIELDS.items():
        schema, label = spec["schema"], lazy_gettext(spec["label"])
        shown = {"default": schema.get("default"), "description": spec["description"]}
        validators = [Optional(), *([any_of(schema["enum"])] if "enum" in schema else [])]
        if "boolean" in schema["type"]:
            widgets[name] = BooleanField(label, **shown)
        elif "integer" in schema["type"]:
            widgets[name] = IntegerField(label, validators=validators, **shown)
        else:
            widgets[name] = StringField(label, validators=validators, widget=BS3TextFieldWidget(), **shown)
    return widgets
