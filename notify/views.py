"""The notifications page: an account's webhook targets, what each was last told and how
that went, and a "Send a test" button (the service the admin action uses, audited). Only
those who may see targets (the account's admins) see the page; only those who may change
a target may send it a test."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from capvco_web.htmx import HtmxHttpRequest
from capvco_web.permissions import allowed, allowed_somewhere, perm_name, visible
from dashboard.views.common import page_or_fragment
from notify.models import Notice, WebhookTarget
from notify.services import webhook_target_test

TEMPLATE = "notify/targets.html"
RECENT_NOTICES = 50


@require_GET
def target_list(request: HtmxHttpRequest) -> HttpResponse:
    if not allowed_somewhere(request.user, perm_name(WebhookTarget, "view")):
        raise PermissionDenied("You may not see the webhook targets of any account.")
    targets = (
        visible(request.user, WebhookTarget.objects.all())
        .select_related("account")
        .annotate(
            open_notices=Count("notices", filter=Q(notices__closed_at__isnull=True)),
            last_sent_at=Max("notices__sent_at"),
        )
        .order_by("account__name", "name")
    )
    notices = (
        visible(request.user, Notice.objects.all())
        .select_related("target")
        .order_by("-opened_at", "-pk")[:RECENT_NOTICES]
    )
    change = perm_name(WebhookTarget, "change")
    rows = [(target, allowed(request.user, change, target)) for target in targets]
    return page_or_fragment(
        request, TEMPLATE, {"rows": rows, "notices": notices}, fragments=("targets",)
    )


@require_POST
def target_test(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Post a test message to the target now; htmx shows how it went in the target's row,
    a plain form post says it on the page it goes back to."""
    target = get_object_or_404(visible(request.user, WebhookTarget.objects.all()), pk=pk)
    delivery = webhook_target_test(target=target, actor=request.user)
    if request.htmx:
        # Answered 200 whatever the receiver said: the result is what the row shows.
        context = {"target": target, "delivery": delivery}
        return render(request, f"{TEMPLATE}#test-result", context)
    if delivery.error:
        messages.error(request, f"The test message to {target.name} failed: {delivery.error}")
    else:
        messages.success(request, f"The test message to {target.name} was taken.")
    return redirect("notify:targets")
