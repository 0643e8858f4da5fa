"""The API of accounts, their members, locations, cloudspaces and images. Reads and
writes the database only; each viewset shows the objects of the caller's accounts and
lets their role decide what they may do (capvco_web.permissions); writes go through the
audited services.

Accounts and locations are routed by the clusters' API (clusters.api.urls), whose
viewsets extend these with what needs the clusters: deleting an account, its management
cluster's kubeconfig, a location's sweep plan."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from django.db import models
from rest_framework import mixins, serializers, viewsets

from capvco_web.api import KnownParametersMixin
from capvco_web.permissions import AccountScopedViewSetMixin, users_known
from cloud.api.serializers import (
    AccountSerializer,
    CloudspaceSerializer,
    ImageSerializer,
    LocationSerializer,
    MembershipSerializer,
)
from cloud.filtersets import (
    CloudspaceFilterSet,
    ImageFilterSet,
    LocationFilterSet,
    MembershipFilterSet,
)
from cloud.models import Account, Cloudspace, Image, Location, Membership
from cloud.services import (
    account_create,
    account_update,
    membership_create,
    membership_delete,
    membership_update,
)

M = TypeVar("M", bound=models.Model)


def changed(serializer: serializers.BaseSerializer[M]) -> M:
    """The serializer's object with the validated changes set, not saved: a service saves."""
    obj = serializer.instance
    assert obj is not None
    for field, value in serializer.validated_data.items():
        setattr(obj, field, value)
    return obj


class AccountViewSet(
    KnownParametersMixin,
    AccountScopedViewSetMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.ListModelMixin,
    viewsets.GenericViewSet[Account],
):
    # No delete here: an account goes only once its clusters have, which the clusters'
    # viewset (routed at accounts/) checks. No docstring either: the API's description
    # of accounts is what the mixins say.
    queryset = Account.objects.order_by("name")
    serializer_class = AccountSerializer

    def perform_create(self, serializer: serializers.BaseSerializer[Account]) -> None:
        account = Account(**serializer.validated_data)
        serializer.instance = account_create(account=account, actor=self.request.user)

    def perform_update(self, serializer: serializers.BaseSerializer[Account]) -> None:
        account = serializer.instance
        assert account is not None
        # A change since it was validated is refused by the service: 400 (see capvco_web.api).
        account_update(account=account, changes=serializer.validated_data, actor=self.request.user)


class MembershipViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ModelViewSet[Membership]
):
    """Who has which role in the caller's accounts; an account's admins change them."""

    queryset = Membership.objects.select_related("user", "role").order_by("account", "user")
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilterSet

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        # A user the caller may not know is "no such user", as a name nobody has.
        serializer = super().get_serializer(*args, **kwargs)
        if isinstance(serializer, MembershipSerializer):  # not a list's: it reads only
            cast(Any, serializer.fields["user"]).queryset = users_known(self.request.user)
        return serializer

    def perform_create(self, serializer: serializers.BaseSerializer[Membership]) -> None:
        membership = Membership(**serializer.validated_data)
        serializer.instance = membership_create(membership=membership, actor=self.request.user)

    def perform_update(self, serializer: serializers.BaseSerializer[Membership]) -> None:
        membership_update(membership=changed(serializer), actor=self.request.user)

    def perform_destroy(self, instance: Membership) -> None:
        membership_delete(membership=instance, actor=self.request.user)


class CloudspaceViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[Cloudspace]
):
    """The account's cloudspaces per location, as last observed: choices for a new site."""

    queryset = Cloudspace.objects.order_by("location", "name")
    serializer_class = CloudspaceSerializer
    filterset_class = CloudspaceFilterSet


class ImageViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[Image]
):
    """The images per location, as last observed: choices for a new site."""

    queryset = Image.objects.order_by("location", "name")
    serializer_class = ImageSerializer
    filterset_class = ImageFilterSet


class LocationViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[Location]
):
    queryset = Location.objects.order_by("account", "name")
    serializer_class = LocationSerializer
    filterset_class = LocationFilterSet
