"""vGPU reservation names: the owner record that survives the loss of our database.

A reservation is named `capvco-<cluster>-<machine>-gpu-<n>`. Cluster and machine names may
contain dashes, so the owner is parsed against the known cluster names, longest first.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

PREFIX = "capvco-"
_GPU_SUFFIX = re.compile(r"-gpu-(\d+)$")


def vgpu_name(cluster: str, machine: str, n: int) -> str:
    return f"{PREFIX}{cluster}-{machine}-gpu-{n}"


def vm_name(cluster: str, machine: str) -> str:
    return f"{PREFIX}{cluster}-{machine}"


@dataclass(frozen=True)
class Owner:
    cluster: str
    machine: str
    index: int | None


def owner_parse(name: str, pools_by_cluster: Mapping[str, Collection[str]]) -> Owner | None:
    """The cluster and machine a VM or vGPU name says it belongs to; None if not ours.

    `pools_by_cluster` maps each known cluster to its pool names. Longest cluster name
    first, but a reading whose machine is `<a pool of that cluster>-<n>` wins: "capvco-
    demo-a-0-gpu-0" is machine a-0 of cluster demo when demo has a pool "a", even though a
    cluster "demo-a" exists. A name with our prefix and no known cluster gives an owner
    with an empty cluster: ours, owned by nobody.
    """
    if not name.startswith(PREFIX):
        return None
    rest = name.removeprefix(PREFIX)
    suffix = _GPU_SUFFIX.search(rest)
    index = int(suffix.group(1)) if suffix else None
    if suffix:
        rest = rest[: suffix.start()]
    readings = [
        Owner(cluster=cluster, machine=rest[len(cluster) + 1 :], index=index)
        for cluster in sorted(pools_by_cluster, key=len, reverse=True)
        if rest.startswith(f"{cluster}-") and len(rest) > len(cluster) + 1
    ]
    for owner in readings:
        pool, _, number = owner.machine.rpartition("-")
        if number.isdigit() and pool in pools_by_cluster[owner.cluster]:
            return owner
    return readings[0] if readings else Owner(cluster="", machine="", index=index)
