"""The simulated platform: its records and the rules that change them. No HTTP here.

``World`` is not thread-safe; the server holds one lock around every call into it. Every
method that changes something calls ``_changed()``, which bumps ``version``: list caches
and the state file key on it.

Billing: a vGPU accrues ``vgu`` in vGPU-hours (one instance held for one hour = 1.0) on the
simulated clock, from reserve to permanent release, attached or not. Stretches without a VM
are reported under ``unassigned_vgpus``; stretches on a VM under that VM.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections.abc import Iterable
from typing import Any

from simulator.whitesky.errors import BadRequest, Conflict, Forbidden, NotFound
from simulator.whitesky.records import (
    CLOUDSPACE_DEPLOYED,
    DELETED,
    DESTROYED,
    VGPU_ASSIGNED,
    VGPU_RESERVED,
    VM_HALTED,
    VM_RUNNING,
    Cloudspace,
    ExternalNetwork,
    GpuCard,
    Image,
    Location,
    Nic,
    Segment,
    Tables,
    Vgpu,
    Vm,
)

HOUR = 3600.0
# Resource units a VM accrues, per hour: vcu per vCPU, mu per GiB of memory, su per TB of
# boot disk, tu per 400 IOPS of it (the platform's default disk has 2000 IOPS).
_BOOT_DISK_IOPS = 2000
VM_UNITS = ("su", "tu", "nu", "vcu", "mu", "piu", "wu", "vgu", "fsu")
ACCOUNT_UNITS = ("ou", *VM_UNITS)


class Clock:
    """Wall time plus an offset that tests advance; billing runs on it."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> float:
        self.offset += seconds
        return self.now()


# The MACs of this process's NICs, the same across resets: two simulators on one host
# (two test runs, a test run beside `make run`) hand out different ones, as the CNI
# tests find a VF by its MAC in the host's network.
MAC_SPACE = secrets.randbits(16)


class World:
    def __init__(self, tables: Tables, *, clock: Clock, switches: dict[str, bool]) -> None:
        self.tables = tables
        self.clock = clock
        self.switches = switches
        self.version = 0
        self._list_cache: dict[tuple[Any, ...], list[Any]] = {}
        # Encoded answers of the API layer's big lists; emptied on every change.
        self.render_cache: dict[tuple[object, ...], bytes] = {}

    # ---- bookkeeping -------------------------------------------------------------------

    def _changed(self) -> None:
        self.version += 1
        self._list_cache.clear()
        self.render_cache.clear()

    def set_switches(self, switches: dict[str, bool]) -> None:
        self.switches.update(switches)
        self._changed()  # switches change how records render

    def _next(self, counter: str, start: int) -> int:
        value = self.tables.counters.get(counter, start)
        self.tables.counters[counter] = value + 1
        return value

    def _new_mac(self) -> str:
        # Unique in the process up to 2**32 NICs: the count added to the process's base.
        n = ((MAC_SPACE << 16) + self._next("mac", 1)) & 0xFFFFFFFF
        return "52:54:" + ":".join(f"{(n >> shift) & 0xFF:02x}" for shift in (24, 16, 8, 0))

    # ---- lookups (they raise what the API answers) -------------------------------------

    def check_customer(self, customer_id: str) -> None:
        if customer_id != self.tables.customer.customer_id:
            raise NotFound(f"Customer {customer_id} not found")

    def location(self, customer_id: str, name: str) -> Location:
        self.check_customer(customer_id)
        location = self.tables.locations.get(name)
        if location is None:
            raise Forbidden(f"Customer has no access to location {name}")
        return location

    def card(self, location: str, gpu_id: str) -> GpuCard:
        card = self.tables.cards.get(gpu_id)
        if card is None or card.location != location:
            raise NotFound(f"GPU profile {gpu_id} not found in location {location}")
        return card

    def cards_in(self, customer_id: str, location: str) -> list[GpuCard]:
        self.location(customer_id, location)
        return [card for card in self.tables.cards.values() if card.location == location]

    def images_in(self, customer_id: str, location: str) -> list[Image]:
        self.location(customer_id, location)
        return [image for image in self.tables.images.values() if image.location == location]

    def networks_in(self, customer_id: str, location: str) -> list[ExternalNetwork]:
        self.location(customer_id, location)
        return [n for n in self.tables.networks.values() if n.location == location]

    def network(self, customer_id: str, location: str, network_id: int) -> ExternalNetwork:
        self.location(customer_id, location)
        network = self.tables.networks.get(network_id)
        if network is None or network.location != location:
            raise NotFound(f"External network {network_id} not found in location {location}")
        return network

    def cloudspace(self, customer_id: str, cloudspace_id: str) -> Cloudspace:
        self.check_customer(customer_id)
        cloudspace = self.tables.cloudspaces.get(cloudspace_id)
        if cloudspace is None or cloudspace.destroyed:
            raise NotFound(f"Cloudspace {cloudspace_id} not found")
        return cloudspace

    def cloudspaces(self, customer_id: str) -> list[Cloudspace]:
        self.check_customer(customer_id)
        return [cs for cs in self.tables.cloudspaces.values() if not cs.destroyed]

    def vm(self, customer_id: str, cloudspace_id: str, vm_id: int) -> Vm:
        self.cloudspace(customer_id, cloudspace_id)
        vm = self.tables.vms.get(vm_id)
        if vm is None or vm.destroyed or vm.cloudspace_id != cloudspace_id:
            raise NotFound(f"Virtual machine {vm_id} not found in cloudspace {cloudspace_id}")
        return vm

    def vms_in(self, customer_id: str, cloudspace_id: str, *, deleted: str) -> list[Vm]:
        """``deleted``: "exclude", "include" or "only" (the recycle bin)."""
        cloudspace = self.cloudspace(customer_id, cloudspace_id)
        key = ("vms", cloudspace_id, deleted)
        cached = self._list_cache.get(key)
        if cached is None:
            vms = (self.tables.vms[vm_id] for vm_id in cloudspace.vm_ids)
            cached = [vm for vm in vms if _keep(vm.status == DELETED, deleted)]
            self._list_cache[key] = cached
        return cached

    def vgpu(self, customer_id: str, location: str, vgpu_id: str) -> Vgpu:
        self.location(customer_id, location)
        vgpu = self.tables.vgpus.get(vgpu_id)
        if vgpu is None or vgpu.destroyed or vgpu.location != location:
            raise NotFound(f"vGPU {vgpu_id} not found in location {location}")
        return vgpu

    def vgpus_in(self, customer_id: str, location: str, *, deleted: str) -> list[Vgpu]:
        """All of a location's vGPUs in reservation order; ``deleted`` as for ``vms_in``."""
        self.location(customer_id, location)
        key = ("vgpus", location, deleted)
        cached = self._list_cache.get(key)
        if cached is None:
            cached = [
                vgpu
                for vgpu in self.tables.vgpus.values()
                if vgpu.location == location
                and not vgpu.destroyed
                and _keep(vgpu.status == DELETED, deleted)
            ]
            self._list_cache[key] = cached
        return cached

    def nics_of(self, vm: Vm) -> list[Nic]:
        return [self.tables.nics[mac] for mac in vm.nic_macs]

    def free_addresses(self, network: ExternalNetwork) -> list[str]:
        return [str(a) for a in _pool(network) if str(a) not in network.allocated]

    # ---- cloudspaces -------------------------------------------------------------------

    def create_cloudspace(
        self,
        customer_id: str,
        *,
        name: str,
        location: str,
        private_network: str = "192.168.103.0/24",
        external_network_id: int | None = None,
        parent_cloudspace_id: str | None = None,
        local_domain: str = "",
        cloudspace_id: str | None = None,
    ) -> Cloudspace:
        self.location(customer_id, location)
        if parent_cloudspace_id and external_network_id is not None:
            raise BadRequest("parent_cloudspace_id and external_network_id passed together")
        if parent_cloudspace_id:
            parent = self.tables.cloudspaces.get(parent_cloudspace_id)
            if parent is None or parent.destroyed:
                raise BadRequest("Invalid parent_cloudspace_id")
            if parent.location != location:
                raise BadRequest("parent_cloudspace_id is not in the same location")
        try:
            ipaddress.IPv4Network(private_network, strict=True)
        except ValueError as exc:
            raise BadRequest(f"private_network: {exc}") from exc
        network: ExternalNetwork | None = None
        if external_network_id is not None:
            network = self.tables.networks.get(int(external_network_id))
            if network is None or network.location != location:
                raise BadRequest(f"Invalid external_network_id {external_network_id}")
        elif not parent_cloudspace_id:
            network = next(
                (n for n in self.tables.networks.values() if n.location == location), None
            )
        if cloudspace_id is None:
            cloudspace_id = f"cs-{self._next('cloudspace', 1):04d}"
            while cloudspace_id in self.tables.cloudspaces:
                cloudspace_id = f"cs-{self._next('cloudspace', 1):04d}"
        elif cloudspace_id in self.tables.cloudspaces:
            raise Conflict(f"Cloudspace {cloudspace_id} already exists")
        # The cloudspace's router takes an address on its external network, like the real one.
        gateway_ip = (
            self._allocate_address(network, None, f"cloudspace {cloudspace_id}") if network else ""
        )
        now = int(self.clock.now())
        cloudspace = Cloudspace(
            cloudspace_id=cloudspace_id,
            numeric_id=self._next("cloudspace_numeric", 1),
            name=name,
            location=location,
            status=CLOUDSPACE_DEPLOYED,
            private_network=private_network,
            external_network_id=network.external_network_id if network else None,
            external_network_ip=gateway_ip,
            local_domain=local_domain or f"{name}.local",
            creation_time=now,
            update_time=now,
        )
        self.tables.cloudspaces[cloudspace_id] = cloudspace
        self._changed()
        return cloudspace

    def delete_cloudspace(self, customer_id: str, cloudspace_id: str, *, permanently: bool) -> None:
        cloudspace = self.cloudspace(customer_id, cloudspace_id)
        live = [
            self.tables.vms[v] for v in cloudspace.vm_ids if self.tables.vms[v].status != DELETED
        ]
        if live and self.switches["cloudspace_delete_refused_with_vms"]:
            ids = ", ".join(str(vm.vm_id) for vm in live)
            raise Conflict(f"Cloudspace {cloudspace_id} still holds virtual machines: {ids}")
        for vm_id in list(cloudspace.vm_ids):
            vm = self.tables.vms[vm_id]
            if permanently or vm.status != DELETED:
                self._delete_vm(vm, permanently=permanently, detach_gpu=True)
        now = self.clock.now()
        if permanently:
            cloudspace.destroyed = True
            if cloudspace.external_network_id is not None and cloudspace.external_network_ip:
                network = self.tables.networks[cloudspace.external_network_id]
                network.allocated.pop(cloudspace.external_network_ip, None)
        cloudspace.status = DELETED
        cloudspace.deletion_time = int(now)
        cloudspace.update_time = int(now)
        self._changed()

    # ---- virtual machines --------------------------------------------------------------

    def create_vm(
        self,
        customer_id: str,
        cloudspace_id: str,
        *,
        name: str,
        description: str,
        vcpus: int,
        memory: int,
        image_id: int | None,
        disk_size: int | None,
        start_vm: bool = True,
        hostname: str | None = None,
        user_data: str = "",
        gpu_id: str = "",
        vgpu_name: str = "",
    ) -> Vm:
        cloudspace = self.cloudspace(customer_id, cloudspace_id)
        if cloudspace.status == DELETED:
            raise Conflict(f"Cloudspace {cloudspace_id} is deleted")
        if vcpus < 1:
            raise BadRequest("vcpus must be at least 1")
        if image_id is None:
            raise BadRequest("image_id is required (the simulator creates VMs from images only)")
        image = self.tables.images.get(image_id)
        if image is None or image.location != cloudspace.location:
            raise NotFound(f"Image {image_id} not found in location {cloudspace.location}")
        if memory < image.memory:
            raise BadRequest(f"memory must be at least {image.memory} MiB for image {image_id}")
        size = image.boot_disk_size if disk_size is None else disk_size
        if size < image.boot_disk_size:
            raise BadRequest(
                f"disk_size must be at least {image.boot_disk_size} GiB for image {image_id}"
            )
        card = self.card(cloudspace.location, gpu_id) if gpu_id else None
        atomic = self.switches["vm_create_atomic_with_gpu"]
        if card is not None and atomic:
            self._check_vgpu_name(cloudspace.location, vgpu_name or name)
            self._ensure_free_instance(card)

        now = self.clock.now()
        vm = Vm(
            vm_id=self._next("vm", 1001),
            cloudspace_id=cloudspace_id,
            name=name,
            description=description,
            hostname=hostname or name.lower().replace(" ", "-"),
            vcpus=vcpus,
            memory=memory,
            image_id=image_id,
            disk_size=size,
            boot_disk_id=self._next("disk", 5001),
            status=VM_HALTED,
            creation_time=now,
            update_time=now,
            private_ip=self._private_address(cloudspace),
            private_mac=self._new_mac(),
            user_data=user_data,
        )
        self.tables.vms[vm.vm_id] = vm
        cloudspace.vm_ids.append(vm.vm_id)
        self._changed()
        if card is not None:
            # When not atomic the VM stays (halted) even if the GPU cannot be had.
            self._check_vgpu_name(cloudspace.location, vgpu_name or name)
            self._reserve(card, vgpu_name or name, vm)
        if start_vm:
            vm.status = VM_RUNNING
            self._changed()
        return vm

    def start_vm(self, customer_id: str, cloudspace_id: str, vm_id: int) -> None:
        self._power(self.vm(customer_id, cloudspace_id, vm_id), VM_RUNNING)

    def stop_vm(self, customer_id: str, cloudspace_id: str, vm_id: int) -> None:
        self._power(self.vm(customer_id, cloudspace_id, vm_id), VM_HALTED)

    def _power(self, vm: Vm, target: str) -> None:
        if vm.status == DELETED:
            raise Conflict(f"Virtual machine {vm.vm_id} is deleted")
        if vm.status == target and not self.switches["power_actions_idempotent"]:
            raise Conflict(f"Virtual machine {vm.vm_id} is already {target}")
        vm.status = target
        vm.update_time = self.clock.now()
        self._changed()

    def delete_vm(
        self,
        customer_id: str,
        cloudspace_id: str,
        vm_id: int,
        *,
        permanently: bool,
        detach_gpu: bool,
    ) -> None:
        vm = self.vm(customer_id, cloudspace_id, vm_id)
        if vm.status == DELETED and not permanently:
            return  # already in the recycle bin
        self._delete_vm(vm, permanently=permanently, detach_gpu=detach_gpu)

    def _delete_vm(self, vm: Vm, *, permanently: bool, detach_gpu: bool) -> None:
        if vm.vgpu_ids:
            held = ", ".join(vm.vgpu_ids)
            if (
                vm.status == VM_RUNNING
                and self.switches["vm_delete_refused_while_running_with_vgpu"]
            ):
                raise Conflict(
                    f"Cannot delete virtual machine {vm.vm_id}: it is RUNNING and holds "
                    f"vGPU {held}; stop it first"
                )
            if not detach_gpu and self.switches["vm_delete_requires_detach_gpu"]:
                raise Conflict(
                    f"Cannot delete virtual machine {vm.vm_id}: it holds vGPU {held}; "
                    "pass detach_gpu=true"
                )
            if detach_gpu or permanently:
                for vgpu_id in list(vm.vgpu_ids):
                    self._unassign(self.tables.vgpus[vgpu_id], vm)
        if permanently or not self.switches["deleted_vm_keeps_nics"]:
            for nic in self.nics_of(vm):
                self._remove_nic(vm, nic)
        now = self.clock.now()
        vm.update_time = now
        if permanently:
            vm.status = DESTROYED
            vm.destroyed_time = now
            self.tables.cloudspaces[vm.cloudspace_id].vm_ids.remove(vm.vm_id)
        else:
            vm.status = DELETED
            vm.deletion_time = now
        self._changed()

    def _private_address(self, cloudspace: Cloudspace) -> str:
        network = ipaddress.IPv4Network(cloudspace.private_network)
        host = cloudspace.next_private_host
        if host >= network.num_addresses - 1:
            raise Conflict(f"No free private address left in cloudspace {cloudspace.cloudspace_id}")
        cloudspace.next_private_host += 1
        return str(network[host])

    # ---- external NICs -----------------------------------------------------------------

    def attach_nic(
        self,
        customer_id: str,
        cloudspace_id: str,
        vm_id: int,
        *,
        network_id: int,
        network_type: str,
        address: str | None,
        model: str,
    ) -> Nic:
        vm = self.vm(customer_id, cloudspace_id, vm_id)
        if network_type == "cloudspace" or network_id == -1:
            raise BadRequest("external_network_type cloudspace is not simulated")
        if vm.status == DELETED:
            raise Conflict(f"Virtual machine {vm_id} is deleted")
        location = self.tables.cloudspaces[cloudspace_id].location
        network = self.tables.networks.get(network_id)
        if network is None or network.location != location:
            raise NotFound(f"External network {network_id} not found in location {location}")
        if vm.status == VM_RUNNING and self.switches["nic_attach_requires_halted_vm"]:
            raise Conflict(f"Cannot attach a NIC to virtual machine {vm_id}: it is RUNNING")
        ip = self._allocate_address(network, address, f"vm {vm_id}")
        used = {nic.device_name for nic in self.nics_of(vm)}
        device = next(f"eth{n}" for n in range(1, len(used) + 2) if f"eth{n}" not in used)
        nic = Nic(
            mac_address=self._new_mac(),
            vm_id=vm_id,
            device_name=device,
            ip_address=ip,
            prefix_length=ipaddress.IPv4Network(network.cidr).prefixlen,
            network_id=network_id,
            model=model,
        )
        self.tables.nics[nic.mac_address] = nic
        vm.nic_macs.append(nic.mac_address)
        vm.update_time = self.clock.now()
        self._changed()
        return nic

    def nic(self, customer_id: str, cloudspace_id: str, vm_id: int, address: str) -> Nic:
        vm = self.vm(customer_id, cloudspace_id, vm_id)
        ip = address.split("/", 1)[0]
        for nic in self.nics_of(vm):
            if nic.ip_address == ip:
                return nic
        raise NotFound(f"Virtual machine {vm_id} has no external NIC with address {ip}")

    def detach_nic(
        self,
        customer_id: str,
        cloudspace_id: str,
        vm_id: int,
        *,
        address: str,
        network_id: int,
        network_type: str,
    ) -> None:
        nic = self.nic(customer_id, cloudspace_id, vm_id, address)
        vm = self.tables.vms[vm_id]
        if network_type != "external" or network_id != nic.network_id:
            raise BadRequest(
                f"NIC {nic.ip_address} is on external network {nic.network_id} (type external), "
                f"not {network_id} (type {network_type})"
            )
        if vm.status == VM_RUNNING and self.switches["nic_detach_requires_halted_vm"]:
            raise Conflict(f"Cannot detach a NIC from virtual machine {vm_id}: it is RUNNING")
        self._remove_nic(vm, nic)
        vm.update_time = self.clock.now()
        self._changed()

    def _remove_nic(self, vm: Vm, nic: Nic) -> None:
        self.tables.networks[nic.network_id].allocated.pop(nic.ip_address, None)
        vm.nic_macs.remove(nic.mac_address)
        del self.tables.nics[nic.mac_address]

    def _allocate_address(self, network: ExternalNetwork, wanted: str | None, holder: str) -> str:
        if wanted:
            try:
                address = ipaddress.IPv4Address(wanted.split("/", 1)[0])
            except ValueError as exc:
                raise BadRequest(f"external_network_ip: {exc}") from exc
            cidr = ipaddress.IPv4Network(network.cidr)
            if (
                address not in cidr
                or address in (cidr.network_address, cidr.broadcast_address)
                or str(address) == network.gateway
            ):
                raise BadRequest(f"external_network_ip {address} is not usable on {network.cidr}")
            if str(address) in network.allocated:
                raise Conflict(
                    f"Address {address} is already in use on external network "
                    f"{network.external_network_id}"
                )
            chosen = str(address)
        else:
            free = next((str(a) for a in _pool(network) if str(a) not in network.allocated), None)
            if free is None:
                raise Conflict(
                    f"No free address left on external network {network.external_network_id}"
                )
            chosen = free
        network.allocated[chosen] = holder
        return chosen

    # ---- vGPUs -------------------------------------------------------------------------

    def reserve_vgpu(self, customer_id: str, location: str, gpu_id: str, name: str) -> Vgpu:
        self.location(customer_id, location)
        card = self.card(location, gpu_id)
        self._check_vgpu_name(location, name)
        return self._reserve(card, name)

    def reserve_and_attach_vgpu(
        self, customer_id: str, cloudspace_id: str, vm_id: int, gpu_id: str, name: str
    ) -> Vgpu:
        vm = self.vm(customer_id, cloudspace_id, vm_id)
        card = self.card(self.tables.cloudspaces[cloudspace_id].location, gpu_id)
        self._check_attachable(vm)
        self._check_vgpu_name(card.location, name)
        return self._reserve(card, name, vm)

    def attach_vgpu(self, customer_id: str, cloudspace_id: str, vm_id: int, vgpu_id: str) -> None:
        vm = self.vm(customer_id, cloudspace_id, vm_id)
        vgpu = self.vgpu(customer_id, self.tables.cloudspaces[cloudspace_id].location, vgpu_id)
        if vgpu.status == DELETED:
            raise Conflict(f"vGPU {vgpu_id} is deleted; restore it first")
        if vgpu.vm_id is not None:
            raise Conflict(f"vGPU {vgpu_id} is already attached to virtual machine {vgpu.vm_id}")
        self._check_attachable(vm)
        self._assign(vgpu, vm)

    def detach_vgpu(self, customer_id: str, cloudspace_id: str, vm_id: int, vgpu_id: str) -> None:
        vm = self.vm(customer_id, cloudspace_id, vm_id)
        vgpu = self.vgpu(customer_id, self.tables.cloudspaces[cloudspace_id].location, vgpu_id)
        if vgpu.vm_id != vm_id:
            raise NotFound(f"vGPU {vgpu_id} is not attached to virtual machine {vm_id}")
        self._check_detachable(vm, vgpu)
        self._unassign(vgpu, vm)

    def delete_vgpu(
        self, customer_id: str, location: str, vgpu_id: str, *, detach: bool, permanently: bool
    ) -> None:
        vgpu = self.vgpu(customer_id, location, vgpu_id)
        if vgpu.status == DELETED and not permanently:
            return  # already deleted
        if vgpu.vm_id is not None:
            vm = self.tables.vms[vgpu.vm_id]
            if not detach:
                raise Conflict(
                    f"vGPU {vgpu_id} is attached to virtual machine {vm.vm_id}; "
                    "pass detach=true or detach it first"
                )
            self._check_detachable(vm, vgpu)
            self._unassign(vgpu, vm)
        now = self.clock.now()
        if permanently:
            self._stop_billing(vgpu, now)
            self._release_instance(vgpu)
            vgpu.status = DESTROYED
        else:
            vgpu.status = DELETED
            if not self.switches["deleted_vgpu_keeps_instance"]:
                self._release_instance(vgpu)
            if not self.switches["deleted_vgpu_billed"]:
                self._stop_billing(vgpu, now)
        vgpu.deletion_time = int(now)
        self._changed()

    def restore_vgpu(self, customer_id: str, location: str, vgpu_id: str) -> None:
        vgpu = self.vgpu(customer_id, location, vgpu_id)
        if vgpu.status != DELETED:
            raise Conflict(f"vGPU {vgpu_id} is not deleted")
        if not vgpu.holds_instance:
            card = self.tables.cards[vgpu.gpu_id]
            self._ensure_free_instance(card)
            card.held += 1
            vgpu.holds_instance = True
        vgpu.status = VGPU_RESERVED
        vgpu.deletion_time = 0
        if not vgpu.segments or vgpu.segments[-1].end is not None:
            vgpu.segments.append(Segment(start=self.clock.now()))
        self._changed()

    def _check_vgpu_name(self, location: str, name: str) -> None:
        if not self.switches["vgpu_names_unique"]:
            return
        for vgpu in self.tables.vgpus.values():
            if vgpu.location == location and not vgpu.destroyed and vgpu.vgpu_name == name:
                raise Conflict(f"A vGPU named {name!r} already exists: {vgpu.vgpu_id}")

    def _ensure_free_instance(self, card: GpuCard) -> None:
        if card.available_instances <= 0:
            raise Conflict(
                f"No free instance left on GPU {card.gpu_id} ({card.profile_model}): all "
                f"{card.instances_per_card} instances are reserved"
            )

    def _check_attachable(self, vm: Vm) -> None:
        if vm.status == DELETED:
            raise Conflict(f"Virtual machine {vm.vm_id} is deleted")
        if vm.status == VM_RUNNING and self.switches["vgpu_attach_requires_halted_vm"]:
            raise Conflict(
                f"Cannot attach a vGPU to virtual machine {vm.vm_id}: it is RUNNING; stop it first"
            )

    def _check_detachable(self, vm: Vm, vgpu: Vgpu) -> None:
        if vm.status == VM_RUNNING and self.switches["vgpu_detach_requires_halted_vm"]:
            raise Conflict(
                f"Cannot detach vGPU {vgpu.vgpu_id} from virtual machine {vm.vm_id}: it is "
                "RUNNING; stop it first"
            )

    def _reserve(self, card: GpuCard, name: str, vm: Vm | None = None) -> Vgpu:
        """Take an instance of ``card``; with ``vm``, attached from the first moment."""
        self._ensure_free_instance(card)
        card.held += 1
        now = self.clock.now()
        vgpu = Vgpu(
            vgpu_id=f"vgpu-{self._next('vgpu', 1):06d}",
            vgpu_name=name,
            gpu_id=card.gpu_id,
            location=card.location,
            status=VGPU_RESERVED,
            created_at=now,
        )
        self.tables.vgpus[vgpu.vgpu_id] = vgpu
        if vm is None:
            vgpu.segments.append(Segment(start=now))
        else:
            self._assign(vgpu, vm)
        self._changed()
        return vgpu

    def _assign(self, vgpu: Vgpu, vm: Vm) -> None:
        now = self.clock.now()
        self._stop_billing(vgpu, now)
        vgpu.segments.append(Segment(start=now, vm_id=vm.vm_id))
        vgpu.vm_id = vm.vm_id
        vgpu.status = VGPU_ASSIGNED
        vm.vgpu_ids.append(vgpu.vgpu_id)
        vm.update_time = now
        self._changed()

    def _unassign(self, vgpu: Vgpu, vm: Vm) -> None:
        """Detached is still reserved, and still billed: only unassigned now."""
        now = self.clock.now()
        self._stop_billing(vgpu, now)
        vgpu.segments.append(Segment(start=now))
        vgpu.vm_id = None
        vgpu.status = VGPU_RESERVED
        vm.vgpu_ids.remove(vgpu.vgpu_id)
        vm.update_time = now
        self._changed()

    def _release_instance(self, vgpu: Vgpu) -> None:
        if vgpu.holds_instance:
            self.tables.cards[vgpu.gpu_id].held -= 1
            vgpu.holds_instance = False

    @staticmethod
    def _stop_billing(vgpu: Vgpu, now: float) -> None:
        if vgpu.segments and vgpu.segments[-1].end is None:
            vgpu.segments[-1].end = now

    # ---- billing -----------------------------------------------------------------------

    def consumption(
        self, customer_id: str, location: str, start: float, end: float
    ) -> dict[str, Any]:
        """Unit-hours over [start, end), shaped as the description's AccountConsumptionModel."""
        self.location(customer_id, location)
        if end < start:
            raise BadRequest("end must not be before start")
        now = self.clock.now()
        cloudspaces = [cs for cs in self.tables.cloudspaces.values() if cs.location == location]
        vms_by_cloudspace: dict[str, list[Vm]] = {cs.cloudspace_id: [] for cs in cloudspaces}
        for vm in self.tables.vms.values():
            if vm.cloudspace_id in vms_by_cloudspace:
                vms_by_cloudspace[vm.cloudspace_id].append(vm)

        vm_units: dict[int, dict[str, float]] = {}
        for vms in vms_by_cloudspace.values():
            for vm in vms:
                alive_until = vm.destroyed_time if vm.destroyed_time is not None else now
                hours = _overlap_hours(vm.creation_time, alive_until, start, end)
                if hours > 0:
                    vm_units[vm.vm_id] = _vm_units(vm, hours)
        unassigned: dict[str, float] = {}
        for vgpu in self.tables.vgpus.values():
            if vgpu.location != location:
                continue
            for segment in vgpu.segments:
                until = segment.end if segment.end is not None else now
                hours = _overlap_hours(segment.start, until, start, end)
                if hours <= 0:
                    continue
                if segment.vm_id is None:
                    unassigned[vgpu.vgpu_id] = unassigned.get(vgpu.vgpu_id, 0.0) + hours
                else:
                    units = vm_units.setdefault(segment.vm_id, dict.fromkeys(VM_UNITS, 0.0))
                    units["vgu"] += hours

        total = dict.fromkeys(ACCOUNT_UNITS, 0.0)
        cloudspace_rows = []
        for cloudspace in cloudspaces:
            vm_rows = []
            cs_units = dict.fromkeys(VM_UNITS, 0.0)
            for vm in vms_by_cloudspace[cloudspace.cloudspace_id]:
                if vm.vm_id not in vm_units:
                    continue
                units = vm_units[vm.vm_id]
                vm_rows.append({"vm_id": vm.vm_id, "name": vm.name, "consumption": units})
                for unit, value in units.items():
                    cs_units[unit] += value
            if not vm_rows and _overlap_hours(cloudspace.creation_time, now, start, end) <= 0:
                continue
            for unit, value in cs_units.items():
                total[unit] += value
            cloudspace_rows.append(
                {
                    "cloudspace_id": cloudspace.cloudspace_id,
                    "name": cloudspace.name,
                    "mode": "public" if cloudspace.external_network_id is not None else "private",
                    "consumption": cs_units,
                    "vms": vm_rows,
                }
            )
        total["vgu"] += sum(unassigned.values())
        return {
            "name": self.tables.customer.name,
            "consumption": total,
            "cloudspaces": cloudspace_rows,
            "objectspaces": [],
            "unassigned_disks": [],
            "unassigned_vgpus": [
                {"vgpu_id": vgpu_id, "consumption": {"vgu": hours}}
                for vgpu_id, hours in unassigned.items()
            ],
        }

    # ---- bulk seeding (control API, for benchmarks) ------------------------------------

    def seed(
        self,
        cloudspace_id: str,
        *,
        vms: int,
        vgpus: int,
        gpu_id: str | None,
        prefix: str,
        vm_names: list[str] | None = None,
        vm_gpus: int = 0,
        running: bool = False,
    ) -> dict[str, list[Any]]:
        """Create ``vms`` VMs (or one per name of ``vm_names``) and ``vgpus`` unattached
        reservations by the ordinary rules. Each VM gets ``vm_gpus`` vGPUs of one card,
        named ``<VM name>-gpu-<n>`` and attached while it is halted; with ``running`` the
        VMs are started then, as a converged machine's would be."""
        customer_id = self.tables.customer.customer_id
        cloudspace = self.cloudspace(customer_id, cloudspace_id)
        names = vm_names if vm_names is not None else [f"{prefix}-vm-{n}" for n in range(vms)]
        images = self.images_in(customer_id, cloudspace.location)
        if names and not images:
            raise BadRequest(f"location {cloudspace.location} has no image to create VMs from")
        cards = (
            [self.card(cloudspace.location, gpu_id)]
            if gpu_id
            else self.cards_in(customer_id, cloudspace.location)
        )
        vm_ids = []
        vgpu_ids: list[str] = []
        for name in names:
            vm = self.create_vm(
                customer_id,
                cloudspace_id,
                name=name,
                description="seeded",
                vcpus=2,
                memory=max(2048, images[0].memory),
                image_id=images[0].image_id,
                disk_size=None,
                start_vm=False,
            )
            vm_ids.append(vm.vm_id)
            if vm_gpus:
                card = next((c for c in cards if c.available_instances >= vm_gpus), None)
                if card is None:
                    raise Conflict(
                        f"no card has {vm_gpus} free vGPU instances for {name}; what was made stays"
                    )
                vgpu_ids += [
                    self._reserve(card, f"{name}-gpu-{n}", vm).vgpu_id for n in range(vm_gpus)
                ]
            if running:
                vm.status = VM_RUNNING
        unattached: list[str] = []
        for card in cards:
            while len(unattached) < vgpus and card.available_instances > 0:
                unattached.append(self._reserve(card, f"{prefix}-vgpu-{len(unattached)}").vgpu_id)
        if len(unattached) < vgpus:
            raise Conflict(
                f"only {len(unattached)} of {vgpus} vGPU instances were free; those stay reserved"
            )
        self._changed()
        return {"vm_ids": vm_ids, "vgpu_ids": vgpu_ids + unattached}


def _keep(is_deleted: bool, deleted: str) -> bool:
    if deleted == "only":
        return is_deleted
    if deleted == "include":
        return True
    return not is_deleted


def _vm_units(vm: Vm, hours: float) -> dict[str, float]:
    units = dict.fromkeys(VM_UNITS, 0.0)
    units["vcu"] = vm.vcpus * hours
    units["mu"] = vm.memory / 1024 * hours
    units["su"] = vm.disk_size / 1024 * hours
    units["tu"] = _BOOT_DISK_IOPS / 400 * hours
    return units


def _overlap_hours(a_start: float, a_end: float, b_start: float, b_end: float) -> float:
    return max(0.0, min(a_end, b_end) - max(a_start, b_start)) / HOUR


def _pool(network: ExternalNetwork) -> Iterable[ipaddress.IPv4Address]:
    first = int(ipaddress.IPv4Address(network.pool_start))
    last = int(ipaddress.IPv4Address(network.pool_end))
    gateway = network.gateway
    for value in range(first, last + 1):
        address = ipaddress.IPv4Address(value)
        if str(address) != gateway:
            yield address
