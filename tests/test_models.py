"""The request and answer models of docs/contract.md: inputs, kickoff, resume, stop and error bodies.

The status record is tests/test_status.py."""

from __future__ import annotations

import pytest

from airflow_provider_crew.models import (
    KickoffRequest,
    ResumeResult,
    ResumeStatus,
    ServiceError,
    StopOutcome,
    StopResult,
    parse_inputs_response,
)


@pytest.mark.parametrize("body", [{"inputs": "topic"}, 42, {"inputs": [{"required": True}]}])
def test_unrecognised_inputs_shapes_are_rejected(body):
    with pytest.raises(ValueError, match="unrecognised"):
        parse_inputs_response(body)


def test_resume_result_accepts_upper_case_and_keeps_unknown_fields():
    result = ResumeResult.model_validate({"status": "COMPLETED", "message": "done", "extra": 1})
    assert result.status is ResumeStatus.COMPLETED


def test_kickoff_request_wire_form_uses_contract_names_and_hides_secrets_in_repr():
    request = KickoffRequest.model_validate(
        {
            "inputs": {"topic": "x"},
            "step_webhook_url": "https://h.test/step",
            "human_input_webhook": {
                "url": "https://h.test/human",
                "authentication": {"strategy": "basic", "username": "rev", "password": "pw-s3cret"},
            },
        }
    )
    assert "pw-s3cret" not in repr(request)
    assert request.to_wire() == {
        "inputs": {"topic": "x"},
        "stepWebhookUrl": "https://h.test/step",
        "humanInputWebhook": {
            "url": "https://h.test/human",
            "authentication": {"strategy": "basic", "username": "rev", "password": "pw-s3cret"},
        },
    }


@pytest.mark.parametrize(
    ("body", "text", "described"),
    [
        (
            {"error": "Unauthorized", "message": "Invalid or missing bearer token"},
            "",
            "Unauthorized: Invalid or missing bearer token",
        ),
        ({"detail": "Not Found"}, "", "Not Found"),
        (None, "<html>500</html>", "no error message"),
        (None, "upstream connect error", "upstream connect error"),
    ],
)
def test_service_error_bodies_of_every_shape(body, text, described):
    assert ServiceError.from_body(body, text).describe() == described


def test_an_error_body_that_is_not_json_in_utf8_is_quoted_as_text():
    said = ServiceError.from_answer(b'{"error": "\xff"}')
    assert (said.error, said.message) == (None, '{"error": "\ufffd"}')


@pytest.mark.parametrize(
    ("body", "own"),
    [
        (b'{"error": "Service Unavailable", "message": "Try again shortly"}', True),
        (b'{"detail": "Service Unavailable"}', True),
        (b'{"message": "Service Unavailable"}', False),  # an API gateway's
        (b'{"error": {"code": 503, "status": "UNAVAILABLE"}}', False),
        (b"no healthy upstream", False),  # Envoy's
    ],
)
def test_the_services_own_error_body_is_told_from_a_gateways(body, own):
    assert ServiceError.sent_by_service(body) is own


@pytest.mark.parametrize(
    ("status_code", "body", "outcome", "detail"),
    [
        (200, b'{"status": "stopped", "kickoffId": "k1"}', StopOutcome.STOPPED, ""),
        (
            400,
            b'{"detail": "Cannot stop execution. Current state: SUCCESS"}',
            StopOutcome.ALREADY_FINISHED,
            "Cannot stop execution. Current state: SUCCESS",
        ),
        (405, b"", StopOutcome.NOT_SUPPORTED, "HTTP 405"),
        (404, b'{"detail": "Not Found"}', StopOutcome.NOT_SUPPORTED, "HTTP 404"),  # no such route
        (404, b'{"detail": "Execution not found"}', StopOutcome.UNKNOWN, "HTTP 404: Execution not found"),
        (502, b"bad gateway", StopOutcome.UNKNOWN, "HTTP 502: bad gateway"),
        (500, b"", StopOutcome.UNKNOWN, "HTTP 500: no error message"),
    ],
)
def test_a_stop_answer_says_what_happened(status_code, body, outcome, detail):
    assert StopResult.from_answer(status_code, body) == StopResult(outcome=outcome, detail=detail)
