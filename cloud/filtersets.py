"""The filters of the lists of the accounts' objects: related objects by id (`account=3`)
or by name (`account__name=prod`), as every list takes them
(capvco_web.filters.RelationFilterSet)."""

from __future__ import annotations

from capvco_web.filters import RelationFilterSet
from cloud.models import Cloudspace, Image, Location, Membership


class MembershipFilterSet(RelationFilterSet):
    relations = {"account": "account"}

    class Meta:
        model = Membership
        fields: list[str] = []


class CloudspaceFilterSet(RelationFilterSet):
    relations = {"location": "location", "account": "location__account"}

    class Meta:
        model = Cloudspace
        fields: list[str] = []


class ImageFilterSet(RelationFilterSet):
    relations = {"location": "location", "account": "location__account"}

    class Meta:
        model = Image
        fields: list[str] = []


class LocationFilterSet(RelationFilterSet):
    relations = {"account": "account"}

    class Meta:
        model = Location
        fields = ["name"]
