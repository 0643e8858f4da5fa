from __future__ import annotations

import django_filters

from capvco_web.filters import IdFilter
from clusters.models import Cluster, ClusterSite, Location, Machine, MachinePool


class LocationFilterSet(django_filters.FilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Location
        fields = ["account", "name"]


class ClusterFilterSet(django_filters.FilterSet):
    account = IdFilter(field_name="account_id")

    class Meta:
        model = Cluster
        fields = ["account", "state"]


class ClusterSiteFilterSet(django_filters.FilterSet):
    cluster = IdFilter(field_name="cluster_id")
    location = IdFilter(field_name="location_id")

    class Meta:
        model = ClusterSite
        fields = ["cluster", "location"]


class MachinePoolFilterSet(django_filters.FilterSet):
    cluster = IdFilter(field_name="cluster_id")
    site = IdFilter(field_name="site_id")

    class Meta:
        model = MachinePool
        fields = ["cluster", "site"]


class MachineFilterSet(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="pool__cluster__name")
    pool = IdFilter(field_name="pool_id")

    class Meta:
        model = Machine
        fields = ["cluster", "pool", "phase"]
