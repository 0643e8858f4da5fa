"""SR-IOV NICs per pod: the external networks of each location, each cluster's SR-IOV
configuration and agent tokens, the NIC of each pod, and NICs that nobody owns.

Imports go one way: `sriov` reads `clusters` (clusters, their machines, mirrored pods and
nodes); `clusters` knows nothing of `sriov`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models

from capvco_web.encryption import EncryptedTextField
from capvco_web.rows import joined_forget
from capvco_web.validators import visible_text
from cloud.models import MAX_CREDENTIAL_LENGTH, Location, jwt_shape
from clusters.models import Cluster, Machine

# Token prefix of the node agents (the CNI plugin), apart from people's API tokens.
AGENT_TOKEN_PREFIX = "cvsriov_"  # noqa: S105 (a prefix, not a secret)
MIN_MTU, MAX_MTU = 576, 9216


class ExternalNetwork(models.Model):
    """An external network of a location, as whitesky lists it (mirrored)."""

    location = models.ForeignKey(
        Location, on_delete=models.CASCADE, related_name="external_networks"
    )
    network_id = models.BigIntegerField(help_text="whitesky's external_network_id")
    name = models.CharField(max_length=200)
    network = models.CharField(max_length=64, blank=True, help_text="As listed, e.g. 10.50.0.0")
    gateway = models.CharField(max_length=64, blank=True)
    prefix_len = models.PositiveSmallIntegerField(null=True, blank=True)
    free_addresses = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Free addresses at the last look (networks that SR-IOV uses only).",
    )
    last_seen_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["location", "network_id"], name="external_network_unique_per_location"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.network_id}) in {self.location}"


class SriovConfig(models.Model):
    """Whether a cluster's pods may get NICs, on which external network, and the
    credential the NIC calls are made with.

    The credential is the operator's, given for SR-IOV alone: never the account's own
    (which creates and deletes VMs and reserves GPUs), never a default. Enabling needs
    it, the network, and the cluster's kubeconfig (NICs are reclaimed from pod listings).
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="sriov")
    enabled = models.BooleanField(default=False)
    external_network = models.CharField(
        max_length=200,
        blank=True,
        validators=[visible_text],
        help_text="The external network pods get NICs on: its name or id, in each "
        "location of the cluster.",
    )
    credential = EncryptedTextField(
        blank=True,
        validators=[MaxLengthValidator(MAX_CREDENTIAL_LENGTH), jwt_shape],
        help_text="The JWT the NICs are attached and detached with; stored encrypted, never shown.",
    )
    credential_set_at = models.DateTimeField(null=True, blank=True, editable=False)
    credential_source = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="Empty: given by an admin. Imported clusters: the Secret "
        "<namespace>/<name> of the management cluster it is read from.",
    )
    credential_error = models.TextField(
        blank=True, editable=False, help_text="Why the imported credential could not be read"
    )
    mtu = models.PositiveIntegerField(
        default=1500,
        validators=[MinValueValidator(MIN_MTU), MaxValueValidator(MAX_MTU)],
        help_text="The MTU the CNI plugin sets on a pod's NIC.",
    )
    install_node_side = models.BooleanField(
        default=False,
        help_text="The SR-IOV add-on: when an agent token is made, the control plane applies "
        "the node manifests (Secret, DaemonSet, NetworkAttachmentDefinition) to the cluster "
        "itself; its kubeconfig must then be allowed to create and replace them.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "SR-IOV configuration"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(mtu__gte=MIN_MTU, mtu__lte=MAX_MTU), name="sriov_mtu_bounded"
            ),
            # An enabled configuration always has its credential and network, whatever
            # wrote the row.
            models.CheckConstraint(
                condition=models.Q(enabled=False)
                | (~models.Q(credential="") & ~models.Q(external_network="")),
                name="sriov_enabled_needs_credential_and_network",
            ),
        ]

    def __str__(self) -> str:
        return f"SR-IOV of {self.cluster}"

    @property
    def has_credential(self) -> bool:
        return bool(self.credential)


class AgentToken(models.Model):
    """A key of the agent API: `cvsriov_<key_id>_<secret>`. Only a SHA-256 is kept; the
    token is shown once.

    Two kinds: the cluster's **enrollment** token (`node_name` empty), which the node
    DaemonSet's Secret carries and which only enrolls nodes; and a **node** token, bound
    to one node of the cluster, which the installer got for its node and the CNI plugin
    calls with (it acts only for pods on that node)."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="sriov_agent_tokens"
    )
    node_name = models.CharField(
        max_length=253,
        blank=True,
        editable=False,
        help_text="The node a node token is bound to; empty: the cluster's enrollment token.",
    )
    machine = models.ForeignKey(
        Machine,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        editable=False,
        related_name="sriov_agent_tokens",
        help_text="The machine whose node a node token is bound to: the token goes with it "
        "(a later machine of the same name enrolls afresh).",
    )
    enrolled_from = models.GenericIPAddressField(
        null=True, blank=True, editable=False, help_text="The address a node token was asked from."
    )
    key_id = models.CharField(max_length=16, unique=True, editable=False)
    token_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from then on (a replaced token's overlap)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One current token per node (and one enrollment token) per cluster; replaced
            # ones have an end.
            models.UniqueConstraint(
                fields=["cluster", "node_name"],
                condition=models.Q(expires_at__isnull=True),
                name="agent_token_current_once",
            )
        ]

    def __str__(self) -> str:
        whose = f"node {self.node_name}" if self.node_name else "enrollment"
        return f"{AGENT_TOKEN_PREFIX}{self.key_id} ({whose}) of {self.cluster}"


class GonePod(models.Model):
    """A pod holding a NIC that complete pod listings show gone or finished, and since
    when: written only by reclaim's reading of the pod mirror (sriov.reclaim), deleted
    when its pod shows again or no NIC of it is left. Its NICs are reclaimed once the
    grace period has passed."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gone_pods")
    pod_uid = models.CharField(max_length=64)
    since = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "pod_uid"], name="gone_pod_unique")
        ]

    def __str__(self) -> str:
        return self.pod_uid


class PodNic(models.Model):
    """An external NIC that belongs to one pod, on the VM of the node the pod runs on.

    It is the attachment of one sandbox: keyed, as the CNI spec says, by
    (`container_id`, `ifname`), so a DEL of an older sandbox of the pod never touches the
    NIC of a newer one. One live NIC per pod: a new sandbox's ADD releases the NIC an older
    sandbox still holds before it attaches its own.

    Recorded before whitesky is asked: `requested` (queued on its VM since `queued_at`:
    the VM's queue task attaches the VM's requests one at a time, in that order),
    `attaching` (the attach was sent; `macs_before` holds the VM's NICs before it, so a
    lost answer resolves to the one new NIC), `attached`, `detaching`, `released`, or
    `failed` (`failure` and `failure_code` say why; a repeated ADD queues it again). A DEL
    or GC queues its detach on the same VM queue (`detach_queued_at`): attaches and
    detaches of a VM are made one at a time, in the order they were asked for.
    """

    class State(models.TextChoices):
        REQUESTED = "requested"
        ATTACHING = "attaching"
        ATTACHED = "attached"
        DETACHING = "detaching"
        RELEASED = "released"
        FAILED = "failed"

    LIVE_STATES = (State.REQUESTED, State.ATTACHING, State.ATTACHED, State.DETACHING)

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pod_nics")
    pod_uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    pod_name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253)
    container_id = models.CharField(max_length=128, blank=True, help_text="CNI_CONTAINERID")
    cni_network = models.CharField(
        max_length=253,
        blank=True,
        help_text="The name of the CNI network configuration it was added with; GC of that "
        "network only looks at its own",
    )
    ifname = models.CharField(
        max_length=15,
        blank=True,
        help_text="CNI_IFNAME; empty on NICs recorded before it was kept (they answer to "
        "their container id with any interface name)",
    )
    machine = models.ForeignKey(
        Machine, on_delete=models.SET_NULL, null=True, blank=True, related_name="pod_nics"
    )
    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="pod_nics")
    cloudspace_id = models.CharField(max_length=100)
    vm_id = models.BigIntegerField()
    network_id = models.BigIntegerField(help_text="whitesky's external_network_id")
    network_name = models.CharField(max_length=200, blank=True)
    mac = models.CharField(max_length=17, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    prefix_len = models.PositiveSmallIntegerField(null=True, blank=True)
    gateway = models.CharField(max_length=64, blank=True)
    mtu = models.PositiveIntegerField(default=1500)
    state = models.CharField(max_length=16, choices=State, default=State.REQUESTED)
    macs_before = models.JSONField(
        default=list, blank=True, help_text="The VM's NIC MACs listed just before the attach"
    )
    failure = models.TextField(blank=True)
    failure_code = models.CharField(
        max_length=40,
        blank=True,
        help_text="What kind of failure, as the agent API names it (e.g. whitesky_refused)",
    )
    queued_at = models.DateTimeField(
        null=True, blank=True, help_text="When its ADD put it in its VM's queue (last time)"
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    attach_started_at = models.DateTimeField(null=True, blank=True)
    attached_at = models.DateTimeField(null=True, blank=True)
    detach_requested_at = models.DateTimeField(null=True, blank=True)
    detach_queued_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a DEL or GC put its detach in its VM's queue; cleared when that "
        "detach failed (`failure` says why)",
    )
    detach_reason = models.CharField(
        max_length=300, blank=True, help_text="Why its queued detach was asked for"
    )
    released_at = models.DateTimeField(null=True, blank=True)
    # What the pod listings say of its pod: reclaim's observed row, joined on the pod uid.
    gone = models.ForeignObject(
        "sriov.GonePod",
        from_fields=["cluster", "pod_uid"],
        to_fields=["cluster", "pod_uid"],
        on_delete=models.DO_NOTHING,
        null=True,
        related_name="nics",
    )
    release_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "pod NIC"
        constraints = [
            # One NIC per pod at a time; a released one leaves room for the next.
            models.UniqueConstraint(
                fields=["cluster", "pod_uid"],
                condition=~models.Q(state="released"),
                name="one_live_nic_per_pod",
            ),
            models.UniqueConstraint(
                fields=["cluster", "container_id", "ifname"],
                condition=~models.Q(state="released") & ~models.Q(container_id=""),
                name="one_live_nic_per_attachment",
            ),
            models.UniqueConstraint(
                fields=["location", "mac"],
                condition=~models.Q(state="released") & ~models.Q(mac=""),
                name="nic_mac_owned_once",
            ),
        ]
        indexes = [
            models.Index(fields=["location", "vm_id", "state"]),
            models.Index(fields=["cluster", "state"]),
            models.Index(fields=["location", "vm_id", "queued_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod_name} on VM {self.vm_id}"

    def refresh_from_db(self, *args: Any, **kwargs: Any) -> None:
        super().refresh_from_db(*args, **kwargs)
        joined_forget(self, "gone")

    @property
    def pod_gone_since(self) -> datetime | None:
        """Since when complete pod listings show its pod gone or finished (GonePod)."""
        try:
            return self.gone.since if self.gone else None
        except GonePod.DoesNotExist:
            return None

    def is_attachment(self, container_id: str, ifname: str) -> bool:
        """Whether this NIC is the attachment (CNI_CONTAINERID, CNI_IFNAME)."""
        return (
            bool(container_id)
            and self.container_id == container_id
            and (self.ifname in ("", ifname))
        )


class LeakedNic(models.Model):
    """A NIC on the SR-IOV network of a cluster's VM that no pod NIC owns (seen in a
    listing). Detached after the grace period when the account allows, else it waits
    for a person."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="leaked_nics")
    location = models.ForeignKey(Location, on_delete=models.CASCADE, related_name="leaked_nics")
    cloudspace_id = models.CharField(max_length=100)
    vm_id = models.BigIntegerField()
    network_id = models.BigIntegerField()
    mac = models.CharField(max_length=17)
    ip = models.GenericIPAddressField(null=True, blank=True)
    leaked_since = models.DateTimeField(help_text="When a listing first showed it unowned")
    detach_requested_at = models.DateTimeField(null=True, blank=True)
    detach_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    detach_reason = models.CharField(max_length=1000, blank=True)
    failure = models.TextField(blank=True, help_text="Why the last detach did not happen")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["location", "vm_id", "mac"], name="leaked_nic_once")
        ]
        permissions = [("detach_leakednic", "Can detach a leaked NIC (with a reason)")]

    def __str__(self) -> str:
        return f"{self.mac} ({self.ip}) on VM {self.vm_id}"
