"""GPU cards and the types they make up. Database reads only. (vGPU reservations and their
release: clusters.api.views, beside the machines that hold them.)"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import KnownParametersMixin
from capvco_web.permissions import AccountScopedViewSetMixin, visible
from gpus.api.serializers import (
    GpuProfileSerializer,
    GpuTypeOfferSerializer,
)
from gpus.filtersets import GpuProfileFilterSet
from gpus.models import GpuProfile
from gpus.resolve import offers


class GpuProfileViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[GpuProfile]
):
    queryset = GpuProfile.objects.order_by("location", "profile_id")
    serializer_class = GpuProfileSerializer
    filterset_class = GpuProfileFilterSet


class GpuTypesView(KnownParametersMixin, generics.GenericAPIView[GpuProfile]):
    """The GPU types each location of the caller's accounts offers, with free instances:
    what a pool can ask for. Filtered as the GPU cards are."""

    queryset = GpuProfile.objects.select_related("location")
    filterset_class = GpuProfileFilterSet
    pagination_class = None  # one row per location and type: all of them

    @extend_schema(responses=GpuTypeOfferSerializer(many=True))
    def get(self, request: Request) -> Response:
        cards: dict[tuple[str, int], list[GpuProfile]] = {}
        visible_cards = self.filter_queryset(visible(request.user, self.get_queryset()))
        for card in visible_cards.order_by("location__name", "location_id", "profile_id"):
            cards.setdefault((card.location.name, card.location_id), []).append(card)
        rows = [
            {"location": location, **vars(offer)}
            for (location, _), group in cards.items()
            for offer in offers(group)
        ]
        return Response(GpuTypeOfferSerializer(rows, many=True).data)
