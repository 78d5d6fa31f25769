"""The crew execution service's contract as data: request bodies and answers (the status record is
:mod:`airflow_provider_crew.status`).

No Airflow import here: the models describe the HTTP contract and the variants that deployed
services answer with (both in docs/contract.md); the hook is the only user that sends them.

Every model builds its validator at its first use, not at import (``defer_build``): that halves the
import, which a DAG file pays when it gives a webhook URL (checked by :func:`check_webhook_url`),
and the first request of a process pays the rest once.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from airflow_provider_crew.status import shorten_text, text_or_none

log = logging.getLogger(__name__)


def check_webhook_url(value: str | None, field_name: str) -> str | None:
    """Reject webhook addresses that are not absolute http(s) URLs, naming the field."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field_name} must be an http(s) URL, got {value!r}")
    parts = urlsplit(value.strip())
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(
            f"{field_name} must be an absolute http(s) URL such as https://hooks.example.com/crew, "
            f"got {value!r}"
        )
    return value.strip()


def describe_validation_error(error: ValidationError) -> str:
    """A model's validation error: the fields and the problems, never the values (a webhook token may be
    among them)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        location = ".".join(str(part) for part in item["loc"])
        text = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {text}" if location else text)
    return "; ".join(parts)


class _Wire(BaseModel):
    """Base for request bodies: field names in Python, camelCase aliases on the wire."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, defer_build=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON body to send (unset optional fields left out, secrets revealed)."""
        body = self.model_dump(by_alias=True, exclude_none=True, mode="python")
        return _reveal(body)


def _reveal(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {key: _reveal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_reveal(item) for item in value]
    return value


class WebhookAuthentication(_Wire):
    """How the service authenticates to the human-input webhook: bearer+token or basic+username+password."""

    strategy: Literal["bearer", "basic"]
    token: SecretStr | None = None
    username: str | None = None
    password: SecretStr | None = None

    @model_validator(mode="after")
    def _check_combination(self) -> WebhookAuthentication:
        if self.strategy == "bearer":
            if self.token is None or not self.token.get_secret_value():
                raise ValueError(
                    "humanInputWebhook.authentication with strategy 'bearer' needs a non-empty token"
                )
            if self.username is not None or self.password is not None:
                raise ValueError(
                    "humanInputWebhook.authentication with strategy 'bearer' takes only a token, "
                    "not username/password"
                )
        else:
            if not self.username or self.password is None or not self.password.get_secret_value():
                raise ValueError(
                    "humanInputWebhook.authentication with strategy 'basic' needs a username and a password"
                )
            if self.token is not None:
                raise ValueError("humanInputWebhook.authentication with strategy 'basic' takes no token")
        return self


class HumanInputWebhook(_Wire):
    """Where the service sends the human-input notification, and how it authenticates there."""

    url: str
    authentication: WebhookAuthentication

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return check_webhook_url(value, "humanInputWebhook.url")  # type: ignore[return-value]


class EventSubscription(_Wire):
    """The ``webhooks`` object of a kickoff or resume: the crew's event stream (not in the contract;
    the hosted service has it), posted to ``url`` with the run's bearer token (crew_events.py)."""

    events: list[str] = Field(min_length=1)
    url: str
    realtime: bool = False
    authentication: WebhookAuthentication

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return check_webhook_url(value, "webhooks.url")  # type: ignore[return-value]


class _WebhookAddresses(_Wire):
    task_webhook_url: str | None = Field(default=None, alias="taskWebhookUrl")
    step_webhook_url: str | None = Field(default=None, alias="stepWebhookUrl")
    crew_webhook_url: str | None = Field(default=None, alias="crewWebhookUrl")
    event_stream: EventSubscription | None = Field(default=None, alias="webhooks")

    @field_validator("task_webhook_url", "step_webhook_url", "crew_webhook_url")
    @classmethod
    def _check_urls(cls, value: str | None, info: Any) -> str | None:
        return check_webhook_url(value, info.field_name)


class KickoffRequest(_WebhookAddresses):
    """Body of ``POST /kickoff``."""

    inputs: dict[str, Any]
    meta: dict[str, Any] | None = None
    human_input_webhook: HumanInputWebhook | None = Field(default=None, alias="humanInputWebhook")

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_is_object(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValueError(
                f"inputs must be a mapping of input name to value (a dict), got {type(value).__name__}"
            )
        bad_keys = [key for key in value if not isinstance(key, str) or not key]
        if bad_keys:
            raise ValueError(f"inputs keys must be non-empty strings, got {bad_keys!r}")
        return dict(value)

    @field_validator("meta", mode="before")
    @classmethod
    def _meta_is_object(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"meta must be a dict, got {type(value).__name__}")
        return dict(value) if value is not None else None


class ResumeRequest(_WebhookAddresses):
    """Body of ``POST /resume``."""

    execution_id: str
    task_id: str
    human_feedback: str
    is_approve: StrictBool

    @field_validator("execution_id", "task_id")
    @classmethod
    def _non_empty(cls, value: str, info: Any) -> str:
        if not value.strip():
            raise ValueError(f"{info.field_name} must be a non-empty string")
        return value.strip()

    @model_validator(mode="after")
    def _feedback_when_rejecting(self) -> ResumeRequest:
        # A rejection retries the task with the feedback as its only guidance: empty is a mistake.
        if not self.is_approve and not self.human_feedback.strip():
            raise ValueError("human_feedback must say what to change when is_approve is False")
        return self


class KickoffResponse(BaseModel):
    """Body of a successful ``POST /kickoff``."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    kickoff_id: str

    @field_validator("kickoff_id")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip() or "/" in value:
            raise ValueError(f"kickoff_id must be a non-empty id without '/', got {value!r}")
        return value.strip()


class ResumeStatus(str, enum.Enum):
    RESUMED = "resumed"
    RETRYING = "retrying"
    COMPLETED = "completed"


class ResumeResult(BaseModel):
    """Body of a successful ``POST /resume``."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    status: ResumeStatus
    message: str = ""

    @field_validator("status", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


class StopOutcome(str, enum.Enum):
    """What ``POST /stop/{kickoff_id}`` did (not in the contract; crewAI's hosted service has it)."""

    STOPPED = "stopped"
    ALREADY_FINISHED = "already finished"
    NOT_SUPPORTED = "not supported by this service"
    UNKNOWN = "unknown"


class StopResult(BaseModel):
    """The answer to a stop: what happened, and the service's words or the error."""

    outcome: StopOutcome
    detail: str = ""

    @classmethod
    def from_answer(cls, status_code: int, content: bytes) -> StopResult:
        """What a ``POST /stop/{id}`` answer means. A service without the route answers 405, or a 404 about
        the route (a framework's bare "Not Found", "No route for ..."), not about the execution
        ("Execution not found")."""
        said = ServiceError.from_answer(content).message or ""
        if status_code < 300:
            return cls(outcome=StopOutcome.STOPPED, detail=said)
        if status_code == 400:  # "Cannot stop execution. Current state: SUCCESS"
            return cls(outcome=StopOutcome.ALREADY_FINISHED, detail=said)
        words = said.lower()
        about_execution = "route" not in words and any(word in words for word in ("execution", "kickoff"))
        if status_code == 405 or (status_code == 404 and not about_execution):
            return cls(outcome=StopOutcome.NOT_SUPPORTED, detail=f"HTTP {status_code}")
        return cls(outcome=StopOutcome.UNKNOWN, detail=f"HTTP {status_code}: {said or 'no error message'}")

    def describe(self) -> str:
        return f"{self.outcome.value} ({self.detail})" if self.detail else self.outcome.value


def parse_inputs_response(body: Any) -> list[str]:
    """Normalise every observed ``GET /inputs`` shape to a list of input names.

    Documented: ``{"inputs": ["topic", ...]}``. Seen in third-party clients: a dict of
    name to anything, or a list of objects with a ``name``.
    """
    items = body.get("inputs", body) if isinstance(body, Mapping) else body
    if isinstance(items, Mapping):
        return [str(name) for name in items]
    if isinstance(items, list):
        names: list[str] = []
        for item in items:
            if isinstance(item, str):
                names.append(item)
            elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
                names.append(item["name"])
            else:
                raise ValueError(f"unrecognised entry in GET /inputs response: {item!r}")
        return names
    raise ValueError(f"unrecognised GET /inputs response: {body!r}")


def inputs_mismatch(expected: list[str], inputs: Mapping[str, Any]) -> str | None:
    """What keeps ``inputs`` from matching the input names the crew declares (``GET /inputs``):
    "missing [...]; unknown [...]", or None when they match. The kickoff and the managed agent both
    check with it, before anything starts."""
    missing = [name for name in expected if name not in inputs]
    unknown = [name for name in inputs if name not in expected]
    problems = [f"{what} {names}" for what, names in (("missing", missing), ("unknown", unknown)) if names]
    return "; ".join(problems) or None


class ServiceError(BaseModel):
    """What an error response said, in whatever shape it came (docs/contract.md, "Errors")."""

    model_config = ConfigDict(defer_build=True)

    error: str | None = None
    message: str | None = None
    details: Any = None
    missing_inputs: list[str] = Field(default_factory=list)

    @staticmethod
    def sent_by_service(content: bytes) -> bool:
        """Whether an answer's body is the service's own JSON error (a string ``error`` or ``detail``),
        not a gateway's text, HTML page or JSON ``{"message": ...}``."""
        try:
            body = json.loads(content)
        except ValueError:
            return False
        return isinstance(body, dict) and any(isinstance(body.get(key), str) for key in ("error", "detail"))

    @classmethod
    def from_answer(cls, content: bytes) -> ServiceError:
        """What an answer's body said: its JSON error shape, or its text."""
        try:
            body = json.loads(content.decode("utf-8")) if content else None
        except ValueError:  # not JSON, or not UTF-8
            body = None
        return cls.from_body(body, content.decode("utf-8", errors="replace"))

    @classmethod
    def from_body(cls, body: Any, text: str = "") -> ServiceError:
        if not isinstance(body, Mapping):
            # An HTML 500 page or a proxy's text: keep a short, single-line excerpt.
            excerpt = shorten_text(text, 200) if text and not text.lstrip().startswith("<") else None
            return cls(message=excerpt)
        details = body.get("details", body.get("detail"))
        missing: list[str] = []
        if isinstance(details, Mapping) and isinstance(details.get("missing_inputs"), list):
            missing = [str(name) for name in details["missing_inputs"]]
        elif isinstance(details, list):
            # Framework style: [{"loc": ["body", "inputs", "topic"], "msg": "field required"}, ...]
            for item in details:
                if isinstance(item, Mapping) and isinstance(item.get("loc"), list) and item["loc"]:
                    missing.append(str(item["loc"][-1]))
        message = body.get("message")
        if message is None and isinstance(body.get("detail"), str):
            message = body["detail"]
        return cls(
            error=text_or_none(body.get("error")),
            message=text_or_none(message),
            details=details,
            missing_inputs=missing,
        )

    def describe(self) -> str:
        parts = [part for part in (self.error, self.message) if part]
        text = ": ".join(parts) if parts else "no error message"
        if self.missing_inputs:
            text += f" (missing inputs: {', '.join(self.missing_inputs)})"
        return text


__all__ = [
    "HumanInputWebhook",
    "KickoffRequest",
    "KickoffResponse",
    "ResumeRequest",
    "ResumeResult",
    "ResumeStatus",
    "ServiceError",
    "StopOutcome",
    "StopResult",
    "WebhookAuthentication",
    "check_webhook_url",
    "describe_validation_error",
    "inputs_mismatch",
    "parse_inputs_response",
]
