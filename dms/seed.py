"""Development seed data and the ``dms demo`` walk-through.

:func:`seed` fills a database with 2 users and 3 tenants, each with folders three levels deep,
50 documents of 1 to 3 revisions, tags, and a metadata field of every type with values. It goes
through the same unit of work and use cases as an application, writes each revision's bytes to
the blob store, and enqueues a ``revision.verify`` job for each revision in the same
transaction. Each tenant is seeded in one transaction and skipped when it holds seed data
already, so seeding twice neither fails nor duplicates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy.engine import Engine

from dms import jobs, migrations, provisioning
from dms.config import Settings, settings_of
from dms.domain import (
    Document,
    DocumentQuery,
    FieldType,
    Folder,
    MetadataField,
    MetadataFilter,
    Tag,
)
from dms.domain.audit import OPERATOR
from dms.domain.search import MAX_PAGE_SIZE
from dms.errors import NotFound, TenantExists, ValidationError
from dms.jobs import JobState, WorkerConfig
from dms.processing import (
    INTEGRITY_FIELD,
    define_processing_fields,
    enqueue_verification,
    handlers,
)
from dms.services import add_revision, create_document, define_field, search_documents
from dms.storage import BlobStore, store_of
from dms.uow import UnitOfWork
from dms.users import create_user
from dms.worker import DocumentWorker

SEED_TENANTS = ("acme", "globex", "initech")
SEED_USERS = (("alice@example.org", "Alice Example"), ("bob@example.org", "Bob Example"))
DOCUMENTS_PER_TENANT = 50
DEMO_TIMEOUT_SECONDS = 120
_TOP_FOLDERS = ("Contracts", "Finance", "Human Resources")
_YEARS = ("2025", "2026")
_QUARTERS = ("Q1", "Q2")
_TAGS = ("urgent", "draft", "approved", "confidential", "archived")
_FIELDS = (
    ("Client", FieldType.STRING, ()),
    ("Summary", FieldType.TEXT, ()),
    ("Pages", FieldType.INT, ()),
    ("Amount", FieldType.DECIMAL, ()),
    ("Signed on", FieldType.DATE, ()),
    ("Signed", FieldType.BOOL, ()),
    ("Source", FieldType.URL, ()),
    ("Status", FieldType.SELECT, ("Open", "Pending", "Closed")),
    ("Regions", FieldType.MULTI_SELECT, ("EU", "US", "APAC")),
)
_MIME_TYPES = ("text/plain", "application/pdf", "text/markdown")


@dataclass(kw_only=True)
class SeedReport:
    """What one seed run inserted, per tenant (empty for a tenant seeded before)."""

    inserted: dict[str, dict[str, int]] = field(default_factory=dict)

    def describe(self) -> str:
        """One line per tenant."""
        lines = [
            f"{slug}: "
            + (", ".join(f"{count} {name}" for name, count in counts.items()) or "seeded before")
            for slug, counts in self.inserted.items()
        ]
        return "seeded:\n  " + "\n  ".join(lines)


def seed(
    engine: Engine, *, blobs: BlobStore | None = None, settings: Settings | None = None
) -> SeedReport:
    """Insert the development data set, and enqueue the verification of every revision.

    ``settings`` default to ``engine``'s; ``blobs`` to the database's store
    (:func:`dms.storage.store_of`).
    """
    settings = settings if settings is not None else settings_of(engine)
    blobs = blobs or store_of(engine)
    with engine.begin() as conn:
        users = [
            create_user(conn, email=email, display_name=name, settings=settings)
            for email, name in SEED_USERS
        ]
    report = SeedReport()
    for index, slug in enumerate(SEED_TENANTS):
        with contextlib.suppress(TenantExists):
            provisioning.create_tenant(engine, slug, settings=settings)
        owner = users[index % len(users)]
        with UnitOfWork(engine, tenant=slug, user_id=owner, settings=settings) as uow:
            report.inserted[slug] = {} if _seeded(uow) else _seed_tenant(uow, slug, blobs)
            uow.commit()
    return report


def _seeded(uow: UnitOfWork) -> bool:
    try:
        uow.metadata.get_field_by_name(_FIELDS[0][0])
    except NotFound:
        return False
    return True


def _seed_tenant(uow: UnitOfWork, slug: str, blobs: BlobStore) -> dict[str, int]:
    _require_no_foreign_required_fields(uow, slug)
    leaves = _seed_folders(uow)
    tags = [uow.tags.add(name=name) for name in _TAGS]
    fields = [
        define_field(uow, name=name, field_type=kind, options=options)
        for name, kind, options in _FIELDS
    ]
    define_processing_fields(uow)
    revisions = 0
    for number in range(DOCUMENTS_PER_TENANT):
        document = create_document(
            uow,
            title=f"Document {number:02d}",
            folder_id=leaves[number % len(leaves)].id,
            tag_ids=[tag.id for tag in _tags_of(number, tags)],
            metadata=_values_of(number, fields),
        )
        revisions += _seed_revisions(uow, slug, document, number, blobs)
    return {
        "folders": len(_TOP_FOLDERS) * (1 + len(_YEARS) * (1 + len(_QUARTERS))),
        "documents": DOCUMENTS_PER_TENANT,
        "revisions": revisions,
        "tags": len(tags),
        "metadata fields": len(fields),
    }


def _require_no_foreign_required_fields(uow: UnitOfWork, slug: str) -> None:
    """Refuse, in one line, a tenant that requires fields the seed data does not fill.

    A tenant created before the seed may have required fields of its own; every seeded document
    would then be refused, and the first refusal would name a seed document, not the cause.
    """
    ours = {name.casefold() for name, _, _ in _FIELDS}
    foreign = [
        f.name for f in uow.metadata.list_fields() if f.required and f.name.casefold() not in ours
    ]
    if foreign:
        names = ", ".join(repr(name) for name in sorted(foreign))
        raise ValidationError(
            f"cannot seed tenant {slug!r}: it requires field(s) {names}, which the seed data "
            f"does not fill; seed a database without a tenant {slug!r}, or drop it first"
        )


def _seed_folders(uow: UnitOfWork) -> list[Folder]:
    leaves = []
    for top_name in _TOP_FOLDERS:
        top = uow.folders.add(name=top_name)
        for year_name in _YEARS:
            year = uow.folders.add(name=year_name, parent_id=top.id)
            leaves += [uow.folders.add(name=q, parent_id=year.id) for q in _QUARTERS]
    return leaves


def _tags_of(number: int, tags: list[Tag]) -> list[Tag]:
    return tags[number % 2 : number % 2 + 1 + number % 3]


def _values_of(number: int, fields: list[MetadataField]) -> dict[uuid.UUID, object]:
    by_name = {f.name: f.id for f in fields}
    return {
        by_name["Client"]: f"Client {number % 7}",
        by_name["Summary"]: f"Summary of document {number}.",
        by_name["Pages"]: 1 + number * 3,
        by_name["Amount"]: Decimal(number * 125) / 10,
        by_name["Signed on"]: dt.date(2025, 1, 1) + dt.timedelta(days=number * 7),
        by_name["Signed"]: number % 2 == 0,
        by_name["Source"]: f"https://example.org/source/{number}",
        by_name["Status"]: ("Open", "Pending", "Closed")[number % 3],
        by_name["Regions"]: ("EU", "US", "APAC")[: 1 + number % 3],
    }


def _seed_revisions(
    uow: UnitOfWork, slug: str, document: Document, number: int, blobs: BlobStore
) -> int:
    count = number % 3 + 1
    for revision_no in range(1, count + 1):
        key = f"{slug}/{document.id}/{revision_no}"
        content = f"{document.title}, revision {revision_no}.\n{'Lorem ipsum. ' * number}\n"
        stored = blobs.put(key, content.encode())
        revision = add_revision(
            uow,
            document.id,
            storage_key=key,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            mime_type=_MIME_TYPES[number % len(_MIME_TYPES)],
        )
        enqueue_verification(uow, revision)
    return count


@dataclass(frozen=True, kw_only=True)
class DemoResult:
    """What ``dms demo`` did: its summary, and the seed jobs still unfinished at its deadline."""

    summary: str
    unfinished: int


def run_demo(
    engine: Engine,
    *,
    settings: Settings | None = None,
    concurrency: int = 2,
    timeout_seconds: float = DEMO_TIMEOUT_SECONDS,
) -> DemoResult:
    """Migrate, seed, process the seeded jobs with a worker, and summarise: ``dms demo``.

    Waits at most ``timeout_seconds`` for the seed tenants' jobs; the result counts those still
    queued or running then. ``settings`` default to ``engine``'s.
    """
    settings = settings if settings is not None else settings_of(engine)
    blobs = store_of(engine)
    migrations.upgrade(engine)
    report = seed(engine, blobs=blobs, settings=settings)
    started = time.monotonic()
    with DocumentWorker(engine, handlers(blobs), WorkerConfig(concurrency=concurrency)):
        _wait_for_queue(engine, started + timeout_seconds)
    elapsed = time.monotonic() - started
    summary = "\n".join(
        [report.describe(), "", *_summary(engine), "", f"jobs processed in {elapsed:.1f} s"]
    )
    return DemoResult(summary=summary, unfinished=_pending(engine))


def _pending(engine: Engine) -> int:
    with engine.connect() as conn:
        counts = jobs.stats(conn).counts
    busy = {JobState.QUEUED, JobState.RUNNING}
    return sum(c.count for c in counts if c.tenant in SEED_TENANTS and c.state in busy)


def _wait_for_queue(engine: Engine, deadline: float) -> None:
    while _pending(engine) and time.monotonic() < deadline:
        time.sleep(0.1)


def _summary(engine: Engine) -> list[str]:
    header = ("documents", "revisions", "verified", "jobs done", "dead")
    lines = [f"{'tenant':<9}" + "".join(f"{h:>11}" for h in header)]
    for slug in SEED_TENANTS:
        with UnitOfWork(engine, tenant=slug, system=OPERATOR) as uow:
            documents = search_documents(uow, DocumentQuery(), limit=MAX_PAGE_SIZE).items
            integrity = uow.metadata.get_field_by_name(INTEGRITY_FIELD)
            verified = MetadataFilter(field_id=integrity.id, equals="verified")
            counts = [
                len(documents),
                sum(len(uow.revisions.history(d.id)) for d in documents),
                len(
                    search_documents(
                        uow, DocumentQuery(metadata=(verified,)), limit=MAX_PAGE_SIZE
                    ).items
                ),
            ]
            states = {c.state: c.count for c in jobs.stats(uow, tenant=slug).counts}
        counts += [states.get(JobState.DONE, 0), states.get(JobState.DEAD, 0)]
        lines.append(f"{slug:<9}" + "".join(f"{c:>11}" for c in counts))
    status = migrations.fleet_status(engine)
    lines.append(
        f"schema revision {status.head}; {'all at head' if status.healthy else 'ATTENTION'}"
    )
    return lines
