"""The notifications page: an account's webhook targets, what each was last told and how
that went, and a "Send a test" button (the service the admin action uses, audited). Only
those who may see targets (the account's admins) see the page and the tests' results;
only those who may change a target may send it a test.

A test is posted by a worker, never in the request: the button answers at once with the
test's row, which asks again every second until the result is in (htmx; 286 stops it)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, OuterRef, Q, Subquery
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.permissions import allowed, allowed_somewhere, perm_name, visible
from notify.models import Notice, WebhookTarget, WebhookTest
from notify.services import TEST_STALE, WebhookTestRefused, webhook_target_test

TEMPLATE = "notify/targets.html"
RECENT_NOTICES = 50
POLL_SECONDS = 1
# htmx stops polling on this status, and still shows what came with it.
POLL_STOP = 286


@dataclass(frozen=True)
class ShownTest:
    """A test as its target's row shows it."""

    test: WebhookTest | None
    done: bool
    ok: bool
    text: str


def shown_test(test: WebhookTest) -> ShownTest:
    if test.done_at is not None:
        text = f"failed: {test.error}" if test.error else "sent"
        return ShownTest(test, done=True, ok=not test.error, text=text)
    if test.requested_at < timezone.now() - TEST_STALE:
        return ShownTest(test, done=True, ok=False, text="not posted: no worker took it in time")
    return ShownTest(test, done=False, ok=True, text="waiting for a worker to post it…")


@require_GET
def target_list(request: HtmxHttpRequest) -> HttpResponse:
    if not allowed_somewhere(request.user, perm_name(WebhookTarget, "view")):
        raise PermissionDenied("You may not see the webhook targets of any account.")
    last_test = WebhookTest.objects.filter(target=OuterRef("pk")).order_by("-requested_at", "-pk")
    targets = list(
        visible(request.user, WebhookTarget.objects.all())
        .select_related("account")
        .annotate(
            open_notices=Count("notices", filter=Q(notices__closed_at__isnull=True)),
            last_sent_at=Max("notices__sent_at"),
            last_test_id=Subquery(last_test.values("pk")[:1]),
        )
        .order_by("account__name", "name")
    )
    tests = WebhookTest.objects.in_bulk([t.last_test_id for t in targets if t.last_test_id])
    notices = (
        visible(request.user, Notice.objects.all())
        .select_related("target")
        .order_by("-opened_at", "-pk")[:RECENT_NOTICES]
    )
    change = perm_name(WebhookTarget, "change")
    rows = [
        (
            target,
            allowed(request.user, change, target),
            shown_test(tests[target.last_test_id]) if target.last_test_id in tests else None,
        )
        for target in targets
    ]
    context = {"rows": rows, "notices": notices, "poll_seconds": POLL_SECONDS}
    return page_or_fragment(request, TEMPLATE, context, fragments=("targets",))


@require_POST
def target_test(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Ask a worker to post a test message to the target; htmx shows the test in the
    target's row, a plain form post says it on the page it goes back to."""
    target = get_object_or_404(visible(request.user, WebhookTarget.objects.all()), pk=pk)
    try:
        test = webhook_target_test(target=target, actor=request.user)
    except WebhookTestRefused as refused:
        if request.htmx:
            # 200: htmx shows what it is given; the row says why nothing was sent.
            shown = ShownTest(None, done=True, ok=False, text=str(refused))
            return _result(request, target, shown, status=200)
        messages.error(request, str(refused))
        return redirect("notify:targets")
    if request.htmx:
        return _result(request, target, shown_test(test), status=200)
    messages.success(
        request,
        f"The test message to {target.name} is on its way: its result shows in the "
        "target's row when it comes.",
    )
    return redirect("notify:targets")


@require_GET
def test_result(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A test's row, asked for again until its result is in: 286 when it is."""
    targets = visible(request.user, WebhookTarget.objects.all())
    test = get_object_or_404(
        WebhookTest.objects.select_related("target").filter(target__in=targets), pk=pk
    )
    shown = shown_test(test)
    return _result(request, test.target, shown, status=POLL_STOP if shown.done else 200)


def _result(
    request: HtmxHttpRequest, target: WebhookTarget, shown: ShownTest, *, status: int
) -> HttpResponse:
    context = {"target": target, "shown": shown, "poll_seconds": POLL_SECONDS}
    return render(request, f"{TEMPLATE}#test-result", context, status=status)
