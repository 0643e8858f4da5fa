"""The SQL queries of every page and fragment do not grow with the rows: at most 20, with
10 and with 10,000 reservations (and as many audit events, Kubernetes pods and pod NICs,
a node for every 10 of them and a leaked NIC for every 20; and, for the pages, a pod
waiting for a GPU on no node for every 10). The cluster page is counted
again with every planner of its plan at work: its Kubernetes observed, GPU nodes whose
labels are to be set, SR-IOV on with pod NICs whose pods are gone and leaked NICs due;
and so is the same plan as the API's dry run (`GET /api/v1/clusters/{id}/plan/`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from billing.models import IdleSpell
from capvco_web.models import AuditEvent
from cloud.models import Account
from gpus.models import ListedVgpu, VgpuReservation
from kube.models import KubeNode, KubePod, MachineNode
from kube.plan import NODE_LABELS
from sriov.models import GonePod, LeakedNic, PodNic, SriovConfig
from sriov.reclaim_plan import LEAKED_NIC_DETACH, POD_NIC_DETACH
from tests.bench.support import page_queries
from tests.dashboard.conftest import Kube, World
from tests.factories import JWT, ExternalNetworkFactory

pytestmark = pytest.mark.django_db
State = VgpuReservation.State
MOST = 20
# The money section (month to date, forecast, charts: dashboard.money) comes with the whole
# overview, location and cluster page, not with their refreshes; its queries do not grow
# with the history or the window either (tests/dashboard/test_money.py); what orphans cost
# is read from the leak ledger, once per series.
MONEY = 32
WITH_MONEY = {"overview", "location", "stale location", "cluster", "cluster nodes last page"}


def populate(world: World, n: int, start: int = 0) -> None:
    """`n` more reservations, most of them released history, some orphans, some not ours,
    some held by the machines; `n` audit events; `n` pods on `n / 10` nodes (some of
    each flag, half the pods asking for a GPU), and a machine whose node never joined."""
    now = timezone.now()
    populate_kube(world, n, start)
    populate_sriov(world, n, start)
    populate_idle(world, n, start)
    rows = []
    for i in range(start, start + n):
        kind = i % 20
        machine = world.machines[i % 2] if kind == 0 else None
        rows.append(
            VgpuReservation(
                location=world.fresh,
                name=(
                    f"other-{i}"
                    if kind == 1
                    else machine.vgpu_name(i)
                    if machine
                    else f"capvco-prod-old-{i}-gpu-0"
                ),
                vgpu_id=f"bulk-{i}",
                gpu_id="card-a100",
                state=State.ATTACHED if machine else State.RESERVED if kind < 4 else State.RELEASED,
                machine=machine,
                vm_id=machine.vm_id if machine else None,
                owner_cluster="prod" if machine or kind > 1 else "",
                owner_machine=machine.name if machine else f"old-{i}",
                owner_index=i if machine else 0,
                released_at=now if kind >= 4 else None,
            )
        )
    VgpuReservation.objects.bulk_create(rows, batch_size=2000)
    ListedVgpu.objects.bulk_create(
        [
            ListedVgpu(
                location=row.location, vgpu_id=row.vgpu_id, name=row.name, gpu_id=row.gpu_id,
                vm_id=row.vm_id, first_seen_at=now,
                orphaned_since=now if row.machine is None else None,
            )
            for row in rows
            if row.state != State.RELEASED
        ],
        batch_size=2000,
    )  # fmt: skip
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                account=world.fresh.account,
                actor_name="ops",
                action="vgpu.release_requested",
                object_type="gpus.VgpuReservation",
                object_id=str(i),
                object_repr=f"capvco-prod-old-{i}-gpu-0",
            )
            for i in range(start, start + n)
        ],
        batch_size=2000,
    )


def populate_kube(world: World, n: int, start: int) -> None:
    now = timezone.now()
    nodes = [
        KubeNode(
            cluster=world.cluster,
            name=f"node-{i:05}",
            uid=f"uid-node-{i}",
            labels={"capvco.io/gpu-type": "nvidia-a100"} if i % 3 else {},
            gpu_capacity=2,
            gpu_allocatable=0 if i % 7 == 0 else 2,
            machine=world.machines[i % 2] if i % 5 else None,
            gpus_missing=i % 7 == 0,
            unowned_since=None if i % 5 else now,
            first_seen_at=now,
            updated_at=now,
        )
        for i in range(start // 10, (start + n) // 10 or 1)
    ]
    KubeNode.objects.bulk_create(nodes, batch_size=2000)
    KubePod.objects.bulk_create(
        [
            KubePod(
                cluster=world.cluster,
                uid=f"uid-pod-{i}",
                namespace="ml",
                name=f"pod-{i}",
                # Every tenth waits for a GPU on no node (the pending pods page).
                node_name=nodes[i % len(nodes)].name,
                phase=KubePod.Phase.RUNNING,
                gpu_requests=i % 2,
                first_seen_at=now,
                updated_at=now,
            )
            for i in range(start, start + n)
        ],
        batch_size=2000,
    )
    MachineNode.objects.update_or_create(machine=world.failed, defaults={"missing": True})


def populate_idle(world: World, n: int, start: int) -> None:
    """An idle spell for every 10, of the world's pool, most of them ended (the idle GPU
    page); a node's id stands for its machine's."""
    now = timezone.now()
    IdleSpell.objects.bulk_create(
        [
            IdleSpell(
                account=world.cluster.account,
                location=world.fresh,
                cluster_id=world.cluster.pk,
                cluster_name=world.cluster.name,
                pool_id=world.pool.pk,
                machine_id=100_000 + i,
                node_name=f"node-{i}",
                currency="EUR",
                idle_gpus=1,
                hourly=1,
                since=now - timedelta(hours=2),
                ended_at=now if i % 4 else None,
            )
            for i in range(start, start + n, 10)
        ],
        batch_size=2000,
    )


def populate_pending(world: World, n: int, start: int) -> None:
    """A pod asking for a GPU on no node for every 10 (the pending pods page)."""
    now = timezone.now()
    KubePod.objects.bulk_create(
        [
            KubePod(
                cluster=world.cluster,
                uid=f"uid-pending-{i}",
                namespace="ml",
                name=f"pending-{i}",
                phase=KubePod.Phase.PENDING,
                gpu_requests=1 + i % 2,
                gpu_type="nvidia-a100" if i % 3 else "",
                first_seen_at=now,
                updated_at=now,
            )
            for i in range(start, start + n, 10)
        ],
        batch_size=2000,
    )


def populate_sriov(world: World, n: int, start: int) -> None:
    """`n` pod NICs over 100 VMs, most released history, some attached, failed, attaching
    or waiting; a leaked NIC for every 20; an external network per location."""
    if start == 0:
        for location in (world.fresh, world.stale):
            ExternalNetworkFactory(location=location)
    states = [PodNic.State.ATTACHED, PodNic.State.FAILED, PodNic.State.ATTACHING]
    states += [PodNic.State.REQUESTED] * 2 + [PodNic.State.RELEASED] * 15
    PodNic.objects.bulk_create(
        [
            PodNic(
                cluster=world.cluster,
                location=world.fresh,
                pod_uid=f"uid-nic-{i}",
                namespace="ml",
                pod_name=f"pod-{i}",
                node_name=f"node-{i % 100:05}",
                cloudspace_id="cs-prod",
                vm_id=9000 + i % 100,
                network_id=900,
                mac=f"52:54:00:{i // 65536:02x}:{i // 256 % 256:02x}:{i % 256:02x}",
                ip=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                state=states[i % 20],
                failure="refused" if i % 20 == 1 else "",
            )
            for i in range(start, start + n)
        ],
        batch_size=2000,
    )
    LeakedNic.objects.bulk_create(
        [
            LeakedNic(
                cluster=world.cluster,
                location=world.fresh,
                cloudspace_id="cs-prod",
                vm_id=9000 + i % 100,
                network_id=900,
                mac=f"52:54:01:{i // 65536:02x}:{i // 256 % 256:02x}:{i % 256:02x}",
                leaked_since=timezone.now(),
            )
            for i in range(start, start + n, 20)
        ],
        batch_size=2000,
    )


def requests(world: World) -> dict[str, tuple[str, dict[str, str]]]:
    cluster = f"/clusters/{world.cluster.pk}/"
    htmx = {"HTTP_HX_REQUEST": "true"}

    def fragment(target: str) -> dict[str, str]:
        return {**htmx, "HTTP_HX_TARGET": target}

    return {
        "overview": ("/", {}),
        "overview fragment": ("/", fragment("overview")),
        "system status fragment": ("/", fragment("system-status")),
        "reservations": ("/reservations/", {}),
        "reservations fragment": ("/reservations/", fragment("reservation-table")),
        "reservations filtered": ("/reservations/?orphaned=true&not_ours=false", {}),
        "reservations by type": ("/reservations/?type=NVIDIA+A100&state=attached", {}),
        "reservations searched": ("/reservations/?q=old-1", {}),
        "reservations last page": ("/reservations/?sort=name&last=1", {}),
        "reservations CSV": ("/reservations/csv/?orphaned=true", {}),
        "release confirmation": (f"/reservations/{world.orphan.pk}/release/", htmx),
        "clusters": ("/clusters/", {}),
        "clusters fragment": ("/clusters/", fragment("cluster-table")),
        "clusters CSV": ("/clusters/csv/", {}),
        "cluster": (cluster, {}),
        "cluster fragment": (cluster, fragment("cluster-body")),
        "new cluster": (f"/clusters/new/?account={world.fresh.account_id}", {}),
        "cluster nodes last page": (f"{cluster}?nodes_last=1", {}),
        "nodes": ("/nodes/", {}),
        "nodes fragment": (f"/nodes/?cluster={world.cluster.pk}", fragment("node-table")),
        "nodes by location and type": (
            f"/nodes/?location={world.fresh.pk}&gpu_type=nvidia-a100",
            {},
        ),
        "nodes flagged": ("/nodes/?flag=gpus-missing", {}),
        "nodes, two columns": ("/nodes/?cols=name,flags", {}),
        "nodes unowned last page": ("/nodes/?flag=unowned&last=1", {}),
        "machines with no node": ("/nodes/?flag=node-missing", {}),
        "nics": ("/nics/", {}),
        "nics table fragment": ("/nics/?state=attached", fragment("nic-table")),
        "nics activity fragment": (f"/nics/?cluster={world.cluster.pk}", fragment("nic-activity")),
        "nics filtered": (f"/nics/?cluster={world.cluster.pk}&state=failed", {}),
        "nics last page": ("/nics/?last=1", {}),
        "leaked NIC detach confirmation": (
            f"/nics/leaked/{LeakedNic.objects.order_by('pk').values_list('pk', flat=True)[0]}"
            "/detach/",
            htmx,
        ),
        "pending pods": ("/pods/pending/", {}),
        "pending pods of the cluster": (f"/pods/pending/?cluster={world.cluster.pk}", {}),
        "pending pods fragment": ("/pods/pending/", fragment("pod-table")),
        "vms": ("/vms/", {}),
        "vms orphaned": ("/vms/?orphaned=true", {}),
        "vms CSV": ("/vms/csv/", {}),
        "idle GPUs": ("/idle-gpus/", {}),
        "idle GPUs of the pool, still idle": (f"/idle-gpus/?pool_id={world.pool.pk}&open=true", {}),
        "idle GPUs fragment": ("/idle-gpus/", fragment("idle-table")),
        "location": (f"/locations/{world.fresh.pk}/", {}),
        "location fragment": (f"/locations/{world.fresh.pk}/", fragment("location-body")),
        "stale location": (f"/locations/{world.stale.pk}/", {}),
        "audit log": ("/audit/", {}),
        "audit log fragment": ("/audit/?action=vgpu.", fragment("audit-table")),
    }


@pytest.fixture(params=["superuser", "admin of the account"])
def client_of(
    request: pytest.FixtureRequest, admin_client: Client, member: Callable[[str], Client]
) -> Client:
    """A superuser, and a member, whose rows are chosen by role."""
    return admin_client if request.param == "superuser" else member("admin")


@pytest.fixture
def counted(client_of: Client, world: World) -> Callable[[], dict[str, int]]:
    """Counts of every page, for the user."""
    client = client_of

    def count() -> dict[str, int]:
        return {
            name: page_queries(client, path, **headers)
            for name, (path, headers) in requests(world).items()
        }

    return count


def test_queries_per_page_stay_the_same_from_10_to_10000_reservations(
    world: World, counted: Callable[[], dict[str, int]]
) -> None:
    populate(world, 10)
    populate_pending(world, 10, 0)
    small = counted()
    populate(world, 10_000 - 10, start=10)
    populate_pending(world, 10_000 - 10, 10)
    large = counted()
    for counts in (small, large):
        assert {n: c for n, c in counts.items() if c > MOST + MONEY * (n in WITH_MONEY)} == {}
    # A page reads what its rows link to (their VMs, card types, owners' clusters) in one
    # query per kind, skipped when no row on it has one: up to 3 apart, never per row.
    assert {name: n for name, n in large.items() if abs(n - small[name]) > 3} == {}


def planners_at_work(world: World) -> None:
    """Every planner of the cluster's plan has steps: the populated nodes of the GPU
    machines lack the count label, every pod NIC's pod is gone (no pod has its uid) since
    an hour, and the leaked NICs are due, in an account that releases orphans by itself."""
    SriovConfig.objects.update_or_create(
        cluster=world.cluster,
        defaults={"enabled": True, "external_network": "pods-net", "credential": JWT},
    )
    Account.objects.filter(pk=world.cluster.account_id).update(orphan_auto_release=True)
    hour_ago = timezone.now() - timedelta(hours=1)
    PodNic.objects.filter(cluster=world.cluster).update(requested_at=hour_ago)
    pods = set(PodNic.objects.filter(cluster=world.cluster).values_list("pod_uid", flat=True))
    GonePod.objects.bulk_create(
        (GonePod(cluster=world.cluster, pod_uid=uid, since=hour_ago) for uid in pods),
        ignore_conflicts=True,
    )
    for leak in LeakedNic.objects.filter(cluster=world.cluster, ip=None):
        leak.ip = f"10.60.{leak.pk // 250 % 250}.{leak.pk % 250 + 2}"
        leak.leaked_since = hour_ago
        leak.save(update_fields=["ip", "leaked_since"])


def test_the_cluster_page_with_every_planner_at_work_does_as_many_queries_at_any_size(
    world: World, kube: Kube, client_of: Client
) -> None:
    page = f"/clusters/{world.cluster.pk}/"
    counts = []
    for n, start in ((10, 0), (10_000 - 10, 10)):
        populate(world, n, start=start)
        planners_at_work(world)
        response = client_of.get(page)
        kinds = {step.kind for step in response.context["plan"].planned}
        assert {NODE_LABELS, POD_NIC_DETACH, LEAKED_NIC_DETACH} <= kinds, kinds
        counts.append(page_queries(client_of, page))
    small, large = counts
    assert small <= MOST + MONEY and large == small, counts


def test_the_api_plan_with_every_planner_at_work_does_as_many_queries_at_any_size(
    world: World, kube: Kube, client_of: Client
) -> None:
    plan = f"/api/v1/clusters/{world.cluster.pk}/plan/"
    counts = []
    for n, start in ((10, 0), (10_000 - 10, 10)):
        populate(world, n, start=start)
        planners_at_work(world)
        kinds = {step["action"] for step in client_of.get(plan).json()}
        assert {NODE_LABELS, POD_NIC_DETACH, LEAKED_NIC_DETACH} <= kinds, kinds
        counts.append(page_queries(client_of, plan))
    small, large = counts
    assert small <= MOST and large == small, counts
