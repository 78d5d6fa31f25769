"""Typed errors of the crew provider. Messages name the endpoint, the HTTP status and what the
service said, never the token.

Every error the provider raises is defined here, with one exception: a wrong ``crew`` connection
setting is :class:`airflow_provider_crew.urls.CrewConnectionError`, defined beside the address
checks that raise it first because that module imports nothing of Airflow (the provider metadata
reads the connection's form); the hook turns it into :class:`CrewConfigurationError` before any task sees it.
"""

from __future__ import annotations

from airflow_provider_crew._compat import AirflowException, AirflowFailException


class CrewError(AirflowException):
    """Base class of every error this provider raises."""


class CrewConfigurationError(CrewError, ValueError):
    """A connection, parameter or request body is wrong; the message names the field and the fix."""


class CrewHTTPError(CrewError):
    """The service answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        endpoint: str,
        status_code: int,
        service_message: str | None = None,
        details: object = None,
    ) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.http_status = status_code
        self.service_message = service_message
        self.details = details


class CrewBadRequestError(CrewHTTPError):
    """400: the service rejected the request's format (or, on resume, the execution is not paused)."""


class CrewExecutionNotPausedError(CrewBadRequestError, AirflowFailException):
    """400 to ``POST /resume``: the execution is not waiting for human input.

    An AirflowFailException: a retry would find it so again, and must not take a later pause for the one
    its answer was about; the message gives the execution's current state.
    """


class CrewAuthenticationError(CrewHTTPError):
    """401: the bearer token is missing, wrong or expired."""


class CrewNotFoundError(CrewHTTPError):
    """404: no such execution (or endpoint)."""


class CrewValidationError(CrewHTTPError):
    """422: required inputs are missing."""

    def __init__(self, message: str, *, missing_inputs: list[str], **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.missing_inputs = missing_inputs


class CrewRateLimitedError(CrewHTTPError):
    """429: still rate limited after the retries allowed by the connection."""


class CrewServerError(CrewHTTPError):
    """5xx: the service failed."""


class CrewTransportError(CrewError):
    """The service could not be reached (DNS, refused connection, time-out before sending)."""


class CrewOutcomeUnknownError(CrewError, AirflowFailException):
    """A kickoff or resume may or may not have reached the service.

    Raised instead of repeating the request, because a repeat could start a second, paid execution.
    It is an AirflowFailException too, so a task that raises it fails without using its retries.
    """


class CrewKickoffNotRecordedError(CrewError, AirflowFailException):
    """An execution started, but Airflow could not record its id where a retry looks for it.

    The task fails without using its retries, because a retry that cannot find the execution would
    start a second, paid one; the message names the running execution.
    """


class CrewExecutionFailedError(CrewError):
    """The execution ended FAILED or REVOKED."""


class CrewExecutionPausedError(CrewError, AirflowFailException):
    """The execution paused for human input and the task's ``on_human_input`` is ``"fail"``.

    An AirflowFailException: the task fails without using its retries, because a retry would start
    (or wait for) another execution while this one stays paused at the service; the message names it.
    """


class CrewBudgetExceededError(CrewError, AirflowFailException):
    """The execution reached its cap (``max_tokens``, ``max_cost``) and was stopped.

    An AirflowFailException: the task fails without using its retries, because a retry would start
    paying again.
    """


class CrewExecutionNotFoundError(CrewError):
    """The service answers 404 for the execution: still, beyond the grace period after kickoff, or
    again, after it had answered for it (it lost the execution)."""


class CrewExecutionTimeoutError(CrewError):
    """The execution did not reach the awaited state before the deadline."""


class CrewResponseTooLargeError(CrewConfigurationError, AirflowFailException):
    """An answer's body, after decompression, was over the connection's ``max_response_bytes``.

    Reading stopped at the cap. Not retried, by the hook or by Airflow: a repeat would read the
    same body again. It is a configuration error for the waits (polling again cannot fix it); the
    message names the endpoint, the cap and the setting that raises it.
    """

    def __init__(self, message: str, *, endpoint: str, limit: int) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.limit = limit


class CrewRedirectError(CrewHTTPError, CrewConfigurationError):
    """The service answered with a redirect the provider does not follow.

    Only a GET to the same origin (scheme, host and port) is followed, so the bearer token never
    reaches another host and a kickoff or resume is never sent to a second place. The fix is the
    connection's host: set it to the address the service redirects to.
    """


class CrewReviewTimeoutError(CrewError, AirflowFailException):
    """Nobody answered a review request within ``response_timeout``; the execution is stopped
    (``stop_crew``, the default: nobody will answer it) or, with ``stop_crew=False``, stays paused.

    An AirflowFailException: the round fails without using its retries (the message says how to ask
    again).
    """


class CrewReviewRoundsExhaustedError(CrewError, AirflowFailException):
    """The crew wants (another) review but every round of the review's task group is used."""
