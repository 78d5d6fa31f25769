"""The Crew tab's and the Crews page's parts that need no browser: what the plugin declares, what a crew
task carries in its serialized form, and the live status reads (real HTTP to the local crew service).

The views themselves are tested in a real browser: tests/browser/test_crew_views.py.
"""

from __future__ import annotations

import json
from datetime import datetime
from types import SimpleNamespace

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.hooks.crew import CrewHook
from airflow_provider_crew.links.crew import web_address
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


def _deserialized(dag):
    """The DAG as the api-server reads it back: serialized to JSON, then Airflow's deserialization."""
    try:
        from airflow.serialization.serialized_objects import DagSerialization as Serializer
    except ImportError:  # Airflow < 3.2
        from airflow.serialization.serialized_objects import SerializedDAG as Serializer  # type: ignore[no-redef]

    return Serializer.from_dict(json.loads(json.dumps(Serializer.to_dict(dag))))


class _Session:
    """The one query ``following`` makes of the metadata database: the DAG version's serialized DAG."""

    def __init__(self, dag) -> None:
        self.row = SimpleNamespace(dag=dag)

    def scalars(self, query):
        return SimpleNamespace(first=lambda: self.row)


def test_each_task_instance_is_followed_through_its_own_connection_and_pace():
    """The api-server follows a running execution with the task instance's connection, read through
    Airflow's deserialization of its DAG version (a blocking wait has no trigger): a mapped task's own
    expanded connection, not crew_default."""
    from airflow.sdk import DAG

    from airflow_provider_crew.decorators.crew import crew_task
    from airflow_provider_crew.operators.crew import CrewKickoffOperator
    from airflow_provider_crew.sensors.crew import CrewStatusSensor

    with DAG("views", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        kickoff = CrewKickoffOperator(task_id="kickoff", inputs={"a": 1}, crew_conn_id="one", poll_interval=7)
        CrewStatusSensor(task_id="sensor", kickoff_id=kickoff.output, crew_conn_id="two")
        CrewKickoffOperator.partial(task_id="mapped", crew_conn_id="three").expand(inputs=[{"a": 1}])
        CrewKickoffOperator.partial(task_id="by_conn", inputs={}, deferrable=False).expand(
            crew_conn_id=["crew_a", "crew_b", "crew_c"]
        )
        CrewKickoffOperator.partial(task_id="product").expand(
            crew_conn_id=["crew_a", "crew_b"], inputs=[{"a": 1}, {"a": 2}, {"a": 3}]
        )
        CrewKickoffOperator.partial(task_id="kwargs", inputs={}).expand_kwargs(
            [{"crew_conn_id": "crew_k0"}, {"crew_conn_id": "crew_k1"}]
        )
        CrewKickoffOperator.partial(task_id="from_xcom", inputs={}).expand(crew_conn_id=kickoff.output)
        CrewKickoffOperator.partial(task_id="kwargs_from_xcom").expand_kwargs(kickoff.output)
        CrewKickoffOperator.partial(task_id="fixed_kwargs_from_xcom", crew_conn_id="five").expand_kwargs(
            kickoff.output
        )

        @crew_task(crew_conn_id="four")
        def decorated() -> dict[str, int]:
            return {"a": 1}

        decorated()

    live_module._VERSIONS.clear()
    session = _Session(_deserialized(dag))

    def follow(task_id: str, map_index: int = -1):
        ti = SimpleNamespace(
            dag_version_id="v1", task_id=task_id, map_index=map_index, trigger_id=None, start_date=None
        )
        return live_module.following(session, ti)

    assert (follow("kickoff").conn_id, follow("kickoff").pace) == ("one", 7.0)
    assert follow("sensor").conn_id == "two"
    assert follow("mapped", 0).conn_id == "three"
    assert follow("decorated").conn_id == "four"
    assert [follow("by_conn", index).conn_id for index in range(3)] == ["crew_a", "crew_b", "crew_c"]
    # Airflow's order for several lists: the last argument varies fastest.
    assert [follow("product", index).conn_id for index in range(6)] == ["crew_a"] * 3 + ["crew_b"] * 3
    assert [follow("kwargs", index).conn_id for index in range(2)] == ["crew_k0", "crew_k1"]
    assert follow("from_xcom", 0).conn_id is None, "known only at run time: never read through another"
    assert follow("kwargs_from_xcom", 0).conn_id is None
    assert follow("fixed_kwargs_from_xcom", 0).conn_id == "five"


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
    first = live.read(crew_connection, kickoff_id)
    assert first.status is not None and first.problem is None
    again = live.read(crew_connection, kickoff_id)  # within min_age: no second read
    assert again is first
    assert crew_service.counters["requests"]["status"] == reads + 1
    crew_service.stop()
    stale = live_module.LiveStatuses(min_age=0.0)
    stale._last[(crew_connection, kickoff_id)] = first
    known = stale.read(crew_connection, kickoff_id)
    assert known.status is first.status, "the last known state is kept"
    assert known.problem is not None and known.problem.since >= first.status_at
    assert stale.read(crew_connection, kickoff_id).problem.since == known.problem.since, "since the first"
    message = live_module.banner(known, stored_status=False)
    # One sentence each: which service, why, since when, what is shown; no exception's repr, no token.
    assert message is not None and message.startswith(f"The crew service of connection {crew_connection!r} (")
    assert "cannot be read since " in message and ": the connection was refused. " in message
    assert message.endswith(" UTC.") and "Shown: the state it gave at " in message
    assert "HTTPConnection" not in message and "Errno" not in message
    assert crew_service.token("org") not in message


def test_the_banner_says_what_is_shown_when_nothing_was_read_and_never_a_secret_in_an_address():
    from airflow_provider_crew.exceptions import CrewConfigurationError

    why = live_module.why_unreadable(
        CrewConfigurationError("Connection 'c': 'Crew base URL' 'https://u:pw@h' has credentials."), "c"
    )
    assert why == "the api-server cannot use the connection: 'Crew base URL' 'https://h' has credentials."
    problem = live_module.Problem("connection 'c'", why, since=0.0)
    stored = live_module.banner(live_module.Known(problem=problem), stored_status=True)
    assert stored is not None and "since 1970-01-01 00:00:00 UTC: " in stored
    assert stored.endswith("has credentials. Shown: the state the task stored.")
    nothing = live_module.banner(live_module.Known(problem=problem), stored_status=False)
    assert nothing is not None and nothing.endswith("No state is known yet.")
    assert live_module.banner(live_module.Known(), stored_status=True) is None


@pytest.mark.crew_service(speed=0.05)
def test_viewers_who_ask_while_a_read_is_under_way_share_it(crew_service, crew_connection):
    """A slow service must not take one read per open tab: who asks meanwhile takes that read's answer."""
    from concurrent.futures import ThreadPoolExecutor

    kickoff_id = CrewHook(crew_conn_id=crew_connection).kickoff({"topic": "x", "current_year": "2026"})
    crew_service.faults.latency(1.0, endpoint="status")
    live = live_module.LiveStatuses(min_age=60.0)
    reads = crew_service.counters["requests"]["status"]
    with ThreadPoolExecutor(max_workers=20) as viewers:
        seen = list(viewers.map(lambda _: live.read(crew_connection, kickoff_id).status, range(20)))
    assert crew_service.counters["requests"]["status"] == reads + 1
    assert all(status is seen[0] and status is not None for status in seen)


def test_the_tab_reads_at_the_waits_own_pace_which_grows_as_the_wait_does():
    assert live_module.wait_pace(2.0, 15.0, elapsed=0.0) == 2.0
    assert live_module.wait_pace(2.0, 15.0, elapsed=2.5) == 3.0  # after one poll: half as long again
    assert live_module.wait_pace(2.0, 15.0, elapsed=600.0) == 15.0  # never past the longest
    assert live_module.wait_pace(5.0, 5.0, elapsed=600.0) == 5.0


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
        ("HTTPS://crews.example.com/k-1", "HTTPS://crews.example.com/k-1"),  # as the connection takes it
        (42, None),
    ],
)
def test_only_a_web_address_becomes_the_execution_page_link(stored, shown):
    assert web_address(stored) == shown
