"""Model factories: valid rows, deterministic names (sequences, no randomness).

Each factory builds what its row needs through SubFactory: `MachineFactory()` makes an
account, a location of that account, a cluster of that account, its site there, a pool in
that site and the machine. Pass the parent you have (`MachinePoolFactory(site=site)`,
`MachineFactory(pool=pool)`) to build under it; a pool's cluster is its site's.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import factory
from django.conf import settings
from django.contrib.auth.models import Group, Permission
from django.utils import timezone
from factory.django import DjangoModelFactory, Password

from capvco_web.models import AuditEvent, Heartbeat
from capvco_web.permissions import ROLE_PERMISSIONS
from capvco_web.tasks import BEAT
from cloud.models import Account, Location, Membership, VirtualMachine
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from gpus.models import GpuProfile, ListedVgpu, VgpuReservation
from kube.models import ClusterObservation, GpuAddonState, KubeNode, KubePod, MachineNode
from sriov.models import ExternalNetwork, LeakedNic, PodNic

# The shape of a whitesky JWT; no service sees it.
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhcGkifQ.c2lnbmF0dXJl"
PASSWORD = "s3cret-pass"


class UserFactory(DjangoModelFactory):
    class Meta:
        model = settings.AUTH_USER_MODEL

    username = factory.Sequence(lambda n: f"user-{n}")
    password = Password(PASSWORD)


class AccountFactory(DjangoModelFactory):
    class Meta:
        model = Account

    name = factory.Sequence(lambda n: f"account-{n}")
    api_url = "https://vco.example/api/1"
    iam_url = "https://iam.example"
    customer_id = factory.Sequence(lambda n: f"customer-{n}")
    credential = JWT


def role_group(name: str) -> Group:
    """The role's group, as the data migration made it; made again after a test that
    flushed the database (transactional tests), with the role's permissions."""
    group, created = Group.objects.get_or_create(name=name)
    if created:
        for perm in ROLE_PERMISSIONS[name]:
            app_label, codename = perm.split(".")
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
    return group


class MembershipFactory(DjangoModelFactory):
    """A user's role in an account; `MembershipFactory(role="operator")`."""

    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    account = factory.SubFactory(AccountFactory)
    role = factory.LazyFunction(lambda: role_group("viewer"))

    @classmethod
    def _create(cls, model_class: type[Membership], *args: object, **kwargs: object) -> Membership:
        if isinstance(kwargs.get("role"), str):
            kwargs["role"] = role_group(str(kwargs["role"]))
        return super()._create(model_class, *args, **kwargs)  # type: ignore[no-any-return]


class LocationFactory(DjangoModelFactory):
    class Meta:
        model = Location

    account = factory.SubFactory(AccountFactory)
    name = factory.Sequence(lambda n: f"nl-test-dc01-{n:03d}")
    currency = "EUR"
    vgu_price = Decimal("300.0000")  # per vGPU and month
    observation_complete = True


class ClusterFactory(DjangoModelFactory):
    class Meta:
        model = Cluster

    name = factory.Sequence(lambda n: f"cluster-{n}")
    account = factory.SubFactory(AccountFactory)


class ClusterSiteFactory(DjangoModelFactory):
    class Meta:
        model = ClusterSite

    cluster = factory.SubFactory(ClusterFactory)
    # A site's location belongs to the cluster's account (ClusterSite.clean).
    location = factory.SubFactory(
        LocationFactory, account=factory.SelfAttribute("..cluster.account")
    )
    cloudspace_id = factory.Sequence(lambda n: f"cs-{n}")
    image_id = factory.Sequence(lambda n: 100 + n)


class MachinePoolFactory(DjangoModelFactory):
    """A pool of one CPU machine; `gpus=True` asks for one NVIDIA A100 per machine."""

    class Meta:
        model = MachinePool

    class Params:
        gpus = factory.Trait(gpu_type="NVIDIA A100", gpu_count=1)

    site = factory.SubFactory(ClusterSiteFactory)
    cluster = factory.SelfAttribute("site.cluster")
    name = factory.Sequence(lambda n: f"pool-{n}")
    replicas = 1


class MachineFactory(DjangoModelFactory):
    """A machine not provisioned yet (pending, no VM), named `<pool>-<index>`."""

    class Meta:
        model = Machine

    pool = factory.SubFactory(MachinePoolFactory)
    index = factory.Sequence(lambda n: n)
    name = factory.LazyAttribute(lambda machine: f"{machine.pool.name}-{machine.index}")


class VirtualMachineFactory(DjangoModelFactory):
    class Meta:
        model = VirtualMachine

    location = factory.SubFactory(LocationFactory)
    cloudspace_id = factory.Sequence(lambda n: f"cs-{n}")
    vm_id = factory.Sequence(lambda n: 5000 + n)
    name = factory.Sequence(lambda n: f"vm-{n}")
    status = "RUNNING"


class GpuProfileFactory(DjangoModelFactory):
    """One A100 card with room for seven vGPUs."""

    class Meta:
        model = GpuProfile

    location = factory.SubFactory(LocationFactory)
    profile_id = factory.Sequence(lambda n: f"gpu-profile-{n}")
    vendor = "NVIDIA"
    pci_address = factory.Sequence(lambda n: f"0000:{n % 256:02x}:00.0")
    model = factory.LazyAttribute(lambda card: f"A100-SXM4-80GB ({card.pci_address})")
    available_instances = 7


def _owned(declaration: object, otherwise: object) -> factory.Maybe:
    """`declaration` for a reservation of a machine, `otherwise` for one without."""
    return factory.Maybe("machine", yes_declaration=declaration, no_declaration=otherwise)


class ListedVgpuFactory(DjangoModelFactory):
    """A vGPU as a listing shows it, first seen now."""

    class Meta:
        model = ListedVgpu

    location = factory.SubFactory(LocationFactory)
    vgpu_id = factory.Sequence(lambda n: f"listed-vgpu-{n}")
    name = factory.Sequence(lambda n: f"capvco-gone-m-{n}-gpu-0")
    first_seen_at = factory.LazyFunction(timezone.now)


# What a listing says of a reservation: kept on its ListedVgpu row, made with it.
LISTED_FIELDS = ("first_seen_at", "unassigned_since", "orphaned_since", "orphan_confirmations")


class VgpuReservationFactory(DjangoModelFactory):
    """A vGPU attached to a running GPU machine, as provisioning leaves it, and as the last
    listing showed it (its ListedVgpu row; `listed=False` for none). `orphaned=True` gives
    one that no machine owns, flagged orphaned now, named after a machine that is gone.
    `first_seen_at`, `unassigned_since`, `orphaned_since` and `orphan_confirmations` go to
    the listed row."""

    class Meta:
        model = VgpuReservation

    class Params:
        orphaned = factory.Trait(
            machine=None,
            state=VgpuReservation.State.RESERVED,
            orphaned_since=factory.LazyFunction(timezone.now),
            orphan_confirmations=1,
        )

    machine = factory.SubFactory(
        MachineFactory,
        pool__gpus=True,
        phase=Machine.Phase.RUNNING,
        vm_id=factory.Sequence(lambda n: 9000 + n),
    )
    location = _owned(
        factory.SelfAttribute("machine.pool.site.location"), factory.SubFactory(LocationFactory)
    )
    owner_index = 0
    owner_cluster = _owned(factory.SelfAttribute("machine.pool.cluster.name"), "")
    owner_machine = _owned(factory.SelfAttribute("machine.name"), "")
    name = _owned(
        factory.LazyAttribute(lambda row: row.machine.vgpu_name(row.owner_index)),
        factory.Sequence(lambda n: f"capvco-gone-m-{n}-gpu-0"),
    )
    vm_id = _owned(factory.SelfAttribute("machine.vm_id"), None)
    vgpu_id = factory.Sequence(lambda n: f"vgpu-{n}")
    gpu_id = factory.Sequence(lambda n: f"gpu-profile-{n}")
    state = VgpuReservation.State.ATTACHED
    first_seen_at = factory.LazyFunction(timezone.now)

    @classmethod
    def _create(cls, model_class: type[VgpuReservation], *args: Any, **kwargs: Any) -> Any:
        seen = {field: kwargs.pop(field) for field in LISTED_FIELDS if field in kwargs}
        listed = kwargs.pop("listed", True)
        row = super()._create(model_class, *args, **kwargs)
        if listed and row.vgpu_id and row.state != VgpuReservation.State.RELEASED:
            ListedVgpu.objects.create(
                location=row.location,
                vgpu_id=row.vgpu_id,
                name=row.name,
                gpu_id=row.gpu_id,
                vm_id=row.vm_id,
                **{**seen, "first_seen_at": seen.get("first_seen_at") or timezone.now()},
            )
        return row


class KubeNodeFactory(DjangoModelFactory):
    """A ready node with one GPU, mirrored now; `machine=` links it to its machine."""

    class Meta:
        model = KubeNode

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"node-{n}")
    uid = factory.Sequence(lambda n: f"00000000-0000-4000-8000-{n:012d}")
    labels = factory.LazyAttribute(lambda node: {"kubernetes.io/hostname": node.name})
    gpu_capacity = 1
    gpu_allocatable = 1
    ready = True
    kubelet_version = "v1.33.1"
    first_seen_at = factory.LazyFunction(timezone.now)
    updated_at = factory.LazyFunction(timezone.now)


class MachineNodeFactory(DjangoModelFactory):
    """A machine flagged by the Kubernetes observer: its node is missing."""

    class Meta:
        model = MachineNode

    machine = factory.SubFactory(MachineFactory)
    vm_id = factory.LazyAttribute(lambda row: row.machine.vm_id)
    missing = True


class KubePodFactory(DjangoModelFactory):
    """A running pod holding one GPU on a node of its cluster."""

    class Meta:
        model = KubePod

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Sequence(lambda n: f"10000000-0000-4000-8000-{n:012d}")
    namespace = "default"
    name = factory.Sequence(lambda n: f"pod-{n}")
    node_name = factory.Sequence(lambda n: f"node-{n}")
    phase = KubePod.Phase.RUNNING
    gpu_requests = 1
    first_seen_at = factory.LazyFunction(timezone.now)
    updated_at = factory.LazyFunction(timezone.now)


class HeartbeatFactory(DjangoModelFactory):
    """Beat's tick, sent just now (name=WORKERS: run by a worker)."""

    class Meta:
        model = Heartbeat

    name = BEAT
    ticked_at = factory.LazyFunction(timezone.now)


class AuditEventFactory(DjangoModelFactory):
    """A person's release request of a reservation, as the audit log keeps it."""

    class Meta:
        model = AuditEvent

    actor_name = "ops"
    action = "vgpu.release_requested"
    object_type = "gpus.VgpuReservation"
    object_id = factory.Sequence(str)
    object_repr = factory.Sequence(lambda n: f"capvco-demo-gpu-{n}-gpu-0")
    reason = "not needed"


class ExternalNetworkFactory(DjangoModelFactory):
    """An external network of a location, with room for 250 addresses."""

    class Meta:
        model = ExternalNetwork

    location = factory.SubFactory(LocationFactory)
    network_id = factory.Sequence(lambda n: 900 + n)
    name = factory.Sequence(lambda n: f"pods-net-{n}")
    network = "10.50.0.0"
    gateway = "10.50.0.1"
    prefix_len = 24
    free_addresses = 250
    last_seen_at = factory.LazyFunction(timezone.now)


class PodNicFactory(DjangoModelFactory):
    """The attached NIC of a pod on VM 7000 of a cluster (in a location of its account)."""

    class Meta:
        model = PodNic

    cluster = factory.SubFactory(ClusterFactory)
    location = factory.SubFactory(
        LocationFactory, account=factory.SelfAttribute("..cluster.account")
    )
    pod_uid = factory.Sequence(lambda n: f"20000000-0000-4000-8000-{n:012d}")
    namespace = "default"
    pod_name = factory.Sequence(lambda n: f"pod-{n}")
    node_name = "node-0"
    cloudspace_id = "cs-0"
    vm_id = 7000
    network_id = 900
    network_name = "pods-net"
    mac = factory.Sequence(
        lambda n: f"52:54:00:{n // 65536 % 256:02x}:{n // 256 % 256:02x}:{n % 256:02x}"
    )
    ip = factory.Sequence(lambda n: f"10.50.{n // 250 % 250}.{n % 250 + 2}")
    prefix_len = 24
    gateway = "10.50.0.1"
    state = PodNic.State.ATTACHED


class LeakedNicFactory(DjangoModelFactory):
    """A NIC on a cluster's VM that no pod NIC owns, seen an hour ago."""

    class Meta:
        model = LeakedNic

    cluster = factory.SubFactory(ClusterFactory)
    location = factory.SubFactory(
        LocationFactory, account=factory.SelfAttribute("..cluster.account")
    )
    cloudspace_id = "cs-0"
    vm_id = 7000
    network_id = 900
    mac = factory.Sequence(
        lambda n: f"52:54:01:{n // 65536 % 256:02x}:{n // 256 % 256:02x}:{n % 256:02x}"
    )
    ip = factory.Sequence(lambda n: f"10.50.200.{n % 250 + 2}")
    leaked_since = factory.LazyFunction(lambda: timezone.now() - timedelta(hours=1))


def kube_observed_as(cluster: Cluster | int, **fields: Any) -> ClusterObservation:
    """The cluster's Kubernetes observation as the observer would have recorded it."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    row, _ = ClusterObservation.objects.update_or_create(cluster_id=pk, defaults=fields)
    return row


def kube_observation_of(cluster: Cluster | int) -> ClusterObservation:
    """The cluster's observation as recorded (unsaved and empty: none yet)."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    return ClusterObservation.objects.filter(cluster_id=pk).first() or ClusterObservation()


def gpu_addon_held(cluster: Cluster | int, **fields: Any) -> GpuAddonState:
    """What the cluster holds of the GPU add-on, as kube.gpu_addon would have recorded it."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    row, _ = GpuAddonState.objects.update_or_create(cluster_id=pk, defaults=fields)
    return row


def gpu_addon_state_of(cluster: Cluster | int) -> GpuAddonState:
    """What the cluster holds of the GPU add-on as recorded (unsaved and empty: nothing)."""
    pk = cluster if isinstance(cluster, int) else cluster.pk
    return GpuAddonState.objects.filter(cluster_id=pk).first() or GpuAddonState()
