"""crew_human_review's parameter texts: one for each parameter; one a round takes as it is, as the
round (or a base) writes it, so that it is written once."""

from __future__ import annotations

import inspect
import re

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS

pytestmark = pytest.mark.skipif(not AIRFLOW_V_3_1_PLUS, reason="human review needs Airflow 3.1+")


def param_texts(doc: str | None) -> dict[str, str]:
    """Each ``:param`` text of a docstring, on one line, in order."""
    fields = re.findall(r"^:param (\w+):(.*(?:\n .*)*)", inspect.cleandoc(doc or ""), re.MULTILINE)
    return {name: " ".join(text.split()) for name, text in fields}


def test_each_parameter_has_one_text_and_one_a_round_takes_is_the_rounds():
    from airflow_provider_crew.review import crew_human_review
    from airflow_provider_crew.review.round import CrewReviewRoundOperator

    texts = param_texts(crew_human_review.__doc__)
    assert list(texts) == list(inspect.signature(crew_human_review).parameters)
    nearest: dict[str, str] = {}
    for task in reversed(CrewReviewRoundOperator.__mro__):
        nearest |= param_texts(task.__doc__)
    for name in ("kickoff_id", "crew_conn_id", "subject", "task_webhook_url", "kickoff_task_id", "timeout"):
        assert texts[name] == nearest[name]
    assert texts["stop_crew"].startswith("As on every crew task, and also")  # the review's own
