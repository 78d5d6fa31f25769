"""The Crew tab's and the Crews page's parts that need no browser: what the plugin declares, what a crew
task carries in its serialized form, and the live status reads (real HTTP to the local crew service).

The views themselves are tested in a real browser: tests/browser/test_crew_views.py.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.plugins import crew as crew_plugin
from airflow_provider_crew.plugins import crew_views_data as data
from airflow_provider_crew.plugins import crew_views_live as live_module


def test_the_plugin_shows_the_tab_and_the_page_where_airflow_has_plugin_views():
    views = crew_plugin.CrewPlugin.external_views
    if not AIRFLOW_V_3_1_PLUS:  # Airflow 3.0: no external_views; the webhooks still work
        assert views == []
        return
    by_name = {view["name"]: view for view in views}
    assert set(by_name) == {"Crew", "Crews"}
    assert by_name["Crew"]["destination"] == "task_instance"
    # Relative, so that the UI resolves them against its base: Airflow may be served under a path.
    assert by_name["Crew"]["href"] == "crew-ui/task-instance/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}"
    assert by_name["Crews"]["destination"] == "nav"


def test_the_views_know_every_crew_task_type():
    from airflow_provider_crew.decorators.crew import DECORATOR, _CrewDecoratedOperator
    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.operators.resume import CrewResumeOperator
    from airflow_provider_crew.review.result import CrewReviewResultOperator
    from airflow_provider_crew.review.round import CrewReviewRoundOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    classes = (
        CrewKickoffOperator,
        CrewStatusSensor,
        CrewResumeOperator,
        CrewReviewRoundOperator,
        CrewReviewResultOperator,
        _CrewDecoratedOperator,
    )
    assert set(data.CREW_OPERATORS) == {cls.__name__ for cls in classes}
    assert data.CREW_DECORATOR == DECORATOR
    assert data.REVIEW_ROUND == CrewReviewRoundOperator.__name__


def test_a_crew_task_carries_its_connection_and_pace_in_the_serialized_dag():
    """The api-server reads them there to follow a running execution (a blocking wait has no trigger)."""
    from airflow.sdk import DAG

    from airflow_provider_crew.decorators.crew import crew_task
    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serializer
    except ImportError:  # Airflow < 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as Serializer  # type: ignore[no-redef]

    with DAG("views", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        kickoff = CrewKickoffOperator(task_id="kickoff", inputs={"a": 1}, crew_conn_id="one", poll_interval=7)
        CrewStatusSensor(task_id="sensor", kickoff_id=kickoff.output, crew_conn_id="two")
        CrewKickoffOperator.partial(task_id="mapped", crew_conn_id="three").expand(inputs=[{"a": 1}])

        @crew_task(crew_conn_id="four")
        def decorated() -> dict[str, int]:
            return {"a": 1}

        decorated()

    serialized = json.loads(json.dumps(Serializer.to_dict(dag)))
    tasks = {task["__var"]["task_id"]: task["__var"] for task in serialized["dag"]["tasks"]}
    found = {}
    for task_id, fields in tasks.items():
        merged = {**(fields.get("partial_kwargs") or {}), **fields}
        found[task_id] = (merged.get("crew_conn_id"), merged.get("poll_interval"))
    assert found["kickoff"] == ("one", 7.0)
    assert found["sensor"][0] == "two"
    assert found["mapped"][0] == "three"
    assert found["decorated"][0] == "four"


def test_a_finished_executions_record_shows_its_state_progress_tokens_and_output():
    from airflow_provider_crew.status import CrewStatus

    record = {
        "state": "SUCCESS",
        "progress": {"completed": 2, "total": 2, "current": "reporting_task", "current_agent": "Analyst"},
        "usage_metrics": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        "result": "x" * (data.OUTPUT_HEAD_CHARS + 10),
    }
    view = data._status_view(CrewStatus.from_response(record))
    assert view["state"] == "succeeded" and (view["completed"], view["total"]) == (2, 2)
    assert view["tokens"] == 15 and view["current_agent"] == "Analyst"
    assert len(view["output_head"]) == data.OUTPUT_HEAD_CHARS and view["output_cut"] is True


@pytest.mark.crew_service(speed=0.05)
def test_live_reads_are_shared_and_keep_the_last_known_state_when_the_service_goes(
    crew_service, crew_connection
):
    kickoff_id = CrewHook(crew_conn_id=crew_connection).kickoff({"topic": "x", "current_year": "2026"})
    live = live_module.LiveStatuses(min_age=60.0)
    reads = crew_service.counters["requests"]["status"]
    first, problem, _ = live.read(crew_connection, kickoff_id)
    assert first is not None and problem is None
    again, problem, age = live.read(crew_connection, kickoff_id)  # within min_age: no second read
    assert again is first and problem is None and age is not None
    assert crew_service.counters["requests"]["status"] == reads + 1
    crew_service.stop()
    stale = live_module.LiveStatuses(min_age=0.0)
    stale._last[(crew_connection, kickoff_id)] = (0.0, first, None)
    known, problem, _ = stale.read(crew_connection, kickoff_id)
    assert known is first, "the last known state is kept"
    assert problem is not None and "could not be read" in problem
    assert crew_service.token("org") not in problem


@pytest.mark.crew_service(speed=0.05)
def test_viewers_who_ask_while_a_read_is_under_way_share_it(crew_service, crew_connection):
    """A slow service must not take one read per open tab: who asks meanwhile takes that read's answer."""
    from concurrent.futures import ThreadPoolExecutor

    kickoff_id = CrewHook(crew_conn_id=crew_connection).kickoff({"topic": "x", "current_year": "2026"})
    crew_service.faults.latency(1.0, endpoint="status")
    live = live_module.LiveStatuses(min_age=60.0)
    reads = crew_service.counters["requests"]["status"]
    with ThreadPoolExecutor(max_workers=20) as viewers:
        seen = list(viewers.map(lambda _: live.read(crew_connection, kickoff_id)[0], range(20)))
    assert crew_service.counters["requests"]["status"] == reads + 1
    assert all(status is seen[0] and status is not None for status in seen)


def test_the_tab_reads_at_the_waits_own_pace_which_grows_as_the_wait_does():
    assert data.wait_pace(2.0, 15.0, elapsed=0.0) == 2.0
    assert data.wait_pace(2.0, 15.0, elapsed=2.5) == 3.0  # after one poll: half as long again
    assert data.wait_pace(2.0, 15.0, elapsed=600.0) == 15.0  # never past the longest
    assert data.wait_pace(5.0, 5.0, elapsed=600.0) == 5.0


def test_the_tab_asks_the_auth_manager_with_the_dags_team(monkeypatch):
    """In a multi-team deployment a user of one team must not read another team's crews: Airflow's
    auth managers refuse it only when they are told the DAG's team, as Airflow's own routes tell them."""
    import inspect

    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.dag import DagModel

    from airflow_provider_crew.plugins import crew_views

    if "teams" not in inspect.signature(SimpleAuthManagerUser).parameters:
        pytest.skip("this Airflow's simple auth manager has no teams")
    teams = {"dag_of_team_a": "team_a", "dag_of_team_b": "team_b"}
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id, **kwargs: teams.get(dag_id)))
    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: SimpleAuthManager())
    alice = SimpleAuthManagerUser(username="alice", role="viewer", teams=["team_a"])

    assert crew_views._may_read_task_instances(alice, "dag_of_team_a")
    assert not crew_views._may_read_task_instances(alice, "dag_of_team_b")


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("https://crews.example.com/executions/k-1", "https://crews.example.com/executions/k-1"),
        ("javascript:alert(document.cookie)", None),  # XCom is writable through the REST API
        ("data:text/html,<script>1</script>", None),
        (42, None),
    ],
)
def test_only_a_web_address_becomes_the_execution_page_link(stored, shown):
    assert data._web_address(stored) == shown
