"""The unit of work: commit, rollback, single use, savepoints, tenant isolation."""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.config import Settings, with_settings
from dms.domain import DocumentQuery
from dms.errors import (
    AlreadyExists,
    ConfigurationError,
    DmsError,
    NotFound,
    TransactionFailed,
    ValidationError,
)
from dms.schema import tenant as t
from dms.schema.tenant import USERS_SCHEMA
from dms.services import add_revision, create_document, define_field, tag_documents
from dms.transaction import TenantTransaction
from dms.uow import UnitOfWork


def count(engine: Engine, tenant: str, table: sa.Table) -> int:
    with engine.connect() as conn:
        routed = tenancy.route(conn, tenant)
        return int(routed.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


def test_commit_persists(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        doc = uow.documents.add(title="Kept.pdf")
        uow.commit()
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.documents.get(doc.id).title == "Kept.pdf"


def test_without_commit_nothing_is_written(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        folder = uow.folders.add(name="Gone")
        create_document(uow, title="Gone.pdf", folder_id=folder.id)
        uow.tags.add(name="gone")
    for table in (t.folders, t.documents, t.tags):
        assert count(engine, tenant, table) == 0


def test_exception_rolls_back(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    def fail() -> None:
        with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
            uow.documents.add(title="Gone.pdf")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail()
    assert count(engine, tenant, t.documents) == 0


def test_rollback_discards_work(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.documents.add(title="Gone.pdf")
        uow.rollback()
    assert count(engine, tenant, t.documents) == 0


def test_single_use(engine: Engine, tenant: str) -> None:
    uow = UnitOfWork(engine, tenant=tenant)
    with uow:
        pass
    with pytest.raises(DmsError, match="single-use"), uow:
        pass


def test_repositories_only_while_open(engine: Engine, tenant: str) -> None:
    uow = UnitOfWork(engine, tenant=tenant)
    with pytest.raises(DmsError, match="not open"):
        _ = uow.documents
    with uow:
        repository = uow.documents
        assert uow.documents is repository
    with pytest.raises(DmsError, match="not open"):
        _ = uow.documents


def test_writes_need_a_user(engine: Engine, tenant: str) -> None:
    with UnitOfWork(engine, tenant=tenant) as uow, pytest.raises(ValidationError, match="user"):
        uow.documents.add(title="Anonymous.pdf")


class _Cause(Exception):
    """The error raised inside a unit of work, which must reach the caller."""


def _lose_the_connection(engine: Engine, uow: TenantTransaction) -> None:
    # A backend terminated by the server: the unit of work's ROLLBACK will fail.
    pid = uow.connection.scalar(sa.select(sa.func.pg_backend_pid()))
    with engine.connect() as other:
        assert other.scalar(sa.select(sa.func.pg_terminate_backend(pid))) is True


@pytest.mark.parametrize("unit", [UnitOfWork, TenantTransaction])
def test_a_failing_rollback_does_not_hide_the_error_that_caused_it(
    engine: Engine, tenant: str, caplog: pytest.LogCaptureFixture, unit: type[TenantTransaction]
) -> None:
    """The unit of work and a job worker's bare unit end alike: they are one implementation."""

    def fail() -> None:
        with unit(engine, tenant=tenant) as uow:
            _lose_the_connection(engine, uow)
            raise _Cause

    with caplog.at_level(logging.WARNING, logger="dms.transaction"), pytest.raises(_Cause):
        fail()
    failed = [record for record in caplog.records if record.name == "dms.transaction"]
    assert len(failed) == 1
    assert failed[0].exc_info is not None
    assert isinstance(failed[0].exc_info[1], sa.exc.DBAPIError)


@pytest.mark.parametrize("unit", [UnitOfWork, TenantTransaction])
def test_an_interrupt_during_a_statement_ends_the_unit_quietly(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    caplog: pytest.LogCaptureFixture,
    unit: type[TenantTransaction],
) -> None:
    # Ctrl-C or SIGTERM (dms import, dms migrate) lands wherever the main thread is: here while
    # a statement is in flight. A ROLLBACK on that connection fails ("another command is
    # already in progress") and both dms and SQLAlchemy's pool logged tracebacks, so the
    # command's one line about how far it got came after pages of them.

    def interrupted() -> None:
        with unit(engine, tenant=tenant) as uow:
            uow.connection.execute(sa.insert(t.folders).values(name="kept?", created_by=user_id))
            driver = uow.connection.connection.driver_connection
            assert driver is not None
            driver.pgconn.send_query(b"SELECT pg_sleep(0.2)")  # sent, its answer never read
            raise KeyboardInterrupt

    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        interrupted()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:  # the pool serves again
        assert uow.folders.children(None) == []


def test_a_failing_rollback_without_an_error_in_flight_is_raised(
    engine: Engine, tenant: str
) -> None:
    """Control: the rollback above really fails, and says so when nothing else went wrong."""
    with pytest.raises(sa.exc.DBAPIError), UnitOfWork(engine, tenant=tenant) as uow:
        _lose_the_connection(engine, uow)


def test_savepoint_undoes_only_its_block(engine: Engine, tenant: str, user_id: uuid.UUID) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.documents.add(title="Kept.pdf")

        def fail() -> None:
            with uow.savepoint():
                uow.documents.add(title="Gone.pdf")
                raise RuntimeError

        with pytest.raises(RuntimeError):
            fail()
        uow.commit()
    with UnitOfWork(engine, tenant=tenant) as uow:
        titles = [doc.title for doc in uow.documents.search(DocumentQuery()).items]
    assert titles == ["Kept.pdf"]


def test_committing_after_a_failed_statement_says_nothing_was_kept(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.folders.add(name="lost")
        with pytest.raises(sa.exc.DataError):
            uow.connection.execute(sa.select(sa.cast("not a number", sa.Integer)))
        with pytest.raises(TransactionFailed, match="nothing of it was kept"):
            uow.commit()

    with UnitOfWork(engine, tenant=tenant) as uow:
        assert uow.folders.children(None) == []


def test_refused_statement_keeps_the_unit_usable(
    engine: Engine, tenant: str, user_id: uuid.UUID
) -> None:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        uow.tags.add(name="urgent")
        with pytest.raises(AlreadyExists):
            uow.tags.add(name="URGENT")
        uow.tags.add(name="later")
        uow.commit()
    with UnitOfWork(engine, tenant=tenant) as uow:
        assert [tag.name for tag in uow.tags.all()] == ["later", "urgent"]


def test_tenant_isolation_through_every_repository(
    engine: Engine, tenant: str, other_tenant: str, user_id: uuid.UUID
) -> None:
    digest = hashlib.sha256(b"isolated").hexdigest()
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        folder = uow.folders.add(name="Private")
        tag = uow.tags.add(name="secret")
        field = define_field(uow, name="Amount", field_type="int")
        doc = create_document(
            uow, title="Mine.pdf", folder_id=folder.id, tag_ids=[tag.id], metadata={field.id: 1}
        )
        add_revision(
            uow, doc.id, storage_key="k1", sha256=digest, size_bytes=1, mime_type="text/plain"
        )
        uow.commit()
    with UnitOfWork(engine, tenant=other_tenant, user_id=user_id) as uow:
        with pytest.raises(NotFound):
            uow.documents.get(doc.id)
        with pytest.raises(NotFound):
            uow.folders.get(folder.id)
        with pytest.raises(NotFound):
            uow.tags.get(tag.id)
        with pytest.raises(NotFound):
            uow.metadata.get_field(field.id)
        assert uow.documents.search(DocumentQuery()).items == []
        assert uow.revisions.find_by_sha256(digest) == []
        assert uow.revisions.history(doc.id) == []
        assert uow.metadata.values_of(doc.id) == {}
        assert uow.documents.with_any_tag([tag.id]) == []
        with pytest.raises(NotFound):
            tag_documents(uow, [doc.id], [tag.id])
        with pytest.raises(NotFound):
            uow.documents.add(title="Intruder.pdf", folder_id=folder.id)


def test_routes_users_by_the_settings_its_engine_carries(
    engine: Engine, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DMS_USERS_SCHEMA", "not_read")
    carrying = with_settings(engine, Settings(users_schema="iam"))
    with UnitOfWork(carrying, tenant=tenant) as uow:
        routing = uow.connection.get_execution_options()["schema_translate_map"]
    assert routing[USERS_SCHEMA] == "iam"


@pytest.mark.parametrize("settings", ["iam", {"users_schema": "iam"}, 5])
def test_settings_of_another_type_are_refused(
    engine: Engine, tenant: str, settings: object
) -> None:
    with pytest.raises(ConfigurationError, match=r"dms\.Settings"):
        UnitOfWork(engine, tenant=tenant, settings=settings)  # type: ignore[arg-type]


def _checked_out(engine: Engine) -> int:
    pool = engine.pool
    assert isinstance(pool, sa.QueuePool)
    return pool.checkedout()


def test_a_lazy_unit_of_work_takes_its_connection_at_first_use(engine: Engine, tenant: str) -> None:
    """What a job worker's units are (``UnitOfWork.factory``): no connection until asked."""
    before = _checked_out(engine)
    make = UnitOfWork.factory(engine)
    with make(tenant=tenant) as uow:
        assert not uow.opened
        assert _checked_out(engine) == before
        tags = uow.connection.scalar(sa.select(sa.func.count()).select_from(t.tags))
        assert tags == 0  # routed to the tenant's schema
        assert uow.opened
        assert _checked_out(engine) == before + 1
        uow.commit()
    assert _checked_out(engine) == before


def test_a_lazy_unit_of_work_never_used_commits_nothing_and_gives_nothing_back(
    engine: Engine, tenant: str
) -> None:
    before = _checked_out(engine)
    with UnitOfWork(engine, tenant=tenant, lazy=True) as uow:
        pass
    assert (uow.opened, _checked_out(engine)) == (False, before)
    with pytest.raises(DmsError):
        uow.connection  # noqa: B018 - closed units refuse their connection


def test_a_unit_of_work_that_names_someone_runs_without_jit_for_its_transaction_only(
    database_url: Any, tenant: str, user_id: uuid.UUID
) -> None:
    # Row-level security's rules lift a large read's estimate over the JIT thresholds, where
    # compiling costs more than it saves (dms.uow._act_as); the server's setting comes back.
    one = sa.create_engine(database_url, pool_size=1, max_overflow=0)
    try:
        with one.connect() as conn:
            conn.exec_driver_sql("SET jit = on")  # this session's own, kept past transactions
            conn.commit()
        with UnitOfWork(one, tenant=tenant, user_id=user_id) as uow:
            during = uow.connection.scalar(sa.text("SHOW jit"))
        with one.connect() as conn:  # the same server session, next transaction
            after = conn.scalar(sa.text("SHOW jit"))
    finally:
        one.dispose()

    assert (during, after) == ("off", "on")
