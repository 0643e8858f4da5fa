"""Writing rows so that a pass over unchanged data writes nothing, and state changes are
compare-and-set.

`fields_assign` tells a mirror whether an observed row changed at all; `model_update`
writes a change to one row, only when the row is still in the state the caller saw.
`rows_update` writes many rows' changes in a few statements, each row only while it is
still unchanged. `rows_key_share` reads rows that nobody may delete until the transaction
ends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import connections, models
from django.db.models import Case, Q, QuerySet, Value, When
from django.db.models.functions import Cast
from django.db.transaction import TransactionManagementError
from django.utils import timezone

BATCH = 500


def fields_assign(instance: models.Model, data: Mapping[str, Any]) -> list[str]:
    """Set the fields whose value differs; return their names (empty: nothing changed)."""
    changed = []
    for field, value in data.items():
        if getattr(instance, field) != value:
            setattr(instance, field, value)
            changed.append(field)
    return changed


def model_update(
    instance: models.Model, data: Mapping[str, Any], *, expect: Mapping[str, Any] | None = None
) -> bool:
    """Write the fields of `data` that differ from `instance`; True when the row was written.

    With `expect`, the row is written only while the database still holds those values
    (compare-and-set: two workers claiming one row, one wins). Nothing differs: no write,
    False. The instance takes the new values only when the write happened. `auto_now`
    fields (e.g. `updated_at`) move with every write, as `save()` would move them.
    """
    changed = {field: value for field, value in data.items() if getattr(instance, field) != value}
    if not changed:
        return False
    model = type(instance)
    for model_field in model._meta.concrete_fields:
        if getattr(model_field, "auto_now", False) and model_field.name not in changed:
            changed[model_field.name] = timezone.now()
    written = model._default_manager.filter(pk=instance.pk, **(expect or {})).update(**changed)
    if written:
        for name, value in changed.items():
            setattr(instance, name, value)
    return written == 1


def joined_forget(instance: models.Model, name: str) -> None:
    """Drop the row a join without a column (a ForeignObject) cached on `instance`: a
    refresh keeps it otherwise, as Django clears only the relations of columns."""
    joined = instance._meta.get_field(name)
    if isinstance(joined, models.ForeignObject) and joined.is_cached(instance):
        joined.delete_cached_value(instance)


def rows_update(rows: Sequence[models.Model], fields: Collection[str], *, where: Q) -> int:
    """Write `fields` of each row as the instance holds them, in batches, to the rows that
    still match `where` (compare-and-set for many rows at once: one changed meanwhile by
    someone else is left as they made it). Answers how many rows were written."""
    if not rows or not fields:
        return 0
    model = type(rows[0])
    concrete = [
        field
        for name in sorted(fields)
        if isinstance(field := model._meta.get_field(name), models.Field)
    ]
    assert len(concrete) == len(fields), f"not columns of {model.__name__}: {fields}"
    written = 0
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        values: dict[str, Any] = {}
        for field in concrete:
            case = Case(
                *(
                    When(pk=row.pk, then=Value(getattr(row, field.attname), output_field=field))
                    for row in batch
                ),
                output_field=field,
            )
            # As bulk_update does: PostgreSQL types a CASE of NULLs as text without a cast.
            cast = connections[model._default_manager.db].features.requires_casted_case_in_updates
            values[field.attname] = Cast(case, output_field=field) if cast else case
        queryset = model._default_manager.filter(where, pk__in=[row.pk for row in batch])
        written += queryset.update(**values)
    return written


def rows_key_share(rows: QuerySet[Any, tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows of a `values_list` query, read and locked FOR KEY SHARE (its own table's rows
    only) in one statement: until the transaction ends nobody deletes them, while their
    ordinary updates go on. A delete committed before is not seen; one in flight is
    waited for. Django's `select_for_update` cannot say it (`no_key=True` is FOR NO KEY
    UPDATE, which blocks updates). SQLite has no row locks and one writer: a plain read."""
    connection = connections[rows.db]
    if connection.vendor != "postgresql":
        return list(rows)
    if not connection.in_atomic_block:  # the lock would end with the statement
        raise TransactionManagementError("rows_key_share outside a transaction")
    sql, params = rows.query.get_compiler(using=rows.db).as_sql()
    table = connection.ops.quote_name(rows.model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"{sql} FOR KEY SHARE OF {table}", params)
        rows_read: list[tuple[Any, ...]] = cursor.fetchall()
        return rows_read
