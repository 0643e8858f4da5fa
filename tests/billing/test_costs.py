"""What things cost per hour now, at whitesky's own prices (billing.costs; the API's
answers are in tests/billing/test_costs_api.py), against prices computed by hand.

The prices are chosen so that an hour is a round figure (a month is 730 h):

* nl-ams (EUR): vcu 7.30 a month = 0.01 an hour, mu 3.65 = 0.005 per GiB and hour,
  vgu 730 = 1 an hour;
* ch-zrh (CHF): vcu 14.60 = 0.02, mu 7.30 = 0.01, vgu 1,460 = 2 an hour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from billing.costs import (
    LabelKeyInvalid,
    cost_by_label,
    costs_by,
    gpu_node_costs,
    machine_costs,
)
from cloud.models import Account, Location
from clusters.models import Cluster, Machine, MachinePool
from gpus.models import VgpuReservation
from kube.models import KubePod
from tests.factories import (
    AccountFactory,
    ClusterFactory,
    ClusterSiteFactory,
    KubeNodeFactory,
    KubePodFactory,
    LocationFactory,
    MachineFactory,
    MachinePoolFactory,
    VgpuReservationFactory,
    VirtualMachineFactory,
)

pytestmark = pytest.mark.django_db

State = VgpuReservation.State


def D(value: str) -> Decimal:
    return Decimal(value)


@dataclass
class World:
    account: Account
    ams: Location
    zrh: Location
    cluster: Cluster
    gpu: MachinePool  # ams: m0, m1
    cpu: MachinePool  # ams: m2, m3 (no VM yet)
    remote: MachinePool  # zrh: m4
    machines: dict[str, Machine]


def machine_make(pool: MachinePool, name: str, vm_id: int | None, vcpus: int, mib: int) -> Machine:
    machine = MachineFactory(pool=pool, name=name, vm_id=vm_id, phase=Machine.Phase.RUNNING)
    if vm_id is not None:
        VirtualMachineFactory(
            location=pool.site.location, vm_id=vm_id, name=f"capvco-x-{name}",
            vcpus=vcpus, memory_mib=mib,
        )  # fmt: skip
    return machine  # type: ignore[no-any-return]


def gpus_make(machine: Machine, *states: str) -> None:
    for index, state in enumerate(states):
        VgpuReservationFactory(machine=machine, owner_index=index, state=state)


def world_make(account: Account | None = None) -> World:
    account = account or AccountFactory(name="acme")
    ams = LocationFactory(
        account=account, name="nl-ams", currency="EUR", vgu_price=D("730"),
        prices={"vcu": 7.30, "mu": 3.65, "su": 50, "tu": 10, "piu": 5, "vgu": 730},
    )  # fmt: skip
    zrh = LocationFactory(
        account=account, name="ch-zrh", currency="CHF", vgu_price=D("1460"),
        prices={"vcu": 14.60, "mu": 7.30, "vgu": 1460},
    )  # fmt: skip
    cluster = ClusterFactory(account=account, name="prod")
    site_ams = ClusterSiteFactory(cluster=cluster, location=ams)
    site_zrh = ClusterSiteFactory(cluster=cluster, location=zrh)
    gpu = MachinePoolFactory(site=site_ams, name="gpu", gpus=True, replicas=2)
    cpu = MachinePoolFactory(site=site_ams, name="cpu", replicas=2)
    remote = MachinePoolFactory(site=site_zrh, name="remote", gpus=True)
    machines = {
        "m0": machine_make(gpu, "m0", 100, vcpus=8, mib=32 * 1024),
        "m1": machine_make(gpu, "m1", 101, vcpus=4, mib=16 * 1024),
        "m2": machine_make(cpu, "m2", 102, vcpus=2, mib=4096),
        "m3": machine_make(cpu, "m3", None, vcpus=0, mib=0),
        "m4": machine_make(remote, "m4", 200, vcpus=4, mib=8 * 1024),
    }
    gpus_make(machines["m0"], State.ATTACHED, State.ATTACHED)
    gpus_make(machines["m1"], State.ATTACHED, State.RESERVED, State.RELEASED)
    gpus_make(machines["m4"], State.ATTACHED)
    # Orphans in nl-ams: a vGPU no machine owns, and a VM of 2 vCPUs and 2 GiB.
    VgpuReservationFactory(orphaned=True, location=ams)
    VirtualMachineFactory(
        location=ams, vm_id=900, name="capvco-prod-gone", vcpus=2, memory_mib=2048,
        orphaned_since="2026-12-01T00:00:00Z", orphan_confirmations=1,
    )  # fmt: skip
    # The Kubernetes mirror: node-0 (m0, 2 vGPUs) runs a pod of `train` asking for 1, a
    # pod asking for none and a finished one; node-1 (m1, 1 attached) a pending pod of
    # `infer` asking for 1; node-4 (m4) nothing.
    for name, machine in [("node-0", "m0"), ("node-1", "m1"), ("node-4", "m4")]:
        KubeNodeFactory(cluster=cluster, machine=machines[machine], name=name)
    KubePodFactory(cluster=cluster, node_name="node-0", namespace="train", gpu_requests=1)
    KubePodFactory(cluster=cluster, node_name="node-0", namespace="web", gpu_requests=0)
    KubePodFactory(
        cluster=cluster, node_name="node-0", namespace="batch", gpu_requests=1,
        phase=KubePod.Phase.SUCCEEDED,
    )  # fmt: skip
    KubePodFactory(
        cluster=cluster, node_name="node-1", namespace="infer", gpu_requests=1,
        phase=KubePod.Phase.PENDING,
    )  # fmt: skip
    return World(account, ams, zrh, cluster, gpu, cpu, remote, machines)


@pytest.fixture
def world() -> World:
    return world_make()


def _figures(row: Any, *names: str) -> tuple[Any, ...]:
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name)
    return tuple(get(name) for name in names)


def test_a_machine_costs_its_vms_vcpus_and_memory_and_its_billed_vgpus(world: World) -> None:
    costs = {cost.name: cost for cost in machine_costs(Location.objects.all())}

    # m0: 8 vCPUs * 0.01 + 32 GiB * 0.005 = 0.08 + 0.16 = 0.24; 2 vGPUs * 1 = 2.
    assert (costs["m0"].compute, costs["m0"].vgpu, costs["m0"].currency) == (
        D("0.24"), D("2"), "EUR",
    )  # fmt: skip
    # m1: 4 * 0.01 + 16 * 0.005 = 0.12; attached + reserved are billed, released is not: 2.
    assert (costs["m1"].compute, costs["m1"].vgpus, costs["m1"].vgpu) == (D("0.12"), 2, D("2"))
    # m2: 2 * 0.01 + 4 GiB * 0.005 = 0.04; m3 has no VM yet: nothing.
    assert (costs["m2"].compute, costs["m2"].vgpu) == (D("0.04"), D("0"))
    assert (costs["m3"].compute, costs["m3"].vm_mirrored) == (D("0"), False)
    # m4 in CHF: 4 * 0.02 + 8 GiB * 0.01 = 0.16; 1 vGPU * 2 = 2.
    assert (costs["m4"].compute, costs["m4"].vgpu, costs["m4"].currency) == (
        D("0.16"), D("2"), "CHF",
    )  # fmt: skip


def test_a_pool_and_a_cluster_sum_their_machines_per_currency(world: World) -> None:
    pools = {row.pool_name: row for row in costs_by("pool", Location.objects.all())}
    clusters = costs_by("cluster", Location.objects.all())

    names = ("currency", "machines", "compute", "vgpu", "total")
    # gpu: m0 + m1 = (0.24 + 0.12) compute, (2 + 2) vGPUs = 4.36.
    assert _figures(pools["gpu"], *names) == ("EUR", 2, D("0.36"), D("4"), D("4.36"))
    assert _figures(pools["cpu"], *names) == ("EUR", 2, D("0.04"), D("0"), D("0.04"))
    assert _figures(pools["remote"], *names) == ("CHF", 1, D("0.16"), D("2"), D("2.16"))
    # prod: one row per currency, never one sum: EUR 0.36 + 0.04 and 4; CHF as remote.
    assert [_figures(row, "cluster_name", *names) for row in clusters] == [
        ("prod", "CHF", 1, D("0.16"), D("2"), D("2.16")),
        ("prod", "EUR", 4, D("0.40"), D("4"), D("4.40")),
    ]
    assert all(row.orphan_vgpu is None and row.orphan_vm is None for row in clusters)


def test_an_account_and_a_location_carry_their_orphans(world: World) -> None:
    accounts = costs_by("account", Location.objects.all())
    locations = {row.location_name: row for row in costs_by("location", Location.objects.all())}

    names = ("currency", "compute", "vgpu", "orphan_vgpu", "orphan_vm", "total")
    # EUR: 0.40 + 4 of machines, 1 orphaned vGPU (1), an orphan VM of 2 * 0.01 + 2 * 0.005
    # = 0.03: 5.43. CHF: m4 alone, no orphans.
    assert [_figures(row, *names) for row in accounts] == [
        ("CHF", D("0.16"), D("2"), D("0"), D("0"), D("2.16")),
        ("EUR", D("0.40"), D("4"), D("1"), D("0.03"), D("5.43")),
    ]
    assert _figures(locations["nl-ams"], *names) == _figures(accounts[1], *names)
    assert _figures(locations["ch-zrh"], *names) == _figures(accounts[0], *names)


def test_an_account_counts_its_machines_as_its_pools_do(world: World) -> None:
    # Another VM of m1's shape: counted per shape, each machine still counts.
    machine_make(world.gpu, "m5", 105, vcpus=4, mib=16 * 1024)
    pools = costs_by("pool", Location.objects.all())
    summed: dict[str, list[Any]] = {}
    for row in pools:
        total = summed.setdefault(row.currency, [0, D(0), D(0)])
        total[0] += row.machines
        total[1] += row.compute
        total[2] += row.vgpu

    accounts = costs_by("account", Location.objects.all())

    assert {row.currency: [row.machines, row.compute, row.vgpu] for row in accounts} == summed
    # m0-m3 and m5 (m3's VM not mirrored: a machine that costs nothing yet): 0.40, and
    # m5 as m1: 4 vCPUs at 0.01 and 16 GiB at 0.005 an hour.
    assert summed["EUR"] == [5, D("0.52"), D("4")]


def test_idle_gpus_are_attached_ones_no_pending_or_running_pod_requests(world: World) -> None:
    nodes = {node.name: node for node in gpu_node_costs(Location.objects.all())}
    pools = {row.pool_name: row for row in costs_by("pool", Location.objects.all())}
    clusters = {row.currency: row for row in costs_by("cluster", Location.objects.all())}

    names = ("attached", "requested", "idle_gpus", "idle")
    # node-0: 2 attached, `train` asks for 1 (the finished pod holds nothing): 1 idle, 1/h.
    assert _figures(nodes["node-0"], *names) == (2, 1, 1, D("1"))
    # node-1: its one attached vGPU is asked for by a pending pod (the reserved one is not
    # attached, so it is no node's).
    assert _figures(nodes["node-1"], *names) == (1, 1, 0, D("0"))
    # node-4: 1 attached in CHF, nothing asks: 2 CHF/h idle.
    assert _figures(nodes["node-4"], *names) == (1, 0, 1, D("2"))
    assert _figures(pools["gpu"], "idle_gpus", "idle") == (1, D("1"))
    assert _figures(pools["cpu"], "idle_gpus", "idle") == (0, D("0"))
    assert _figures(clusters["CHF"], "idle_gpus", "idle") == (1, D("2"))
    assert _figures(clusters["EUR"], "idle_gpus", "idle") == (1, D("1"))


def test_namespaces_share_gpu_cost_by_request_and_idle_is_kept_apart(world: World) -> None:
    rows = costs_by("namespace", Location.objects.all())

    names = ("cluster_name", "namespace", "currency", "compute", "vgpu", "idle_gpus", "idle")
    assert [_figures(row, *names) for row in rows] == [
        ("prod", "infer", "EUR", None, D("1"), 0, D("0")),
        ("prod", "train", "EUR", None, D("1"), 0, D("0")),
        ("prod", None, "CHF", None, D("2"), 1, D("2")),
        ("prod", None, "EUR", None, D("1"), 1, D("1")),
    ]
    # Together they are what the GPU nodes' attached vGPUs cost: 3 EUR and 2 CHF an hour.
    assert sum(row.vgpu for row in rows if row.currency == "EUR") == D("3")


def test_requests_beyond_the_attached_vgpus_share_their_cost(world: World) -> None:
    # Time-slicing: node-4's one vGPU (2 CHF/h) is asked for 3 times, 2 by `a`, 1 by `b`.
    KubePodFactory(cluster=world.cluster, node_name="node-4", namespace="a", gpu_requests=2)
    KubePodFactory(cluster=world.cluster, node_name="node-4", namespace="b", gpu_requests=1)

    node = next(n for n in gpu_node_costs(Location.objects.all()) if n.name == "node-4")

    # 2 * 2/3 and 2 * 1/3; nothing idle.
    assert (node.idle_gpus, node.idle) == (0, D("0"))
    assert {ns: share.quantize(D("0.0001")) for ns, share in node.shares.items()} == {
        "a": D("1.3333"), "b": D("0.6667"),
    }  # fmt: skip


def test_two_currencies_are_never_summed(world: World) -> None:
    for group_by in ("account", "location", "cluster", "pool", "namespace"):
        rows = costs_by(group_by, Location.objects.all())  # type: ignore[arg-type]
        keys = [
            (row.account, row.location, row.cluster, row.pool, row.namespace, row.currency)
            for row in rows
        ]
        assert len(keys) == len(set(keys)), group_by
        # Nothing adds EUR to CHF: no figure is 2 CHF + anything in EUR.
        assert D("7.59") not in {row.total for row in rows}, group_by


def labelled(world: World) -> None:
    """Labels on world's pods, and node-5 (m5 in nl-ams, 2 vGPUs attached) running one pod
    of `team: vision` on both of them; another cluster's pod of `team: ml` besides."""
    pods = KubePod.objects.filter(cluster=world.cluster)
    pods.filter(namespace__in=("train", "batch")).update(labels={"team": "ml"})
    pods.filter(namespace="infer").update(labels={"project": "x"})  # no `team`
    m5 = machine_make(world.gpu, "m5", 105, vcpus=4, mib=16 * 1024)
    gpus_make(m5, State.ATTACHED, State.ATTACHED)
    KubeNodeFactory(cluster=world.cluster, machine=m5, name="node-5")
    KubePodFactory(
        cluster=world.cluster, node_name="node-5", namespace="cv", gpu_requests=2,
        labels={"team": "vision", "app.kubernetes.io/name": "trainer"},
    )  # fmt: skip
    KubePodFactory(
        cluster=world.cluster, node_name="node-4", namespace="train", labels={"team": "ml"}
    )
    other = machine_make(
        MachinePoolFactory(site__location=world.ams, site__cluster__account=world.account),
        "o0", 300, vcpus=2, mib=4096,
    )  # fmt: skip
    gpus_make(other, State.ATTACHED)
    KubeNodeFactory(cluster=other.pool.cluster, machine=other, name="node-0")
    KubePodFactory(cluster=other.pool.cluster, node_name="node-0", labels={"team": "ml"})


def _label_rows(key: str, world: World) -> list[tuple[Any, ...]]:
    rows = cost_by_label(key, cluster=world.cluster, locations=Location.objects.all())
    return [(row.currency, row.name, row.gpus, row.vgpu) for row in rows]


def test_a_label_shares_gpu_cost_by_request_with_idle_and_unlabelled_pods_apart(
    world: World, django_assert_num_queries: Any
) -> None:
    labelled(world)

    with django_assert_num_queries(4):
        rows = _label_rows("team", world)

    assert rows == [
        # node-4's one vGPU (2 CHF/h), requested by a pod of ml: its whole cost.
        ("CHF", "ml", 1, D("2.0000")),
        # node-0: ml's running pod holds 1 of its 2 vGPUs (its finished pod holds none),
        # the other is idle: kept apart, not spread over ml.
        ("EUR", "ml", 1, D("1.0000")),
        # node-5: one pod on both of its vGPUs.
        ("EUR", "vision", 2, D("2.0000")),
        # node-1: the pending pod without a `team` label.
        ("EUR", "(no label)", 1, D("1.0000")),
        ("EUR", "(idle)", 1, D("1.0000")),
    ]
    # The rule the namespaces are split by: per currency, the same sums (of this cluster's
    # GPU nodes; the other cluster's pod of ml is not in its figures).
    by_namespace: dict[str, Decimal] = {}
    for row in costs_by("namespace", Location.objects.all()):
        if row.cluster == world.cluster.pk:
            by_namespace[row.currency] = by_namespace.get(row.currency, D(0)) + row.vgpu
    assert by_namespace == {"CHF": D("2"), "EUR": D("5")}
    assert {c: sum(r[3] for r in rows if r[0] == c) for c in ("CHF", "EUR")} == by_namespace


def test_a_prefixed_label_key_is_read_as_one_key(world: World) -> None:
    labelled(world)

    assert _label_rows("app.kubernetes.io/name", world) == [
        ("CHF", "(no label)", 1, D("2.0000")),
        ("EUR", "trainer", 2, D("2.0000")),
        ("EUR", "(no label)", 2, D("2.0000")),
        ("EUR", "(idle)", 1, D("1.0000")),
    ]


def test_a_label_asked_for_by_more_than_the_attached_vgpus_shares_them(world: World) -> None:
    # Time-slicing: node-4's one vGPU (2 CHF/h) asked for 3 times: 2 by a, 1 by a pod
    # without the label.
    KubePodFactory(cluster=world.cluster, node_name="node-4", gpu_requests=2, labels={"t": "a"})
    KubePodFactory(cluster=world.cluster, node_name="node-4", gpu_requests=1)

    assert _label_rows("t", world)[:2] == [
        ("CHF", "a", 2, D("1.3333")),
        ("CHF", "(no label)", 1, D("0.6667")),
    ]


def test_a_label_with_an_empty_value_is_not_a_pod_without_the_label(world: World) -> None:
    KubePodFactory(cluster=world.cluster, node_name="node-4", labels={"team": ""})

    assert _label_rows("team", world)[0] == ("CHF", "(empty value)", 1, D("2.0000"))


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "Give a label key"),
        ("team!", "'team!' is not a label key: its name must be 1 to 63"),
        ("-team", "its name must be 1 to 63 letters, digits, '-', '_' or '.', starting and"),
        ("a" * 64, "its name must be 1 to 63"),
        ("Example.com/team", "its prefix before '/' must be a DNS subdomain"),
        (f"{'a' * 254}/team", "at most 253 characters"),
        ("a/b/c", "its name after '/' must be"),
        ("t" * 400, "A label key has at most 317 characters, not 400."),
    ],
)
def test_a_key_that_is_not_a_label_key_is_refused_naming_the_problem(
    world: World, key: str, problem: str
) -> None:
    with pytest.raises(LabelKeyInvalid, match=re.escape(problem)):
        cost_by_label(key, cluster=world.cluster, locations=Location.objects.all())
