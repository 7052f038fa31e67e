"""A fleet run stops between two tenants when a stopping signal came, even if its
``KeyboardInterrupt`` was swallowed (raised inside a weakref callback, Python prints it as
ignored and goes on): the pool asks :func:`dms.fleet.interrupts.stop_here` between tenants."""

from __future__ import annotations

import signal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms.fleet.interrupts import Signals, sigterm_as_interrupt, stop_here
from dms.fleet.pool import INTERRUPTED, run_each
from dms.fleet.report import Outcome, TenantReport

#: Never connected to by these tests (a refused port, should a cancel try it).
NOWHERE = sa.create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")

_SIGNALS: list[Signals] = []


def _swallowing_task(engine: Engine, parameters: Any, item: str) -> TenantReport:
    """Done; and on the first tenant, SIGTERM arrives but its exception is lost."""
    if item == "a":
        _SIGNALS[-1].received.append(signal.SIGTERM)
    return TenantReport(
        tenant=item, from_revision=None, to_revision="1", seconds=0.0, outcome=Outcome.MIGRATED
    )


def test_a_run_in_process_stops_before_the_next_tenant() -> None:
    with sigterm_as_interrupt() as signals:
        _SIGNALS.append(signals)
        try:
            result = run_each(_swallowing_task, None, ["a", "b", "c"], engine=NOWHERE, jobs=1)
        finally:
            _SIGNALS.remove(signals)
    assert [report.tenant for report in result.reports] == ["a"]
    assert (result.pending, result.stopped) == (("b", "c"), INTERRUPTED)
    assert signals.exit_status == 128 + signal.SIGTERM


def test_stop_here_outside_any_block_does_nothing_and_inside_one_raises_once_signalled() -> None:
    stop_here()
    with sigterm_as_interrupt() as signals:
        stop_here()
        signals.received.append(signal.SIGINT)
        try:
            stop_here()
        except KeyboardInterrupt:
            raised = True
        else:
            raised = False
    stop_here()  # the block is closed: its signal no longer counts
    assert raised
