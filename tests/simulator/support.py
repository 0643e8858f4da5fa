"""Helpers for the simulator's tests: names from the demo world and a thin API client."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:
    # Imported by the plugin mechanism, not here: an early import would dodge pytest's
    # assertion rewriting of the plugin.
    from tests.whitesky_sim import WhiteskySimulator


NL = "nl-rmd-dc01-001"
BE = "be-mac-dc01-001"
CS_NL = "cs-demo-nl"
CS_BE = "cs-demo-be"
CUSTOMER = "cust-demo"
NL_A100 = "nl-rmd-dc01-001-0000-3b-00-0"  # the second A100 card in the demo world
NL_IMAGE = 11
NL_NETWORK = 101
DEMO_WORLD = Path(__file__).resolve().parents[2] / "simulator" / "whitesky" / "worlds" / "demo.json"


def demo_world() -> dict[str, Any]:
    """The demo world as a dict, to adapt for one test."""
    return copy.deepcopy(json.loads(DEMO_WORLD.read_text()))


class Api:
    """A thin authenticated client for /api/1; tests read the raw responses."""

    def __init__(self, sim: WhiteskySimulator) -> None:
        self.sim = sim
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {sim.token()}"

    def url(self, path: str) -> str:
        return f"{self.sim.api_url}{path}"

    def get(self, path: str, **params: Any) -> requests.Response:
        return self.session.get(self.url(path), params=params, timeout=10)

    def post(self, path: str, body: Any = None, **params: Any) -> requests.Response:
        return self.session.post(self.url(path), params=params, json=body, timeout=10)

    def delete(self, path: str, **params: Any) -> requests.Response:
        return self.session.delete(self.url(path), params=params, timeout=10)

    # ---- the calls most tests make -----------------------------------------------------

    def profiles(self, location: str = NL) -> dict[str, dict[str, Any]]:
        response = self.get(f"/customers/{CUSTOMER}/locations/{location}/gpus")
        assert response.status_code == 200, response.text
        return {profile["id"]: profile for profile in response.json()["result"]}

    def available(self, gpu_id: str = NL_A100, location: str = NL) -> int:
        return int(self.profiles(location)[gpu_id]["available_instances"])

    def reserve(
        self, gpu_id: str = NL_A100, name: str = "vgpu", location: str = NL
    ) -> requests.Response:
        return self.post(
            f"/customers/{CUSTOMER}/locations/{location}/gpus/{gpu_id}", {"vgpu_name": name}
        )

    def reserved(self, gpu_id: str = NL_A100, name: str = "vgpu", location: str = NL) -> str:
        response = self.reserve(gpu_id, name, location)
        assert response.status_code == 200, response.text
        return str(response.json()["vgpu_id"])

    def vgpus(self, location: str = NL, **params: Any) -> dict[str, Any]:
        response = self.get(f"/customers/{CUSTOMER}/locations/{location}/vgpus", **params)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def vgpu(self, vgpu_id: str, location: str = NL) -> dict[str, Any]:
        data = self.vgpus(location, limit=0, include_deleted="true")["data"]
        return next(item for item in data if item["vgpu_id"] == vgpu_id)

    def create_vm(
        self, name: str = "vm", *, start_vm: bool = True, cloudspace: str = CS_NL, body: Any = None
    ) -> requests.Response:
        return self.post(
            f"/customers/{CUSTOMER}/cloudspaces/{cloudspace}/vms",
            body,
            name=name,
            description="test vm",
            vcpus=2,
            memory=4096,
            image_id=NL_IMAGE if cloudspace == CS_NL else 21,
            disk_size=20,
            start_vm=str(start_vm).lower(),
        )

    def created_vm(self, name: str = "vm", *, start_vm: bool = True, body: Any = None) -> int:
        response = self.create_vm(name, start_vm=start_vm, body=body)
        assert response.status_code == 200, response.text
        return int(response.json()["vm_id"])

    def vm_path(self, vm_id: int, cloudspace: str = CS_NL) -> str:
        return f"/customers/{CUSTOMER}/cloudspaces/{cloudspace}/vms/{vm_id}"

    def vm(self, vm_id: int) -> dict[str, Any]:
        response = self.get(self.vm_path(vm_id))
        assert response.status_code == 200, response.text
        return dict(response.json())

    def stop(self, vm_id: int) -> None:
        response = self.post(f"{self.vm_path(vm_id)}/stop")
        assert response.status_code == 200, response.text

    def start(self, vm_id: int) -> None:
        response = self.post(f"{self.vm_path(vm_id)}/start")
        assert response.status_code == 200, response.text

    def attach(self, vm_id: int, vgpu_id: str) -> requests.Response:
        return self.post(f"{self.vm_path(vm_id)}/vgpus/{vgpu_id}")

    def detach(self, vm_id: int, vgpu_id: str) -> requests.Response:
        return self.delete(f"{self.vm_path(vm_id)}/vgpus/{vgpu_id}")

    def delete_vgpu(self, vgpu_id: str, location: str = NL, **params: Any) -> requests.Response:
        return self.delete(f"/customers/{CUSTOMER}/locations/{location}/vgpus/{vgpu_id}", **params)

    def consumption(self, start: float, end: float, location: str = NL) -> dict[str, Any]:
        response = self.get(
            f"/customers/{CUSTOMER}/locations/{location}/consumption",
            start=int(start),
            end=int(end),
        )
        assert response.status_code == 200, response.text
        return dict(response.json())
