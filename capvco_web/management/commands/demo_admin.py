"""Create the demo admin once, keeping its password in a file only its owner reads."""

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

RESET = ".venv/bin/python manage.py changepassword admin"


def password_file() -> Path:
    return Path(settings.VAR_DIR) / "admin-password"


def keep(password: str, path: Path) -> None:
    """Written readable by its owner alone from the start (mode 0600), never logged."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an earlier run may have had another mode
    with os.fdopen(fd, "w") as file:
        file.write(password + "\n")


class Command(BaseCommand):
    help = (
        "Create a superuser 'admin' with a random password, kept in <var dir>/admin-password, "
        "when no superuser exists."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        path = password_file()
        if users.objects.filter(is_superuser=True).exists():
            if users.objects.filter(username="admin").exists() and path.exists():
                self.stdout.write(
                    f"Demo admin 'admin': its first password is in {path} (reset: {RESET})"
                )
            else:
                self.stdout.write(
                    "An admin exists already "
                    "(reset a password with: manage.py changepassword NAME)."
                )
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username="admin", email="", password=password)
        keep(password, path)
        self.stdout.write(
            self.style.SUCCESS(f"Created the demo admin 'admin'; its password is in {path}")
            + f" (reset: {RESET})"
        )
