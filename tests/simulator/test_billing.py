"""A reservation is billed in vGPU-hours on the simulated clock, attached or not."""

from __future__ import annotations

import pytest

from tests.simulator.support import CUSTOMER, NL, NL_A100, Api
from tests.whitesky_sim import WhiteskySimulator

HOUR = 3600


def _unassigned(consumption: dict[str, object]) -> dict[str, float]:
    rows = consumption["unassigned_vgpus"]
    assert isinstance(rows, list)
    return {row["vgpu_id"]: row["consumption"]["vgu"] for row in rows}


def _vm_vgu(consumption: dict[str, object], vm_id: int) -> float:
    cloudspaces = consumption["cloudspaces"]
    assert isinstance(cloudspaces, list)
    for cloudspace in cloudspaces:
        for vm in cloudspace["vms"]:
            if vm["vm_id"] == vm_id:
                return float(vm["consumption"]["vgu"])
    return 0.0


def test_unassigned_reservation_accrues_vgu_hours_on_the_simulated_clock(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    start = whitesky_sim.advance(0)
    vgpu_id = api.reserved()

    end = whitesky_sim.advance(2 * HOUR)
    consumption = api.consumption(start, end + 1)

    assert _unassigned(consumption)[vgpu_id] == pytest.approx(2.0, abs=0.01)
    assert consumption["consumption"]["vgu"] == pytest.approx(2.0, abs=0.01)


def test_advancing_the_clock_changes_consumption(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    start = whitesky_sim.advance(0)
    api.reserved()
    before = api.consumption(start, start + 10 * HOUR)["consumption"]["vgu"]

    whitesky_sim.advance(5 * HOUR)
    after = api.consumption(start, start + 10 * HOUR)["consumption"]["vgu"]

    assert before == pytest.approx(0.0, abs=0.01)
    assert after == pytest.approx(5.0, abs=0.01)


def test_attached_reservation_is_billed_under_its_vm_not_as_unassigned(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    start = whitesky_sim.advance(0)
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})

    end = whitesky_sim.advance(3 * HOUR)
    consumption = api.consumption(start, end + 1)

    assert _unassigned(consumption) == {}
    assert _vm_vgu(consumption, vm_id) == pytest.approx(3.0, abs=0.01)
    assert consumption["consumption"]["vgu"] == pytest.approx(3.0, abs=0.01)


def test_detaching_does_not_stop_the_charge_only_makes_it_unassigned(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    start = whitesky_sim.advance(0)
    vm_id = api.created_vm(start_vm=False)
    vgpu_id = api.reserved()
    api.attach(vm_id, vgpu_id)
    whitesky_sim.advance(HOUR)
    api.detach(vm_id, vgpu_id)

    end = whitesky_sim.advance(2 * HOUR)
    consumption = api.consumption(start, end + 1)

    assert _vm_vgu(consumption, vm_id) == pytest.approx(1.0, abs=0.01)
    assert _unassigned(consumption)[vgpu_id] == pytest.approx(2.0, abs=0.01)


def test_permanent_release_stops_the_charge(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    start = whitesky_sim.advance(0)
    vgpu_id = api.reserved()
    whitesky_sim.advance(HOUR)
    api.delete_vgpu(vgpu_id, permanently="true")

    end = whitesky_sim.advance(5 * HOUR)

    assert _unassigned(api.consumption(start, end + 1))[vgpu_id] == pytest.approx(1.0, abs=0.01)


def test_vgpu_deleted_without_permanently_is_still_billed(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    start = whitesky_sim.advance(0)
    vgpu_id = api.reserved()
    api.delete_vgpu(vgpu_id)

    end = whitesky_sim.advance(2 * HOUR)

    assert _unassigned(api.consumption(start, end + 1))[vgpu_id] == pytest.approx(2.0, abs=0.01)


def test_switch_deleted_vgpu_billed_off_stops_the_charge_at_soft_delete(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(deleted_vgpu_billed=False)
    start = whitesky_sim.advance(0)
    vgpu_id = api.reserved()
    whitesky_sim.advance(HOUR)
    api.delete_vgpu(vgpu_id)

    end = whitesky_sim.advance(2 * HOUR)

    assert _unassigned(api.consumption(start, end + 1))[vgpu_id] == pytest.approx(1.0, abs=0.01)


def test_vgpus_of_a_vm_in_the_recycle_bin_stay_billed(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})
    vgpu_id = api.vgpus()["data"][0]["vgpu_id"]
    api.stop(vm_id)
    api.delete(api.vm_path(vm_id), detach_gpu="true")
    start = whitesky_sim.advance(0)

    end = whitesky_sim.advance(4 * HOUR)

    assert _unassigned(api.consumption(start, end))[vgpu_id] == pytest.approx(4.0, abs=0.01)


def test_a_window_before_the_reservation_bills_nothing(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    now = whitesky_sim.advance(0)
    api.reserved()

    consumption = api.consumption(now - 10 * HOUR, now - 5 * HOUR)

    assert consumption["unassigned_vgpus"] == []
    assert consumption["consumption"]["vgu"] == 0.0


def test_consumption_requires_start_and_end_and_names_the_missing_one(api: Api) -> None:
    response = api.get(f"/customers/{CUSTOMER}/locations/{NL}/consumption", start=0)

    assert response.status_code == 400
    assert "end" in response.json()["message"]


def test_consumption_has_every_unit_of_the_model(api: Api) -> None:
    consumption = api.consumption(0, 1)

    assert set(consumption["consumption"]) == {
        "ou", "su", "tu", "nu", "vcu", "mu", "piu", "wu", "vgu", "fsu"
    }  # fmt: skip
    assert set(consumption) >= {"name", "cloudspaces", "unassigned_vgpus", "unassigned_disks"}


def test_prices_per_location_include_vgu_per_unit_and_month(api: Api) -> None:
    response = api.get(f"/customers/{CUSTOMER}/locations")

    assert response.status_code == 200
    body = response.json()
    assert body["currency"] == "EUR"
    prices = {row["location"]: row["resources"] for row in body["locations"]}
    assert set(prices) == {"nl-rmd-dc01-001", "be-mac-dc01-001"}
    assert prices[NL]["vgu"] > 0
    assert set(prices[NL]) == {"su", "ou", "mu", "vcu", "tu", "wu", "nu", "piu", "vgu", "fsu"}
