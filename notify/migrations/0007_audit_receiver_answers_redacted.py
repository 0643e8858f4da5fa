"""What a receiver answered (an HTTP status, no answer, a TLS failure) tells apart the
ports and hosts a URL names, and every member of an account reads the audit log: the
records written before are brought to what a post is recorded as now, "sent" or
"failed"; the answer stays on the notice, which only the account's admins see."""

from typing import Any

from django.db import migrations

ACTIONS = ("notice.send", "webhook_target.test")


def receiver_answers_redact(apps: Any, schema_editor: Any) -> None:
    events = apps.get_model("capvco_web", "AuditEvent").objects
    for event in events.filter(action__in=ACTIONS).iterator():
        after = event.after if isinstance(event.after, dict) else None
        if after is None or after.get("result") in (None, "sent", "failed", "asked"):
            continue
        events.filter(pk=event.pk).update(after={**after, "result": "failed"})


class Migration(migrations.Migration):
    dependencies = [
        ("capvco_web", "0008_accounts_in_cloud"),
        ("notify", "0006_webhook_tests"),
    ]

    operations = [migrations.RunPython(receiver_answers_redact, migrations.RunPython.noop)]
