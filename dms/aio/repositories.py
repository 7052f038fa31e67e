# AsyncRepositories' properties have no body: type checkers read them, nothing runs.
# mypy: disable-error-code="empty-body"
"""The awaitable twins of the repositories, typed: generated, do not edit.

Written by ``python -m dms.aio._generate`` from the repositories' source (formatted by
ruff); ``tests/unit/test_async_api.py`` fails when a twin's methods differ from its
repository's. Type checkers read :class:`AsyncRepositories` as the repositories of a
:class:`~dms.aio.AsyncUnitOfWork`; at run time each is an
:class:`~dms.aio.uow.AsyncRepositoryProxy` that awaits the synchronous method. A method that
returns an iterator (read in pages as it is consumed) returns an async iterator here, each
step awaited: ``async for event in await uow.audit.exported(...)``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from dms.domain import (
    Blob,
    Cursor,
    Document,
    DocumentQuery,
    FieldOption,
    FieldType,
    Folder,
    ImportedEntry,
    MetadataField,
    MetadataValue,
    NewDocument,
    NewFolder,
    NewRevision,
    Page,
    Snippet,
    Tag,
)
from dms.domain.access import AccessEntry, Group, Rights
from dms.domain.audit import AuditCursor, AuditPage, AuditSettings
from dms.domain.model import Revision
from dms.domain.text_query import TextQuery
from dms.repositories.audit import SEAL_BATCH, EventKey, Links, Sealed
from dms.repositories.imports import ImportedDocument, NewImportedDocument, NewImportedEntry


class AsyncAccessRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.access.AccessRepository`."""

    async def add_group(self, name: str) -> Group:
        """Create a group; needs ``MANAGE`` at the root. Raises AlreadyExists for a taken name."""

    async def groups(self) -> list[Group]:
        """Every group of the tenant, by name."""

    async def remove_group(self, group_id: uuid.UUID) -> None:
        """Delete a group with its memberships and entries; needs ``MANAGE`` at the root."""

    async def add_member(self, group_id: uuid.UUID, user_id: uuid.UUID) -> None:
        """Make ``user_id`` a member of ``group_id`` (again: no change)."""

    async def remove_member(self, group_id: uuid.UUID, user_id: uuid.UUID) -> bool:
        """End a membership; return whether there was one."""

    async def members(self, group_id: uuid.UUID) -> list[uuid.UUID]:
        """The users of a group (none for a group that does not exist)."""

    async def grant(
        self,
        rights: Rights | list[str],
        *,
        folder_id: uuid.UUID | None = None,
        document_id: uuid.UUID | None = None,
        user_id: uuid.UUID | None = None,
        group_id: uuid.UUID | None = None,
    ) -> AccessEntry:
        """Grant ``rights`` to a principal on an object, replacing what it held there before.

        The object is a folder, a document or the root (neither); the principal a user, a
        group or everyone (neither). Needs ``MANAGE`` on the object. Rights are completed
        (:func:`~dms.domain.access.check_rights`).
        """

    async def revoke(
        self,
        *,
        folder_id: uuid.UUID | None = None,
        document_id: uuid.UUID | None = None,
        user_id: uuid.UUID | None = None,
        group_id: uuid.UUID | None = None,
    ) -> bool:
        """Remove what a principal was granted on an object; return whether it had an entry."""

    async def entries(
        self, *, folder_id: uuid.UUID | None = None, document_id: uuid.UUID | None = None
    ) -> list[AccessEntry]:
        """The entries of one object (the root for neither), oldest first."""

    async def set_inherits(self, folder_id: uuid.UUID, inherits: bool) -> None:
        """Let a folder inherit what is granted above it, or not; needs ``MANAGE`` on it."""

    async def set_owner(
        self,
        owner_id: uuid.UUID | None,
        *,
        folder_id: uuid.UUID | None = None,
        document_id: uuid.UUID | None = None,
    ) -> None:
        """Give a folder or a document to ``owner_id`` (``None``: no owner); needs ``MANAGE``."""

    async def owner(
        self, *, folder_id: uuid.UUID | None = None, document_id: uuid.UUID | None = None
    ) -> uuid.UUID | None:
        """The owner of a folder or a document (``None``: none)."""

    async def rights(
        self, *, folder_id: uuid.UUID | None = None, document_id: uuid.UUID | None = None
    ) -> Rights:
        """What the acting principal may do on a folder, a document or the root (neither)."""


class AsyncAuditRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.audit.AuditRepository`."""

    async def history(
        self, document_id: uuid.UUID, *, limit: int = 50, after: AuditCursor | None = None
    ) -> AuditPage:
        """One page of what happened to a document (its revisions, tags and values too).

        Newest first; pass the page's ``next_cursor`` as ``after`` for the next page.
        """

    async def events(
        self,
        *,
        actor_id: uuid.UUID | None = None,
        system: str | None = None,
        action: str | None = None,
        object_type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        after: AuditCursor | None = None,
    ) -> AuditPage:
        """One page of the tenant's events, newest first, filtered by who, what and when.

        ``since`` is inclusive and ``until`` exclusive; ``system`` names a system principal.
        """

    async def settings(self) -> AuditSettings:
        """The tenant's audit settings (the defaults until someone sets them)."""

    async def set_record_reads(self, record_reads: bool) -> None:
        """Record (or stop recording) reading a revision's content, from this transaction on."""

    async def record_read(self, revision: Revision) -> None:
        """Record that the unit's actor read ``revision``'s content."""

    async def lock_head(self) -> tuple[int, bytes]:
        """Lock the chain's head for this transaction and return its (position, hash).

        Sealers wait on each other here; writers never take this lock.
        """

    async def head(self) -> tuple[int, bytes]:
        """The chain's head (position, hash), unlocked."""

    async def seal(self, limit: int = SEAL_BATCH, *, after: EventKey | None = None) -> Sealed:
        """Seal up to ``limit`` unsealed events after the head (locked first), oldest first.

        ``after``: only events after this key (the ``last`` of the previous batch of the same
        run). Sealed rows stay in the unsealed index until a vacuum; a run that started every
        batch from the beginning would walk past all it had sealed, batch after batch.
        """

    async def oldest_unsealed(self) -> uuid.UUID | None:
        """The id of the oldest event not sealed yet (the next a sealer takes); ``None``: none.

        One probe of the partial index ``ix_audit_events_unsealed``: what the sealing sweep
        asks of every tenant (:mod:`dms.sealing`), so it must cost next to nothing when the
        answer is none.
        """

    async def unsealed(self) -> int:
        """How many events are not sealed yet."""

    async def checkpoint(self) -> tuple[int, bytes] | None:
        """The newest checkpoint (position, hash), where the chain now starts; else ``None``."""

    async def check_links(self, *, after_seq: int, previous: bytes) -> Links:
        """Recompute every link of the chain after ``after_seq``, whose hash is ``previous``.

        Set-based, in one pass on the server: each event's hash is recomputed from its own
        content and its predecessor's stored hash (:data:`_LINK`, the same rule as
        :func:`chain_hash`, written a second time on purpose: a verification that shared the
        sealer's code would not notice the sealer's mistakes). Only what is wrong travels.
        """

    async def event_at(self, seq: int) -> uuid.UUID:
        """The id of the event at position ``seq``."""

    async def sealed_through(self, seq: int) -> int:
        """How many sealed events sit at or below position ``seq`` (a checkpoint's: none)."""

    async def hash_at(self, seq: int) -> bytes | None:
        """The hash of the event at position ``seq``; ``None`` if there is none."""

    async def position_before(self, seq: int, *, after_seq: int) -> int:
        """The position of the last event before ``seq`` (``after_seq`` if there is none)."""

    async def exported(
        self, *, since: datetime | None, until: datetime | None, batch: int = 10000
    ) -> AsyncIterator[dict[str, Any]]:
        """Every event from ``since`` (inclusive) to ``until`` (exclusive), oldest first.

        Each as a JSON-ready mapping (ids as text, the hash in hex), read in pages.
        """

    async def prunable(self, before: datetime) -> tuple[int, int, bytes] | None:
        """What pruning before ``before`` would remove: (events, last position, its hash).

        The sealed events up to the first one at or after ``before`` (positions follow sealing,
        and a long transaction's events can be sealed after younger ones: the cut stops at the
        first young one, so nothing at or after ``before`` is removed); ``None``: nothing.
        """

    async def prune_through(self, seq: int, hash_: bytes, count: int) -> int:
        """Anchor the chain at ``seq`` (a checkpoint), then delete the events up to it."""


class AsyncBlobRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.blobs.BlobRepository`."""

    async def claim(self, blobs: Iterable[Blob]) -> None:
        """Register each blob (or find it registered) and lock its row until the transaction ends.

        While the lock is held no release can delete the blob; claim before writing its file
        and before adding the revisions that reference it.
        """

    async def lock(self, storage_keys: Iterable[str]) -> list[str]:
        """Lock the rows of the registered ``storage_keys`` (waiting for claims); return them."""

    async def delete_unreferenced(self, storage_keys: Sequence[str]) -> list[str]:
        """Delete the rows of ``storage_keys`` that no revision references; return their keys.

        Run it after :meth:`lock` of the same keys, as a statement of its own: its snapshot
        then includes every revision added by a transaction that claimed one of them.
        """

    async def unreferenced(self, *, limit: int) -> list[str]:
        """Keys of up to ``limit`` registered blobs that no revision references, in key order."""

    async def registered_among(self, storage_keys: Iterable[str]) -> set[str]:
        """Which of ``storage_keys`` are registered."""

    async def get(self, storage_key: str) -> Blob | None:
        """The registered blob of ``storage_key``, or ``None``."""


class AsyncDocumentRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.documents.DocumentRepository`."""

    async def add(self, *, title: str, folder_id: uuid.UUID | None = None) -> Document:
        """Create a document in ``folder_id`` (top level if ``None``); no revision yet."""

    async def get(self, document_id: uuid.UUID, *, include_deleted: bool = False) -> Document:
        """Return the document, or raise :class:`NotFound` (also for a deleted one by default)."""

    async def rename(self, document_id: uuid.UUID, *, title: str, version: int) -> Document:
        """Give the document a new title; ``version`` is the one the caller read."""

    async def move(
        self, document_id: uuid.UUID, *, folder_id: uuid.UUID | None, version: int
    ) -> Document:
        """Move the document into ``folder_id`` (top level if ``None``)."""

    async def soft_delete(self, document_id: uuid.UUID, *, version: int) -> Document:
        """Put the document in the trash; :meth:`restore` takes it out."""

    async def restore(self, document_id: uuid.UUID, *, version: int) -> Document:
        """Take the document out of the trash.

        Raises :class:`AlreadyExists` if a live document in its folder took its title meanwhile,
        :class:`InvariantViolation` if its folder is in the trash.
        """

    async def purge(self, document_id: uuid.UUID) -> None:
        """Delete the document for good, with its revisions, tag links and metadata values."""

    async def trash(
        self,
        *,
        limit: int = 50,
        after: Document | None = None,
        deleted_before: datetime | None = None,
    ) -> list[Document]:
        """The documents in the trash, most recently deleted first, at most ``limit``.

        ``after``: the last document of the previous page (its deletion time and id are the
        keyset). ``deleted_before``: only documents deleted before that time.
        """

    async def set_current_revision(
        self, document_id: uuid.UUID, revision_id: uuid.UUID
    ) -> Document:
        """Point the document at ``revision_id`` (one of its own) and bump its version.

        Takes no expected version: uploads never conflict with each other, they queue.
        """

    async def soft_delete_in_folders(self, folder_ids: Sequence[uuid.UUID], at: datetime) -> int:
        """Put the live documents of ``folder_ids`` in the trash at ``at``; return how many."""

    async def restore_in_folders(
        self, folder_ids: Sequence[uuid.UUID], deleted_at: datetime
    ) -> int:
        """Restore the documents of ``folder_ids`` trashed at ``deleted_at``; return how many."""

    async def record_change(self, document_ids: Iterable[uuid.UUID]) -> None:
        """Bump the version of documents whose tags or metadata values just changed.

        Tags and values are part of what a reader of a document saw: after a change to them, an
        update carrying the version read before fails with :class:`ConcurrentUpdate`. The
        changes themselves take no expected version (bulk tagging spans many documents, and
        setting a value is idempotent), so they never fail on a stale read; they only make
        other writers' reads stale. Ids that are not documents of the tenant are ignored.
        The use cases of :mod:`dms.services` that change tags and values call this.
        """

    async def hold_off_writes(self) -> None:
        """Make every other transaction's insert, update or delete of documents wait for ours.

        For changes that must see every document, including one being created concurrently:
        a required metadata field's backfill. Reads go on. SHARE ROW EXCLUSIVE rather than
        SHARE because it conflicts with itself: two holders can never both wait to write.
        """

    async def any_exist(self) -> bool:
        """Return whether the tenant has a document at all (deleted ones included)."""

    async def with_all_tags(self, tag_ids: Iterable[uuid.UUID]) -> list[Document]:
        """Return the live documents that have every one of ``tag_ids``, by title."""

    async def with_any_tag(self, tag_ids: Iterable[uuid.UUID]) -> list[Document]:
        """Return the live documents that have at least one of ``tag_ids``, by title."""

    async def search(
        self,
        query: DocumentQuery,
        *,
        fields: Mapping[uuid.UUID, MetadataField] | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> Page[Document]:
        """Return one page of live documents matching ``query``, ordered by title then id.

        With ``query.text``, ordered by relevance (highest first) then id instead, with the
        number of matches (``estimated_total``: exact below :data:`RANK_CANDIDATES` matching
        index rows, else a lower bound, ``total_exact``). ``fields``
        are the fields of ``query``'s metadata filters, by id:
        :func:`dms.services.search_documents` reads them and calls this. Pass the page's
        ``next_cursor`` as ``after`` for the next page; the cost of a page does not grow with
        its position (keyset, not OFFSET).
        """

    async def search_statement(
        self,
        query: DocumentQuery,
        *,
        fields: Mapping[uuid.UUID, MetadataField] | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> sa.Select[Any]:
        """Return the statement behind :meth:`search` (one row more than ``limit``).

        For ``EXPLAIN`` and benchmarks; applications call :func:`dms.services.search_documents`.
        """

    async def add_many(self, documents: Sequence[NewDocument]) -> list[uuid.UUID | None]:
        """Create many documents in one statement; return their ids, one per input, in order.

        Made for imports: only ids come back, no rows to decode. A result is ``None`` where a
        live document of the folder already has the title (ignoring case), or an earlier one of
        the same call took it: nothing is created for it and the others go on. Every folder must
        be live, else :class:`NotFound` and nothing is created. No revision, tags or metadata
        values: :func:`dms.services.create_document` does those for one document. No
        savepoint: if the database refuses the statement, roll the unit of work back.
        """

    async def set_current_revisions(self, current: Mapping[uuid.UUID, uuid.UUID]) -> None:
        """Point each document (key) at its revision (value), in one statement.

        As :meth:`set_current_revision` for many documents: each revision must be one of its
        document's own, and each document's version goes up by one.
        """

    async def current_revisions(self) -> sa.Select[tuple[uuid.UUID]]:
        """The ids of every document's current revision (trash included), as a statement."""

    async def titles_in(self, folder_id: uuid.UUID | None) -> list[str]:
        """The titles of the live documents directly in ``folder_id`` (top level if ``None``)."""


class AsyncFolderRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.folders.FolderRepository`."""

    async def add(self, *, name: str, parent_id: uuid.UUID | None = None) -> Folder:
        """Create a folder under ``parent_id`` (top level if ``None``)."""

    async def get(self, folder_id: uuid.UUID, *, include_deleted: bool = False) -> Folder:
        """Return the folder, or raise :class:`NotFound` (also for a deleted one by default)."""

    async def rename(self, folder_id: uuid.UUID, *, name: str) -> Folder:
        """Rename a folder; raises :class:`AlreadyExists` if a sibling has the name."""

    async def move(self, folder_id: uuid.UUID, *, parent_id: uuid.UUID | None) -> Folder:
        """Move a folder under ``parent_id`` (top level if ``None``).

        Raises :class:`InvariantViolation` if ``parent_id`` is the folder or one of its
        descendants, or if the tree would get too deep.
        """

    async def children(self, parent_id: uuid.UUID | None) -> list[Folder]:
        """Return the live folders directly under ``parent_id`` (top level if ``None``), by name."""

    async def path(self, folder_id: uuid.UUID) -> list[Folder]:
        """Return the breadcrumbs: the folders from the top level down to ``folder_id``."""

    async def subtree(self, folder_id: uuid.UUID) -> list[Folder]:
        """Return the folder and all its live descendants, parents before children."""

    async def soft_delete_subtree(self, folder_id: uuid.UUID) -> tuple[list[uuid.UUID], datetime]:
        """Put the folder and its live descendants in the trash, all with one timestamp.

        The wall-clock time of this statement, not of the transaction, tells this deletion apart
        from earlier ones in the same transaction. Returns their ids and the timestamp, which
        :meth:`restore_subtree` uses to restore exactly what this deletion removed.
        """

    async def restore_subtree(
        self, folder_id: uuid.UUID
    ) -> tuple[Folder, list[uuid.UUID], datetime]:
        """Restore a deleted folder and the descendants deleted with it.

        Returns the folder, the restored ids and the deletion timestamp. Raises
        :class:`AlreadyExists` if a live sibling took its name meanwhile, and
        :class:`InvariantViolation` if its parent is still deleted.
        """

    async def add_many(self, folders: Sequence[NewFolder]) -> list[uuid.UUID | None]:
        """Create many folders in one statement; return their ids, one per input, in order.

        Made for imports: only ids come back, no rows to decode. A result is ``None`` where a
        live sibling already has the name (ignoring case), or an earlier folder of the same call
        took it: nothing is created for it and the others go on. Parents must exist before the
        call (create a tree level by level), live, or :class:`NotFound` is raised and nothing is
        created; they are locked against their deletion by the insert itself
        (:func:`all_live_locked`), one round trip in all. No savepoint: if the database refuses
        the statement, roll the unit of work back.
        """


class AsyncImportRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.imports.ImportRepository`."""

    async def imported_into(self, parent_ids: Iterable[uuid.UUID | None]) -> list[ImportedEntry]:
        """Every entry imported into one of ``parent_ids`` (``None``: the top level)."""

    async def record(self, entries: Sequence[NewImportedEntry]) -> None:
        """Record many entries in one statement, as imported by the unit's user."""

    async def import_documents(
        self, entries: Sequence[NewImportedDocument]
    ) -> list[ImportedDocument | None]:
        """Create each entry's document, first revision and provenance, in three statements.

        One result per input, in order: ``None`` where a live document of the folder already
        has the title (ignoring case), or an earlier entry of the same call took it (nothing is
        written for it; the others go on). Each document is created pointing at its revision,
        at version 2, as :func:`dms.services.add_revision` leaves a new document. Every folder
        must be live, else :class:`~dms.errors.NotFound` and nothing is written. No savepoint:
        if the database refuses a statement, roll the unit of work back.

        The documents go in first, already pointing at their revisions, then the revisions,
        then the provenance: row-level security checks a new revision or provenance row against
        the documents its statement sees, and no part of a statement sees what another part of
        it inserted, so one statement writing them all was refused under an ordinary role.
        Between the first two, the documents' key to their current revision
        (:data:`~dms.repositories.documents.CURRENT_REVISION_KEY`) is deferred, and checked
        again once the revisions are in, before this returns: two ``SET CONSTRAINTS`` more,
        rather than an ``UPDATE`` of every new document, whose triggers would rebuild its
        search rows, check the edit right and record an audit event once more.

        On Citus, which passes neither ``SET CONSTRAINTS`` on to the tenant's node nor a
        data-modifying ``WITH`` whole, five statements, a step each: the documents, a check
        that they are live, the revisions, the documents pointed at them (an ``UPDATE``), and
        the provenance.
        """

    async def record_content(self, sha256_by_document: Mapping[uuid.UUID, str]) -> None:
        """Remember the content each document (key) was last imported with (value)."""


class AsyncMetadataRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.metadata.MetadataRepository`."""

    async def add_field(
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

    async def get_field(self, field_id: uuid.UUID) -> MetadataField:
        """Return the field with its options, or raise :class:`NotFound`."""

    async def get_fields(self, field_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, MetadataField]:
        """Return the fields with these ids, by id; :class:`NotFound` if one does not exist."""

    async def get_field_by_name(self, name: str) -> MetadataField:
        """Return the field called ``name`` (ignoring case), or raise :class:`NotFound`."""

    async def list_fields(self) -> list[MetadataField]:
        """Return every field, ordered by name."""

    async def rename_field(self, field_id: uuid.UUID, *, name: str) -> MetadataField:
        """Rename a field; values stay."""

    async def add_option(self, field_id: uuid.UUID, value: str) -> FieldOption:
        """Add an option at the end of a select or multi-select field's list."""

    async def rename_option(self, option_id: uuid.UUID, *, value: str) -> FieldOption:
        """Rename an option; documents that chose it keep it (values hold the option id)."""

    async def retire_option(self, option_id: uuid.UUID) -> FieldOption:
        """Stop offering an option; documents that chose it keep it."""

    async def put_value(
        self, document_id: uuid.UUID, field_id: uuid.UUID, value: object
    ) -> MetadataValue:
        """Store the document's value of a field, checked against the field's type and options.

        Returns the stored value (select values as option ids). Use
        :func:`dms.services.set_value`, which also bumps the document's version.
        """

    async def put_values(
        self, document_id: uuid.UUID, values: Mapping[uuid.UUID, object]
    ) -> dict[uuid.UUID, MetadataValue]:
        """Store several values of one document: all of them, or (if one is refused) none.

        Every value is checked before the first is written. Returns the stored values.
        """

    async def delete_value(self, document_id: uuid.UUID, field_id: uuid.UUID) -> bool:
        """Remove the document's value of a field; return whether it had one.

        A required field's value cannot be removed. Use :func:`dms.services.clear_value`,
        which also bumps the document's version.
        """

    async def values_of(self, document_id: uuid.UUID) -> dict[uuid.UUID, MetadataValue]:
        """Return the document's values, keyed by field id."""

    async def missing_required(self, document_id: uuid.UUID) -> list[MetadataField]:
        """Return the required fields that the document has no value for."""

    async def backfill(self, field: MetadataField) -> None:
        """Give every document of the tenant ``field``'s default; for a field just added.

        One ``INSERT ... SELECT`` instead of a round trip per document. It is the one statement
        of this module that names another aggregate's table: ``documents``, as the rows that
        each get a value (the parent of ``document_metadata``). Which documents, and when, is
        the rule of :func:`dms.services.define_field`.
        """


class AsyncRevisionRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.revisions.RevisionRepository`."""

    async def add(
        self,
        document_id: uuid.UUID,
        *,
        storage_key: str,
        sha256: str,
        size_bytes: int,
        mime_type: str,
    ) -> Revision:
        """Append the next revision of a live document and return it (numbered by the database).

        This does not move the document's current revision: see
        :func:`dms.services.add_revision`, which does both. ``mime_type`` is stored normalised
        (``text/SGML`` as ``text/sgml``).
        """

    async def get(self, revision_id: uuid.UUID) -> Revision:
        """Return the revision, or raise :class:`NotFound`."""

    async def current_among(self, revision_ids: Sequence[uuid.UUID]) -> list[Revision]:
        """The revisions of ``revision_ids`` that are their documents' current ones, by id.

        The others (superseded, purged, or never there) are left out.
        """

    async def history(self, document_id: uuid.UUID) -> list[Revision]:
        """Return the document's revisions, oldest (number 1) first."""

    async def current(self, document_id: uuid.UUID) -> Revision | None:
        """Return the document's current revision (``None`` before the first upload).

        Raises :class:`NotFound` for a document that does not exist or that the acting user
        may not view, as every read does (docs/access.md): ``None`` would say that it exists.
        """

    async def find_by_sha256(self, sha256: str) -> list[Revision]:
        """Return the revisions of live documents with this content hash (duplicate warning)."""

    async def some_storage_keys(
        self, *, limit: int, other_than: uuid.UUID | None = None
    ) -> list[str]:
        """The storage keys of up to ``limit`` revisions (not ``other_than``), any of them.

        No order: the first rows found, so that the read stops early on any table size.
        """

    async def add_many(self, revisions: Sequence[NewRevision]) -> list[uuid.UUID]:
        """Append the next revision of many live documents in one statement; return their ids.

        At most one revision per document in a call. Every input is checked first, and every
        document must be live: otherwise :class:`ValidationError` or :class:`NotFound`, and
        nothing is written. MIME types are stored normalised. As with :meth:`add`, the
        documents' current revisions do not move
        (:meth:`.DocumentRepository.set_current_revisions` does that). No savepoint: if the
        database refuses the statement, roll the unit of work back.
        """


class AsyncSearchRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.search.SearchRepository`."""

    async def config(self) -> str:
        """The tenant's text search configuration (``simple`` until one is chosen)."""

    async def set_config(self, name: str) -> None:
        """Make ``name`` the tenant's text search configuration; documents keep their rows.

        ``name`` is one of the server's built-in configurations (``simple``, ``english``,
        ``german``, ...), else :class:`ValidationError`. Documents are searched with the new
        one at once, but their rows stay as they were built until :meth:`rebuild`
        (``dms search config`` does both).
        """

    async def available_configs(self) -> list[str]:
        """The server's built-in text search configurations, by name."""

    async def store_text(
        self, revision_id: uuid.UUID, *, extractor: str, parts: Sequence[str]
    ) -> None:
        """Record the text extracted from ``revision_id`` (no parts: it has none).

        Replaces what an earlier extraction stored. If the revision is its document's current
        one, the document's index rows are rebuilt in this transaction (by trigger).
        """

    async def store_texts(self, texts: Mapping[uuid.UUID, tuple[str, Sequence[str]]]) -> None:
        """:meth:`store_text` for many revisions (revision id: extractor and parts) at once.

        Every value is checked before any is written; four statements whatever the number.
        """

    async def text_of(self, revision_id: uuid.UUID) -> list[str] | None:
        """The parts of ``revision_id``'s extracted text, or ``None`` if it was not extracted."""

    async def unextracted(
        self, revision_ids: sa.Select[tuple[uuid.UUID]], *, after: uuid.UUID | None, limit: int
    ) -> list[uuid.UUID]:
        """Up to ``limit`` of ``revision_ids`` (a select of ids) not extracted, id > ``after``."""

    async def stale_documents(self, *, after: uuid.UUID | None, limit: int) -> list[uuid.UUID]:
        """Up to ``limit`` documents, by id after ``after``, indexed with another configuration."""

    async def rebuild(self, document_ids: Sequence[uuid.UUID]) -> None:
        """Build the index rows of ``document_ids`` again, with the tenant's configuration."""

    async def snippets(
        self, current: Mapping[uuid.UUID, uuid.UUID], query: TextQuery
    ) -> dict[uuid.UUID, Snippet]:
        """The best passage of each document's current revision, highlighted for ``query``.

        ``current`` maps document ids to their current revisions' ids; a document without
        extracted text gets no snippet.
        """


class AsyncTagRepository(Protocol):
    """The awaitable twin of :class:`dms.repositories.tags.TagRepository`."""

    async def add(self, *, name: str) -> Tag:
        """Create a tag; raises :class:`AlreadyExists` if one has the name, ignoring case."""

    async def get(self, tag_id: uuid.UUID) -> Tag:
        """Return the tag, or raise :class:`NotFound`."""

    async def get_by_name(self, name: str) -> Tag:
        """Return the tag called ``name`` (ignoring case), or raise :class:`NotFound`."""

    async def all(self) -> list[Tag]:
        """Return every tag, ordered by name."""

    async def rename(self, tag_id: uuid.UUID, *, name: str) -> Tag:
        """Rename a tag; links stay."""

    async def delete(self, tag_id: uuid.UUID) -> None:
        """Delete a tag and its links to documents."""

    async def link(
        self, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]
    ) -> list[uuid.UUID]:
        """Link every document to every tag in one statement; existing links stay as they are.

        Returns the document of each new link (a document once per tag it gained). Raises
        :class:`NotFound` for an unknown document or tag, and links nothing then. Use
        :func:`dms.services.tag_documents`, which also bumps the documents' versions.
        """

    async def unlink(
        self, document_ids: Iterable[uuid.UUID], tag_ids: Iterable[uuid.UUID]
    ) -> list[uuid.UUID]:
        """Remove the links between the documents and the tags.

        Returns the document of each removed link. Use :func:`dms.services.untag_documents`,
        which also bumps the documents' versions.
        """

    async def tags_of(self, document_id: uuid.UUID) -> list[Tag]:
        """Return the document's tags, ordered by name."""


class AsyncRepositories:
    """The repositories of an AsyncUnitOfWork, awaited."""

    @property
    def access(self) -> AsyncAccessRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.access`."""

    @property
    def audit(self) -> AsyncAuditRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.audit`."""

    @property
    def blobs(self) -> AsyncBlobRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.blobs`."""

    @property
    def documents(self) -> AsyncDocumentRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.documents`."""

    @property
    def folders(self) -> AsyncFolderRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.folders`."""

    @property
    def imports(self) -> AsyncImportRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.imports`."""

    @property
    def metadata(self) -> AsyncMetadataRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.metadata`."""

    @property
    def revisions(self) -> AsyncRevisionRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.revisions`."""

    @property
    def search(self) -> AsyncSearchRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.search`."""

    @property
    def tags(self) -> AsyncTagRepository:
        """The twin of :attr:`dms.uow.UnitOfWork.tags`."""
