"""The admin for GPU cards: mirrored, so read-only. Rows of the user's accounts only. (vGPU
reservations, released with a reason: clusters.admin, beside the machines that hold them.)"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from capvco_web.permissions import AccountScopedAdmin
from gpus.models import GpuProfile


@admin.register(GpuProfile)
class GpuProfileAdmin(AccountScopedAdmin[GpuProfile]):
    list_display = ["vendor", "model", "location", "available_instances"]
    list_filter = ["location", "vendor"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # cards come from the whitesky listing

    def get_readonly_fields(self, request: HttpRequest, obj: GpuProfile | None = None) -> list[str]:
        return [f.name for f in GpuProfile._meta.fields]
