"""GPU profiles are physical cards; capacity is per card and first come, first served."""

from __future__ import annotations

import re
import threading

import requests

from tests.simulator.support import BE, CUSTOMER, NL, NL_A100, Api
from tests.whitesky_sim import WhiteskySimulator

PROFILE_MODEL = re.compile(r"^(A100|L40S|T4) [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def test_one_gpu_profile_per_physical_card_with_pci_address_in_model(api: Api) -> None:
    nl = api.profiles(NL)
    be = api.profiles(BE)

    assert len(nl) == 4 + 2 and len(be) == 2 + 4
    for profile in [*nl.values(), *be.values()]:
        assert PROFILE_MODEL.match(profile["model"]), profile
        assert profile["vendor"] == "NVIDIA"
    assert sorted(p["model"].split()[0] for p in nl.values()) == ["A100"] * 4 + ["L40S"] * 2
    assert sorted(p["model"].split()[0] for p in be.values()) == ["A100"] * 2 + ["T4"] * 4
    assert len({p["model"] for p in nl.values()}) == 6, "one PCI address per card"
    assert nl[NL_A100]["model"] == "A100 0000:3b:00.0"


def test_instances_per_card_are_the_capacity_of_each_profile(api: Api) -> None:
    capacity = {p["model"].split()[0]: p["available_instances"] for p in api.profiles(BE).values()}

    assert capacity == {"A100": 4, "T4": 2}


def test_profile_ids_and_pci_addresses_are_deterministic_across_resets(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    before = api.profiles(NL)
    whitesky_sim.reset()

    assert Api(whitesky_sim).profiles(NL) == before


def test_available_instances_fall_on_reserve_and_rise_on_permanent_release(api: Api) -> None:
    first = api.reserved(name="a")
    api.reserved(name="b")
    assert api.available() == 2

    response = api.delete_vgpu(first, permanently="true")

    assert response.status_code == 200, response.text
    assert api.available() == 3


def test_non_permanent_delete_keeps_the_instance_so_the_vgpu_can_be_restored(api: Api) -> None:
    vgpu_id = api.reserved()

    assert api.delete_vgpu(vgpu_id).status_code == 200
    assert api.available() == 3
    assert api.vgpu(vgpu_id)["status"] == "DELETED"
    assert api.vgpu(vgpu_id)["deletion_time"] > 0

    restored = api.post(f"/customers/{CUSTOMER}/locations/{NL}/vgpus/{vgpu_id}")

    assert restored.status_code == 200, restored.text
    assert api.vgpu(vgpu_id)["status"] == "RESERVED"
    assert api.vgpu(vgpu_id)["deletion_time"] == 0
    assert api.available() == 3


def test_switch_deleted_vgpu_keeps_instance_off_frees_it_and_restore_retakes_it(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(deleted_vgpu_keeps_instance=False)
    vgpu_id = api.reserved()

    api.delete_vgpu(vgpu_id)
    assert api.available() == 4
    api.post(f"/customers/{CUSTOMER}/locations/{NL}/vgpus/{vgpu_id}")
    assert api.available() == 3


def test_permanently_deleted_vgpu_disappears_and_cannot_be_restored(api: Api) -> None:
    vgpu_id = api.reserved()
    api.delete_vgpu(vgpu_id, permanently="true")

    listing = api.vgpus(limit=0, include_deleted="true")
    restored = api.post(f"/customers/{CUSTOMER}/locations/{NL}/vgpus/{vgpu_id}")

    assert vgpu_id not in {item["vgpu_id"] for item in listing["data"]}
    assert restored.status_code == 404


def test_last_free_instance_goes_to_first_caller_second_gets_409_naming_card(api: Api) -> None:
    for n in range(3):
        api.reserved(name=f"filler-{n}")
    barrier = threading.Barrier(2)
    results: list[requests.Response] = []
    lock = threading.Lock()

    def race(name: str) -> None:
        client = Api(api.sim)
        barrier.wait()
        response = client.reserve(name=name)
        with lock:
            results.append(response)

    threads = [threading.Thread(target=race, args=(f"racer-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(r.status_code for r in results) == [200, 409]
    loser = next(r for r in results if r.status_code == 409)
    assert NL_A100 in loser.json()["message"]
    assert "A100 0000:3b:00.0" in loser.json()["message"]
    assert api.available() == 0


def test_reserving_on_a_full_card_is_409_and_changes_nothing(api: Api) -> None:
    for n in range(4):
        api.reserved(name=f"r{n}")

    response = api.reserve(name="one-too-many")

    assert response.status_code == 409
    assert api.vgpus(limit=0)["pagination"]["count"] == 4


def test_platform_does_not_stop_two_reservations_with_the_same_name(api: Api) -> None:
    first = api.reserved(name="worker-0-gpu")
    second = api.reserved(name="worker-0-gpu")

    names = [item["vgpu_name"] for item in api.vgpus()["data"]]
    assert first != second
    assert names == ["worker-0-gpu", "worker-0-gpu"]


def test_switch_vgpu_names_unique_refuses_a_second_reservation_with_the_same_name(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(vgpu_names_unique=True)
    api.reserved(name="worker-0-gpu")

    response = api.reserve(name="worker-0-gpu")

    assert response.status_code == 409
    assert "worker-0-gpu" in response.json()["message"]


def test_reserving_an_unknown_profile_is_404(api: Api) -> None:
    response = api.reserve(gpu_id="no-such-card")

    assert response.status_code == 404
    assert "no-such-card" in response.json()["message"]


def test_a_profile_of_another_location_is_unknown_here(api: Api) -> None:
    be_card = next(iter(api.profiles(BE)))

    assert api.reserve(gpu_id=be_card, location=NL).status_code == 404


def test_reserve_without_vgpu_name_is_400_naming_it(api: Api) -> None:
    response = api.post(f"/customers/{CUSTOMER}/locations/{NL}/gpus/{NL_A100}", {})

    assert response.status_code == 400
    assert "vgpu_name" in response.json()["message"]


def test_reserved_vgpu_is_listed_as_reserved_with_an_empty_virtual_machine(api: Api) -> None:
    vgpu_id = api.reserved(name="spare")

    item = api.vgpu(vgpu_id)

    assert item["status"] == "RESERVED"
    assert item["gpu_id"] == NL_A100
    assert item["customer_id"] == CUSTOMER
    assert item["virtual_machine"] == {
        "id": 0,
        "name": "",
        "cloudspace_id": "",
        "cloudspace_name": "",
    }


def test_switch_unassigned_vgpu_vm_null_answers_null_virtual_machine(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(unassigned_vgpu_vm_null=True)
    vgpu_id = api.reserved()

    assert api.vgpu(vgpu_id)["virtual_machine"] is None
