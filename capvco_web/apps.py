from django.apps import AppConfig


class CapvcoWebConfig(AppConfig):
    """The project package is an app too: it holds the shared models (heartbeat, audit,
    API tokens)."""

    name = "capvco_web"
    verbose_name = "capvco-web"

    def ready(self) -> None:
        from capvco_web.models import AuditEvent
        from capvco_web.ownership import account_paths_register
        from capvco_web.permissions import roles_grant

        account_paths_register({AuditEvent: "account"})
        roles_grant(view={"capvco_web.view_auditevent"})
