"""A review round's typed records are the ones docs/human-review.md documents, key for key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_crew.review.record import ReviewRequest, RoundRecord

HUMAN_REVIEW = Path(__file__).resolve().parents[2] / "docs" / "human-review.md"


@pytest.mark.parametrize(
    ("row", "record"),
    [
        ("| `review.round_<n>` return value", RoundRecord),
        ("| `review.round_<n>` XCom `review_request`", ReviewRequest),
    ],
)
def test_the_documented_keys_are_the_records_keys(row, record):
    line = next(line for line in HUMAN_REVIEW.read_text().splitlines() if line.startswith(row))
    documented = set(re.findall(r"`(\w+)`", line.split(" | ")[1]))
    assert documented == record.__required_keys__ | record.__optional_keys__
