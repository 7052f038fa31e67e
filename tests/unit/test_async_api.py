"""The asyncio API has the synchronous API's signatures, name for name (no database).

dms.aio runs the synchronous code in SQLAlchemy's greenlet bridge; these tests fail when a
repository method, a use case or an enqueue function has no awaitable twin, or a twin whose
parameters differ from the synchronous one's.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import dms
from dms import aio, jobs, services
from dms.aio import _generate
from dms.aio import repositories as aio_repositories
from dms.aio.uow import repository_kinds
from dms.errors import ConfigurationError, ValidationError
from dms.uow import UnitOfWork

NOWHERE = create_async_engine("postgresql+psycopg_async://nobody@127.0.0.1:1/none")


def _public_methods(kind: type) -> list[str]:
    return sorted(
        name
        for name, member in vars(kind).items()
        if not name.startswith("_") and inspect.isfunction(member)
    )


def _without_first(function: Any) -> inspect.Signature:
    signature = inspect.signature(function)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


def test_every_repository_of_the_unit_of_work_has_a_twin() -> None:
    kinds = repository_kinds()
    properties = [
        name
        for name, member in vars(UnitOfWork).items()
        if isinstance(member, property) and name not in ("opened", "connection")
    ]
    assert sorted(kinds) == sorted(properties)
    assert len(kinds) >= 10


@pytest.mark.parametrize(("name", "kind"), sorted(repository_kinds().items()))
def test_each_repository_method_is_awaitable_with_the_same_signature(name: str, kind: type) -> None:
    uow = aio.AsyncUnitOfWork(NOWHERE, tenant="acme")
    twin = getattr(uow, name)
    methods = _public_methods(kind)
    assert methods, kind
    for method in methods:
        awaited = getattr(twin, method)
        assert inspect.iscoroutinefunction(awaited), method
        assert inspect.signature(awaited) == _without_first(getattr(kind, method)), method


def _typed_twin_signature(method: Any) -> inspect.Signature:
    """What the typed twin of ``method`` must read: ``async def``, an iterator made async."""
    signature = inspect.signature(method)
    returned = signature.return_annotation
    if isinstance(returned, str) and returned.startswith("Iterator["):
        signature = signature.replace(return_annotation=f"Async{returned}")
    return signature


@pytest.mark.parametrize(("name", "kind"), sorted(repository_kinds().items()))
def test_each_repository_has_a_typed_twin_with_its_methods_and_signatures(
    name: str, kind: type
) -> None:
    """dms/aio/repositories.py is generated (python -m dms.aio._generate): when a repository
    changes, this fails until it is generated again."""
    twin = getattr(aio_repositories, _generate.twin_name(kind))
    assert _public_methods(twin) == _public_methods(kind)
    for method in _public_methods(kind):
        typed = getattr(twin, method)
        assert inspect.iscoroutinefunction(typed), method
        assert inspect.signature(typed) == _typed_twin_signature(getattr(kind, method)), method
        assert typed.__doc__ == getattr(kind, method).__doc__, method
    unit_property = vars(aio_repositories.AsyncRepositories)[name]
    assert inspect.signature(unit_property.fget).return_annotation == twin.__name__


def _code_and_imports(source: str) -> tuple[list[str], set[tuple[str, str, str | None]]]:
    """The statements of ``source`` but its imports, and what it imports, in any order."""
    body = ast.parse(source).body
    imported = {
        (getattr(node, "module", None) or "", alias.name, alias.asname)
        for node in body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    code = [ast.dump(node) for node in body if not isinstance(node, ast.Import | ast.ImportFrom)]
    return code, imported


def test_the_typed_twins_are_what_the_generator_writes_now() -> None:
    """Statement for statement, up to ruff's formatting and import order."""
    written = _code_and_imports(_generate.TARGET.read_text())
    assert written == _code_and_imports(_generate.generate())


def test_every_use_case_of_a_unit_of_work_is_awaitable_with_the_same_signature() -> None:
    takes_a_unit = [
        name
        for name in services.__all__
        if inspect.isfunction(getattr(services, name))
        and next(iter(inspect.signature(getattr(services, name)).parameters)) == "uow"
    ]
    assert len(takes_a_unit) >= 10
    for name in takes_a_unit:
        twin = getattr(aio.services, name)
        assert inspect.iscoroutinefunction(twin), name
        assert _without_first(twin) == _without_first(getattr(services, name)), name
    assert sorted(set(aio.services.__all__) - {"awaited"}) == sorted(takes_a_unit)


@pytest.mark.parametrize("name", ["enqueue", "enqueue_many"])
def test_enqueue_is_awaitable_with_the_same_signature(name: str) -> None:
    twin = getattr(aio.jobs, name)
    assert inspect.iscoroutinefunction(twin)
    assert _without_first(twin) == _without_first(getattr(jobs, name))


def test_a_name_that_is_no_repository_or_method_is_an_attribute_error() -> None:
    uow = aio.AsyncUnitOfWork(NOWHERE, tenant="acme")
    with pytest.raises(AttributeError):
        uow.nothing  # noqa: B018
    with pytest.raises(AttributeError):
        uow.documents._execute  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        uow.documents.nothing  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize(
    "options",
    [{"tenant": "Not A Slug"}, {"tenant": "acme", "user_id": "alice"}, {"tenant": 5}],
)
def test_bad_arguments_are_refused_before_any_io(options: dict[str, Any]) -> None:
    with pytest.raises(dms.DmsError):
        aio.AsyncUnitOfWork(NOWHERE, **options)


def test_a_sync_engine_is_refused() -> None:
    with pytest.raises(ValidationError, match="AsyncEngine"):
        aio.AsyncUnitOfWork(sa.create_engine("postgresql+psycopg://x@127.0.0.1:1/n"), tenant="a")  # type: ignore[arg-type]


def test_create_engine_refuses_an_asyncio_url_instead_of_making_it_synchronous() -> None:
    with pytest.raises(ConfigurationError, match="create_async_engine"):
        dms.create_engine("postgresql+psycopg_async://nobody:secret@127.0.0.1:1/none")


@pytest.mark.parametrize(
    "url", ["postgresql://u@127.0.0.1:1/d", "postgresql+psycopg_async://u@127.0.0.1:1/d"]
)
def test_create_async_engine_takes_either_url(url: str) -> None:
    engine = dms.create_async_engine(url)
    assert engine.url.drivername == "postgresql+psycopg_async"
    assert engine.url.database == "d"


async def _enqueue_on_nothing() -> None:
    await aio.jobs.enqueue("a connection", "k", {}, tenant="acme")  # type: ignore[arg-type]


def test_enqueue_refuses_what_is_no_async_unit_or_connection() -> None:
    with pytest.raises(ValidationError, match="AsyncUnitOfWork or an AsyncConnection"):
        asyncio.run(_enqueue_on_nothing())


def test_ids_are_checked_as_on_the_synchronous_side() -> None:
    with pytest.raises(ValidationError):
        aio.AsyncUnitOfWork(NOWHERE, tenant="acme", user_id=uuid.uuid4(), system="worker")
