"""VM and vGPU names: the owner record that survives the loss of our database.

A machine `<pool>-<index>` of a cluster has the VM `capvco-<cluster>-<pool>-<index>` and
the vGPUs `capvco-<cluster>-<pool>-<index>-gpu-<n>`. Names may contain dashes, so a name
is read against the known cluster and pool names, and it is unambiguous because of two
rules (`cluster_name_conflict`, `pool_name_conflict`): no cluster name equals another or
is another followed by a dash, and the same for the pools of one cluster.

The cluster rule holds among the clusters of one whitesky customer (every account of ours
that names that customer: cloud.models.same_customer_account_ids), whose VMs and
vGPUs share the customer's listings. Accounts of other customers never list them, so
their cluster names are free of it.

Why that suffices: if a name reads as cluster `c` and as cluster `c2`, both `c-` and `c2-`
begin it, so one of them begins the other: `c == c2`, or one name is the other followed by
a dash, which the rule forbids. The same argument, on what follows `c-`, fixes the pool.
What is left, `<index>` or `<index>-gpu-<n>` with digits only, reads one way. The rules
hold for any subset of the clusters too (one account's, which is what names are read
against), and a cluster we no longer know (deleted) cannot be taken for one we know.

"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

PREFIX = "capvco-"
# Digits as we write them (no leading zero), and few enough for int() to stay cheap.
_NUMBER = r"(0|[1-9][0-9]{0,8})"
_TAIL = re.compile(rf"{_NUMBER}(?:-gpu-{_NUMBER})?")


def vgpu_name(cluster: str, machine: str, n: int) -> str:
    return f"{PREFIX}{cluster}-{machine}-gpu-{n}"


def vm_name(cluster: str, machine: str) -> str:
    return f"{PREFIX}{cluster}-{machine}"


def machine_name(pool: str, index: int) -> str:
    return f"{pool}-{index}"


def _overlapping(name: str, others: Iterable[str]) -> tuple[str, str, str] | None:
    """The first of `others` that equals `name` or extends it (or it) by a dash, with the
    shorter and the longer of the two; None when there is none."""
    for other in sorted(others):
        if name == other or name.startswith(f"{other}-") or other.startswith(f"{name}-"):
            shorter, longer = sorted((name, other), key=len)
            return other, shorter, longer
    return None


def cluster_name_conflict(name: str, others: Iterable[str]) -> str | None:
    """Why `name` cannot be a cluster next to `others` (other clusters the caller may know
    of: its account's, deleting ones included), or None when it can."""
    if (found := _overlapping(name, others)) is None:
        return None
    other, shorter, longer = found
    if other == name:
        return f"Cluster '{other}' exists."
    return (
        f"Cluster '{other}' exists: VM names of cluster '{longer}' (capvco-{longer}-...) "
        f"could be read as names of cluster '{shorter}'."
    )


def cluster_name_unavailable(name: str, others: Iterable[str]) -> str | None:
    """Why `name` cannot be a cluster next to `others` that the caller may not know of
    (clusters of other accounts of the same whitesky customer), or None when it can: the
    same rule, said without naming them, their account, or that they exist."""
    if _overlapping(name, others) is None:
        return None
    return (
        f"Cluster name '{name}' is not available at this whitesky customer: its VM and vGPU "
        f"names ({PREFIX}{name}-...) must read as one cluster's only. Choose another name."
    )


def pool_name_conflict(name: str, others: Iterable[str], *, cluster: str) -> str | None:
    """Why `name` cannot be a pool of `cluster` next to its other pools `others`, or None
    when it can."""
    if (found := _overlapping(name, others)) is None:
        return None
    other, shorter, longer = found
    if other == name:
        return f"Pool '{other}' exists in cluster '{cluster}'."
    return (
        f"Pool '{other}' exists in cluster '{cluster}': VM names of pool '{longer}' "
        f"(capvco-{cluster}-{longer}-...) could be read as names of pool '{shorter}'."
    )


@dataclass(frozen=True)
class Owner:
    """Whose a name is. An empty `cluster`: ours (our prefix), owned by nobody we know."""

    cluster: str
    machine: str
    index: int | None  # the vGPU's number on its machine; None for a VM
    pool: str = ""
    machine_index: int | None = None


NOBODY = Owner(cluster="", machine="", index=None)


def owner_parse(name: str, pools_by_cluster: Mapping[str, Collection[str]]) -> Owner | None:
    """The cluster, pool and machine a VM or vGPU name belongs to.

    `pools_by_cluster` maps each known cluster to its pool names. A name parses only when
    it is exactly `capvco-<cluster>-<pool>-<index>`, optionally followed by `-gpu-<n>`, for a
    known cluster and one of its pools. Our prefix and anything else: `NOBODY`. Not our
    prefix: None. Also None when the name reads as two owners, which only names made
    before the naming rules were enforced can: not provably ours, so nothing acts on it.
    """
    if not name.startswith(PREFIX):
        return None
    found: list[Owner] = []
    for cluster, after_cluster in _heads(name.removeprefix(PREFIX), pools_by_cluster):
        for pool, tail in _heads(after_cluster, pools_by_cluster[cluster]):
            if numbers := _TAIL.fullmatch(tail):
                machine_index, gpu = numbers.groups()
                found.append(
                    Owner(
                        cluster=cluster,
                        machine=machine_name(pool, int(machine_index)),
                        index=int(gpu) if gpu is not None else None,
                        pool=pool,
                        machine_index=int(machine_index),
                    )
                )
    if len(found) > 1:
        return None
    return found[0] if found else NOBODY


def _heads(text: str, known: Collection[str]) -> Iterator[tuple[str, str]]:
    """Each known name that begins `text` followed by a dash, with what follows the dash."""
    for at, char in enumerate(text):
        if char == "-" and text[:at] in known:
            yield text[:at], text[at + 1 :]
