"""Global search: one word, and what it names among the user's accounts' clusters, pools,
machines, VMs, vGPUs, Kubernetes nodes and pods, and pod or leaked NICs, grouped by kind,
each linking to where it is shown. An exact match (a VM or vGPU id, an IP or MAC address,
a whole name) comes first, above the names that only contain the word.

Every query is scoped to the accounts the user sees (`visible`) and bounded: at most
`PER_KIND` rows of a kind are read (one more tells that there are more), in two queries
at most per kind whatever matches. An exact name or id can be looked up through indexes
that lead with what the scope joins on (an account's few locations or clusters): VMs by
(location, vm_id) and (location, name), vGPUs by (location, vgpu_id) and (location, name),
nodes and pools by (cluster, name), NICs by (location, mac). Part of a name (`icontains`,
from `SEARCH_MIN_LENGTH` characters) reads the vGPU names, the one table that keeps
history, through their trigram index on PostgreSQL; clusters, pools, machines, VMs, nodes
and pods are the account's live rows, scanned up to the limit. No index is added.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.db.models import Model, Q, QuerySet
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest
from capvco_web.permissions import visible
from cloud.models import VirtualMachine
from clusters.models import Cluster, Machine, MachinePool
from gpus.filtersets import SEARCH_MIN_LENGTH
from gpus.models import VgpuReservation
from kube.models import KubeNode, KubePod
from sriov.models import LeakedNic, PodNic

PER_KIND = 10
MAX_LENGTH = 200
MAC = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$", re.IGNORECASE)
M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class Hit:
    kind: str
    label: str
    detail: str
    url: str
    exact: bool


@dataclass
class Group:
    kind: str
    hits: list[Hit] = field(default_factory=list)
    more: bool = False


@dataclass(frozen=True)
class Asked:
    """The word as each kind of match reads it."""

    text: str
    number: int | None
    ip: str | None
    mac: str | None

    @property
    def partial(self) -> bool:
        """Whether names that only contain the word are searched too."""
        return len(self.text) >= SEARCH_MIN_LENGTH

    @classmethod
    def parse(cls, text: str) -> Asked:
        number = int(text) if text.isdigit() and len(text) < 19 else None
        try:
            ip: str | None = str(ipaddress.ip_address(text))
        except ValueError:
            ip = None
        mac = text.lower().replace("-", ":") if MAC.match(text) else None
        return cls(text, number, ip, mac)


def _cluster_url(cluster_id: int, anchor: str = "") -> str:
    return reverse("dashboard:cluster", args=[cluster_id]) + anchor


def _nics_url(cluster: Cluster, anchor: str) -> str:
    return f"{reverse('dashboard:nics')}?{urlencode({'cluster': cluster.pk})}{anchor}"


def _name_match(name_field: str, asked: Asked) -> tuple[Q, Q]:
    """(exact, any): the rows whose name is the word, and those whose name has it."""
    exact = Q(**{name_field: asked.text})
    if not asked.partial:
        return exact, exact
    return exact, Q(**{f"{name_field}__icontains": asked.text})


def _first(
    rows: QuerySet[M], exact: Q, found: Q, order: Iterable[str]
) -> tuple[list[tuple[M, bool]], bool]:
    """At most PER_KIND rows matching `found`, those matching `exact` first, and whether
    there are more: two bounded queries, the exact ones through the indexes."""
    exact_rows = list(rows.filter(exact).order_by(*order)[: PER_KIND + 1])
    taken = [(row, True) for row in exact_rows[:PER_KIND]]
    more = len(exact_rows) > PER_KIND
    room = PER_KIND - len(taken)
    if room > 0 and found != exact:
        others = list(
            rows.filter(found)
            .exclude(pk__in=[row.pk for row, _ in taken])
            .order_by(*order)[: room + 1]
        )
        taken += [(row, False) for row in others[:room]]
        more = more or len(others) > room
    return taken, more


def _clusters(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    rows, more = _first(
        visible(user, Cluster.objects.select_related("account")), exact, found, ["name", "pk"]
    )
    return [
        Hit("Cluster", c.name, f"account {c.account.name}, {c.state}", _cluster_url(c.pk), e)
        for c, e in rows
    ], more


def _pools(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    rows, more = _first(
        visible(user, MachinePool.objects.select_related("cluster", "site__location")),
        exact,
        found,
        ["name", "pk"],
    )
    return [
        Hit(
            "Pool",
            str(p),
            f"{p.replicas} replicas in {p.site.location.name}",
            _cluster_url(p.cluster_id, f"#pool-{p.pk}"),
            e,
        )
        for p, e in rows
    ], more


def _machines(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    if asked.number is not None:
        exact |= Q(vm_id=asked.number)
        found |= Q(vm_id=asked.number)
    rows, more = _first(
        visible(user, Machine.objects.select_related("pool__cluster")),
        exact,
        found,
        ["name", "pk"],
    )
    return [
        Hit(
            "Machine",
            m.name,
            f"{m.pool}, {m.phase}" + (f", VM {m.vm_id}" if m.vm_id is not None else ""),
            _cluster_url(m.pool.cluster_id, f"#machine-{m.pk}"),
            e,
        )
        for m, e in rows
    ], more


def _vms(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    if asked.number is not None:
        exact |= Q(vm_id=asked.number)
        found |= Q(vm_id=asked.number)
    rows, more = _first(
        visible(user, VirtualMachine.objects.select_related("location")),
        exact,
        found,
        ["name", "pk"],
    )
    # The machine that owns each VM, where it is shown: one query for the page's VMs.
    owners: dict[tuple[int, int], Machine] = {}
    if rows:
        wanted = Q()
        for vm, _ in rows:
            wanted |= Q(pool__site__location_id=vm.location_id, vm_id=vm.vm_id)
        for machine in visible(
            user, Machine.objects.filter(wanted).select_related("pool__site", "pool__cluster")
        ):
            assert machine.vm_id is not None
            owners[(machine.pool.site.location_id, machine.vm_id)] = machine
    hits = []
    for vm, e in rows:
        owner = owners.get((vm.location_id, vm.vm_id))
        if owner is not None:
            url = _cluster_url(owner.pool.cluster_id, f"#machine-{owner.pk}")
            whose = f"machine {owner.name} of {owner.pool.cluster.name}"
        else:
            query = {"location": vm.location_id, "vm_id": vm.vm_id}
            url = f"{reverse('dashboard:reservations')}?{urlencode(query)}"
            whose = "no machine owns it: its vGPUs"
        detail = f"VM {vm.vm_id} in {vm.location.name}, {vm.status.lower()}; {whose}"
        hits.append(Hit("VM", vm.name, detail, url, e))
    return hits, more


def _vgpus(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    exact |= Q(vgpu_id=asked.text)
    found |= Q(vgpu_id=asked.text)
    rows, more = _first(
        visible(user, VgpuReservation.objects.select_related("location")),
        exact,
        found,
        ["name", "pk"],
    )
    url = reverse("dashboard:reservations")
    return [
        Hit(
            "vGPU",
            r.name,
            f"{r.vgpu_id or 'no id yet'} in {r.location.name}, {r.state}",
            f"{url}?{urlencode({'q': r.name})}",
            e,
        )
        for r, e in rows
    ], more


def _nodes(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    rows, more = _first(
        visible(user, KubeNode.objects.select_related("cluster", "machine")),
        exact,
        found,
        ["name", "pk"],
    )
    return [
        Hit(
            "Node",
            n.name,
            f"cluster {n.cluster.name}"
            + (f", machine {n.machine.name}" if n.machine else ", no machine"),
            _cluster_url(n.cluster_id, f"#node-{n.pk}"),
            e,
        )
        for n, e in rows
    ], more


def _pods(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    exact, found = _name_match("name", asked)
    rows, more = _first(
        visible(user, KubePod.objects.select_related("cluster")), exact, found, ["name", "pk"]
    )
    return [
        Hit(
            "Pod",
            f"{p.namespace}/{p.name}",
            f"cluster {p.cluster.name}, {p.phase}, "
            + (f"on node {p.node_name}" if p.node_name else "not scheduled"),
            _cluster_url(p.cluster_id, "#nodes" if p.node_name else "#kubernetes"),
            e,
        )
        for p, e in rows
    ], more


def _nics(user: Any, asked: Asked) -> tuple[list[Hit], bool]:
    """Pod NICs and leaked NICs by their IP or MAC address: exact matches only."""
    if asked.ip is None and asked.mac is None:
        return [], False
    where = Q(ip=asked.ip) if asked.ip else Q(mac__in=[asked.mac, str(asked.mac).upper()])
    hits = []
    pod_nics = list(
        visible(user, PodNic.objects.filter(where).select_related("cluster")).order_by("-pk")[
            : PER_KIND + 1
        ]
    )
    for nic in pod_nics[:PER_KIND]:
        hits.append(
            Hit(
                "NIC",
                f"{nic.mac or 'no MAC yet'} ({nic.ip or 'no address'})",
                f"pod {nic.namespace}/{nic.pod_name} of {nic.cluster.name}, VM {nic.vm_id}, "
                f"{nic.state}",
                _nics_url(nic.cluster, f"#pod-nic-{nic.pk}"),
                True,
            )
        )
    leaked = list(
        visible(user, LeakedNic.objects.filter(where).select_related("cluster")).order_by("-pk")[
            : PER_KIND + 1
        ]
    )
    for row in leaked[:PER_KIND]:
        hits.append(
            Hit(
                "NIC",
                f"{row.mac} ({row.ip or 'no address'})",
                f"leaked on VM {row.vm_id} of {row.cluster.name}",
                _nics_url(row.cluster, f"#leaked-nic-{row.pk}"),
                True,
            )
        )
    return hits, len(pod_nics) > PER_KIND or len(leaked) > PER_KIND


SEARCHES: list[tuple[str, Callable[[Any, Asked], tuple[list[Hit], bool]]]] = [
    ("Clusters", _clusters),
    ("Pools", _pools),
    ("Machines", _machines),
    ("VMs", _vms),
    ("vGPUs", _vgpus),
    ("Nodes", _nodes),
    ("Pods", _pods),
    ("NICs", _nics),
]


@dataclass
class Results:
    exact: list[Hit]
    groups: list[Group]

    def __bool__(self) -> bool:
        return bool(self.exact or self.groups)


def search(user: Any, text: str) -> Results:
    """What `text` names among what `user` sees: the exact matches of every kind first,
    then the partial ones grouped by kind."""
    asked = Asked.parse(text)
    exact: list[Hit] = []
    groups: list[Group] = []
    for title, find in SEARCHES:
        hits, more = find(user, asked)
        exact += [hit for hit in hits if hit.exact]
        rest = [hit for hit in hits if not hit.exact]
        if rest or more:
            groups.append(Group(title, rest, more))
    return Results(exact, groups)


@require_GET
def search_page(request: HtmxHttpRequest) -> HttpResponse:
    text = " ".join(request.GET.get("q", "").split())
    context: dict[str, Any] = {"q": text, "error": "", "results": None, "per_kind": PER_KIND}
    status = 200
    if len(text) > MAX_LENGTH:
        context["error"] = f"q: at most {MAX_LENGTH} characters."
        status = 400
    elif text:
        context["results"] = search(request.user, text)
        context["partial"] = len(text) >= SEARCH_MIN_LENGTH
        context["min_length"] = SEARCH_MIN_LENGTH
    return render(request, "dashboard/search.html", context, status=status)
