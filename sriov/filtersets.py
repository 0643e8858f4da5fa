"""The filters of the SR-IOV lists: an id that matches nothing answers an empty list."""

from __future__ import annotations

from capvco_web.filters import IdFilter, StrictFilterSet
from sriov.models import ExternalNetwork, LeakedNic, PodNic


class PodNicFilterSet(StrictFilterSet):
    cluster = IdFilter(field_name="cluster_id")
    location = IdFilter(field_name="location_id")
    vm_id = IdFilter(field_name="vm_id", label="VM id")

    class Meta:
        model = PodNic
        fields = ["cluster", "state", "node_name", "namespace", "vm_id", "location"]


class LeakedNicFilterSet(StrictFilterSet):
    cluster = IdFilter(field_name="cluster_id")
    location = IdFilter(field_name="location_id")
    vm_id = IdFilter(field_name="vm_id", label="VM id")

    class Meta:
        model = LeakedNic
        fields = ["cluster", "location", "vm_id"]


class ExternalNetworkFilterSet(StrictFilterSet):
    location = IdFilter(field_name="location_id")

    class Meta:
        model = ExternalNetwork
        fields = ["location"]
