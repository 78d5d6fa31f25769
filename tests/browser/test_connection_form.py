"""The crew connection in the Airflow UI, in a real browser, as a new user meets it.

A real api-server (``[core] test_connection = Enabled``) with the bundled local crew service as the
crew. Through the UI: add a Crew connection with every field, save, reopen, check every value and
that the token never reaches the page; check a new connection's defaults; use the connections
list's Test action for a good token, a bad token, a closed port, a user token and an http:// host
on another machine.

Run alone: ``pytest tests/browser/test_connection_form.py`` (about a minute; screenshots under
``test-artifacts/browser/airflow-<version>/``, listed at the end of the run).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_crew._compat import AIRFLOW_V_3_1_PLUS, AIRFLOW_VERSION
from airflow_provider_crew.connection import config_from_connection
from airflow_provider_crew.connection_form import CONN_FIELDS
from tests.e2e.airflow_stack import AirflowStack, wait_for

from . import harness

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

needs_test_action = pytest.mark.skipif(
    not AIRFLOW_V_3_1_PLUS, reason="the Airflow UI has a Test action for connections from 3.1"
)
# Airflow 3.3.1 and 3.3.2 refuse the Test action for a connection without a port: the UI sends
# port 0 for it and the api-server takes 0 for a different port than the stored empty one
# (apache/airflow#73298). The crew form therefore shows Port; docs/connection.md says to fill it.
TEST_ACTION_NEEDS_A_PORT = str(AIRFLOW_VERSION) in ("3.3.1", "3.3.2")

# A value for each extra field that differs from its default, as the 3.2+ form saves it (JSON types).
SAMPLE_VALUES: dict[str, Any] = {
    "credential_kind": "user",
    "connect_timeout": 3.5,
    "read_timeout": 45,
    "verify_tls": False,
    "retry_limit": 2,
    "retry_delay": 0.5,
    "retry_budget": 120,
    "max_response_bytes": 1048576,
    "status_path_style": "deployed",
    "execution_url_template": "https://app.example.test/executions/{kickoff_id}",
    "wake_by_webhook": True,
    "safety_poll_interval": 120,
    "event_stream": True,
    "event_stream_realtime": True,
    "event_stream_content": True,
    "stop_executions": False,
    "max_usage": 200000,
    "max_cost": 2.5,
    "input_price": 3.25,
    "output_price": 15.5,
    "cached_input_price": 0.3,
}
# The toasts region: "Notifications, bottom-end (alt+T)" on 3.3, "bottom-end Notifications alt+T" on 3.2.
NOTIFICATIONS = re.compile(r"\bNotifications\b")


def test_every_extra_field_has_a_sample_value():
    assert set(SAMPLE_VALUES) == set(CONN_FIELDS), "give each new extra field a non-default value above"
    for name, value in SAMPLE_VALUES.items():
        assert value != CONN_FIELDS[name]["schema"].get("default"), name


@pytest.fixture(scope="module")
def airflow_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Any]]:
    """An api-server with the Test action enabled, and the local crew service (crew ``research``)."""
    from airflow_provider_crew.testing import LocalCrewService

    root = tmp_path_factory.mktemp("airflow-ui")
    (root / "dags").mkdir()
    with LocalCrewService("research") as service:
        airflow = AirflowStack(root / "home", root / "dags", {"AIRFLOW__CORE__TEST_CONNECTION": "Enabled"})
        try:
            airflow.migrate()
            airflow.start(("api-server",))
            yield airflow, service
        except BaseException:
            print(f"----- api-server -----\n{airflow.log_tail('api-server')}")
            raise
        finally:
            airflow.stop()


def service_port(service: Any) -> int:
    return int(service.base_url.rsplit(":", 1)[1])


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connecting is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the form ------------------------------------------------------------------------------------


def open_connections(steps: harness.Steps, airflow: AirflowStack) -> Any:
    page = steps.page
    harness.log_in(page, airflow.base_url, airflow.username, airflow.password, steps)
    page.goto(f"{airflow.base_url}/connections", wait_until="domcontentloaded")
    return page


def field_group(dialog: Any, page: Any, name: str) -> Any:
    """The form group (label, input, help text) of the extra field ``name``, found by its label."""
    label = CONN_FIELDS[name]["label"]
    return dialog.get_by_role("group").filter(has=page.get_by_text(re.compile(rf"^{re.escape(label)}\s*$")))


def shown_choice(group: Any, name: str) -> str:
    """The value a drop-down shows: the combobox's text (3.1-3.2), else the group's text without the
    label and the help text (3.3 draws the value next to an empty search input)."""
    text = group.get_by_role("combobox").inner_text().strip()
    if text:
        return str(text)
    spec = CONN_FIELDS[name]
    lines = [line.strip() for line in group.inner_text().splitlines()]
    return " ".join(line for line in lines if line and line not in (spec["label"], spec["description"]))


def expect_extra_value(dialog: Any, page: Any, name: str, value: Any) -> None:
    """Wait until the extra field ``name`` shows ``value`` (None: empty), as a person sees it."""
    from playwright.sync_api import expect

    group = field_group(dialog, page, name)
    expect(group).to_have_count(1)
    schema = CONN_FIELDS[name]["schema"]
    if "boolean" in schema["type"]:
        box = group.get_by_role("checkbox")
        (expect(box).to_be_checked if value else expect(box).not_to_be_checked)()
    elif "enum" in schema:
        # Airflow 3.3.2 masked the old "token_kind" default as "***": the drop-down showed "Select Value".
        wait_for(
            lambda: shown_choice(group, name) == str(value),
            timeout=harness.UI_TIMEOUT_MS / 1000,
            what=f"{name} to show {value!r} (shows {shown_choice(group, name)!r})",
        )
    else:
        expect(group.locator("input").first).to_have_value("" if value is None else str(value))


def shoot_the_rest_of_the_extra_fields(steps: harness.Steps, dialog: Any, name: str) -> None:
    """The dialog scrolls inside itself: bring its last extra field into view for a second screenshot."""
    field_group(dialog, steps.page, list(CONN_FIELDS)[-1]).scroll_into_view_if_needed()
    steps.shot(name)


def set_extra_value(dialog: Any, page: Any, name: str, value: Any) -> None:
    group = field_group(dialog, page, name)
    schema = CONN_FIELDS[name]["schema"]
    if "enum" in schema:
        group.get_by_role("combobox").click()
        page.get_by_role("option", name=str(value), exact=True).click()
    elif "boolean" in schema["type"]:
        if group.get_by_role("checkbox").is_checked() != value:
            # The switch's input is hidden under its drawing; a person clicks the drawing.
            group.locator("label:has(input[type='checkbox'])").click()
    else:
        group.locator("input").first.fill(str(value))


def crew_form_as_served(airflow: AirflowStack) -> dict[str, Any]:
    """The crew form's description the UI draws from (``GET /ui/connections/hook_meta``)."""
    response = airflow.session.get(f"{airflow.base_url}/ui/connections/hook_meta", timeout=60)
    response.raise_for_status()
    (crew,) = [meta for meta in response.json() if meta["connection_type"] == "crew"]
    return dict(crew)


def test_add_a_crew_connection_with_every_field_save_and_reopen(airflow_ui, steps):
    from playwright.sync_api import expect

    airflow, service = airflow_ui
    if not AIRFLOW_V_3_1_PLUS and not crew_form_as_served(airflow)["extra_fields"]:
        # Airflow 3.0 builds provider forms with flask-appbuilder's widgets only: without it the
        # api-server logs "not fully initialized (UI widgets will be missing)" and the UI shows the
        # generic form (Host, Login, Password, Port, Schema, Extra JSON). 3.1+ no longer needs it.
        pytest.skip("Airflow 3.0 without flask-appbuilder shows the generic connection form")
    page = open_connections(steps, airflow)
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox", name="Connection ID").fill("crew_from_form")
    dialog.get_by_role("combobox", name="Connection Type").click()
    page.get_by_role("option", name="Crew", exact=True).click()

    # The standard fields, relabelled, with the http rule and the port advice in the placeholders.
    host = dialog.get_by_role("textbox", name="Crew base URL")
    expect(host).to_have_attribute("placeholder", re.compile(r"^https://.*http:// only for localhost"))
    expect(dialog.get_by_role("spinbutton", name="Port")).to_have_attribute(
        "placeholder", re.compile(r"Test action of Airflow 3\.3\.1-3\.3\.2 needs it")
    )
    expect(dialog.get_by_role("textbox", name="Bearer token")).to_be_visible()
    for hidden in ("Login", "Schema"):
        expect(dialog.get_by_role("textbox", name=hidden, exact=True)).to_have_count(0)
    steps.shot("new-standard-fields")

    # A new connection starts with the documented defaults.
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()
    for name, spec in CONN_FIELDS.items():
        expect_extra_value(dialog, page, name, spec["schema"].get("default"))
    steps.shot("new-extra-fields-defaults")
    shoot_the_rest_of_the_extra_fields(steps, dialog, "new-extra-fields-defaults-end")

    for name, value in SAMPLE_VALUES.items():
        set_extra_value(dialog, page, name, value)
    steps.shot("extra-fields-filled")
    dialog.get_by_role("button", name="Standard Fields").click()
    dialog.get_by_role("textbox", name="Description").fill("The research crew, from the form")
    host.fill("http://127.0.0.1")
    dialog.get_by_role("spinbutton", name="Port").fill(str(service_port(service)))
    dialog.get_by_role("textbox", name="Bearer token").fill(service.user_token)
    steps.shot("standard-fields-filled")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    row = page.get_by_role("row").filter(has_text="crew_from_form")
    expect(row).to_contain_text(str(service_port(service)))
    steps.shot("saved")

    # What Airflow stored: every value as typed, the token stored (and masked in the REST API).
    stored = airflow.api("GET", "/connections/crew_from_form")
    assert (stored["conn_type"], stored["host"], stored["port"]) == (
        "crew",
        "http://127.0.0.1",
        service_port(service),
    )
    assert stored["description"] == "The research crew, from the form"
    assert stored["password"] == "***"
    extra = json.loads(stored["extra"])
    assert set(extra) == set(SAMPLE_VALUES)
    # 3.2+ stores numbers as numbers; 3.1's form (the hook's wtforms fields) stores them as text. The
    # provider reads both: compare what it reads.
    read = SimpleNamespace(
        conn_id="crew_from_form",
        conn_type="crew",
        host=stored["host"],
        port=stored["port"],
        schema=None,
        password="x",
        extra=extra,
    )
    parsed = config_from_connection(read, "crew_from_form")
    assert {
        name: getattr(getattr(parsed, name), "value", getattr(parsed, name)) for name in SAMPLE_VALUES
    } == SAMPLE_VALUES

    # Reopen: every value shows as saved; the token does not reach the page.
    page.mouse.move(5, 500)  # away from the row's buttons and their tooltips
    row.get_by_role("button", name="Edit Connection").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("textbox", name="Crew base URL")).to_have_value("http://127.0.0.1")
    expect(dialog.get_by_role("spinbutton", name="Port")).to_have_value(str(service_port(service)))
    expect(dialog.get_by_role("textbox", name="Description")).to_have_value(
        "The research crew, from the form"
    )
    token_box = dialog.get_by_role("textbox", name="Bearer token")
    expect(token_box).not_to_have_value(service.user_token)
    expect(token_box).not_to_have_value("")
    steps.shot("reopened-standard-fields")
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()
    for name, value in SAMPLE_VALUES.items():
        expect_extra_value(dialog, page, name, value)
    steps.shot("reopened-extra-fields")
    shoot_the_rest_of_the_extra_fields(steps, dialog, "reopened-extra-fields-end")
    assert service.user_token not in page.content()
    dialog.get_by_role("button", name="Close").click()

    if AIRFLOW_V_3_1_PLUS:
        # The connection as saved by the form passes the Test action.
        toast = click_test(page, "crew_from_form")
        toast = expect_message(
            toast,
            "Test Connection Successful",
            f"OK: the crew at {service.base_url} expects inputs ['topic', 'current_year'] (user token).",
        )
        steps.shot("test-action-ok", element=toast)
    assert service.request_count("kickoff") == 0


# -- the Test action -----------------------------------------------------------------------------


def connection_row(page: Any, connection_id: str) -> Any:
    return page.get_by_role("row").filter(has=page.get_by_role("cell", name=connection_id, exact=True))


def click_test(page: Any, connection_id: str) -> Any:
    """Click the Test action of one row of the connections list; return the notifications region."""
    page.mouse.move(5, 500)  # a tooltip left over a neighbouring row would take the click
    connection_row(page, connection_id).get_by_role("button", name="Test Connection").click()
    return page.get_by_role("region", name=NOTIFICATIONS)


def expect_message(notifications: Any, title: str, message: str) -> Any:
    """Wait for the notification carrying ``message``; check its title; no connection id in it.

    :return: The notification, for a screenshot.
    """
    from playwright.sync_api import expect

    toast = notifications.get_by_role("status").filter(has_text=message)
    expect(toast).to_be_visible()
    expect(toast).to_contain_text(title)
    # Airflow tests under a random connection id; a message must never name it.
    expect(toast).not_to_contain_text("Connection '")
    return toast


def add_connection(airflow: AirflowStack, connection_id: str, **fields: Any) -> None:
    airflow.api(
        "POST",
        "/connections",
        expect=201,
        json={"connection_id": connection_id, "conn_type": "crew", **fields},
    )


@needs_test_action
def test_the_test_action_tells_ok_bad_token_and_unreachable(airflow_ui, steps):
    airflow, service = airflow_ui
    port = service_port(service)
    down = closed_port()
    add_connection(airflow, "crew_bad_token", host="http://127.0.0.1", port=port, password="not-the-token-42")
    add_connection(airflow, "crew_down", host="http://127.0.0.1", port=down, password=service.user_token)
    add_connection(
        airflow,
        "crew_user_token",
        host="http://127.0.0.1",
        port=port,
        password=service.user_token,
        extra=json.dumps({"credential_kind": "user"}),
    )
    add_connection(
        airflow, "crew_http_elsewhere", host="http://crew.internal.example", port=80, password="tok-12345"
    )
    add_connection(airflow, "crew_no_port", host=service.base_url, password=service.org_token)
    page = open_connections(steps, airflow)

    notifications = click_test(page, "crew_bad_token")
    toast = expect_message(
        notifications,
        "Test Connection Failed",
        f"Bad token: the crew at {service.base_url} rejected the token (401). Put the token from the "
        "crew's status tab in 'Bearer token'.",
    )
    steps.shot("bad-token", element=toast)

    notifications = click_test(page, "crew_down")
    toast = expect_message(
        notifications,
        "Test Connection Failed",
        f"Unreachable: GET / to http://127.0.0.1:{down}/ failed after 1 attempt(s)",
    )
    steps.shot("unreachable", element=toast)

    notifications = click_test(page, "crew_user_token")
    toast = expect_message(
        notifications,
        "Test Connection Successful",
        f"OK: the crew at {service.base_url} expects inputs ['topic', 'current_year'] (user token).",
    )
    steps.shot("user-token", element=toast)

    notifications = click_test(page, "crew_http_elsewhere")
    toast = expect_message(
        notifications,
        "Test Connection Failed",
        "'Crew base URL' 'http://crew.internal.example' uses http://. Write https://crew.internal.example: "
        "http:// is accepted only for a service on the same machine",
    )
    steps.shot("http-elsewhere", element=toast)

    notifications = click_test(page, "crew_no_port")
    if TEST_ACTION_NEEDS_A_PORT:
        # Airflow's own refusal, before the provider runs; docs/connection.md gives the way round it.
        toast = expect_message(notifications, "Test Connection Failed", "Bad Request")
    else:
        toast = expect_message(
            notifications,
            "Test Connection Successful",
            f"OK: the crew at {service.base_url} expects inputs ['topic', 'current_year'] (organization token).",
        )
    steps.shot("no-port", element=toast)
    steps.shot("connections-list-after-the-tests")
    assert service.request_count("kickoff") == 0


# -- the webhook receiver ------------------------------------------------------------------------


@needs_test_action
def test_add_the_webhook_receiver_in_the_form_and_test_it_against_the_plugin(airflow_ui, steps):
    """The receiver connection (docs/webhook-wake.md): its relabelled form, the key kept off the page,
    and the Test action asking the provider's plugin on this very api-server."""
    from playwright.sync_api import expect

    airflow, _ = airflow_ui
    key = "browser-receiver-key-" + "k" * 24
    page = open_connections(steps, airflow)
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox", name="Connection ID").fill("crew_webhook_receiver")
    dialog.get_by_role("combobox", name="Connection Type").click()
    page.get_by_role("option", name="Crew webhook receiver", exact=True).click()
    host = dialog.get_by_role("textbox", name="Airflow address as crews reach it")
    expect(host).to_have_attribute("placeholder", re.compile(r"^https://airflow\.example\.com"))
    for hidden in ("Login", "Schema"):
        expect(dialog.get_by_role("textbox", name=hidden, exact=True)).to_have_count(0)
    host.fill("http://127.0.0.1")
    dialog.get_by_role("spinbutton", name="Port").fill(str(airflow.port))
    dialog.get_by_role("textbox", name="Key").fill(key)
    steps.shot("receiver-form-filled")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    stored = airflow.api("GET", "/connections/crew_webhook_receiver")
    assert (stored["conn_type"], stored["host"], stored["port"], stored["password"]) == (
        "crew_webhook_receiver",
        "http://127.0.0.1",
        airflow.port,
        "***",
    )

    page.mouse.move(5, 500)
    connection_row(page, "crew_webhook_receiver").get_by_role("button", name="Edit Connection").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("textbox", name="Airflow address as crews reach it")).to_have_value(
        "http://127.0.0.1"
    )
    expect(dialog.get_by_role("textbox", name="Key")).not_to_have_value(key)
    assert key not in page.content()
    steps.shot("receiver-reopened")
    dialog.get_by_role("button", name="Close").click()

    toast = expect_message(
        click_test(page, "crew_webhook_receiver"),
        "Test Connection Successful",
        f"OK: the provider's plugin at {airflow.base_url}/crew-webhooks wakes waits with this key.",
    )
    steps.shot("receiver-test-action-ok", element=toast)
    assert key not in page.content()


# -- the REST client -----------------------------------------------------------------------------


def test_the_stack_talks_to_the_rest_api_as_a_logged_in_client(airflow_ui):
    import requests

    airflow, _ = airflow_ui
    anonymous = requests.get(f"{airflow.base_url}/api/v2/connections", timeout=30)
    assert anonymous.status_code == 401
    assert airflow.session.headers["Authorization"].startswith("Bearer ")
    assert "total_entries" in airflow.api("GET", "/connections")
