"""Which machine a Kubernetes node runs on, and the flags a complete node listing raises:
a machine whose node never joined (or left), a node that no machine owns.

A node is its machine's by providerID, which the VCO cloud provider sets to
`vco://<location>/<vm id>` (`provider_id`; an assumption, see docs/known-limitations.md),
else by name: kubeadm names a node after its host, and a machine's VM is named
`capvco-<cluster>-<machine>`. A providerID in our form is authoritative: a node whose
providerID names a VM that no machine has (an old VM of a replaced machine) is nobody's,
whatever its name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from capvco_web.rows import fields_assign, rows_key_share
from clusters.models import Cluster, Machine
from gpus import naming
from kube.models import KubeNode, MachineNode

PROVIDER_ID_PREFIX = "vco://"
_PROVIDER_ID = re.compile(r"^vco://([^/]+)/([0-9]{1,18})$")
# Nodes of a control plane that no pool of ours made are not flagged as unowned.
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# What the observer writes of a machine's node (MachineNode), and how many rows a statement takes.
NODE_STATE = ("vm_id", "joined_at", "missing", "missing_reason")
BATCH = 1000


def provider_id(location: str, vm_id: int) -> str:
    return f"{PROVIDER_ID_PREFIX}{location}/{vm_id}"


def provider_id_parse(value: str) -> tuple[str, int] | None:
    """(location, VM id) from a providerID in our form; None for any other."""
    match = _PROVIDER_ID.match(value.strip())
    return (match.group(1), int(match.group(2))) if match else None


@dataclass(frozen=True)
class MachineRef:
    pk: int
    vm_name: str
    location: str
    vm_id: int | None


class NodeOwners:
    """The machines of one cluster, by VM (location, id) and by VM name."""

    def __init__(self, cluster: Cluster, machines: list[MachineRef]) -> None:
        self.cluster = cluster
        self.by_vm = {(m.location, m.vm_id): m for m in machines if m.vm_id is not None}
        self.by_name = {m.vm_name: m for m in machines}

    @classmethod
    def load(cls, cluster: Cluster, *, hold: bool = False) -> NodeOwners:
        """`hold`: keep the machines from being deleted until the transaction ends, for a
        caller that writes rows naming them (observe's node links and flags): a delete in
        flight (Machine.delete locks its row first) is waited for, and its machine then not
        seen. Taken before any row naming a machine is written, or the delete, clearing
        those rows, and this would each wait for the other."""
        rows = Machine.objects.filter(pool__cluster=cluster).values_list(
            "pk", "name", "pool__site__location__name", "vm_id"
        )
        return cls(
            cluster,
            [
                MachineRef(pk, naming.vm_name(cluster.name, name), location, vm_id)
                for pk, name, location, vm_id in (rows_key_share(rows) if hold else rows)
            ],
        )

    @property
    def machine_ids(self) -> set[int]:
        return {m.pk for m in self.by_name.values()}

    def owner(self, *, name: str, provider_id: str) -> MachineRef | None:
        vm = provider_id_parse(provider_id)
        if vm is not None and (found := self.by_vm.get(vm)) is not None:
            return found
        by_name = self.by_name.get(name)
        if by_name is None:
            return None
        if vm is not None and by_name.vm_id is not None:
            return None  # the providerID names another VM than the machine's own
        return by_name


@dataclass
class FlagCounts:
    nodes: int = 0
    machines: int = 0

    @property
    def writes(self) -> int:
        return self.nodes + self.machines


def node_owners_flag(
    *,
    cluster: Cluster,
    complete: bool,
    listed_at: datetime,
    now: datetime,
    join_timeout: timedelta,
    owners: NodeOwners | None = None,
) -> FlagCounts:
    """Link each mirrored node to its machine and raise or clear the flags.

    From any listing: a node's machine, a machine's first join, and clearing a machine's
    flag once its node shows. Only from a complete node listing (begun at `listed_at`):
    a node nobody owns is flagged (`unowned_since`), and a running machine whose VM
    started `join_timeout` before the listing began, with no node, is flagged
    (`MachineNode.missing`): by then its node had its time to join.

    `owners`: the cluster's machines, held (`NodeOwners.load(hold=True)`) since before
    the transaction wrote any row; only those are linked and flagged (a machine made since
    is the next pass's). Without, they are read here, not held.
    """
    owners = owners or NodeOwners.load(cluster)
    counts = FlagCounts()
    to_update: list[KubeNode] = []
    owned: set[int] = set()
    for node in KubeNode.objects.filter(cluster=cluster).only(
        "pk", "name", "provider_id", "labels", "machine_id", "unowned_since"
    ):
        found = owners.owner(name=node.name, provider_id=node.provider_id)
        machine_id = found.pk if found else None
        if machine_id is not None:
            owned.add(machine_id)
        unowned_since = node.unowned_since
        if machine_id is not None or _control_plane(node.labels):
            unowned_since = None
        elif complete:
            unowned_since = unowned_since or now
        if (node.machine_id, node.unowned_since) != (machine_id, unowned_since):
            node.machine_id, node.unowned_since, node.updated_at = machine_id, unowned_since, now
            to_update.append(node)
    if to_update:
        KubeNode.objects.bulk_update(to_update, ["machine", "unowned_since", "updated_at"])
    counts.nodes = len(to_update)

    fields = (
        "pk", "name", "vm_id", "phase", "delete_requested", "vm_started_at", "vm_created_at",
        "pool__site__location__name", "node_state__vm_id", "node_state__joined_at",
        "node_state__missing", "node_state__missing_reason", "deletion__machine",
    )  # fmt: skip
    machines = list(
        Machine.objects.filter(pk__in=owners.machine_ids)
        .select_related("pool__site__location", "node_state", "deletion")
        .only(*fields)
    )
    # The flags of the machines' present VMs: those of a VM the machine no longer has (it
    # was given a new one) start again, unjoined.
    due_before = listed_at - join_timeout
    to_make: list[MachineNode] = []
    to_change: list[MachineNode] = []
    for machine in machines:
        row = machine_node(machine)
        now_vm = row if row is not None and row.vm_id == machine.vm_id else None
        joined_at = now_vm.joined_at if now_vm is not None else None
        if machine.pk in owned:
            joined_at, due, reason = joined_at or now, False, ""
        elif not complete:
            # Only a whole listing says a node is missing, or no longer missing.
            due = now_vm.missing if now_vm is not None else False
            reason = now_vm.missing_reason if now_vm is not None else ""
        else:
            started = machine.vm_started_at or machine.vm_created_at
            due = (
                machine.phase == Machine.Phase.RUNNING
                and not machine.deletion_asked
                and started is not None
                and started <= due_before
            )
            reason = _missing_reason(cluster, machine, join_timeout, joined_at) if due else ""
        state: dict[str, Any] = {"vm_id": machine.vm_id, "joined_at": joined_at}
        state |= {"missing": due, "missing_reason": reason}
        if row is None:
            if joined_at is not None or due:
                to_make.append(MachineNode(machine=machine, **state))
        elif fields_assign(row, state):
            to_change.append(row)
    # A few statements for the whole cluster, however many machines joined or left.
    MachineNode.objects.bulk_create(to_make, batch_size=BATCH)
    MachineNode.objects.bulk_update(to_change, list(NODE_STATE), batch_size=BATCH)
    counts.machines += len(to_make) + len(to_change)
    return counts


def machine_node(machine: Machine) -> MachineNode | None:
    """The machine's node flags as read with it (`select_related("node_state")`); None:
    its node was never seen and it is not flagged."""
    try:
        return machine.node_state
    except MachineNode.DoesNotExist:
        return None


def _control_plane(labels: Mapping[str, str]) -> bool:
    return any(label in labels for label in CONTROL_PLANE_LABELS)


def _missing_reason(
    cluster: Cluster, machine: Machine, join_timeout: timedelta, joined_at: datetime | None
) -> str:
    vm_name = naming.vm_name(cluster.name, machine.name)
    expected = f"no node named {vm_name}"
    if machine.vm_id is not None:
        location = machine.pool.site.location.name
        expected += f" or with providerID {provider_id(location, machine.vm_id)}"
    minutes = int(join_timeout.total_seconds() // 60)
    if joined_at is None:
        return f"Never joined: {expected}, {minutes} minutes after its VM started."[:300]
    return (f"Its node left: {expected} (it joined {joined_at:%Y-%m-%d %H:%M} UTC).")[:300]
