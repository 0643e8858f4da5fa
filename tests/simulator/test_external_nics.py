"""External NICs: attach answers only {success}; the NIC is found by listing, by address."""

from __future__ import annotations

from typing import Any

from tests.simulator.support import CUSTOMER, NL, NL_NETWORK, Api
from tests.whitesky_sim import WhiteskySimulator


def _attach(api: Api, vm_id: int, **params: Any) -> Any:
    params.setdefault("external_network_id", NL_NETWORK)
    return api.post(f"{api.vm_path(vm_id)}/external-nics", **params)


def _nics(api: Api, vm_id: int) -> list[dict[str, Any]]:
    response = api.get(f"{api.vm_path(vm_id)}/external-nics")
    assert response.status_code == 200, response.text
    return list(response.json()["result"])


def _free(api: Api) -> list[str]:
    path = f"/customers/{CUSTOMER}/locations/{NL}/external-networks/{NL_NETWORK}/ip-addresses"
    response = api.get(path)
    assert response.status_code == 200, response.text
    return list(response.json()["ip_addresses"])


def test_attach_answers_only_success_and_the_nic_is_found_by_listing(api: Api) -> None:
    vm_id = api.created_vm()

    response = _attach(api, vm_id, model="virtio", external_network_type="external")

    assert response.status_code == 200
    assert response.json() == {"success": True}
    (nic,) = _nics(api, vm_id)
    assert nic["network_id"] == NL_NETWORK
    assert nic["nic_type"] == "EXTERNAL"
    assert nic["model"] == "virtio"


def test_attach_takes_the_next_free_address_listed_with_a_prefix_suffix(api: Api) -> None:
    vm_id = api.created_vm()
    first_free = _free(api)[0]

    _attach(api, vm_id)
    _attach(api, vm_id)

    addresses = [nic["ip_address"] for nic in _nics(api, vm_id)]
    assert addresses[0] == f"{first_free}/24"
    assert addresses[0].startswith("10.50.0.")
    assert addresses[1] == f"{_free_after(first_free)}/24"
    assert first_free not in _free(api)


def _free_after(address: str) -> str:
    head, last = address.rsplit(".", 1)
    return f"{head}.{int(last) + 1}"


def test_macs_are_unique_and_deterministic_across_resets(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    def macs(client: Api) -> list[str]:
        vm_ids = [client.created_vm(f"vm{n}") for n in range(2)]
        for vm_id in vm_ids:
            _attach(client, vm_id)
            _attach(client, vm_id)
        return [nic["mac_address"] for vm_id in vm_ids for nic in _nics(client, vm_id)]

    first = macs(api)
    whitesky_sim.reset()
    again = macs(Api(whitesky_sim))

    assert len(set(first)) == 4
    assert first == again


def test_the_nic_is_addressed_by_its_ip_without_the_suffix(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    address = _nics(api, vm_id)[0]["ip_address"].split("/")[0]

    response = api.get(f"{api.vm_path(vm_id)}/external-nics/{address}")

    assert response.status_code == 200
    assert response.json()["ip_address"] == f"{address}/24"


def test_an_address_with_its_prefix_suffix_in_the_path_is_an_unknown_path(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    listed = _nics(api, vm_id)[0]["ip_address"]

    response = api.delete(
        f"{api.vm_path(vm_id)}/external-nics/{listed}",
        external_network_id=NL_NETWORK,
        external_network_type="external",
    )

    assert response.status_code == 404


def test_detach_by_address_frees_the_address(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    address = _nics(api, vm_id)[0]["ip_address"].split("/")[0]
    assert address not in _free(api)

    response = api.delete(
        f"{api.vm_path(vm_id)}/external-nics/{address}",
        external_network_id=NL_NETWORK,
        external_network_type="external",
    )

    assert response.status_code == 200, response.text
    assert _nics(api, vm_id) == []
    assert address in _free(api)


def test_detach_requires_external_network_id_and_type_and_names_the_missing_one(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    address = _nics(api, vm_id)[0]["ip_address"].split("/")[0]
    path = f"{api.vm_path(vm_id)}/external-nics/{address}"

    no_type = api.delete(path, external_network_id=NL_NETWORK)
    no_id = api.delete(path, external_network_type="external")

    assert no_type.status_code == 400
    assert "external_network_type" in no_type.json()["message"]
    assert no_id.status_code == 400
    assert "external_network_id" in no_id.json()["message"]


def test_detach_with_the_wrong_network_is_400(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    address = _nics(api, vm_id)[0]["ip_address"].split("/")[0]

    response = api.delete(
        f"{api.vm_path(vm_id)}/external-nics/{address}",
        external_network_id=999,
        external_network_type="external",
    )

    assert response.status_code == 400


def test_attach_requires_external_network_id(api: Api) -> None:
    vm_id = api.created_vm()

    response = api.post(f"{api.vm_path(vm_id)}/external-nics")

    assert response.status_code == 400
    assert "external_network_id" in response.json()["message"]


def test_attaching_an_address_already_in_use_is_409(api: Api) -> None:
    first = api.created_vm("a")
    second = api.created_vm("b")
    _attach(api, first, external_network_ip="10.50.0.50")

    response = _attach(api, second, external_network_ip="10.50.0.50")

    assert response.status_code == 409
    assert _nics(api, first)[0]["ip_address"] == "10.50.0.50/24"


def test_attach_to_an_unknown_network_is_404(api: Api) -> None:
    vm_id = api.created_vm()

    assert _attach(api, vm_id, external_network_id=4242).status_code == 404


def test_permanently_deleting_a_vm_frees_its_addresses(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    address = _nics(api, vm_id)[0]["ip_address"].split("/")[0]

    api.delete(api.vm_path(vm_id), permanently="true")

    assert address in _free(api)


def test_a_vm_in_the_recycle_bin_keeps_its_addresses(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)
    address = _nics(api, vm_id)[0]["ip_address"].split("/")[0]

    api.delete(api.vm_path(vm_id))

    assert address not in _free(api)


def test_nics_show_in_vm_info_and_vm_list(api: Api) -> None:
    vm_id = api.created_vm()
    _attach(api, vm_id)

    info = api.vm(vm_id)["network_interfaces"]
    listed = api.get(f"/customers/{CUSTOMER}/cloudspaces/cs-demo-nl/vms").json()["result"][0]

    assert [nic["nic_type"] for nic in info] == ["INTERNAL", "EXTERNAL"]
    assert listed["network_interfaces"][1]["external_network_type"] == "external"
    assert listed["network_interfaces"][1]["mac_address"] == info[1]["mac_address"]


def test_switch_nic_ip_with_prefix_off_lists_bare_addresses(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(nic_ip_with_prefix=False)
    vm_id = api.created_vm()
    _attach(api, vm_id)

    assert "/" not in _nics(api, vm_id)[0]["ip_address"]


def test_switch_nic_attach_requires_halted_vm_refuses_attach_to_running_vm(
    whitesky_sim: WhiteskySimulator, api: Api
) -> None:
    whitesky_sim.configure(nic_attach_requires_halted_vm=True)
    vm_id = api.created_vm()

    assert _attach(api, vm_id).status_code == 409


def test_external_networks_are_listed_with_integer_ids(api: Api) -> None:
    response = api.get(f"/customers/{CUSTOMER}/locations/{NL}/external-networks")
    one = api.get(f"/customers/{CUSTOMER}/locations/{NL}/external-networks/{NL_NETWORK}")

    assert response.status_code == 200
    (network,) = response.json()["result"]
    assert network["external_network_id"] == NL_NETWORK
    assert network["network"] == "10.50.0.0"
    assert network["subnet_mask"] == "255.255.255.0"
    assert one.json() == network
