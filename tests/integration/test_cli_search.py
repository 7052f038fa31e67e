"""``dms search``: a query's lines and JSON, pages, the configuration, reindex and backfill."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
from sqlalchemy.engine import Engine

from dms import jobs
from dms.cli import main
from dms.jobs import JobState
from dms.services import EXTRACT_REVISION, add_revision, create_document
from dms.uow import UnitOfWork

Capture = pytest.CaptureFixture[str]


def dms(engine: Engine, *arguments: str) -> int:
    return main(["--database-url", engine.url.render_as_string(hide_password=False), *arguments])


def documents(engine: Engine, tenant: str, user_id: uuid.UUID, *texts: str) -> list[uuid.UUID]:
    """One document per text, titled ``doc N``, its current revision extracted as ``text``."""
    made = []
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        for number, text in enumerate(texts):
            document = create_document(uow, title=f"doc {number}")
            revision = add_revision(
                uow,
                document.id,
                storage_key=f"k/{uuid.uuid4()}",
                sha256=hashlib.sha256(text.encode()).hexdigest(),
                size_bytes=len(text),
                mime_type="text/plain",
            )
            uow.search.store_text(revision.id, extractor="text", parts=[text])
            made.append(document.id)
        uow.commit()
    return made


def test_a_search_prints_titles_snippets_and_the_count(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    documents(engine, tenant, user_id, "the harbour master signed", "nothing here")

    assert dms(engine, "search", "--tenant", tenant, "harbour", "master") == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("doc 0\t")
    assert lines[1].strip() == "the [harbour] [master] signed"
    assert lines[2] == "1 of 1 document(s)"


def test_json_and_pages_through_the_cursor(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    ids = documents(engine, tenant, user_id, *(["shared word"] * 3))

    assert dms(engine, "search", "--tenant", tenant, "--limit", "2", "--json", "shared") == 0
    first = json.loads(capsys.readouterr().out)
    assert (
        dms(
            engine,
            "search",
            "--tenant",
            tenant,
            "--json",
            "--after",
            first["next_cursor"],
            "shared",
        )
        == 0
    )
    second = json.loads(capsys.readouterr().out)

    assert (first["total"], first["total_exact"]) == (3, True)
    assert first["documents"][0]["snippet"]["text"] == "shared word"
    assert first["documents"][0]["snippet"]["highlights"] == [[0, 6]]
    seen = [d["id"] for d in first["documents"] + second["documents"]]
    assert sorted(seen) == sorted(str(i) for i in ids)
    assert second["next_cursor"] is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["search", "words"], "searching needs --tenant"),
        (["search", "--tenant", "acme", "--jobs", "2", "words"], "--jobs is for reindex"),
        (["search", "reindex", "now"], "reindex takes no words"),
        (["search", "config", "english", "--tenant", "acme"], "config takes --tenant and --set"),
        (["search", "--tenant", "acme", "--set", "english", "words"], "--set is for config"),
    ],
)
def test_wrong_combinations_are_usage_errors(
    engine: Engine, arguments: list[str], message: str, capsys: Capture
) -> None:
    assert dms(engine, *arguments) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["-draft"], "only excludes"),
        (["  "], "search text is blank"),
        (["in\udcffvalid"], "surrogate"),
    ],
)
def test_a_query_that_cannot_be_searched_is_one_error_line(
    engine: Engine, tenant: str, words: list[str], message: str, capsys: Capture
) -> None:
    assert dms(engine, "search", "--tenant", tenant, "--", *words) == 1

    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err


def test_an_unknown_tenant_and_a_bad_cursor_are_one_error_line(
    engine: Engine, tenant: str, capsys: Capture
) -> None:
    assert dms(engine, "search", "--tenant", "nosuchtenant", "words") == 1
    assert capsys.readouterr().err == "error: tenant 'nosuchtenant' does not exist\n"
    assert dms(engine, "search", "--tenant", tenant, "--after", "garbage", "words") == 1
    assert capsys.readouterr().err.startswith("error: not a page cursor")


def test_config_shows_changes_and_reindexes(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    documents(engine, tenant, user_id, "she was running late")

    assert dms(engine, "search", "config", "--tenant", tenant) == 0
    assert capsys.readouterr().out.startswith("simple (available: ")
    assert dms(engine, "search", "config", "--tenant", tenant, "--set", "english") == 0
    assert capsys.readouterr().out == f"tenant {tenant}: english, 1 document(s) reindexed\n"
    assert dms(engine, "search", "--tenant", tenant, "runs") == 0
    assert capsys.readouterr().out.startswith("doc 0\t")
    assert dms(engine, "search", "config", "--tenant", tenant, "--set", "klingon") == 1
    assert "no text search configuration 'klingon'" in capsys.readouterr().err


def test_reindex_resumes_from_what_is_stale(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    documents(engine, tenant, user_id, "one", "two", "three")
    with UnitOfWork(engine, tenant=tenant) as uow:
        uow.search.set_config("german")  # the rows still say simple: all three stale
        uow.commit()

    assert dms(engine, "search", "reindex", "--tenant", tenant, "--json") == 0
    first = json.loads(capsys.readouterr().out)
    assert dms(engine, "search", "reindex", "--tenant", tenant) == 0
    second = capsys.readouterr().out

    assert first["summary"] == {"reindexed": 1}
    assert second == "1 tenant(s): 1 skipped\n"


def test_backfill_enqueues_each_revision_without_text_once(
    engine: Engine, tenant: str, user_id: uuid.UUID, capsys: Capture
) -> None:
    documents(engine, tenant, user_id, "extracted already")
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        # As uploaded before extraction existed: a revision, and no job for it.
        document = uow.documents.add(title="old upload")
        revision = uow.revisions.add(
            document.id, storage_key="k/old", sha256="0" * 64, size_bytes=0, mime_type="a/b"
        )
        uow.documents.set_current_revision(document.id, revision.id)
        uow.commit()

    assert dms(engine, "search", "backfill", "--tenant", tenant) == 0
    assert capsys.readouterr().out == f"tenant {tenant}: 1 extraction job(s) enqueued\n"
    assert dms(engine, "search", "backfill", "--tenant", tenant, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"enqueued": {tenant: 0}}
    with engine.connect() as conn:
        queued = jobs.stats(conn, tenant=tenant, kind=EXTRACT_REVISION).total(JobState.QUEUED)
    assert queued == 2  # the one of "extracted already" (never run here) and the backfilled one
