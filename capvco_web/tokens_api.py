"""/api/v1/tokens/: a user's own API tokens, made (the token shown once) and revoked."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django.http import QueryDict
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from capvco_web.api import HAS_TEXT, KnownParametersMixin, StrictInputMixin, api_validation_error
from capvco_web.api_input import JSONParser
from capvco_web.auth import ApiTokenAuthentication
from capvco_web.models import ApiToken
from capvco_web.tokens import api_token_create, api_token_revoke


class ApiTokenSerializer(StrictInputMixin, serializers.ModelSerializer[ApiToken]):
    # Taken as sent (its length too), stored trimmed by the service.
    name = serializers.CharField(
        max_length=ApiToken._meta.get_field("name").max_length,
        trim_whitespace=False,
        validators=[RegexValidator(HAS_TEXT, "Give the token a name that says what it is for.")],
        help_text="What the token is for.",
    )
    prefix = serializers.CharField(
        read_only=True, help_text="The start of the token, to recognise it by."
    )

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at"]
        read_only_fields = ["created_at", "last_used_at"]


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    """The answer to making a token (for the schema)."""

    token = serializers.CharField(
        read_only=True,
        help_text="The token, for `Authorization: Bearer <token>`: shown this once, never again.",
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]


def _user(request: Request) -> User:
    assert isinstance(request.user, User)  # IsAuthenticated ran
    return request.user


class ApiTokenViewSet(
    KnownParametersMixin,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet[ApiToken],
):
    """Your API tokens. Making one needs a logged-in session (the browser, or this page):
    a token cannot make tokens, so a leaked one cannot outlive its revocation. DELETE
    revokes a token at once."""

    serializer_class = ApiTokenSerializer
    # The browsable page offers a form (name, expiry) to make one, not only a box of raw
    # JSON: DRF draws it for a view that parses forms. The API documented stays JSON.
    parser_classes = [JSONParser, FormParser, MultiPartParser]

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):  # the schema, made without a user
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=_user(self.request))

    @extend_schema(
        request={"application/json": ApiTokenSerializer},
        responses={201: ApiTokenCreatedSerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if isinstance(request.successful_authenticator, ApiTokenAuthentication):
            raise exceptions.PermissionDenied(
                "A token cannot make tokens: log in (browser session) to make one."
            )
        data = request.data
        if isinstance(data, QueryDict):  # the page's form: its CSRF token is no field
            data = data.copy()
            data.pop("csrfmiddlewaretoken", None)
        serializer = self.get_serializer(data=data)
        serializer.is_valid(raise_exception=True)
        try:
            token, raw = api_token_create(
                user=_user(request),
                name=serializer.validated_data["name"],
                expires_at=serializer.validated_data.get("expires_at"),
                actor=_user(request),
            )
        except DjangoValidationError as exc:
            raise api_validation_error(exc) from None
        # The only answer that ever holds the token.
        body = {**ApiTokenSerializer(token).data, "token": raw}
        return Response(body, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        api_token_revoke(token=instance, actor=_user(self.request))
