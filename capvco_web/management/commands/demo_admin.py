"""Create the demo admin once, printing its password that one time."""

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create a superuser 'admin' with a random password when no superuser exists."

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write(
                "An admin exists already (reset a password with: manage.py changepassword NAME)."
            )
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username="admin", email="", password=password)
        self.stdout.write(
            self.style.SUCCESS(f"Created admin user 'admin' with password: {password}")
            + "\n(shown once; change it with: manage.py changepassword admin)"
        )
