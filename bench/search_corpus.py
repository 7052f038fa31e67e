"""The content-search benchmark's corpus and queries, from real text on this machine.

Paragraphs come from the operating system's licence texts (``/usr/share/common-licenses``), its
documentation tree (``/usr/share/doc``: READMEs, changelogs, copyright files, gzip or not), its
manual pages (``/usr/share/man``, groff source with the markup removed) and the docstrings of
Python's standard library. Nothing is generated: a document is a run of such paragraphs, picked
by a seeded random generator, so that two runs build the same corpus. A paragraph appears in
several documents (there are fewer paragraphs than document slots), as boilerplate does in a
real archive.
"""

from __future__ import annotations

import gzip
import inspect
import pkgutil
import random
import re
import sys
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: A paragraph is kept with this many words.
MIN_WORDS, MAX_WORDS = 8, 250
_WORD = re.compile(r"[^\W\d_]{2,}")
_GROFF_ESCAPE = re.compile(r"\\(f[BIRP]|f\(..|\*\(..|\(..|[-&e|^0 ]|s[+-]?\d)")
_SPACE = re.compile(r"\s+")
#: Standard modules that do something when imported.
_RUN_ON_IMPORT = frozenset({"antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle"})


@dataclass(frozen=True)
class CorpusDocument:
    """One document of the corpus: its number, title, text, folder, tags and year."""

    number: int
    title: str
    text: str
    folder: int
    tags: tuple[int, ...]
    year: int


def paragraphs(limit_files: int | None = None) -> list[str]:
    """Every distinct paragraph of the machine's texts, in a stable order."""
    found: dict[str, None] = {}
    for text in _texts(limit_files):
        for block in re.split(r"\n\s*\n", text):
            paragraph = _SPACE.sub(" ", block).strip()
            words = len(paragraph.split())
            if MIN_WORDS <= words <= MAX_WORDS and _mostly_words(paragraph):
                found.setdefault(paragraph, None)
    return list(found)


def _mostly_words(paragraph: str) -> bool:
    # Tables, hex dumps and option lists are not prose anyone searches.
    return len(_WORD.findall(paragraph)) >= 0.6 * len(paragraph.split())


def _texts(limit_files: int | None) -> Iterator[str]:
    files = [
        *sorted(Path("/usr/share/common-licenses").glob("*")),
        *sorted(p for p in Path("/usr/share/doc").rglob("*") if p.is_file()),
        *sorted(Path("/usr/share/man").rglob("*.gz")),
    ]
    for path in files[:limit_files]:
        text = _read(path)
        if text:
            yield _without_groff(text) if "/man/" in str(path) else text
    yield from _docstrings()


def _read(path: Path) -> str | None:
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


def _without_groff(source: str) -> str:
    lines = []
    for line in source.splitlines():
        if line.startswith((".", "'")):
            lines.append("" if line[:3] in (".PP", ".SH", ".SS", ".TP", ".LP", ".P ") else " ")
            continue
        lines.append(_GROFF_ESCAPE.sub("", line))
    return "\n".join(lines)


def _docstrings() -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module_name in sorted(sys.stdlib_module_names):
            if module_name.startswith("_") or module_name in _RUN_ON_IMPORT:
                continue
            try:
                module = __import__(module_name)
            except Exception:  # noqa: S112 (a module that does not import here has no docs here)
                continue
            yield from _docs_of(module)
            for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
                if info.name.startswith("_"):  # __main__ runs a program when imported
                    continue
                try:
                    sub = __import__(f"{module_name}.{info.name}", fromlist=["_"])
                except Exception:  # noqa: S112
                    continue
                yield from _docs_of(sub)


def _docs_of(module: object) -> Iterator[str]:
    doc = inspect.getdoc(module)
    if doc:
        yield doc
    for _, member in inspect.getmembers(module):
        if inspect.isclass(member) or inspect.isfunction(member):
            doc = inspect.getdoc(member)
            if doc:
                yield doc


def documents(
    pool: list[str], count: int, *, folders: int, tags: int, seed: int = 24
) -> Iterator[CorpusDocument]:
    """``count`` documents of one to four paragraphs of ``pool`` each, in ``folders`` folders."""
    rng = random.Random(seed)
    for number in range(count):
        text = "\n\n".join(rng.choice(pool) for _ in range(rng.choice((1, 1, 2, 2, 3, 4))))
        title = " ".join(text.split()[: rng.randint(3, 8)])[:120]
        chosen = tuple(sorted(rng.sample(range(tags), rng.choice((0, 1, 1, 2)))))
        yield CorpusDocument(
            number=number,
            title=f"{title} ({number})",
            text=text,
            folder=number % folders,
            tags=chosen,
            year=1990 + number % 37,
        )


def word_frequencies(pool: list[str], sample: int = 200_000, seed: int = 7) -> Counter[str]:
    """In how many of a sample of paragraphs each lower-case word occurs."""
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    for paragraph in rng.sample(pool, min(sample, len(pool))):
        counts.update({word.lower() for word in _WORD.findall(paragraph)})
    return counts


if __name__ == "__main__":
    found = paragraphs()
    chars = sum(len(p) for p in found)
    print(f"{len(found):,} paragraphs, {chars / 1e6:.1f} M characters")
