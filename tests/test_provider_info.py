"""Provider registration: the metadata validates against the schema Airflow ships, and the CLI sees us."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import airflow
import jsonschema
import pytest

from airflow_provider_crew import get_provider_info
from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS
from airflow_provider_crew.connection_form import CONN_FIELDS


def airflow_schema(name: str) -> dict:
    return json.loads((Path(airflow.__file__).parent / name).read_text())


def test_provider_info_validates_against_airflows_schema():
    jsonschema.validate(get_provider_info(), airflow_schema("provider_info.schema.json"))


def test_connection_form_metadata_validates_against_the_provider_yaml_schema_where_airflow_has_it():
    schema = airflow_schema("provider.yaml.schema.json")
    conn_type_schema = schema["properties"]["connection-types"]
    if "conn-fields" not in json.dumps(conn_type_schema):
        pytest.skip(f"Airflow {airflow.__version__} does not define conn-fields (3.2+ reads them)")
    jsonschema.validate(get_provider_info()["connection-types"], conn_type_schema)


def test_ui_field_behaviour_validates_against_airflows_form_schema():
    from airflow_provider_crew.hooks.crew import CrewHook

    jsonschema.validate(
        CrewHook.get_ui_field_behaviour(), airflow_schema("customized_form_field_behaviours.schema.json")
    )


def test_every_listed_module_and_class_imports():
    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for decorator in info["task-decorators"]:
        module, _, name = decorator["class-name"].rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), decorator
    for conn_type in info["connection-types"]:
        module, _, name = conn_type["hook-class-name"].rpartition(".")
        assert getattr(importlib.import_module(module), name).conn_type == conn_type["connection-type"]


def test_the_config_section_declares_the_race_hold_switch_as_the_code_reads_it():
    from airflow_provider_crew.waiting import race

    options = get_provider_info()["config"][race.RACE_HOLD_SECTION]["options"]
    assert options[race.RACE_HOLD_OPTION]["default"] == "auto" == race.RACE_HOLD_VALUES[0]
    assert options[race.RACE_HOLD_OPTION]["example"] in race.RACE_HOLD_VALUES


def test_package_name_matches_the_distribution_and_the_entry_point_is_registered():
    points = [
        ep for ep in entry_points(group="apache_airflow_provider") if ep.dist.name == "airflow-provider-crew"
    ]
    assert [ep.value for ep in points] == ["airflow_provider_crew:get_provider_info"]
    assert get_provider_info()["package-name"] == points[0].dist.name


def test_conn_fields_defaults_are_the_ones_the_parser_uses():
    from airflow_provider_crew.connection import config_from_connection

    connection = SimpleNamespace(
        conn_id="c", conn_type="crew", host="https://x.test", port=None, schema=None, password="t", extra={}
    )
    parsed = config_from_connection(connection, "c")
    for name, spec in CONN_FIELDS.items():
        value = getattr(parsed, name)
        assert getattr(value, "value", value) == spec["schema"]["default"], name


@pytest.fixture
def airflow_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    return env


def airflow_cli(env, *args: str) -> str:
    airflow_bin = Path(sys.executable).with_name("airflow")
    done = subprocess.run([str(airflow_bin), *args], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def json_output(stdout: str) -> list:
    """The JSON document in the CLI's output (Airflow 3.0 also logs to stdout)."""
    start = next(i for i, line in enumerate(stdout.splitlines()) if line.startswith(("[{", "[]")))
    return json.loads("\n".join(stdout.splitlines()[start:]))


@pytest.mark.integration
def test_airflow_cli_lists_the_provider_and_its_hook(airflow_env):
    providers = airflow_cli(airflow_env, "providers", "list", "--output", "json")
    assert "airflow-provider-crew" in {p["package_name"] for p in json_output(providers)}
    hooks = airflow_cli(airflow_env, "providers", "hooks", "--output", "json")
    crew = [h for h in json_output(hooks) if h.get("connection_type") == "crew"]
    assert crew and crew[0]["class"] == "airflow_provider_crew.hooks.crew.CrewHook"


@pytest.mark.integration
def test_airflow_cli_adds_a_crew_connection(airflow_env):
    airflow_cli(airflow_env, "db", "migrate")
    airflow_cli(
        airflow_env,
        "connections",
        "add",
        "my_crew",
        "--conn-type",
        "crew",
        "--conn-host",
        "https://crew.example.test",
        "--conn-password",
        "s3cret-token-value",
        "--conn-extra",
        json.dumps({"read_timeout": 5, "status_path_style": "deployed"}),
    )
    shown = json_output(airflow_cli(airflow_env, "connections", "get", "my_crew", "--output", "json"))[0]
    assert (shown["conn_type"], shown["host"]) == ("crew", "https://crew.example.test")


def sample_extra_values() -> dict:
    """One valid value per extra field (the default, or a made-up one where there is none)."""
    return {
        name: spec["schema"].get("default")
        if spec["schema"].get("default") is not None
        else "https://x.test/{kickoff_id}"
        for name, spec in CONN_FIELDS.items()
    }


def test_airflow_masks_no_extra_field_in_the_rest_api():
    """Airflow shows an extra as "***" when its key contains "token", "password", "secret"... Then
    the form cannot show the saved value when the connection is reopened."""
    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionResponse

    extra = sample_extra_values()
    response = ConnectionResponse.model_validate(
        {
            "conn_id": "c",
            "conn_type": "crew",
            "description": None,
            "host": "https://x.test",
            "login": None,
            "schema": None,
            "port": None,
            "password": "tok",
            "extra": json.dumps(extra),
            "team_name": None,
        }
    )
    assert json.loads(response.extra) == extra
    assert response.password == "***"  # the token itself stays hidden


SERVED_FORM_SCRIPT = """
import json
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
(crew,) = [meta for meta in HookMetaService.hook_meta_data() if meta.connection_type == "crew"]
# Validated again by the response model: its validators mask values as the API does.
served = type(crew).model_validate(crew.model_dump())
print("CREW_FORM=" + json.dumps(served.model_dump(mode="json")))
"""


def test_the_form_metadata_airflow_serves_has_every_field_with_its_default(airflow_env):
    """What the UI reads to draw the form (GET /ui/connections/hook_meta): every extra field, with
    its default as the value a new connection starts with, and the standard fields relabelled.

    In a fresh interpreter, as in the api-server: Airflow builds this once per process, and an
    earlier test that loaded the providers without the form stand-ins would change the answer.
    """
    done = subprocess.run(
        [sys.executable, "-c", SERVED_FORM_SCRIPT],
        env=airflow_env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("CREW_FORM=")]
    served = json.loads(line.removeprefix("CREW_FORM="))
    if served["extra_fields"] is None and not AIRFLOW_V_3_1_PLUS:
        pytest.skip("Airflow 3.0 builds provider form fields only with flask-appbuilder installed")
    values = {name: field["value"] for name, field in served["extra_fields"].items()}
    assert values == {name: spec["schema"].get("default") for name, spec in CONN_FIELDS.items()}
    standard = served["standard_fields"]
    titles = (standard["host"]["title"], standard["password"]["title"], standard["port"]["title"])
    assert titles == ("Crew base URL", "Bearer token", "Port")
    assert not standard["port"]["hidden"], "Airflow 3.3.1-3.3.2's Test action needs a stored port"
    assert standard["url_schema"]["hidden"] and standard["login"]["hidden"]


def test_every_extra_field_is_documented():
    """docs/connection.md is the one table of the connection's fields; the README links to it."""
    repo = Path(__file__).resolve().parents[1]
    text = (repo / "docs" / "connection.md").read_text()
    missing = [name for name in CONN_FIELDS if f"`{name}`" not in text]
    assert not missing, f"docs/connection.md does not name the extra fields {missing}"
    assert "](docs/connection.md)" in (repo / "README.md").read_text(), (
        "the README must link docs/connection.md"
    )
