from __future__ import annotations

import django_filters

from capvco_web.filters import IdFilter, StrictFilterSet, TrueFalseFilter
from clusters.models import (
    Cluster,
    ClusterSite,
    KubeNode,
    KubePod,
    Location,
    Machine,
    MachinePool,
    Membership,
)


class MembershipFilterSet(StrictFilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Membership
        fields = ["account"]


class LocationFilterSet(StrictFilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Location
        fields = ["account", "name"]


class ClusterFilterSet(StrictFilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Cluster
        fields = ["account", "state"]


class ClusterSiteFilterSet(StrictFilterSet):
    cluster = IdFilter(field_name="cluster_id")
    location = IdFilter(field_name="location_id")

    class Meta:
        model = ClusterSite
        fields = ["cluster", "location"]


class MachinePoolFilterSet(StrictFilterSet):
    cluster = IdFilter(field_name="cluster_id")
    site = IdFilter(field_name="site_id")

    class Meta:
        model = MachinePool
        fields = ["cluster", "site"]


class MachineFilterSet(StrictFilterSet):
    cluster = django_filters.CharFilter(field_name="pool__cluster__name")
    pool = IdFilter(field_name="pool_id")

    class Meta:
        model = Machine
        fields = ["cluster", "pool", "phase"]


class KubeNodeFilterSet(StrictFilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    machine = IdFilter(field_name="machine_id")
    ready = TrueFalseFilter(field_name="ready")
    unowned = TrueFalseFilter(field_name="unowned_since", lookup_expr="isnull", exclude=True)

    class Meta:
        model = KubeNode
        fields = ["cluster", "machine", "ready", "unowned"]


class KubePodFilterSet(StrictFilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name")
    node = django_filters.CharFilter(field_name="node_name")

    class Meta:
        model = KubePod
        fields = ["cluster", "namespace", "node", "phase"]
