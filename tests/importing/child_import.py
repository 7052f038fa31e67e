"""An import in a child process that kills itself with SIGKILL in the middle of a batch.

``python -m tests.importing.child_import URL TENANT USER_ID SOURCE BLOBS KILL_AT``: import
SOURCE in batches of 5 files; during batch KILL_AT, right after its blobs were written and
before its transaction commits, the process sends itself SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa

from dms.importing import import_tree
from dms.storage import Content, LocalBlobStore


class KillingStore(LocalBlobStore):
    """A store whose ``kill_at``-th batch of writes is the process's last act."""

    def __init__(self, root: Path, kill_at: int) -> None:
        super().__init__(root, durable=False)
        self.kill_at = kill_at
        self.batches = 0

    def put_many(self, blobs: Sequence[tuple[str, Content]]) -> None:
        super().put_many(blobs)
        self.batches += 1
        if self.batches == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    """Run the import that dies."""
    url, tenant, user_id, source, blobs, kill_at = argv
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    store = KillingStore(Path(blobs), int(kill_at))
    import_tree(
        engine, source, tenant=tenant, user_id=uuid.UUID(user_id), store=store, batch_files=5
    )


if __name__ == "__main__":
    main(sys.argv[1:7])
