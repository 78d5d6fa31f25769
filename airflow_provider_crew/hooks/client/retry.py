"""The retry policy: after each attempt of a request, wait and repeat it, take the answer, or fail.

:data:`POST_RULE` and :data:`GET_RULE` say what the client does with each row of
:func:`.response.what_came_back`, and :meth:`RetryPolicy.decide` is the one place that acts on them.
docs/reliability.md ("Paid requests: nothing sent twice") shows :data:`POST_RULE` and explains the budget,
the limit, the back-off and the deadline; tests/hooks/client/test_retry.py checks the two tables match.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from email.utils import parsedate_to_datetime

from airflow_provider_crew import metrics
from airflow_provider_crew.connection import MAX_BACKOFF_SECONDS, CrewConnectionConfig
from airflow_provider_crew.exceptions import CrewError, CrewTransportError
from airflow_provider_crew.hooks.client.request import Call, explain, outcome_unknown
from airflow_provider_crew.hooks.client.response import (
    UNKNOWN_AFTER,
    Came,
    Response,
    TransportFailure,
    what_came_back,
)
from airflow_provider_crew.hooks.client.transport import Limits

log = logging.getLogger(__name__)

# Longest Retry-After honoured as asked; a longer one is treated as this long.
MAX_RETRY_AFTER_SECONDS = MAX_BACKOFF_SECONDS * 5
# A request started at (or after) the caller's deadline still gets this long, so a wait can read
# the status one last time; a trickling body then ends this long after the deadline at most.
LAST_ATTEMPT_SECONDS = 1.0


class Step(str, enum.Enum):
    """What the client does next, in the words of docs/reliability.md's table."""

    AGAIN = "sends it again, up to `retry_limit` times"
    AGAIN_WHEN_BUSY = "sends it again within `retry_budget`, never sooner than `Retry-After`"
    FAIL = "fails at once: a repeat meets the same refusal"
    NEVER_AGAIN = "**never sends it again**: the outcome is unknown"
    READ = "reads it"


#: A kickoff or resume: repeated only when the service surely did not act.
POST_RULE: dict[Came, Step] = {
    Came.NOTHING: Step.AGAIN,
    Came.REFUSED: Step.FAIL,
    Came.TOO_MANY: Step.AGAIN_WHEN_BUSY,
    Came.SERVICE_BUSY: Step.AGAIN_WHEN_BUSY,
    Came.GATEWAY_BUSY: Step.NEVER_AGAIN,
    Came.GATEWAY_FAILED: Step.NEVER_AGAIN,
    Came.SERVER_FAILED: Step.NEVER_AGAIN,
    Came.LOST: Step.NEVER_AGAIN,
    Came.ANSWER: Step.READ,
}
#: A GET, or a POST that does nothing twice (a stop): a repeat only reads (or stops) again.
GET_RULE: dict[Came, Step] = {
    **POST_RULE,
    Came.GATEWAY_BUSY: Step.AGAIN_WHEN_BUSY,
    Came.GATEWAY_FAILED: Step.AGAIN,
    Came.SERVER_FAILED: Step.READ,
    Came.LOST: Step.AGAIN,
}

#: The ``outcome`` tag of ``crew.request.retried`` for each answer a request is sent again after.
RETRIED_AFTER = {
    Came.NOTHING: "unreachable",
    Came.LOST: "unreachable",
    Came.TOO_MANY: "busy",
    Came.SERVICE_BUSY: "busy",
    Came.GATEWAY_BUSY: "gateway",
    Came.GATEWAY_FAILED: "gateway",
}


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
    """The decisions for one request (``call``) under the connection's settings, attempt by attempt.

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
        self.rule = GET_RULE if call.idempotent else POST_RULE
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
            config.connect_timeout, config.read_timeout, total, config.max_response_bytes, config.verify_tls
        )

    def decide(self, outcome: Response | TransportFailure) -> float | Response | CrewError:
        """After one attempt: the seconds to wait before sending it again (logged), or the answer, or
        the error to raise."""
        self.attempts += 1
        came = what_came_back(outcome)
        step = self.rule[came]
        if step is Step.READ:
            assert isinstance(outcome, Response)
            return outcome
        if step is Step.NEVER_AGAIN:
            if isinstance(outcome, TransportFailure):
                return outcome_unknown(self.call, outcome.reason)
            return outcome_unknown(self.call, UNKNOWN_AFTER[came].format(code=outcome.status_code))
        if isinstance(outcome, Response):
            delay, why = self.backoff(retry_after_seconds(outcome.headers)), f"answered {outcome.status_code}"
        else:
            delay, why = self.backoff(None), f"failed ({outcome.reason})"
        stopped = self._why_not_again(step, delay)
        if stopped is None:
            if step is Step.AGAIN:
                self.counted_retries += 1
                progress = f"retry {self.counted_retries} of {self.config.retry_limit}"
            else:
                used, budget = self.clock() - self.started, self.config.retry_budget
                progress = (
                    f"next attempt {self.attempts + 1}; {used:.0f} s of the {budget:g} s retry budget used"
                )
            metrics.count("crew.request.retried", outcome=RETRIED_AFTER[came], method=self.call.method)
            log.warning("%s %s; retrying in %.1f s (%s)", self.call.endpoint, why, delay, progress)
            return delay
        if isinstance(outcome, Response):  # the last answer, with why the retries stopped
            used = self.clock() - self.started
            return replace(
                outcome, note=f"Gave up after {self.attempts} attempt(s) in {used:.0f} s: {stopped}."
            )
        return CrewTransportError(
            explain(
                self.call,
                f"{self.call.endpoint} to {self.call.url} failed after {self.attempts} attempt(s): "
                f"{outcome.reason}",
                acted_on=False,
            )
        )

    def backoff(self, retry_after: float | None) -> float:
        """``retry_delay`` doubling per retry (capped), jittered, never below ``Retry-After``."""
        doublings = min(self.attempts - 1, 32)  # the cap is reached long before; no float overflow
        ceiling = min(MAX_BACKOFF_SECONDS, self.config.retry_delay * 2**doublings)
        delay = float(self.jitter(ceiling / 2, ceiling))
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER_SECONDS))
        return delay

    def _why_not_again(self, step: Step, delay: float) -> str | None:
        """Why the request is not sent again after ``delay`` seconds, or None when it may be."""
        config = self.config
        if step is Step.FAIL:
            return "a repeat meets the same refusal"
        if self.deadline is not None and self.clock() + delay >= self.deadline:
            return "the next retry would pass the wait's deadline"
        if self.max_retries is not None and self.attempts > self.max_retries:
            return (
                "this call tries only once"
                if self.max_retries == 0
                else f"at most {self.max_retries} retries"
            )
        if step is Step.AGAIN_WHEN_BUSY and self.clock() - self.started + delay > config.retry_budget:
            return f"the connection's retry_budget of {config.retry_budget:g} s is used up"
        if step is Step.AGAIN and self.counted_retries >= config.retry_limit:
            return f"the connection's retry_limit of {config.retry_limit} is used up"
        return None


def send_with_retries(
    send: Callable[[Call, Limits], Response | TransportFailure],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> Response:
    """Drive ``policy`` with a sync transport's ``send``; return the answer or raise the error."""
    while isinstance(step := policy.decide(send(policy.call, policy.limits())), float):
        sleep(step)
    if isinstance(step, CrewError):
        raise step
    return step


async def asend_with_retries(
    send: Callable[[Call, Limits], Awaitable[Response | TransportFailure]],
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Response:
    """:func:`send_with_retries` with an async transport's ``send``."""
    while isinstance(step := policy.decide(await send(policy.call, policy.limits())), float):
        await sleep(step)
    if isinstance(step, CrewError):
        raise step
    return step
