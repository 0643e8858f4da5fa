import pytest
from cryptography.fernet import Fernet
from django.db import connection

from cloud.models import Account

pytestmark = pytest.mark.django_db

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZW1vIn0.signature"


def make_account() -> Account:
    return Account.objects.create(
        name="acme",
        api_url="https://vco.example/api/1",
        iam_url="https://iam.example",
        customer_id="cust-1",
        credential=JWT,
    )


def raw_credential(account: Account) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT credential FROM cloud_account WHERE id = %s", [account.pk])
        return str(cursor.fetchone()[0])


def test_credential_is_stored_encrypted_and_read_back_in_plain() -> None:
    account = make_account()
    stored = raw_credential(account)
    assert JWT not in stored
    assert Account.objects.get(pk=account.pk).credential == JWT


def test_credential_written_with_an_old_key_still_reads_after_rotation(settings) -> None:  # type: ignore[no-untyped-def]
    account = make_account()
    settings.FIELD_ENCRYPTION_KEYS = [
        Fernet.generate_key().decode(),
        *settings.FIELD_ENCRYPTION_KEYS,
    ]
    assert Account.objects.get(pk=account.pk).credential == JWT
