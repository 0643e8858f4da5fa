"""A webhook target's URL is a credential (a Slack incoming webhook's is what posts to the
channel): the stored ones are encrypted, and the audit records that hold them keep only
their scheme and host."""

from typing import Any
from urllib.parse import urlsplit

import capvco_web.encryption
import django.core.validators
from django.db import migrations


def urls_encrypt(apps: Any, schema_editor: Any) -> None:
    _urls_rewrite(apps, schema_editor, capvco_web.encryption.encrypt)


def urls_decrypt(apps: Any, schema_editor: Any) -> None:
    _urls_rewrite(apps, schema_editor, capvco_web.encryption.decrypt)


def _urls_rewrite(apps: Any, schema_editor: Any, rewrite: Any) -> None:
    # Raw rows: the model of this state would decrypt what is still plaintext.
    table = schema_editor.quote_name(apps.get_model("notify", "WebhookTarget")._meta.db_table)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT id, url FROM {table} WHERE url <> ''")  # noqa: S608
        for pk, url in cursor.fetchall():
            cursor.execute(f"UPDATE {table} SET url = %s WHERE id = %s", [rewrite(url), pk])  # noqa: S608


def _shown(url: str) -> str:
    """capvco_web.encryption.url_shown as it was when this was written."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018
    except ValueError:
        return "(secret)"
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return "(secret)"
    rest = "/…" if parts.path not in ("", "/") or parts.query or parts.fragment else "/"
    return f"{parts.scheme}://{parts.netloc}{rest}"


def audit_urls_redact(apps: Any, schema_editor: Any) -> None:
    events = apps.get_model("capvco_web", "AuditEvent").objects
    for event in events.filter(object_type="notify.WebhookTarget").iterator():
        sides = [side if isinstance(side, dict) else {} for side in (event.before, event.after)]
        urls = [side.get("url") for side in sides]
        if not any(isinstance(url, str) and url for url in urls):
            continue
        for side, url in zip(sides, urls):
            if isinstance(url, str) and url:
                side["url"] = _shown(url)
        before, after = sides
        if urls[0] != urls[1] and "url" in before and before["url"] == after.get("url"):
            after["url"] += " (changed)"  # the diff shows the change, not where to
        events.filter(pk=event.pk).update(
            before=event.before if event.before is None else before,
            after=event.after if event.after is None else after,
        )


class Migration(migrations.Migration):

    dependencies = [
        ('capvco_web', '0008_accounts_in_cloud'),
        ('notify', '0004_standard_webhooks_signing'),
    ]

    operations = [
        migrations.AlterField(
            model_name='webhooktarget',
            name='url',
            field=capvco_web.encryption.EncryptedUrlField(editable=True, help_text='Where notices are posted; its host must be in NOTIFY_WEBHOOK_HOSTS. Stored encrypted, shown as its scheme and host only.', validators=[django.core.validators.URLValidator(schemes=['http', 'https']), django.core.validators.MaxLengthValidator(500)]),
        ),
        migrations.RunPython(urls_encrypt, urls_decrypt),
        migrations.RunPython(audit_urls_redact, migrations.RunPython.noop),
    ]
