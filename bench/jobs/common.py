"""What every system's benchmark shares: sizes, figures, timing and percentiles."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Offered load of the latency measurement.
LATENCY_RATE_PER_SECOND = 100
#: How often a throughput run checks whether the queue is empty.
DRAIN_CHECK_SECONDS = 0.005


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """How many jobs each measurement uses (``--quick`` divides them)."""

    enqueue_single: int = 1000
    enqueue_batches: int = 300
    batch: int = 100
    process_dms: int = 40000
    process_pgqueuer: int = 20000
    process_procrastinate: int = 1000
    process_pgbench: int = 10000
    # The p99 of 1,000 samples is their tenth-largest: the machine's hiccups move it less.
    latency_jobs: int = 1000
    finished_rows: int = 1_000_000

    def scaled(self, divisor: int) -> Sizes:
        """Every size divided by ``divisor`` (at least 1 or 10)."""
        return Sizes(
            enqueue_single=max(10, self.enqueue_single // divisor),
            enqueue_batches=max(2, self.enqueue_batches // divisor),
            batch=self.batch,
            process_dms=max(80, self.process_dms // divisor),
            process_pgqueuer=max(80, self.process_pgqueuer // divisor),
            process_procrastinate=max(40, self.process_procrastinate // divisor),
            process_pgbench=max(80, self.process_pgbench // divisor),
            latency_jobs=max(20, self.latency_jobs // divisor),
            finished_rows=max(1000, self.finished_rows // divisor),
        )


@dataclass
class Figures:
    """Measurements by name (``"process c8"``), one value per repetition."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, metric: str, system: str, value: float) -> None:
        """Record one repetition's ``value`` of ``metric`` for ``system``."""
        self.values.setdefault(metric, {}).setdefault(system, []).append(value)


def rate(count: int, seconds: float) -> float:
    """Jobs per second."""
    return count / seconds if seconds > 0 else float("inf")


def timed(action: Callable[[], object]) -> float:
    """Seconds ``action`` took."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def percentiles(samples_ms: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 of ``samples_ms``."""
    cuts = statistics.quantiles(samples_ms, n=100, method="inclusive")
    return statistics.median(samples_ms), cuts[94], cuts[98]
