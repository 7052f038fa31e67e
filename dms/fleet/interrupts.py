"""Stopping a fleet operation from outside: SIGTERM handled as Ctrl-C, and the exit statuses.

Entry points (the ``dms`` command, plain ``alembic``) wrap a fleet operation in
:func:`sigterm_as_interrupt`: a service manager's SIGTERM then stops the run as Ctrl-C does
(:mod:`dms.fleet.pool`), and the entry point exits with :attr:`Signals.exit_status`: 130 after
Ctrl-C, 143 after SIGTERM. A library never installs signal handlers by itself.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: Exit status after SIGTERM (128 + SIGTERM).
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass
class Signals:
    """The stopping signals received while a fleet operation ran."""

    received: list[int] = field(default_factory=list)

    def stop_here(self) -> None:
        """At a point where stopping is safe: raise ``KeyboardInterrupt`` if a signal came.

        The handler's own ``KeyboardInterrupt`` is lost where it lands in a weakref callback or
        a ``__del__`` (Python prints it as ignored); this raises it again where it cannot be.
        """
        if self.received:
            raise KeyboardInterrupt

    @property
    def exit_status(self) -> int:
        """143 if SIGTERM stopped the run, else 130 (Ctrl-C)."""
        return EXIT_TERMINATED if signal.SIGTERM in self.received else EXIT_INTERRUPTED


@contextmanager
def sigterm_as_interrupt() -> Iterator[Signals]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does; both are recorded.

    ``KeyboardInterrupt`` is raised wherever the main thread happens to be, and where that is a
    weakref callback or a ``__del__``, Python prints it as ignored and goes on: a caller with
    points where stopping is safe calls :meth:`Signals.stop_here` there too. Ctrl-C is recorded
    only where it would raise anyway (Python's default handler): an ignored SIGINT stays ignored.
    """
    signals = Signals()
    _active.append(signals)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signals.received.append(signum)
        raise KeyboardInterrupt

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    try:
        yield signals
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _active.remove(signals)


#: The signals of the :func:`sigterm_as_interrupt` blocks open now (innermost last).
_active: list[Signals] = []


def stop_here() -> None:
    """:meth:`Signals.stop_here` of every open :func:`sigterm_as_interrupt` block.

    For library code that runs inside an entry point's block without being handed its
    :class:`Signals` (the fleet's pool, between two tenants); outside any block, nothing.
    """
    for signals in tuple(_active):
        signals.stop_here()
