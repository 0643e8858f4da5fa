"""/api/v1/saved-views/: your saved views of the dashboard's lists (dashboard.saved_views,
their one writer): made with a list's query, checked against that list's filter language
as the page checks it (a query the list would refuse is refused, 400, each problem named);
listed, read and deleted by their owner alone (another's is not found)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import KnownParametersMixin, StrictInputMixin, api_validation_error
from dashboard.lists import LISTS
from dashboard.models import SavedView
from dashboard.saved_views import saved_view_create, saved_view_delete, saved_views_of
from dashboard.views.saved import view_url


class SavedViewSerializer(StrictInputMixin, serializers.ModelSerializer[SavedView]):
    list_name = serializers.ChoiceField(choices=sorted(LISTS), help_text="The list the view is of.")
    url = serializers.SerializerMethodField(help_text="The dashboard's list, opened so.")

    class Meta:
        model = SavedView
        fields = ["id", "list_name", "name", "query", "url", "created_at"]
        read_only_fields = ["created_at"]
        extra_kwargs = {
            "name": {"help_text": "What the view is called (once per list of yours)."},
            "query": {
                "default": "",
                "help_text": "The list's URL query: its filters, search, columns (`cols`) and "
                "order (`sort`), as `orphaned=true&cols=name,per_hour`; its page is not kept.",
            },
        }

    @extend_schema_field(serializers.CharField())
    def get_url(self, view: SavedView) -> str:
        return view_url(view)


class SavedViewViewSet(
    KnownParametersMixin,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[SavedView],
):
    """Your saved views, by list and name."""

    serializer_class = SavedViewSerializer
    permission_classes = [IsAuthenticated]

    def get_queryset(self) -> QuerySet[SavedView]:
        return saved_views_of(self.request.user).order_by("list_name", "name", "pk")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        asked = self.get_serializer(data=request.data)
        asked.is_valid(raise_exception=True)
        try:
            view = saved_view_create(user=request.user, **asked.validated_data)
        except DjangoValidationError as exc:
            raise api_validation_error(exc) from exc
        return Response(self.get_serializer(view).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: SavedView) -> None:
        saved_view_delete(view=instance, user=self.request.user)
