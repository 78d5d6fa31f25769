"""The crew execution service's contract as data: request bodies, responses, the status record.

No Airflow import here: the models describe the HTTP contract and the variants that deployed
services answer with (both in docs/contract.md); the hook is the only user that sends them.
"""

from __future__ import annotations

import enum
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
    field_validator,
    model_validator,
)

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


class _Wire(BaseModel):
    """Base for request bodies: field names in Python, camelCase aliases on the wire."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

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


class _WebhookAddresses(_Wire):
    task_webhook_url: str | None = Field(default=None, alias="taskWebhookUrl")
    step_webhook_url: str | None = Field(default=None, alias="stepWebhookUrl")
    crew_webhook_url: str | None = Field(default=None, alias="crewWebhookUrl")

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

    model_config = ConfigDict(extra="allow")

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

    model_config = ConfigDict(extra="allow")

    status: ResumeStatus
    message: str = ""

    @field_validator("status", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


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


class CrewState(str, enum.Enum):
    """An execution's state, normalised across service versions."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING_FOR_HUMAN_INPUT = "waiting_for_human_input"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @classmethod
    def terminal_states(cls) -> frozenset[CrewState]:
        return frozenset({cls.SUCCEEDED, cls.FAILED})

    @property
    def is_terminal(self) -> bool:
        return self in self.terminal_states()


_SUCCESS_WORDS = frozenset({"success", "succeeded", "completed", "complete", "finished", "done"})
_FAILURE_WORDS = frozenset({"failed", "failure", "error", "errored", "revoked", "cancelled", "canceled"})
_PAUSED_WORDS = frozenset({"paused", "pending human input", "pending_human_input", "waiting_for_human_input"})
_PENDING_WORDS = frozenset({"pending", "queued", "received"})
_RUNNING_WORDS = frozenset(
    {"started", "running", "in_progress", "in progress", "retry", "retrying", "resumed"}
)
_unknown_states_logged: set[str] = set()


def normalise_state(raw: str | None) -> CrewState:
    """Map a service's ``state``/``status`` word to a CrewState; unknown words count as running."""
    word = (raw or "").strip().lower()
    if word in _SUCCESS_WORDS:
        return CrewState.SUCCEEDED
    if word in _FAILURE_WORDS:
        return CrewState.FAILED
    if word in _PAUSED_WORDS:
        return CrewState.WAITING_FOR_HUMAN_INPUT
    if word in _PENDING_WORDS:
        return CrewState.PENDING
    if word not in _RUNNING_WORDS and word not in _unknown_states_logged:
        # Polling on is safer than failing on a word a newer service added; say so once.
        _unknown_states_logged.add(word)
        log.warning("Unknown crew execution state %r; treating it as still running.", raw)
    return CrewState.RUNNING


class CrewProgress(BaseModel):
    """How far an execution got: tasks done of total, the current task and agent."""

    completed: int | None = None
    total: int | None = None
    current_task: str | None = None
    current_agent: str | None = None

    @classmethod
    def from_record(cls, progress: Any) -> CrewProgress | None:
        if not isinstance(progress, Mapping):
            return None
        completed = progress.get("completed", progress.get("completed_tasks"))
        total = progress.get("total", progress.get("total_tasks"))
        return cls(
            completed=completed if isinstance(completed, int) else None,
            total=total if isinstance(total, int) else None,
            current_task=_text(progress.get("current") or progress.get("current_task")),
            current_agent=_text(progress.get("current_agent") or progress.get("agent")),
        )

    def describe(self) -> str:
        parts = []
        if self.total:
            done = self.completed or 0
            # "task n of m": the one being worked on is the one after those completed.
            parts.append(f"task {min(done + 1, self.total)} of {self.total}")
        if self.current_task:
            parts.append(f"'{self.current_task}'")
        if self.current_agent:
            parts.append(f"by {self.current_agent}")
        return " ".join(parts)


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


class CrewStatus(BaseModel):
    """One status record, normalised; ``raw`` keeps the service's record whole."""

    model_config = ConfigDict(frozen=True)

    state: CrewState
    raw_state: str | None = None
    message: str | None = None
    output: Any = None
    progress: CrewProgress | None = None
    last_step: str | None = None
    paused_task_id: str | None = None
    paused_task_output: str | None = None
    error: str | None = None
    raw: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_response(cls, record: Any) -> CrewStatus:
        """Parse any observed status record (docs/contract.md, "Status record: how it is read")."""
        if not isinstance(record, Mapping):
            raise ValueError(f"status response is not a JSON object: {record!r}")
        raw_state = record.get("state")
        status_text = record.get("status")
        if not isinstance(raw_state, str) or not raw_state.strip():
            raw_state = status_text if isinstance(status_text, str) else None
        state = normalise_state(raw_state)
        # Some versions put the state in 'state' and a message in 'status'; keep the message.
        message = status_text if isinstance(status_text, str) and status_text != raw_state else None

        last_task = record.get("last_executed_task")
        last_task = last_task if isinstance(last_task, Mapping) else {}
        paused_task_id = paused_task_output = None
        if state is CrewState.WAITING_FOR_HUMAN_INPUT:
            # The contract names no field for the paused task; services report it as the last
            # executed task, sometimes also in a dedicated object.
            pending = record.get("pending_human_input") or record.get("human_input") or {}
            pending = pending if isinstance(pending, Mapping) else {}
            paused_task_id = _text(
                pending.get("task_id")
                or last_task.get("task_id")
                or last_task.get("id")
                or last_task.get("name")
            )
            paused_task_output = _text(
                pending.get("task_output") or pending.get("output") or last_task.get("output")
            )

        error = record.get("error")
        if state is CrewState.FAILED and not error:
            error = message or raw_state
        last_step = record.get("last_step")
        return cls(
            state=state,
            raw_state=raw_state,
            message=message,
            output=cls._final_output(record, last_task) if state is CrewState.SUCCEEDED else None,
            progress=CrewProgress.from_record(record.get("progress")),
            last_step=_describe_step(last_step),
            paused_task_id=paused_task_id,
            paused_task_output=paused_task_output,
            error=_text(error),
            raw=dict(record),
        )

    @staticmethod
    def _final_output(record: Mapping[str, Any], last_task: Mapping[str, Any]) -> Any:
        """``result_json``, else ``result`` (a string or ``result.output``), else the last task's output."""
        result_json = record.get("result_json")
        if result_json not in (None, "", {}):
            return result_json
        result = record.get("result")
        if isinstance(result, Mapping):
            if result.get("output") not in (None, ""):
                return result["output"]
        elif result not in (None, ""):
            return result
        return last_task.get("output")

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    def describe(self) -> str:
        """One log line: state, task n of m, current task and agent, last step."""
        parts = [self.raw_state or self.state.value]
        if self.message:
            parts.append(f"({self.message})")
        if self.progress and (summary := self.progress.describe()):
            parts.append(f"- {summary}")
        if self.last_step:
            parts.append(f"- last step: {self.last_step}")
        return " ".join(parts)


def _describe_step(step: Any) -> str | None:
    if isinstance(step, Mapping):
        text = step.get("thought") or step.get("action") or step.get("tool") or step.get("result")
        agent = step.get("agent")
        if text:
            text = _shorten(str(text), 120)
            return f"{agent}: {text}" if agent else text
        return None
    return _shorten(str(step), 120) if step else None


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ServiceError(BaseModel):
    """What an error response said, in whatever shape it came (docs/contract.md, "Errors")."""

    error: str | None = None
    message: str | None = None
    details: Any = None
    missing_inputs: list[str] = Field(default_factory=list)

    @classmethod
    def from_body(cls, body: Any, text: str = "") -> ServiceError:
        if not isinstance(body, Mapping):
            # An HTML 500 page or a proxy's text: keep a short, single-line excerpt.
            excerpt = _shorten(text, 200) if text and not text.lstrip().startswith("<") else None
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
            error=_text(body.get("error")),
            message=_text(message),
            details=details,
            missing_inputs=missing,
        )

    def describe(self) -> str:
        parts = [part for part in (self.error, self.message) if part]
        text = ": ".join(parts) if parts else "no error message"
        if self.missing_inputs:
            text += f" (missing inputs: {', '.join(self.missing_inputs)})"
        return text
