"""Every SQL statement on ``blobs``, the registry of a tenant's content-addressed blobs.

A blob is shared by every revision whose ``storage_key`` names it; it may be deleted only when
none does. The row of a blob is what makes that safe against concurrent transactions
(:mod:`dms.blobs` tells the whole protocol):

* a writer that is about to reference a blob **claims** it first (:meth:`BlobRepository.claim`):
  an upsert that leaves the row locked until the writer's transaction ends;
* a release **locks** the rows first (:meth:`BlobRepository.lock`, waiting for writers), and only
  then, in a later statement whose snapshot sees every writer that held the lock, deletes
  the rows no revision references (:meth:`BlobRepository.delete_unreferenced`).

Rows are always locked in key order, in one statement, so two transactions never wait for
each other crosswise.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from dms.domain import Blob
from dms.schema import tenant as t
from dms.schema.recordsets import recordset

from . import _recordset, revisions
from ._base import Repository
from .errors import translated

_b = t.blobs


class BlobRepository(Repository):
    """Content-addressed blobs of one tenant."""

    def claim(self, blobs: Iterable[Blob]) -> None:
        """Register each blob (or find it registered) and lock its row until the transaction ends.

        While the lock is held no release can delete the blob; claim before writing its file
        and before adding the revisions that reference it.
        """
        unique = {blob.storage_key: blob for blob in blobs}
        if not unique:
            return
        rows = [
            {"storage_key": key, "sha256": blob.sha256, "size_bytes": blob.size_bytes}
            for key, blob in sorted(unique.items())
        ]
        with translated(self._conn, f"{len(rows)} blobs", savepoint=False):
            self._execute(_claim_statement(), {"blobs": _recordset.encode(rows)})

    def lock(self, storage_keys: Iterable[str]) -> list[str]:
        """Lock the rows of the registered ``storage_keys`` (waiting for claims); return them."""
        keys = sorted(set(storage_keys))
        if not keys:
            return []
        return list(
            self._execute(
                sa.select(_b.c.storage_key)
                .where(_recordset.any_of(_b.c.storage_key, keys))
                .order_by(_b.c.storage_key)
                .with_for_update()
            ).scalars()
        )

    def delete_unreferenced(self, storage_keys: Sequence[str]) -> list[str]:
        """Delete the rows of ``storage_keys`` that no revision references; return their keys.

        Run it after :meth:`lock` of the same keys, as a statement of its own: its snapshot
        then includes every revision added by a transaction that claimed one of them.
        """
        if not storage_keys:
            return []
        return sorted(
            self._execute(
                sa.delete(_b)
                .where(
                    _recordset.any_of(_b.c.storage_key, sorted(storage_keys)),
                    ~revisions.references(_b.c.storage_key),
                )
                .returning(_b.c.storage_key)
            ).scalars()
        )

    def unreferenced(self, *, limit: int) -> list[str]:
        """Keys of up to ``limit`` registered blobs that no revision references, in key order."""
        return list(
            self._execute(
                sa.select(_b.c.storage_key)
                .where(~revisions.references(_b.c.storage_key))
                .order_by(_b.c.storage_key)
                .limit(limit)
            ).scalars()
        )

    def registered_among(self, storage_keys: Iterable[str]) -> set[str]:
        """Which of ``storage_keys`` are registered."""
        keys = sorted(set(storage_keys))
        if not keys:
            return set()
        return set(
            self._execute(
                sa.select(_b.c.storage_key).where(_recordset.any_of(_b.c.storage_key, keys))
            ).scalars()
        )

    def get(self, storage_key: str) -> Blob | None:
        """The registered blob of ``storage_key``, or ``None``."""
        row = self._execute(
            sa.select(_b.c.storage_key, _b.c.sha256, _b.c.size_bytes).where(
                _b.c.storage_key == storage_key
            )
        ).one_or_none()
        return None if row is None else Blob(**row._mapping)


@functools.cache
def _claim_statement() -> sa.Executable:
    batch = recordset(
        "blobs",
        [("storage_key", sa.Text()), ("sha256", sa.Text()), ("size_bytes", sa.BigInteger())],
    )
    statement = insert(_b).from_select(
        ["storage_key", "sha256", "size_bytes"],
        sa.select(batch.c.storage_key, batch.c.sha256, batch.c.size_bytes).order_by(
            batch.c.storage_key
        ),
    )
    # DO UPDATE, not DO NOTHING: only an update locks an existing row (and waits for a
    # release that is deleting it, then inserts it anew).
    # EXCLUDED's default rather than now(): Citus refuses functions that are not IMMUTABLE in
    # DO UPDATE SET; the default is the same now() of this transaction.
    return statement.on_conflict_do_update(
        index_elements=[_b.c.storage_key], set_={"claimed_at": statement.excluded.claimed_at}
    )
