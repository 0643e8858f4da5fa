"""The agent API's OpenAPI schema says the exchange the plugin makes: ADD answers the NIC
(200) or its queued request (202 with Retry-After and `retry_after_ms`), and the poll
(GET) answers the same; what the API answers holds to it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from openapi_schema_validator import OAS30Validator
from rest_framework.test import APIClient

from sriov.agent import vm_queue_run
from tests.factories import UserFactory
from tests.sriov.support import AGENT_NICS, KEY, World, add_body

ADD = "/api/v1/sriov/agent/nics/"
NIC = "/api/v1/sriov/agent/nics/{pod_uid}/"


@pytest.fixture
def schema(db: None) -> dict[str, Any]:
    client = APIClient()
    client.force_authenticate(UserFactory(is_staff=True, is_superuser=True))
    response = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return dict(response.json())


def answer_schema(schema: dict[str, Any], path: str, method: str, status: int) -> Any:
    content = schema["paths"][path][method]["responses"][str(status)]["content"]
    return {**content["application/json"]["schema"], "components": schema["components"]}


@pytest.mark.parametrize(("path", "method"), [(ADD, "post"), (NIC, "get")])
def test_add_and_its_poll_answer_202_with_retry_after(
    schema: dict[str, Any], path: str, method: str
) -> None:
    responses = schema["paths"][path][method]["responses"]
    assert {"200", "202"} <= set(responses)
    queued = responses["202"]
    assert queued["headers"]["Retry-After"]["schema"]["type"] == "integer"
    assert queued["content"]["application/json"]["schema"]["$ref"].endswith("/Nic")
    nic = schema["components"]["schemas"]["Nic"]["properties"]
    assert nic["queue_position"]["type"] == "integer" and nic["queue_position"]["nullable"]
    assert nic["retry_after_ms"]["type"] == "integer" and nic["retry_after_ms"]["nullable"]
    assert nic["failure_code"]["type"] == "string"
    if method == "post":
        assert "Retry-After" in responses["503"]["headers"]


def test_what_the_agent_api_answers_holds_to_its_schema(
    world: World, client: Client, schema: dict[str, Any]
) -> None:
    world.pod("web")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {world.agent_token}"
    poll = f"{AGENT_NICS}{world.uid('web')}/{KEY}"
    queued = client.post(ADD, add_body(world, "web"), content_type="application/json")
    polled = client.get(poll)
    assert (queued.status_code, polled.status_code) == (202, 202)
    for answer, path, method in ((queued, ADD, "post"), (polled, NIC, "get")):
        OAS30Validator(answer_schema(schema, path, method, 202)).validate(answer.json())
        assert int(answer["Retry-After"]) >= 1
        assert answer.json()["retry_after_ms"] >= 50
    vm_queue_run(location_id=world.location.pk, vm_id=world.vm(0))
    attached = client.get(poll)
    assert attached.status_code == 200
    OAS30Validator(answer_schema(schema, NIC, "get", 200)).validate(attached.json())
    assert attached.json()["retry_after_ms"] is None
