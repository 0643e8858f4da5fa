"""A new cluster without leaving the page: its sites chosen from the account's observed
cloudspaces and images, each pool's GPU types from what its own location offers, with a
"will it fit" hint from the cards as last listed (and what can never fit there, by the
rule cluster_setup applies). Created through `cluster_setup`, the way the API's checks
go: nothing is made when anything is refused."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.permissions import accounts_where, scoped, visible
from cloud.models import Account, Cloudspace, Image, Location
from clusters.models import Cluster
from clusters.services import PoolSpec, SiteSpec, cluster_setup
from dashboard.forms import ClusterSetupForm, PoolForm, SiteForm
from dashboard.selectors import Fit, pool_fit
from gpus.models import GpuProfile
from gpus.resolve import card_totals, fit_refusal, gpu_type_of

POOL_ROWS = 3
ADD_CLUSTER = "clusters.add_cluster"


@dataclass
class PoolRow:
    form: PoolForm
    fit: Fit | None
    never_fits: str = ""


def accounts_for_new_clusters(request: HtmxHttpRequest) -> QuerySet[Account]:
    """The accounts the user may add a cluster to (cluster_setup checks the role again)."""
    return scoped(Account.objects.order_by("name"), accounts_where(request.user, ADD_CLUSTER))


def _account(head: ClusterSetupForm, accounts: QuerySet[Account]) -> Account | None:
    chosen = head["account"].value()
    found = accounts.filter(pk=chosen).first() if str(chosen or "").isdigit() else None
    return found or (accounts.first() if accounts.count() == 1 else None)


@require_http_methods(["GET", "POST"])
def cluster_new(request: HtmxHttpRequest) -> HttpResponse:
    accounts = accounts_for_new_clusters(request)
    if not accounts.exists():
        raise PermissionDenied("You may not add a cluster to any account.")
    data = request.POST if request.method == "POST" else None
    query = data if data is not None else request.GET
    head = ClusterSetupForm(data, accounts=accounts, initial={"account": query.get("account")})
    account = _account(head, accounts)
    locations = list(
        visible(request.user, Location.objects.filter(account=account)).order_by("name")
    )
    cloudspaces: dict[int, list[Cloudspace]] = defaultdict(list)
    for cloudspace in visible(
        request.user, Cloudspace.objects.filter(location__in=locations)
    ).order_by("name"):
        cloudspaces[cloudspace.location_id].append(cloudspace)
    images: dict[int, list[Image]] = defaultdict(list)
    for image in visible(request.user, Image.objects.filter(location__in=locations)).order_by(
        "name"
    ):
        images[image.location_id].append(image)
    cards: dict[int, list[GpuProfile]] = defaultdict(list)
    for card in visible(request.user, GpuProfile.objects.filter(location__in=locations)):
        cards[card.location_id].append(card)
    types_by_location = {pk: sorted({gpu_type_of(c) for c in group}) for pk, group in cards.items()}

    sites = [
        SiteForm(
            data,
            prefix=f"site-{location.pk}",
            location=location,
            cloudspaces=cloudspaces[location.pk],
            images=images[location.pk],
        )
        for location in locations
    ]
    pools = [
        PoolForm(data, prefix=f"pool-{i}", locations=locations, types_by_location=types_by_location)
        for i in range(POOL_ROWS)
    ]
    by_pk = {location.pk: location for location in locations}
    totals = {pk: card_totals(by_pk[pk], group) for pk, group in cards.items()}
    rows = [
        PoolRow(form, _fit(form, cards), _never_fits(form, by_pk, cards, totals)) for form in pools
    ]
    errors: list[str] = []
    status = 200
    if data is not None and "create" in data:
        created = _create(request, head, account, sites, pools, errors)
        if created is not None:
            messages.success(
                request, f"Cluster {created.name} created: the next reconcile makes its machines."
            )
            return redirect("dashboard:cluster", pk=created.pk)
        status = 400
    context: dict[str, Any] = {
        "head": head,
        "account": account,
        "sites": sites,
        "pools": rows,
        "errors": errors,
        "form_url": reverse("dashboard:cluster-new"),
    }
    return page_or_fragment(
        request, "dashboard/cluster_new.html", context, fragments=["cluster-form"], status=status
    )


def _fit(form: PoolForm, cards: dict[int, list[GpuProfile]]) -> Fit | None:
    """The hint for a pool row as it was last sent (nothing for a row not filled in)."""
    if not form.is_bound:
        return None
    value = form.data.get
    try:
        location = int(value(form.add_prefix("location")) or 0)
        count = int(value(form.add_prefix("gpu_count")) or 0)
        replicas = int(value(form.add_prefix("replicas")) or 0)
    except ValueError:
        return None
    gpu_type = value(form.add_prefix("gpu_type")) or ""
    return pool_fit(cards.get(location, []), gpu_type=gpu_type, count=count, replicas=replicas)


def _never_fits(
    form: PoolForm,
    locations: dict[int, Location],
    cards: dict[int, list[GpuProfile]],
    totals: dict[int, dict[str, int]],
) -> str:
    """What cluster_setup would refuse of the row's GPUs (MachinePool.clean's rule), on
    the cards read for the page; "" when they fit in principle or the row is empty."""
    pk = form.chosen_location
    if not form.is_bound or pk is None:
        return ""
    try:
        count = int(form.data.get(form.add_prefix("gpu_count")) or 0)
    except ValueError:
        return ""
    gpu_type = str(form.data.get(form.add_prefix("gpu_type")) or "")
    if not gpu_type:
        return ""
    refusal = fit_refusal(
        cards.get(pk, []),
        totals.get(pk, {}),
        location=locations[pk].name,
        count=count,
        gpu_type=gpu_type,
    )
    return refusal.message if refusal else ""


def _create(
    request: HtmxHttpRequest,
    head: ClusterSetupForm,
    account: Account | None,
    sites: list[SiteForm],
    pools: list[PoolForm],
    errors: list[str],
) -> Cluster | None:
    valid = (
        head.is_valid() & all([f.is_valid() for f in sites]) & all([f.is_valid() for f in pools])
    )
    name = head.cleaned_data.get("name", "") if head.is_valid() else ""
    if not name:
        errors.append("Give the cluster a name.")
    used = [f for f in sites if f.is_valid() and f.cleaned_data.get("use")]
    if not used:
        errors.append("Choose at least one location to run in, with its cloudspace and image.")
    if not (valid and name and used and account is not None):
        return None
    by_id = {f.location.pk: f.location for f in sites}
    try:
        return cluster_setup(
            name=name,
            account=account,
            sites=[
                SiteSpec(f.location, f.cleaned_data["cloudspace"], f.cleaned_data["image"])
                for f in used
            ],
            pools=[
                PoolSpec(
                    name=f.cleaned_data["name"],
                    location=by_id[f.cleaned_data["location"]],
                    replicas=f.cleaned_data["replicas"],
                    gpu_type=f.cleaned_data["gpu_type"],
                    gpu_count=f.cleaned_data["gpu_count"] if f.cleaned_data["gpu_type"] else 0,
                    vcpus=f.cleaned_data["vcpus"],
                    memory_mib=f.cleaned_data["memory_mib"],
                    disk_gib=f.cleaned_data["disk_gib"],
                )
                for f in pools
                if f.wanted
            ],
            actor=request.user,
        )
    except ValidationError as exc:
        errors += [
            f"{where}: {message}" if where != "__all__" else message
            for where, messages_ in exc.message_dict.items()
            for message in messages_
        ]
        return None
