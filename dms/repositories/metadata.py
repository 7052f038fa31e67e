"""Every SQL statement on metadata fields, their options and documents' values.

A value is one ``document_metadata`` row per (document, field) with the column of the field's
type filled; a multi-select value is that row plus one ``document_metadata_choices`` row per
chosen option. Options keep their ids when renamed or retired, so values never change under
an edit of the field.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from dms.domain import FieldOption, FieldType, MetadataField, MetadataValue
from dms.domain.validation import check_name, check_value, from_json, to_json
from dms.errors import NotFound, ValidationError
from dms.schema import tenant as t

from . import _rows
from . import documents as _documents  # a module: documents imports us via _search
from ._base import Repository
from .errors import translated

FIELD_NAME_MAX_CHARS = 100
OPTION_MAX_CHARS = 200

_f = t.metadata_fields
_o = t.metadata_field_options
_v = t.document_metadata
_c = t.document_metadata_choices


def value_column(field_type: FieldType) -> sa.Column[Any]:
    """Return the column of ``document_metadata`` that holds values of ``field_type``."""
    return _v.c[t.VALUE_COLUMNS[field_type.value]]


def field_type_of(value: object) -> FieldType:
    """Return ``value`` as a :class:`FieldType`, or raise :class:`ValidationError`."""
    try:
        return FieldType(value)
    except ValueError:
        known = ", ".join(member.value for member in FieldType)
        raise ValidationError(f"unknown field type {value!r}; known: {known}") from None


class MetadataRepository(Repository):
    """Metadata fields, options and values of one tenant."""

    def define_field(
        self,
        *,
        name: str,
        field_type: FieldType | str,
        required: bool = False,
        default: object = None,
        options: Sequence[str] = (),
    ) -> MetadataField:
        """Define a field; ``options`` for select types, in display order.

        A ``default`` fills the field of new documents that get no value. A required field
        added to a tenant that has documents needs a default, which every document then gets.
        Nothing is written if any check fails.

        Defining a required field holds off writes to the tenant's documents until the unit of
        work ends (see :meth:`.DocumentRepository.hold_off_writes`): a document created
        meanwhile either commits first and is backfilled, or waits and then sees the field.
        """
        kind = field_type_of(field_type)
        check_name("metadata field", name, max_chars=FIELD_NAME_MAX_CHARS)
        _check_options_allowed(kind, name, options)
        if required:
            # Before any read of documents, so that the backfill's snapshot is taken after
            # every concurrent document insert has committed (READ COMMITTED: a snapshot per
            # statement).
            self._documents().hold_off_writes()
        with self._conn.begin_nested():
            field = self._insert_field(name, kind, required=required)
            self._insert_options(field.id, kind, options)
            field = self._store_default(self.get_field(field.id), default)
            if required:
                self._backfill(field)
        return field

    def get_field(self, field_id: uuid.UUID) -> MetadataField:
        """Return the field with its options, or raise :class:`NotFound`."""
        fields = self._load_fields(_f.c.id == field_id)
        if not fields:
            raise NotFound(f"metadata field {field_id} does not exist")
        return fields[0]

    def get_field_by_name(self, name: str) -> MetadataField:
        """Return the field called ``name`` (ignoring case), or raise :class:`NotFound`."""
        fields = self._load_fields(sa.func.lower(_f.c.name) == sa.func.lower(name))
        if not fields:
            raise NotFound(f"metadata field {name!r} does not exist")
        return fields[0]

    def list_fields(self) -> list[MetadataField]:
        """Return every field, ordered by name."""
        return self._load_fields(sa.true())

    def rename_field(self, field_id: uuid.UUID, *, name: str) -> MetadataField:
        """Rename a field; values stay."""
        check_name("metadata field", name, max_chars=FIELD_NAME_MAX_CHARS)
        with translated(self._conn, f"metadata field {name!r}"):
            found = self._conn.execute(
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
        _check_options_allowed(field.field_type, field.name, [value])
        position = max((option.position for option in field.options), default=-1) + 1
        with translated(self._conn, f"option {value!r} of field {field.name!r}"):
            row = self._conn.execute(
                sa.insert(_o)
                .values(
                    field_id=field_id,
                    field_type=field.field_type.value,
                    value=value,
                    position=position,
                )
                .returning(*_rows.OPTION_COLUMNS)
            ).one()
        return _rows.option(row)

    def rename_option(self, option_id: uuid.UUID, *, value: str) -> FieldOption:
        """Rename an option; documents that chose it keep it (values hold the option id)."""
        check_name("option", value, max_chars=OPTION_MAX_CHARS)
        with translated(self._conn, f"option {value!r}"):
            row = self._conn.execute(
                sa.update(_o)
                .where(_o.c.id == option_id)
                .values(value=value)
                .returning(*_rows.OPTION_COLUMNS)
            ).one_or_none()
        return _found_option(row, option_id)

    def retire_option(self, option_id: uuid.UUID) -> FieldOption:
        """Stop offering an option; documents that chose it keep it."""
        row = self._conn.execute(
            sa.update(_o)
            .where(_o.c.id == option_id)
            .values(retired_at=sa.func.coalesce(_o.c.retired_at, sa.func.now()))
            .returning(*_rows.OPTION_COLUMNS)
        ).one_or_none()
        return _found_option(row, option_id)

    def set_value(
        self, document_id: uuid.UUID, field_id: uuid.UUID, value: object
    ) -> MetadataValue:
        """Set the document's value of a field, checked against the field's type and options.

        Returns the stored value (select values as option ids). Bumps the document's version,
        so that an update based on an earlier read raises
        :class:`~dms.errors.ConcurrentUpdate`; setting a value takes no expected version (see
        :meth:`.DocumentRepository.record_change`).
        """
        checked = self._set(document_id, field_id, value)
        self._record_change([document_id])
        return checked

    def set_values(self, document_id: uuid.UUID, values: dict[uuid.UUID, object]) -> None:
        """Set several values of one document (see :meth:`set_value`); one version bump."""
        for field_id, value in values.items():
            self._set(document_id, field_id, value)
        if values:
            self._record_change([document_id])

    def clear_value(self, document_id: uuid.UUID, field_id: uuid.UUID) -> None:
        """Remove the document's value of a field; a required field cannot be cleared.

        Bumps the document's version if it had a value (see :meth:`set_value`).
        """
        field = self.get_field(field_id)
        if field.required:
            raise ValidationError(
                f"metadata field {field.name!r} is required: it cannot be cleared"
            )
        cleared = self._conn.execute(
            sa.delete(_v)
            .where(_v.c.document_id == document_id, _v.c.field_id == field_id)
            .returning(_v.c.document_id)
        ).scalars()
        self._record_change(list(cleared))

    def values_of(self, document_id: uuid.UUID) -> dict[uuid.UUID, MetadataValue]:
        """Return the document's values, keyed by field id."""
        rows = self._conn.execute(sa.select(_v).where(_v.c.document_id == document_id))
        values: dict[uuid.UUID, MetadataValue] = {}
        for row in rows:
            kind = FieldType(row.field_type)
            if kind is not FieldType.MULTI_SELECT:
                values[row.field_id] = row._mapping[t.VALUE_COLUMNS[kind.value]]
        values.update(self._choices_of(document_id))
        return values

    def missing_required(self, document_id: uuid.UUID) -> list[MetadataField]:
        """Return the required fields that the document has no value for."""
        has_value = sa.exists().where(_v.c.document_id == document_id, _v.c.field_id == _f.c.id)
        return self._load_fields(sa.and_(_f.c.required, ~has_value))

    def _set(self, document_id: uuid.UUID, field_id: uuid.UUID, value: object) -> MetadataValue:
        field = self.get_field(field_id)
        checked = check_value(field, value)
        with translated(self._conn, f"value {value!r} of field {field.name!r} on {document_id}"):
            self._upsert(document_id, field, checked)
        return checked

    def _record_change(self, document_ids: list[uuid.UUID]) -> None:
        self._documents().record_change(document_ids)

    def _documents(self) -> _documents.DocumentRepository:
        return _documents.DocumentRepository(self._conn, user_id=self._user_id)

    def _choices_of(self, document_id: uuid.UUID) -> dict[uuid.UUID, MetadataValue]:
        rows = self._conn.execute(
            sa.select(_c.c.field_id, _c.c.option_id).where(_c.c.document_id == document_id)
        )
        chosen: dict[uuid.UUID, set[uuid.UUID]] = {}
        for row in rows:
            chosen.setdefault(row.field_id, set()).add(row.option_id)
        return {field_id: frozenset(ids) for field_id, ids in chosen.items()}

    def _upsert(self, document_id: uuid.UUID, field: MetadataField, value: MetadataValue) -> None:
        values: dict[str, Any] = {
            "document_id": document_id,
            "field_id": field.id,
            "field_type": field.field_type.value,
        }
        if field.field_type is not FieldType.MULTI_SELECT:
            values[t.VALUE_COLUMNS[field.field_type.value]] = value
        statement = insert(_v).values(**values)
        self._conn.execute(
            statement.on_conflict_do_update(
                index_elements=[_v.c.document_id, _v.c.field_id],
                set_={**{k: statement.excluded[k] for k in values}, "updated_at": sa.func.now()},
            )
        )
        if isinstance(value, frozenset):
            self._replace_choices(document_id, field.id, value)

    def _replace_choices(
        self, document_id: uuid.UUID, field_id: uuid.UUID, option_ids: Iterable[uuid.UUID]
    ) -> None:
        self._conn.execute(
            sa.delete(_c).where(_c.c.document_id == document_id, _c.c.field_id == field_id)
        )
        rows = [
            {"document_id": document_id, "field_id": field_id, "option_id": option_id}
            for option_id in option_ids
        ]
        self._conn.execute(sa.insert(_c), rows)

    def _insert_field(self, name: str, kind: FieldType, *, required: bool) -> MetadataField:
        with translated(self._conn, f"metadata field {name!r}"):
            field_id = self._conn.execute(
                sa.insert(_f)
                .values(
                    name=name, field_type=kind.value, required=required, created_by=self._actor()
                )
                .returning(_f.c.id)
            ).scalar_one()
        return self.get_field(field_id)

    def _insert_options(self, field_id: uuid.UUID, kind: FieldType, options: Sequence[str]) -> None:
        if not options:
            return
        rows = [
            {"field_id": field_id, "field_type": kind.value, "value": value, "position": position}
            for position, value in enumerate(options)
        ]
        with translated(self._conn, f"options {list(options)!r}"):
            self._conn.execute(sa.insert(_o), rows)

    def _store_default(self, field: MetadataField, default: object) -> MetadataField:
        if default is None:
            return field
        checked = check_value(field, default)
        self._conn.execute(
            sa.update(_f).where(_f.c.id == field.id).values(default_value=to_json(checked))
        )
        return self.get_field(field.id)

    def _backfill(self, field: MetadataField) -> None:
        # A required field holds for every document at once: existing ones get the default in
        # one INSERT ... SELECT instead of a round trip per document.
        any_document = self._conn.execute(
            sa.select(sa.exists().where(t.documents.c.id.is_not(None)))
        )
        if not any_document.scalar():
            return
        if field.default is None:
            raise ValidationError(
                f"required metadata field {field.name!r} needs a default: "
                "the tenant already has documents"
            )
        self._insert_default_for_all(field, field.default)

    def _insert_default_for_all(self, field: MetadataField, default: MetadataValue) -> None:
        d = t.documents
        columns = [_v.c.document_id, _v.c.field_id, _v.c.field_type]
        selected: list[Any] = [
            d.c.id,
            sa.literal(field.id, sa.Uuid),
            sa.literal(field.field_type.value),
        ]
        if not isinstance(default, frozenset):
            column = value_column(field.field_type)
            columns.append(column)
            selected.append(sa.literal(default, column.type))
        self._conn.execute(sa.insert(_v).from_select(columns, sa.select(*selected)))
        if isinstance(default, frozenset):
            self._insert_default_choices(field.id, default)

    def _insert_default_choices(
        self, field_id: uuid.UUID, option_ids: frozenset[uuid.UUID]
    ) -> None:
        d = t.documents
        chosen = sa.values(sa.column("option_id", sa.Uuid), name="chosen").data(
            [(option_id,) for option_id in option_ids]
        )
        self._conn.execute(
            sa.insert(_c).from_select(
                [_c.c.document_id, _c.c.field_id, _c.c.option_id],
                sa.select(d.c.id, sa.literal(field_id, sa.Uuid), chosen.c.option_id).select_from(
                    d.join(chosen, sa.true())
                ),
            )
        )

    def _load_fields(self, condition: sa.ColumnElement[bool]) -> list[MetadataField]:
        rows = list(
            self._conn.execute(sa.select(_f).where(condition).order_by(sa.func.lower(_f.c.name)))
        )
        options = self._options_of([row.id for row in rows])
        return [_field(row, options.get(row.id, ())) for row in rows]

    def _options_of(self, field_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[FieldOption, ...]]:
        if not field_ids:
            return {}
        rows = self._conn.execute(
            sa.select(*_rows.OPTION_COLUMNS)
            .where(_o.c.field_id.in_(field_ids))
            .order_by(_o.c.position, _o.c.id)
        )
        grouped: dict[uuid.UUID, list[FieldOption]] = {}
        for row in rows:
            grouped.setdefault(row.field_id, []).append(_rows.option(row))
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


def _check_options_allowed(kind: FieldType, name: str, options: Sequence[str]) -> None:
    if options and not kind.has_options:
        raise ValidationError(f"metadata field {name!r} ({kind.value}) cannot have options")
    for value in options:
        check_name("option", value, max_chars=OPTION_MAX_CHARS)


def _found_option(row: Any, option_id: uuid.UUID) -> FieldOption:
    if row is None:
        raise NotFound(f"option {option_id} does not exist")
    return _rows.option(row)
