from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The operators' pages: capacity, money leaking, clusters and their plan, the audit
    log, and the actions an operator takes. Views read the database only; actions go
    through the same services as the API. Its one table is a person's saved views of the
    lists (dashboard.saved_views)."""

    name = "dashboard"
