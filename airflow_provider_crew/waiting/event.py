"""The trigger's one event: what it carries, and how the task that resumes reads it back. No I/O.

A trigger that resumes its task on a worker fires :class:`CrewWaitEvent` (``payload``), and
``execute_complete`` validates it (``parse``) into the :class:`~.rules.WaitResult` a blocking wait would
have returned. The webhook wake fires the same event with the outcome ``woken``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from airflow_provider_crew.exceptions import CrewError
from airflow_provider_crew.status import CrewState, CrewStatus
from airflow_provider_crew.waiting.rules import Outcome, WaitResult
from airflow_provider_crew.waiting.xcom import record_without_output


class CrewWaitEvent(BaseModel):
    """The payload of the trigger's one event; ``execute_complete`` validates it with this model.
    At a SUCCEEDED end the output travels once: ``output``, beside a ``record`` less its copies."""

    outcome: Outcome
    kickoff_id: str
    message: str
    record: dict[str, Any] | None = None  # the last status record read (:func:`record_without_output`)
    output: Any = None  # the final output, at a SUCCEEDED end only; absent, ``record`` holds it
    # A woken wait's trigger arguments: the wait goes on from them, its deadlines unchanged.
    wait: dict[str, Any] | None = None
    woken_at: float | None = None  # when the crew's webhook came (epoch seconds): the crew's end
    stopped: dict[str, str] | None = None  # the trigger stopped the execution (its budget): how

    @classmethod
    def parse(cls, event: Any) -> CrewWaitEvent:
        if not isinstance(event, dict):
            raise CrewError(f"Expected a crew status event from the trigger, got {event!r}.")
        try:
            return cls.model_validate(event)
        except ValidationError as error:
            raise CrewError(
                f"Malformed crew status event from the trigger ({error.error_count()} errors): {event!r}"
            ) from None

    @classmethod
    def from_result(cls, kickoff_id: str, result: WaitResult) -> CrewWaitEvent:
        status, fields = result.last_status, {}
        if status is not None and status.state is CrewState.SUCCEEDED:
            fields = {"record": record_without_output(status), "output": status.output}
        elif status is not None:
            fields = {"record": status.raw}
        if result.stopped is not None:
            fields["stopped"] = result.stopped
        return cls(outcome=result.outcome, kickoff_id=kickoff_id, message=result.message, **fields)

    def payload(self) -> dict[str, Any]:
        """The event as JSON values, as a trigger fires it (``wait`` and ``output`` only when set)."""
        optional = ("wait", "output", "woken_at", "stopped")
        exclude = {name for name in optional if name not in self.model_fields_set}
        return self.model_dump(mode="json", exclude=exclude or None)

    def to_result(self) -> WaitResult:
        last_status = CrewStatus.from_response(self.record) if self.record is not None else None
        if last_status is not None and "output" in self.model_fields_set:
            last_status = last_status.model_copy(update={"output": self.output})
        return WaitResult(
            outcome=self.outcome, message=self.message, last_status=last_status, stopped=self.stopped
        )


__all__ = ["CrewWaitEvent"]
