"""Virtual machines, their statuses, and what may happen to a vGPU on them."""

from __future__ import annotations

from tests.simulator.support import CS_NL, CUSTOMER, NL_A100, Api
from tests.whitesky_sim import WhiteskySimulator


def _vms(api: Api, **params: str) -> dict[int, dict[str, object]]:
    response = api.get(f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}/vms", **params)
    assert response.status_code == 200, response.text
    return {item["vm_id"]: item for item in response.json()["result"]}


def test_vm_created_with_start_vm_false_is_halted_and_start_stop_move_it(api: Api) -> None:
    vm_id = api.created_vm(start_vm=False)
    assert api.vm(vm_id)["status"] == "HALTED"

    api.start(vm_id)
    assert api.vm(vm_id)["status"] == "RUNNING"

    api.stop(vm_id)
    assert api.vm(vm_id)["status"] == "HALTED"


def test_vm_created_without_start_vm_is_running(api: Api) -> None:
    vm_id = api.created_vm()

    assert api.vm(vm_id)["status"] == "RUNNING"


def test_vm_ids_are_deterministic_integers(whitesky_sim: WhiteskySimulator, api: Api) -> None:
    first = [api.created_vm(f"vm{n}") for n in range(2)]
    whitesky_sim.reset()
    again = [Api(whitesky_sim).created_vm(f"vm{n}") for n in range(2)]

    assert first == again == [1001, 1002]


def test_vm_list_has_integer_cloudspace_id_and_vm_info_a_string(api: Api) -> None:
    vm_id = api.created_vm()

    listed = _vms(api)[vm_id]
    info = api.vm(vm_id)

    assert isinstance(listed["cloudspace_id"], int)
    assert info["cloudspace_id"] == CS_NL


def test_vm_deleted_without_permanently_goes_to_recycle_bin_with_status_deleted(api: Api) -> None:
    vm_id = api.created_vm()

    assert api.delete(api.vm_path(vm_id)).status_code == 200

    assert vm_id not in _vms(api)
    assert _vms(api, only_deleted="true")[vm_id]["status"] == "DELETED"
    assert _vms(api, include_deleted="true")[vm_id]["status"] == "DELETED"
    assert api.vm(vm_id)["status"] == "DELETED"


def test_vm_deleted_permanently_is_gone(api: Api) -> None:
    vm_id = api.created_vm()

    assert api.delete(api.vm_path(vm_id), permanently="true").status_code == 200

    assert api.get(api.vm_path(vm_id)).status_code == 404
    assert vm_id not in _vms(api, include_deleted="true")


def test_vm_create_with_gpu_in_body_reserves_and_attaches_one_vgpu(api: Api) -> None:
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "worker-gpu"})

    vgpu = api.vgpus()["data"][0]
    assert vgpu["status"] == "ASSIGNED"
    assert vgpu["vgpu_name"] == "worker-gpu"
    assert vgpu["virtual_machine"]["id"] == vm_id
    assert vgpu["virtual_machine"]["cloudspace_id"] == CS_NL
    assert [d["reference_id"] for d in api.vm(vm_id)["devices"]] == [vgpu["vgpu_id"]]
    assert api.available() == 3


def test_vm_create_with_gpu_on_a_full_card_is_409_and_creates_no_vm(api: Api) -> None:
    for n in range(4):
        api.reserved(name=f"r{n}")

    response = api.create_vm("unlucky", body={"gpu_id": NL_A100, "vgpu_name": "g"})

    assert response.status_code == 409
    assert NL_A100 in response.json()["message"]
    assert _vms(api, include_deleted="true") == {}


def test_switch_vm_create_atomic_with_gpu_off_leaves_the_vm_behind_on_409(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(vm_create_atomic_with_gpu=False)
    for n in range(4):
        api.reserved(name=f"r{n}")

    response = api.create_vm("orphan", body={"gpu_id": NL_A100, "vgpu_name": "g"})

    assert response.status_code == 409
    assert [vm["name"] for vm in _vms(api).values()] == ["orphan"]


def test_attach_vgpu_to_running_vm_is_refused_with_409(api: Api) -> None:
    vm_id = api.created_vm()
    vgpu_id = api.reserved()

    response = api.attach(vm_id, vgpu_id)

    assert response.status_code == 409
    assert "RUNNING" in response.json()["message"]
    assert api.vgpu(vgpu_id)["status"] == "RESERVED"


def test_reserve_and_attach_on_running_vm_is_refused_and_reserves_nothing(api: Api) -> None:
    vm_id = api.created_vm()

    response = api.post(f"{api.vm_path(vm_id)}/gpus/{NL_A100}", {"vgpu_name": "g"})

    assert response.status_code == 409
    assert api.available() == 4
    assert api.vgpus()["pagination"]["count"] == 0


def test_reserve_and_attach_on_halted_vm_assigns_the_new_vgpu(api: Api) -> None:
    vm_id = api.created_vm(start_vm=False)

    response = api.post(f"{api.vm_path(vm_id)}/gpus/{NL_A100}", {"vgpu_name": "g"})

    assert response.status_code == 200, response.text
    vgpu = api.vgpu(response.json()["vgpu_id"])
    assert vgpu["status"] == "ASSIGNED"
    assert vgpu["virtual_machine"]["id"] == vm_id


def test_switch_vgpu_attach_requires_halted_vm_off_allows_attach_to_running_vm(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(vgpu_attach_requires_halted_vm=False)
    vm_id = api.created_vm()
    vgpu_id = api.reserved()

    assert api.attach(vm_id, vgpu_id).status_code == 200


def test_attach_then_detach_on_halted_vm_moves_status_assigned_then_reserved(api: Api) -> None:
    vm_id = api.created_vm(start_vm=False)
    vgpu_id = api.reserved()

    assert api.attach(vm_id, vgpu_id).status_code == 200
    assert api.vgpu(vgpu_id)["status"] == "ASSIGNED"
    assert api.detach(vm_id, vgpu_id).status_code == 200
    assert api.vgpu(vgpu_id)["status"] == "RESERVED"
    assert api.vm(vm_id)["devices"] == []
    assert api.available() == 3, "detached is still reserved"


def test_detach_vgpu_from_running_vm_is_refused_with_409(api: Api) -> None:
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})
    vgpu_id = api.vgpus()["data"][0]["vgpu_id"]

    response = api.detach(vm_id, vgpu_id)

    assert response.status_code == 409
    assert "RUNNING" in response.json()["message"]
    assert api.vgpu(vgpu_id)["status"] == "ASSIGNED"


def test_attaching_a_vgpu_held_by_another_vm_is_409(api: Api) -> None:
    first = api.created_vm("a", start_vm=False)
    second = api.created_vm("b", start_vm=False)
    vgpu_id = api.reserved()
    api.attach(first, vgpu_id)

    assert api.attach(second, vgpu_id).status_code == 409


def test_deleting_running_vm_holding_vgpu_is_refused_even_with_detach_gpu(api: Api) -> None:
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})

    for permanently in ("false", "true"):
        response = api.delete(api.vm_path(vm_id), detach_gpu="true", permanently=permanently)
        assert response.status_code == 409
        assert "RUNNING" in response.json()["message"]
    assert api.vm(vm_id)["status"] == "RUNNING"


def test_deleting_halted_vm_holding_vgpu_without_detach_gpu_is_refused(api: Api) -> None:
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})
    api.stop(vm_id)

    response = api.delete(api.vm_path(vm_id))

    assert response.status_code == 409
    assert "detach_gpu" in response.json()["message"]


def test_running_vm_without_vgpu_can_be_deleted(api: Api) -> None:
    vm_id = api.created_vm()

    assert api.delete(api.vm_path(vm_id), permanently="true").status_code == 200


def test_vm_deleted_to_recycle_bin_leaves_its_vgpus_reserved_and_held(api: Api) -> None:
    """Teardown order: stop, delete the VM, then release; until then the vGPU is billed."""
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})
    vgpu_id = api.vgpus()["data"][0]["vgpu_id"]
    api.stop(vm_id)

    response = api.delete(api.vm_path(vm_id), detach_gpu="true")

    assert response.status_code == 200, response.text
    assert api.vm(vm_id)["status"] == "DELETED"
    assert api.vgpu(vgpu_id)["status"] == "RESERVED"
    assert api.available() == 3
    assert api.delete_vgpu(vgpu_id, permanently="true").status_code == 200
    assert api.available() == 4


def test_switch_vm_delete_requires_detach_gpu_off_keeps_vgpu_assigned_in_recycle_bin(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(vm_delete_requires_detach_gpu=False)
    vm_id = api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})
    vgpu_id = api.vgpus()["data"][0]["vgpu_id"]
    api.stop(vm_id)

    assert api.delete(api.vm_path(vm_id)).status_code == 200

    assert api.vgpu(vgpu_id)["status"] == "ASSIGNED"
    assert api.vgpu(vgpu_id)["virtual_machine"]["id"] == vm_id
    assert api.available() == 2 + 1


def test_deleting_an_attached_vgpu_with_detach_false_is_refused(api: Api) -> None:
    vm_id = api.created_vm(start_vm=False)
    vgpu_id = api.reserved()
    api.attach(vm_id, vgpu_id)

    response = api.delete_vgpu(vgpu_id, detach="false")

    assert response.status_code == 409
    assert str(vm_id) in response.json()["message"]


def test_deleting_an_attached_vgpu_detaches_it_first_by_default(api: Api) -> None:
    vm_id = api.created_vm(start_vm=False)
    vgpu_id = api.reserved()
    api.attach(vm_id, vgpu_id)

    assert api.delete_vgpu(vgpu_id, permanently="true").status_code == 200

    assert api.vm(vm_id)["devices"] == []
    assert api.available() == 4


def test_deleting_a_vgpu_attached_to_a_running_vm_is_refused(api: Api) -> None:
    api.created_vm(body={"gpu_id": NL_A100, "vgpu_name": "g"})
    vgpu_id = api.vgpus()["data"][0]["vgpu_id"]

    assert api.delete_vgpu(vgpu_id, permanently="true").status_code == 409


def test_start_and_stop_are_idempotent_by_default(api: Api) -> None:
    vm_id = api.created_vm()

    assert api.post(f"{api.vm_path(vm_id)}/start").status_code == 200
    api.stop(vm_id)
    assert api.post(f"{api.vm_path(vm_id)}/stop", force="true").status_code == 200


def test_switch_power_actions_idempotent_off_refuses_start_of_running_vm(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(power_actions_idempotent=False)
    vm_id = api.created_vm()

    assert api.post(f"{api.vm_path(vm_id)}/start").status_code == 409


def test_starting_a_deleted_vm_is_409(api: Api) -> None:
    vm_id = api.created_vm()
    api.delete(api.vm_path(vm_id))

    assert api.post(f"{api.vm_path(vm_id)}/start").status_code == 409


def test_vm_create_missing_required_query_parameter_is_400_naming_it(api: Api) -> None:
    response = api.post(
        f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}/vms", name="x", description="d", memory=4096
    )

    assert response.status_code == 400
    assert "vcpus" in response.json()["message"]


def test_vm_create_with_a_non_integer_memory_is_400_naming_it(api: Api) -> None:
    response = api.post(
        f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}/vms",
        name="x",
        description="d",
        vcpus=2,
        memory="lots",
        image_id=11,
    )

    assert response.status_code == 400
    assert "memory" in response.json()["message"]


def test_vm_create_with_an_image_of_another_location_is_404(api: Api) -> None:
    response = api.post(
        f"/customers/{CUSTOMER}/cloudspaces/{CS_NL}/vms",
        name="x",
        description="d",
        vcpus=2,
        memory=4096,
        image_id=21,
    )

    assert response.status_code == 404
