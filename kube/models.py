"""The Kubernetes mirror of each workload cluster: its nodes and pods as last listed or
watched, and the stamps of the watches that keep them current. Written only by observe
(kube.observe, kube.events, kube.watch). The tables keep the names they had in clusters."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.db.models import Q

from capvco_web.integrations.kube import GPU_COUNT_LABEL, GPU_TYPE_LABEL
from clusters.models import Cluster, Machine


class KubeNode(models.Model):
    """A Kubernetes Node of a cluster (mirrored), and the machine whose VM it runs on."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="kube_nodes")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64)
    provider_id = models.CharField(max_length=300, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    gpu_capacity = models.PositiveIntegerField(default=0, help_text="nvidia.com/gpu capacity")
    gpu_allocatable = models.PositiveIntegerField(
        default=0, help_text="nvidia.com/gpu allocatable, as the device plugin reports it"
    )
    ready = models.BooleanField(default=False)
    kubelet_version = models.CharField(max_length=64, blank=True)
    unschedulable = models.BooleanField(
        default=False, help_text="Cordoned: the scheduler places no new pod on it"
    )
    machine = models.ForeignKey(
        Machine, on_delete=models.SET_NULL, null=True, blank=True, related_name="kube_nodes"
    )
    unowned_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Since when complete listings show it with no machine of the cluster "
        "owning it (control-plane nodes excepted).",
    )
    gpus_missing = models.BooleanField(
        default=False,
        help_text="Its machine has GPUs, yet it advertises no nvidia.com/gpu "
        "GPU_ADVERTISE_TIMEOUT_SECONDS after it joined or the add-on was applied (from a "
        "complete node listing).",
    )
    gpus_missing_reason = models.CharField(max_length=300, blank=True)
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField(help_text="When the mirror last wrote the row")

    class Meta:
        db_table = "clusters_kubenode"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="kube_node_unique_per_cluster")
        ]
        indexes = [
            # The node list's order: a page of it reads 50 nodes, not all of them sorted.
            models.Index(fields=["name", "id"], name="kube_node_by_name"),
            # The few flagged nodes of a cluster, counted on every cluster list.
            models.Index(
                fields=["cluster"],
                name="kube_node_unowned",
                condition=Q(unowned_since__isnull=False),
            ),
            models.Index(
                fields=["cluster"], name="kube_node_gpus_missing", condition=Q(gpus_missing=True)
            ),
        ]
        permissions = [("verify_kubenode", "Can ask for a node's GPUs to be verified again")]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    @property
    def gpu_type_label(self) -> str:
        """Its `capvco.io/gpu-type` label as last observed ("": none)."""
        return str(self.labels.get(GPU_TYPE_LABEL, ""))

    @property
    def gpu_count_label(self) -> str:
        return str(self.labels.get(GPU_COUNT_LABEL, ""))


class KubePod(models.Model):
    """A Kubernetes Pod of a cluster (mirrored): where it runs, and what it asks for."""

    class Phase(models.TextChoices):
        PENDING = "Pending"
        RUNNING = "Running"
        SUCCEEDED = "Succeeded"
        FAILED = "Failed"
        UNKNOWN = "Unknown"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="kube_pods")
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253, blank=True, help_text="Empty: not scheduled")
    phase = models.CharField(max_length=16, choices=Phase)
    gpu_requests = models.PositiveIntegerField(default=0, help_text="nvidia.com/gpu it holds")
    sriov_network = models.CharField(
        max_length=253,
        blank=True,
        help_text="The external network its capvco.io/sriov-network annotation asks a NIC on",
    )
    gpu_type = models.CharField(
        max_length=63,
        blank=True,
        verbose_name="GPU type",
        help_text="The capvco.io/gpu-type label its nodeSelector asks for (empty: any GPU node)",
    )
    daemon = models.BooleanField(
        default=False, help_text="A DaemonSet's or a static pod: a node's drain leaves it"
    )
    labels = models.JSONField(
        default=dict, blank=True, help_text="Its labels (not its annotations): cost by label"
    )
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField(help_text="When the mirror last wrote the row")

    class Meta:
        db_table = "clusters_kubepod"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="kube_pod_unique_per_cluster")
        ]
        indexes = [
            models.Index(fields=["cluster", "node_name"]),
            # The pods that hold GPUs, summed per cluster and node (clusters.selectors): most
            # pods ask for none, and these few are read without their rows.
            models.Index(
                # The sums' column is a key column, not INCLUDE: SQLite has no INCLUDE.
                fields=["cluster", "node_name", "gpu_requests"],
                name="kube_pod_gpu_requests",
                condition=Q(phase__in=["Pending", "Running"], gpu_requests__gt=0),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.namespace}/{self.name}"


class KubeWatch(models.Model):
    """A cluster's nodes or pods kept current by the watch process (`manage.py kube_watch`,
    kube.watch): while its stamp is fresh, the beat pass does not list that kind.

    `watched_at` is when the watch last showed it was whole and current: a complete listing
    mirrored, then every event since applied. Written at most every STAMP_EVERY, and at
    least at the end of every watch request (WATCH_TIMEOUT), so fresh means younger than
    two of those; None once its watch stopped.
    """

    class Kind(models.TextChoices):
        NODES = "nodes"
        PODS = "pods"

    # How long one watch request lasts (the server ends it), and how often a healthy watch
    # writes its stamp at most: a quiet cluster writes one row per half minute, not one per
    # bookmark.
    WATCH_TIMEOUT_SECONDS = 120
    STAMP_EVERY_SECONDS = 30

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="kube_watches")
    kind = models.CharField(max_length=8, choices=Kind)
    watched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "clusters_kubewatch"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind"], name="kube_watch_unique_per_kind")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.kind}"

    @classmethod
    def fresh_after(cls, now: datetime) -> datetime:
        """A stamp at or after this is fresh: its watch is running and healthy."""
        return now - timedelta(seconds=2 * cls.WATCH_TIMEOUT_SECONDS)


class MachineNode(models.Model):
    """Whether a machine's VM became a node of its cluster, as node listings show it
    (kube.nodes). Written only by the Kubernetes observer, beside the machine rather than
    on it: act's compare-and-set token on the machine (`Machine.updated_at`) moves only
    with act's own writes. No row: its node was never seen and it is not flagged."""

    machine = models.OneToOneField(
        Machine, on_delete=models.CASCADE, primary_key=True, related_name="node_state"
    )
    vm_id = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="The VM these are about: a machine given a new VM joins anew.",
    )
    joined_at = models.DateTimeField(
        null=True, blank=True, help_text="When a listing first showed its Kubernetes node"
    )
    missing = models.BooleanField(
        default=False,
        help_text="No node of the cluster is this machine's, NODE_JOIN_TIMEOUT_SECONDS after "
        "its VM started (from a complete node listing).",
    )
    missing_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        indexes = [
            # The few flagged machines of a cluster, counted on every cluster list.
            models.Index(
                fields=["machine"], name="kube_machine_node_missing", condition=Q(missing=True)
            ),
        ]

    def __str__(self) -> str:
        return str(self.machine)


class ClusterObservation(models.Model):
    """How a cluster's Kubernetes was last observed, and the resourceVersions its mirror
    is of. Written only by the observers (kube.observe, kube.tasks, kube.services); no
    row: not observed yet."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, primary_key=True, related_name="kube_observation"
    )
    complete = models.BooleanField(
        default=False,
        help_text="Whether the last observation listed every node and pod. Nothing is "
        "judged gone, and no node or machine is flagged, from a partial one.",
    )
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(
        null=True, blank=True, help_text="When the listings of the last observation began."
    )
    last_complete_at = models.DateTimeField(
        null=True, blank=True, help_text="When the listings of the last complete one began."
    )
    nodes_resource_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="The resourceVersion of the last complete node listing mirrored: a listing "
        "with the same one changed nothing.",
    )
    pods_resource_version = models.CharField(
        max_length=64, blank=True, help_text="The same, for pods."
    )
    kubeconfig_sha256 = models.CharField(
        max_length=64,
        blank=True,
        help_text="The kubeconfig the resourceVersions were listed with: another kubeconfig "
        "may reach another cluster, whose listings are compared afresh.",
    )
    gpu_verify_listed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the last complete listing of the GPU verification Jobs and their "
        "pods began; none: the last one was partial, or not made.",
    )

    def __str__(self) -> str:
        return str(self.cluster)


class GpuAddonState(models.Model):
    """What the cluster holds of the GPU add-on (the NVIDIA device plugin's DaemonSet), as
    kube.gpu_addon last read or wrote it; the cluster's `gpu_addon` is what people want.
    No row: none of ours is known to be there."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, primary_key=True, related_name="gpu_addon_state"
    )
    hash = models.CharField(
        max_length=64,
        blank=True,
        help_text="The hash of the add-on's manifest as last applied; empty: none of ours "
        "is known to be in the cluster.",
    )
    applied_at = models.DateTimeField(
        null=True, blank=True, help_text="Since when the add-on, as it is now, is in the cluster."
    )
    resource_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="The resourceVersion of our add-on's DaemonSet as last read or written: "
        "a replace names it, so that one made from a stale read is refused (409).",
    )
    error = models.TextField(blank=True)

    def __str__(self) -> str:
        return str(self.cluster)


class GpuVerifyRequest(models.Model):
    """A person's request that a node's GPUs be verified again (kube.gpu_verify_requests
    writes it, and only it). It is open until a verification names it: the cluster's plan
    starts one for it (kube.plan)."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="gpu_verify_requests"
    )
    node_name = models.CharField(max_length=253)
    node_uid = models.CharField(max_length=64, help_text="The node incarnation asked about")
    requested_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=500)
    requested_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.node_name}"


class GpuVerification(models.Model):
    """What a Job pinned to a node found its pods can use of the node's GPUs, held against
    what whitesky bills for its machine: one per node incarnation (its uid), and one more
    per request. Written only by act (kube.gpu_verify): recorded before its Job is made."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        VERIFIED = "verified"
        MISMATCH = "mismatch"
        FAILED = "failed"

    UNFINISHED = (Status.PENDING, Status.RUNNING)

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_verifications")
    node_name = models.CharField(max_length=253)
    node_uid = models.CharField(max_length=64)
    request = models.OneToOneField(
        GpuVerifyRequest,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="verification",
        help_text="The person's request it answers; none: the node's first GPUs.",
    )
    status = models.CharField(max_length=16, choices=Status, default=Status.PENDING)
    reasons = models.JSONField(
        default=list, blank=True, help_text="Why it is not verified, each with both sides."
    )
    gpus = models.JSONField(
        default=list,
        blank=True,
        help_text="The GPUs the Job's pod saw: model, memory (MiB), driver, UUID, MIG mode.",
    )
    job_name = models.CharField(max_length=63)
    started_at = models.DateTimeField(help_text="When it was recorded, before its Job was made")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "job_name"], name="gpu_verify_job_unique"),
            # One Job at a time per node incarnation.
            models.UniqueConstraint(
                fields=["cluster", "node_uid"],
                condition=Q(status__in=["pending", "running"]),
                name="gpu_verify_one_running_per_node",
            ),
        ]
        indexes = [models.Index(fields=["cluster", "node_uid", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.node_name}: {self.status}"

    @property
    def finished(self) -> bool:
        return self.status not in self.UNFINISHED


class GpuVerifyJob(models.Model):
    """A verification Job of ours in the cluster and its pod, as the last listing of the
    verification namespace showed them (kube.gpu_verify's mirror; written only there)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_verify_jobs")
    name = models.CharField(max_length=63)
    node_uid = models.CharField(max_length=64, blank=True)
    finished = models.CharField(
        max_length=16, blank=True, help_text="Complete or Failed, as the Job's condition says"
    )
    reason = models.CharField(max_length=200, blank=True)
    message = models.TextField(blank=True)
    pod_name = models.CharField(max_length=253, blank=True, help_text="Empty: no pod yet")
    pod_phase = models.CharField(max_length=16, blank=True)
    pod_reason = models.CharField(max_length=200, blank=True)
    pod_message = models.TextField(blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="gpu_verify_job_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class GpuUseFigures(models.Model):
    """The figures of GPU use kept at a read (kube.gpu_use.gpu_use_summary's): a cluster's,
    or its GPUs' in one location."""

    efficiency_percent = models.DecimalField(
        max_digits=4,
        decimal_places=1,
        null=True,
        blank=True,
        help_text="Used GPU-time over GPU-time held by pods in the window; empty: none held.",
    )
    gpus_in_use = models.PositiveIntegerField(default=0)
    gpus_unused = models.PositiveIntegerField(
        default=0, help_text="Requested but unused: held below the threshold for hours."
    )
    gpus_idle = models.PositiveIntegerField(default=0, help_text="No pod holds it.")

    class Meta:
        abstract = True


class GpuUseState(GpuUseFigures):
    """How a cluster's GPU use was last read from NVIDIA's dcgm-exporter (kube.gpu_use, its
    only writer). No row: never looked for, the cluster has no GPU node."""

    cluster = models.OneToOneField(
        Cluster, on_delete=models.CASCADE, primary_key=True, related_name="gpu_use_state"
    )
    exporter = models.CharField(
        max_length=300,
        blank=True,
        help_text="The exporter's Service as last found (namespace/name); empty: none found.",
    )
    looked_at = models.DateTimeField(help_text="When the exporter was last looked for and read")
    error = models.TextField(
        blank=True, help_text="Why the last read missed some or all GPUs: their use is unknown."
    )
    # Its figures (GpuUseFigures) are the cluster's as kube.gpu_use.gpu_use gave them right
    # after the last read, for the pages and /metrics that show every cluster at once.

    def __str__(self) -> str:
        return str(self.cluster)


class GpuUseLocation(GpuUseFigures):
    """A cluster's GPU use in one location, kept at its last read with its GpuUseState
    (kube.gpu_use, its only writer): the figures of the GPUs of its nodes whose machines
    are there, with the efficiency's terms, so that a location's page adds its clusters
    up. A GPU of a node that is no machine of ours is in no location."""

    state = models.ForeignKey(
        GpuUseState, on_delete=models.CASCADE, related_name="locations", help_text="Its cluster's"
    )
    location = models.ForeignKey(
        "cloud.Location", on_delete=models.CASCADE, related_name="gpu_use_of_clusters"
    )
    held_samples = models.PositiveIntegerField(
        default=0, help_text="Reads of its GPUs in the window while a pod held them."
    )
    used_percent_sum = models.PositiveBigIntegerField(
        default=0, help_text="Their utilisation summed, in %: the efficiency's numerator."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["state", "location"], name="gpu_use_location_per_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.state} in {self.location_id}"


class GpuUseSample(models.Model):
    """One GPU's use at one read of its node's dcgm-exporter, and the pod the exporter says
    holds it. Kept for GPU_USE_WINDOW_HOURS (kube.gpu_use prunes older ones as it reads)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gpu_use_samples")
    node_name = models.CharField(max_length=253)
    gpu = models.PositiveSmallIntegerField(help_text="The GPU's index on its node")
    uuid = models.CharField(max_length=64)
    model_name = models.CharField(max_length=100, blank=True)
    namespace = models.CharField(max_length=63, blank=True)
    pod = models.CharField(max_length=253, blank=True, help_text="Empty: no pod holds it")
    utilisation = models.PositiveSmallIntegerField(help_text="DCGM_FI_DEV_GPU_UTIL, in %")
    memory_used_mib = models.PositiveIntegerField(help_text="DCGM_FI_DEV_FB_USED, in MiB")
    sampled_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["cluster", "sampled_at"])]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.node_name}/{self.gpu}"
