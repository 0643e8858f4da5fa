"""WhiteskyClient: the typed calls to the whitesky VCO API (`/api/1`) for one customer
account, one method per operation of `operations.py` (checked against the Swagger
description). What each call sends, and how its answer is read (`payloads.py`); how it is
sent, tried again and failed is the transport's (`transport.py`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any, Unpack

from . import operations as ops
from .errors import IncompleteListing, UnexpectedResponse, WhiteskyError
from .hosts import AllowedHosts
from .payloads import (
    free_ips,
    id_field,
    int_field,
    listing_of,
    parse_cloudspace,
    parse_consumption,
    parse_current_user,
    parse_customer_locations,
    parse_external_network,
    parse_gpu_profile,
    parse_image,
    parse_location,
    parse_vm,
    parse_vm_nic,
    payload_read,
    split_ip,
    vgpu_page,
)
from .transport import Transport, TransportOptions
from .types import (
    Cloudspace,
    Consumption,
    CurrentUser,
    CustomerLocation,
    ExternalNetwork,
    GpuProfile,
    Image,
    Listing,
    Location,
    Vgpu,
    Vm,
    VmNic,
)

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 500


def new_nic(
    after: list[VmNic],
    *,
    before: Collection[str],
    owned: Collection[str] = (),
    network_id: int | None = None,
    ip: str | None = None,
) -> VmNic | None:
    """The NIC an attach made: the one NIC of the listing `after` whose MAC the listing
    `before` did not hold and nobody else owns (`owned`), on `network_id` (and with `ip`)
    when given; None: the attach made none. Two or more cannot be told apart
    (UnexpectedResponse): attaches to one VM must be serialised. The one place that
    decides which NIC is new."""
    seen = {mac.lower() for mac in before} | {mac.lower() for mac in owned}
    new = [
        nic
        for nic in after
        if nic.mac.lower() not in seen
        and (network_id is None or nic.network_id == network_id)
        and (ip is None or nic.ip == ip)
    ]
    if len(new) > 1:
        raise UnexpectedResponse(
            f"{len(new)} new NICs after one attach; attaches to a VM must be serialised",
            operation=ops.ATTACH_EXTERNAL_NIC.operation_id,
        )
    return new[0] if new else None


class WhiteskyClient(Transport):
    """One customer account on one VCO: its operations, typed. The connection's settings
    are the transport's (`Transport`); `page_size` is how many vGPUs a listing page asks for.
    """

    def __init__(
        self,
        *,
        api_url: str,
        customer_id: str,
        token: str,
        allowed_hosts: AllowedHosts,
        page_size: int = DEFAULT_PAGE_SIZE,
        **options: Unpack[TransportOptions],
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1 (0 would ask for everything at once)")
        super().__init__(
            api_url=api_url,
            customer_id=customer_id,
            token=token,
            allowed_hosts=allowed_hosts,
            **options,
        )
        self.page_size = page_size

    def __repr__(self) -> str:
        return f"WhiteskyClient(api_url={self.api_url!r}, customer_id={self.customer_id!r})"

    # --- account and locations ------------------------------------------------------------

    def current_user(self) -> CurrentUser:
        payload = self._call(ops.CURRENT_USER)
        return payload_read(ops.CURRENT_USER, parse_current_user, payload)

    def list_locations(self) -> list[Location]:
        payload = self._call(ops.LIST_LOCATIONS)
        return payload_read(ops.LIST_LOCATIONS, listing_of(parse_location), payload)

    def list_customer_locations(self) -> list[CustomerLocation]:
        payload = self._call(ops.LIST_CUSTOMER_LOCATIONS)
        return payload_read(ops.LIST_CUSTOMER_LOCATIONS, parse_customer_locations, payload)

    # --- cloudspaces ----------------------------------------------------------------------

    def list_cloudspaces(
        self, *, locations: list[str] | None = None, include_deleted: bool = False
    ) -> list[Cloudspace]:
        payload = self._call(
            ops.LIST_CLOUDSPACES,
            query={"locations": locations or None, "include_deleted": include_deleted},
        )
        return payload_read(ops.LIST_CLOUDSPACES, listing_of(parse_cloudspace), payload)

    def get_cloudspace(self, *, cloudspace_id: str) -> Cloudspace:
        payload = self._call(ops.GET_CLOUDSPACE, path={"cloudspace_id": cloudspace_id})
        return payload_read(ops.GET_CLOUDSPACE, parse_cloudspace, payload)

    def create_cloudspace(
        self,
        *,
        name: str,
        location: str,
        private_network: str | None = None,
        external_network_id: int | None = None,
        parent_cloudspace_id: str | None = None,
        private: bool = False,
        local_domain: str | None = None,
    ) -> str:
        """Creates a cloudspace and answers its id. Sent once (see ResponseLost)."""
        firewall: dict[str, Any] = {"private": private}
        if external_network_id is not None:
            firewall["external_network_id"] = external_network_id
        if parent_cloudspace_id is not None:
            firewall["parent_cloudspace_id"] = parent_cloudspace_id
        body: dict[str, Any] = {"name": name, "location": location, "firewall": firewall}
        if private_network is not None:
            body["private_network"] = private_network
        if local_domain is not None:
            body["local_domain"] = local_domain
        payload = self._call(ops.CREATE_CLOUDSPACE, body=body)
        return payload_read(ops.CREATE_CLOUDSPACE, id_field("cloudspace_id"), payload)

    def delete_cloudspace(self, *, cloudspace_id: str, permanently: bool = False) -> None:
        self._call(
            ops.DELETE_CLOUDSPACE,
            path={"cloudspace_id": cloudspace_id},
            query={"permanently": permanently},
        )

    # --- virtual machines -----------------------------------------------------------------

    def list_vms(self, *, cloudspace_id: str, include_deleted: bool = False) -> list[Vm]:
        payload = self._call(
            ops.LIST_VMS,
            path={"cloudspace_id": cloudspace_id},
            query={"include_deleted": include_deleted},
        )
        vms = payload_read(ops.LIST_VMS, listing_of(parse_vm), payload)
        return [dataclasses.replace(vm, cloudspace_id=cloudspace_id) for vm in vms]

    def get_vm(self, *, cloudspace_id: str, vm_id: int) -> Vm:
        payload = self._call(ops.GET_VM, path={"cloudspace_id": cloudspace_id, "vm_id": vm_id})
        return payload_read(ops.GET_VM, parse_vm, payload)

    def create_vm(
        self,
        *,
        cloudspace_id: str,
        name: str,
        description: str,
        vcpus: int,
        memory_mib: int,
        image_id: int,
        disk_size_gib: int,
        start: bool = False,
        user_data: str | None = None,
        hostname: str | None = None,
        private_ip: str | None = None,
        data_disks_gib: list[int] | None = None,
        boot_type: str | None = None,
        enable_vm_agent: bool | None = None,
        gpu_id: str | None = None,
        vgpu_name: str | None = None,
    ) -> int:
        """Creates a VM (halted unless `start`) and answers its id. Sent once: a VM name is
        the caller's idempotency key (look for it with `list_vms` after `ResponseLost`).

        `gpu_id` with `vgpu_name` reserves and attaches a vGPU in the same call.
        """
        if (gpu_id is None) != (vgpu_name is None):
            raise ValueError("gpu_id and vgpu_name go together")
        body = {"gpu_id": gpu_id, "vgpu_name": vgpu_name} if gpu_id is not None else None
        payload = self._call(
            ops.CREATE_VM,
            path={"cloudspace_id": cloudspace_id},
            query={
                "name": name,
                "description": description,
                "vcpus": vcpus,
                "memory": memory_mib,
                "image_id": image_id,
                "disk_size": disk_size_gib,
                "start_vm": start,
                "user_data": user_data,
                "hostname": hostname,
                "private_ip": private_ip,
                "data_disks": data_disks_gib or None,
                "boot_type": boot_type,
                "enable_vm_agent": enable_vm_agent,
            },
            body=body,
        )
        return payload_read(ops.CREATE_VM, int_field("vm_id"), payload)

    def delete_vm(
        self,
        *,
        cloudspace_id: str,
        vm_id: int,
        permanently: bool = False,
        detach_gpu: bool = False,
    ) -> None:
        """Deletes a VM: to the recycle bin unless `permanently`. A VM holding vGPUs must be
        halted, and `detach_gpu` leaves its reservations alive (and billed): release them."""
        self._call(
            ops.DELETE_VM,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id},
            query={"permanently": permanently, "detach_gpu": detach_gpu},
        )

    def start_vm(self, *, cloudspace_id: str, vm_id: int) -> None:
        self._call(ops.START_VM, path={"cloudspace_id": cloudspace_id, "vm_id": vm_id})

    def stop_vm(self, *, cloudspace_id: str, vm_id: int, force: bool = False) -> None:
        self._call(
            ops.STOP_VM,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id},
            query={"force": force},
        )

    # --- external NICs --------------------------------------------------------------------

    def list_vm_nics(self, *, cloudspace_id: str, vm_id: int) -> list[VmNic]:
        payload = self._call(
            ops.LIST_VM_NICS, path={"cloudspace_id": cloudspace_id, "vm_id": vm_id}
        )
        return payload_read(ops.LIST_VM_NICS, listing_of(parse_vm_nic), payload)

    def get_vm_nic(self, *, cloudspace_id: str, vm_id: int, ip: str) -> VmNic:
        payload = self._call(
            ops.GET_VM_NIC,
            path={
                "cloudspace_id": cloudspace_id,
                "vm_id": vm_id,
                "external_ip_address": split_ip(ip)[0],
            },
        )
        return payload_read(ops.GET_VM_NIC, parse_vm_nic, payload)

    def send_external_nic_attach(
        self,
        *,
        cloudspace_id: str,
        vm_id: int,
        external_network_id: int,
        ip: str | None = None,
        model: str | None = None,
        network_type: str = "external",
        external_cloudspace_id: str | None = None,
    ) -> None:
        """Sends the attach, once; its answer says nothing of the NIC. A caller that keeps the
        listing from before finds the NIC with `new_nic` in the listing after (the SR-IOV
        agent, which also holds the VM's attaches one at a time and keeps what a lost
        answer may have made: `sriov.agent`)."""
        self._call(
            ops.ATTACH_EXTERNAL_NIC,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id},
            query={
                "external_network_id": external_network_id,
                "external_network_ip": split_ip(ip)[0] if ip else None,
                "model": model,
                "external_network_type": network_type,
                "external_cloudspace_id": external_cloudspace_id,
            },
        )

    def detach_external_nic(
        self,
        *,
        cloudspace_id: str,
        vm_id: int,
        ip: str,
        external_network_id: int,
        network_type: str = "external",
        external_cloudspace_id: str | None = None,
    ) -> None:
        """Detaches the VM's NIC with address `ip` (a `/prefix` is ignored)."""
        self._call(
            ops.DETACH_EXTERNAL_NIC,
            path={
                "cloudspace_id": cloudspace_id,
                "vm_id": vm_id,
                "external_ip_address": split_ip(ip)[0],
            },
            query={
                "external_network_id": external_network_id,
                "external_network_type": network_type,
                "external_cloudspace_id": external_cloudspace_id,
            },
        )

    def list_external_networks(self, *, location: str) -> list[ExternalNetwork]:
        payload = self._call(ops.LIST_EXTERNAL_NETWORKS, path={"location": location})
        return payload_read(ops.LIST_EXTERNAL_NETWORKS, listing_of(parse_external_network), payload)

    def get_external_network(self, *, location: str, external_network_id: int) -> ExternalNetwork:
        payload = self._call(
            ops.GET_EXTERNAL_NETWORK,
            path={"location": location, "external_network_id": external_network_id},
        )
        return payload_read(ops.GET_EXTERNAL_NETWORK, parse_external_network, payload)

    def list_free_ips(self, *, location: str, external_network_id: int) -> list[str]:
        payload = self._call(
            ops.LIST_FREE_IPS,
            path={"location": location, "external_network_id": external_network_id},
        )
        return payload_read(ops.LIST_FREE_IPS, free_ips, payload)

    # --- images ---------------------------------------------------------------------------

    def list_images(self, *, location: str) -> list[Image]:
        payload = self._call(ops.LIST_IMAGES, path={"location": location})
        return payload_read(ops.LIST_IMAGES, listing_of(parse_image), payload)

    # --- GPUs -----------------------------------------------------------------------------

    def list_gpu_profiles(self, *, location: str) -> list[GpuProfile]:
        payload = self._call(ops.LIST_GPU_PROFILES, path={"location": location})
        return payload_read(ops.LIST_GPU_PROFILES, listing_of(parse_gpu_profile), payload)

    def reserve_vgpu(self, *, location: str, gpu_id: str, name: str) -> str:
        """Reserves a vGPU instance on card `gpu_id` and answers its id. Billed from now on.

        Sent once. On `ResponseLost`, look for `name` in `list_vgpus` before reserving again.
        A full card raises `CapacityExhausted`.
        """
        payload = self._call(
            ops.RESERVE_VGPU,
            path={"location": location, "gpu_id": gpu_id},
            body={"vgpu_name": name},
        )
        return payload_read(ops.RESERVE_VGPU, id_field("vgpu_id"), payload)

    def reserve_and_attach_vgpu(
        self, *, cloudspace_id: str, vm_id: int, gpu_id: str, name: str
    ) -> str:
        """Reserves a vGPU on card `gpu_id` and attaches it to a (halted) VM in one call.
        Sent once; same rules as `reserve_vgpu`."""
        payload = self._call(
            ops.RESERVE_AND_ATTACH_VGPU,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id, "gpu_id": gpu_id},
            body={"vgpu_name": name},
        )
        return payload_read(ops.RESERVE_AND_ATTACH_VGPU, id_field("vgpu_id"), payload)

    def attach_vgpu(self, *, cloudspace_id: str, vm_id: int, vgpu_id: str) -> None:
        self._call(
            ops.ATTACH_VGPU,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id, "vgpu_id": vgpu_id},
        )

    def detach_vgpu(self, *, cloudspace_id: str, vm_id: int, vgpu_id: str) -> None:
        """Detaches a vGPU from a (halted) VM. The reservation stays, and stays billed."""
        self._call(
            ops.DETACH_VGPU,
            path={"cloudspace_id": cloudspace_id, "vm_id": vm_id, "vgpu_id": vgpu_id},
        )

    def list_vgpus(self, *, location: str, include_deleted: bool = False) -> Listing[Vgpu]:
        """Every vGPU reservation at `location`, all pages.

        Never raises for an API failure: a page that failed after retries, a count that does
        not add up, or a listing that moved between pages gives `complete=False` with the
        reason in `error`, and the items read so far.
        """
        items: dict[str, Vgpu] = {}
        expected: int | None = None
        start_after = 0
        while True:
            try:
                payload = self._call(
                    ops.LIST_VGPUS,
                    path={"location": location},
                    query={
                        "limit": self.page_size,
                        "start_after": start_after,
                        "include_deleted": include_deleted,
                    },
                )
                count, page = payload_read(ops.LIST_VGPUS, vgpu_page, payload)
            except WhiteskyError as exc:
                logger.warning("whitesky: vGPU listing of %s incomplete: %s", location, exc)
                return Listing(tuple(items.values()), complete=False, error=exc)
            if expected is None:
                expected = count
            elif count != expected:
                return self._incomplete(
                    items, f"the listing changed between pages (count {expected}, then {count})"
                )
            for vgpu in page:
                if vgpu.vgpu_id in items:
                    return self._incomplete(
                        items, f"vGPU {vgpu.vgpu_id} listed twice: the listing moved"
                    )
                items[vgpu.vgpu_id] = vgpu
            start_after += len(page)
            if not page or start_after >= expected:
                break
        if len(items) != expected:
            return self._incomplete(
                items, f"collected {len(items)} vGPUs, pagination.count says {expected}"
            )
        return Listing(tuple(items.values()), complete=True)

    @staticmethod
    def _incomplete(items: dict[str, Vgpu], reason: str) -> Listing[Vgpu]:
        logger.warning("whitesky: vGPU listing incomplete: %s", reason)
        error = IncompleteListing(reason, operation=ops.LIST_VGPUS.operation_id)
        return Listing(tuple(items.values()), complete=False, error=error)

    def release_vgpu(
        self, *, location: str, vgpu_id: str, detach: bool = True, permanently: bool = True
    ) -> None:
        """Deletes a reservation. Only a permanent delete is sure to stop the charge."""
        self._call(
            ops.RELEASE_VGPU,
            path={"location": location, "vgpu_id": vgpu_id},
            query={"detach": detach, "permanently": permanently},
        )

    def restore_vgpu(self, *, location: str, vgpu_id: str) -> None:
        self._call(ops.RESTORE_VGPU, path={"location": location, "vgpu_id": vgpu_id})

    # --- billing --------------------------------------------------------------------------

    def location_consumption(
        self, *, location: str, start: int | datetime, end: int | datetime
    ) -> Consumption:
        payload = self._call(
            ops.LOCATION_CONSUMPTION,
            path={"location": location},
            query={"start": _epoch(start), "end": _epoch(end)},
        )
        return payload_read(ops.LOCATION_CONSUMPTION, parse_consumption, payload)


def _epoch(value: int | datetime) -> int:
    return int(value.timestamp()) if isinstance(value, datetime) else int(value)
