"""The simulator answers what the real whitesky description (whitesky-api.json) says.

Schemathesis generates valid requests (positive mode) for the operations the project uses
and checks every answer against the description's response schema. Path parameters are
pinned to objects that exist, so the answers are the interesting (successful) ones; query
parameters, bodies and the optional X-Fields header are generated.

Narrow departures from the description, each for a reason:

* ``Datacenter.coordinates`` is declared an object; the live API answers a ``[lat, long]``
  array (API-NOTES.md, section 4), and so does the simulator. The test validates against
  an array there.
* ``status_code_conformance`` is not checked: the description documents almost no error
  statuses (no 400/404/409 on most operations), while the live API answers them. The test
  asserts the statuses itself instead: 200 for every generated request, except 400 where
  the generated input is invalid in a way the description cannot express (a negative
  ``limit`` or ``start_after``; a consumption window that ends before it starts).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.simulator.support import CS_NL, CUSTOMER, NL, NL_A100, NL_NETWORK, Api
from tests.whitesky_sim import WhiteskySimulator

SPEC = Path(__file__).resolve().parents[2] / ".." / "shared" / "whitesky" / "whitesky-api.json"
MAX_EXAMPLES = 15

READS = [
    "getCurrentUserInfo",
    "listLocations",
    "listCustomerLocations",
    "listCloudspaces",
    "getCloudspaceInfo",
    "listCloudspaceVirtualMachines",
    "getVirtualMachineInfo",
    "listExternalNetworksVirtualMachine",
    "getExternalNetworksVirtualMachine",
    "listExternalNetworks",
    "getExternalNetwork",
    "getExternalNetworkAddresses",
    "listCustomerImages",
    "listAvailableGPUProfiles",
    "listCustomerVGPUS",
    "getCustomerConsumption",
]
# Writes whose generated inputs (a name, a flag) are all acceptable on the pinned objects.
WRITES = ["reserveVGPU", "reserveAndAttachVGPUToVM", "startVirtualMachine", "stopVirtualMachine"]
# Generated input the description allows but the API refuses with 400.
MAY_REFUSE = {"listCustomerVGPUS", "getCustomerConsumption"}


def _description() -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(SPEC.read_text())
    coordinates = spec["definitions"]["Datacenter"]["properties"]
    coordinates["coordinates"] = {"type": "array", "items": {"type": "number"}}
    return spec


@cache
def _schema() -> Any:
    """The description's operations the project uses, read when a test first runs (not when
    the suite is collected: 600 kB of JSON, and schemathesis' imports)."""
    import schemathesis

    return schemathesis.openapi.from_dict(_description()).include(operation_id=READS + WRITES)


def _prepare_world(sim: WhiteskySimulator) -> dict[str, str]:
    """A halted VM with a NIC and a vGPU, plus one unassigned reservation; its names."""
    sim.reset()
    api = Api(sim)
    vm_id = api.created_vm("contract-vm", start_vm=False)
    api.post(f"{api.vm_path(vm_id)}/external-nics", external_network_id=NL_NETWORK)
    nic = api.get(f"{api.vm_path(vm_id)}/external-nics").json()["result"][0]
    api.attach(vm_id, api.reserved(name="attached"))
    api.reserved(name="spare")
    return {
        "customer_id": CUSTOMER,
        "location": NL,
        "cloudspace_id": CS_NL,
        "vm_id": str(vm_id),
        "external_ip_address": nic["ip_address"].split("/")[0],
        "external_network_id": str(NL_NETWORK),
        "gpu_id": NL_A100,
    }


@pytest.mark.parametrize("operation_id", READS + WRITES)
def test_answers_conform_to_the_whitesky_description(
    operation_id: str, whitesky_sim: WhiteskySimulator
) -> None:
    from schemathesis import Case, GenerationMode
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
    )

    operation = _schema().find_operation_by_id(operation_id)

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def conforms(case: Case) -> None:
        pinned = _prepare_world(whitesky_sim)
        for name in list(case.path_parameters or {}):
            case.path_parameters[name] = pinned[name]  # type: ignore[index]

        response = case.call(
            base_url=whitesky_sim.api_url,
            headers={"Authorization": f"Bearer {whitesky_sim.token()}"},
        )

        allowed = {200, 400} if operation_id in MAY_REFUSE else {200}
        assert response.status_code in allowed, (response.status_code, response.text)
        case.validate_response(
            response,
            checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        )

    conforms()
