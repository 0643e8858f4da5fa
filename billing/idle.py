"""Since when GPUs are idle: one `IdleSpell` per GPU node whose attached vGPUs no pending
or running pod requests (billing.costs.gpu_node_costs), opened when the money pass first
sees it so, ended when it is not. The pods mirror can miss pods only in a partial listing,
so a spell opens only from a complete Kubernetes observation of its cluster; a pod seen
asking for the GPUs ends it whatever the listing. A pass with nothing changed writes
nothing: a spell's row changes only when its idle count does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from billing.costs import gpu_node_costs
from billing.models import IdleSpell
from cloud.models import Location
from clusters.models import Cluster

STORED = Decimal("0.000001")  # IdleSpell.hourly's places: compared as stored


@dataclass(frozen=True)
class IdleRecorded:
    opened: int
    changed: int
    ended: int


def idle_record(*, now: datetime) -> IdleRecorded:
    nodes = {
        (node.cluster_id, node.machine_id): node
        for node in gpu_node_costs(Location.objects.all())
        if node.idle_gpus
    }
    whole = set(
        Cluster.objects.filter(
            pk__in={cluster for cluster, _ in nodes}, kube_observation__complete=True
        ).values_list("pk", flat=True)
    )
    names = dict(Cluster.objects.filter(pk__in=whole).values_list("pk", "name"))
    spells = {
        (spell.cluster_id, spell.machine_id): spell
        for spell in IdleSpell.objects.filter(ended_at__isnull=True)
    }
    new = [
        IdleSpell(
            account_id=node.account_id,
            location_id=node.location_id,
            cluster_id=node.cluster_id,
            cluster_name=names[node.cluster_id],
            pool_id=node.pool_id,
            machine_id=node.machine_id,
            node_name=node.name,
            currency=node.currency,
            idle_gpus=node.idle_gpus,
            hourly=node.idle,
            since=now,
        )
        for key, node in nodes.items()
        if key not in spells and node.cluster_id in whole
    ]
    changed = ended = 0
    with transaction.atomic():
        IdleSpell.objects.bulk_create(new, batch_size=2000)
        for key, spell in spells.items():
            node = nodes.get(key)
            if node is None:
                ended += IdleSpell.objects.filter(pk=spell.pk, ended_at__isnull=True).update(
                    ended_at=now
                )
            elif (spell.idle_gpus, spell.hourly) != (node.idle_gpus, node.idle.quantize(STORED)):
                changed += IdleSpell.objects.filter(pk=spell.pk, ended_at__isnull=True).update(
                    idle_gpus=node.idle_gpus, hourly=node.idle
                )
    return IdleRecorded(len(new), changed, ended)
