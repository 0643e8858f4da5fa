"""Posts are signed as Standard Webhooks signs them: each notice gets the id its posts
carry (webhook-id), a target keeps its previous secret while a new one takes over, and
every stored secret is rewritten as `whsec_<base64>` of the very bytes it signed with
before, so receivers' checks of the old headers go on passing unchanged."""

import base64
import uuid
from typing import Any

import capvco_web.encryption
import notify.models
from django.db import migrations, models


def message_ids_give(apps: Any, schema_editor: Any) -> None:
    Notice = apps.get_model("notify", "Notice")
    for pk in Notice.objects.filter(message_id=None).values_list("pk", flat=True):
        Notice.objects.filter(pk=pk).update(message_id=uuid.uuid4())


def secrets_as_whsec(apps: Any, schema_editor: Any) -> None:
    # Before this, every secret's UTF-8 bytes were the HMAC key, whatever it looked like.
    for target in apps.get_model("notify", "WebhookTarget").objects.exclude(secret=""):
        target.secret = "whsec_" + base64.b64encode(target.secret.encode()).decode()
        target.save(update_fields=["secret"])


def secrets_as_before(apps: Any, schema_editor: Any) -> None:
    for target in apps.get_model("notify", "WebhookTarget").objects.exclude(secret=""):
        target.secret = base64.b64decode(target.secret.removeprefix("whsec_")).decode()
        target.save(update_fields=["secret"])


class Migration(migrations.Migration):

    dependencies = [
        ('notify', '0003_reasons_idle_gpus_and_unexplained_bill'),
    ]

    operations = [
        migrations.AddField(
            model_name='notice',
            name='message_id',
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(message_ids_give, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='notice',
            name='message_id',
            field=models.UUIDField(default=uuid.uuid4, editable=False, unique=True),
        ),
        migrations.AddField(
            model_name='webhooktarget',
            name='previous_secret',
            field=capvco_web.encryption.EncryptedTextField(blank=True, editable=False),
        ),
        migrations.AddField(
            model_name='webhooktarget',
            name='previous_secret_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='webhooktarget',
            name='secret',
            field=capvco_web.encryption.EncryptedTextField(blank=True, editable=False, help_text='whsec_<base64>: the key of the webhook-signature (Standard Webhooks); stored encrypted, never shown.', validators=[notify.models.secret_check]),
        ),
        migrations.RunPython(secrets_as_whsec, secrets_as_before),
    ]
