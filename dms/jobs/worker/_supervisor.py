"""Supervision: every part of a worker runs in a thread that no exception ends silently.

A part is anything with ``run()`` (its loop, returning when the worker stops) and
``salvage(error)`` (settle what it held when ``run`` raised). When ``run`` raises, whatever
the exception (``SystemExit`` from a handler included), the supervisor logs it with its
traceback, counts it in the worker's stats, lets the part salvage what it held, and starts a
new part of the same role in a new thread: at once for a runner (its failure concerned one
job), after a pause for the other parts (so that a fault that persists does not spin).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from dms.jobs.worker._settler import printable_error
from dms.jobs.worker.stats import Tally

log = logging.getLogger(__name__)

#: Seconds before a failed part other than a runner is restarted.
RESTART_PAUSE_SECONDS = 0.5
#: The role of the runners, which are counted apart (``runners_alive``, ``runners_replaced``).
RUNNER = "runner"


class Part(Protocol):
    """A part of a worker, run in a thread of its own."""

    def run(self) -> None:
        """Work until the worker stops."""

    def salvage(self, error: BaseException) -> None:
        """``run`` raised ``error``: settle what the part held."""


class Supervisor:
    """Starts parts in daemon threads and replaces those that fail."""

    def __init__(
        self,
        *,
        name: str,
        tally: Tally,
        stopping: threading.Event,
        runner_lost: Callable[[], None] = lambda: None,
    ) -> None:
        """Supervise the parts of worker ``name``; none is replaced once ``stopping`` is set.

        ``runner_lost`` is called when a failed runner cannot be replaced (no thread can be
        started): the worker then releases the jobs it claimed ahead if no runner is left.
        """
        self._runner_lost = runner_lost
        self._name = name
        self._tally = tally
        self._stopping = stopping
        self._lock = threading.Lock()
        self._threads: dict[str, list[threading.Thread]] = {}
        self._serial = 0

    def start(self, role: str, make: Callable[[], Part]) -> None:
        """Start a part made by ``make`` in a thread; replace it with another if it fails."""
        with self._lock:
            self._serial += 1
            thread_name = f"{self._name}/{role}-{self._serial}"
            thread = threading.Thread(
                target=self._watch, args=(role, make), name=thread_name, daemon=True
            )
            # Daemon threads: a handler stuck past the grace period must not keep the process.
            self._threads.setdefault(role, []).append(thread)
        if role == RUNNER:
            self._tally.add("runners_alive")
        try:
            thread.start()
        except BaseException:
            if role == RUNNER:
                self._tally.add("runners_alive", -1)
            raise

    def threads(self, *roles: str) -> list[threading.Thread]:
        """The threads started for ``roles`` (all roles if none), replacements included."""
        with self._lock:
            return [
                thread
                for role, threads in self._threads.items()
                if not roles or role in roles
                for thread in threads
            ]

    def join(self, *roles: str, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds in all for the parts of ``roles``; True if all ended.

        Replacements started while waiting are waited for as well.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pending = [t for t in self.threads(*roles) if t.is_alive()]
            if not pending:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            pending[0].join(left)

    def _watch(self, role: str, make: Callable[[], Part]) -> None:
        part: Part | None = None
        try:
            part = make()
            part.run()
        except BaseException as error:  # supervision: nothing ends a part silently
            self._ended(role)
            self._failed(role, part, make, error)
        else:
            self._ended(role)

    def _ended(self, role: str) -> None:
        if role == RUNNER:
            self._tally.add("runners_alive", -1)

    def _failed(
        self, role: str, part: Part | None, make: Callable[[], Part], error: BaseException
    ) -> None:
        # The traceback as printable text: a handler's message may hold lone surrogates or
        # NUL, which would break log handlers and shippers that write UTF-8.
        log.error(
            "worker %s: %s %s failed; replacing it: %s",
            self._name,
            role,
            threading.current_thread().name,
            printable_error(error),
        )
        self._tally.add("runners_replaced" if role == RUNNER else "parts_restarted")
        if part is not None:
            try:
                part.salvage(error)
            except BaseException as again:  # the replacement must start regardless
                log.error(  # noqa: TRY400 - the traceback is in the message, escaped
                    "worker %s: salvaging after the %s failed too: %s",
                    self._name,
                    role,
                    printable_error(again),
                )
        if role != RUNNER:
            self._stopping.wait(RESTART_PAUSE_SECONDS)
        if self._stopping.is_set():
            return
        try:
            self.start(role, make)
        except RuntimeError:  # no thread can be started: the process is out of resources
            log.critical("worker %s: cannot replace the %s", self._name, role, exc_info=True)
            if role == RUNNER:
                self._runner_lost()
