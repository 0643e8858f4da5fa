from django.contrib import admin

from clusters.models import Account, Cluster, Location


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin[Account]):
    list_display = ["name", "api_url", "customer_id"]


@admin.register(Location)
class LocationAdmin(admin.ModelAdmin[Location]):
    list_display = ["name", "account", "last_seen_at"]
    list_filter = ["account"]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin[Cluster]):
    list_display = ["name", "account", "created_at"]
