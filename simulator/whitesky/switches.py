"""Every behaviour the simulator has to guess, as one named switch.

Nothing public says how the real platform behaves here, so the simulator picks the answer
in ``DEFAULTS`` and a test can flip any of them with ``POST /_sim/config``
``{"switches": {name: bool}}``. docs/known-limitations.md lists the same switches, with the
evidence (or the lack of it) behind each default.
"""

from __future__ import annotations

from types import MappingProxyType

from simulator.whitesky.errors import BadRequest

DEFAULTS: MappingProxyType[str, bool] = MappingProxyType(
    {
        # Attaching (or reserve-and-attaching) a vGPU to a RUNNING VM is refused with 409.
        # Assumed: only detach was observed to be refused.
        "vgpu_attach_requires_halted_vm": True,
        # Detaching a vGPU from a RUNNING VM is refused with 409. Observed on a real backend.
        "vgpu_detach_requires_halted_vm": True,
        # Deleting a RUNNING VM that holds a vGPU is refused with 409, even with
        # detach_gpu=true. Observed on a real backend.
        "vm_delete_refused_while_running_with_vgpu": True,
        # Deleting a (halted) VM that holds vGPUs needs detach_gpu=true, else 409. When off,
        # the vGPUs stay assigned to the VM in the recycle bin, or become unassigned when the
        # VM is deleted permanently. Assumed.
        "vm_delete_requires_detach_gpu": True,
        # VM create with a gpu_id in the body is all or nothing: when the card is full the VM
        # is not created. When off, the VM is created and left behind, yet the answer is 409.
        # Assumed.
        "vm_create_atomic_with_gpu": True,
        # Two reservations may not share a name (409). Off: the platform was seen not to care.
        "vgpu_names_unique": False,
        # A vGPU deleted without `permanently` keeps its card instance (so it can always be
        # restored). Assumed.
        "deleted_vgpu_keeps_instance": True,
        # A vGPU deleted without `permanently` is still billed. Assumed, and the cautious
        # choice: only a permanent delete stops the charge.
        "deleted_vgpu_billed": True,
        # VGPUInfo.virtual_machine of an unassigned vGPU is null instead of an object with
        # empty values (id 0, empty strings). Undocumented; the object conforms to the schema.
        "unassigned_vgpu_vm_null": False,
        # Listed NIC addresses carry a "/prefix" suffix ("10.50.0.12/24"). Inferred from a
        # public client that strips it.
        "nic_ip_with_prefix": True,
        # Attaching an external NIC to a RUNNING VM is refused with 409. Assumed not (hot plug).
        "nic_attach_requires_halted_vm": False,
        # Detaching an external NIC from a RUNNING VM is refused with 409. Assumed not.
        "nic_detach_requires_halted_vm": False,
        # A VM in the recycle bin keeps its NICs and their addresses; a permanent delete frees
        # them. Assumed.
        "deleted_vm_keeps_nics": True,
        # A VM has a NIC on the cloudspace's private network (eth0) in its network_interfaces
        # (not in the external-nics list). Assumed from how cloudspaces work.
        "vm_has_private_nic": True,
        # Deleting a cloudspace that still holds VMs (not deleted) is refused with 409. Assumed.
        "cloudspace_delete_refused_with_vms": True,
        # Start on a RUNNING VM and stop on a HALTED one succeed and change nothing. Off:
        # they answer 409. Assumed.
        "power_actions_idempotent": True,
        # JWT expiry is judged on the simulated clock (wall time + advanced offset) instead of
        # wall time. Off by default so a test can advance days of billing without its session
        # expiring; turn on to expire a token instantly with POST /_sim/clock.
        "token_expiry_uses_sim_clock": False,
    }
)


def switches_updated(current: dict[str, bool], changes: object) -> dict[str, bool]:
    """``current`` with ``changes`` applied; refuses unknown names and non-booleans."""
    if not isinstance(changes, dict):
        raise BadRequest("switches must be an object of name: bool")
    updated = dict(current)
    for name, value in changes.items():
        if name not in DEFAULTS:
            known = ", ".join(sorted(DEFAULTS))
            raise BadRequest(f"unknown switch {name!r}; known switches: {known}")
        if not isinstance(value, bool):
            raise BadRequest(f"switch {name!r} must be true or false")
        updated[name] = value
    return updated
