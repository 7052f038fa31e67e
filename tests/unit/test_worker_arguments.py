"""A worker's arguments: each hostile value refused with a ValidationError, before any SQL.

The engine points at a server that does not exist: had the worker run SQL, the test would see
a connection error instead of the ValidationError it expects.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

import dms
from dms import processing
from dms.errors import ValidationError
from dms.jobs import App, Backoff, Job, Worker, WorkerConfig
from dms.jobs.worker import JobUnitOfWork
from dms.jobs.worker import _arguments as arguments
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork

NOWHERE = sa.create_engine("postgresql+psycopg://nobody@localhost:1/nothing")


def _noop(uow: object, job: Job, /) -> None:
    """Does nothing."""


HOSTILE_TEXT = [
    "",
    "   ",
    "a\x00b",
    b"scan-\xff".decode("utf-8", "surrogateescape"),
    "\ud800",
    "x" * (arguments.MAX_NAME_CHARS + 1),
]
HOSTILE_VALUES: list[tuple[str, object]] = [
    *(("concurrency", v) for v in (0, -1, True, 1.5, "4", None, arguments.MAX_CONCURRENCY + 1)),
    *(("batch_size", v) for v in (0, False, 2.0, 10**9)),
    *(("prefetch", v) for v in (-1, True, "10", 10**9)),
    *(("lease", v) for v in (timedelta(0), timedelta(milliseconds=10), timedelta.max, 30, None)),
    *(("poll_seconds", v) for v in (0, -1, math.nan, math.inf, True, "2", 10**9)),
    *(("grace_seconds", v) for v in (-0.1, math.nan, math.inf, False, None)),
    *(("kinds", v) for v in ("abc", b"abc", 3, [], [1], *([t] for t in HOSTILE_TEXT))),
    *(("name", v) for v in (*HOSTILE_TEXT, 7, b"w")),
    *(("backoff", v) for v in ({"k": 5}, ["k"], {"\x00": Backoff()})),
    *(("listen", v) for v in (1, "yes", None)),
    *(("listen_url", v) for v in (5, b"postgresql://x")),
    *(("unit_of_work", v) for v in (5, "UnitOfWork")),
    *(("schedules", v) for v in ("* * * * *", 5, None, [None], [{"cron": "@daily"}], {"a": 1})),
]


@pytest.mark.parametrize(("argument", "value"), HOSTILE_VALUES)
def test_a_hostile_argument_is_refused(argument: str, value: object) -> None:
    options: dict[str, Any] = {argument: value}

    def make() -> object:
        if argument == "unit_of_work":  # the worker's own; the rest are its config's
            return Worker(NOWHERE, {"k": _noop}, **options)
        return Worker(NOWHERE, {"k": _noop}, WorkerConfig(**options))

    with pytest.raises(ValidationError):
        make()


@pytest.mark.parametrize("kind", [*HOSTILE_TEXT, 5])
def test_a_hostile_handler_kind_is_refused(kind: Any) -> None:
    with pytest.raises(ValidationError):
        Worker(NOWHERE, {kind: _noop})


@pytest.mark.parametrize("handlers", [{"k": "not callable"}, ["k"], None])
def test_handlers_must_map_kinds_to_callables(handlers: Any) -> None:
    with pytest.raises(ValidationError):
        Worker(NOWHERE, handlers)
    with pytest.raises(ValidationError):
        App(handlers)


@pytest.mark.parametrize("schedules", ["@daily", 5, None, [None], [object()]])
def test_an_app_refuses_what_is_no_schedule(schedules: Any) -> None:
    with pytest.raises(ValidationError):
        App({"k": _noop}, schedules)


def test_an_engine_is_required() -> None:
    with pytest.raises(ValidationError):
        Worker("postgresql://x", {"k": _noop})  # type: ignore[call-overload]


@pytest.mark.parametrize("config", [{"concurrency": 2}, 2, "concurrency=2"])
def test_a_config_must_be_a_worker_config(config: Any) -> None:
    with pytest.raises(ValidationError, match="config must be a WorkerConfig"):
        Worker(NOWHERE, {"k": _noop}, config)


def test_one_config_serves_several_workers_each_under_its_own_name() -> None:
    config = WorkerConfig(concurrency=2, kinds=["k", "k"], listen=False)
    first, second = (Worker(NOWHERE, {"k": _noop}, config) for _ in range(2))
    assert config.kinds == ("k",)
    assert first.config is second.config is config
    assert first.name != second.name


def test_sensible_arguments_are_kept() -> None:
    worker = Worker(
        NOWHERE,
        {"k": _noop, "other": _noop, "unclaimed": _noop},
        WorkerConfig(
            concurrency=8,
            kinds=["k", "other", "k"],
            lease=timedelta(seconds=1),
            poll_seconds=0.1,
            grace_seconds=0,
            name="host:1:é",
            listen=False,
        ),
    )
    assert worker.name == "host:1:é"
    assert worker.stats().runners == 8


def test_kinds_without_handlers_are_refused_by_name() -> None:
    with pytest.raises(ValidationError, match=r"no handler for job kind\(s\) a, b \(handlers: k\)"):
        Worker(NOWHERE, {"k": _noop}, WorkerConfig(kinds=["k", "b", "a"]))


_text = st.one_of(st.text(), st.sampled_from(HOSTILE_TEXT))
_anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    _text,
    st.binary(max_size=8),
    st.lists(_text, max_size=3),
    st.timedeltas(),
)


@settings(max_examples=300, deadline=None)
@given(
    concurrency=st.one_of(st.integers(-5, 2000), _anything),
    lease=st.one_of(st.timedeltas(), _anything),
    poll_seconds=st.one_of(st.floats(), _anything),
    grace_seconds=st.one_of(st.floats(), _anything),
    kinds=st.one_of(st.lists(_text, max_size=3), _anything),
    name=st.one_of(_text, _anything),
    batch_size=st.one_of(st.integers(-5, 20_000), _anything),
    prefetch=st.one_of(st.integers(-5, 200_000), _anything),
)
def test_any_arguments_make_a_worker_or_a_validation_error(**options: Any) -> None:
    """Never another exception, and no SQL (the engine's server does not exist)."""
    try:
        worker = Worker(NOWHERE, {"k": _noop}, WorkerConfig(listen=False, **options))
    except ValidationError:  # a DmsError (ValidationError's parent): nothing else may escape
        return
    if options["name"] is not None:
        assert worker.name == options["name"]
    worker.name.encode("utf-8")  # storable: no lone surrogate
    assert "\x00" not in worker.name


def _needs_documents(uow: UnitOfWork, job: Job, /) -> None:
    """A document-layer handler: reads through the repositories."""
    uow.documents.get(job.id)


def _takes_anything(uow: Any, job: Job, /) -> None:
    """Takes whatever unit it is given."""


def _takes_a_job_unit(uow: JobUnitOfWork, job: Job, /) -> None:
    """Needs only the connection (a protocol both units meet)."""


def test_a_handler_that_needs_a_unit_of_work_is_refused_by_a_worker_that_gives_none(
    tmp_path: Path,
) -> None:
    # The trap of issue 30: dms's own handlers given to the queue-level worker failed every
    # job with "'TenantTransaction' object has no attribute 'revisions'".
    built_in = processing.handlers(LocalBlobStore(tmp_path))
    for handlers in ({"k": _needs_documents}, built_in):
        with pytest.raises(ValidationError, match="takes a UnitOfWork, and this worker gives"):
            Worker(NOWHERE, handlers)
        dms.DocumentWorker(NOWHERE, handlers)  # the tenant's UnitOfWork: accepted
        Worker(NOWHERE, handlers, unit_of_work=UnitOfWork.factory(NOWHERE))  # made as given
    for handler in (_noop, _takes_anything, _takes_a_job_unit, lambda uow, job: None):
        Worker(NOWHERE, {"k": handler})
        dms.DocumentWorker(NOWHERE, {"k": handler})
