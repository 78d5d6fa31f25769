"""pytest plugin: fixtures that run the local crew service (loaded via the ``pytest11`` entry point).

Importing this module does no work and imports neither Airflow nor the server stack; the service
starts only when a test asks for a fixture.

``crew_service``          function scope: a fresh :class:`LocalCrewService` on a free port, with
                          ``.webhooks`` (a recording receiver), ``.faults``, ``.counters``,
                          ``.executions``, tokens and Airflow connection helpers.
``crew_service_session``  session scope: one shared service; call ``.reset()`` between uses.
``crew_webhooks``         a standalone :class:`WebhookReceiver`.
``crew_connection``       sets ``AIRFLOW_CONN_CREW_DEFAULT`` to ``crew_service``; returns the conn id.

Configure ``crew_service`` with a marker (or indirect parametrization with a dict)::

    @pytest.mark.crew_service("review", status_path="deployed", faults=[{"kind": "status_404", "count": 2}])
    def test_my_dag(crew_service): ...

    @pytest.mark.crew_service(stop_endpoint="absent")  # or "405": a service without POST /stop/{id}
    def test_stop_not_supported(crew_service): ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .server import LocalCrewService
    from .webhooks import WebhookReceiver


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "crew_service(*crews, status_path='both', speed=1.0, faults=(), stop_endpoint='enabled', "
        "org_token=..., user_token=...): "
        "configure the crew_service fixture (local crew service)",
    )


def _options(request: pytest.FixtureRequest) -> dict[str, Any]:
    options: dict[str, Any] = {}
    marker = request.node.get_closest_marker("crew_service")
    if marker is not None:
        if marker.args:
            options["crews"] = marker.args[0] if len(marker.args) == 1 else list(marker.args)
        options.update(marker.kwargs)
    param = getattr(request, "param", None)
    if isinstance(param, dict):
        options.update(param)
    elif param is not None:
        options["crews"] = param
    return options


@pytest.fixture
def crew_service(request: pytest.FixtureRequest) -> Iterator[LocalCrewService]:
    """A fresh local crew service for one test (default crews: research at the root, review, structured)."""
    from .server import LocalCrewService

    service = LocalCrewService(**_options(request))
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def crew_service_session() -> Iterator[LocalCrewService]:
    """One local crew service for the whole session; state is shared, so ``reset()`` when needed."""
    from .server import LocalCrewService

    service = LocalCrewService()
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def crew_webhooks() -> Iterator[WebhookReceiver]:
    """A webhook receiver on a free port; ``url_for(kind)``, ``received``, ``wait_for(...)``."""
    from .webhooks import WebhookReceiver

    with WebhookReceiver() as receiver:
        yield receiver


@pytest.fixture
def crew_connection(crew_service: LocalCrewService, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the Airflow connection ``crew_default`` at ``crew_service`` (env var); returns the conn id."""
    for name, value in crew_service.connection_env("crew_default").items():
        monkeypatch.setenv(name, value)
    return "crew_default"
