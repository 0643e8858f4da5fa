"""GPU cards, the types they make up, and vGPU reservations. Database reads only; a
release is recorded here and carried out by a worker."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import ErrorSerializer, KnownParametersMixin, ReasonSerializer, Refused
from capvco_web.api_input import CursorPagination
from capvco_web.permissions import AccountScopedViewSetMixin, visible
from capvco_web.tasks import send_on_commit
from gpus.api.serializers import (
    GpuProfileSerializer,
    GpuTypeOfferSerializer,
    VgpuReservationSerializer,
)
from gpus.filtersets import GpuProfileFilterSet, VgpuReservationFilterSet
from gpus.models import GpuProfile, VgpuReservation
from gpus.release_requests import reservation_release_request
from gpus.resolve import offers
from gpus.services import ReleaseRefused
from gpus.tasks import reservation_release_task


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


class VgpuReservationViewSet(
    KnownParametersMixin, AccountScopedViewSetMixin, viewsets.ReadOnlyModelViewSet[VgpuReservation]
):
    queryset = VgpuReservation.objects.select_related("location", "listed").order_by(
        "location", "name"
    )
    serializer_class = VgpuReservationSerializer
    filterset_class = VgpuReservationFilterSet
    pagination_class = CursorPagination  # a big list: keyset pages, in id order
    action_verbs = {"release": "release"}

    @extend_schema(
        request=ReasonSerializer,
        responses={
            202: VgpuReservationSerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Refused, saying why and what to do instead (e.g. the GPU of a "
                "machine: scale its pool down or delete the machine)",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        """Ask for the reservation's release (detach, permanently), with a reason. The
        request is recorded on the row at once; a worker carries it out. One attached to a
        VM that no machine owns goes with that VM."""
        reservation = self.get_object()
        reason = ReasonSerializer(data=request.data)
        reason.is_valid(raise_exception=True)
        try:
            reservation_release_request(
                reservation=reservation, actor=request.user, reason=reason.validated_data["reason"]
            )
        except ReleaseRefused as exc:
            raise Refused(str(exc), code="release_refused") from exc
        send_on_commit(reservation_release_task, reservation.pk)
        return Response(
            VgpuReservationSerializer(reservation).data, status=status.HTTP_202_ACCEPTED
        )
