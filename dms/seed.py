"""Development seed data and the ``dms demo`` walk-through.

:func:`seed` fills a database with 2 users and 3 tenants, each with folders three levels deep,
50 documents of 1 to 3 revisions, tags, and a metadata field of every type with values. Every
id is derived from the names (UUID 5), inserts skip rows that exist, and revisions are added
only to documents inserted by this run: seeding twice neither fails nor duplicates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection, Engine

from dms import migrations, tenancy
from dms.errors import TenantExists
from dms.schema import tenant as t
from dms.users import create_user

SEED_TENANTS = ("acme", "globex", "initech")
SEED_USERS = (("alice@example.org", "Alice Example"), ("bob@example.org", "Bob Example"))
DOCUMENTS_PER_TENANT = 50
_TOP_FOLDERS = ("Contracts", "Finance", "Human Resources")
_YEARS = ("2025", "2026")
_QUARTERS = ("Q1", "Q2")
_TAGS = ("urgent", "draft", "approved", "confidential", "archived")
_MIME_TYPES = ("application/pdf", "text/plain", "image/png")
_NAMESPACE = uuid.UUID("5d3c4a8e-7c1b-4f3e-9a51-0b6f1c2d3e4f")


def _uid(*parts: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, "/".join(parts))


@dataclass(kw_only=True)
class SeedReport:
    """What one seed run inserted, per tenant."""

    inserted: dict[str, dict[str, int]] = field(default_factory=dict)

    def describe(self) -> str:
        """One line per tenant."""
        lines = [
            f"{slug}: " + ", ".join(f"{count} {name}" for name, count in counts.items())
            for slug, counts in self.inserted.items()
        ]
        return "seeded (new rows):\n  " + "\n  ".join(lines)


def seed(engine: Engine) -> SeedReport:
    """Insert the development data set; idempotent."""
    with engine.begin() as conn:
        users = [create_user(conn, email=email, display_name=name) for email, name in SEED_USERS]
    report = SeedReport()
    for slug in SEED_TENANTS:
        _ensure_tenant(engine, slug)
        with engine.begin() as conn:
            report.inserted[slug] = _seed_tenant(tenancy.route(conn, slug), slug, users)
    return report


def _ensure_tenant(engine: Engine, slug: str) -> None:
    with contextlib.suppress(TenantExists):
        tenancy.create_tenant(engine, slug)


def _insert_new(conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Multi-row insert that skips existing primary keys; returns the ids it inserted."""
    if not rows:
        return []
    statement = insert(table).values(list(rows)).on_conflict_do_nothing()
    if "id" not in table.c:
        return list(conn.execute(statement.returning(*table.primary_key.columns)))
    return list(conn.scalars(statement.returning(table.c.id)))


def _seed_tenant(conn: Connection, slug: str, users: list[uuid.UUID]) -> dict[str, int]:
    leaf_folders, folder_count = _seed_folders(conn, slug, users[0])
    tags = [{"id": _uid(slug, "tag", name), "name": name, "created_by": users[0]} for name in _TAGS]
    tag_count = len(_insert_new(conn, t.tags, tags))
    fields, options, field_count = _seed_fields(conn, slug, users[0])
    documents = [
        {
            "id": _uid(slug, "document", str(number)),
            "title": f"Document {number:02d}",
            "folder_id": leaf_folders[number % len(leaf_folders)],
            "created_by": users[number % len(users)],
        }
        for number in range(DOCUMENTS_PER_TENANT)
    ]
    new_documents = set(_insert_new(conn, t.documents, documents))
    fresh = [doc for doc in documents if doc["id"] in new_documents]
    revisions = _seed_revisions(conn, slug, fresh, users)
    _insert_new(conn, t.document_tags, list(_document_tags(fresh, tags)))
    _seed_values(conn, fresh, fields, options)
    return {
        "folders": folder_count,
        "documents": len(fresh),
        "revisions": revisions,
        "tags": tag_count,
        "metadata fields": field_count,
    }


def _seed_folders(conn: Connection, slug: str, user: uuid.UUID) -> tuple[list[uuid.UUID], int]:
    levels: list[list[dict[str, Any]]] = [[], [], []]
    for top in _TOP_FOLDERS:
        levels[0].append({"id": _uid(slug, top), "name": top, "parent_id": None})
        for year in _YEARS:
            levels[1].append(
                {"id": _uid(slug, top, year), "name": year, "parent_id": _uid(slug, top)}
            )
            for quarter in _QUARTERS:
                levels[2].append(
                    {
                        "id": _uid(slug, top, year, quarter),
                        "name": quarter,
                        "parent_id": _uid(slug, top, year),
                    }
                )
    # Parents first: the folder guard checks each new folder's ancestry.
    inserted = sum(
        len(_insert_new(conn, t.folders, [{**row, "created_by": user} for row in level]))
        for level in levels
    )
    return [row["id"] for row in levels[2]], inserted


_FIELDS = (
    ("Client", "string"),
    ("Summary", "text"),
    ("Pages", "int"),
    ("Amount", "decimal"),
    ("Signed on", "date"),
    ("Signed", "bool"),
    ("Source", "url"),
    ("Status", "select"),
    ("Regions", "multi_select"),
)
_OPTIONS = {"Status": ("Open", "Pending", "Closed"), "Regions": ("EU", "US", "APAC")}


def _seed_fields(
    conn: Connection, slug: str, user: uuid.UUID
) -> tuple[dict[str, uuid.UUID], dict[str, list[uuid.UUID]], int]:
    fields = {name: _uid(slug, "field", name) for name, _ in _FIELDS}
    rows = [
        {"id": fields[name], "name": name, "field_type": kind, "created_by": user}
        for name, kind in _FIELDS
    ]
    count = len(_insert_new(conn, t.metadata_fields, rows))
    types = dict(_FIELDS)
    options = {
        name: [_uid(slug, "option", name, v) for v in values] for name, values in _OPTIONS.items()
    }
    option_rows = [
        {
            "id": option_id,
            "field_id": fields[name],
            "field_type": types[name],
            "value": value,
            "position": position,
        }
        for name, values in _OPTIONS.items()
        for position, (value, option_id) in enumerate(zip(values, options[name], strict=True))
    ]
    _insert_new(conn, t.metadata_field_options, option_rows)
    return fields, options, count


def _seed_revisions(
    conn: Connection, slug: str, documents: list[dict[str, Any]], users: list[uuid.UUID]
) -> int:
    rows = []
    for number, doc in enumerate(documents):
        for revision in range(1, number % 3 + 2):
            key = f"{slug}/{doc['id']}/{revision}"
            rows.append(
                {
                    "id": _uid(key),
                    "document_id": doc["id"],
                    "revision_no": revision,
                    "storage_key": f"blobs/{key}",
                    "sha256": hashlib.sha256(key.encode()).hexdigest(),
                    "size_bytes": 1000 * revision + number,
                    "mime_type": _MIME_TYPES[number % len(_MIME_TYPES)],
                    "uploaded_by": users[revision % len(users)],
                }
            )
    inserted = _insert_new(conn, t.file_revisions, rows)
    latest = {row["document_id"]: row["id"] for row in rows}  # rows are in revision order
    for document_id, revision_id in latest.items():
        conn.execute(
            sa.update(t.documents)
            .where(t.documents.c.id == document_id)
            .values(current_revision_id=revision_id)
        )
    return len(inserted)


def _document_tags(
    documents: list[dict[str, Any]], tags: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    for number, doc in enumerate(documents):
        for tag in tags[number % 2 : number % 2 + 1 + number % 3]:
            yield {"document_id": doc["id"], "tag_id": tag["id"]}


def _seed_values(
    conn: Connection,
    documents: list[dict[str, Any]],
    fields: dict[str, uuid.UUID],
    options: dict[str, list[uuid.UUID]],
) -> None:
    values = []
    choices = []
    for number, doc in enumerate(documents):
        typed = {
            "Client": ("string", "value_string", f"Client {number % 7}"),
            "Summary": ("text", "value_text", f"Summary of document {number}."),
            "Pages": ("int", "value_int", 1 + number * 3),
            "Amount": ("decimal", "value_decimal", Decimal(number * 125) / 10),
            "Signed on": (
                "date",
                "value_date",
                dt.date(2025, 1, 1) + dt.timedelta(days=number * 7),
            ),
            "Signed": ("bool", "value_bool", number % 2 == 0),
            "Source": ("url", "value_url", f"https://example.org/source/{number}"),
            "Status": ("select", "option_id", options["Status"][number % 3]),
        }
        for name, (kind, column, value) in typed.items():
            values.append(
                {
                    "document_id": doc["id"],
                    "field_id": fields[name],
                    "field_type": kind,
                    column: value,
                }
            )
        values.append(
            {"document_id": doc["id"], "field_id": fields["Regions"], "field_type": "multi_select"}
        )
        for option_id in options["Regions"][: 1 + number % 3]:
            choices.append(
                {"document_id": doc["id"], "field_id": fields["Regions"], "option_id": option_id}
            )
    # Rows of one multi-row insert must share their keys: fill absent value columns with NULL.
    columns = ["document_id", "field_id", "field_type", *t.VALUE_COLUMNS.values()]
    _insert_new(conn, t.document_metadata, [{c: row.get(c) for c in columns} for row in values])
    _insert_new(conn, t.document_metadata_choices, choices)


def _count(conn: Connection, table: sa.Table) -> int:
    return int(conn.scalar(sa.select(sa.func.count()).select_from(table)) or 0)


def run_demo(engine: Engine) -> str:
    """Migrate, seed, and summarise every seeded tenant: the ``dms demo`` command."""
    migrations.upgrade(engine)
    report = seed(engine)
    header = ("documents", "revisions", "folders", "tags", "fields")
    lines = [report.describe(), "", f"{'tenant':<9}" + "".join(f"{h:>11}" for h in header)]
    with engine.connect() as conn:
        for slug in SEED_TENANTS:
            routed = tenancy.route(conn, slug)
            counts = [
                _count(routed, table)
                for table in (t.documents, t.file_revisions, t.folders, t.tags, t.metadata_fields)
            ]
            lines.append(f"{slug:<9}" + "".join(f"{c:>11}" for c in counts))
    status = migrations.fleet_status(engine)
    lines.append("")
    lines.append(
        f"schema revision {status.head}; {'all at head' if status.healthy else 'ATTENTION'}"
    )
    return "\n".join(lines)
