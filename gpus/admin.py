"""The admin for GPU cards and vGPU reservations: mirrored, so read-only; released only
through the audited service, with a reason. Rows of the user's accounts only."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from capvco_web.admin import reason_asked
from capvco_web.permissions import AccountScopedAdmin, allowed_somewhere
from capvco_web.tasks import send_on_commit
from gpus.models import GpuProfile, VgpuReservation
from gpus.release_requests import reservation_release_request
from gpus.selectors import ORPHANED
from gpus.services import ReleaseRefused
from gpus.tasks import reservation_release_task


@admin.register(GpuProfile)
class GpuProfileAdmin(AccountScopedAdmin[GpuProfile]):
    list_display = ["vendor", "model", "location", "available_instances"]
    list_filter = ["location", "vendor"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # cards come from the whitesky listing

    def get_readonly_fields(self, request: HttpRequest, obj: GpuProfile | None = None) -> list[str]:
        return [f.name for f in GpuProfile._meta.fields]


class OrphanedFilter(admin.SimpleListFilter):
    title = "orphaned"
    parameter_name = "orphaned"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[VgpuReservation]
    ) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[VgpuReservation]
    ) -> QuerySet[VgpuReservation]:
        if self.value() == "yes":
            return queryset.filter(ORPHANED)
        if self.value() == "no":
            return queryset.exclude(ORPHANED)
        return queryset


@admin.register(VgpuReservation)
class VgpuReservationAdmin(AccountScopedAdmin[VgpuReservation]):
    list_display = [
        "name",
        "location",
        "state",
        "vm_id",
        "owner",
        "orphaned_since",
        "accrued_cost",
        "release_requested_at",
    ]
    list_filter = ["state", "location", OrphanedFilter]
    list_select_related = ["location", "listed"]
    search_fields = ["name", "vgpu_id", "owner_cluster", "owner_machine"]
    actions = ["release_selected"]

    # Rows mirror whitesky (or record a call in flight): nobody edits, adds or deletes
    # them here. Deleting a row would not stop the charge; the release action does.
    def get_readonly_fields(
        self, request: HttpRequest, obj: VgpuReservation | None = None
    ) -> list[str]:
        return [f.name for f in VgpuReservation._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: VgpuReservation | None = None
    ) -> bool:
        return False

    def has_release_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "gpus.release_vgpureservation")

    @admin.display(description="owner")
    def owner(self, row: VgpuReservation) -> str:
        return row.owner

    @admin.display(description="accrued cost")
    def accrued_cost(self, row: VgpuReservation) -> str:
        if row.orphaned_since is None:
            return "-"
        return f"{row.accrued_cost()} {row.location.currency}"

    @admin.action(description="Release selected reservations", permissions=["release"])
    def release_selected(
        self, request: HttpRequest, queryset: QuerySet[VgpuReservation]
    ) -> TemplateResponse | None:
        reason = reason_asked(
            self,
            request,
            queryset,
            action="release_selected",
            title="Release selected reservations",
            template="admin/gpus/release_confirm.html",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        # Views never call whitesky: the request is recorded on the row now, and a worker
        # carries it out (this task, or the orphan sweep if the task never runs).
        for row in queryset:
            try:
                reservation_release_request(reservation=row, actor=request.user, reason=reason)
            except (ReleaseRefused, PermissionDenied) as exc:
                self.message_user(request, f"Refused: {exc}", messages.ERROR)
                continue
            send_on_commit(reservation_release_task, row.pk)
            self.message_user(
                request,
                f"{row.name}: release requested; a worker carries it out and the audit log "
                "shows the outcome.",
                messages.SUCCESS,
            )
        return None
