"""The request and answer models of docs/contract.md: inputs, kickoff, resume and error bodies.

The status record is tests/test_status.py."""

from __future__ import annotations

import pytest

from airflow_provider_crew.models import (
    KickoffRequest,
    ResumeResult,
    ResumeStatus,
    ServiceError,
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
