"""Who may see and do what, in one place: the API, the admin and the services ask here.

A user is a member of accounts (settings.MEMBERSHIP_MODEL), with one role in each: a group
whose permissions say what the role may do in that account.

* viewer: reads everything of the account;
* operator: also scales pools, deletes machines (with teardown or by force) and clusters,
  releases vGPU reservations and detaches leaked NICs, each with a reason;
* admin: also changes and deletes the account (its URLs and credential), adds and changes
  clusters, sites and pools (where they run), manages the account's memberships, and
  enables SR-IOV (its credential, network and agent tokens).

Every object belongs to one account, reached through `ACCOUNT_PATHS`. A user sees the
objects of the accounts they are a member of and nothing of the others: the API answers
404 for them, the admin "does not exist", and the choices offered in forms and filters
leave them out. Superusers may do everything everywhere.

Creating an account is the one thing no role grants, as the account does not exist yet:
it takes Django's global permission `cloud.add_account` (superusers have it; a
superuser may give it to a user). The creator becomes the new account's admin.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from django.apps import apps as django_apps
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.models import User as UserModel
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import QuerySet
from django.forms import ModelChoiceField
from django.http import HttpRequest
from rest_framework import permissions, serializers
from rest_framework.relations import ManyRelatedField, RelatedField
from rest_framework.request import Request
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet

from capvco_web.audit import SystemActor, system_actor_check
from capvco_web.ownership import account_id_of, account_path

M = TypeVar("M", bound=models.Model)
User = UserModel | AnonymousUser
# A person, or the system component acting (a task, the reconciler, a command): components
# act on every account.
Actor = User | SystemActor

# The permissions of each role's group, as the data migrations created them; each app
# grants its own from its AppConfig.ready() (`roles_grant`), and a test keeps the two in
# step (a change here needs a migration there).
ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset(),
    "operator": frozenset(),
    "admin": frozenset(),
}


def roles_grant(
    *, view: Iterable[str] = (), operate: Iterable[str] = (), administer: Iterable[str] = ()
) -> None:
    """An app's permissions for the roles: viewers have `view`, operators `operate` too,
    admins `administer` too (`app_label.codename`)."""
    view, operate, administer = frozenset(view), frozenset(operate), frozenset(administer)
    ROLE_PERMISSIONS["viewer"] |= view
    ROLE_PERMISSIONS["operator"] |= view | operate
    ROLE_PERMISSIONS["admin"] |= view | operate | administer


def membership_model() -> type[models.Model]:
    """The model of a user's role in an account (settings.MEMBERSHIP_MODEL): its rows
    have `user`, `account` and `role` (a group)."""
    return django_apps.get_model(settings.MEMBERSHIP_MODEL)


_CACHE = "_capvco_account_perms"


def perm_name(model: type[models.Model], verb: str) -> str:
    """`clusters.scale_machinepool` for (MachinePool, "scale")."""
    return f"{model._meta.app_label}.{verb}_{model._meta.model_name}"


def _is_superuser(user: User) -> bool:
    return bool(user.is_active and getattr(user, "is_superuser", False))


def _perms_by_account(user: User) -> dict[int, frozenset[str]]:
    """Each account's permissions for the user, read once per user object (per request)."""
    if not user.is_authenticated or not user.is_active:
        return {}
    cached: dict[int, frozenset[str]] | None = getattr(user, _CACHE, None)
    if cached is not None:
        return cached
    found: dict[int, set[str]] = {}
    rows = (
        membership_model()
        ._default_manager.filter(user=user)
        .values_list(
            "account_id",
            "role__permissions__content_type__app_label",
            "role__permissions__codename",
        )
    )
    for account_id, app_label, codename in rows:
        perms = found.setdefault(account_id, set())
        if codename:
            perms.add(f"{app_label}.{codename}")
    cached = {account_id: frozenset(perms) for account_id, perms in found.items()}
    setattr(user, _CACHE, cached)
    return cached


def permissions_forget(user: User) -> None:
    """Drop the user's permissions read for this request: their memberships changed (they
    created an account and became its admin), and the next check must see it."""
    if hasattr(user, _CACHE):
        delattr(user, _CACHE)


def accounts_where(user: User, perm: str) -> set[int] | None:
    """The accounts in which the user has `perm`; None: every account (a superuser)."""
    if _is_superuser(user):
        return None
    return {account for account, perms in _perms_by_account(user).items() if perm in perms}


def allowed(user: User, perm: str, obj: models.Model | None = None) -> bool:
    """Whether the user may do `perm` to `obj` (an object of an account, saved or about to
    be). Without an object, for what belongs to no account (creating an account): Django's
    global permissions decide."""
    if _is_superuser(user):
        return True
    if not user.is_authenticated or not user.is_active:
        return False
    if obj is None:
        return user.has_perm(perm)
    account_id = account_id_of(obj)
    return account_id is not None and perm in _perms_by_account(user).get(account_id, ())


def allowed_somewhere(user: User, perm: str) -> bool:
    """Whether the user may do `perm` in at least one account: what a page or an endpoint
    offers before an object is chosen."""
    where = accounts_where(user, perm)
    return where is None or bool(where)


def scoped(queryset: QuerySet[M], accounts: set[int] | None) -> QuerySet[M]:
    """The rows of `queryset` that belong to `accounts` (None: all)."""
    if accounts is None:
        return queryset
    path = account_path(queryset.model)
    if path is None:
        raise TypeError(f"{queryset.model._meta.label} belongs to no account")
    lookup = "pk__in" if path == "pk" else f"{path}__in"
    return queryset.filter(**{lookup: accounts})


def users_known(user: User) -> QuerySet[UserModel]:
    """The users whom `user` may give a role (the choices of a membership's user, and the
    user names the API looks up): every user for a superuser; otherwise the members of
    the accounts where they may give roles. Others are as unknown as a name nobody has:
    an account admin learns of no user outside their accounts."""
    giving = (perm_name(membership_model(), verb) for verb in ("add", "change"))
    accounts = _union(accounts_where(user, perm) for perm in giving)
    if accounts is None:
        return UserModel.objects.all()
    return UserModel.objects.filter(memberships__account__in=accounts).distinct()


def visible(user: User, queryset: QuerySet[M]) -> QuerySet[M]:
    """The rows of `queryset` that the user may see."""
    return scoped(queryset, accounts_where(user, perm_name(queryset.model, "view")))


def permission_require(actor: Actor, perm: str, obj: models.Model | None = None) -> None:
    """Raise PermissionDenied unless the actor may do `perm` to `obj`. A system component
    (a SystemActor; any other string is refused) acts on every account."""
    system_actor_check(actor)
    if isinstance(actor, SystemActor) or allowed(actor, perm, obj):
        return
    who = actor.get_username() or "an anonymous user"
    what = f" to {obj._meta.verbose_name} {obj}" if obj is not None else ""
    raise PermissionDenied(
        f"{who} may not do this{what} ({perm}): ask an admin of its account for a role "
        "that allows it."
    )


# --- the API -------------------------------------------------------------------------------

# What each view action needs, as the verb of a model permission (`view` → view_<model>).
ACTION_VERBS: dict[str, str] = {
    "list": "view",
    "retrieve": "view",
    "metadata": "view",
    "create": "add",
    "update": "change",
    "partial_update": "change",
    "destroy": "delete",
}


class RolePermission(permissions.BasePermission):
    """A signed-in user, whose role in the object's account allows the view's action. The
    view's queryset is scoped (`AccountScopedViewSetMixin`): another account's object is
    not found (404) before this is asked; one the role may see but not change is 403."""

    def _verb(self, view: APIView) -> str | None:
        action = getattr(view, "action", None)
        verbs = {**ACTION_VERBS, **getattr(view, "action_verbs", {})}
        return verbs.get(action) if action else None

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if getattr(view, "action", None) is None:
            return True  # a method the route does not have: 405 follows
        verb = self._verb(view)
        if verb is None:
            return False  # an action nobody said who may do
        if getattr(view, "action", None) != "create":
            return True
        model = view.get_queryset().model  # type: ignore[attr-defined]
        perm = perm_name(model, verb)
        if account_path(model) == "pk":
            return allowed(user, perm)  # a new account belongs to no account yet
        return allowed_somewhere(user, perm)

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        verb = self._verb(view)
        return verb is not None and allowed(request.user, perm_name(type(obj), verb), obj)


def serializer_scope(serializer: serializers.BaseSerializer[Any], user: User) -> None:
    """Offer a serializer's related fields only the objects the user sees: naming another
    account's object is "does not exist" (400), as for an id that exists nowhere."""
    if not isinstance(serializer, serializers.Serializer):
        return
    for field in serializer.fields.values():
        related = field.child_relation if isinstance(field, ManyRelatedField) else field
        queryset = getattr(related, "queryset", None) if isinstance(related, RelatedField) else None
        if queryset is not None and account_path(queryset.model) is not None:
            cast(Any, related).queryset = visible(user, queryset)


if TYPE_CHECKING:
    _ViewSet = GenericViewSet[Any]
else:
    _ViewSet = object


class AccountScopedViewSetMixin(_ViewSet):
    """For every viewset of account objects: the queryset holds what the user sees, the
    role decides the action (`action_verbs` names the permission of each extra action),
    and related fields accept only what the user sees."""

    permission_classes = [RolePermission]
    action_verbs: ClassVar[dict[str, str]] = {}

    def get_queryset(self) -> QuerySet[Any]:
        return visible(self.request.user, super().get_queryset())

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        serializer = super().get_serializer(*args, **kwargs)
        serializer_scope(serializer, self.request.user)
        return serializer


# --- the admin -----------------------------------------------------------------------------


class _AccountScopedAdminBase(admin.options.BaseModelAdmin[M]):
    def _may(self, request: HttpRequest, verb: str, obj: models.Model | None = None) -> bool:
        perm = perm_name(self.model, verb)
        if obj is not None:
            return allowed(request.user, perm, obj)
        if account_path(self.model) == "pk" and verb == "add":
            return allowed(request.user, perm)
        return allowed_somewhere(request.user, perm)

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> ModelChoiceField[Any] | None:
        # Only what the user may put this object under: objects of the accounts where
        # their role may add or change it.
        related = db_field.remote_field.model
        if account_path(related) is not None and "queryset" not in kwargs:
            accounts = _union(
                accounts_where(request.user, perm_name(self.model, verb))
                for verb in ("add", "change")
            )
            kwargs["queryset"] = scoped(related._default_manager.all(), accounts)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def _union(groups: Iterable[set[int] | None]) -> set[int] | None:
    found: set[int] = set()
    for group in groups:
        if group is None:
            return None
        found |= group
    return found


class AccountScopedAdmin(_AccountScopedAdminBase[M], admin.ModelAdmin[M]):
    """A ModelAdmin of account objects: rows, list filters and form choices of the user's
    accounts only; view, add, change and delete as the role in the row's account allows."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[M]:
        return visible(request.user, super().get_queryset(request))

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        # A filter by a related object offers only those of the rows shown.
        filters: list[Any] = []
        for entry in super().get_list_filter(request):
            if isinstance(entry, str) and self._is_relation(entry):
                entry = (entry, admin.RelatedOnlyFieldListFilter)
            filters.append(entry)
        return filters

    def _is_relation(self, path: str) -> bool:
        model: Any = self.model
        field: Any = None
        for part in path.split("__"):
            field = model._meta.get_field(part)
            model = field.related_model
            if model is None:
                return False
        return bool(field is not None and field.is_relation)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "view")

    def has_view_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return self._may(request, "view", obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._may(request, "add")

    def has_change_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return self._may(request, "change", obj)

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return self._may(request, "delete", obj)


class AccountScopedInline(_AccountScopedAdminBase[M], admin.options.InlineModelAdmin[M, Any]):
    """An inline of account objects: `obj` is the parent, of the same account."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, "view", obj)

    def has_add_permission(self, request: HttpRequest, obj: Any) -> bool:  # type: ignore[override]
        return self._may(request, "add", obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, "change", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, "delete", obj)
