"""Notifications: webhook targets per account, told of leaks, failed machines and stale
locations (docs/guides/notifications.md)."""
