"""Fixtures for the local crew service conformance suite; ``crew_service`` comes from our pytest plugin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_provider_crew.testing import LocalCrewService

from ._helpers import Api


@pytest.fixture
def api(crew_service: LocalCrewService) -> Iterator[Api]:
    """requests against ``crew_service`` with the organization token."""
    client = Api(crew_service)
    yield client
    client.close()


@pytest.fixture
def user_api(crew_service: LocalCrewService) -> Iterator[Api]:
    """requests against ``crew_service`` with the user token."""
    client = Api(crew_service, token="user")
    yield client
    client.close()
