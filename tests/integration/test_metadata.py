"""Metadata: fields of every type, options, typed values with validation, required fields."""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import tenancy
from dms.domain import DocumentQuery, FieldType
from dms.errors import AlreadyExists, ConcurrentUpdate, NotFound, ValidationError
from dms.schema import tenant as t
from dms.services import clear_value, create_document, define_field, set_value, set_values
from dms.testing.blocking import is_blocked_by
from dms.uow import UnitOfWork


@pytest.fixture
def uow(engine: Engine, tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    return UnitOfWork(engine, tenant=tenant, user_id=user_id)


@pytest.fixture
def values_uow(engine: Engine, module_tenant: str, user_id: uuid.UUID) -> UnitOfWork:
    """A unit of work in the module's tenant, which the value tests leave without a value.

    :func:`test_set_and_read_values` commits nothing (its unit of work rolls back), and every
    value of :func:`test_invalid_values_are_refused_and_nothing_written` is refused (the test
    commits a field and a document of its own name, never a value). A tenant costs each test a
    fifth of a second to create here, seconds on Citus.
    """
    return UnitOfWork(engine, tenant=module_tenant, user_id=user_id)


def rows(engine: Engine, tenant: str, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(
            tenancy.route(conn, tenant).scalar(sa.select(sa.func.count()).select_from(table)) or 0
        )


GOOD_VALUES: list[tuple[str, object, object]] = [
    ("string", "ACME Ltd", "ACME Ltd"),
    ("text", "line one\nline two", "line one\nline two"),
    ("int", -(2**63), -(2**63)),
    ("decimal", Decimal("12.3400"), Decimal("12.3400")),
    ("decimal", "0.1", Decimal("0.1")),
    ("date", date(2026, 3, 1), date(2026, 3, 1)),
    ("bool", False, False),
    ("url", "https://example.org/a?b=c", "https://example.org/a?b=c"),
]


@pytest.mark.parametrize(("field_type", "value", "stored"), GOOD_VALUES)
def test_set_and_read_values(
    values_uow: UnitOfWork, field_type: str, value: object, stored: object
) -> None:
    uow = values_uow
    with uow:
        field = define_field(uow, name="F", field_type=field_type)
        doc = uow.documents.add(title="A.pdf")
        assert set_value(uow, doc.id, field.id, value) == stored
        assert uow.metadata.values_of(doc.id) == {field.id: stored}


BAD_VALUES: list[tuple[str, object]] = [
    ("string", ""),
    ("string", 5),
    ("string", "x" * 1001),
    ("int", 2**63),
    ("int", True),
    ("int", "12"),
    ("int", 1.5),
    ("decimal", 0.1),
    ("decimal", "abc"),
    ("decimal", Decimal("NaN")),
    ("decimal", Decimal("1.12345678901")),
    ("decimal", Decimal("1" * 39)),
    ("date", "2026-03-01"),
    ("date", datetime(2026, 3, 1, 12, 0)),
    ("bool", 1),
    ("url", "ftp://example.org"),
    ("url", "https://exa mple.org"),
    ("url", "example.org"),
    ("select", "purple"),
    ("select", uuid.uuid4()),
    ("multi_select", "red"),
    ("multi_select", []),
    ("multi_select", ["red", "purple"]),
]


@pytest.mark.parametrize(("field_type", "value"), BAD_VALUES)
def test_invalid_values_are_refused_and_nothing_written(
    engine: Engine, module_tenant: str, values_uow: UnitOfWork, field_type: str, value: object
) -> None:
    uow, tenant = values_uow, module_tenant
    options = ["red", "green"] if FieldType(field_type).has_options else []
    name = f"Colour {uuid.uuid4().hex[:8]}"  # the tenant is shared: names of its own
    with uow:
        field = define_field(uow, name=name, field_type=field_type, options=options)
        doc = uow.documents.add(title=f"{name}.pdf")
        with pytest.raises(ValidationError, match=re.escape(f"'{name}'")) as error:
            set_value(uow, doc.id, field.id, value)
        shown = "'purple'" if value == ["red", "purple"] else repr(value)[:20]
        assert shown in str(error.value)
        uow.commit()
    assert rows(engine, tenant, t.document_metadata) == 0


def test_value_of_unknown_field_or_document(uow: UnitOfWork) -> None:
    with uow:
        field = define_field(uow, name="N", field_type="int")
        with pytest.raises(NotFound):
            set_value(uow, uuid.uuid4(), field.id, 1)
        doc = uow.documents.add(title="A.pdf")
        with pytest.raises(NotFound):
            set_value(uow, doc.id, uuid.uuid4(), 1)


def test_define_field_checks(uow: UnitOfWork) -> None:
    with uow:
        with pytest.raises(ValidationError, match="'colour'"):
            define_field(uow, name="Colour", field_type="colour")
        with pytest.raises(ValidationError, match="cannot have options"):
            define_field(uow, name="N", field_type="int", options=["1"])
        with pytest.raises(ValidationError, match="'N'"):
            define_field(uow, name="N", field_type="int", default="one")
        define_field(uow, name="Amount", field_type=FieldType.INT)
        with pytest.raises(AlreadyExists, match="'AMOUNT'"):
            define_field(uow, name="AMOUNT", field_type="string")
        with pytest.raises(AlreadyExists):
            define_field(uow, name="S", field_type="select", options=["a", "A"])
        assert [f.name for f in uow.metadata.list_fields()] == ["Amount"]


def test_select_values_and_option_lifecycle(uow: UnitOfWork) -> None:
    with uow:
        field = define_field(uow, name="Status", field_type="select", options=["Draft", "Final"])
        draft, final = field.options
        a, b = uow.documents.add(title="A.pdf"), uow.documents.add(title="B.pdf")
        assert set_value(uow, a.id, field.id, "draft") == draft.id
        set_value(uow, b.id, field.id, final.id)
        uow.metadata.rename_option(draft.id, value="Proposal")
        uow.metadata.retire_option(final.id)
        archived = uow.metadata.add_option(field.id, "Archived")
        assert uow.metadata.values_of(a.id) == {field.id: draft.id}
        assert uow.metadata.values_of(b.id) == {field.id: final.id}
        with pytest.raises(ValidationError, match="'Final'"):
            set_value(uow, a.id, field.id, "Final")
        reloaded = uow.metadata.get_field_by_name("status")
        assert [o.value for o in reloaded.active_options()] == ["Proposal", "Archived"]
        assert archived.position == 2
        with pytest.raises(AlreadyExists):
            uow.metadata.add_option(field.id, "proposal")


def test_multi_select_values(uow: UnitOfWork) -> None:
    with uow:
        field = define_field(
            uow, name="Topics", field_type="multi_select", options=["tax", "hr", "it"]
        )
        tax, hr, it = field.options
        doc = uow.documents.add(title="A.pdf")
        set_value(uow, doc.id, field.id, ["tax", hr.id])
        assert uow.metadata.values_of(doc.id) == {field.id: frozenset({tax.id, hr.id})}
        set_value(uow, doc.id, field.id, {it.id})
        assert uow.metadata.values_of(doc.id) == {field.id: frozenset({it.id})}
        clear_value(uow, doc.id, field.id)
        assert uow.metadata.values_of(doc.id) == {}


def test_rename_field_and_clear_value(uow: UnitOfWork) -> None:
    with uow:
        field = define_field(uow, name="Amount", field_type="int")
        doc = uow.documents.add(title="A.pdf")
        set_value(uow, doc.id, field.id, 5)
        assert uow.metadata.rename_field(field.id, name="Total").name == "Total"
        assert uow.metadata.values_of(doc.id) == {field.id: 5}
        clear_value(uow, doc.id, field.id)
        assert uow.metadata.values_of(doc.id) == {}
        with pytest.raises(NotFound):
            uow.metadata.rename_field(uuid.uuid4(), name="X")


def test_required_field_cannot_be_cleared(uow: UnitOfWork) -> None:
    with uow:
        field = define_field(uow, name="Customer", field_type="string", required=True)
        doc = create_document(uow, title="A.pdf", metadata={field.id: "ACME"})
        with pytest.raises(ValidationError, match="'Customer' is required"):
            clear_value(uow, doc.id, field.id)
        assert uow.metadata.values_of(doc.id) == {field.id: "ACME"}


def test_required_field_on_tenant_with_documents_needs_default(
    engine: Engine, tenant: str, uow: UnitOfWork
) -> None:
    with uow:
        uow.documents.add(title="A.pdf")
        with pytest.raises(ValidationError, match="needs a default"):
            define_field(uow, name="Customer", field_type="string", required=True)
        uow.commit()
    assert rows(engine, tenant, t.metadata_fields) == 0


@pytest.mark.parametrize(
    ("field_type", "options", "default"),
    [
        ("string", [], "unknown"),
        ("date", [], date(2000, 1, 1)),
        ("select", ["low", "high"], "low"),
        ("multi_select", ["a", "b", "c"], ["a", "c"]),
    ],
)
def test_required_field_default_applied_to_existing_documents(
    uow: UnitOfWork, field_type: str, options: list[str], default: object
) -> None:
    with uow:
        docs = [uow.documents.add(title=f"{n}.pdf") for n in range(3)]
        field = define_field(
            uow, name="F", field_type=field_type, required=True, default=default, options=options
        )
        assert field.default is not None
        for doc in docs:
            assert uow.metadata.values_of(doc.id) == {field.id: field.default}
        assert uow.metadata.missing_required(docs[0].id) == []
        later = create_document(uow, title="later.pdf")
        assert uow.metadata.values_of(later.id) == {field.id: field.default}


def _blocked_by(engine: Engine, waiter_pid: int, holder_pid: int, done: threading.Event) -> bool:
    """Wait until ``waiter_pid`` waits for a lock of ``holder_pid`` (True) or ``done`` is set."""
    deadline = time.monotonic() + 10
    with engine.connect() as conn:
        while time.monotonic() < deadline:
            if is_blocked_by(conn, waiter_pid, holder_pid):
                return True
            if done.wait(0.02):
                return False
    raise AssertionError(f"backend {waiter_pid} neither finished nor waited for {holder_pid}")


class _Racer(threading.Thread):
    """Runs ``work`` in its own unit of work and commits; reports its backend pid first."""

    def __init__(self, engine: Engine, tenant: str, user_id: uuid.UUID, work: Any) -> None:
        super().__init__()
        self.uow = UnitOfWork(engine, tenant=tenant, user_id=user_id)
        self.work = work
        self.pid: int | None = None
        self.started = threading.Barrier(2, timeout=10)
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.uow as uow:
                self.pid = uow.connection.scalar(sa.select(sa.func.pg_backend_pid()))
                self.started.wait()
                self.work(uow)
                uow.commit()
        except BaseException as exc:  # the main thread reports it
            self.error = exc
        finally:
            self.done.set()


@pytest.mark.parametrize("first", ["field", "document"])
def test_required_field_and_document_created_concurrently(
    engine: Engine, tenant: str, user_id: uuid.UUID, first: str
) -> None:
    """Whichever commits first, the new document ends up with the required field's value.

    The one that starts second must wait for the first (proved with dms.testing.blocking): without
    that wait, the field's backfill misses the document, and the document misses the field.
    """

    def define(uow: UnitOfWork) -> None:
        define_field(uow, name="Customer", field_type="string", required=True, default="unknown")

    def create(uow: UnitOfWork) -> None:
        create_document(uow, title="Racing.pdf")

    holder_work, waiter_work = (define, create) if first == "field" else (create, define)
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as holder:
        holder_pid = holder.connection.execute(sa.select(sa.func.pg_backend_pid())).scalar_one()
        holder_work(holder)
        waiter = _Racer(engine, tenant, user_id, waiter_work)
        waiter.start()
        waiter.started.wait()
        assert waiter.pid is not None
        waited = _blocked_by(engine, waiter.pid, holder_pid, waiter.done)
        holder.commit()
    waiter.join(timeout=30)
    assert waiter.error is None
    with UnitOfWork(engine, tenant=tenant) as uow:
        (doc,) = uow.documents.search(DocumentQuery()).items
        field = uow.metadata.get_field_by_name("Customer")
        assert uow.metadata.values_of(doc.id) == {field.id: "unknown"}
    assert waited, "the second transaction did not wait for the first"


def test_set_and_clear_value_bump_the_document_version(uow: UnitOfWork) -> None:
    with uow:
        amount = define_field(uow, name="Amount", field_type="int")
        note = define_field(uow, name="Note", field_type="string")
        read = uow.documents.add(title="A.pdf")
        set_value(uow, read.id, amount.id, 5)
        with pytest.raises(ConcurrentUpdate, match=f"version {read.version + 1}, not"):
            uow.documents.rename(read.id, title="stale.pdf", version=read.version)
        set_values(uow, read.id, {amount.id: 6, note.id: "x"})
        assert uow.documents.get(read.id).version == read.version + 2
        clear_value(uow, read.id, note.id)
        clear_value(uow, read.id, note.id)
        assert uow.documents.get(read.id).version == read.version + 3
        assert uow.metadata.values_of(read.id) == {amount.id: 6}


def test_create_document_returns_the_version_to_update_with(uow: UnitOfWork) -> None:
    with uow:
        amount = define_field(uow, name="Amount", field_type="int")
        tag = uow.tags.add(name="red")
        doc = create_document(uow, title="A.pdf", tag_ids=[tag.id], metadata={amount.id: 1})
        assert doc == uow.documents.get(doc.id)
        renamed = uow.documents.rename(doc.id, title="B.pdf", version=doc.version)
        assert renamed.version == doc.version + 1


def test_a_generator_of_options_is_read_once(uow: UnitOfWork) -> None:
    with uow:
        field = define_field(
            uow, name="Size", field_type="select", options=(size for size in ("S", "M", "L"))
        )
        assert [option.value for option in uow.metadata.get_field(field.id).options] == [
            "S",
            "M",
            "L",
        ]
