"""The filters of the SR-IOV lists: related objects by id or `__name`, as every list takes
them (capvco_web.filters.RelationFilterSet); an id that matches nothing answers an empty
list."""

from __future__ import annotations

from capvco_web.filters import IdFilter, RelationFilterSet
from sriov.models import ExternalNetwork, LeakedNic, PodNic

NIC_RELATIONS = {
    "cluster": "cluster",
    "location": "location",
    "account": "cluster__account",
}


class PodNicFilterSet(RelationFilterSet):
    relations = {**NIC_RELATIONS, "machine": "machine"}
    vm_id = IdFilter(field_name="vm_id", label="VM id")

    class Meta:
        model = PodNic
        fields = ["state", "node_name", "namespace", "vm_id"]


class VmQueueFilterSet(RelationFilterSet):
    """The VMs' NIC queues, by the pod NICs in them."""

    relations = NIC_RELATIONS

    class Meta:
        model = PodNic
        fields: list[str] = []


class LeakedNicFilterSet(RelationFilterSet):
    relations = NIC_RELATIONS
    vm_id = IdFilter(field_name="vm_id", label="VM id")

    class Meta:
        model = LeakedNic
        fields = ["vm_id"]


class ExternalNetworkFilterSet(RelationFilterSet):
    relations = {"location": "location", "account": "location__account"}

    class Meta:
        model = ExternalNetwork
        fields: list[str] = []
