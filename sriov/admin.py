"""SR-IOV in the admin: read-only views of what is mirrored and recorded. Changing the
configuration (with its write-only credential) and rotating agent tokens go through the
API (`/api/v1/sriov/clusters/<id>/`), where the service checks the role and audits."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from capvco_web.permissions import AccountScopedAdmin
from sriov.models import ExternalNetwork, LeakedNic, PodNic, SriovConfig


class ReadOnlyAdmin(AccountScopedAdmin[Any]):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PodNic)
class PodNicAdmin(ReadOnlyAdmin):
    list_display = [
        "pod_name", "namespace", "cluster", "node_name", "vm_id", "network_name", "ip", "mac",
        "state", "requested_at",
    ]  # fmt: skip
    list_filter = ["state", "cluster"]
    search_fields = ["pod_name", "pod_uid", "mac", "ip"]


@admin.register(LeakedNic)
class LeakedNicAdmin(ReadOnlyAdmin):
    list_display = ["mac", "ip", "cluster", "vm_id", "leaked_since", "detach_requested_at"]
    list_filter = ["cluster"]


@admin.register(ExternalNetwork)
class ExternalNetworkAdmin(ReadOnlyAdmin):
    list_display = ["name", "network_id", "location", "network", "gateway", "free_addresses"]


@admin.register(SriovConfig)
class SriovConfigAdmin(ReadOnlyAdmin):
    list_display = ["cluster", "enabled", "external_network", "has_credential", "mtu"]
    exclude = ["credential"]

    @admin.display(boolean=True)
    def has_credential(self, config: SriovConfig) -> bool:
        return config.has_credential
