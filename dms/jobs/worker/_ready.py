"""Claims waiting for a runner: one queue for the runner threads, one for the event loop.

A worker may have plain handlers (run on runner threads) and ``async def`` handlers (run on
its event loop) at once; a claim waits in the queue of the runners that can run its kind.
"""

from __future__ import annotations

import queue
from collections.abc import Collection

from dms.jobs.worker._book import Claim


class ReadyQueues:
    """The claims handed out by the claimers, by the kind of runner their handler needs."""

    def __init__(self, looped_kinds: Collection[str]) -> None:
        """Route ``looped_kinds`` (async handlers) to :attr:`looped`, the rest elsewhere."""
        self._looped_kinds = frozenset(looped_kinds)
        self.threaded: queue.SimpleQueue[Claim] = queue.SimpleQueue()
        self.looped: queue.SimpleQueue[Claim] = queue.SimpleQueue()

    def put(self, claim: Claim) -> None:
        """Hand ``claim`` to the runners that can run it."""
        looped = claim.job.kind in self._looped_kinds
        (self.looped if looped else self.threaded).put(claim)

    def take_all(self) -> list[Claim]:
        """Every claim no runner has taken yet (to release them)."""
        claims: list[Claim] = []
        for waiting in (self.threaded, self.looped):
            while True:
                try:
                    claims.append(waiting.get_nowait())
                except queue.Empty:
                    break
        return claims
