"""Reading clusters."""

from __future__ import annotations

from clusters.models import Cluster, MachinePool


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
