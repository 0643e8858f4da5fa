"""The filters of GPU cards and vGPU reservations: one FilterSet for the API and the
dashboard's list, related objects by id or `__name` (capvco_web.filters.RelationFilterSet)."""

from __future__ import annotations

import django_filters
from django.db.models import Model, Q, QuerySet

from capvco_web.filters import IdFilter, RelationFilterSet, TrueFalseFilter
from cloud.models import Account
from gpus import naming
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of
from gpus.selectors import ORPHANED

State = VgpuReservation.State
SEARCH_MIN_LENGTH = 3  # shorter words would match nearly every name (and no trigram)


def _clusters() -> QuerySet[Model]:
    # Read through the account's relation to them: gpus imports no module of clusters.
    model = Account._meta.get_field("clusters").related_model
    assert isinstance(model, type)
    return model._default_manager.all()


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


class GpuProfileFilterSet(RelationFilterSet):
    relations = {"location": "location", "account": "location__account"}

    class Meta:
        model = GpuProfile
        fields = ["vendor"]


class VgpuReservationFilterSet(RelationFilterSet):
    # A reservation's cluster is its machine's, or for one no machine owns (left by a
    # force delete, or not made by us) the cluster its name says, in its account.
    relations = {
        "location": "location",
        "account": "location__account",
        "cluster": "machine__pool__cluster",
        "pool": "machine__pool",
        "machine": "machine",
    }
    cluster = IdFilter(method="filter_cluster", label="The cluster's id")
    cluster__name = django_filters.CharFilter(
        method="filter_cluster_name",
        label="The cluster's name (every cluster of that name you see)",
    )
    orphaned = TrueFalseFilter(method="filter_orphaned", label="Orphaned (no machine owns it)")
    type = django_filters.CharFilter(
        method="filter_type", label="GPU type", help_text='e.g. "NVIDIA A100", as the cards say'
    )
    unassigned = TrueFalseFilter(method="filter_unassigned", label="Billed, attached to no VM")
    not_ours = TrueFalseFilter(
        method="filter_not_ours", label=f"Not named by us (no {naming.PREFIX} prefix)"
    )
    vm_id = IdFilter(field_name="vm_id", label="VM id")
    q = django_filters.CharFilter(
        method="filter_search",
        label="Name contains",
        help_text=f"At least {SEARCH_MIN_LENGTH} characters: a cluster, machine or vGPU name",
        # A bounded search: a shorter word would match nearly every name, reading them all.
        min_length=SEARCH_MIN_LENGTH,
        max_length=200,
    )

    class Meta:
        model = VgpuReservation
        fields = ["state", "orphaned", "type", "unassigned", "not_ours", "vm_id", "q"]

    def filter_cluster(
        self, queryset: QuerySet[VgpuReservation], name: str, value: int | None
    ) -> QuerySet[VgpuReservation]:
        if value is None:
            return queryset
        unowned = Q(pk__in=[])
        if found := _clusters().filter(pk=value).values("name", "account_id").first():
            unowned = Q(
                machine__isnull=True,
                owner_cluster=found["name"],
                location__account_id=found["account_id"],
            )
        return queryset.filter(Q(machine__pool__cluster_id=value) | unowned)

    def filter_cluster_name(
        self, queryset: QuerySet[VgpuReservation], name: str, value: str
    ) -> QuerySet[VgpuReservation]:
        if not value:
            return queryset
        return queryset.filter(
            Q(machine__pool__cluster__name=value) | Q(machine__isnull=True, owner_cluster=value)
        )

    def filter_orphaned(
        self, queryset: QuerySet[VgpuReservation], name: str, value: bool | None
    ) -> QuerySet[VgpuReservation]:
        if value is None:
            return queryset
        # Saying "billed" lets the database read the index of billed rows alone.
        return queryset.filter(ORPHANED) if value else queryset.exclude(ORPHANED)

    def filter_type(
        self, queryset: QuerySet[VgpuReservation], name: str, value: str
    ) -> QuerySet[VgpuReservation]:
        """The reservations on a card of that type: a type spans cards, per location."""
        if not value:
            return queryset
        wanted = _normal(value)
        cards = Q(pk__in=[])
        for card in GpuProfile.objects.only("location_id", "profile_id", "vendor", "model"):
            if _normal(gpu_type_of(card)) == wanted:
                cards |= Q(location_id=card.location_id, gpu_id=card.profile_id)
        return queryset.filter(cards)

    def filter_unassigned(
        self, queryset: QuerySet[VgpuReservation], name: str, value: bool | None
    ) -> QuerySet[VgpuReservation]:
        unassigned = Q(state=State.RESERVED, vm_id__isnull=True)
        if value is None:
            return queryset
        return queryset.filter(unassigned) if value else queryset.exclude(unassigned)

    def filter_not_ours(
        self, queryset: QuerySet[VgpuReservation], name: str, value: bool | None
    ) -> QuerySet[VgpuReservation]:
        ours = Q(name__startswith=naming.PREFIX)
        if value is None:
            return queryset
        return queryset.exclude(ours) if value else queryset.filter(ours)

    def filter_search(
        self, queryset: QuerySet[VgpuReservation], name: str, value: str
    ) -> QuerySet[VgpuReservation]:
        value = value.strip()
        return queryset.filter(name__icontains=value) if value else queryset
