"""``import_tree`` on a generated tree with what real shares hold: everything arrives intact."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import DocumentQuery, tenancy
from dms.errors import DmsError
from dms.importing import ImportReport, NamePolicy, SkipReason, import_tree
from dms.jobs import JobState
from dms.processing import INTEGRITY_FIELD
from dms.schema import tenant as t
from dms.services import search_documents
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork
from tests.importing.conftest import (
    LATIN1_NAME,
    SAME_TEXT,
    digest,
    imported_files,
    metadata_values,
    run_verifications,
    source_files,
)


def _import(
    engine: Engine,
    tenant: str,
    user_id: uuid.UUID,
    tree: Path,
    store: LocalBlobStore,
    *,
    name_policy: NamePolicy = NamePolicy.RENAME,
) -> ImportReport:
    return import_tree(
        engine,
        tree,
        tenant=tenant,
        user_id=user_id,
        store=store,
        batch_files=7,
        name_policy=name_policy,
    )


def test_every_file_arrives_with_its_bytes(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    report = _import(engine, tenant, user_id, tree, store)
    expected = source_files(tree)
    imported = imported_files(engine, tenant)

    assert {os.path.relpath(path, os.fsencode(tree.parent)) for path in imported} == set(expected)
    for path, (_title, sha256, size, key, _mime) in imported.items():
        data = expected[os.path.relpath(path, os.fsencode(tree.parent))]
        assert (sha256, size) == (digest(data), len(data))
        assert store.get(key) == data
    assert report.counts.documents_created == len(expected)
    assert report.counts.batches > 1
    assert report.complete


def test_identical_files_share_one_blob(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    report = _import(engine, tenant, user_id, tree, store)
    keys = {
        key
        for _, sha, _, key, _ in imported_files(engine, tenant).values()
        if sha == digest(SAME_TEXT)
    }

    with engine.connect() as conn:
        registered = tenancy.route(conn, tenant).scalar(
            sa.select(sa.func.count()).select_from(t.blobs)
        )
    assert len(keys) == 1
    assert registered == report.counts.blobs_written == len(source_files(tree)) - 2


def test_names_that_collide_or_break_the_rules_are_renamed_and_reported(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    report = _import(engine, tenant, user_id, tree, store)
    titles = {
        os.path.basename(path): title
        for path, (title, *_) in imported_files(engine, tenant).items()
    }
    renamed = {entry.path: entry.title for entry in report.renamed}

    assert titles[b"Index.html"] == "Index.html"  # first in byte order keeps its name
    assert titles[b"index.html"] == "index (2).html"
    assert titles[LATIN1_NAME] == "café crème.txt"
    assert titles[b"new\nline.txt"] == "new\u240aline.txt"
    assert titles[b"   "] == "\u2423\u2423\u2423"
    assert titles[b"with space + plus@at.txt"] == "with space + plus@at.txt"
    assert titles[b".hidden"] == ".hidden"
    assert renamed == {
        "share/docs/index.html": "index (2).html",
        "share/copies": "copies (2)",
        "share/odd/caf\\xe9 cr\\xe8me.txt": "café crème.txt",
        "share/odd/new\nline.txt": "new\u240aline.txt",
        "share/odd/   ": "\u2423\u2423\u2423",
    }
    assert report.counts.renamed == len(renamed)


def test_links_and_fifos_are_skipped_and_reported(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    report = _import(engine, tenant, user_id, tree, store)

    assert {(e.path, e.skip_reason) for e in report.skipped} == {
        ("share/odd/link.txt", SkipReason.NOT_A_FILE),
        ("share/odd/pipe", SkipReason.NOT_A_FILE),
    }
    assert report.complete  # by design, not failures


def test_refuse_policy_leaves_out_what_it_would_rename(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    report = _import(engine, tenant, user_id, tree, store, name_policy=NamePolicy.REFUSE)
    imported = {
        os.path.relpath(p, os.fsencode(tree.parent)) for p in imported_files(engine, tenant)
    }
    refused = {
        e.path
        for e in report.skipped
        if e.skip_reason in (SkipReason.NAME_REFUSED, SkipReason.NAME_TAKEN)
    }

    assert refused == {
        "share/docs/index.html",
        "share/copies",
        "share/odd/caf\\xe9 cr\\xe8me.txt",
        "share/odd/new\nline.txt",
        "share/odd/   ",
    }
    assert b"share/docs/index.html" not in imported
    assert b"share/copies/one.txt" not in imported  # its folder was refused
    assert "share/copies/one.txt" in {e.path for e in report.skipped}
    assert b"share/docs/Index.html" in imported
    assert report.renamed == []
    assert not report.complete


def test_types_are_normalised_and_compressed_files_typed_by_their_bytes(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    _import(engine, tenant, user_id, tree, store)
    types = {os.path.basename(p): mime for p, (*_, mime) in imported_files(engine, tenant).items()}

    assert types[b"table.sgml"] == "text/sgml"
    assert types[b"readme.txt.gz"] == "application/gzip"
    assert types[b"ls.1.gz"] == "application/gzip"
    assert types[b"   "] == "text/plain"  # no extension: typed by its bytes
    assert types[b"blob.bin"] == "application/octet-stream"


def test_every_verification_job_is_done_and_previews_are_clean(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    report = _import(engine, tenant, user_id, tree, store)
    states = run_verifications(engine, tenant, store)
    values = metadata_values(engine, tenant)
    with UnitOfWork(engine, tenant=tenant) as uow:
        integrity = uow.metadata.get_field_by_name(INTEGRITY_FIELD)
    verified = next(option.id for option in integrity.options if option.value == "verified")

    # One verification per document, one text extraction per batch of the import.
    documents, batches = report.counts.documents_created, report.counts.batches
    assert states[JobState.DONE] == documents
    assert report.counts.jobs_enqueued == documents + batches
    assert states[JobState.DEAD] == 0
    assert values["integrity"] == [verified] * report.counts.documents_created
    texts = [str(text) for text in values["preview"]]
    assert all("\x00" not in text for text in texts)
    assert any(text.startswith("UTF-16 text: héllo wörld") for text in texts)
    assert any(text.startswith("compressed readme text") for text in texts)
    assert any(text.startswith(".TH LS 1") for text in texts)
    assert any(text.startswith("text with a NUL") for text in texts) is False


def test_imported_text_is_found_by_what_it_says(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    _import(engine, tenant, user_id, tree, store)
    run_verifications(engine, tenant, store)

    with UnitOfWork(engine, tenant=tenant) as uow:

        def titles(text: str) -> set[str]:
            return {d.title for d in search_documents(uow, DocumentQuery(text=text)).items}

        # UTF-16 with accents folded, gzip by its text, a man page's overstrikes removed.
        assert "unicode.txt" in titles("hello world")
        assert "readme.txt.gz" in titles('"compressed readme text"')
        assert "ls.1.gz" in titles('"ls list"')
        assert titles("zzzunlikelyword") == set()


def test_running_it_again_imports_nothing_twice(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, store: LocalBlobStore
) -> None:
    first = _import(engine, tenant, user_id, tree, store)
    before = imported_files(engine, tenant)
    (tree / "docs" / "guide" / "intro.txt").write_bytes(b"Changed introduction\n")
    (tree / "docs" / "guide" / "added.txt").write_bytes(b"A file added since\n")
    second = _import(engine, tenant, user_id, tree, store)
    after = imported_files(engine, tenant)

    assert second.counts.documents_created == 1
    assert second.counts.revisions_added == 1
    assert second.counts.unchanged == first.counts.documents_created - 1
    assert second.counts.folders_created == 0
    assert second.counts.renamed == 0
    assert len(after) == len(before) + 1
    intro = next(p for p in after if p.endswith(b"guide/intro.txt"))
    assert after[intro][1] == digest(b"Changed introduction\n")
    assert after[intro][0] == before[intro][0]  # same document, same title


@pytest.mark.parametrize(
    "bad",
    [
        {"user_id": "not a uuid"},
        {"into": "Archive"},
        {"name_policy": "merge"},
        {"batch_files": 0},
        {"source": "/no/such/folder"},
        {"tenant": "Bad-Name"},
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    engine: Engine, tenant: str, user_id: uuid.UUID, tree: Path, bad: dict[str, object]
) -> None:
    arguments: dict[str, object] = {
        "source": tree,
        "tenant": tenant,
        "user_id": user_id,
        "store": LocalBlobStore(tree.parent / "blobs", durable=False),
        **bad,
    }
    source = arguments.pop("source")

    with pytest.raises(DmsError):
        import_tree(engine, source, **arguments)  # type: ignore[arg-type]

    with engine.connect() as conn:
        routed = tenancy.route(conn, tenant)
        assert routed.scalar(sa.select(sa.func.count()).select_from(t.folders)) == 0
        assert routed.scalar(sa.select(sa.func.count()).select_from(t.metadata_fields)) == 0
    assert not (tree.parent / "blobs").exists()
