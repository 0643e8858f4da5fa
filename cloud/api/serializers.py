"""What the API reads and writes of accounts, their members, locations, cloudspaces and
images."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from capvco_web.api import (
    NO_NUL,
    DurationTextField,
    ModelCleanMixin,
    api_validation_error,
)
from cloud.models import (
    MAX_CREDENTIAL_LENGTH,
    MAX_ORPHAN_GRACE_PERIOD,
    Account,
    Cloudspace,
    Image,
    Location,
    Membership,
    jwt_shape,
)
from cloud.services import account_update_check


class AccountSerializer(ModelCleanMixin):
    orphan_grace_period = DurationTextField(
        most=MAX_ORPHAN_GRACE_PERIOD,
        required=False,
        help_text="How long an orphan waits before it is released or removed: "
        f"[D ]HH:MM:SS, from 00:00:00 to {MAX_ORPHAN_GRACE_PERIOD.days} 00:00:00 "
        "(default 01:00:00).",
    )
    credential = serializers.CharField(
        write_only=True,
        max_length=MAX_CREDENTIAL_LENGTH,
        validators=[jwt_shape],
        style={"input_type": "password"},
        help_text="The JWT; never returned. Required again to change api_url or iam_url.",
    )

    has_capi_kubeconfig = serializers.BooleanField(
        read_only=True,
        help_text="Whether a management cluster's kubeconfig is stored: its Cluster API "
        "clusters are imported (PUT accounts/<id>/capi-kubeconfig/).",
    )

    class Meta:
        model = Account
        fields = [
            "id", "name", "api_url", "iam_url", "customer_id", "credential",
            "orphan_auto_release", "orphan_grace_period", "orphan_confirmations",
            "kube_insecure_tls_allowed", "has_capi_kubeconfig", "capi_import_complete",
            "capi_import_error", "capi_import_started_at",
        ]  # fmt: skip
        _plain = (
            "written plainly: https://host[:port]/path (http only to an origin listed so), "
            "the host one of WHITESKY_ALLOWED_HOSTS, no query or fragment; the pattern "
            "lists the hosts."
        )
        extra_kwargs = {
            "api_url": {"help_text": f"The VCO API base, e.g. https://vco.example/api/1, {_plain}"},
            "iam_url": {"help_text": f"The IAM host that refreshes the JWT, {_plain}"},
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if self.instance is not None:
            try:
                account_update_check(account=self.instance, changes=attrs)
            except DjangoValidationError as exc:
                raise api_validation_error(exc) from exc
        return attrs


class CloudspaceSerializer(serializers.ModelSerializer[Cloudspace]):
    """A cloudspace of the account at a location: what a site's `cloudspace_id` names."""

    class Meta:
        model = Cloudspace
        fields = ["id", "location", "cloudspace_id", "name", "status"]
        read_only_fields = fields


class ImageSerializer(serializers.ModelSerializer[Image]):
    """An image at a location: what a site's `image_id` names."""

    class Meta:
        model = Image
        fields = ["id", "location", "image_id", "name", "status", "os_type"]
        read_only_fields = fields


class LocationSerializer(serializers.ModelSerializer[Location]):
    class Meta:
        model = Location
        fields = [
            "id", "account", "name", "currency", "vgu_price",
            "observation_complete", "observation_error",
        ]  # fmt: skip
        read_only_fields = fields


@extend_schema_field({"type": "string", "enum": Membership.Role.values})
class RoleField(serializers.SlugRelatedField[Group]):
    """A role by name: one of the roles, or refused (400) as any other invalid value."""

    def __init__(self, **kwargs: Any) -> None:
        roles = Group.objects.filter(name__in=Membership.Role.values)
        super().__init__(slug_field="name", queryset=roles, **kwargs)

    def to_internal_value(self, data: Any) -> Group:
        if data not in Membership.Role.values:
            raise serializers.ValidationError(
                f"Choose one of {', '.join(Membership.Role.values)}.", code="invalid_choice"
            )
        return super().to_internal_value(data)


_USERNAME_LENGTH = User._meta.get_field("username").max_length


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": _USERNAME_LENGTH,
        "pattern": NO_NUL,
        "description": "The user's user name.",
    }
)
class UsernameField(serializers.SlugRelatedField[User]):
    """A user by user name. A name no user can have (too long, or with a NUL character,
    which the database refuses to compare) is invalid (400), not looked up. A user the
    caller may not know (the view narrows the queryset) reads as one nobody has."""

    default_error_messages = {
        "does_not_exist": "No user '{value}' that you may give a role: a "
        "superuser gives people their first role.",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(slug_field="username", queryset=User.objects.all(), **kwargs)

    def to_internal_value(self, data: Any) -> User:
        if isinstance(data, str) and ("\x00" in data or len(data) > (_USERNAME_LENGTH or 0)):
            raise serializers.ValidationError(
                f"Give a user name: at most {_USERNAME_LENGTH} characters, no NUL.",
                code="invalid",
            )
        return super().to_internal_value(data)


class MembershipSerializer(ModelCleanMixin):
    """A user's role in an account: viewer, operator or admin."""

    user = UsernameField()
    role = RoleField(
        help_text="viewer: reads; operator: also scales pools, deletes machines and clusters, "
        "releases reservations; admin: also the account, its sites, pools, clusters and members."
    )

    class Meta:
        model = Membership
        fields = ["id", "user", "account", "role"]
