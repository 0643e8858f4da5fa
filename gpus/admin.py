from django.contrib import admin

from gpus.models import GpuProfile


@admin.register(GpuProfile)
class GpuProfileAdmin(admin.ModelAdmin[GpuProfile]):
    list_display = ["vendor", "model", "location", "available_instances", "last_seen_at"]
    list_filter = ["location", "vendor"]
