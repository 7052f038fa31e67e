"""Use cases of metadata: define a field (a required one reaches every document), set values."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from dms.domain import FieldType, MetadataField, MetadataValue
from dms.domain.validation import check_field_definition
from dms.errors import ValidationError
from dms.uow import UnitOfWork


def define_field(
    uow: UnitOfWork,
    *,
    name: str,
    field_type: FieldType | str,
    required: bool = False,
    default: object = None,
    options: Iterable[str] = (),
) -> MetadataField:
    """Define a metadata field; ``options`` for select types, in display order.

    A ``default`` fills the field of new documents that get no value. A required field
    added to a tenant that has documents needs a default, which every document then gets.
    Nothing is written if any check fails.

    Defining a required field holds off writes to the tenant's documents until the unit of
    work ends (see :meth:`.DocumentRepository.hold_off_writes`): a document created
    meanwhile either commits first and is backfilled, or waits and then sees the field.
    """
    kind, choices = check_field_definition(
        name=name, field_type=field_type, required=required, options=options
    )
    if required:
        # Before any read of documents, so that the backfill's snapshot is taken after every
        # concurrent document insert has committed (READ COMMITTED: a snapshot per statement).
        uow.documents.hold_off_writes()
    backfilled = required and uow.documents.any_exist()
    if backfilled and default is None:
        raise ValidationError(
            f"required metadata field {name!r} needs a default: the tenant already has documents"
        )
    with uow.savepoint():
        field = uow.metadata.add_field(
            name=name, field_type=kind, required=required, default=default, options=choices
        )
        if backfilled:
            uow.metadata.backfill(field)
    return field


def set_value(
    uow: UnitOfWork, document_id: uuid.UUID, field_id: uuid.UUID, value: object
) -> MetadataValue:
    """Set the document's value of a field, checked against the field's type and options.

    Returns the stored value (select values as option ids). Bumps the document's version,
    so that an update based on an earlier read raises :class:`~dms.errors.ConcurrentUpdate`;
    setting a value takes no expected version (see :meth:`.DocumentRepository.record_change`).
    """
    stored = uow.metadata.put_value(document_id, field_id, value)
    uow.documents.record_change([document_id])
    return stored


def set_values(
    uow: UnitOfWork, document_id: uuid.UUID, values: Mapping[uuid.UUID, object]
) -> dict[uuid.UUID, MetadataValue]:
    """Set several values of one document, all or none (see :func:`set_value`); one bump."""
    stored = uow.metadata.put_values(document_id, values)
    if stored:
        uow.documents.record_change([document_id])
    return stored


def clear_value(uow: UnitOfWork, document_id: uuid.UUID, field_id: uuid.UUID) -> None:
    """Remove the document's value of a field; a required field cannot be cleared.

    Bumps the document's version if it had a value (see :func:`set_value`).
    """
    if uow.metadata.delete_value(document_id, field_id):
        uow.documents.record_change([document_id])
