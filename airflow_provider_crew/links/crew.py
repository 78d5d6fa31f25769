"""The "Crew execution" link: a button on each crew task that opens the execution's page.

The worker asks ``get_link`` at the end of every run of a task and stores its answer in XCom, which
is all the api-server reads (docs/execution-link.md); so the task pushes the URL as soon as it knows
the execution, and ``get_link`` answers from what the running task knows, reading XCom back only
when an earlier run of this try may have pushed it. It never raises, since on Airflow 3.0 a raising
link breaks the end of the task run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperatorLink

from airflow_provider_crew._compat import resumed_after_deferral
from airflow_provider_crew.waiting.xcom import XCOM_EXECUTION_URL

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

    from airflow_provider_crew.connection import CrewConnectionConfig

log = logging.getLogger(__name__)


def web_address(value: Any) -> str | None:
    """An http(s) URL, else None: a ``javascript:`` one (XCom is writable by REST) would run in the UI.
    The scheme in any case, as the connection's template check takes it."""
    is_web = isinstance(value, str) and value[:8].lower().startswith(("https://", "http://"))
    return value if is_web else None


class CrewExecutionLink(BaseOperatorLink):
    """Opens the crew execution a task follows, in the crew's own dashboard.

    Needs the connection's "Execution page URL" (``execution_url_template``); without it there is
    no URL and the UI shows no link.
    """

    name = "Crew execution"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The URL the task pushed to XCom ``execution_url``, or ``""``; never raises.

        A crew task answers from what its run knows. Reading an XCom that is not there makes Airflow
        log an "XCom not found" error, so XCom is read only when the URL may be there unknown to the
        run: a crew task that resumed after a deferral without carrying it, or another task.

        :param operator: The task the link belongs to.
        :param ti_key: The task instance (the runtime task instance itself, in the worker).
        """
        known = getattr(operator, "known_execution_url", None)
        if callable(known):
            is_known, url = known()
            if is_known:  # this run knows it: no XCom read
                return web_address(url) or ""
            if not resumed(ti_key):
                # A try's first run starts with its XComs cleared: the URL is pushed by the run that
                # learns the execution, so a run that failed before (a bad address, a rejected
                # token, missing inputs) has none to read.
                log.debug("No crew execution known: the task has no execution link.")
                return ""
        try:
            # Imported here: only the worker calls get_link, and the operators' import stays light.
            from airflow.providers.common.compat.sdk import XCom

            url = XCom.get_value(ti_key=ti_key, key=XCOM_EXECUTION_URL)
        except Exception:
            # A broken link must not break the task (Airflow 3.0 calls this without a try/except).
            log.warning(
                "Could not read XCom %r for the crew execution link.", XCOM_EXECUTION_URL, exc_info=True
            )
            return ""
        return web_address(url) or ""


def resumed(ti: Any) -> bool:
    """Whether this run of the task resumed after a deferral or a park (Airflow keeps the try's XComs
    then); True when it cannot tell, so that the link looks in XCom as it did before."""
    return resumed_after_deferral(ti) is not False


def push_execution_url(context: Context, config: CrewConnectionConfig, kickoff_id: str) -> str | None:
    """Push the execution's page URL to XCom ``execution_url`` when the connection has a template.

    Called as soon as a task knows its execution, before it waits or defers, so that the link shows
    while the task is deferred.

    :param context: The task's context.
    :param config: The crew connection's settings (its ``execution_url_template``).
    :param kickoff_id: The execution's id; URL-quoted into the template.
    :return: The URL, or None without a template.
    """
    url = config.execution_url(kickoff_id)
    if url:
        context["ti"].xcom_push(key=XCOM_EXECUTION_URL, value=url)
        log.info("Crew execution %s: %s", kickoff_id, url)
    return url
