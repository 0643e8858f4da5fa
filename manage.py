#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "capvco_web.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - reads the settings now
    except ImproperlyConfigured as exc:
        # A setting the operator must fix: the one line naming it, not a traceback.
        sys.exit(f"{exc}")
    execute_from_command_line(sys.argv)
