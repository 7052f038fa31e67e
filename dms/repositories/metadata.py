"""Every SQL expression on metadata fields, their options and documents' values.

A value is one ``document_metadata`` row per (document, field) with the column of the field's
type filled; a multi-select value is that row plus one ``document_metadata_choices`` row per
chosen option. Options keep their ids when renamed or retired, so values never change under
an edit of the field.

Rules that reach into documents live in :mod:`dms.services`: a changed value bumps the
document's version (:func:`~dms.services.set_value`), a required field added to a tenant with
documents gives each its default (:func:`~dms.services.define_field`). A search by value takes
its condition from :func:`value_matches`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Row

from dms.domain import FieldOption, FieldType, MetadataField, MetadataFilter, MetadataValue
from dms.domain.validation import (
    FIELD_NAME_MAX_CHARS,
    OPTION_MAX_CHARS,
    check_field_definition,
    check_id,
    check_ids,
    check_name,
    check_options,
    check_range_bound,
    check_text,
    check_value,
    from_json,
    shown,
    to_json,
)
from dms.errors import NotFound, ValidationError
from dms.schema import tenant as t

from . import _rows
from ._base import Repository
from .errors import translated

_f = t.metadata_fields
_o = t.metadata_field_options
_v = t.document_metadata
_c = t.document_metadata_choices
OPTION_COLUMNS = (_o.c.id, _o.c.field_id, _o.c.value, _o.c.position, _o.c.retired_at)

_new_values = insert(_v)
#: A document's value of a field, inserted or replaced; one row per value, all value columns given
#: (those of other types NULL), so that one statement serves every type and a document's values go
#: in one execution. Built once: ``excluded`` is slow to build (the figure in bench/README.md).
_UPSERT_VALUE = _new_values.on_conflict_do_update(
    index_elements=[_v.c.document_id, _v.c.field_id],
    # EXCLUDED's default, not now(): Citus refuses functions that are not IMMUTABLE in
    # DO UPDATE SET; the default is the same now() of this transaction.
    set_={
        name: _new_values.excluded[name]
        for name in ["field_type", *t.VALUE_COLUMNS.values(), "updated_at"]
    },
)


def option(row: Row[Any]) -> FieldOption:
    """Return the field option in ``row``."""
    return _rows.build(FieldOption, row)


def value_column(field_type: FieldType) -> sa.Column[Any]:
    """Return the column of ``document_metadata`` that holds values of ``field_type``."""
    return _v.c[t.VALUE_COLUMNS[field_type.value]]


def value_matches(
    document_id: sa.ColumnElement[uuid.UUID], field: MetadataField, wanted: MetadataFilter
) -> sa.Exists:
    """Return: the value of ``field`` on document ``document_id`` satisfies ``wanted``.

    ``wanted`` is checked against ``field`` here, before any SQL: a bound of the wrong type
    raises :class:`ValidationError`.
    """
    if field.field_type is FieldType.MULTI_SELECT:
        return _has_choice(document_id, field, wanted)
    column = value_column(field.field_type)
    tests: list[sa.ColumnElement[bool]] = []
    if wanted.equals is not None:
        tests.append(column == check_value(field, wanted.equals))
    if wanted.at_least is not None:
        tests.append(column >= check_range_bound(field, wanted.at_least))
    if wanted.at_most is not None:
        tests.append(column <= check_range_bound(field, wanted.at_most))
    return sa.exists().where(_v.c.document_id == document_id, _v.c.field_id == field.id, *tests)


def _has_choice(
    document_id: sa.ColumnElement[uuid.UUID], field: MetadataField, wanted: MetadataFilter
) -> sa.Exists:
    # Equality on a multi-select means "contains this option"; order means nothing here.
    bound: Any = wanted.at_least if wanted.at_least is not None else wanted.at_most
    if bound is not None:
        check_range_bound(field, bound)
    chosen = check_value(field, [wanted.equals])
    return sa.exists().where(
        _c.c.document_id == document_id,
        _c.c.field_id == field.id,
        _c.c.option_id.in_(list(chosen)),  # type: ignore[arg-type]
    )


class MetadataRepository(Repository):
    """Metadata fields, options and values of one tenant."""

    def add_field(
        self,
        *,
        name: str,
        field_type: FieldType | str,
        required: bool = False,
        default: object = None,
        options: Iterable[str] = (),
    ) -> MetadataField:
        """Store a field definition; ``options`` (any iterable) for select types, in order.

        Nothing is written if any check fails. This stores the definition only: a required
        field's promise that every document has a value is kept by
        :func:`dms.services.define_field`, the use case to call.
        """
        kind, choices = check_field_definition(
            name=name, field_type=field_type, required=required, options=options
        )
        # One savepoint: options refused by the database (two equal ignoring case) take the
        # field with them.
        with self._conn.begin_nested():
            field_id = self._insert_field(name, kind, required=required)
            self._insert_options(field_id, kind, choices)
            return self._store_default(self.get_field(field_id), default)

    def get_field(self, field_id: uuid.UUID) -> MetadataField:
        """Return the field with its options, or raise :class:`NotFound`."""
        return self.get_fields([field_id])[field_id]

    def get_fields(self, field_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, MetadataField]:
        """Return the fields with these ids, by id; :class:`NotFound` if one does not exist."""
        wanted = set(check_ids("metadata field", field_ids))
        if not wanted:
            return {}
        found = {field.id: field for field in self._load_fields(_f.c.id.in_(wanted))}
        missing = sorted(wanted - found.keys())
        if missing:
            raise NotFound(f"metadata field {missing[0]} does not exist")
        return found

    def get_field_by_name(self, name: str) -> MetadataField:
        """Return the field called ``name`` (ignoring case), or raise :class:`NotFound`."""
        check_text("metadata field name", name)
        fields = self._load_fields(sa.func.lower(_f.c.name) == sa.func.lower(name))
        if not fields:
            raise NotFound(f"metadata field {name!r} does not exist")
        return fields[0]

    def list_fields(self) -> list[MetadataField]:
        """Return every field, ordered by name."""
        return self._load_fields(sa.true())

    def rename_field(self, field_id: uuid.UUID, *, name: str) -> MetadataField:
        """Rename a field; values stay."""
        check_id("metadata field", field_id)
        check_name("metadata field", name, max_chars=FIELD_NAME_MAX_CHARS)
        with translated(self._conn, f"metadata field {name!r}"):
            found = self._execute(
                sa.update(_f)
                .where(_f.c.id == field_id)
                .values(name=name, updated_at=sa.func.now())
                .returning(_f.c.id)
            ).one_or_none()
        if found is None:
            raise NotFound(f"metadata field {field_id} does not exist")
        return self.get_field(field_id)

    def add_option(self, field_id: uuid.UUID, value: str) -> FieldOption:
        """Add an option at the end of a select or multi-select field's list."""
        field = self.get_field(field_id)
        check_options(field.field_type, field.name, [value])
        position = max((each.position for each in field.options), default=-1) + 1
        with translated(self._conn, f"option {value!r} of field {field.name!r}"):
            row = self._execute(
                sa.insert(_o)
                .values(
                    field_id=field_id,
                    field_type=field.field_type.value,
                    value=value,
                    position=position,
                )
                .returning(*OPTION_COLUMNS)
            ).one()
        return option(row)

    def rename_option(self, option_id: uuid.UUID, *, value: str) -> FieldOption:
        """Rename an option; documents that chose it keep it (values hold the option id)."""
        check_id("option", option_id)
        check_name("option", value, max_chars=OPTION_MAX_CHARS)
        with translated(self._conn, f"option {value!r}"):
            row = self._execute(
                sa.update(_o)
                .where(_o.c.id == option_id)
                .values(value=value)
                .returning(*OPTION_COLUMNS)
            ).one_or_none()
        return _found_option(row, option_id)

    def retire_option(self, option_id: uuid.UUID) -> FieldOption:
        """Stop offering an option; documents that chose it keep it."""
        check_id("option", option_id)
        # Only a live option is stamped; a retired one is read as it is. Not one statement with
        # coalesce(retired_at, now()): Citus refuses functions that are not IMMUTABLE there.
        row = self._execute(
            sa.update(_o)
            .where(_o.c.id == option_id, _o.c.retired_at.is_(None))
            .values(retired_at=sa.func.now())
            .returning(*OPTION_COLUMNS)
        ).one_or_none()
        if row is None:
            row = self._execute(
                sa.select(*OPTION_COLUMNS).where(_o.c.id == option_id)
            ).one_or_none()
        return _found_option(row, option_id)

    def put_value(
        self, document_id: uuid.UUID, field_id: uuid.UUID, value: object
    ) -> MetadataValue:
        """Store the document's value of a field, checked against the field's type and options.

        Returns the stored value (select values as option ids). Use
        :func:`dms.services.set_value`, which also bumps the document's version.
        """
        check_id("metadata field", field_id)
        return self.put_values(document_id, {field_id: value})[field_id]

    def put_values(
        self, document_id: uuid.UUID, values: Mapping[uuid.UUID, object]
    ) -> dict[uuid.UUID, MetadataValue]:
        """Store several values of one document: all of them, or (if one is refused) none.

        Every value is checked before the first is written. Returns the stored values.
        """
        check_id("document", document_id)
        if not isinstance(values, Mapping):
            raise ValidationError(f"values must be a mapping of field ids, not {shown(values)}")
        fields = self.get_fields(values.keys())
        checked = {field_id: check_value(fields[field_id], v) for field_id, v in values.items()}
        if checked:
            with translated(self._conn, f"values {shown(values)} of document {document_id}"):
                self._upsert(document_id, [(fields[f], value) for f, value in checked.items()])
        return checked

    def delete_value(self, document_id: uuid.UUID, field_id: uuid.UUID) -> bool:
        """Remove the document's value of a field; return whether it had one.

        A required field's value cannot be removed. Use :func:`dms.services.clear_value`,
        which also bumps the document's version.
        """
        check_id("document", document_id)
        field = self.get_field(field_id)
        if field.required:
            raise ValidationError(
                f"metadata field {field.name!r} is required: it cannot be cleared"
            )
        cleared = self._execute(
            sa.delete(_v)
            .where(_v.c.document_id == document_id, _v.c.field_id == field_id)
            .returning(_v.c.document_id)
        ).first()
        return cleared is not None

    def values_of(self, document_id: uuid.UUID) -> dict[uuid.UUID, MetadataValue]:
        """Return the document's values, keyed by field id."""
        check_id("document", document_id)
        rows = self._execute(sa.select(_v).where(_v.c.document_id == document_id))
        values: dict[uuid.UUID, MetadataValue] = {}
        for row in rows:
            kind = FieldType(row.field_type)
            if kind is not FieldType.MULTI_SELECT:
                values[row.field_id] = row._mapping[t.VALUE_COLUMNS[kind.value]]
        values.update(self._choices_of(document_id))
        return values

    def missing_required(self, document_id: uuid.UUID) -> list[MetadataField]:
        """Return the required fields that the document has no value for."""
        check_id("document", document_id)
        has_value = sa.exists().where(_v.c.document_id == document_id, _v.c.field_id == _f.c.id)
        return self._load_fields(sa.and_(_f.c.required, ~has_value))

    def backfill(self, field: MetadataField) -> None:
        """Give every document of the tenant ``field``'s default; for a field just added.

        One ``INSERT ... SELECT`` instead of a round trip per document. It is the one statement
        of this module that names another aggregate's table: ``documents``, as the rows that
        each get a value (the parent of ``document_metadata``). Which documents, and when, is
        the rule of :func:`dms.services.define_field`.
        """
        if not isinstance(field, MetadataField):
            raise ValidationError(f"a backfill needs a MetadataField, not {shown(field)}")
        if field.default is None:
            raise ValidationError(f"metadata field {field.name!r} has no default to fill in")
        columns = [_v.c.document_id, _v.c.field_id, _v.c.field_type]
        documents = t.documents
        selected: list[Any] = [
            documents.c.id,
            sa.literal(field.id, sa.Uuid),
            sa.literal(field.field_type.value),
        ]
        if not isinstance(field.default, frozenset):
            column = value_column(field.field_type)
            columns.append(column)
            selected.append(sa.literal(field.default, column.type))
        # The rows come from a CTE at the top of the statement: on Citus, INSERT ... SELECT
        # from a tenant table whose defaults call now() fails (13.2 plans a filter on a
        # distribution column that a schema's tables do not have); a top-level CTE is
        # planned another way, and PostgreSQL inlines it.
        rows = sa.select(*selected).cte("backfilled")
        self._execute(
            sa.insert(_v).from_select(columns, sa.select(*rows.c)).add_cte(rows, nest_here=True)
        )
        if isinstance(field.default, frozenset):
            self._backfill_choices(field.id, field.default)

    def _backfill_choices(self, field_id: uuid.UUID, option_ids: frozenset[uuid.UUID]) -> None:
        chosen = sa.values(sa.column("option_id", sa.Uuid), name="chosen").data(
            [(option_id,) for option_id in option_ids]
        )
        values = sa.select(_v.c.document_id, _v.c.field_id, chosen.c.option_id).where(
            _v.c.field_id == field_id
        )
        self._execute(
            sa.insert(_c).from_select(
                [_c.c.document_id, _c.c.field_id, _c.c.option_id],
                values.select_from(_v.join(chosen, sa.true())),
            )
        )

    def _choices_of(self, document_id: uuid.UUID) -> dict[uuid.UUID, MetadataValue]:
        rows = self._execute(
            sa.select(_c.c.field_id, _c.c.option_id).where(_c.c.document_id == document_id)
        )
        chosen: dict[uuid.UUID, set[uuid.UUID]] = {}
        for row in rows:
            chosen.setdefault(row.field_id, set()).add(row.option_id)
        return {field_id: frozenset(ids) for field_id, ids in chosen.items()}

    def _upsert(
        self, document_id: uuid.UUID, values: list[tuple[MetadataField, MetadataValue]]
    ) -> None:
        rows = []
        for field, value in values:
            kind = field.field_type.value
            row: dict[str, Any] = dict.fromkeys(t.VALUE_COLUMNS.values())
            row.update(document_id=document_id, field_id=field.id, field_type=kind)
            if field.field_type is not FieldType.MULTI_SELECT:
                row[t.VALUE_COLUMNS[kind]] = value
            rows.append(row)
        self._execute(_UPSERT_VALUE, rows)
        for field, value in values:
            if isinstance(value, frozenset):
                self._replace_choices(document_id, field.id, value)

    def _replace_choices(
        self, document_id: uuid.UUID, field_id: uuid.UUID, option_ids: Iterable[uuid.UUID]
    ) -> None:
        self._execute(
            sa.delete(_c).where(_c.c.document_id == document_id, _c.c.field_id == field_id)
        )
        rows = [
            {"document_id": document_id, "field_id": field_id, "option_id": option_id}
            for option_id in option_ids
        ]
        if rows:
            # One statement, not one per row: the audit trail records a value's new choices as
            # one change of its set (its statement triggers: dms/schema/sql/audit.sql).
            self._execute(sa.insert(_c).values(rows))

    def _insert_field(self, name: str, kind: FieldType, *, required: bool) -> uuid.UUID:
        author = self._actor()
        with translated(self._conn, f"metadata field {name!r}", user=author):
            field_id: uuid.UUID = self._execute(
                sa.insert(_f)
                .values(name=name, field_type=kind.value, required=required, created_by=author)
                .returning(_f.c.id)
            ).scalar_one()
        return field_id

    def _insert_options(self, field_id: uuid.UUID, kind: FieldType, options: list[str]) -> None:
        if not options:
            return
        rows = [
            {"field_id": field_id, "field_type": kind.value, "value": value, "position": position}
            for position, value in enumerate(options)
        ]
        with translated(self._conn, f"options {options!r}"):
            self._execute(sa.insert(_o), rows)

    def _store_default(self, field: MetadataField, default: object) -> MetadataField:
        if default is None:
            return field
        checked = check_value(field, default)
        self._execute(
            sa.update(_f).where(_f.c.id == field.id).values(default_value=to_json(checked))
        )
        return self.get_field(field.id)

    def _load_fields(self, condition: sa.ColumnElement[bool]) -> list[MetadataField]:
        rows = list(
            self._execute(sa.select(_f).where(condition).order_by(sa.func.lower(_f.c.name)))
        )
        options = self._options_of([row.id for row in rows])
        return [_field(row, options.get(row.id, ())) for row in rows]

    def _options_of(self, field_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[FieldOption, ...]]:
        if not field_ids:
            return {}
        rows = self._execute(
            sa.select(*OPTION_COLUMNS)
            .where(_o.c.field_id.in_(field_ids))
            .order_by(_o.c.position, _o.c.id)
        )
        grouped: dict[uuid.UUID, list[FieldOption]] = {}
        for row in rows:
            grouped.setdefault(row.field_id, []).append(option(row))
        return {field_id: tuple(options) for field_id, options in grouped.items()}


def _field(row: Any, options: tuple[FieldOption, ...]) -> MetadataField:
    kind = FieldType(row.field_type)
    return MetadataField(
        id=row.id,
        name=row.name,
        field_type=kind,
        required=row.required,
        default=from_json(kind, row.default_value),
        options=options,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _found_option(row: Any, option_id: uuid.UUID) -> FieldOption:
    if row is None:
        raise NotFound(f"option {option_id} does not exist")
    return option(row)
