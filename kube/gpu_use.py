"""GPU use, not only requests: where a cluster runs NVIDIA's dcgm-exporter (the GPU
Operator installs it), what each GPU does, read through the cluster's API server.

The exporter's Service is found by its label (GPU_USE_EXPORTER_SELECTOR, the GPU
Operator's `app=nvidia-dcgm-exporter`), in any namespace: reading it is automatic where it
is found, on clusters with GPU nodes. The Service's proxy would reach one of its pods at
random, and each pod (a DaemonSet's) answers only for its own node's GPUs, so every pod its
selector picks is read through the pod proxy (`pods/<pod>:<port>/proxy/metrics`): one
Service listing, one pod listing, one read per GPU node, every GPU_USE_READ_SECONDS.

Each GPU's utilisation (DCGM_FI_DEV_GPU_UTIL) and memory used (DCGM_FI_DEV_FB_USED) is kept
as one sample per read, with the pod the exporter says holds it (its `namespace` and `pod`
labels, filled in when the kubelet's pod-resources mapping is on). Samples older than
GPU_USE_WINDOW_HOURS are deleted as new ones are written: a rolling window, not a history.

A read that failed is not zero use: a node whose exporter did not answer has no sample for
that read, the cluster shows why (`GpuUseState.error`), and its figures count only what
was read. A cluster without an exporter shows "no GPU use data", never 0 %. Nothing is
ever decided from these figures: they are shown.

`gpu_use` computes every figure shown (the cluster page, the API, the CSV): per GPU its
last reading, mean use while held and whether it is "requested but unused"; the
efficiency (used GPU-time over held GPU-time, each sample standing for an equal slice of
time) per cluster, namespace, pool and location. Each read keeps the cluster's figures
(`gpu_use_summary`: GpuUseState, the overview's and /metrics') and the same of its GPUs in
each location (GpuUseLocation), which a location's page and API add up
(`location_gpu_use`): a GPU is in the location of its node's machine.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Max, Min, Q, QuerySet, Sum
from prometheus_client.parser import text_string_to_metric_families

from capvco_web.integrations import kube
from capvco_web.rows import model_update
from cloud.models import Location
from clusters.models import Cluster, Machine
from gpus.models import VgpuReservation
from kube.models import GpuUseLocation, GpuUseSample, GpuUseState, KubeNode

if TYPE_CHECKING:
    from capvco_web.integrations.kube.client import KubeClient

logger = logging.getLogger(__name__)

UTILISATION = "DCGM_FI_DEV_GPU_UTIL"
MEMORY_USED = "DCGM_FI_DEV_FB_USED"
METRICS_PATH = "metrics"
EXPORTER_PORT = 9400  # the exporter's own, when its Service names none
SAMPLE_FIELDS = (
    "node_name", "gpu", "uuid", "model_name", "namespace", "pod", "utilisation",
    "memory_used_mib", "sampled_at",
)  # fmt: skip


class ExporterTextInvalid(ValueError):
    pass


@dataclass(frozen=True)
class GpuReading:
    node_name: str
    gpu: int
    uuid: str
    model_name: str
    namespace: str
    pod: str
    utilisation: int
    memory_used_mib: int


def exporter_readings(text: str, *, node_name: str) -> list[GpuReading]:
    """The GPUs of one exporter's answer (the Prometheus text format), each with its
    utilisation and memory used; a GPU that lacks either is left out. The node is the one
    whose exporter pod was read (its `Hostname` label is the pod's host name, which is the
    node's only with hostNetwork)."""
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    labels: dict[tuple[str, str], Mapping[str, str]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in (UTILISATION, MEMORY_USED):
                    continue
                key = (sample.labels.get("gpu", ""), sample.labels.get("UUID", ""))
                values[key][sample.name] = sample.value
                labels[key] = sample.labels
    except ValueError as exc:
        raise ExporterTextInvalid(f"not the Prometheus text format: {exc}") from exc
    readings = []
    for key, found in values.items():
        if UTILISATION not in found or MEMORY_USED not in found or not key[0].isdigit():
            continue
        held = labels[key]
        readings.append(
            GpuReading(
                node_name=node_name,
                gpu=int(key[0]),
                uuid=key[1][:64],
                model_name=held.get("modelName", "")[:100],
                namespace=held.get("namespace", "")[:63],
                pod=held.get("pod", "")[:253],
                utilisation=max(0, min(100, round(found[UTILISATION]))),
                memory_used_mib=max(0, round(found[MEMORY_USED])),
            )
        )
    return sorted(readings, key=lambda r: (r.node_name, r.gpu))


def gpu_use_state(cluster: Cluster) -> GpuUseState | None:
    try:
        return cluster.gpu_use_state
    except GpuUseState.DoesNotExist:
        return None


def gpu_use_due(cluster: Cluster, *, now: datetime) -> bool:
    """Whether this pass reads the exporter: a cluster with GPU nodes (or one read before),
    last read GPU_USE_READ_SECONDS ago or more."""
    state = gpu_use_state(cluster)
    if state is None:
        return KubeNode.objects.filter(cluster=cluster, gpu_capacity__gt=0).exists()
    return now - state.looked_at >= timedelta(seconds=settings.GPU_USE_READ_SECONDS)


def cluster_gpu_use_observe(*, client: KubeClient, cluster: Cluster, now: datetime) -> int:
    """Find the cluster's exporter, read each of its pods, and keep what they say; returns
    the samples written."""
    services = client.list_services(label_selector=settings.GPU_USE_EXPORTER_SELECTOR)
    problems: list[str] = []
    readings: list[GpuReading] = []
    exporter = ""
    if services.error is not None:
        state = gpu_use_state(cluster)
        exporter = state.exporter if state else ""  # not known to be gone
        problems.append(f"exporter services: {services.error}")
    elif services.items:
        service = min(services.items, key=lambda s: (s.namespace, s.name))
        exporter = f"{service.namespace}/{service.name}"
        readings, problems = _exporter_read(client, service)
    samples = [
        GpuUseSample(cluster=cluster, sampled_at=now, **asdict(reading)) for reading in readings
    ]
    fields = {"exporter": exporter, "looked_at": now, "error": "; ".join(problems)[:2000]}
    with transaction.atomic():
        GpuUseSample.objects.bulk_create(samples, batch_size=1000)
        window = timedelta(hours=settings.GPU_USE_WINDOW_HOURS)
        GpuUseSample.objects.filter(cluster=cluster, sampled_at__lt=now - window).delete()
        cluster.gpu_use_state, _ = GpuUseState.objects.update_or_create(
            cluster=cluster, defaults=fields
        )
        use = gpu_use(cluster, now=now)
        model_update(cluster.gpu_use_state, gpu_use_summary(use))
        _locations_keep(cluster, use)
    for problem in problems:
        logger.warning("GPU use of %s: %s", cluster.name, problem)
    return len(samples)


def _exporter_read(
    client: KubeClient, service: kube.types.Service
) -> tuple[list[GpuReading], list[str]]:
    where = f"{service.namespace}/{service.name}"
    if not service.selector:
        return [], [f"exporter {where}: its Service selects no pods"]
    selector = ",".join(f"{key}={value}" for key, value in sorted(service.selector.items()))
    pods = client.list_pod_runs(namespace=service.namespace, label_selector=selector)
    problems = [] if pods.error is None else [f"exporter pods: {pods.error}"]
    readings: list[GpuReading] = []
    nodes_read: set[str] = set()
    for pod in sorted(pods.items, key=lambda p: (p.node_name, p.phase != "Running", p.name)):
        if pod.node_name in nodes_read:
            continue  # a second exporter pod on the node (a rolling update): read once
        if pod.phase != "Running" or not pod.node_name:
            problems.append(f"{pod.node_name or pod.name}: exporter pod {pod.phase}")
            continue
        try:
            text = client.read_pod_proxied(
                namespace=service.namespace,
                name=pod.name,
                port=service.port or EXPORTER_PORT,
                path=METRICS_PATH,
            )
            readings += exporter_readings(text, node_name=pod.node_name)
            nodes_read.add(pod.node_name)
        except (kube.KubeError, ExporterTextInvalid) as exc:
            problems.append(f"{pod.node_name}: {exc}")
    return readings, problems


def _locations_keep(cluster: Cluster, use: GpuUse) -> None:
    """The cluster's figures per location, as `use` gives them; a location none of its
    GPUs is in any more has none."""
    state = cluster.gpu_use_state
    kept = {row.location_id: row for row in GpuUseLocation.objects.filter(state=state)}
    found = {location: gpu_use_summary(use, location=location) for location in use.locations_seen}
    for location, row in kept.items():
        if location not in found:
            row.delete()
    for location, figures in found.items():
        if location in kept:
            model_update(kept[location], figures)
        else:
            GpuUseLocation.objects.create(state=state, location_id=location, **figures)


# ---- the figures shown ---------------------------------------------------------------


@dataclass(frozen=True)
class GpuUseRow(GpuReading):
    """One GPU: its last reading, and what the window says of it."""

    sampled_at: datetime
    mean_utilisation: Decimal | None  # over the window's samples while a pod held it
    unused_since: datetime | None  # held and below GPU_UNUSED_PERCENT since then
    unused: bool  # ... for GPU_UNUSED_HOURS or more: "requested but unused"
    pool: str = ""
    machine: str = ""
    reservation: str = ""  # our vGPU reservation for this GPU of the node's machine
    location_id: int | None = None  # of the node's machine; None: no machine of ours

    @property
    def status(self) -> str:
        if not self.pod:
            return "idle"
        return "requested but unused" if self.unused else "in use"


@dataclass
class Efficiency:
    """Used GPU-time over requested (held) GPU-time in the window."""

    name: str
    held_samples: int = 0
    used_percent_sum: int = 0
    gpus: set[tuple[str, int]] = field(default_factory=set)

    @property
    def percent(self) -> Decimal | None:
        if not self.held_samples:
            return None
        return (Decimal(self.used_percent_sum) / self.held_samples).quantize(Decimal("0.1"))

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)


@dataclass
class GpuUse:
    """What a cluster's page, API and CSV show of its GPU use."""

    exporter: str
    looked_at: datetime | None
    error: str
    gpus: list[GpuUseRow]
    cluster: Efficiency
    namespaces: list[Efficiency]
    pools: list[Efficiency]
    # Per location of the nodes' machines (by id): its GPUs' efficiency.
    locations: dict[int, Efficiency] = field(default_factory=dict)

    @property
    def has_data(self) -> bool:
        return bool(self.gpus)

    @property
    def locations_seen(self) -> set[int]:
        """The locations its GPUs are in (of the nodes' machines)."""
        return {row.location_id for row in self.gpus if row.location_id is not None}

    @property
    def unused_count(self) -> int:
        return sum(1 for row in self.gpus if row.unused)

    @property
    def idle_count(self) -> int:
        return sum(1 for row in self.gpus if not row.pod)


def gpu_use_summary(use: GpuUse, *, location: int | None = None) -> dict[str, Any]:
    """The cluster's figures of `use` as its GpuUseState keeps them; with `location`, those
    of its GPUs in that location, with the efficiency's terms (as GpuUseLocation keeps
    them, to add clusters up)."""
    gpus = use.gpus if location is None else [g for g in use.gpus if g.location_id == location]
    unused = sum(1 for row in gpus if row.unused)
    idle = sum(1 for row in gpus if not row.pod)
    figures = {"gpus_in_use": len(gpus) - unused - idle, "gpus_unused": unused, "gpus_idle": idle}
    if location is None:
        return {"efficiency_percent": use.cluster.percent, **figures}
    efficiency = use.locations.get(location) or Efficiency("")
    return {
        "efficiency_percent": efficiency.percent,
        "held_samples": efficiency.held_samples,
        "used_percent_sum": efficiency.used_percent_sum,
        **figures,
    }


def gpu_use_of_clusters(clusters: QuerySet[Cluster]) -> QuerySet[GpuUseState]:
    """The figures each of `clusters` kept at its last read (gpu_use_summary), those with
    the most GPUs requested but unused first, then the least efficient."""
    return (
        GpuUseState.objects.filter(cluster__in=clusters)
        .select_related("cluster")
        .order_by("-gpus_unused", F("efficiency_percent").asc(nulls_last=True), "cluster__name")
    )


@dataclass
class LocationGpuUse:
    """What a location's page and API show of its GPU use: its clusters' figures of the
    GPUs of their nodes whose machines are in it, each as kept at its last read, and
    summed."""

    location: Location
    clusters: list[GpuUseLocation]  # those with GPUs requested but unused first
    efficiency: Efficiency
    in_use: int
    unused: int
    idle: int

    @property
    def has_data(self) -> bool:
        return bool(self.in_use + self.unused + self.idle)


def location_gpu_use(location: Location, *, clusters: QuerySet[Cluster]) -> LocationGpuUse:
    """The GPU use in `location` of `clusters`: each one's figures there as its last read
    kept them (gpu_use_summary of its GPUs there), those with the most GPUs requested but
    unused first, then the least efficient; and their sums, the efficiency from its terms
    (used GPU-time over held GPU-time of every cluster's GPUs there). One query."""
    rows = list(
        GpuUseLocation.objects.filter(location=location, state__cluster__in=clusters)
        .select_related("state__cluster")
        .order_by(
            "-gpus_unused", F("efficiency_percent").asc(nulls_last=True), "state__cluster__name"
        )
    )
    total = Efficiency(location.name)
    for row in rows:
        total.held_samples += row.held_samples
        total.used_percent_sum += row.used_percent_sum
    return LocationGpuUse(
        location=location,
        clusters=rows,
        efficiency=total,
        in_use=sum(row.gpus_in_use for row in rows),
        unused=sum(row.gpus_unused for row in rows),
        idle=sum(row.gpus_idle for row in rows),
    )


def gpu_use(cluster: Cluster, *, now: datetime) -> GpuUse:
    """Every figure of the cluster's GPU use over the window ending `now`, summed by the
    database: six queries however many samples the window holds, none when never read."""
    state = gpu_use_state(cluster)
    if state is None:  # never read: no samples, no query
        nothing = Efficiency(cluster.name)
        return GpuUse(exporter="", looked_at=None, error="", gpus=[], cluster=nothing,
                      namespaces=[], pools=[])  # fmt: skip
    span = timedelta(hours=settings.GPU_USE_WINDOW_HOURS)
    window = GpuUseSample.objects.filter(
        cluster=cluster, sampled_at__gte=now - span, sampled_at__lte=now
    )
    held = ~Q(pod="")
    # The efficiency's terms: per GPU and namespace, the reads while held and their use.
    terms = list(
        window.filter(held)
        .values_list("node_name", "gpu", "namespace")
        .annotate(reads=Count("pk"), used=Sum("utilisation"))
        .order_by()
    )
    # Per GPU: its last read, and the last read that was not held below the threshold.
    spans = {
        (node, gpu): (last_at, broken_at, first_at)
        for node, gpu, last_at, broken_at, first_at in window.values_list("node_name", "gpu")
        .annotate(
            last_at=Max("sampled_at"),
            broken_at=Max(
                "sampled_at", filter=~held | Q(utilisation__gte=settings.GPU_UNUSED_PERCENT)
            ),
            first_at=Min("sampled_at"),
        )
        .order_by()
    }
    last_reads = {
        (sample.node_name, sample.gpu): sample
        for sample in window.filter(sampled_at__in={v[0] for v in spans.values()})
        .values_list(*SAMPLE_FIELDS, named=True)
        .order_by()
        if spans[(sample.node_name, sample.gpu)][0] == sample.sampled_at
    }
    unused_since = _unused_since(window, spans)
    nodes = {
        node.name: node
        for node in KubeNode.objects.filter(
            cluster=cluster, name__in={key[0] for key in spans}
        ).select_related("machine__pool__site")
    }
    reservations = _reservations(node.machine_id for node in nodes.values())

    def machine_of(node_name: str) -> Machine | None:
        node = nodes.get(node_name)
        return node.machine if node is not None else None

    def location_of(node_name: str) -> int | None:
        machine = machine_of(node_name)
        return machine.pool.site.location_id if machine is not None else None

    total = Efficiency(cluster.name)
    namespaces: dict[str, Efficiency] = {}
    pools: dict[str, Efficiency] = {}
    locations: dict[int, Efficiency] = {}
    per_gpu: dict[tuple[str, int], Efficiency] = {}
    for node_name, gpu, namespace, reads, used in terms:
        machine = machine_of(node_name)
        pool = machine.pool.name if machine is not None else ""
        buckets = [
            total,
            namespaces.setdefault(namespace, Efficiency(namespace)),
            pools.setdefault(pool, Efficiency(pool or "(no pool of ours)")),
            per_gpu.setdefault((node_name, gpu), Efficiency("")),
        ]
        if (location := location_of(node_name)) is not None:
            buckets.append(locations.setdefault(location, Efficiency(str(location))))
        for bucket in buckets:
            bucket.held_samples += reads
            bucket.used_percent_sum += used
            bucket.gpus.add((node_name, gpu))
    rows = []
    for key, last in sorted(last_reads.items()):
        machine = machine_of(key[0])
        since = unused_since.get(key)
        rows.append(
            GpuUseRow(
                node_name=last.node_name,
                gpu=last.gpu,
                uuid=last.uuid,
                model_name=last.model_name,
                namespace=last.namespace,
                pod=last.pod,
                utilisation=last.utilisation,
                memory_used_mib=last.memory_used_mib,
                sampled_at=last.sampled_at,
                mean_utilisation=per_gpu[key].percent if key in per_gpu else None,
                unused_since=since,
                unused=since is not None
                and last.sampled_at - since >= timedelta(hours=settings.GPU_UNUSED_HOURS),
                pool=machine.pool.name if machine is not None else "",
                machine=machine.name if machine is not None else "",
                reservation=reservations.get((machine.pk, key[1]), "") if machine else "",
                location_id=location_of(key[0]),
            )
        )
    return GpuUse(
        exporter=state.exporter,
        looked_at=state.looked_at,
        error=state.error,
        gpus=rows,
        cluster=total,
        namespaces=sorted(namespaces.values(), key=lambda e: e.name),
        pools=sorted(pools.values(), key=lambda e: e.name),
        locations=locations,
    )


def _unused_since(
    window: QuerySet[GpuUseSample],
    spans: Mapping[tuple[str, int], tuple[datetime, datetime | None, datetime]],
) -> dict[tuple[str, int], datetime]:
    """Since when each GPU whose last read is held below the threshold has been so: the
    first read after the last one that was not (the window's first, when none); one query
    for those that had such a read."""
    since: dict[tuple[str, int], datetime] = {}
    after = Q()
    for (node, gpu), (last_at, broken_at, first_at) in spans.items():
        if broken_at is None:
            since[(node, gpu)] = first_at
        elif broken_at < last_at:
            after |= Q(node_name=node, gpu=gpu, sampled_at__gt=broken_at)
    if after:
        found = (
            window.filter(after)
            .values_list("node_name", "gpu")
            .annotate(since=Min("sampled_at"))
            .order_by()
        )
        since.update({(node, gpu): at for node, gpu, at in found})
    return since


def _reservations(machine_ids: Iterable[int | None]) -> dict[tuple[int, int], str]:
    """Our vGPU reservations attached to these machines, by machine and GPU index."""
    found = VgpuReservation.objects.filter(
        machine_id__in={pk for pk in machine_ids if pk is not None},
        state=VgpuReservation.State.ATTACHED,
        owner_index__isnull=False,
    ).values_list("machine_id", "owner_index", "name")
    return {(machine, index): name for machine, index, name in found if index is not None}
