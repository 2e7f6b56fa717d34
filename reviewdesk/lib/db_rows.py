"""Hand-written reads and writes on the hot paths, with the ORM's models and types.

On the worker's way to a tool and on the API's per-request checks, building a QuerySet and
compiling its SQL cost more than the round trip and the row themselves (a join with
`select_related` about 2 ms, against 0.1 ms on the wire). A hand-written statement names its
columns with `Columns(Model, alias).sql` and builds each model back from its part of the row
with `Columns.build`, applying the converters Django's compiler applies (UUIDs, datetimes and
JSON read the same on SQLite and PostgreSQL), so what comes back is the model the ORM would
have built, with every concrete field loaded.

The writes (`insert`, `insert_many`, `update`, `update_by_pk`) do what save, bulk_create and a
queryset's update do for plain values, but send no model signal and resolve no expression
(F(), Now()): use them only for models with no receiver, and with values, not expressions.
A locked read (`for_update_of`) belongs inside atomic(), as the ORM's select_for_update.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Generic, TypeVar

from django.db import DatabaseError, connection, transaction
from django.db.models import Model
from django.db.transaction import TransactionManagementError

M = TypeVar("M", bound=Model)
Converter = Callable[[Any, Any, Any], Any]


def quote(name: str) -> str:
    return connection.ops.quote_name(name)


def table(model: type[Model]) -> str:
    """The model's table, quoted for this connection."""
    return quote(model._meta.db_table)


def column(model: type[Model], name: str) -> str:
    """The column of the model's field `name` (a foreign key's `_id` column), quoted."""
    return quote(_field(model, name).column)


def prep(model: type[Model], name: str, value: Any) -> Any:
    """`value` as the database takes it for the model's field `name` (a UUID as hex on SQLite)."""
    field = model._meta.get_field(name)
    return field.get_db_prep_value(value, connection)  # type: ignore[union-attr]


class Columns(Generic[M]):
    """The concrete columns of `model` as `alias`.column, in field order (or only those named
    in `names`, in that order), and what a row holding them at `start` reads as: the converted
    `values`, or the model itself (`build`, every column only). `Columns.of` keeps one per
    model, alias and names."""

    def __init__(self, model: type[M], alias: str, names: tuple[str, ...] = ()) -> None:
        self.model = model
        self.whole = not names
        self.fields = list(model._meta.concrete_fields) if self.whole else [_field(model, n) for n in names]
        self.width = len(self.fields)
        self.sql = ", ".join(f"{quote(alias)}.{quote(field.column)}" for field in self.fields)
        self._converters = _converters(self.fields, alias)

    @classmethod
    def of(cls, model: type[M], alias: str, *names: str) -> Columns[M]:
        return _columns(model, alias, names, connection.vendor)

    def values(self, row: Sequence[Any], start: int = 0) -> list[Any]:
        values = list(row[start : start + self.width])
        for index, (converters, expression) in self._converters:
            value = values[index]
            for convert in converters:
                value = convert(value, expression, connection)
            values[index] = value
        return values

    def build(self, row: Sequence[Any], start: int = 0) -> M:
        assert self.whole, "a model is built from all its columns"
        # from_db with every concrete field: positional, as the ORM builds a full row.
        return self.model.from_db(connection.alias, None, self.values(row, start))  # type: ignore[arg-type]


def _field(model: type[Model], name: str) -> Any:
    field = model._meta.get_field(name)
    assert getattr(field, "column", None), f"{model.__name__}.{name} has no column"
    return field


@cache
def _columns(model: type[Model], alias: str, names: tuple[str, ...], vendor: str) -> Columns[Any]:
    """One `Columns` per model, alias, names and database vendor (a process has one database)."""
    return Columns(model, alias, names)


def _converters(fields: list[Any], alias: str) -> list[tuple[int, tuple[list[Converter], Any]]]:
    """What `SQLCompiler.get_converters` gives each column: the backend's, then the field's."""
    out = []
    for index, field in enumerate(fields):
        expression = field.get_col(alias)
        converters = connection.ops.get_db_converters(expression) + expression.get_db_converters(connection)
        if converters:
            out.append((index, (converters, expression)))
    return out


def insert(instance: M) -> M:
    """INSERT `instance` as `save(force_insert=True)` would, in one hand-written statement: its
    related objects checked (an unsaved one refused), each field's `pre_save` (auto_now_add) and
    its prepared value, the primary key read back when the database makes it. For the desk's
    own rows on the hot paths (runs, requests, decisions, attempts, events, audit rows, the
    ledger): no model signals are sent, and none of those models has a receiver."""
    model = type(instance)
    meta = model._meta
    # As save does: a related object assigned unsaved is refused (ValueError), not written as
    # a NULL key; one saved since it was assigned gives its key.
    _check_related(instance, "save")
    makes_pk = meta.auto_field is not None and instance.pk is None
    sql, fields = _insert_sql(model, connection.vendor, makes_pk)
    values = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
    # As save does: a failed statement marks the enclosing atomic block for rollback.
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, values)
        if makes_pk:
            if connection.features.can_return_columns_from_insert:
                pk = cursor.fetchone()[0]
            else:
                pk = connection.ops.last_insert_id(cursor, meta.db_table, meta.pk.column)  # type: ignore[union-attr]
            instance.pk = pk
    instance._state.adding = False
    instance._state.db = connection.alias
    return instance


def _check_related(instance: Model, operation: str) -> None:
    """The ORM's check of `instance`'s related objects before it is written, skipped when none
    was assigned: it looks only at those its state caches (`Field.is_cached`), and most hot
    rows name theirs by key (`run_id=`), so the check costs nothing for them."""
    if instance._state.fields_cache:
        instance._prepare_related_fields_for_save(operation_name=operation)


@cache
def _insert_sql(model: type[Model], vendor: str, makes_pk: bool) -> tuple[str, list[Any]]:
    """The INSERT for `model` and the fields it sets, as Django's save leaves out an auto key
    the database makes (`makes_pk`) and reads it back."""
    meta = model._meta
    fields = [f for f in meta.local_concrete_fields if not (makes_pk and f is meta.auto_field)]
    sql = (
        f"INSERT INTO {table(model)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    if makes_pk and connection.features.can_return_columns_from_insert:
        sql += f" RETURNING {quote(meta.pk.column)}"  # type: ignore[union-attr]
    return sql, fields


def for_update_of(alias: str) -> str:
    """The clause that locks `alias`'s row until the transaction ends, as the ORM's
    `select_for_update(of=(...))` does; empty where writing transactions already exclude each
    other (SQLite). Outside a transaction the lock would end with its own statement: refused
    there (TransactionManagementError), as the ORM refuses it. Ask for it as the statement is
    built, each time, not in a cached one."""
    if not connection.features.has_select_for_update:
        return ""
    if connection.get_autocommit():
        raise TransactionManagementError("select_for_update cannot be used outside of a transaction.")
    if connection.features.has_select_for_update_of:
        return f" FOR UPDATE OF {quote(alias)}"
    return " FOR UPDATE"


def insert_many(instances: Sequence[M]) -> list[M]:
    """INSERT rows of one model as `bulk_create` does (their related objects checked, each
    field's `pre_save`, in batches the database takes), in hand-written statements; a key the database makes is not read back (the
    desk's callers name their rows by keys they chose, or by position)."""
    if not instances:
        return []
    model = type(instances[0])
    meta = model._meta
    for obj in instances:  # as bulk_create does (see insert)
        _check_related(obj, "bulk_create")
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field]
    batch = max(connection.ops.bulk_batch_size(fields, instances) or len(instances), 1)
    row = f"({', '.join(['%s'] * len(fields))})"
    head = f"INSERT INTO {table(model)} ({', '.join(quote(f.column) for f in fields)}) VALUES "
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        for start in range(0, len(instances), batch):
            chunk = instances[start : start + batch]
            values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for obj in chunk for f in fields]
            cursor.execute(head + ", ".join([row] * len(chunk)), values)
    for obj in instances:
        obj._state.adding = False
        obj._state.db = connection.alias
    return list(instances)


def update(instance: Model, names: Sequence[str]) -> None:
    """UPDATE the fields `names` of `instance`'s row as `save(update_fields=names)` does (each
    field's `pre_save`, so an `auto_now` field is stamped), in one hand-written statement;
    DatabaseError when no row has its key, as the ORM raises. For the desk's own rows on the
    hot paths: no model signals are sent, and none of those models has a receiver. No
    statement for no fields, as save(update_fields=[]) writes nothing."""
    if not names:
        return
    model = type(instance)
    sql, fields = _update_sql(model, tuple(names), connection.vendor)
    values = [field.get_db_prep_save(field.pre_save(instance, False), connection) for field in fields]
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, [*values, model._meta.pk.get_db_prep_value(instance.pk, connection)])  # type: ignore[union-attr]
        if cursor.rowcount == 0:
            raise DatabaseError("Save with update_fields did not affect any rows.")


def update_by_pk(model: type[Model], pk: Any, **values: Any) -> int:
    """`model.objects.filter(pk=pk).update(**values)` in one hand-written statement (no
    `pre_save`, as the ORM's update has none); the number of rows changed. Plain values only:
    no expressions (F, Now), a foreign key by its key. No statement for no values (0), as the
    ORM's update runs none."""
    if not values:
        return 0
    sql, fields = _update_sql(model, tuple(values), connection.vendor)
    params = [
        field.get_db_prep_save(values[name], connection) for name, field in zip(values, fields, strict=True)
    ]
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, [*params, model._meta.pk.get_db_prep_value(pk, connection)])  # type: ignore[union-attr]
        return cursor.rowcount


@cache
def _update_sql(model: type[Model], names: tuple[str, ...], vendor: str) -> tuple[str, list[Any]]:
    fields = [_field(model, name) for name in names]
    sets = ", ".join(f"{quote(field.column)} = %s" for field in fields)
    sql = f"UPDATE {table(model)} SET {sets} WHERE {quote(model._meta.pk.column)} = %s"  # type: ignore[union-attr]
    return sql, fields


def fetchone(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """The first row of a hand-written statement, or None."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetchall(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Every row of a hand-written statement."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def write(sql: str, params: Sequence[Any]) -> int:
    """Run a hand-written write (an UPDATE with its own conditions, say); the number of rows
    it changed. A failed statement marks the enclosing atomic block for rollback, as the ORM's
    writes do."""
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
