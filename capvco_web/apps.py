from django.apps import AppConfig


class CapvcoWebConfig(AppConfig):
    """The project package is an app too: it holds the shared models (heartbeat, audit,
    API tokens)."""

    name = "capvco_web"
    verbose_name = "capvco-web"
