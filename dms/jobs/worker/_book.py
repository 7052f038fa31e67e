"""The claims a worker holds, each tracked by a token of its own, and the room for more.

A job is claimed, run, then settled (completed, failed or released). A claim is identified by
its **token**, unique per claim in the worker, never by the job id alone: a release gives the
attempt back, so the same worker can claim the very same (job, attempt) again while the
bookkeeping of the first claim is still under way, and the two must not be mistaken for each
other (issue 10, bug 1).

The :class:`ClaimBook` is the worker's shared state, behind one lock: which claims are held
(their leases renewed), which run, which wait for the batch completer, and how much room the
claim window (:mod:`._window`) leaves for the next claim. It runs no SQL.

It also knows when the database may hold claims it does not: a claim whose reply was lost
with its connection (its ``COMMIT`` may have gone through), an outcome given up. A claimer
then **sweeps** (:meth:`ClaimBook.begin_sweep`): with no claim in flight, it gives back the
jobs running under the worker's name that the book does not hold.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Sequence

from dms.jobs.model import Job
from dms.jobs.worker._window import Window, capacity, claim_size, room_left


class Claim:
    """One claim of a job by this worker: the job as claimed, and the claim's token.

    ``settling``: its outcome is being recorded, so the renewer leaves it alone (a heartbeat
    racing with the completion would report a reclaim that never happened: issue 10, bug 3).
    ``acking``: its handler returned, and the batch completer will complete it.
    """

    __slots__ = ("acking", "job", "settling", "token")

    def __init__(self, job: Job, token: int) -> None:
        """A claim of ``job`` under ``token``."""
        self.job = job
        self.token = token
        self.settling = False
        self.acking = False

    def __repr__(self) -> str:
        """The job, its attempt and the token."""
        return f"Claim(job={self.job.id}, attempt={self.job.attempts}, token={self.token})"


class ClaimBook:
    """Held claims and the room for more, shared by a worker's parts (thread-safe)."""

    def __init__(
        self,
        *,
        runners: int,
        prefetch: int,
        batch_size: int,
        now: float,
        on_free: Callable[[], None] = lambda: None,
    ) -> None:
        """Room for ``runners`` running jobs, plus up to ``prefetch`` claimed ahead.

        ``on_free`` is called (without the book's lock) whenever jobs are let go with their
        outcome recorded: a job no longer running in the database.
        """
        self._on_free = on_free
        self._runners = runners
        self._batch_size = batch_size
        self._window = Window(floor=runners, ceiling=prefetch, now=now)
        self._tokens = itertools.count(1)
        self._held: dict[int, Claim] = {}
        self._running: dict[int, Claim] = {}
        self._acking = 0
        self._finished = 0
        self._claiming = 0
        self._waiting = 0
        self._suspect = False
        self._sweeping = False
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)

    # --- room for claims ------------------------------------------------------------------

    def reserve(self, stopping: threading.Event, *, timeout: float, now: float) -> int:
        """Block until a claim's worth of room is free (or ``timeout``); reserve it.

        Returns how many jobs the claim may take: 0 when stopping or when no room came. The
        reservation lets several claimers claim at once without together exceeding the room;
        :meth:`claimed` gives it back.
        """
        with self._room:
            self._window.finished(self._finished, now)
            self._waiting += 1
            try:
                self._room.wait_for(
                    lambda: (
                        (self._room_left() >= self._claim_size() and not self._sweeping)
                        or stopping.is_set()
                    ),
                    timeout=timeout,
                )
            finally:
                self._waiting -= 1
            if stopping.is_set() or self._sweeping:
                return 0
            limit = min(self._batch_size, max(0, self._room_left()))
            self._claiming += limit
            return limit

    def round_trip(self, seconds: float) -> None:
        """Note that a claim took ``seconds`` (the window covers a few of them)."""
        with self._lock:
            self._window.round_trip(seconds)

    def claimed(self, jobs: Sequence[Job], *, reserved: int) -> list[Claim]:
        """Hold ``jobs`` of a claim that had ``reserved`` room; return their claims."""
        claims = [Claim(job, next(self._tokens)) for job in jobs]
        with self._lock:
            self._claiming -= reserved
            for claim in claims:
                self._held[claim.token] = claim
            if self._sweeping:
                self._room.notify_all()  # the sweep waits for claims in flight
            elif len(claims) < reserved:
                self._wake_claimers()  # room this claim did not use: another claimer may
        return claims

    def wake_all(self) -> None:
        """Wake every claimer waiting for room (a stop)."""
        with self._room:
            self._room.notify_all()

    def _capacity(self) -> int:
        return capacity(self._runners, self._window.ahead)

    def _claim_size(self) -> int:
        return claim_size(capacity=self._capacity(), batch_size=self._batch_size)

    def _room_left(self) -> int:
        return room_left(
            capacity=self._capacity(),
            held=len(self._held),
            claiming=self._claiming,
            acking=self._acking,
        )

    def _wake_claimers(self) -> None:
        """Wake waiting claimers once a claim's worth of room is free (lock held).

        Not at every finished job: a claimer woken for less would only go back to sleep, and
        those wake-ups (a thread switch each, under the GIL) cost more than a no-op job.
        """
        if self._waiting and self._room_left() >= self._claim_size():
            self._room.notify_all()

    # --- running and settling -------------------------------------------------------------

    def start(self, claim: Claim) -> bool:
        """Note that a runner starts ``claim``; False if the worker no longer holds it."""
        with self._lock:
            if claim.token not in self._held:
                return False
            self._running[claim.token] = claim
            return True

    def finish(self, claim: Claim, *, deferred: bool) -> bool:
        """Note that the handler of ``claim`` returned; True if it now waits for the completer.

        ``deferred``: the completer is to complete it (it stays held, its lease renewed, until
        :meth:`settled`); otherwise its outcome is recorded already and it is let go.
        """
        with self._lock:
            self._running.pop(claim.token, None)
            self._finished += 1
            acking = deferred and claim.token in self._held
            if acking:
                claim.acking = True
                self._acking += 1
            else:
                self._drop(claim)
            self._wake_claimers()
        if not acking:
            self._on_free()
        return acking

    def settling(self, claims: Sequence[Claim]) -> None:
        """Note that the outcome of ``claims`` is being recorded: renew them no more."""
        with self._lock:
            for claim in claims:
                claim.settling = True

    def settled(self, claims: Sequence[Claim], *, lost_track: bool = False) -> None:
        """Let ``claims`` go: recorded, or given up (``lost_track``: then a sweep is due).

        Dropped and marked for a sweep under one lock: a sweep that began before knows them
        held, one that begins after finds them running and not held.
        """
        with self._lock:
            for claim in claims:
                self._drop(claim)
            if lost_track and claims:
                self._suspect = True
            self._wake_claimers()
        if claims:
            self._on_free()

    def _drop(self, claim: Claim) -> None:
        """Forget ``claim`` (lock held); idempotent, so two paths may both let it go."""
        if self._held.pop(claim.token, None) is not None and claim.acking:
            self._acking -= 1
        self._running.pop(claim.token, None)

    def take_all(self) -> list[Claim]:
        """Let every held claim go and return them (a stop releases them)."""
        with self._lock:
            claims = list(self._held.values())
            for claim in claims:
                self._drop(claim)
            return claims

    # --- leases ---------------------------------------------------------------------------

    def due(self) -> list[Claim]:
        """Claims whose lease the renewer extends: held, and not being settled."""
        with self._lock:
            return [claim for claim in self._held.values() if not claim.settling]

    def lease_lost(self, claim: Claim) -> bool:
        """A heartbeat of ``claim`` found its lease gone; True if it was really reclaimed.

        False when the claim was let go or is being settled meanwhile: the heartbeat raced
        with this worker's own completion, and nothing was lost. A claim really reclaimed is
        renewed no more; its runner's completion will find the lease lost as well.
        """
        with self._lock:
            if claim.token not in self._held or claim.settling:
                return False
            self._drop(claim)
            self._wake_claimers()
            return True

    # --- claims the book may not know ---------------------------------------------------

    def suspect(self) -> None:
        """Note that a claim failed: its ``COMMIT`` may have gone through without its reply.

        The next :meth:`begin_sweep` finds those jobs, if any, and they are given back.
        """
        with self._lock:
            self._suspect = True

    def begin_sweep(self, *, timeout: float) -> frozenset[uuid.UUID] | None:
        """If a sweep is due, stop claims and return the ids of the jobs held; else None.

        The sweep starts once no claim is in flight (up to ``timeout``; None if one still is:
        its jobs are not in the book yet, and would be taken for lost). Claims wait until
        :meth:`end_sweep`.
        """
        with self._room:
            if not self._suspect or self._sweeping:
                return None
            self._sweeping = True
            if not self._room.wait_for(lambda: self._claiming == 0, timeout=timeout):
                self._end_sweep(clean=False)
                return None
            self._suspect = False
            return frozenset(claim.job.id for claim in self._held.values())

    def end_sweep(self, *, clean: bool) -> None:
        """Let claims go on; ``clean``: the sweep was done (else another is due)."""
        with self._room:
            self._end_sweep(clean=clean)

    def _end_sweep(self, *, clean: bool) -> None:
        self._sweeping = False
        if not clean:
            self._suspect = True
        self._room.notify_all()

    # --- inspection -----------------------------------------------------------------------

    def running_jobs(self) -> tuple[Job, ...]:
        """The jobs whose handlers run now."""
        with self._lock:
            return tuple(claim.job for claim in self._running.values())

    def held(self) -> int:
        """How many claims are held."""
        with self._lock:
            return len(self._held)

    def holds(self, claim: Claim) -> bool:
        """Whether ``claim`` is held."""
        with self._lock:
            return claim.token in self._held
