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
from airflow_provider_crew.plugins import crew_views_budget as budget
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

    from airflow_provider_crew.plugins import airflow_db

    if "teams" not in inspect.signature(SimpleAuthManagerUser).parameters:
        pytest.skip("this Airflow's simple auth manager has no teams")
    teams = {"dag_of_team_a": "team_a", "dag_of_team_b": "team_b"}
    monkeypatch.setattr(DagModel, "get_team_name", staticmethod(lambda dag_id, **kwargs: teams.get(dag_id)))
    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: SimpleAuthManager())
    alice = SimpleAuthManagerUser(username="alice", role="viewer", teams=["team_a"])

    assert airflow_db.may_read_task_instances(alice, "dag_of_team_a")
    assert not airflow_db.may_read_task_instances(alice, "dag_of_team_b")


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


# -- budgets: the cost beside the tokens, and an execution stopped over its budget ------------------


def _crew_ti(dag_id: str, task_id: str, state: str, ended: datetime, **fields):
    """A crew task instance as the Crews page's query answers it."""
    from datetime import timedelta

    return SimpleNamespace(
        dag_id=dag_id,
        run_id=fields.get("run_id", "run_1"),
        task_id=task_id,
        map_index=-1,
        state=state,
        start_date=ended - timedelta(minutes=5),
        end_date=ended,
        operator="CrewKickoffOperator",
        run_state=fields.get("run_state", "success"),
    )


def _stored(**xcoms):
    """XCom values as the metadata database holds them (Airflow's JSON)."""
    return {key: json.dumps(value) for key, value in xcoms.items()}


OVER_BUDGET_STATUS = {
    "state": "RUNNING",
    "usage_metrics": {"prompt_tokens": 3000, "completion_tokens": 1012, "total_tokens": 4012},
    "stopped": {"reason": "the execution reached its budget", "answer": "stopped"},
}


def _usage(total: int, cost):
    return {"input_tokens": total - 100, "output_tokens": 100, "total_tokens": total, "cost": cost}


def test_the_crews_page_sums_the_cost_per_dag_and_day_and_ignores_what_has_none(monkeypatch):
    from datetime import timedelta, timezone

    from airflow_provider_crew.waiting.stopping import OVER_BUDGET

    today = datetime.now(timezone.utc).replace(hour=0, minute=30, second=0, microsecond=0)
    yesterday = today - timedelta(days=1)
    tis = [
        _crew_ti("priced", "a", "success", today),
        _crew_ti("priced", "b", "success", today, run_id="run_2"),
        _crew_ti("priced", "c", "success", yesterday, run_id="run_3"),
        _crew_ti("unpriced", "a", "success", today),  # a connection without prices: cost None
        _crew_ti("hostile", "a", "success", today),  # XCom is writable through the REST API
        _crew_ti("priced", "over", "failed", today, run_id="run_4"),
        _crew_ti("priced", "timed_out", "failed", today, run_id="run_5"),
    ]
    xcoms = {
        ("priced", "run_1", "a", -1): _stored(kickoff_id="k-1", usage=_usage(1000, 0.0042)),
        ("priced", "run_2", "b", -1): _stored(kickoff_id="k-2", usage=_usage(2000, 0.0081)),
        ("priced", "run_3", "c", -1): _stored(kickoff_id="k-3", usage=_usage(500, 0.0015)),
        ("unpriced", "run_1", "a", -1): _stored(kickoff_id="k-4", usage=_usage(700, None)),
        ("hostile", "run_1", "a", -1): _stored(usage=_usage(300, "<img src=x onerror=alert(1)>")),
        ("priced", "run_4", "over", -1): _stored(
            kickoff_id="k-5", usage=_usage(4012, 0.024177), status=OVER_BUDGET_STATUS
        ),
        ("priced", "run_5", "timed_out", -1): _stored(
            kickoff_id="k-6", status={"state": "RUNNING", "stopped": {"reason": "the wait's timeout passed"}}
        ),
    }
    monkeypatch.setattr(data, "_window", lambda since, dag_ids: (tis, xcoms))

    view = data.crews_view(7, None, "all")

    assert OVER_BUDGET == "the execution reached its budget"
    day, before = today.date().isoformat(), yesterday.date().isoformat()
    assert list(view["cost_by_day"]) == list(view["tokens_by_day"]), "the same days: the plot's axis"
    assert view["cost_by_day"][day] == {"priced": pytest.approx(0.0042 + 0.0081 + 0.024177)}
    assert view["cost_by_day"][before] == {"priced": 0.0015}
    assert view["tokens_by_day"][day] == {"priced": 7012, "unpriced": 700, "hostile": 300}
    rows = {(row["dag_id"], row["task_id"]): row for row in view["rows"]}
    assert rows[("priced", "a")]["cost"] == 0.0042 and rows[("priced", "a")]["tokens"] == 1000
    assert rows[("unpriced", "a")]["cost"] is None and rows[("hostile", "a")]["cost"] is None
    assert rows[("priced", "over")]["state"] == "over budget" and rows[("priced", "over")]["cost"] == 0.024177
    assert rows[("priced", "timed_out")]["state"] == "failed", "another stop is not over budget"
    assert rows[("priced", "a")]["state"] == "success"
    json.dumps(view, allow_nan=False)  # as the api-server answers it


def test_an_execution_stopped_over_its_budget_says_what_it_spent_and_its_cap():
    assert budget.over_budget_answer(OVER_BUDGET_STATUS) == "stopped"
    assert budget.over_budget_answer({"stopped": {"reason": "the task's execution_timeout passed"}}) is None
    assert budget.over_budget_answer({"state": "SUCCESS"}) is None and budget.over_budget_answer("x") is None
    hostile = {"stopped": {"reason": "the execution reached its budget", "answer": "<b>" * 100}}
    assert budget.over_budget_answer(hostile) == ("<b>" * 100)[:80], "bounded; the page shows it as text"

    line = budget.budget_line
    assert line("stopped", 4012, 0.024177, {"max_tokens": 3000, "max_cost": None}) == (
        "Stopped over its budget: spent 4,012 tokens (cost 0.02418); its cap: 3,000 tokens."
    )
    # Rendered from a template: text.
    assert line("stopped", 4012, None, {"max_tokens": "3000", "max_cost": "1.5"}) == (
        "Stopped over its budget: spent 4,012 tokens; its caps: 3,000 tokens and cost 1.50."
    )
    assert line("stopped", 4012, 0.5, {"max_tokens": None, "max_cost": 0.5}) == (
        "Stopped over its budget: spent 4,012 tokens (cost 0.5); its cap: cost 0.5."
    )
    assert line("stopped", 4012, 0.5, {"max_tokens": None, "max_cost": None}) == (
        "Stopped over its budget: spent 4,012 tokens (cost 0.5); its cap: the crew connection's default."
    )
    assert line("stopped", 4012, 0.5, None) == "Stopped at its budget: spent 4,012 tokens (cost 0.5)."
    assert line("unknown", None, None, {"max_tokens": 3000}) == (
        "Reached its budget (its stop: unknown): spent an unreported number of tokens; its cap: 3,000 tokens."
    )
    assert (
        budget.money(1234.5) == "1,234.50"
        and budget.money(0.000012) == "1.2e-05"
        and budget.money(0.0) == "0"
    )


def test_the_tab_shows_an_execution_stopped_over_its_budget_as_stopped():
    from airflow_provider_crew.status import CrewStatus

    shown = data._shown(CrewStatus.from_response(OVER_BUDGET_STATUS), {}, _usage(4012, 0.024177))
    assert shown["state"] == "running" and shown["tokens"] == 4012  # the last read, before the stop
    shown["cost"] = 0.024177
    line = data._over_budget(shown, "stopped", {"kickoff_id": "k-1", "max_tokens": 3000, "max_cost": None})
    assert line == "Stopped over its budget: spent 4,012 tokens (cost 0.02418); its cap: 3,000 tokens."
    assert shown["state"] == "stopped" and shown["state_word"] is None
    # A stop that did not say it stopped it: the state read is kept.
    other = {"state": "running", "tokens": 4012}
    assert data._over_budget(other, "unknown", None) == (
        "Reached its budget (its stop: unknown): spent 4,012 tokens."
    )
    assert other["state"] == "running"
    assert data._over_budget({"state": "succeeded"}, None, None) is None


@pytest.mark.crew_service(speed=0.05)
def test_a_live_read_prices_the_usage_with_the_connections_prices(crew_service, monkeypatch):
    from airflow_provider_crew.waiting.budget import Prices

    for name, value in crew_service.connection_env("crew_priced", input_price=3.0, output_price=15.0).items():
        monkeypatch.setenv(name, value)
    kickoff_id = CrewHook(crew_conn_id="crew_priced").kickoff({"topic": "x", "current_year": "2026"})
    known = live_module.LiveStatuses(min_age=0.0).read("crew_priced", kickoff_id)
    assert known.status is not None and known.prices == Prices(input=3.0, output=15.0)
    for name, value in crew_service.connection_env("crew_unpriced").items():
        monkeypatch.setenv(name, value)
    assert live_module.LiveStatuses(min_age=0.0).read("crew_unpriced", kickoff_id).prices is None


def test_a_cap_the_service_cannot_enforce_is_said_on_the_tab():
    from airflow_provider_crew.plugins.crew_views_budget import unenforceable_line
    from airflow_provider_crew.status import CrewStatus

    without = CrewStatus.from_response({"state": "RUNNING"})
    with_usage = CrewStatus.from_response({"state": "RUNNING", "usage_metrics": {"total_tokens": 5}})
    said = "Its budget cannot be enforced: the crew service reports no usage (usage_metrics) for it."
    assert unenforceable_line(without, {"max_tokens": "3000", "max_cost": None}) == said
    assert unenforceable_line(without, {"max_tokens": None, "max_cost": None}) is None  # no cap of its own
    assert unenforceable_line(with_usage, {"max_tokens": 3000}) is None
    assert unenforceable_line(without, None) is None  # no rendered fields stored
