"""Reading clusters."""

from __future__ import annotations

from clusters.models import Cluster, Machine, MachinePool


def pools_by_cluster(account_id: int) -> dict[str, set[str]]:
    """Every cluster of an account with its pool names: what owner names are parsed against."""
    found: dict[str, set[str]] = {
        name: set()
        for name in Cluster.objects.filter(account_id=account_id).values_list("name", flat=True)
    }
    for cluster, pool in MachinePool.objects.filter(cluster__account_id=account_id).values_list(
        "cluster__name", "name"
    ):
        found[cluster].add(pool)
    return found


def machine_ids_by_owner(account_id: int) -> dict[tuple[str, str], int]:
    """Every machine of an account by (cluster name, machine name): what an owner name read
    from a VM or vGPU name points at."""
    rows = Machine.objects.filter(pool__cluster__account_id=account_id).values_list(
        "pool__cluster__name", "name", "pk"
    )
    return {(cluster, machine): pk for cluster, machine, pk in rows}
