"""Content search at scale: dms against tantivy and ILIKE on one real corpus, in one run.

::

    python bench/search.py [--url URL] [--documents 1000000] [--tenants 1000] [--write]

One database of its own on ``--url``'s server (created and dropped): tenant ``big`` with
``--documents`` documents in 10,000 folders (100 top folders of 100), 50 tags (0 to 2 per
document) and an int field; ``--tenants`` more tenants of ``--tenant-documents`` documents
each. The text is :mod:`bench.search_corpus`'s. Documents are loaded the way the extraction job
stores text (the same tables and triggers, in batches of 2,000 on two processes); the job
itself, end to end from ``dms import`` to searchable text, is measured on a subset
(``--pipeline-documents``, two worker processes). tantivy (Paperless-ngx's engine) indexes the
same documents, with the ``en_stem`` tokenizer against dms's ``english`` configuration.

Measured: load and indexing rates; index sizes against the text's; latency p50/p95 of a query
mix (rare words, common words, two words, a phrase, a prefix; each alone and with a folder
subtree or tag filter; top 20 with snippets) in dms, tantivy, and the title ILIKE that
``title_contains`` runs; and known-item quality (MRR@10, recall@20) over ``--known-items``
documents, each looked for by a distinctive span of 3 to 6 of its words.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import tantivy
from sqlalchemy.engine import Engine, make_url

import dms
from bench.search_corpus import CorpusDocument, documents, paragraphs, word_frequencies
from dms import DocumentQuery, UnitOfWork, jobs
from dms.domain import NewDocument, NewFolder, NewRevision
from dms.extraction import clean, split_parts
from dms.indexing import set_text_search_config
from dms.jobs import JobState
from dms.schema import tenant as t
from dms.services import EXTRACT_REVISION, define_field, search_documents
from dms.testing import temporary_database
from dms.users import create_user, create_users_stand_in

#: Print each known item that dms does not rank first (set by hand when studying quality).
MISSES = False
#: A distinctive word occurs in at most this many of word_frequencies' 200,000 paragraphs.
RARE_PARAGRAPHS = 100
#: Words that query syntax reads as operators, never in a known-item span.
QUERY_WORDS = frozenset({"or", "and", "not"})
#: Words of a known-item span that are not stop words, at least.
MIN_CONTENT_WORDS = 2
BATCH = 2000
TOP_FOLDERS = 100
FOLDERS_PER_TOP = 100
TAGS = 50
PAGE = 20
STOP_WORDS = Path("/usr/share/postgresql/15/tsearch_data/english.stop")
RESULTS = Path(__file__).parent / "results" / "search.md"


@dataclass
class World:
    """What the loaders need to know of a tenant."""

    tenant: str
    user: uuid.UUID
    folders: list[uuid.UUID]
    tops: list[uuid.UUID]
    tags: list[uuid.UUID]
    year_field: uuid.UUID


@dataclass
class Timings:
    """Latencies in milliseconds, per query class."""

    by_class: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, ms: float) -> None:
        self.by_class.setdefault(name, []).append(ms)

    def everything(self) -> list[float]:
        return [ms for values in self.by_class.values() for ms in values]


def percentile(values: Sequence[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- loading ------------------------------------------------------------------------------


def prepare_tenant(engine: Engine, tenant: str, user: uuid.UUID, *, folders: bool) -> World:
    with UnitOfWork(engine, tenant=tenant, user_id=user) as uow:
        tops: list[uuid.UUID] = []
        leaves: list[uuid.UUID] = []
        if folders:
            tops = [
                i
                for i in uow.folders.add_many(
                    [NewFolder(name=f"Top {n}", parent_id=None) for n in range(TOP_FOLDERS)]
                )
                if i is not None
            ]
            children = [
                NewFolder(name=f"Sub {n}", parent_id=top)
                for top in tops
                for n in range(FOLDERS_PER_TOP)
            ]
            leaves = [i for i in uow.folders.add_many(children) if i is not None]
        tags = [uow.tags.add(name=f"tag{n}").id for n in range(TAGS)]
        year = define_field(uow, name="Year", field_type="int").id
        uow.commit()
    return World(tenant, user, leaves, tops, tags, year)


def load(engine: Engine, world: World, batch: list[CorpusDocument]) -> None:
    """Documents with tags, a value and a current revision whose text is extracted."""
    with UnitOfWork(engine, tenant=world.tenant, user_id=world.user) as uow:
        folder_of = (
            (lambda d: world.folders[d.folder % len(world.folders)])
            if world.folders
            else (lambda d: None)
        )
        ids = uow.documents.add_many(
            [NewDocument(title=d.title, folder_id=folder_of(d)) for d in batch]
        )
        made = [(d, i) for d, i in zip(batch, ids, strict=True) if i is not None]
        for tag_number in range(TAGS):
            tagged = [i for d, i in made if tag_number in d.tags]
            if tagged:
                uow.tags.link(tagged, [world.tags[tag_number]])
        uow.connection.execute(
            sa.insert(t.document_metadata),
            [
                {"document_id": i, "field_id": world.year_field, "field_type": "int",
                 "value_int": d.year}
                for d, i in made
            ],
        )  # fmt: skip
        revisions = uow.revisions.add_many(
            [
                NewRevision(
                    document_id=i,
                    storage_key=f"bench/{i}",
                    sha256="0" * 64,
                    size_bytes=len(d.text),
                    mime_type="text/plain",
                )
                for d, i in made
            ]
        )
        # What the extraction job stores (SearchRepository.store_text), for many at once.
        parts = {
            r: list(split_parts(clean(d.text))) for (d, _), r in zip(made, revisions, strict=True)
        }
        uow.connection.execute(
            sa.insert(t.revision_text_parts),
            [
                {"revision_id": r, "part_no": n, "body": body}
                for r, bodies in parts.items()
                for n, body in enumerate(bodies, start=1)
            ],
        )
        uow.connection.execute(
            sa.insert(t.revision_texts),
            [
                {"revision_id": r, "extractor": "text", "parts": len(bodies),
                 "chars": sum(map(len, bodies))}
                for r, bodies in parts.items()
            ],
        )  # fmt: skip
        uow.documents.set_current_revisions(
            {i: r for (_, i), r in zip(made, revisions, strict=True)}
        )
        uow.commit()


def _load_share(
    url: str, world: World, pool: list[str], count: int, share: tuple[int, int]
) -> None:
    engine = sa.create_engine(url)
    corpus = documents(pool, count, folders=10_000, tags=TAGS)
    batch: list[CorpusDocument] = []
    for document in corpus:
        if (document.number // BATCH) % share[1] != share[0]:
            continue
        batch.append(document)
        if len(batch) == BATCH:
            load(engine, world, batch)
            batch = []
    if batch:
        load(engine, world, batch)
    engine.dispose()


def load_parallel(url: str, world: World, pool: list[str], count: int, processes: int = 2) -> float:
    started = time.perf_counter()
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_load_share, args=(url, world, pool, count, (n, processes)))
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise SystemExit(f"a loader failed with exit status {worker.exitcode}")
    return time.perf_counter() - started


def vacuum(engine: Engine, tenant: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for table in ("documents", "document_search", "document_tags", "folders"):
            conn.exec_driver_sql(f'VACUUM ANALYZE "tenant_{tenant}".{table}')


def sizes(engine: Engine, tenant: str) -> dict[str, int]:
    schema = f"tenant_{tenant}"
    with engine.connect() as conn:
        text_bytes = conn.scalar(
            sa.text(f'SELECT sum(octet_length(body)) FROM "{schema}".revision_text_parts')
        )
        rows = conn.execute(
            sa.text(
                "SELECT pg_relation_size(:ix), pg_total_relation_size(:tb), pg_relation_size(:trgm)"
            ),
            {
                "ix": f"{schema}.ix_document_search_terms_filters",
                "tb": f"{schema}.document_search",
                "trgm": f"{schema}.ix_documents_title_trgm",
            },
        ).one()
    return {"text": int(text_bytes or 0), "gin": rows[0], "table": rows[1], "trgm": rows[2]}


# --- tantivy ------------------------------------------------------------------------------


def tantivy_index(pool: list[str], count: int, path: Path) -> tuple[tantivy.Index, float]:
    builder = tantivy.SchemaBuilder()
    builder.add_integer_field("number", stored=True, indexed=True, fast=True)
    builder.add_text_field("title", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
    builder.add_integer_field("top", indexed=True, fast=True)
    builder.add_integer_field("tag", indexed=True)
    schema = builder.build()
    index = tantivy.Index(schema, path=str(path))
    started = time.perf_counter()
    writer = index.writer(heap_size=1_000_000_000, num_threads=2)
    for d in documents(pool, count, folders=10_000, tags=TAGS):
        writer.add_document(
            tantivy.Document(
                number=d.number,
                title=d.title,
                body=d.text,
                top=(d.folder % 10_000) // FOLDERS_PER_TOP,
                tag=list(d.tags),
            )
        )
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index, time.perf_counter() - started


# --- queries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One query of the mix: its class, the text in dms's syntax, and its filter."""

    kind: str
    text: str
    filter: str | None  # "folder" or "tag"
    filter_value: int = 0


def query_mix(pool: list[str], per_class: int, seed: int = 5) -> list[Query]:
    rng = random.Random(seed)
    stop = set(STOP_WORDS.read_text().split()) if STOP_WORDS.exists() else set()
    freq = word_frequencies(pool)
    sampled = min(200_000, len(pool))
    words = [w for w in freq if w not in stop and w.isascii() and len(w) > 3]
    rare = [w for w in words if freq[w] == 2]
    common = sorted(words, key=lambda w: -freq[w])[: per_class * 2]
    medium = [w for w in words if 0.002 * sampled <= freq[w] <= 0.02 * sampled]
    mix: list[Query] = []
    for filtered in (None, "folder", "tag"):
        for _ in range(per_class // 2 if filtered else per_class):
            value = rng.randrange(TOP_FOLDERS if filtered == "folder" else TAGS)
            phrase = _phrase(rng, pool, stop)
            mix += [
                Query("rare", rng.choice(rare), filtered, value),
                Query("common", rng.choice(common), filtered, value),
                Query("two words", f"{rng.choice(medium)} {rng.choice(medium)}", filtered, value),
                Query("phrase", f'"{phrase}"', filtered, value),
                Query("prefix", rng.choice(medium)[:4] + "*", filtered, value),
            ]
    return mix


def _phrase(rng: random.Random, pool: list[str], stop: set[str]) -> str:
    while True:
        words = rng.choice(pool).split()
        if len(words) >= 3:
            start = rng.randrange(len(words) - 2)
            chosen = words[start : start + 3]
            if all(w.isalpha() for w in chosen) and any(w.lower() not in stop for w in chosen):
                return " ".join(chosen)


def run_dms(engine: Engine, world: World, mix: list[Query], timings: Timings) -> None:
    for query in mix:
        filters: dict[str, Any] = {}
        if query.filter == "folder":
            filters["folder_id"] = world.tops[query.filter_value]
        elif query.filter == "tag":
            filters["tags_any"] = frozenset({world.tags[query.filter_value]})
        started = time.perf_counter()
        with UnitOfWork(engine, tenant=world.tenant) as uow:
            search_documents(uow, DocumentQuery(text=query.text, **filters), limit=PAGE)
        timings.add(_label(query), (time.perf_counter() - started) * 1000)


def run_tantivy(index: tantivy.Index, mix: list[Query], timings: Timings) -> None:
    searcher = index.searcher()
    schema = index.schema
    for query in mix:
        started = time.perf_counter()
        parsed = _tantivy_query(index, query.text)
        if query.filter is not None:
            name = "top" if query.filter == "folder" else "tag"
            parsed = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, parsed),
                    (
                        tantivy.Occur.Must,
                        tantivy.Query.term_query(schema, name, query.filter_value),
                    ),
                ]
            )
        hits = searcher.search(parsed, PAGE).hits
        snippets = tantivy.SnippetGenerator.create(searcher, parsed, schema, "body")
        for _score, address in hits:
            snippets.snippet_from_doc(searcher.doc(address)).to_html()
        timings.add(_label(query), (time.perf_counter() - started) * 1000)


def _tantivy_query(index: tantivy.Index, text: str) -> tantivy.Query:
    if text.endswith("*") and '"' not in text and " " not in text:
        # Its parser takes a prefix only at the end of a phrase of two words or more.
        pattern = f"{text[:-1].lower()}.*"
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.regex_query(index.schema, field, pattern))
                for field in ("title", "body")
            ]
        )
    return index.parse_query(text, ["title", "body"], {"title": 4.0}, conjunction_by_default=True)


def run_ilike(engine: Engine, world: World, mix: list[Query], timings: Timings) -> None:
    for query in mix:
        if query.kind not in ("rare", "common") or query.filter is not None:
            continue
        started = time.perf_counter()
        with UnitOfWork(engine, tenant=world.tenant) as uow:
            search_documents(uow, DocumentQuery(title_contains=query.text), limit=PAGE)
        timings.add(f"title ILIKE: {query.kind}", (time.perf_counter() - started) * 1000)


def _label(query: Query) -> str:
    return f"{query.kind}{'' if query.filter is None else ' + ' + query.filter}"


# --- quality ------------------------------------------------------------------------------


def known_items(
    pool: list[str], count: int, wanted: int, index: tantivy.Index, seed: int = 11
) -> list[tuple[int, str]]:
    """``wanted`` (document number, span) pairs, each span's phrase found in that one document.

    A span runs across the boundary of two of the document's paragraphs: paragraphs recur in
    several documents (as boilerplate does), so a span inside one would not name one document.
    It is distinctive, as what a person remembers of a document is: two words or more that
    are not stop words, one of them in at most 1 of 2,000 paragraphs; and tantivy finds its
    phrase in exactly one document.
    """
    rng = random.Random(seed)
    stop = set(STOP_WORDS.read_text().split()) if STOP_WORDS.exists() else set()
    frequency = word_frequencies(pool)
    rare = {word for word, n in frequency.items() if n <= RARE_PARAGRAPHS}
    chosen = set(rng.sample(range(count), min(count, wanted * 40)))
    searcher = index.searcher()
    found: list[tuple[int, str]] = []
    for document in documents(pool, count, folders=10_000, tags=TAGS):
        if document.number not in chosen or len(found) >= wanted:
            continue
        span = _span(rng, document.text.split("\n\n"), stop, rare)
        if span is not None and _phrase_count(searcher, index, span) == 1:
            found.append((document.number, span))
    return found


def _phrase_count(searcher: tantivy.Searcher, index: tantivy.Index, span: str) -> int:
    result = searcher.search(index.parse_query(f'body:"{span}"'), 2, count=True)
    return int(result.count)  # set when count=True


def _span(rng: random.Random, paras: list[str], stop: set[str], rare: set[str]) -> str | None:
    if len(paras) < 2:
        return None
    for _ in range(10):
        at = rng.randrange(len(paras) - 1)
        length = rng.randint(3, 6)
        before = rng.randint(1, length - 1)
        left, right = paras[at].split()[-before:], paras[at + 1].split()[: length - before]
        words = left + right
        content = [w for w in words if w.lower() not in stop]
        if all(w.lower() in stop for w in left) or all(w.lower() in stop for w in right):
            continue  # a stop word is no part of what the index holds: the span must cross
        distinctive = any(w.lower() in rare for w in words)
        if any(w.lower() in QUERY_WORDS for w in words):
            continue  # "or" is syntax to both engines, AND and NOT to tantivy
        if len(words) == length and all(w.isalpha() for w in words) and distinctive:
            return " ".join(words) if len(content) >= MIN_CONTENT_WORDS else None
    return None


def quality_dms(engine: Engine, world: World, items: list[tuple[int, str]]) -> tuple[float, float]:
    reciprocal, recalled = 0.0, 0
    for number, span in items:
        with UnitOfWork(engine, tenant=world.tenant) as uow:
            page = search_documents(uow, DocumentQuery(text=span), limit=PAGE)
        numbers = [_number(d.title) for d in page.items]
        if MISSES and numbers[:1] != [number]:
            print(f"miss: {span!r} wanted {number}, got {numbers[:5]}")
        reciprocal += _reciprocal(numbers, number)
        recalled += number in numbers
    return reciprocal / len(items), recalled / len(items)


def quality_tantivy(index: tantivy.Index, items: list[tuple[int, str]]) -> tuple[float, float]:
    searcher = index.searcher()
    reciprocal, recalled = 0.0, 0
    for number, span in items:
        parsed = _tantivy_query(index, span)
        numbers = [searcher.doc(a)["number"][0] for _, a in searcher.search(parsed, PAGE).hits]
        reciprocal += _reciprocal(numbers, number)
        recalled += number in numbers
    return reciprocal / len(items), recalled / len(items)


def _number(title: str) -> int:
    return int(title.rsplit("(", 1)[1].rstrip(")"))


def _reciprocal(numbers: list[int], wanted: int) -> float:
    return 1 / (numbers.index(wanted) + 1) if wanted in numbers[:10] else 0.0


# --- the extraction job, end to end -------------------------------------------------------


def pipeline(
    url: str, engine: Engine, user: uuid.UUID, pool: list[str], count: int
) -> dict[str, float]:
    """``dms import`` of ``count`` files, then two ``dms worker`` processes extracting them."""
    tenant = "pipeline"
    dms.create_tenant(engine, tenant)
    set_text_search_config(engine, tenant, "english")
    root = Path(tempfile.mkdtemp(prefix="dms-bench-search-"))
    try:
        tree, blobs = root / "tree", root / "blobs"
        for d in documents(pool, count, folders=100, tags=TAGS, seed=99):
            folder = tree / f"f{d.folder:03}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"doc{d.number}.txt").write_text(d.text)
        command = [sys.executable, "-m", "dms", "--database-url", url]
        started = time.perf_counter()
        subprocess.run(
            [*command, "import", str(tree), "--tenant", tenant, "--user", str(user),
             "--blobs", str(blobs)],
            check=True, capture_output=True,
        )  # fmt: skip
        imported = time.perf_counter() - started
        started = time.perf_counter()
        workers = [
            subprocess.Popen(
                [
                    *command,
                    "worker",
                    "--kinds",
                    EXTRACT_REVISION,
                    "--concurrency",
                    "4",
                    "--blobs",
                    str(blobs),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        _wait_for_extraction(engine, tenant)
        extracted = time.perf_counter() - started
        for worker in workers:
            worker.terminate()
            worker.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"import_per_s": count / imported, "extract_per_s": count / extracted}


def _wait_for_extraction(engine: Engine, tenant: str) -> None:
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            stats = jobs.stats(conn, tenant=tenant, kind=EXTRACT_REVISION)
        if stats.total(JobState.QUEUED) + stats.total(JobState.RUNNING) == 0:
            if stats.total(JobState.DEAD):
                raise SystemExit(f"{stats.total(JobState.DEAD)} extraction jobs died")
            return
        time.sleep(0.2)
    raise SystemExit("the extraction did not finish within an hour")


# --- the run ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1/postgres")
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--tenant-documents", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=20, help="queries per class, unfiltered")
    parser.add_argument("--known-items", type=int, default=500)
    parser.add_argument("--pipeline-documents", type=int, default=20_000)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS}")
    args = parser.parse_args(argv)
    lines = run(args)
    print("\n".join(lines))
    if args.write:
        RESULTS.write_text("\n".join(lines) + "\n")


def run(args: argparse.Namespace) -> list[str]:
    server = make_url(args.url).set(drivername="postgresql+psycopg")
    out = [f"# Content search, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", ""]
    log = _logger(out)
    started = time.perf_counter()
    pool = paragraphs()
    log(f"corpus: {len(pool):,} distinct paragraphs ({time.perf_counter() - started:.0f} s)")
    with temporary_database(server, prefix="dms_bench_search") as url:
        url_text = url.render_as_string(hide_password=False)
        engine = sa.create_engine(url, pool_size=4)
        create_users_stand_in(engine)
        dms.upgrade(engine)
        with engine.begin() as conn:
            user = create_user(conn, email="bench@example.org", display_name="Bench")
            version = conn.scalar(sa.text("SHOW server_version"))
        log(f"server: PostgreSQL {version}; {multiprocessing.cpu_count()} cores")
        dms.create_tenant(engine, "big")
        set_text_search_config(engine, "big", "english")
        world = prepare_tenant(engine, "big", user, folders=True)
        seconds = load_parallel(url_text, world, pool, args.documents)
        log(f"dms: {args.documents:,} documents loaded and indexed in {seconds:.0f} s "
            f"({args.documents / seconds:,.0f} documents/s, two processes)")  # fmt: skip
        vacuum(engine, "big")
        size = sizes(engine, "big")
        with tempfile.TemporaryDirectory(prefix="dms-bench-tantivy-") as directory:
            index, tantivy_seconds = tantivy_index(pool, args.documents, Path(directory))
            tantivy_bytes = sum(p.stat().st_size for p in Path(directory).iterdir())
            log(f"tantivy: indexed in {tantivy_seconds:.0f} s "
                f"({args.documents / tantivy_seconds:,.0f} documents/s, two threads)")  # fmt: skip
            out += _sizes_table(size, tantivy_bytes)
            mix = query_mix(pool, args.per_class)
            out += _latency_section(engine, world, index, mix)
            items = known_items(pool, args.documents, args.known_items, index)
            out += _quality_section(engine, world, index, items)
        out += _moves_section(engine, world)
        out += _pipeline_section(url_text, engine, user, pool, args.pipeline_documents)
        if args.tenants:
            out += _tenants_section(url_text, engine, user, pool, args=args, mix=mix)
        engine.dispose()
    log(f"whole run: {(time.perf_counter() - started) / 60:.0f} min")
    return out


def _logger(out: list[str]) -> Callable[[str], None]:
    def log(line: str) -> None:
        print(line, flush=True)
        out.append(f"- {line}")

    return log


def _sizes_table(size: dict[str, int], tantivy_bytes: int) -> list[str]:
    mb = 1024 * 1024
    return [
        "",
        "## Sizes",
        "",
        "| what | MiB | x text |",
        "|---|---:|---:|",
        f"| extracted text (revision_text_parts bodies) | {size['text'] / mb:,.0f} | 1.00 |",
        f"| GIN index ix_document_search_terms_filters | {size['gin'] / mb:,.0f} | "
        f"{size['gin'] / size['text']:.2f} |",
        f"| document_search with its TOAST (the tsvectors) | {size['table'] / mb:,.0f} | "
        f"{size['table'] / size['text']:.2f} |",
        f"| trigram index on titles | {size['trgm'] / mb:,.0f} | "
        f"{size['trgm'] / size['text']:.2f} |",
        f"| tantivy index (stored text included) | {tantivy_bytes / mb:,.0f} | "
        f"{tantivy_bytes / size['text']:.2f} |",
    ]


def _latency_section(
    engine: Engine, world: World, index: tantivy.Index, mix: list[Query]
) -> list[str]:
    results = {"dms": Timings(), "tantivy": Timings(), "ILIKE": Timings()}
    for _warm_up in range(2):  # the second pass is the one kept
        results = {"dms": Timings(), "tantivy": Timings(), "ILIKE": Timings()}
        run_dms(engine, world, mix, results["dms"])
        run_tantivy(index, mix, results["tantivy"])
        run_ilike(engine, world, mix, results["ILIKE"])
    lines = [
        "",
        f"## Latency over the big tenant, ms (top {PAGE} with snippets and the count)",
        "",
        "| queries | n | dms p50 | dms p95 | tantivy p50 | tantivy p95 | p95 ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    dms_t, tan_t = results["dms"], results["tantivy"]
    for name, values in dms_t.by_class.items():
        other = tan_t.by_class[name]
        lines.append(_latency_row(name, values, other))
    lines.append(_latency_row("**whole mix**", dms_t.everything(), tan_t.everything()))
    for name, values in results["ILIKE"].by_class.items():
        lines.append(
            f"| {name} (today's title_contains) | {len(values)} | "
            f"{percentile(values, 50):.1f} | {percentile(values, 95):.1f} | | | |"
        )
    return lines


def _latency_row(name: str, ours: list[float], theirs: list[float]) -> str:
    return (
        f"| {name} | {len(ours)} | {percentile(ours, 50):.1f} | {percentile(ours, 95):.1f} | "
        f"{percentile(theirs, 50):.1f} | {percentile(theirs, 95):.1f} | "
        f"{percentile(ours, 95) / percentile(theirs, 95):.2f} |"
    )


def _quality_section(
    engine: Engine, world: World, index: tantivy.Index, items: list[tuple[int, str]]
) -> list[str]:
    ours = quality_dms(engine, world, items)
    theirs = quality_tantivy(index, items)
    return [
        "",
        f"## Known-item quality ({len(items)} documents, a unique span of 3-6 words each)",
        "",
        "| engine | MRR@10 | recall@20 |",
        "|---|---:|---:|",
        f"| dms | {ours[0]:.3f} | {ours[1]:.3f} |",
        f"| tantivy | {theirs[0]:.3f} | {theirs[1]:.3f} |",
    ]


def _moves_section(engine: Engine, world: World) -> list[str]:
    """Moving a top folder (1 % of the documents) rewrites their index rows' filters."""
    moved, target = world.tops[0], world.tops[1]
    with engine.connect() as conn:
        count = conn.scalar(
            sa.text(
                f'SELECT count(*) FROM "tenant_{world.tenant}".documents d '
                f'JOIN "tenant_{world.tenant}".folders f ON f.id = d.folder_id '
                "WHERE f.parent_id = :top"
            ),
            {"top": moved},
        )
    seconds = []
    for parent in (target, None):  # there and back: the query mix's folders stay as they were
        started = time.perf_counter()
        with UnitOfWork(engine, tenant=world.tenant, user_id=world.user) as uow:
            uow.folders.move(moved, parent_id=parent)
            uow.commit()
        seconds.append(time.perf_counter() - started)
    return [
        "",
        "## Moving a folder",
        "",
        f"- a top folder of {count:,} documents (100 subfolders) moved under another and back: "
        f"{seconds[0]:.2f} s and {seconds[1]:.2f} s "
        f"({2 * int(count or 0) / sum(seconds):,.0f} documents/s), in the moving transaction",
    ]


def _pipeline_section(
    url: str, engine: Engine, user: uuid.UUID, pool: list[str], count: int
) -> list[str]:
    rates = pipeline(url, engine, user, pool, count)
    return [
        "",
        f"## End to end: dms import of {count:,} text files, then revision.extract",
        "",
        f"- import (documents, revisions, blobs, jobs): {rates['import_per_s']:,.0f} files/s",
        f"- extraction and index, two `dms worker` processes of 4 threads: "
        f"{rates['extract_per_s']:,.0f} documents/s",
    ]


def _tenants_section(
    url: str, engine: Engine, user: uuid.UUID, pool: list[str], *, args: argparse.Namespace,
    mix: list[Query],
) -> list[str]:  # fmt: skip
    names = [f"t{n:04}" for n in range(args.tenants)]
    started = time.perf_counter()
    dms.create_tenants(engine, names, jobs=2)
    worlds = [prepare_tenant(engine, name, user, folders=False) for name in names]
    created = time.perf_counter() - started
    started = time.perf_counter()
    _load_tenants(url, worlds, pool, args.tenant_documents)
    loaded = time.perf_counter() - started
    rng = random.Random(3)
    timings = Timings()
    unfiltered = [q for q in mix if q.filter is None]
    for _warm_up in range(2):
        timings = Timings()
        for query in unfiltered:
            world = worlds[rng.randrange(len(worlds))]
            run_dms(engine, world, [query], timings)
    values = timings.everything()
    return [
        "",
        f"## {args.tenants:,} tenants of {args.tenant_documents:,} documents",
        "",
        f"- tenants created and prepared in {created:.0f} s; documents loaded in {loaded:.0f} s "
        f"({args.tenants * args.tenant_documents / loaded:,.0f} documents/s)",
        f"- unfiltered mix, each query on a random tenant: p50 {percentile(values, 50):.1f} ms, "
        f"p95 {percentile(values, 95):.1f} ms ({len(values)} queries)",
    ]


def _load_tenants(url: str, worlds: list[World], pool: list[str], count: int) -> None:
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_load_tenant_share, args=(url, worlds[n::2], pool, count))
        for n in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def _load_tenant_share(url: str, worlds: list[World], pool: list[str], count: int) -> None:
    engine = sa.create_engine(url)
    for number, world in enumerate(worlds):
        batch = list(documents(pool, count, folders=1, tags=TAGS, seed=1000 + number))
        load(engine, world, batch)
    engine.dispose()


if __name__ == "__main__":
    main()
