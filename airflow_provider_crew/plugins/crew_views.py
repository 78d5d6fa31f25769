"""The app of the Crew tab and the Crews page (docs/crew-views.md), mounted by the api-server plugin
at ``/crew-ui`` and shown by Airflow 3.1+ as its ``external_views`` (:mod:`.crew`).

The pages are static and hold no data; each reads its ``/api`` route, which answers only a user that
Airflow's auth manager lets read the DAG's task instances, asked as Airflow's own routes ask it
(docs/crew-views.md, "Who sees what").
"""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, JSONResponse

from airflow_provider_crew.plugins import airflow_db
from airflow_provider_crew.plugins import crew_views_data as data

# Airflow's own dependency finds the user (the bearer token, else the UI's token cookie): 401 without
# a token, 403 for an invalid one. Airflow 3.1+: the plugin mounts this app there only.
UserDep = Annotated[Any, Depends(airflow_db.user_dependency())]

TAB_PATH = "/task-instance/{dag_id}/{run_id}/{task_id}/{map_index}"
#: The longest window the Crews page reads.
MAX_DAYS = 90
# Read the pages once, when the app is built.
_PAGES = {
    name: resources.files(__package__).joinpath("static", name).read_text("utf-8")
    for name in ("crew_tab.html", "crews.html")
}
_NO_STORE = {"Cache-Control": "no-store"}


def _map_index(raw: str) -> int:
    """The UI leaves ``{MAP_INDEX}`` unreplaced for a task that is not mapped: that is -1."""
    try:
        return int(raw)
    except ValueError:
        return -1


def create_app() -> FastAPI:
    """The app of the Crew tab and the Crews page."""
    app = FastAPI(title="Crew views", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get(TAB_PATH, response_class=HTMLResponse)
    async def tab_page() -> HTMLResponse:
        return HTMLResponse(_PAGES["crew_tab.html"], headers=_NO_STORE)

    @app.get("/crews", response_class=HTMLResponse)
    async def crews_page() -> HTMLResponse:
        return HTMLResponse(_PAGES["crews.html"], headers=_NO_STORE)

    @app.get("/api" + TAB_PATH)
    async def task_instance(
        dag_id: str, run_id: str, task_id: str, map_index: str, user: UserDep
    ) -> JSONResponse:
        if not await asyncio.to_thread(airflow_db.may_read_task_instances, user, dag_id):
            raise HTTPException(403, "Forbidden: you may not read this DAG's task instances.")
        view = await asyncio.to_thread(data.task_view, dag_id, run_id, task_id, _map_index(map_index))
        if not view["found"]:
            raise HTTPException(404, "No such task instance.")
        return JSONResponse(view, headers=_NO_STORE)

    @app.get("/api/crews")
    async def crews(
        user: UserDep,
        days: Annotated[int, Query(ge=1, le=MAX_DAYS)] = 7,
        show: Annotated[str, Query(pattern="^(all|running|waiting)$")] = "all",
    ) -> JSONResponse:
        if not await asyncio.to_thread(airflow_db.may_read_task_instances, user, None):
            raise HTTPException(403, "Forbidden: you may not read task instances.")
        dag_ids = await asyncio.to_thread(airflow_db.readable_dag_ids, user)
        view = await asyncio.to_thread(data.crews_view, days, dag_ids, show)
        return JSONResponse(view, headers=_NO_STORE)

    return app
