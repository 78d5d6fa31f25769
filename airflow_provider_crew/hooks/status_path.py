"""Where a service answers an execution's status, and which of the two paths each service uses.

The contract says ``GET /{kickoff_id}/status``; deployed crews answer ``GET /status/{kickoff_id}``.
A connection names one, or ``auto``: try the contract's path, then the deployed one after a 404,
and remember per base URL the one that answered (:data:`LEARNED_STATUS_PATHS`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import quote

from airflow_provider_crew.connection import CrewConnectionConfig, StatusPathStyle

if TYPE_CHECKING:
    from airflow_provider_crew.hooks.transport import Response

# The hook's logger: log settings made for the hook keep covering what it learns about a service.
log = logging.getLogger("airflow_provider_crew.hooks.crew")

_BOTH_STYLES = (StatusPathStyle.CONTRACT, StatusPathStyle.DEPLOYED)


def status_path(kickoff_id: str, style: StatusPathStyle) -> str:
    """The path of ``kickoff_id``'s status in ``style``, the id quoted.

    :param kickoff_id: The execution.
    :param style: ``contract`` or ``deployed``.
    """
    quoted = quote(kickoff_id, safe="")
    return f"/status/{quoted}" if style is StatusPathStyle.DEPLOYED else f"/{quoted}/status"


def describe_style(style: StatusPathStyle) -> str:
    """The path template of ``style``, for messages."""
    return "/status/{kickoff_id}" if style is StatusPathStyle.DEPLOYED else "/{kickoff_id}/status"


class LearnedStatusPaths:
    """The status path each service answered at, per base URL, for connections in ``auto`` mode.

    One instance, :data:`LEARNED_STATUS_PATHS`, lives as long as the process: every hook and
    trigger in it share what it learned, so finding a service's path costs one 404 per process.
    """

    __slots__ = ("_styles",)

    def __init__(self) -> None:
        self._styles: dict[str, StatusPathStyle] = {}

    def styles_to_try(self, config: CrewConnectionConfig) -> tuple[StatusPathStyle, ...]:
        """The styles to ask, in order: the connection's, the one learned, or both.

        :param config: The connection's settings.
        """
        if config.status_path_style is not StatusPathStyle.AUTO:
            return (config.status_path_style,)
        learned = self._styles.get(config.base_url)
        return _BOTH_STYLES if learned is None else (learned,)

    def learn(self, config: CrewConnectionConfig, style: StatusPathStyle, response: Response) -> None:
        """Remember ``style`` for the service at ``config`` when it answered 200 in ``auto`` mode.

        :param config: The connection's settings.
        :param style: The style asked.
        :param response: The answer.
        """
        if config.status_path_style is StatusPathStyle.AUTO and response.status_code == 200:
            if self._styles.get(config.base_url) is not style:
                log.info("Crew service at %s answers status at %s", config.base_url, describe_style(style))
            self._styles[config.base_url] = style

    def learned(self) -> dict[str, StatusPathStyle]:
        """What was learned so far: base URL -> style (a copy)."""
        return dict(self._styles)

    def forget(self) -> None:
        """Start over, as a new process would (tests)."""
        self._styles.clear()


LEARNED_STATUS_PATHS = LearnedStatusPaths()
