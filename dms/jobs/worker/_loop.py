"""The loop runner: ``async def`` handlers, many jobs in flight on one event loop in one thread.

It keeps the guarantees of :mod:`._runner`, one job at a time becoming up to ``slots`` at once:

* each handler runs in an async unit of work of the job's tenant
  (:class:`~.unit.AsyncJobUnitOfWork`, a synchronous unit in SQLAlchemy's greenlet bridge);
  a handler that wrote has its job completed, fenced, on that unit before the commit, so its
  effects and the job's ``done`` commit together, and a lost lease rolls both back;
* a handler that never touched the database goes to the batch completer;
* whatever a handler raises is recorded as :class:`~._runner.Outcomes` records it, off the
  loop (the settler's statements are synchronous); what would end a runner thread
  (``SystemExit``, say) is logged with its traceback and fails the job printably, and the
  loop goes on;
* at a stop, claims taken but not started are released; running handlers finish within the
  grace period, and past it :meth:`LoopRunner.cancel` cancels them (``CancelledError`` at
  their next ``await``): their units roll back and the worker releases their jobs, without an
  attempt penalty.

The async engine is the worker's (:func:`dms.db.async_engine_like`); its pool is disposed when
the loop ends, because asyncio connections belong to the loop that opened them, and a loop
that replaces a failed one starts with a fresh pool.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import greenlet_spawn

from dms.jobs.settlement import complete
from dms.jobs.worker._book import Claim
from dms.jobs.worker._runner import IDLE_CHECK_SECONDS, AsyncHandler, Outcomes, RunnerParts
from dms.jobs.worker._settler import printable_error
from dms.jobs.worker.unit import AsyncJobUnitOfWork, AsyncUnitOfWorkFactory, wrote

log = logging.getLogger(__name__)

#: Seconds between checks for a cancellation by a loop waiting for its handlers at a stop.
CANCEL_CHECK_SECONDS = 0.1


class LoopRunner(Outcomes):
    """Runs up to ``slots`` claims at once on an event loop of its own thread."""

    def __init__(
        self,
        parts: RunnerParts,
        *,
        ready: queue.SimpleQueue[Claim],
        slots: int,
        handlers: Mapping[str, AsyncHandler[Any]],
        engine: AsyncEngine,
        unit_of_work: AsyncUnitOfWorkFactory[AsyncJobUnitOfWork],
    ) -> None:
        """A loop runner of the worker whose ``parts`` it shares: claims from ``ready``."""
        super().__init__(parts)
        self._slots = slots
        self._handlers = handlers
        self._engine = engine
        self._make_units = unit_of_work
        self._ready = ready
        self._cancel = threading.Event()
        self._running: dict[asyncio.Task[None], Claim] = {}

    def run(self) -> None:
        """Run claims until the worker stops and the handlers running then have ended."""
        asyncio.run(self._main())

    def cancel(self) -> None:
        """Cancel the handlers still running (past a stop's grace period); from any thread."""
        self._cancel.set()

    def salvage(self, error: BaseException) -> None:
        """After the loop failed: give back the jobs it ran (the loop failed, not they)."""
        claims, self._running = list(self._running.values()), {}
        for claim in claims:
            self._book.finish(claim, deferred=False)
            self._settler.release(claim)

    async def _main(self) -> None:
        units = self._make_units(self._engine)
        try:
            await self._dispatch(units)
            await self._wait_for_handlers()
        except BaseException:
            # The loop fails: asyncio.run cancels the running handlers next, and salvage()
            # releases their jobs.
            self._cancel.set()
            raise
        finally:
            await self._engine.dispose()

    async def _dispatch(self, units: Callable[..., AsyncJobUnitOfWork]) -> None:
        """Start claims as slots come free, until the worker stops."""
        while not self._stopping.is_set():
            free = self._slots - len(self._running)
            if free == 0:
                await asyncio.wait(
                    self._running, timeout=IDLE_CHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED
                )
                continue
            for claim in await asyncio.to_thread(self._take, free):
                if self._stopping.is_set():  # claimed but never started: straight back
                    await asyncio.to_thread(self._settler.release, claim)
                    continue
                task = asyncio.create_task(self._process(claim, units))
                self._running[task] = claim
                task.add_done_callback(self._ended)

    def _take(self, most: int) -> list[Claim]:
        """Up to ``most`` ready claims: the first awaited briefly, the rest if already there."""
        try:
            claims = [self._ready.get(timeout=IDLE_CHECK_SECONDS)]
        except queue.Empty:
            return []
        while len(claims) < most:
            try:
                claims.append(self._ready.get_nowait())
            except queue.Empty:
                break
        return claims

    def _ended(self, task: asyncio.Task[None]) -> None:
        # A cancelled handler's claim stays listed until the worker or salvage() releases it.
        if not task.cancelled():
            self._running.pop(task, None)

    async def _wait_for_handlers(self) -> None:
        """At a stop: let the running handlers end, or cancel them when asked to."""
        while self._running:
            await asyncio.wait(self._running, timeout=CANCEL_CHECK_SECONDS)
            if self._cancel.is_set():
                for task in self._running:
                    task.cancel()
                await asyncio.gather(*self._running, return_exceptions=True)
                self._running.clear()  # released by the worker's stop

    async def _process(self, claim: Claim, units: Callable[..., AsyncJobUnitOfWork]) -> None:
        if not self._book.start(claim):
            return  # let go meanwhile (a stop): it was released
        try:
            deferred = await self._run(self._handlers[claim.job.kind], claim, units)
        except asyncio.CancelledError:
            if self._cancel.is_set():
                raise  # the worker's cancellation: the job is released (stop, or salvage)
            # The handler's own (an inner task or timeout it did not catch): a failed attempt.
            await self._handler_error(claim, RuntimeError("the handler was cancelled"))
            deferred = False
        except BaseException as error:  # what would end a runner thread
            log.error(  # noqa: TRY400 - the traceback is in the message, escaped
                "worker %s: the handler of job %s raised %s",
                self._name,
                claim.job.id,
                printable_error(error),
            )
            await asyncio.to_thread(self.crashed, claim, error)
            return
        if self._book.finish(claim, deferred=deferred):
            self._acks.put(claim)

    async def _run(
        self, handler: AsyncHandler[Any], claim: Claim, units: Callable[..., AsyncJobUnitOfWork]
    ) -> bool:
        """Run ``handler``; True if it succeeded without using the database (completion deferred).

        The outcome of any other ending is recorded here.
        """
        job = claim.job
        try:
            unit = units(tenant=job.tenant)
            async with unit:
                await handler(unit, job)
                if not wrote(unit.sync):
                    return True
                self._book.settling([claim])
                await greenlet_spawn(complete, unit.sync.connection, job)
                await unit.commit()
            self._tally.add("completed")
        # Whatever a handler raises fails the attempt; the loop goes on.
        except Exception as exc:
            await self._handler_error(claim, exc)
        return False

    async def _handler_error(self, claim: Claim, exc: Exception) -> None:
        await asyncio.to_thread(self.ended_badly, claim, exc)
