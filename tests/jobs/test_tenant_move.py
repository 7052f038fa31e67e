"""Moving a tenant to another node while a Worker runs its jobs and its users write.

On a Citus cluster the tenant moves (``citus_schema_move``, its writes waiting during the copy);
on plain PostgreSQL the move is refused with :class:`ClusterError` before anything changes.
On both, the work around it must be whole: every job done exactly once, every committed
write present, the data written before the move identical after it.
"""

from __future__ import annotations

import hashlib
import threading
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import citus, jobs, placement, tenancy
from dms.errors import ClusterError, TenantNotFound
from dms.jobs.worker import JobUnitOfWork
from dms.schema import tenant as t
from dms.uow import UnitOfWork
from tests.jobs.conftest import count_effects, count_jobs, job_effects, wait_for

#: Documents each round of the writer adds, each with a job enqueued in the same transaction.
WRITES_PER_ROUND = 3


def _record(uow: JobUnitOfWork, job: jobs.Job) -> None:
    """One row per run, written through the job's unit of work (so on the tenant's node)."""
    uow.connection.execute(
        sa.insert(job_effects).values(
            job_id=job.id, attempt=job.attempts, worker=job.locked_by or ""
        )
    )


def _digest(engine: Engine, tenant: str, tables: list[sa.Table]) -> str:
    """A digest of every row of ``tables`` in ``tenant``, in primary-key order."""
    digest = hashlib.sha256()
    with engine.connect() as conn:
        routed = tenancy.route(conn, tenant)
        for table in tables:
            keys = list(table.primary_key.columns)
            for row in routed.execute(sa.select(table).order_by(*keys)):
                digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()


class _Writer(threading.Thread):
    """Adds documents, each with a job enqueued in the same unit of work, until stopped."""

    def __init__(self, engine: Engine, tenant: str, user_id: uuid.UUID, kind: str) -> None:
        super().__init__(name="writer", daemon=True)
        self.engine, self.tenant, self.user_id, self.kind = engine, tenant, user_id, kind
        self.stop = threading.Event()
        self.committed: list[uuid.UUID] = []
        self.jobs: list[uuid.UUID] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._round()
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def _round(self) -> None:
        with UnitOfWork(self.engine, tenant=self.tenant, user_id=self.user_id) as uow:
            added = [
                uow.documents.add(title=f"doc {uuid.uuid4().hex}") for _ in range(WRITES_PER_ROUND)
            ]
            enqueued = [
                jobs.enqueue(uow.connection, self.kind, {"doc": str(d.id)}, tenant=self.tenant)
                for d in added
            ]
            uow.commit()
        self.committed += [document.id for document in added]
        self.jobs += [job.job_id for job in enqueued]


def _other_node(engine: Engine, tenant: str) -> str:
    """A node that holds tenants other than ``tenant``'s own."""
    with engine.connect() as conn:
        here = placement.tenant_nodes(engine)[tenant]
        return next(n.name for n in citus.nodes(conn) if n.holds_shards and n != here)


def _move(engine: Engine, tenant: str, to: str) -> None:
    placement.move_tenant(engine, tenant, to)
    assert placement.tenant_nodes(engine)[tenant].name == to


@pytest.mark.plain_only
def test_moving_a_tenant_is_refused_off_citus(engine: Engine, tenant: str) -> None:
    with pytest.raises(ClusterError, match="not a Citus cluster"):
        placement.move_tenant(engine, tenant, "127.0.0.1:1")


@pytest.mark.citus_only
def test_a_tenant_moves_while_its_jobs_run_and_its_users_write(
    engine: Engine, effects: str, kind: str, user_id: uuid.UUID
) -> None:
    tenant = effects
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.folders.add(name="before the move")
        uow.tags.add(name="kept")
        uow.commit()
    static = [t.folders, t.tags]
    before = _digest(engine, tenant, static)
    to = _other_node(engine, tenant)
    writer = _Writer(engine, tenant, user_id, kind)

    with jobs.Worker(engine, {kind: _record}, jobs.WorkerConfig(concurrency=2, poll_seconds=0.1)):
        writer.start()
        wait_for(lambda: len(writer.committed) >= 2 * WRITES_PER_ROUND)
        _move(engine, tenant, to)
        moved_at = len(writer.committed)
        wait_for(lambda: len(writer.committed) >= moved_at + 2 * WRITES_PER_ROUND)
        writer.stop.set()
        writer.join(timeout=60)
        assert writer.error is None
        total = len(writer.jobs)
        wait_for(lambda: _done(engine, kind) == total, timeout=60)

    assert _digest(engine, tenant, static) == before
    with engine.connect() as conn:
        present = set(tenancy.route(conn, tenant).scalars(sa.select(t.documents.c.id)))
    assert present == set(writer.committed)
    assert all(count_effects(engine, tenant, job_id) == 1 for job_id in writer.jobs)
    assert count_effects(engine, tenant) == total


def _done(engine: Engine, kind: str) -> int:
    with engine.connect() as conn:
        return count_jobs(conn, kind, "done")


def test_moving_to_an_unknown_node_or_an_unknown_tenant_is_refused(
    engine: Engine, tenant: str
) -> None:
    with pytest.raises(ClusterError):
        placement.move_tenant(engine, tenant, "127.0.0.1:1")
    with pytest.raises((TenantNotFound, ClusterError)):
        placement.move_tenant(engine, "t" + uuid.uuid4().hex[:12], "127.0.0.1:1")


@pytest.mark.citus_only
def test_a_move_citus_fails_leaves_the_tenant_where_it_was(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.tags.add(name="kept")
        uow.commit()
    to = _other_node(engine, tenant)
    here = placement.tenant_nodes(engine)[tenant].name
    # A relation in the way on the target node, named as the tenant's tags shard (a sequence:
    # Citus refuses tables in a distributed schema on a worker): Citus cannot create the shard
    # there, and rolls the move back.
    with engine.connect() as conn:
        shard = conn.scalar(sa.select(_shard_name(tenancy.schema_name(tenant), "tags")))
    host, port = to.rsplit(":", 1)
    target = sa.create_engine(engine.url.set(host=host, port=int(port)), poolclass=sa.NullPool)
    in_the_way = sa.Sequence(str(shard), schema=tenancy.schema_name(tenant))
    try:
        with target.begin() as conn:
            in_the_way.create(conn)

        with pytest.raises(ClusterError, match=f"it is on {here}: .*{shard}"):
            placement.move_tenant(engine, tenant, to)
    finally:
        with target.begin() as conn:
            in_the_way.drop(conn, checkfirst=True)
        target.dispose()

    assert placement.tenant_nodes(engine)[tenant].name == here
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert [tag.name for tag in uow.tags.all()] == ["kept"]


def _shard_name(schema: str, table: str) -> sa.ColumnElement[str]:
    """The name of ``schema.table``'s one shard (a distributed schema's tables have one)."""
    pg_dist_shard = sa.table("pg_dist_shard", sa.column("logicalrelid"), sa.column("shardid"))
    relation = sa.func.to_regclass(f"{schema}.{table}")
    return (
        sa.select(sa.literal(f"{table}_").concat(sa.cast(pg_dist_shard.c.shardid, sa.Text)))
        .where(pg_dist_shard.c.logicalrelid == relation)
        .scalar_subquery()
    )
