"""The retry policy: after each attempt of a request, repeat it (after how long) or stop. No I/O.

Which answers are safe to repeat is written down in docs/contract.md ("Retries: which answers are
safe to repeat"); in short:

- A GET is repeated after any transient failure.
- A POST (kickoff, resume) follows :data:`POST_RULE`: it is repeated only when it surely did not
  reach the service or the service itself said it did not act. Anything else after sending is an
  unknown outcome: never repeated, and
  :class:`~airflow_provider_crew.exceptions.CrewOutcomeUnknownError` fails the task without retry.
- "Busy" answers (429, and a service's own 503) are retried for up to ``retry_budget`` seconds;
  other transient failures, which say nothing about when to come back, up to ``retry_limit`` times.
- The pause grows (``retry_delay`` doubling, capped, with jitter so many callers spread out) and is
  never shorter than the service's ``Retry-After``. No retry sleeps past the caller's deadline.

:func:`send_with_retries` and :func:`asend_with_retries` drive the policy with a transport, in
tenacity's retry loop.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime
from typing import Any

import tenacity

from airflow_provider_crew.connection import MAX_BACKOFF_SECONDS, CrewConnectionConfig
from airflow_provider_crew.exceptions import CrewError, CrewTransportError
from airflow_provider_crew.hooks.client.limits import LAST_ATTEMPT_SECONDS, Limits
from airflow_provider_crew.hooks.client.request import Call
from airflow_provider_crew.hooks.client.response import Response
from airflow_provider_crew.hooks.client.transport import Failure, TransportFailure

log = logging.getLogger(__name__)

# "Busy, come back later" for a GET: retried under retry_budget.
BUSY_STATUSES = frozenset({429, 503})
# A gateway failed: for a GET a repeat is harmless (counted under retry_limit).
GATEWAY_STATUSES = frozenset({502, 504})


class PostAnswer(str, enum.Enum):
    """What an attempt of a POST (kickoff, resume) tells about whether the service acted."""

    NOT_SENT = "did not reach the service: sent again, up to retry_limit times"
    BUSY = "the service said it did not act: sent again within retry_budget"
    ANSWERED = "the service answered: acted (2xx) or refused (3xx, 4xx); read as it says"
    UNKNOWN = "it may have acted: never sent again; the task fails without retry"


#: The one rule for every POST, first match wins (docs/reliability.md, "Paid requests: the POST
#: rule"). Gateways answer 503 *themselves*, without Retry-After, when the service's connection drops
#: after they passed the request on: Envoy and Istio in plain text, AWS API Gateway, Kong, Azure API
#: Management and ESPv2 in JSON with only a ``message``. A busy service answers 503 in its own JSON
#: error shape (``{"error": ..., "message": ...}``, or a framework's ``{"detail": ...}``), usually with
#: Retry-After.
POST_RULE: tuple[tuple[str, PostAnswer], ...] = (
    ("refused, DNS failure, connect time-out, TLS handshake", PostAnswer.NOT_SENT),
    ("429", PostAnswer.BUSY),
    ("503 with Retry-After or the service's JSON error body (a string error or detail)", PostAnswer.BUSY),
    (
        "any other 5xx: 500, 502, 504, a gateway's own 503 (text, or JSON with only a message)",
        PostAnswer.UNKNOWN,
    ),
    ("2xx, 3xx, 4xx", PostAnswer.ANSWERED),
    ("read time-out, reset or a TLS failure after sending, no whole answer in time", PostAnswer.UNKNOWN),
)
# Longest Retry-After honoured as asked; a longer one is treated as this long.
MAX_RETRY_AFTER_SECONDS = MAX_BACKOFF_SECONDS * 5


@dataclass(slots=True)
class Retry:
    """Send the request again after ``delay`` seconds."""

    delay: float
    why: str  # what happened, e.g. "answered 429"
    progress: str  # how much of the allowance is used, e.g. "retry 1 of 3"


@dataclass(slots=True)
class Stop:
    """Stop retrying: raise ``error`` or, when it is None, give ``response`` back to the caller."""

    response: Response | None = None
    error: CrewError | None = None


def is_service_error_body(response: Response) -> bool:
    """Whether the body is the service's own JSON error (a string ``error`` or ``detail``), not a
    gateway's text, HTML page or JSON ``{"message": ...}``."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return False
    return isinstance(body, dict) and any(isinstance(body.get(key), str) for key in ("error", "detail"))


def post_answer(response: Response) -> PostAnswer:
    """The :data:`POST_RULE` row of an answer to a POST."""
    code = response.status_code
    if code == 429:
        return PostAnswer.BUSY
    if code == 503 and ("Retry-After" in response.headers or is_service_error_body(response)):
        return PostAnswer.BUSY
    return PostAnswer.UNKNOWN if code >= 500 else PostAnswer.ANSWERED


def unknown_reason(response: Response) -> str:
    """Why a POST's 5xx leaves its outcome unknown, for the error."""
    code = response.status_code
    if code == 503:
        return "HTTP 503 without Retry-After or the service's error body: a gateway's own answer"
    if code in GATEWAY_STATUSES:
        return f"HTTP {code} from a gateway"
    return f"HTTP {code}: the service failed while handling it"


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The ``Retry-After`` header in seconds (delta or HTTP date), or None."""
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class RetryPolicy:
    """The decisions for one request, attempt by attempt.

    :param call: The request.
    :param config: The connection's settings (``retry_limit``, ``retry_delay``, ``retry_budget``,
        time-outs and ``max_response_bytes``).
    :param deadline: Epoch seconds the caller must not be kept past (a wait's deadline), or None.
    :param max_retries: A hard cap on retries of any kind (0: one try only), or None.
    :param clock: Epoch seconds now (tests pass a fake one).
    :param jitter: ``uniform(low, high)`` (tests pass a fixed one).
    """

    def __init__(
        self,
        call: Call,
        config: CrewConnectionConfig,
        *,
        deadline: float | None = None,
        max_retries: int | None = None,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.call = call
        self.config = config
        self.deadline = deadline
        self.max_retries = max_retries
        self.clock = clock
        self.jitter = jitter
        self.started = clock()
        self.attempts = 0  # attempts decided on so far
        self.counted_retries = 0  # retries charged to retry_limit

    def limits(self) -> Limits:
        """What the next attempt may cost: the total bound, cut short by the deadline."""
        config = self.config
        total = config.connect_timeout + config.read_timeout
        if self.deadline is not None:
            total = min(total, max(self.deadline - self.clock(), LAST_ATTEMPT_SECONDS))
        return Limits(
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            total=total,
            max_bytes=config.max_response_bytes,
            verify_tls=config.verify_tls,
        )

    def decide(self, outcome: Response | TransportFailure) -> Retry | Stop:
        """After one attempt: retry after a delay, or stop with the answer or an error."""
        self.attempts += 1
        if isinstance(outcome, TransportFailure):
            return self._after_failure(outcome)
        return self._after_answer(outcome)

    def _after_answer(self, response: Response) -> Retry | Stop:
        code = response.status_code
        if not self.call.idempotent:
            meaning = post_answer(response)
            if meaning is PostAnswer.UNKNOWN:
                return Stop(error=self.call.outcome_unknown(unknown_reason(response)))
            return self._busy(response) if meaning is PostAnswer.BUSY else Stop(response=response)
        if code in BUSY_STATUSES:
            return self._busy(response)
        if code in GATEWAY_STATUSES:
            delay = self.backoff(retry_after_seconds(response.headers))
            if self._may_count(delay):
                return Retry(delay, f"answered {code}", self._count_progress())
            setting = f"the connection's retry_limit of {self.config.retry_limit}"
            return Stop(response=replace(response, note=self._gave_up(delay, setting)))
        return Stop(response=response)

    def _busy(self, response: Response) -> Retry | Stop:
        """The service said it did not act and to come back: retry within ``retry_budget``."""
        delay = self.backoff(retry_after_seconds(response.headers))
        within_budget = self.clock() - self.started + delay <= self.config.retry_budget
        if within_budget and self._may_wait(delay):
            used = self.clock() - self.started
            return Retry(
                delay,
                f"answered {response.status_code}",
                f"next attempt {self.attempts + 1}; {used:.0f} s of the "
                f"{self.config.retry_budget:g} s retry budget used",
            )
        setting = f"the connection's retry_budget of {self.config.retry_budget:g} s"
        return Stop(
            response=replace(response, note=self._gave_up(delay, setting if not within_budget else ""))
        )

    def _after_failure(self, failure: TransportFailure) -> Retry | Stop:
        if failure.kind is Failure.UNKNOWN and not self.call.idempotent:
            return Stop(error=self.call.outcome_unknown(failure.reason))
        delay = self.backoff(None)
        if failure.kind is not Failure.FATAL and self._may_count(delay):
            return Retry(delay, f"failed ({failure.reason})", self._count_progress())
        return Stop(
            error=CrewTransportError(
                self.call.explain(
                    f"{self.call.endpoint} to {self.call.url} failed after {self.attempts} attempt(s): "
                    f"{failure.reason}",
                    acted_on=False,
                )
            )
        )

    def backoff(self, retry_after: float | None) -> float:
        """``retry_delay`` doubling per retry (capped), jittered, never below ``Retry-After``."""
        doublings = min(self.attempts - 1, 32)  # the cap is reached long before; no float overflow
        ceiling = min(MAX_BACKOFF_SECONDS, self.config.retry_delay * 2**doublings)
        delay = self.jitter(ceiling / 2, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_SECONDS))
        return delay

    def _may_wait(self, delay: float) -> bool:
        if self.max_retries is not None and self.attempts > self.max_retries:
            return False
        return self.deadline is None or self.clock() + delay < self.deadline

    def _may_count(self, delay: float) -> bool:
        if self.counted_retries >= self.config.retry_limit or not self._may_wait(delay):
            return False
        self.counted_retries += 1
        return True

    def _count_progress(self) -> str:
        return f"retry {self.counted_retries} of {self.config.retry_limit}"

    def _gave_up(self, delay: float, setting: str) -> str:
        """Why the retries stopped: the deadline, a one-try call or the connection's setting."""
        if self.deadline is not None and self.clock() + delay >= self.deadline:
            why = "the next retry would pass the wait's deadline"
        elif self.max_retries is not None and self.attempts > self.max_retries:
            why = (
                "this call tries only once"
                if self.max_retries == 0
                else f"at most {self.max_retries} retries"
            )
        else:
            why = f"{setting} is used up" if setting else "no retry left"
        used = self.clock() - self.started
        return f"Gave up after {self.attempts} attempt(s) in {used:.0f} s: {why}."


class _Decisions:
    """tenacity runs the retry loop; every decision in it is the policy's: repeat or not, after how long."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.step: Retry | Stop = Stop()

    def after(self, outcome: Response | TransportFailure) -> bool:
        """Decide after an attempt: True to repeat it."""
        self.step = self.policy.decide(outcome)
        return isinstance(self.step, Retry)

    def repeat(self, state: tenacity.RetryCallState) -> bool:
        if state.outcome is None or state.outcome.failed:  # a typed error (a body over the cap): raised
            return False
        return self.after(state.outcome.result())

    def delay(self, state: tenacity.RetryCallState | None = None) -> float:
        step = self.step
        assert isinstance(step, Retry)
        log.warning(
            "%s %s; retrying in %.1f s (%s)", self.policy.call.endpoint, step.why, step.delay, step.progress
        )
        return step.delay

    def answer(self) -> Response:
        """The answer the policy stopped at, or its error."""
        step = self.step
        assert isinstance(step, Stop)
        if step.error is not None:
            raise step.error
        assert step.response is not None
        return step.response

    def loop_args(self) -> dict[str, Any]:
        return {"retry": self.repeat, "wait": self.delay, "stop": tenacity.stop_never}


# Most calls end at their first attempt, which is sent before tenacity's loop is entered: measured
# here, the loop costs ~13 µs per call in a thread and ~120 µs per status poll on an event loop (it
# inspects its callables on every turn), more than half of what the poll costs the triggerer without it.


def send_with_retries(
    send: Callable[[Call, Limits], Response | TransportFailure],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> Response:
    """Drive ``policy`` with a sync transport's ``send``; return the answer or raise the error."""

    def attempt() -> Response | TransportFailure:
        return send(policy.call, policy.limits())

    decisions = _Decisions(policy)
    if decisions.after(attempt()):
        sleep(decisions.delay())
        tenacity.Retrying(sleep=sleep, **decisions.loop_args())(attempt)
    return decisions.answer()


async def asend_with_retries(
    send: Callable[[Call, Limits], Awaitable[Response | TransportFailure]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Response:
    """The async twin of :func:`send_with_retries`."""

    async def attempt() -> Response | TransportFailure:  # a coroutine function: tenacity awaits it
        return await send(policy.call, policy.limits())

    decisions = _Decisions(policy)
    if decisions.after(await attempt()):
        await sleep(decisions.delay())
        await tenacity.AsyncRetrying(sleep=sleep, **decisions.loop_args())(attempt)
    return decisions.answer()
