"""The filters of the dashboard's lists: the API's FilterSets (one filter language: a
related object by id, `cluster=3`, or by name, `cluster__name=prod`), with what a page adds
(the node list's `flag`), the choices its form offers (what the user sees), and a parameter
no filter of the page takes refused (400) instead of listing everything."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import django_filters
from django import forms
from django.db.models import QuerySet
from django.http import QueryDict

from capvco_web.filters import RelationFilterSet, TrueFalseFilter
from capvco_web.keyset import CURSOR_PARAMS, BadCursor, KeysetPage, Sort, keyset_page
from clusters.filtersets import ClusterFilterSet
from clusters.models import Cluster, Machine
from dashboard.forms import NodeFilterForm
from kube.filtersets import KubeNodeFilterSet
from kube.models import KubeNode, KubePod
from sriov.filtersets import PodNicFilterSet
from sriov.models import PodNic

View = TypeVar("View", bound=Callable[..., Any])


def list_page(filterset: type[django_filters.FilterSet]) -> Callable[[View], View]:
    """Marks a view as a list page filtered by `filterset` (the filters its tests walk)."""

    def mark(view: View) -> View:
        view.filterset_class = filterset  # type: ignore[attr-defined]
        return view

    return mark


def filled(params: QueryDict) -> QueryDict:
    """`params` without the empty values a page's form sends for "any": the API's filters
    refuse an empty value, and a page means by it no filter."""
    given = QueryDict(mutable=True)
    for name, values in params.lists():
        if kept := [value for value in values if value != ""]:
            given.setlist(name, kept)
    return given


def unknown_parameters(params: Iterable[str], known: Collection[str]) -> list[str]:
    """A line per parameter of `params` the page does not take, naming those it takes."""
    takes = ", ".join(known)
    return [
        f"{name}: not a filter of this list (it takes {takes})"
        for name in sorted(set(params) - set(known))
    ]


@dataclass(frozen=True)
class FilteredPage:
    """A filtered list's page, or what is wrong with the request (each line naming it)."""

    page: KeysetPage[Any] | None
    errors: list[str]

    @property
    def status(self) -> int:
        return 400 if self.errors else 200


def filtered_page(
    filterset: django_filters.FilterSet,
    *,
    params: QueryDict,
    sort: Sort,
    size: int,
    takes: Collection[str] = (),
) -> FilteredPage:
    """The keyset page of `filterset`'s rows that `params` ask for; a parameter the list
    does not take (its filters, its page, and `takes`: what else the page reads), a
    filter's refusal or a cursor we did not make is an error instead."""
    if unknown := unknown_parameters(params, [*filterset.filters, *takes, *CURSOR_PARAMS]):
        return FilteredPage(None, unknown)
    if not filterset.is_valid():
        return FilteredPage(
            None,
            [
                f"{field}: {message}"
                for field, messages in filterset.form.errors.items()
                for message in messages
            ],
        )
    try:
        return FilteredPage(keyset_page(filterset.qs, sort=sort, params=params, size=size), [])
    except BadCursor as exc:
        return FilteredPage(None, [str(exc)])


def only(params: QueryDict, names: Collection[str]) -> QueryDict:
    """`params` with only the parameters in `names` (the filters two lists share)."""
    kept = QueryDict(mutable=True)
    for name, values in params.lists():
        if name in names:
            kept.setlist(name, values)
    return kept


class ClusterChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A cluster picked from those the user sees, by id (names are unique per account
    only: each is offered with its account); the API's filter takes the id."""

    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.name} ({obj.account.name})"

    def to_python(self, value: Any) -> int | None:
        cluster = super().to_python(value)
        return None if cluster is None else int(cluster.pk)


def cluster_field(clusters: QuerySet[Cluster]) -> ClusterChoiceField:
    return ClusterChoiceField(
        clusters.select_related("account").order_by("name", "account__name"),
        required=False,
        empty_label="any",
    )


class NodeListFilterSet(KubeNodeFilterSet):
    gpu_type = django_filters.CharFilter(
        method="_gpu_type",
        max_length=63,  # a label value's longest
        label="GPU type",
        help_text="The capvco.io/gpu-type label, e.g. nvidia-a100",
    )
    flag = django_filters.ChoiceFilter(
        choices=list(NodeFilterForm.FLAGS.items()), method="filter_flag", empty_label="any"
    )

    class Meta(KubeNodeFilterSet.Meta):
        form = NodeFilterForm
        fields = [*KubeNodeFilterSet.Meta.fields, "flag"]

    def filter_flag(
        self, queryset: QuerySet[KubeNode], name: str, value: str
    ) -> QuerySet[KubeNode]:
        # The API's own filters say what each flag means.
        if value == NodeFilterForm.GPUS_MISSING:
            return self.filters["gpus_missing"].filter(queryset, True)
        if value == NodeFilterForm.UNOWNED:
            return self.filters["unowned"].filter(queryset, True)
        return queryset  # node-missing lists machines, not nodes (dashboard.views.nodes)


class NicListFilterSet(PodNicFilterSet):
    """The pod NIC list's filters: the API's, the state offered as a choice."""

    state = django_filters.ChoiceFilter(choices=PodNic.State.choices, empty_label="any")

    class Meta(PodNicFilterSet.Meta):
        pass


class ClusterListFilterSet(ClusterFilterSet):
    """The clusters list's filters: the API's, and those with failed machines."""

    failed = TrueFalseFilter(method="filter_failed", label="With failed machines")

    class Meta(ClusterFilterSet.Meta):
        fields = [*ClusterFilterSet.Meta.fields, "failed"]

    def filter_failed(
        self, queryset: QuerySet[Cluster], name: str, value: bool | None
    ) -> QuerySet[Cluster]:
        if value is None:
            return queryset
        failed = Machine.objects.filter(phase=Machine.Phase.FAILED).values("pool__cluster_id")
        return queryset.filter(pk__in=failed) if value else queryset.exclude(pk__in=failed)


class PendingPodFilterSet(RelationFilterSet):
    """The pending GPU pods' filters: the cluster (and its account), by id or name."""

    relations = {"cluster": "cluster", "account": "cluster__account"}

    class Meta:
        model = KubePod
        fields = ["namespace"]
