from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from capvco_web.environment import (
    database_config,
    default_broker_url,
    encryption_keys,
    filesystem_broker_options,
    new_secret_key,
    secret_from_env,
)


@pytest.mark.parametrize(
    "url",
    ["", "mysql//nohost", "postgres-ish://x", "redis://127.0.0.1:6379/0", "not a url at all"],
)
def test_bad_database_url_is_refused_naming_the_variable(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_config(url)


def test_postgres_url_without_database_name_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"DATABASE_URL.*names no database"):
        database_config("postgres://postgres@127.0.0.1:5432/")


def test_postgres_url_is_parsed_with_persistent_checked_connections() -> None:
    config = database_config("postgres://capvco:pw@db.internal:5433/capvco")
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"], config["USER"]) == (
        "db.internal",
        5433,
        "capvco",
        "capvco",
    )
    assert config["CONN_HEALTH_CHECKS"] is True


def test_sqlite_url_waits_for_locks_instead_of_failing(tmp_path: Path) -> None:
    config = database_config(f"sqlite:///{tmp_path}/db.sqlite3")
    assert config["NAME"] == f"{tmp_path}/db.sqlite3"
    assert config["OPTIONS"]["timeout"] >= 10


def test_broker_falls_back_to_filesystem_when_redis_does_not_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("capvco_web.environment.redis_answers", lambda: False)
    url = default_broker_url(tmp_path)
    assert url == f"filesystem://{tmp_path}/broker"
    options = filesystem_broker_options(url)
    assert Path(options["data_folder_in"]).is_dir()


def test_broker_prefers_redis_when_it_answers(tmp_path: Path) -> None:
    # The real Redis of this machine (bin/test makes sure one runs on 6379 or REDIS_URL).
    from capvco_web.environment import redis_answers

    if not redis_answers():
        pytest.skip("no Redis on 127.0.0.1:6379 (bin/test started one elsewhere)")
    assert default_broker_url(tmp_path) == "redis://127.0.0.1:6379/0"


def test_secret_is_refused_missing_when_debug_is_off(tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be set when DEBUG is off"):
        secret_from_env(
            "", name="SECRET_KEY", path=tmp_path / "k", debug=False, make=new_secret_key
        )


def test_secret_is_generated_once_into_var_in_debug(tmp_path: Path) -> None:
    first = secret_from_env(
        "", name="SECRET_KEY", path=tmp_path / "k", debug=True, make=new_secret_key
    )
    second = secret_from_env(
        "", name="SECRET_KEY", path=tmp_path / "k", debug=True, make=new_secret_key
    )
    assert first == second and len(first) >= 50
    assert (tmp_path / "k").stat().st_mode & 0o077 == 0  # readable by its owner only


def test_encryption_key_that_is_not_fernet_is_refused_naming_the_variable() -> None:
    with pytest.raises(ImproperlyConfigured, match="FIELD_ENCRYPTION_KEY"):
        encryption_keys("not-a-key")
