"""Prometheus metrics of the job queue's health: ``dms metrics``, ``dms worker --metrics-port``.

An optional extra: ``pip install 'dms[metrics]'`` (the official ``prometheus_client``, which
this module imports; the ``dms`` command imports it only for its metrics options). The
figures are those of :func:`dms.health.queue_health`, read from the database at each scrape
(a few index-only counts and two statistics views: milliseconds), so two exporters never
disagree and nothing is cached between scrapes. Labels are the job kind and state only, never
the tenant: 10,000 tenants would make 10,000 series per kind.

==========================================  ===========================================
metric                                      meaning
==========================================  ===========================================
``dms_up``                                  1 if the last scrape reached the database
``dms_jobs{kind,state}``                    jobs of a kind in a state, all tenants
``dms_jobs_oldest_queued_age_seconds``      wait of the oldest runnable job (0: none)
``dms_jobs_expired_leases``                 expired leases no worker took back
``dms_jobs_table_rows{kind="live|dead"}``   tuples of ``dms.processing_jobs``
``dms_jobs_table_last_vacuum_timestamp``    last (auto)vacuum, Unix time (0: never)
``dms_cleanup_holder_age_xids``             age of the oldest snapshot holding back vacuum
==========================================  ===========================================

With ``dms worker --metrics-port``, the worker's own counters (:class:`~dms.jobs.worker.
WorkerStats`, read from the worker in memory at each scrape) are exported too, labelled with
the worker's name:

==========================================  ===========================================
``dms_worker_runners``                      runner threads configured
``dms_worker_runners_alive``                runner threads alive (below: being replaced)
``dms_worker_runners_replaced_total``       runners that failed and were replaced
``dms_worker_parts_restarted_total``        other parts that failed and were restarted
``dms_worker_jobs_held``                    jobs claimed and not yet settled
``dms_worker_jobs_total{outcome}``          completed, failed, released, lost, abandoned
==========================================  ===========================================
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from dms.errors import ConfigurationError
from dms.health import QueueHealth, queue_health
from dms.jobs.worker import WorkerStats

log = logging.getLogger(__name__)


class QueueCollector(Collector):
    """Collects :class:`~dms.health.QueueHealth` from ``engine`` at every scrape."""

    def __init__(self, engine: Engine) -> None:
        """Read through ``engine`` (one pooled connection per scrape)."""
        self._engine = engine

    def collect(self) -> Iterator[Any]:
        """The metrics of the module's table; ``dms_up`` 0 alone when the database fails."""
        up = GaugeMetricFamily("dms_up", "1 if the last scrape reached the database")
        try:
            with self._engine.connect() as conn:
                health = queue_health(conn)
        except (sa.exc.SQLAlchemyError, ConfigurationError) as exc:
            log.warning("metrics: cannot read the queue's health: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _queue_metrics(health)


def _queue_metrics(health: QueueHealth) -> Iterator[Any]:
    jobs = GaugeMetricFamily("dms_jobs", "jobs by kind and state", labels=["kind", "state"])
    for count in health.counts:
        jobs.add_metric([count.kind, count.state.value], count.count)
    yield jobs
    age = health.oldest_queued_age
    yield GaugeMetricFamily(
        "dms_jobs_oldest_queued_age_seconds",
        "wait of the oldest runnable queued job (0: none waits)",
        value=0 if age is None else age.total_seconds(),
    )
    yield GaugeMetricFamily(
        "dms_jobs_expired_leases",
        "running jobs whose lease expired and that no worker took back",
        value=health.expired_leases,
    )
    rows = GaugeMetricFamily(
        "dms_jobs_table_rows", "tuples of dms.processing_jobs", labels=["kind"]
    )
    rows.add_metric(["live"], health.live_rows)
    rows.add_metric(["dead"], health.dead_rows)
    yield rows
    vacuumed = health.last_vacuum
    yield GaugeMetricFamily(
        "dms_jobs_table_last_vacuum_timestamp",
        "last vacuum or autovacuum of dms.processing_jobs, Unix time (0: never)",
        value=0 if vacuumed is None else vacuumed.timestamp(),
    )
    unhandled = GaugeMetricFamily(
        "dms_jobs_unhandled",
        "queued jobs of kinds that no running worker handles (they wait for one)",
        labels=["kind"],
    )
    for count in health.unhandled:
        unhandled.add_metric([count.kind], count.count)
    yield unhandled
    yield GaugeMetricFamily(
        "dms_workers_live",
        "workers that announced themselves within the last minute",
        value=health.live_workers,
    )
    holder = health.cleanup_holder
    yield GaugeMetricFamily(
        "dms_cleanup_holder_age_xids",
        "transactions since the oldest snapshot that keeps vacuum from removing dead rows",
        value=0 if holder is None else holder.age_xids,
    )


class WorkerCollector(Collector):
    """Collects a worker's own counters (:class:`~dms.jobs.worker.WorkerStats`) at every scrape."""

    def __init__(self, name: str, stats: Callable[[], WorkerStats]) -> None:
        """Read ``stats()`` of the worker called ``name``."""
        self._name = name
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        """The ``dms_worker_*`` metrics of the module's second table."""
        stats = self._stats()
        labels = ["worker"]
        for metric, value, meaning in (
            ("dms_worker_runners", stats.runners, "runner threads configured"),
            ("dms_worker_runners_alive", stats.runners_alive, "runner threads alive"),
            ("dms_worker_jobs_held", stats.held, "jobs claimed and not yet settled"),
        ):
            gauge = GaugeMetricFamily(metric, meaning, labels=labels)
            gauge.add_metric([self._name], value)
            yield gauge
        for metric, value, meaning in (
            ("dms_worker_runners_replaced", stats.runners_replaced, "runners replaced"),
            ("dms_worker_parts_restarted", stats.parts_restarted, "other parts restarted"),
        ):
            counter = CounterMetricFamily(metric, meaning, labels=labels)
            counter.add_metric([self._name], value)
            yield counter
        jobs = CounterMetricFamily(
            "dms_worker_jobs",
            "jobs settled by this worker, by outcome",
            labels=[*labels, "outcome"],
        )
        for outcome in ("completed", "failed", "released", "lost", "abandoned"):
            jobs.add_metric([self._name, outcome], getattr(stats, outcome))
        yield jobs


def registry_for(engine: Engine, *, worker: WorkerCollector | None = None) -> CollectorRegistry:
    """A registry with the queue's collector, and the worker's if given (no process metrics)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(QueueCollector(engine))
    if worker is not None:
        registry.register(worker)
    return registry


def serve(
    engine: Engine,
    port: int,
    *,
    address: str = "127.0.0.1",
    worker: WorkerCollector | None = None,
) -> None:
    """Serve ``/metrics`` on ``address:port`` from a daemon thread, and return at once.

    ``address`` is this host's loopback unless told otherwise: the figures describe the queue
    and the server to whoever asks, with no authentication, so being reachable from another
    host is the operator's choice (``0.0.0.0``, or one interface's address), never a default.

    :class:`~dms.errors.ConfigurationError` if it cannot: a port in use or out of range, an
    address that does not resolve or is not this host's.
    """
    registry = registry_for(engine, worker=worker)
    try:
        start_http_server(port, addr=address, registry=registry)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigurationError(f"cannot serve metrics on {address}:{port}: {reason}") from exc
    log.info("metrics on http://%s:%d/metrics", address, port)
