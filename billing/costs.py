"""What things cost now, per hour, at whitesky's own prices (selectors: reads only).

The prices are the account's monthly price per unit at each location, as
`listCustomerLocations` lists them (`cloud.Location.prices`, `vgu_price`, `currency`); an
hour is a month / `gpus.models.HOURS_PER_MONTH` (730 h). Counted:

* a machine's VM: its vCPUs (`vcu`) and memory (`mu`, per GiB), as the mirrored VM
  (`cloud.VirtualMachine`, by location and the VM id the machine holds) lists them; a
  machine whose VM is not mirrored (not created yet, or not listed yet) costs nothing here;
* a machine's vGPUs: its reservations in a billed state (`gpus.models.BILLED_STATES`), at
  the location's vGPU price;
* orphans: orphaned vGPUs (`gpus.selectors.orphans_list`) and orphan VMs
  (`clusters.orphans.vm_orphans_list`, their vCPUs and memory), per location.

Not counted: disks (`su`) and IOPS (`tu`), which the VM listing does not carry, public IPs
(`piu`), Windows (`wu`), flash storage, object storage and network (`nu`, whose metering
whitesky does not document). NICs: whitesky's prices have no unit per NIC, so a leaked
NIC costs nothing here (its public IP, if it has one, would be `piu`, not mirrored).
Billed vGPUs that are neither a machine's nor flagged orphaned (not named by us, or a
reserve still being resolved) are not in these figures.

Idle and attribution (OpenCost's rule, by request): a node's GPUs are the vGPUs attached
to its machine's VM; the pods placed on it (pending or running: both hold their request)
share that cost by the GPUs they request, per namespace or per value of a pod label
(`cost_by_label`); what no pod requests is idle, and kept apart, never spread over the
pods. Requests beyond the attached vGPUs (time-slicing) share the same cost, scaled down.
Since when a GPU is idle is the money history's to know (billing.IdleSpell), not this
rate's.

Two currencies are never added: every figure is per currency, and a location has one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from django.db.models import Count, Exists, Expression, F, OuterRef, QuerySet, Subquery, Sum
from django.db.models.fields.json import KeyTextTransform

from capvco_web.integrations.kube import label_key_problem
from cloud.models import Location, VirtualMachine
from clusters.models import Cluster, Machine, MachinePool
from clusters.orphans import vm_orphans_list
from gpus.models import BILLED_STATES, HOURLY_PLACES, VgpuReservation, hourly_price
from gpus.selectors import orphans_list
from kube.models import KubeNode, KubePod
from kube.selectors import ACTIVE_POD_PHASES

GroupBy = Literal["account", "location", "cluster", "pool", "namespace"]
GROUP_BY: tuple[GroupBy, ...] = ("account", "location", "cluster", "pool", "namespace")
ZERO = Decimal(0)


@dataclass(frozen=True)
class MachineCost:
    """What one machine costs per hour."""

    machine_id: int
    name: str
    pool_id: int
    cluster_id: int
    location_id: int
    account_id: int
    currency: str
    compute: Decimal  # its VM's vCPUs and memory; 0 when its VM is not mirrored
    vgpu: Decimal  # its billed vGPUs
    vgpus: int
    vm_mirrored: bool

    @property
    def total(self) -> Decimal:
        return self.compute + self.vgpu


@dataclass(frozen=True)
class GpuNodeCost:
    """A node's attached vGPUs, what they cost per hour, and who requests them."""

    node_id: int
    name: str
    machine_id: int
    pool_id: int
    cluster_id: int
    location_id: int
    account_id: int
    currency: str
    attached: int  # vGPUs attached to its machine's VM
    requested: int  # GPUs its pending and running pods request
    cost: Decimal  # the attached vGPUs, per hour
    idle_gpus: int
    idle: Decimal  # the part of `cost` no pod requests
    # The rest, shared by request: per namespace, or per value of the label asked for
    # (None: its pods without the label); and the GPUs each requests.
    shares: dict[str | None, Decimal]
    requests: dict[str | None, int]


@dataclass(frozen=True)
class OrphanCost:
    """What one location's orphans cost per hour."""

    location_id: int
    account_id: int
    account_name: str
    currency: str
    vgpus: int
    vgpu: Decimal
    vms: int
    vm: Decimal  # their vCPUs and memory (their vGPUs are orphans of their own)


@dataclass
class CostRow:
    """One group's hourly figures in one currency. Figures that do not apply to the
    grouping are None: compute for a namespace (only vGPUs are attributed), orphans below
    a location."""

    currency: str
    account: int
    account_name: str
    location: int | None = None
    location_name: str | None = None
    cluster: int | None = None
    cluster_name: str | None = None
    pool: int | None = None
    pool_name: str | None = None
    namespace: str | None = None
    compute: Decimal | None = ZERO
    vgpu: Decimal = ZERO
    idle_gpus: int = 0
    idle: Decimal = ZERO  # part of vgpu
    orphan_vgpu: Decimal | None = None
    orphan_vm: Decimal | None = None
    machines: int = 0
    total: Decimal = field(default=ZERO)

    def finish(self) -> CostRow:
        # Attribute by attribute, not by name: a year's series finishes thousands of rows.
        total = ZERO
        for part in (self.compute, self.vgpu, self.orphan_vgpu, self.orphan_vm):
            if part is not None:
                total += part
        self.total = total.quantize(HOURLY_PLACES)
        self.vgpu = self.vgpu.quantize(HOURLY_PLACES)
        self.idle = self.idle.quantize(HOURLY_PLACES)
        if self.compute is not None:
            self.compute = self.compute.quantize(HOURLY_PLACES)
        if self.orphan_vgpu is not None:
            self.orphan_vgpu = self.orphan_vgpu.quantize(HOURLY_PLACES)
        if self.orphan_vm is not None:
            self.orphan_vm = self.orphan_vm.quantize(HOURLY_PLACES)
        return self


def _locations(locations: QuerySet[Location]) -> dict[int, Location]:
    return {loc.pk: loc for loc in locations.select_related("account").order_by("pk")}


class _ComputeHourly:
    """What a VM of a shape costs per hour in a location: the VM's own formula, on a row
    built from the values read (no query per VM), once per shape (a fleet has few)."""

    def __init__(self) -> None:
        self.prices: dict[tuple[int, int, int], Decimal] = {}

    def __call__(self, location: Location, vcpus: int, memory_mib: int) -> Decimal:
        shape = (location.pk, vcpus, memory_mib)
        price = self.prices.get(shape)
        if price is None:
            vm = VirtualMachine(location=location, vcpus=vcpus, memory_mib=memory_mib)
            price = self.prices[shape] = hourly_price(vm.compute_monthly_price())
        return price


def pool_machine_hourly(pool: MachinePool) -> Decimal:
    """What one more machine of the pool would cost per hour at its location's prices: its
    VM's shape and its vGPUs, by the same formulas as a made machine (`machine_costs`)."""
    location = pool.site.location
    compute = hourly_price(
        VirtualMachine(
            location=location, vcpus=pool.vcpus, memory_mib=pool.memory_mib
        ).compute_monthly_price()
    )
    return compute + pool.gpu_count * hourly_price(location.vgu_price)


def machine_costs(locations: QuerySet[Location]) -> list[MachineCost]:
    """Every machine of the pools in `locations`, with what it costs per hour: four
    queries, however many machines."""
    return _machine_costs(_locations(locations))


def _billed_vgpus(by_id: dict[int, Location], *, per: str) -> dict[int, int]:
    """The billed vGPUs of the machines in the locations, counted per `per` (a machine,
    or its location)."""
    return dict(
        VgpuReservation.objects.filter(
            machine__pool__site__location_id__in=by_id, state__in=BILLED_STATES
        )
        .order_by()
        .values(per)
        .annotate(n=Count("pk"))
        .values_list(per, "n")
    )


def _machine_costs(by_id: dict[int, Location]) -> list[MachineCost]:
    machines = list(
        Machine.objects.filter(pool__site__location_id__in=by_id)
        .order_by("pk")
        .values_list(
            "pk", "name", "vm_id", "pool_id", "pool__cluster_id", "pool__site__location_id"
        )
    )
    held = Machine.objects.filter(
        pool__site__location_id=OuterRef("location_id"), vm_id=OuterRef("vm_id")
    )
    vms = {
        (location_id, vm_id): (vcpus, memory_mib)
        for location_id, vm_id, vcpus, memory_mib in VirtualMachine.objects.filter(
            Exists(held), location_id__in=by_id
        ).values_list("location_id", "vm_id", "vcpus", "memory_mib")
    }
    vgpus = _billed_vgpus(by_id, per="machine_id")
    compute_hourly = _ComputeHourly()
    found = []
    for pk, name, vm_id, pool_id, cluster_id, location_id in machines:
        location = by_id[location_id]
        vm = vms.get((location_id, vm_id)) if vm_id is not None else None
        count = vgpus.get(pk, 0)
        found.append(
            MachineCost(
                machine_id=pk,
                name=name,
                pool_id=pool_id,
                cluster_id=cluster_id,
                location_id=location_id,
                account_id=location.account_id,
                currency=location.currency,
                compute=compute_hourly(location, *vm) if vm is not None else ZERO,
                vgpu=count * hourly_price(location.vgu_price),
                vgpus=count,
                vm_mirrored=vm is not None,
            )
        )
    return found


def _machine_totals(by_id: dict[int, Location]) -> list[tuple[int, int, Decimal, Decimal]]:
    """Per location: its machines, what their VMs and their vGPUs cost per hour (the sums
    of `_machine_costs`, counted per VM shape in the database: three queries)."""
    vm = VirtualMachine.objects.filter(
        location_id=OuterRef("pool__site__location_id"), vm_id=OuterRef("vm_id")
    )
    shapes = (
        Machine.objects.filter(pool__site__location_id__in=by_id)
        .annotate(
            vcpus=Subquery(vm.values("vcpus")[:1]), memory_mib=Subquery(vm.values("memory_mib")[:1])
        )
        .order_by()
        .values_list("pool__site__location_id", "vcpus", "memory_mib")
        .annotate(n=Count("pk"))
    )
    vgpus = _billed_vgpus(by_id, per="machine__pool__site__location_id")
    compute_hourly = _ComputeHourly()
    totals: dict[int, list[Any]] = {}
    for location_id, vcpus, memory_mib, n in shapes:
        total = totals.setdefault(location_id, [0, ZERO])
        total[0] += n
        if vcpus is not None:  # a VM not mirrored costs nothing here
            total[1] += n * compute_hourly(by_id[location_id], vcpus, memory_mib)
    return [
        (pk, machines, compute, vgpus.get(pk, 0) * hourly_price(by_id[pk].vgu_price))
        for pk, (machines, compute) in totals.items()
    ]


def _shares(
    cost: Decimal, attached: int, requests: dict[str | None, int]
) -> tuple[int, Decimal, dict[str | None, Decimal]]:
    """The idle GPUs, the idle cost, and each requester's share of `cost` by request."""
    requested = sum(requests.values())
    # Requests beyond what is attached (time-slicing) share the same cost.
    units = max(requested, attached)
    if units == 0:
        return 0, ZERO, {}
    idle_gpus = max(attached - requested, 0)
    return (
        idle_gpus,
        cost * idle_gpus / units,
        {requester: cost * n / units for requester, n in requests.items()},
    )


def gpu_node_costs(locations: QuerySet[Location], *, pod_labels: bool = False) -> list[GpuNodeCost]:
    """Every node of a machine in `locations` whose VM has vGPUs attached: its GPU cost
    per hour, split into the namespaces that request it and the idle rest. Four queries.
    With `pod_labels`, split per namespace and whole set of pod labels (`pod_requester`).

    A machine listed under two node names (a node renamed between listings) counts once,
    under its first node; the pods of both share its GPUs."""
    return _gpu_node_costs(_locations(locations), pod_labels=pod_labels)


def pod_requester(namespace: str, labels: dict[str, str]) -> str:
    """A requester of `gpu_node_costs(pod_labels=True)`: the pods of one namespace that
    carry exactly `labels`, as one text (the same set whatever the order it was listed in)."""
    return json.dumps([namespace, labels], sort_keys=True, separators=(",", ":"))


def pod_requester_parts(requester: str) -> tuple[str, dict[str, str]]:
    namespace, labels = json.loads(requester)
    return namespace, labels


def _gpu_node_costs(
    by_id: dict[int, Location],
    *,
    of_cluster: int | None = None,
    label: str | None = None,
    pod_labels: bool = False,
) -> list[GpuNodeCost]:
    """As gpu_node_costs; of one cluster's machines when `of_cluster` is given, and shared
    per value of the pod label `label` (a valid key) instead of per namespace when given,
    or per namespace and whole label set with `pod_labels`."""
    reservations = VgpuReservation.objects.filter(
        machine__pool__site__location_id__in=by_id, state=VgpuReservation.State.ATTACHED
    )
    if of_cluster is not None:
        reservations = reservations.filter(machine__pool__cluster_id=of_cluster)
    attached = dict(
        reservations.order_by()
        .values("machine_id")
        .annotate(n=Count("pk"))
        .values_list("machine_id", "n")
    )
    nodes = list(
        KubeNode.objects.filter(machine_id__in=attached)
        .order_by("machine_id", "pk")
        .values_list(
            "pk",
            "name",
            "cluster_id",
            "machine_id",
            "machine__pool_id",
            "machine__pool__site__location_id",
        )
    )
    names_of: dict[int, set[tuple[int, str]]] = defaultdict(set)
    for _, name, cluster_id, machine_id, _, _ in nodes:
        names_of[machine_id].add((cluster_id, name))
    wanted = {key for keys in names_of.values() for key in keys}
    pods: dict[tuple[int, str], dict[str | None, int]] = defaultdict(dict)
    requester: Expression | F = F("namespace") if label is None else label_value(label)
    placed = KubePod.objects.filter(
        cluster_id__in={cluster for cluster, _ in wanted},
        phase__in=ACTIVE_POD_PHASES,
        gpu_requests__gt=0,
    ).exclude(node_name="")
    rows: Iterable[tuple[int, str, str | None, int]]
    if pod_labels:
        rows = (
            (cluster_id, node_name, pod_requester(namespace, labels), n)
            for cluster_id, node_name, namespace, labels, n in placed.order_by()
            .values("cluster_id", "node_name", "namespace", "labels")
            .annotate(n=Sum("gpu_requests"))
            .values_list("cluster_id", "node_name", "namespace", "labels", "n")
        )
    else:
        rows = (
            placed.annotate(requester=requester)
            .order_by()
            .values("cluster_id", "node_name", "requester")
            .annotate(n=Sum("gpu_requests"))
            .values_list("cluster_id", "node_name", "requester", "n")
        )
    for pod_cluster_id, node_name, by, n in rows:
        if (pod_cluster_id, node_name) in wanted:
            # Added up: SQLite keeps labels as text, one set in two orders is two groups.
            pods[pod_cluster_id, node_name][by] = pods[pod_cluster_id, node_name].get(by, 0) + n
    found = []
    seen: set[int] = set()
    for pk, name, cluster_id, machine_id, pool_id, location_id in nodes:
        if machine_id in seen:
            continue
        seen.add(machine_id)
        requests: dict[str | None, int] = defaultdict(int)
        for key in names_of[machine_id]:
            for by, n in pods.get(key, {}).items():
                requests[by] += n
        location = by_id[location_id]
        count = attached[machine_id]
        cost = count * hourly_price(location.vgu_price)
        idle_gpus, idle, shares = _shares(cost, count, requests)
        found.append(
            GpuNodeCost(
                node_id=pk,
                name=name,
                machine_id=machine_id,
                pool_id=pool_id,
                cluster_id=cluster_id,
                location_id=location_id,
                account_id=location.account_id,
                currency=location.currency,
                attached=count,
                requested=sum(requests.values()),
                cost=cost,
                idle_gpus=idle_gpus,
                idle=idle,
                shares=shares,
                requests=dict(requests),
            )
        )
    return found


def orphan_costs(locations: QuerySet[Location]) -> list[OrphanCost]:
    """What the orphaned vGPUs and orphan VMs of each location cost per hour (every
    location in `locations`, none: 0). Two queries besides the locations'."""
    return _orphan_costs(_locations(locations))


def _orphan_costs(by_id: dict[int, Location]) -> list[OrphanCost]:
    vgpus = dict(
        orphans_list()
        .filter(location_id__in=by_id)
        .order_by()
        .values("location_id")
        .annotate(n=Count("pk"))
        .values_list("location_id", "n")
    )
    vms: dict[int, tuple[int, Decimal]] = {}
    compute_hourly = _ComputeHourly()
    orphan_vms = (
        vm_orphans_list()
        .filter(location_id__in=by_id)
        .order_by()
        .values_list("location_id", "vcpus", "memory_mib")
    )
    for location_id, vcpus, memory_mib in orphan_vms:
        count, cost = vms.get(location_id, (0, ZERO))
        vms[location_id] = (
            count + 1,
            cost + compute_hourly(by_id[location_id], vcpus, memory_mib),
        )
    return [
        OrphanCost(
            location_id=pk,
            account_id=location.account_id,
            account_name=location.account.name,
            currency=location.currency,
            vgpus=vgpus.get(pk, 0),
            vgpu=vgpus.get(pk, 0) * hourly_price(location.vgu_price),
            vms=vms.get(pk, (0, ZERO))[0],
            vm=vms.get(pk, (0, ZERO))[1],
        )
        for pk, location in by_id.items()
    ]


@dataclass(frozen=True)
class _Names:
    accounts: dict[int, str]
    locations: dict[int, str]
    clusters: dict[int, str]
    pools: dict[int, tuple[str, int, int, int]]  # name, cluster, location, account


def _names(locations: dict[int, Location], *, of_pools: bool = True) -> _Names:
    """The names a row shows (those of pools and clusters only when `of_pools`)."""
    accounts = {loc.account_id: loc.account.name for loc in locations.values()}
    names = {pk: loc.name for pk, loc in locations.items()}
    if not of_pools:
        return _Names(accounts=accounts, locations=names, clusters={}, pools={})
    pools = {
        pk: (name, cluster_id, location_id, account_id)
        for pk, name, cluster_id, location_id, account_id in MachinePool.objects.filter(
            site__location_id__in=locations
        ).values_list("pk", "name", "cluster_id", "site__location_id", "cluster__account_id")
    }
    clusters = dict(
        MachinePool.objects.filter(site__location_id__in=locations)
        .order_by()
        .values_list("cluster_id", "cluster__name")
        .distinct()
    )
    return _Names(accounts=accounts, locations=names, clusters=clusters, pools=pools)


def costs_by(group_by: GroupBy, locations: QuerySet[Location]) -> list[CostRow]:
    """The hourly figures of what is in `locations`, one row per group and currency:
    every location's account and location (0 when nothing costs), every pool and its
    cluster, and each namespace that requests GPUs with, per cluster, the idle rest
    (namespace None). A constant number of queries, however many machines."""
    by_id = _locations(locations)
    names = _names(by_id, of_pools=group_by not in ("account", "location"))
    rows: dict[tuple[object, ...], CostRow] = {}

    def row(key: tuple[object, ...], **keys: object) -> CostRow:
        if key not in rows:
            rows[key] = CostRow(**keys)  # type: ignore[arg-type]
        return rows[key]

    def at_location(location_id: int) -> CostRow:
        location = by_id[location_id]
        account = {
            "account": location.account_id,
            "account_name": names.accounts[location.account_id],
        }
        if group_by == "account":
            return row(
                (location.account_id, location.currency), currency=location.currency, **account
            )
        return row(
            (location_id,),
            currency=location.currency,
            location=location_id,
            location_name=location.name,
            **account,
        )

    def in_pool(pool_id: int) -> CostRow:
        name, cluster_id, location_id, account_id = names.pools[pool_id]
        currency = by_id[location_id].currency
        keys: dict[str, object] = {
            "currency": currency,
            "account": account_id,
            "account_name": names.accounts[account_id],
            "cluster": cluster_id,
            "cluster_name": names.clusters[cluster_id],
        }
        if group_by == "cluster":
            return row((cluster_id, currency), **keys)
        return row((pool_id,), **keys, pool=pool_id, pool_name=name,
                   location=location_id, location_name=by_id[location_id].name)  # fmt: skip

    if group_by in ("account", "location"):
        for orphans in _orphan_costs(by_id):
            target = at_location(orphans.location_id)
            target.orphan_vgpu = (target.orphan_vgpu or ZERO) + orphans.vgpu
            target.orphan_vm = (target.orphan_vm or ZERO) + orphans.vm
    elif group_by in ("cluster", "pool"):
        for pool_id in sorted(names.pools):
            in_pool(pool_id)
    else:
        return _by_namespace(_gpu_node_costs(by_id), names)

    def pick(cost: MachineCost | GpuNodeCost) -> CostRow:
        if group_by in ("account", "location"):
            return at_location(cost.location_id)
        return in_pool(cost.pool_id)

    if group_by in ("account", "location"):  # summed per location, not machine by machine
        for location_id, machines, compute, vgpu in _machine_totals(by_id):
            target = at_location(location_id)
            target.compute = (target.compute or ZERO) + compute
            target.vgpu += vgpu
            target.machines += machines
    else:
        for machine in _machine_costs(by_id):
            target = pick(machine)
            target.compute = (target.compute or ZERO) + machine.compute
            target.vgpu += machine.vgpu
            target.machines += 1
    for node in _gpu_node_costs(by_id):
        target = pick(node)
        target.idle_gpus += node.idle_gpus
        target.idle += node.idle
    return _sorted(rows.values())


def _by_namespace(nodes: Iterable[GpuNodeCost], names: _Names) -> list[CostRow]:
    rows: dict[tuple[int, str | None, str], CostRow] = {}
    for node in nodes:
        keys = {
            "currency": node.currency,
            "account": node.account_id,
            "account_name": names.accounts[node.account_id],
            "cluster": node.cluster_id,
            "cluster_name": names.clusters[node.cluster_id],
            "compute": None,
        }
        parts: list[tuple[str | None, Decimal]] = list(node.shares.items())
        if node.idle_gpus:
            parts.append((None, node.idle))
        for namespace, cost in parts:
            key = (node.cluster_id, namespace, node.currency)
            target = rows.setdefault(key, CostRow(namespace=namespace, **keys))  # type: ignore[arg-type]
            target.vgpu += cost
            if namespace is None:
                target.idle_gpus += node.idle_gpus
                target.idle += cost
    return _sorted(rows.values())


def _sorted(rows: Iterable[CostRow]) -> list[CostRow]:
    def key(row: CostRow) -> tuple[str, ...]:
        return (
            row.account_name,
            row.cluster_name or "",
            row.pool_name or "",
            row.location_name or "",
            # The idle rest after the namespaces of its cluster.
            "\uffff" if row.namespace is None and row.cluster else row.namespace or "",
            row.currency,
        )

    return [row.finish() for row in sorted(rows, key=key)]


# What a row that is no value shows: no label value can be written so (parentheses).
NO_LABEL = "(no label)"
EMPTY_VALUE = "(empty value)"  # the label is there, its value "" (as Kubernetes allows)
IDLE = "(idle)"


def label_value(key: str) -> KeyTextTransform:
    """A row's value of the label `key` in its `labels`, as text: null where it has no such
    label (a pod's, or a label set's)."""
    return KeyTextTransform(key, "labels")


class LabelKeyInvalid(ValueError):
    """Not a Kubernetes label key; the message names the problem."""


@dataclass
class LabelCostRow:
    """One value of a pod label in one currency: the GPUs its pods request on the
    cluster's GPU nodes and their share of what those nodes' attached vGPUs cost per hour;
    or the pods without the label; or the idle GPUs, requested by no pod."""

    currency: str
    value: str | None  # None: the pods without the label, or the idle GPUs
    idle: bool = False
    gpus: int = 0  # requested by its pods; of the idle row, the GPUs no pod requests
    vgpu: Decimal = ZERO  # its share of the attached vGPUs, per hour

    @property
    def name(self) -> str:
        if self.idle:
            return IDLE
        if self.value is None:
            return NO_LABEL
        return self.value or EMPTY_VALUE


def cost_by_label(
    key: str, *, cluster: Cluster, locations: QuerySet[Location]
) -> list[LabelCostRow]:
    """What the GPU nodes of the cluster's machines in `locations` cost per hour now,
    attributed by the value of the pod label `key` (OpenCost's rule, as per namespace):
    each value's pods share a node's cost by the GPUs they request, the pods without the
    label likewise on a row of their own, and the GPUs no pod requests on the idle row,
    never spread over the pods. A row per value and currency: values by name, then the
    pods without the label, then idle. Four queries, however many pods.

    Raises LabelKeyInvalid, naming the problem, when `key` is not a label key."""
    if problem := label_key_problem(key):
        raise LabelKeyInvalid(problem)
    rows: dict[tuple[str, bool, str | None], LabelCostRow] = {}

    def row(currency: str, value: str | None, *, idle: bool = False) -> LabelCostRow:
        found = rows.get((currency, idle, value))
        if found is None:
            found = rows[currency, idle, value] = LabelCostRow(currency, value, idle)
        return found

    for node in _gpu_node_costs(_locations(locations), of_cluster=cluster.pk, label=key):
        for value, share in node.shares.items():
            target = row(node.currency, value)
            target.gpus += node.requests[value]
            target.vgpu += share
        if node.idle_gpus:
            idle = row(node.currency, None, idle=True)
            idle.gpus += node.idle_gpus
            idle.vgpu += node.idle
    for found in rows.values():
        found.vgpu = found.vgpu.quantize(HOURLY_PLACES)
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1], k[2] is None, k[2] or ""))]
