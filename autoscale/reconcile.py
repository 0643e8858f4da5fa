"""The autoscaler's pass over one cluster: plan (autoscale.plan), then act through the one
dispatcher, each step only while what it was planned from holds. Rows before calls: a
drain is recorded before its node is cordoned, so a worker killed between the two leaves a
drain the next pass carries on (it cordons again), never a cordoned node nobody owns.

Decisions (a pool grown, a drain begun, a machine kept or released) are audited with the
autoscaler as the actor and counted by direction and reason (capvco_autoscale_decisions)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from typing import assert_never

from django.db import transaction
from django.utils import timezone

from autoscale.models import GpuShortfall
from autoscale.plan import (
    AUTOSCALE_STEPS,
    AutoscalePlan,
    AutoscaleStep,
    MachineKeep,
    MachineRelease,
    MachineUnneeded,
    NodeDrain,
    PodEvict,
    PoolGrow,
    autoscale_plan,
)
from capvco_web.audit import SystemActor, audit_record
from capvco_web.counters import count
from capvco_web.integrations import kube
from capvco_web.integrations.kube.client import KubeClient
from capvco_web.locks import object_lock
from capvco_web.plans import (
    Outcome,
    PassRecord,
    PlanStep,
    StepDropped,
    StepWaiting,
    Stopwatch,
    plan_apply,
)
from capvco_web.tasks import send_by_name_on_commit
from clusters.models import Cluster, Machine, MachineDrain, MachinePool, PoolTarget

logger = logging.getLogger(__name__)
ACTOR = SystemActor.AUTOSCALER
Phase = MachineDrain.Phase


def decision_count(direction: str, reason: str) -> None:
    count("autoscale_decisions", direction, reason)


def autoscale_reconcile(
    *,
    cluster: Cluster,
    kube_client: Callable[[Cluster], KubeClient],
    now: datetime | None = None,
) -> PassRecord | None:
    """One pass: None when another holds the cluster's autoscale lock. The pass is kept
    on the cluster's page (scope `pools`) when it planned anything."""
    with object_lock(f"autoscale:{cluster.pk}") as taken:
        if not taken:
            return None
        started, watch = timezone.now(), Stopwatch()
        now = now or started
        plan = autoscale_plan(cluster, now=now)
        if not plan.skipped:
            shortfalls_record(plan, now=now)
        plan_ms = watch.lap()
        clients: list[KubeClient] = []

        def client() -> KubeClient:
            if not clients:
                clients.append(kube_client(cluster))
            return clients[0]

        def act(step: PlanStep) -> Outcome | None:
            assert isinstance(step, AUTOSCALE_STEPS)
            _act(step, client, now)
            return None

        try:
            record = plan_apply(
                plan.steps, act, scope="pools", scope_id=cluster.pk, started_at=started,
                plan_ms=plan_ms, failures=(kube.KubeError,),
            )  # fmt: skip
        finally:
            for held in clients:
                held.close()
        if plan.steps:
            record.save()
        for outcome in record.of("failed"):
            logger.warning("autoscale %s: %s", cluster.name, outcome)
        return record


def shortfalls_record(plan: AutoscalePlan, *, now: datetime) -> None:
    """The cluster's shortfalls as this pass found them: new ones open (since now), those
    still there keep their `since`, those gone are deleted. A pass that changed nothing
    writes nothing."""
    found = {(s.gpu_type, s.gpus): s for s in plan.shortfalls}
    with transaction.atomic():
        rows = {
            (row.gpu_type, row.gpus): row
            for row in GpuShortfall.objects.select_for_update().filter(cluster_id=plan.cluster_id)
        }
        gone = [row.pk for key, row in rows.items() if key not in found]
        if gone:
            GpuShortfall.objects.filter(pk__in=gone).delete()
        for key, seen in found.items():
            row = rows.get(key)
            if row is None:
                GpuShortfall.objects.create(
                    cluster_id=plan.cluster_id, gpu_type=seen.gpu_type, gpus=seen.gpus,
                    pods=seen.pods, text=seen.text, since=now,
                    oldest_pod_since=seen.oldest, updated_at=now,
                )  # fmt: skip
                logger.warning("autoscale: no capacity: %s", seen.text)
            elif (row.pods, row.text, row.oldest_pod_since) != (
                seen.pods,
                seen.text,
                seen.oldest,
            ):
                GpuShortfall.objects.filter(pk=row.pk).update(
                    pods=seen.pods, text=seen.text, oldest_pod_since=seen.oldest,
                    updated_at=now,
                )  # fmt: skip


def _act(step: AutoscaleStep, client: Callable[[], KubeClient], now: datetime) -> None:
    match step:
        case PoolGrow():
            _grow(step, now)
        case MachineRelease():
            _release(step, now)
        case MachineUnneeded():
            _unneeded(step, now)
        case NodeDrain():
            _drain(step, client, now)
        case PodEvict():
            _evict(step, client)
        case MachineKeep():
            _keep(step, client)
        case _:
            assert_never(step)


def _pool_locked(pool_id: int) -> MachinePool:
    pool = (
        MachinePool.objects.select_for_update(of=("self",))
        .select_related("target")
        .filter(pk=pool_id)
        .first()
    )
    if pool is None or not pool.autoscale_enabled:
        raise StepDropped("the pool is gone, or its autoscale was turned off")
    return pool


def _target_write(
    pool: MachinePool, *, before: int, after: int, reason: str, now: datetime, grew: bool
) -> None:
    if pool.effective_replicas != before:
        raise StepDropped(f"the pool has {pool.effective_replicas} machines to have, not {before}")
    after = min(max(after, pool.autoscale_min), pool.autoscale_max)
    fields: dict[str, object] = {"replicas": after, "reason": reason[:500], "decided_at": now}
    if grew:
        fields["scaled_up_at"] = now
    PoolTarget.objects.update_or_create(pool=pool, defaults=fields)
    audit_record(
        actor=ACTOR,
        action="pool.autoscale",
        obj=pool,
        reason=reason,
        before={"replicas": before},
        after={"replicas": after},
    )
    # The machines' pass makes or tears down the machines now, not at its next tick.
    send_by_name_on_commit("clusters.tasks.reconcile_cluster", pool.cluster_id)


def _grow(step: PoolGrow, now: datetime) -> None:
    with transaction.atomic():
        pool = _pool_locked(step.pool_id)
        _target_write(
            pool, before=step.before, after=step.after, reason=step.reason, now=now, grew=True
        )
    decision_count("up", "pending-gpu-pods")


def _release(step: MachineRelease, now: datetime) -> None:
    _machine_released(
        pool_id=step.pool_id, machine_id=step.machine_id, planned=step.before,
        reason=step.reason, now=now,
    )  # fmt: skip


def _machine_released(
    *, pool_id: int, machine_id: int, planned: int | None, reason: str, now: datetime
) -> None:
    """A drained machine released: marked drained and its pool's target lowered by one,
    this machine first. `planned`: the machines the plan saw the pool to have (None: the
    drain's own step, which takes them as they are now, above the min)."""
    with transaction.atomic():
        pool = _pool_locked(pool_id)
        before = pool.effective_replicas if planned is None else planned
        if planned is None and before - 1 < pool.autoscale_min:
            raise StepDropped("the pool's min was raised meanwhile: the machine stays")
        drained = MachineDrain.objects.filter(machine_id=machine_id, phase=Phase.DRAINING).update(
            phase=Phase.DRAINED, drained_at=now
        )
        if not drained:
            raise StepDropped("the machine's drain ended meanwhile")
        _target_write(pool, before=before, after=before - 1, reason=reason, now=now, grew=False)
    decision_count("down", "idle")


def _unneeded(step: MachineUnneeded, now: datetime) -> None:
    _, made = MachineDrain.objects.get_or_create(
        machine_id=step.machine_id, defaults={"node_name": step.node, "unneeded_since": now}
    )
    if not made:
        raise StepDropped("its idle clock started meanwhile")


def _drain(step: NodeDrain, client: Callable[[], KubeClient], now: datetime) -> None:
    with transaction.atomic():
        drain = (
            MachineDrain.objects.select_for_update()
            .filter(machine_id=step.machine_id, phase__in=(Phase.UNNEEDED, Phase.DRAINING))
            .first()
        )
        if drain is None:
            raise StepDropped("its machine is wanted again, or already drained")
        if drain.phase == Phase.UNNEEDED:
            drain.phase, drain.drain_started_at, drain.node_name = Phase.DRAINING, now, step.node
            drain.save(update_fields=["phase", "drain_started_at", "node_name"])
            machine = Machine.objects.get(pk=step.machine_id)
            audit_record(actor=ACTOR, action="machine.drain", obj=machine, reason=step.reason)
            decision_count("down", "drain")
    with suppress(kube.NotFound):  # the node is gone: nothing to cordon, nothing to evict
        client().cordon_node(step.node)
    _drain_carry_on(step, client, now)


def _drain_carry_on(step: NodeDrain, client: Callable[[], KubeClient], now: datetime) -> None:
    """After the cordon, in the same step: a listing of the node's pods (complete, and
    taken after the cordon, so no pod placed before it is missed), each pod evicted as its
    budgets allow, and once a listing shows none left, the machine released at once
    instead of a pass later. What a budget holds back waits for the next pass."""
    held: list[str] = []
    for _ in range(2):  # list, evict; list again to see them gone
        listing = client().list_pods(node_name=step.node)
        if not listing.complete:
            return  # the next pass plans from its own listing
        left = [p for p in listing.items if p.phase in ("Pending", "Running") and not p.daemon]
        if any(pod.gpu_requests for pod in left):
            # Placed between the listing the plan read and the cordon: it wants the GPUs,
            # so the machine is wanted; never evict it.
            _keep(_kept(step, "a GPU pod was placed on it before the cordon"), client)
            raise StepDropped("a GPU pod was placed on it before the cordon: kept")
        if not left:
            _machine_released(
                pool_id=step.pool_id, machine_id=step.machine_id, planned=None,
                reason=f"node {step.node} drained: {step.reason}", now=now,
            )  # fmt: skip
            return
        held = []
        for pod in left:
            try:
                client().evict_pod(namespace=pod.namespace, name=pod.name)
            except kube.NotFound:
                pass  # gone already
            except kube.TooManyRequests:
                held.append(f"{pod.namespace}/{pod.name}")
        if held:
            break
    if held:
        raise StepWaiting(
            f"cordoned; the disruption budgets of {', '.join(held)} allow no eviction now"
        )


def _kept(step: NodeDrain, reason: str) -> MachineKeep:
    return MachineKeep(
        cluster_id=step.cluster_id, machine_id=step.machine_id, machine=step.machine,
        node=step.node, uncordon=True, reason=reason,
    )  # fmt: skip


def _evict(step: PodEvict, client: Callable[[], KubeClient]) -> None:
    if not MachineDrain.objects.filter(machine_id=step.machine_id, phase=Phase.DRAINING).exists():
        raise StepDropped("the drain ended meanwhile")
    try:
        client().evict_pod(namespace=step.namespace, name=step.name)
    except kube.NotFound:
        pass  # gone already: what the eviction wanted
    except kube.TooManyRequests as exc:
        # A PodDisruptionBudget allows no disruption now: ask again next pass, never delete.
        raise StepWaiting(f"its disruption budget allows no eviction now: {exc.message}") from exc


def _keep(step: MachineKeep, client: Callable[[], KubeClient]) -> None:
    """The node uncordoned first, then the drain's row deleted: a worker killed between
    leaves the drain, which the next pass keeps again."""
    if step.uncordon:
        if not MachineDrain.objects.filter(
            machine_id=step.machine_id, phase=Phase.DRAINING
        ).exists():
            raise StepDropped("its drain ended meanwhile")
        with suppress(kube.NotFound):  # the node is gone: nothing to uncordon
            client().cordon_node(step.node, unschedulable=False)
    with transaction.atomic():
        drain = MachineDrain.objects.select_for_update().filter(machine_id=step.machine_id).first()
        if drain is None or drain.phase == Phase.DRAINED:
            raise StepDropped("its drain ended meanwhile, or it is drained")
        was_draining = drain.phase == Phase.DRAINING
        drain.delete()
        if was_draining:
            machine = Machine.objects.get(pk=step.machine_id)
            audit_record(actor=ACTOR, action="machine.keep", obj=machine, reason=step.reason)
            decision_count("keep", "wanted-again")
