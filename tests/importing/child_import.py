"""An import in a child process that kills itself with SIGKILL in the middle of a batch.

``python -m tests.importing.child_import URL TENANT USER_ID SOURCE BLOBS KILL_AT``: import
SOURCE in batches of 5 files; during batch KILL_AT, right after its last statement (the
enqueue of its verification jobs), once its blobs are written and before its transaction
commits, the process sends itself SIGKILL. By then the blobs of the next batch have been
written ahead too: the resumed import finds them there.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dms.importing import import_tree
from dms.jobs.tables import processing_jobs
from dms.storage import LocalBlobStore


def kill_at_enqueue(engine: sa.Engine, kill_at: int) -> None:
    """SIGKILL this process right after the ``kill_at``-th statement that enqueues jobs."""
    enqueues = 0

    def after(*args: Any) -> None:
        nonlocal enqueues
        statement: str = args[2]
        if f"INSERT INTO {processing_jobs.fullname}" in statement:
            enqueues += 1
            if enqueues == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    sa.event.listen(engine, "after_cursor_execute", after)


def main(argv: list[str]) -> None:
    """Run the import that dies."""
    url, tenant, user_id, source, blobs, kill_at = argv
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    kill_at_enqueue(engine, int(kill_at))
    store = LocalBlobStore(Path(blobs), durable=False)
    import_tree(
        engine, source, tenant=tenant, user_id=uuid.UUID(user_id), store=store, batch_files=5
    )


if __name__ == "__main__":
    main(sys.argv[1:7])
