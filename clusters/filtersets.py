from __future__ import annotations

import django_filters

from capvco_web.filters import IdFilter, StrictFilterSet
from clusters.models import Cluster, ClusterSite, Location, Machine, MachinePool


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
