"""The real HTTP receiver of tests/notify/test_webhooks.py, for the other modules here."""

from tests.notify.test_webhooks import receiver

__all__ = ["receiver"]
