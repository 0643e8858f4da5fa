from django.contrib import admin

from sriov.models import PodNic


@admin.register(PodNic)
class PodNicAdmin(admin.ModelAdmin[PodNic]):
    list_display = ["pod_uid", "vm_id", "network_id", "mac", "ip", "state"]
    list_filter = ["state"]
