"""A pod's NIC: attached when the CNI plugin asks (ADD), detached when it says the sandbox
is gone (DEL), when the runtime no longer counts it among its attachments (GC), or when
the reclaimer finds its pod gone.

* A NIC is the attachment of one sandbox, (container id, ifname) as the CNI spec keys
  it: a DEL or CHECK names that key, and a DEL of another sandbox of the same pod (a late
  DEL of an old one) changes nothing. A pod has one live NIC: the ADD of a new sandbox
  releases the NIC its old sandbox still holds (the runtime lost that sandbox without a
  DEL) before it attaches one, so a pod is never billed for two.

* ADD never waits for a VM: it checks the pod and its node, records the request (the row,
  `requested`, in its VM's queue since `queued_at`) and answers at once: the NIC when it
  is attached (a repeated ADD, a lost answer), else the request and its place in the
  queue. The VM's queue task (`vm_queue_run`, one runner per VM at a time) attaches the
  VM's requests one after the other, in order, and records each outcome on its row
  (`failure_code`, `failure`), which the plugin's poll reads.
* DEL and GC never wait for a VM either: they record the detach (`detach_queued_at`, on
  the same queue) and answer at once; the VM's queue task detaches it in its turn, after
  what was asked for before it. DEL answers 202 while the detach is queued and the
  plugin polls until the NIC is released (404), as it polls an ADD; a detach that failed
  leaves the queue with the reason on its row (`failure_code`, `failure`).
* One attach or detach at a time per VM: the whitesky attach answers only `{success}`, so
  the new NIC is the one the VM's listing gains (`whitesky.new_nic`, the one place that
  decides it), which two attaches at once would make ambiguous. The turn is a lock per VM
  (`vm_turn`), taken by the queue runner for each attach and each detach, and by the
  reclaimer's detaches.
* Recorded before acting: the row is `attaching` with the VM's MACs before the attach
  (`macs_before`) before the attach is sent; two listings per attach, before and after.
  An attach whose answer was lost (or whose runner was killed) stays `attaching`, first
  in its VM's queue: the next run lists the VM's NICs once, and the one NIC that is new
  since, on the network, that no other row owns, is this pod's; none, in a listing begun
  after the attach's outcome window (`outcome_window`: it may still land until then),
  means it did not happen, and it is sent again.
* DEL of a request still queued cancels it (nothing was sent); of any other, it queues
  its detach.
* Every whitesky call is made with the cluster's SR-IOV credential, never the account's.
* A refusal by whitesky (attach or detach on a running VM, where the platform refuses
  that) is said in the answer and on the row; the VM is never stopped.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import Case, Min, Q, QuerySet, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from capvco_web.audit import SystemActor, audit_record
from capvco_web.counters import count, sriov_attach_observe
from capvco_web.integrations import whitesky as ws
from capvco_web.locks import object_lock
from capvco_web.rows import model_update
from capvco_web.worker_slots import account_calls_slot
from cloud.models import Location
from clusters.models import Cluster
from sriov.models import ExternalNetwork, PodNic, SriovConfig
from sriov.networks import NetworkUnknown, network_resolve
from sriov.placement import (
    CannotConfirm,
    KubeClientFactory,
    Placement,
    Refused,
    WrongNode,
    node_placement,
    pod_check,
    shared_kube,
)
from sriov.whitesky import NoCredential, sriov_whitesky_client

logger = logging.getLogger(__name__)

State = PodNic.State
AGENT = SystemActor.SRIOV_AGENT  # the actor of what the CNI plugin asks for
_FAILURE_LIMIT = 1000
RETRY_AFTER_MAX = 5  # seconds: the longest a queued ADD's plugin is told to wait between polls
POLL_AFTER_MIN_MS = 50  # the shortest wait a queued ADD's plugin is told
ATTACH_SECONDS_GUESS = 1.0  # a VM's attach time before it has one measured
ATTACH_SAMPLES = 5  # the VM's last attaches its attach time is the mean of


class VmBusy(Refused):
    """The VM's turn did not come within the wait: the caller tries again later."""

    status = 503
    code = "vm_busy"
    retry_after = 2


class WhiteskyRefused(Refused):
    """whitesky refused the attach or detach (e.g. on a running VM); nothing was stopped."""

    status = 409
    code = "whitesky_refused"


class WhiteskyFailed(Refused):
    status = 503
    code = "whitesky_unavailable"
    retry_after = 5


class NotEnabled(Refused):
    code = "sriov_disabled"


@dataclass(frozen=True)
class Clients:
    """How the agent reaches the outside: whitesky with the SR-IOV credential, and the
    cluster's Kubernetes (used only when the mirror cannot answer)."""

    whitesky: Callable[[SriovConfig], ws.WhiteskyClient] = sriov_whitesky_client
    kube: Callable[[Cluster], KubeClientFactory] = shared_kube


def vm_lock_name(location_id: int, vm_id: int) -> str:
    return f"sriov-vm:{location_id}:{vm_id}"


@contextmanager
def vm_turn(
    *,
    location_id: int,
    vm_id: int,
    wait: float,
    queue_position: Callable[[], int] | None = None,
) -> Iterator[None]:
    """Wait (at most `wait` seconds) for the VM's one attach/detach slot, hold it for the
    block. Raises VmBusy, saying how many wait ahead, when the turn did not come."""
    name = vm_lock_name(location_id, vm_id)
    deadline = time.monotonic() + wait
    delay = 0.01
    while True:
        with object_lock(name) as taken:
            if taken:
                yield
                return
        left = deadline - time.monotonic()
        if left <= 0:
            ahead = queue_position() if queue_position else 0
            raise VmBusy(
                f"VM {vm_id} attaches or detaches one NIC at a time; waited {wait:.0f} s and "
                f"{ahead} request(s) are still ahead. Try again."
            )
        time.sleep(min(delay, left))
        delay = min(delay * 1.5, 0.2)


def _queue_ahead(row: PodNic) -> Callable[[], int]:
    def ahead() -> int:
        return (
            PodNic.objects.filter(
                location_id=row.location_id,
                vm_id=row.vm_id,
                state__in=[State.REQUESTED, State.ATTACHING, State.DETACHING],
                requested_at__lt=row.requested_at,
            )
            .exclude(pk=row.pk)
            .count()
        )

    return ahead


def _config(cluster: Cluster) -> SriovConfig:
    config = SriovConfig.objects.select_related("cluster__account").filter(cluster=cluster).first()
    if config is None or not config.enabled:
        raise NotEnabled(
            f"SR-IOV is not enabled for cluster {cluster.name}: an admin enables it with a "
            "credential and an external network."
        )
    return config


def _whitesky(clients: Clients, config: SriovConfig) -> ws.WhiteskyClient:
    try:
        return clients.whitesky(config)
    except NoCredential as exc:
        raise NotEnabled(str(exc)) from exc


# --- ADD ---------------------------------------------------------------------------------


def pod_nic_add(
    *,
    cluster: Cluster,
    pod_uid: str,
    namespace: str,
    pod_name: str,
    node_name: str,
    container_id: str,
    ifname: str,
    cni_network: str = "",
    clients: Clients | None = None,
) -> PodNic:
    """The request for the NIC of the attachment (container id, ifname) of the pod (ADD),
    recorded: `attached` (the same ADD again, the plugin's retry after a lost answer,
    answers the same NIC), or queued on its VM (`requested` or `attaching`; the VM's queue
    task attaches it). A failed request is queued again. Never waits for the VM's turn.
    Raises Refused (with the HTTP status that says why) when it cannot be had."""
    clients = clients or Clients()
    config = _config(cluster)
    cluster = config.cluster  # as it is now (the caller's may be its agent token's, cached)
    existing = PodNic.objects.filter(cluster=cluster, pod_uid=pod_uid).exclude(state=State.RELEASED)
    row = existing.first()
    if row is not None and row.node_name != node_name:
        raise WrongNode(
            f"Pod {namespace}/{pod_name} has its NIC on node {row.node_name}, not on "
            f"{node_name}: a node asks only for its own pods."
        )
    if (
        row is not None
        and row.container_id == container_id
        and not row.is_attachment(container_id, ifname)
    ):
        raise Refused(
            f"Pod {namespace}/{pod_name} has its NIC as {row.ifname}: one SR-IOV NIC per pod."
        )
    if row is not None and not row.is_attachment(container_id, ifname):
        # A new sandbox of the pod while an old one holds the NIC: release that first, now
        # if the VM's turn is free (else VmBusy: the plugin asks again after Retry-After).
        nic_release(
            row=row,
            clients=clients,
            wait=0,
            actor=AGENT,
            reason=f"CNI ADD of a new sandbox ({container_id[:64]}) of the pod: the NIC of "
            f"its old sandbox ({row.container_id[:64]}) is released first",
        )
        row = None
    if (
        row is not None
        and row.detach_queued_at is None
        and row.state in (State.ATTACHED, State.REQUESTED, State.ATTACHING)
    ):
        return row
    if row is not None and (row.state == State.DETACHING or row.detach_queued_at is not None):
        raise Refused(
            f"The NIC of pod {namespace}/{pod_name} is being detached; ADD again once it is "
            "released."
        )
    if row is not None:  # failed: this ADD queues it again
        model_update(
            row,
            {
                "state": State.REQUESTED,
                "queued_at": timezone.now(),
                "failure": "",
                "failure_code": "",
            },
            expect={"state": State.FAILED},
        )
        row.refresh_from_db()
        return row
    with _whitesky(clients, config) as client:
        return _first_request(
            cluster=cluster,
            config=config,
            client=client,
            kube=clients.kube(cluster),
            pod_uid=pod_uid,
            namespace=namespace,
            pod_name=pod_name,
            node_name=node_name,
            container_id=container_id,
            ifname=ifname,
            cni_network=cni_network,
        )


def queued() -> Q:
    """The rows waiting in their VM's queue: an attach not made yet, or a detach."""
    return Q(state__in=[State.REQUESTED, State.ATTACHING]) | (
        Q(detach_queued_at__isnull=False) & ~Q(state=State.RELEASED)
    )


def vm_queue(*, location_id: int, vm_id: int) -> QuerySet[PodNic]:
    """The VM's attaches and detaches in the order they are made: an attach under way (or
    whose answer was lost) first, then by when they were queued (a detach since its DEL
    or GC, an attach since its ADD)."""
    return (
        PodNic.objects.filter(location_id=location_id, vm_id=vm_id)
        .filter(queued())
        .order_by(
            Case(When(state=State.ATTACHING, then=Value(0)), default=Value(1)),
            Coalesce("detach_queued_at", "queued_at").asc(nulls_first=True),
            "pk",
        )
    )


def is_queued(row: PodNic) -> bool:
    """Whether the row waits in its VM's queue: an attach not made yet, or a detach."""
    return row.state in (State.REQUESTED, State.ATTACHING) or (
        row.detach_queued_at is not None and row.state != State.RELEASED
    )


def poll_after(position: int) -> int:
    """Seconds until the plugin asks again: about one attach per place ahead, at most
    RETRY_AFTER_MAX."""
    return max(1, min(position, RETRY_AFTER_MAX))


def attach_seconds(*, location_id: int, vm_id: int) -> float:
    """How long the VM's attaches took lately (the mean of its last few, from the turn to
    the NIC found); before its first, its location's; ATTACH_SECONDS_GUESS before any. One
    query (two on SQLite): the VM's last few and the location's."""
    attached = PodNic.objects.filter(
        location_id=location_id, attached_at__isnull=False, attach_started_at__isnull=False
    )

    def recent(rows: QuerySet[PodNic], own: bool) -> QuerySet[Any, Any]:
        fields = ("own", "attach_started_at", "attached_at")
        mine = rows.annotate(own=Value(own)).values_list(*fields)
        return mine.order_by("-attached_at")[:ATTACH_SAMPLES]

    vms, locations = recent(attached.filter(vm_id=vm_id), True), recent(attached, False)
    found: list[tuple[bool, datetime, datetime]]
    if connection.features.supports_slicing_ordering_in_compound:
        found = list(vms.union(locations, all=True))
    else:  # SQLite: no LIMIT inside a UNION's parts
        found = [*vms, *locations]
    for own in (True, False):
        took = [
            (done - began).total_seconds()
            for mine, began, done in found
            if mine == own and done >= began
        ]
        if took:
            return statistics.fmean(took)
    return ATTACH_SECONDS_GUESS


@dataclass(frozen=True)
class QueuePlace:
    """A queued request's place in its VM's queue (1: attached next, or now) and the
    milliseconds until its plugin asks again."""

    position: int
    retry_after_ms: int


def queue_place(row: PodNic) -> QueuePlace | None:
    """Where the request is in its VM's queue, and when to ask again: the VM's recent
    attach time for each request ahead and its own, the attach under way counted by what
    is left of it (a quarter of one once it is overdue), within POLL_AFTER_MIN_MS and
    RETRY_AFTER_MAX. Finer than Retry-After, which HTTP keeps to whole seconds. None
    when it is not queued."""
    queue = list(
        vm_queue(location_id=row.location_id, vm_id=row.vm_id).values_list(
            "pk", "state", "attach_started_at"
        )
    )
    pks = [pk for pk, _, _ in queue]
    if row.pk not in pks:
        return None
    position = pks.index(row.pk) + 1
    each = attach_seconds(location_id=row.location_id, vm_id=row.vm_id)
    _, head_state, head_started = queue[0]
    left = each
    if head_state == State.ATTACHING and head_started is not None:
        left = max(each - (timezone.now() - head_started).total_seconds(), each / 4)
    seconds = left + (position - 1) * each
    wait = round(min(max(seconds * 1000, POLL_AFTER_MIN_MS), RETRY_AFTER_MAX * 1000))
    return QueuePlace(position=position, retry_after_ms=wait)


def _first_request(
    *,
    cluster: Cluster,
    config: SriovConfig,
    client: ws.WhiteskyClient,
    kube: KubeClientFactory,
    pod_uid: str,
    namespace: str,
    pod_name: str,
    node_name: str,
    container_id: str,
    ifname: str,
    cni_network: str,
) -> PodNic:
    """Check the pod and its node, then record its request (the row, `requested`). Only
    this cluster's mirror and Kubernetes are asked: what another cluster holds is never
    said (a pod of another cluster is, here, a pod that does not exist)."""
    pod_check(
        cluster=cluster,
        pod_uid=pod_uid,
        namespace=namespace,
        pod_name=pod_name,
        node_name=node_name,
        kube_client=kube,
    )
    placement = node_placement(cluster=cluster, node_name=node_name, kube_client=kube)
    network = _network(config, placement, client)
    return _requested(
        cluster=cluster,
        config=config,
        placement=placement,
        network=network,
        pod_uid=pod_uid,
        namespace=namespace,
        pod_name=pod_name,
        node_name=node_name,
        container_id=container_id,
        ifname=ifname,
        cni_network=cni_network,
    )


def _network(
    config: SriovConfig, placement: Placement, client: ws.WhiteskyClient
) -> ExternalNetwork:
    try:
        return network_resolve(
            client=client, location=placement.location, wanted=config.external_network
        )
    except NetworkUnknown as exc:
        raise Refused(str(exc)) from exc
    except ws.WhiteskyError as exc:
        raise WhiteskyFailed(f"Cannot list the external networks: {exc}") from exc


def _requested(
    *,
    cluster: Cluster,
    config: SriovConfig,
    placement: Placement,
    network: ExternalNetwork,
    pod_uid: str,
    namespace: str,
    pod_name: str,
    node_name: str,
    container_id: str,
    ifname: str,
    cni_network: str,
) -> PodNic:
    """The pod's row, `requested`: made now, or the one a concurrent ADD made first."""
    try:
        with transaction.atomic():
            return PodNic.objects.create(
                cluster=cluster,
                pod_uid=pod_uid,
                namespace=namespace,
                pod_name=pod_name,
                node_name=node_name,
                container_id=container_id,
                ifname=ifname,
                cni_network=cni_network,
                machine=placement.machine,
                location=placement.location,
                cloudspace_id=placement.cloudspace_id,
                vm_id=placement.vm_id,
                network_id=network.network_id,
                network_name=network.name,
                gateway=network.gateway,
                prefix_len=network.prefix_len,
                mtu=config.mtu,
                queued_at=timezone.now(),
            )
    except IntegrityError:
        row = PodNic.objects.exclude(state=State.RELEASED).get(cluster=cluster, pod_uid=pod_uid)
        if not row.is_attachment(container_id, ifname):
            raise Refused(
                f"Another sandbox of pod {namespace}/{pod_name} asked for its NIC at the "
                "same moment; ADD again."
            ) from None
        return row


def _owned_macs(row: PodNic) -> set[str]:
    """MACs of the VM that other live rows own."""
    return set(
        PodNic.objects.filter(location_id=row.location_id, vm_id=row.vm_id)
        .exclude(state=State.RELEASED)
        .exclude(pk=row.pk)
        .exclude(mac="")
        .values_list("mac", flat=True)
    )


def _fail(row: PodNic, message: str, code: str) -> None:
    model_update(
        row,
        {"state": State.FAILED, "failure": message[:_FAILURE_LIMIT], "failure_code": code},
    )


def _found(row: PodNic, listing: list[ws.VmNic]) -> ws.VmNic | None:
    """The NIC the attach of this row made, in a listing of its VM taken after it."""
    try:
        return ws.new_nic(
            listing, before=row.macs_before, owned=_owned_macs(row), network_id=row.network_id
        )
    except ws.UnexpectedResponse as exc:
        raise ws.UnexpectedResponse(
            f"{exc.message}: which NIC on VM {row.vm_id} is the one of "
            f"{row.namespace}/{row.pod_name} cannot be told",
            operation=exc.operation,
        ) from exc


def _attached(row: PodNic, nic: ws.VmNic, started: float | None) -> PodNic:
    model_update(
        row,
        {
            "state": State.ATTACHED,
            "mac": nic.mac.lower(),
            "ip": nic.ip,
            "prefix_len": nic.prefix_len or row.prefix_len,
            "attached_at": timezone.now(),
            "failure": "",
            "failure_code": "",
        },
    )
    if started is not None:
        sriov_attach_observe(time.monotonic() - started)
    count("sriov_nic_changes", "attach", "ok")
    return row


def _attach(row: PodNic, client: ws.WhiteskyClient) -> None:
    """Under the VM's turn: attach the row's NIC, or find the one an attach sent before
    made, and record the outcome on the row. Two listings of the VM's NICs at most: the
    one before (which also finds a lost answer's NIC) and the one after."""
    state = row.state
    started = time.monotonic()
    sent = False
    try:
        listing = client.list_vm_nics(cloudspace_id=row.cloudspace_id, vm_id=row.vm_id)
        if state == State.ATTACHING:
            found = _found(row, listing)
            if found is not None:
                logger.info("sriov: attach of %s resolved to %s", row, found.mac)
                _attached(row, found, None)
                return
            if _may_still_land(row, client):
                # Not listed yet, but it may still be acted on: sent again now, it could
                # make a second NIC. The queue waits for it.
                model_update(
                    row,
                    {
                        "failure": "attach sent, its NIC not listed yet: waiting until its "
                        "outcome is settled before sending it again"
                    },
                )
                return
            # The attach sent before did not happen: this listing is the one before.
        claimed = model_update(
            row,
            {
                "state": State.ATTACHING,
                "macs_before": sorted(nic.mac.lower() for nic in listing),
                "attach_started_at": timezone.now(),
                "failure": "",
                "failure_code": "",
            },
            expect={"state": state},
        )
        if not claimed:
            return  # a DEL cancelled it meanwhile
        client.send_external_nic_attach(
            cloudspace_id=row.cloudspace_id,
            vm_id=row.vm_id,
            external_network_id=row.network_id,
        )
        sent = True
        found = _found(row, client.list_vm_nics(cloudspace_id=row.cloudspace_id, vm_id=row.vm_id))
        if found is None:
            raise ws.UnexpectedResponse(
                "attach answered success but no new NIC is listed",
                operation="attachExternalNetworksVirtualMachine",
            )
    except ws.Conflict as exc:
        count("sriov_nic_changes", "attach", "refused")
        _fail(
            row,
            f"whitesky refused to attach a NIC to VM {row.vm_id}: {exc}. The VM was left as "
            "it is (running VMs are never stopped for a NIC).",
            WhiteskyRefused.code,
        )
        return
    except ws.WhiteskyError as exc:
        count("sriov_nic_changes", "attach", "error")
        if row.state == State.ATTACHING and (sent or exc.outcome_unknown):
            # Stays attaching, first in the queue: the next run finds out from the listing.
            model_update(row, {"failure": f"attach outcome unknown: {exc}"[:_FAILURE_LIMIT]})
        else:
            _fail(row, f"attach failed: {exc}", WhiteskyFailed.code)
        return
    _attached(row, found, started)


def _may_still_land(row: PodNic, client: ws.WhiteskyClient) -> bool:
    """Whether the attach sent for the row may still be acted on (its outcome window has not
    passed): only a listing after that says it did not happen."""
    sent = row.attach_started_at
    return sent is not None and timezone.now() < sent + timedelta(seconds=client.outcome_window)


@dataclass
class QueueResult:
    """What a run of a VM's queue did. `busy`: a detach (the reclaimer's) held the VM's
    turn; `unresolved`: an attach whose outcome is not known yet holds the queue. Either
    way the run stopped and is sent again later. `failed`: attaches and detaches that
    failed (each row says why)."""

    attached: list[PodNic] = field(default_factory=list)
    detached: list[PodNic] = field(default_factory=list)
    failed: list[PodNic] = field(default_factory=list)
    busy: bool = False
    unresolved: PodNic | None = None

    @property
    def again(self) -> bool:
        return self.busy or self.unresolved is not None


def vm_queue_lock_name(location_id: int, vm_id: int) -> str:
    return f"sriov-vm-queue:{location_id}:{vm_id}"


def vm_queue_run(*, location_id: int, vm_id: int, clients: Clients | None = None) -> QueueResult:
    """Make the VM's queued attaches and detaches one at a time, in order, each under the
    VM's turn, and record each outcome on its row. One runner per VM: another run already
    under way makes this one a no-op, and a runner looks at the queue again after letting
    it go (a request queued while it finished is never left behind)."""
    clients = clients or Clients()
    result = QueueResult()
    while True:
        with object_lock(vm_queue_lock_name(location_id, vm_id)) as runner:
            if not runner:
                return result
            _queue_drain(location_id=location_id, vm_id=vm_id, clients=clients, result=result)
        if result.again or not vm_queue(location_id=location_id, vm_id=vm_id).exists():
            return result


def vm_queues_run(
    *, location_id: int, vm_id: int, clients: Clients | None = None
) -> dict[int, QueueResult]:
    """Run the VM's queue (`vm_queue_run`) and, beside it, the queues of the location's
    other VMs that wait: each VM's attaches one at a time, as ever, and different VMs' at
    once, each runner holding one of the account's call slots
    (WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT, counted over every worker), so a burst of ADDs
    over many VMs is not held to one worker process per VM. A runner that sees another VM
    waiting starts one more, while slots are free; a VM whose queue another worker runs is
    left to it. What each run did, by VM: the VM's own is `busy` when no slot was free."""
    clients = clients or Clients()
    account_id = Location.objects.values_list("account_id", flat=True).get(pk=location_id)
    runners = _QueueRunners(location_id=location_id, account_id=account_id, first=vm_id)
    try:
        runners.run(clients)
    finally:
        runners.join()
    runners.results.setdefault(vm_id, QueueResult(busy=True))
    return runners.results


class _QueueRunners:
    """The runners of one `vm_queues_run`: each takes a call slot, then VMs one after the
    other, the first VM first, then the one waiting longest that this run has not run."""

    def __init__(self, *, location_id: int, account_id: int, first: int) -> None:
        self.location_id = location_id
        self.account_id = account_id
        self.first = first
        self.results: dict[int, QueueResult] = {}
        self._taken: set[int] = set()  # VMs a runner of this run took
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def run(self, clients: Clients) -> None:
        with account_calls_slot(self.account_id) as slot:
            if not slot:
                return
            while (vm_id := self._next(clients)) is not None:
                self.results[vm_id] = vm_queue_run(
                    location_id=self.location_id, vm_id=vm_id, clients=clients
                )

    def join(self) -> None:
        while self._threads:
            self._threads.pop().join()

    def _next(self, clients: Clients) -> int | None:
        """The VM this runner runs next (None: none waits), and one more runner when
        another VM waits after it."""
        with self._lock:
            waiting = (
                PodNic.objects.filter(queued(), location_id=self.location_id)
                .exclude(vm_id__in=self._taken)
                .values("vm_id")
                .annotate(since=Min(Coalesce("detach_queued_at", "queued_at")))
                .order_by("since", "vm_id")
                .values_list("vm_id", flat=True)
            )
            chosen = [self.first] if self.first not in self._taken else []
            chosen += [vm for vm in waiting[:2] if vm != self.first]
            if not chosen:
                return None
            self._taken.add(chosen[0])
            bound = settings.WHITESKY_CALLS_IN_FLIGHT_PER_ACCOUNT
            if len(chosen) > 1 and len(self._threads) + 1 < bound:
                thread = threading.Thread(target=self._helper, args=(clients,), daemon=True)
                self._threads.append(thread)
                thread.start()
            return chosen[0]

    def _helper(self, clients: Clients) -> None:
        try:
            self.run(clients)
        except Exception:
            logger.exception("sriov: a queue runner of location %s failed", self.location_id)
        finally:
            connections.close_all()  # this thread's


def _queue_drain(*, location_id: int, vm_id: int, clients: Clients, result: QueueResult) -> None:
    while (row := vm_queue(location_id=location_id, vm_id=vm_id).first()) is not None:
        detach = row.detach_queued_at is not None
        with object_lock(vm_lock_name(location_id, vm_id)) as taken:
            if not taken:
                result.busy = True
                return
            if detach:
                _queued_detach(row, clients)
            else:
                _queued_attach(row, clients)
        if detach:
            if row.state == State.RELEASED:
                result.detached.append(row)
            elif row.detach_queued_at is None:
                result.failed.append(row)
            else:  # still queued (never expected): the next run tries again
                result.busy = True
                return
        elif row.state == State.ATTACHED:
            result.attached.append(row)
        elif row.state == State.FAILED:
            result.failed.append(row)
        elif row.state == State.ATTACHING:
            result.unresolved = row
            return


def _queued_attach(row: PodNic, clients: Clients) -> None:
    row.refresh_from_db()
    if row.state not in (State.REQUESTED, State.ATTACHING):
        return
    config = (
        SriovConfig.objects.select_related("cluster__account")
        .filter(cluster_id=row.cluster_id)
        .first()
    )
    try:
        if config is None or not config.enabled:
            raise NotEnabled(f"SR-IOV of cluster {row.cluster_id} was turned off.")
        client = _whitesky(clients, config)
    except NotEnabled as exc:
        if row.state == State.REQUESTED:
            _fail(row, exc.message, exc.code)
        else:  # an attach was sent: only a listing with the credential can tell
            model_update(row, {"failure": exc.message[:_FAILURE_LIMIT]})
        return
    with client:
        _attach(row, client)


# --- DEL ---------------------------------------------------------------------------------


def nic_of_node(
    *, cluster: Cluster, node_name: str, pod_uid: str, container_id: str, ifname: str
) -> PodNic | None:
    """The live NIC of the attachment (container id, ifname) of the pod in the cluster, as
    the node `node_name` may act on it: None when that sandbox holds none (also when
    another cluster has one: that is never said); WrongNode when another node's VM holds
    the pod's NIC."""
    row = (
        PodNic.objects.filter(cluster=cluster, pod_uid=pod_uid)
        .exclude(state=State.RELEASED)
        .first()
    )
    if row is not None and row.node_name != node_name:
        raise WrongNode(
            f"The NIC of pod {pod_uid} is held by another node's VM: a node acts only for "
            "the pods on itself."
        )
    return row if row is not None and row.is_attachment(container_id, ifname) else None


def pod_nic_delete(
    *,
    cluster: Cluster,
    node_name: str,
    pod_uid: str,
    container_id: str,
    ifname: str,
    reason: str = "CNI DEL",
) -> PodNic | None:
    """DEL of the attachment (container id, ifname) of the pod when the node `node_name`
    holds it: its detach recorded, on its VM's queue (the row, `is_queued`), or the row
    released now when nothing was sent for it yet (a request still queued). None when
    that sandbox holds none (a repeated DEL, or a late DEL of an older sandbox: the NIC of
    a newer one is left alone). Never waits for the VM's turn. Raises WrongNode (nothing
    changed) when another node holds the pod's NIC."""
    row = nic_of_node(
        cluster=cluster,
        node_name=node_name,
        pod_uid=pod_uid,
        container_id=container_id,
        ifname=ifname,
    )
    if row is None:
        return None
    detach_queue(row, reason=reason)
    return row


def detach_queue(row: PodNic, *, reason: str) -> None:
    """Queue the row's detach on its VM (the VM's queue task makes it, audited as the
    agent's, with `reason`), or release it now when it is a request nothing was sent for.
    A detach already queued keeps its place and its reason."""
    if row.state == State.REQUESTED and _cancelled(row, actor=AGENT, reason=reason):
        return
    if row.state == State.RELEASED or row.detach_queued_at is not None:
        return
    now = timezone.now()
    model_update(
        row,
        {
            "detach_queued_at": now,
            "detach_requested_at": row.detach_requested_at or now,
            "detach_reason": reason[:300],
            "failure": "",
            "failure_code": "",
        },
        expect={"detach_queued_at": None, "state__in": (*PodNic.LIVE_STATES, State.FAILED)},
    )
    row.refresh_from_db()


def _queued_detach(row: PodNic, clients: Clients) -> None:
    """The queued detach of the row, under its VM's turn. A failure takes it out of the
    queue, said on the row (`failure_code`, `failure`): the plugin's DEL reports it and
    the runtime asks again (or the reclaimer detaches it once its pod is gone)."""
    row.refresh_from_db()
    if row.state == State.RELEASED or row.detach_queued_at is None:
        return
    config = (
        SriovConfig.objects.select_related("cluster__account")
        .filter(cluster_id=row.cluster_id)
        .first()
    )
    try:
        if config is None or not config.credential:
            raise NotEnabled(f"Cluster {row.cluster_id} has no SR-IOV credential to detach with.")
        with _whitesky(clients, config) as client:
            _detach(row, client, actor=AGENT, reason=row.detach_reason or "CNI DEL")
    except Refused as exc:
        model_update(
            row,
            {
                "detach_queued_at": None,
                "failure": exc.message[:_FAILURE_LIMIT],
                "failure_code": exc.code,
            },
        )


# --- GC ----------------------------------------------------------------------------------


@dataclass
class GcResult:
    released: list[PodNic] = field(default_factory=list)  # nothing was sent for them
    detaching: list[PodNic] = field(default_factory=list)  # queued on their VM
    kept: list[PodNic] = field(default_factory=list)  # in flight, or asked for too lately

    @property
    def vms(self) -> list[tuple[int, int]]:
        """The (location, VM) pairs whose queue has a detach of this GC."""
        return sorted({(row.location_id, row.vm_id) for row in self.detaching})


def node_nics_gc(
    *,
    cluster: Cluster,
    node_name: str,
    cni_network: str,
    valid: list[tuple[str, str]],
    now: datetime | None = None,
    min_age: timedelta | None = None,
) -> GcResult:
    """CNI GC of the network `cni_network`: queue the detach of the NICs of this node added
    with it whose attachment (container id, ifname) the runtime no longer lists as valid
    (on their VM's queue, as a DEL does; never waited for). As safe as the reclaimer:
    never a NIC whose attach is still under way, nor one asked for less than
    SRIOV_RECLAIM_GRACE_SECONDS ago (the runtime's list may have been taken before its
    ADD); a NIC recorded without a container id or network name (before they were kept)
    is the reclaimer's alone. Each release is audited."""
    now = now or timezone.now()
    if min_age is None:
        min_age = timedelta(seconds=settings.SRIOV_RECLAIM_GRACE_SECONDS)
    keys = set(valid)
    containers = {container_id for container_id, _ in valid}
    result = GcResult()
    rows = (
        PodNic.objects.filter(cluster=cluster, node_name=node_name, cni_network=cni_network)
        .exclude(state=State.RELEASED)
        .exclude(container_id="")
        .exclude(cni_network="")
        .order_by("pk")
    )
    for row in rows:
        if (row.container_id, row.ifname) in keys or (
            not row.ifname and row.container_id in containers
        ):
            continue
        if row.state in (State.REQUESTED, State.ATTACHING) or row.requested_at > now - min_age:
            result.kept.append(row)
            continue
        detach_queue(row, reason="CNI GC: the runtime no longer lists its attachment as valid")
        (result.released if row.state == State.RELEASED else result.detaching).append(row)
    return result


def nic_release(
    *, row: PodNic, clients: Clients, wait: float, actor: SystemActor, reason: str
) -> None:
    """Detach the row's NIC (whatever state the row is in) and mark it released. Audited."""
    config = (
        SriovConfig.objects.select_related("cluster__account")
        .filter(cluster_id=row.cluster_id)
        .first()
    )
    if row.state == State.REQUESTED and _cancelled(row, actor=actor, reason=reason):
        return
    if config is None or not config.credential:
        raise NotEnabled(f"Cluster {row.cluster_id} has no SR-IOV credential to detach with.")
    model_update(row, {"detach_requested_at": row.detach_requested_at or timezone.now()})
    with (
        vm_turn(
            location_id=row.location_id,
            vm_id=row.vm_id,
            wait=wait,
            queue_position=_queue_ahead(row),
        ),
        _whitesky(clients, config) as client,
    ):
        _detach(row, client, actor=actor, reason=reason)


def _cancelled(row: PodNic, *, actor: SystemActor, reason: str) -> bool:
    """A request still queued is released without the VM's turn: nothing was sent for it.
    False when its VM's queue took it meanwhile (then it is detached as any other)."""
    now = timezone.now()
    with transaction.atomic():
        taken = model_update(
            row,
            {
                "state": State.RELEASED,
                "detach_requested_at": row.detach_requested_at or now,
                "released_at": now,
                "release_reason": f"{reason} (cancelled while queued)"[:300],
                "failure": "",
            },
            expect={"state": State.REQUESTED},
        )
        if taken:
            audit_record(
                actor=actor,
                action="sriov.nic_release",
                obj=row,
                reason=reason,
                before={"state": State.REQUESTED, "vm_id": row.vm_id},
                after={"state": State.RELEASED},
            )
    if not taken:
        row.refresh_from_db()
    return taken


def _released(row: PodNic, *, actor: SystemActor, reason: str, before: dict[str, Any]) -> None:
    with transaction.atomic():
        model_update(
            row,
            {
                "state": State.RELEASED,
                "released_at": timezone.now(),
                "release_reason": reason[:300],
                "failure": "",
                "failure_code": "",
            },
        )
        audit_record(
            actor=actor,
            action="sriov.nic_release",
            obj=row,
            reason=reason,
            before=before,
            after={"state": State.RELEASED},
        )
    count("sriov_nic_changes", "detach", "ok")


def _detach(row: PodNic, client: ws.WhiteskyClient, *, actor: SystemActor, reason: str) -> None:
    row.refresh_from_db()
    if row.state == State.RELEASED:
        return
    before = {"state": row.state, "mac": row.mac, "ip": row.ip, "vm_id": row.vm_id}
    try:
        sent = row.attach_started_at is not None  # macs_before may well be empty
        if not row.mac and sent and row.state in (State.ATTACHING, State.FAILED):
            # An attach whose answer was lost: what it made is detached too.
            listing = client.list_vm_nics(cloudspace_id=row.cloudspace_id, vm_id=row.vm_id)
            found = _found(row, listing)
            if found is not None:
                _attached(row, found, None)
        if not row.mac:
            # Never attached (still queued, refused, or the attach did not happen).
            _released(row, actor=actor, reason=reason, before=before)
            return
        model_update(row, {"state": State.DETACHING})
        client.detach_external_nic(
            cloudspace_id=row.cloudspace_id,
            vm_id=row.vm_id,
            ip=str(row.ip),
            external_network_id=row.network_id,
        )
    except ws.NotFound:
        # The VM, or the NIC on it, is gone already.
        _released(row, actor=actor, reason=f"{reason} (NIC already gone)", before=before)
        return
    except ws.Conflict as exc:
        count("sriov_nic_changes", "detach", "refused")
        message = (
            f"whitesky refused to detach the NIC from VM {row.vm_id}: {exc}. The VM was left "
            "as it is; the reclaimer tries again."
        )
        model_update(row, {"failure": message[:_FAILURE_LIMIT]})
        raise WhiteskyRefused(message) from exc
    except ws.WhiteskyError as exc:
        count("sriov_nic_changes", "detach", "error")
        model_update(row, {"failure": f"detach failed: {exc}"[:_FAILURE_LIMIT]})
        raise WhiteskyFailed(f"Detaching the NIC of {row.namespace}/{row.pod_name}: {exc}") from exc
    _released(row, actor=actor, reason=reason, before=before)


__all__ = [
    "AGENT",
    "CannotConfirm",
    "Clients",
    "GcResult",
    "NotEnabled",
    "QueuePlace",
    "QueueResult",
    "Refused",
    "VmBusy",
    "WhiteskyFailed",
    "WhiteskyRefused",
    "detach_queue",
    "is_queued",
    "nic_of_node",
    "nic_release",
    "node_nics_gc",
    "pod_nic_add",
    "pod_nic_delete",
    "poll_after",
    "queue_place",
    "queued",
    "vm_queue",
    "vm_queue_run",
    "vm_queues_run",
    "vm_turn",
]
