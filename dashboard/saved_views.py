"""Saved views: a person's named queries of a list (dashboard.lists), checked against
the list's filter language when saved, so that a view that would be refused is refused
now, saying why. The one writer of `SavedView`."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import QueryDict

from cloud.models import conflict
from dashboard.lists import LISTS, list_query
from dashboard.models import SavedView


def saved_view_create(
    *, user: User | AnonymousUser, list_name: str, name: str, query: str
) -> SavedView:
    """Save `query` (a list's URL query) as the user's view `name` of the list."""
    if not isinstance(user, User):
        raise PermissionDenied("Log in to save a view.")
    shaped = LISTS.get(list_name)
    if shaped is None:
        raise ValidationError(
            {"list_name": f"No list {list_name!r} keeps views: use one of {', '.join(LISTS)}."}
        )
    name = name.strip()
    if not name:
        raise ValidationError({"name": "Give the view a name."})
    params = list_query(QueryDict(query))
    if problems := shaped.query_problems(params):
        raise ValidationError({"query": problems})
    view = SavedView(user=user, list_name=list_name, name=name, query=params.urlencode())
    view.full_clean(exclude=["user"], validate_unique=False)
    try:
        with transaction.atomic():
            view.save()
    except IntegrityError:
        raise ValidationError(
            {
                "name": conflict(
                    f"You have a view of {list_name} named {name!r}: choose another name."
                )
            }
        ) from None
    return view


def saved_view_delete(*, view: SavedView, user: User | AnonymousUser) -> None:
    """Delete a saved view: its owner's alone."""
    if not isinstance(user, User) or view.user_id != user.pk:
        raise PermissionDenied("A saved view is deleted by its owner only.")
    view.delete()


def saved_views_of(user: User | AnonymousUser, list_name: str | None = None) -> QuerySet[SavedView]:
    """The user's saved views (of one list, given its name), by name."""
    if not isinstance(user, User):
        return SavedView.objects.none()
    views = SavedView.objects.filter(user=user).order_by("name")
    return views if list_name is None else views.filter(list_name=list_name)
