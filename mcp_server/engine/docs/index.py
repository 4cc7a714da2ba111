"""Full-text search over the cache: an SQLite FTS5 table of sections split at Markdown headings, bm25."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .installed import aliases_of
from .models import SNIPPET_MAX_CHARS, DocHit, Manifest, PageEntry, PageSource

INDEX_FILE = "index.sqlite"

# bm25 column weights: an API name or title that matches says more than a word deep in a tutorial.
_WEIGHTS = {"names": 10.0, "title": 5.0, "heading": 3.0, "body": 1.0}
# A section whose names hold the query exactly ("tl.dot", not "tl.dot_scaled") goes first.
_EXACT_NAME_BONUS = 100.0
# A section holding every query word outranks one holding only some (bm25 scores here stay below ~40).
_ALL_TERMS_BONUS = 50.0
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DOTTED_NAME = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+")
_TERM = re.compile(r"\w+(?:[.\-]\w+)*", re.UNICODE)
# Words that only dilute a natural-language query ("how do I autotune a matmul").
_STOPWORDS = frozenset(
    """
    a an and are as at be by can do does for from how i in is it my of on or the this to use what when
    where which why with
    """.split()  # noqa: SIM905 - a word list reads better as text
)


@dataclass(frozen=True)
class Section:
    heading: str
    anchor: str
    body: str
    names: str


def slug(text: str) -> str:
    """Anchor of a heading, the way Sphinx and GitHub derive ids: lower case, runs of others → '-'."""
    return re.sub(r"[^\w.]+", "-", text.strip().lower()).strip("-") or "section"


def split_sections(markdown: str, title: str, page_names: Iterable[str] = ()) -> list[Section]:
    """Sections at headings (outside code fences); text before the first heading belongs to the title."""
    chunks: list[tuple[str, list[str]]] = [(title, [])]
    in_fence = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(line)
        if m:
            chunks.append((m.group(2).strip(), []))
        else:
            chunks[-1][1].append(line)
    sections: list[Section] = []
    for i, (heading, lines) in enumerate(chunks):
        body = "\n".join(lines).strip()
        if i == 0 and not body and len(chunks) > 1:
            continue
        names = set() if sections else set(page_names)  # the page's names go to its first section
        token = _DOTTED_NAME.match(heading)
        if token:
            names.update(aliases_of(token.group(0)))
        sections.append(Section(heading, slug(heading), body, " ".join(sorted(names))))
    return sections


def page_names(entry: PageEntry) -> tuple[str, ...]:
    """API names a page documents: its qualname, or a dotted title such as 'triton.language.load'."""
    if entry.qualname:
        return aliases_of(entry.qualname)
    m = _DOTTED_NAME.match(entry.title)
    return aliases_of(m.group(0)) if m and m.group(0) == entry.title.strip() else ()


def build_index(cache_dir: Path, manifest: Manifest) -> int:
    """(Re)build ``index.sqlite`` from the pages in the manifest; returns the number of sections."""
    tmp = cache_dir / f".{INDEX_FILE}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    count = 0
    try:
        con.execute(
            "CREATE VIRTUAL TABLE sections USING fts5("
            "names, title, heading, body, page UNINDEXED, anchor UNINDEXED, url UNINDEXED, "
            "source UNINDEXED, version UNINDEXED, note UNINDEXED, tokenize = 'porter unicode61')"
        )
        con.execute("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT)")
        rows = []
        for entry in manifest.pages.values():
            path = cache_dir / entry.path
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8")
            for sec in split_sections(text, entry.title, page_names(entry)):
                rows.append(
                    (
                        sec.names,
                        entry.title,
                        sec.heading,
                        sec.body,
                        entry.path,
                        sec.anchor,
                        entry.url,
                        entry.source.value,
                        entry.triton_version,
                        entry.version_note,
                    )
                )
        con.executemany("INSERT INTO sections VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        count = len(rows)
        con.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("installed_triton", manifest.installed_triton), ("sections", str(count))],
        )
        con.commit()
    finally:
        con.close()
    os.replace(tmp, cache_dir / INDEX_FILE)  # readers see the old index or the new one, never half
    return count


def fts_terms(query: str) -> list[str]:
    """Query words as quoted FTS5 strings: syntax characters (" * : ^ ( ) - NEAR AND) lose their power."""
    terms = _TERM.findall(query)
    kept = [t for t in terms if t.lower() not in _STOPWORDS]
    return ['"' + t.replace('"', '""') + '"' for t in (kept or terms)]


def query_index(cache_dir: Path, query: str, k: int) -> list[DocHit]:
    """Best ``k`` sections for ``query`` (bm25), with a bonus for a section naming the exact API."""
    terms = fts_terms(query)
    if not terms or k <= 0:
        return []
    con = sqlite3.connect(f"file:{cache_dir / INDEX_FILE}?mode=ro", uri=True)
    try:
        # Sections with every term; when they are fewer than k, sections with any term fill the places.
        rows = [(row, _ALL_TERMS_BONUS) for row in _run(con, " ".join(terms), k * 4)]
        if len(rows) < k and len(terms) > 1:
            have = {(r[3], r[4]) for r, _ in rows}
            rows += [(r, 0.0) for r in _run(con, " OR ".join(terms), k * 4) if (r[3], r[4]) not in have]
    finally:
        con.close()
    wanted = set(_TERM.findall(query)) | {query.strip()}
    hits = []
    for row, bonus in rows:
        names, title, heading, page, anchor, url, source, version, note, snippet, rank = row
        score = -float(rank) + bonus + (_EXACT_NAME_BONUS if wanted & set(names.split()) else 0.0)
        hits.append(
            DocHit(
                page=page,
                title=title,
                heading=heading,
                anchor=anchor,
                url=f"{url}#{anchor}" if url and heading != title else url,
                snippet=_bound(snippet),
                score=round(score, 4),
                source=PageSource(source),
                triton_version=version,
                version_note=note,
            )
        )
    hits.sort(key=lambda h: h.score, reverse=True)
    return hits[:k]


def _run(con: sqlite3.Connection, match: str, limit: int) -> Iterator[tuple]:
    weights = ", ".join(str(w) for w in _WEIGHTS.values())
    sql = (
        "SELECT names, title, heading, page, anchor, url, source, version, note, "
        "snippet(sections, 3, '**', '**', ' … ', 32), "
        f"bm25(sections, {weights}) AS rank "
        "FROM sections WHERE sections MATCH ? ORDER BY rank LIMIT ?"
    )
    try:
        yield from con.execute(sql, (match, limit))
    except sqlite3.OperationalError:
        return  # a query FTS5 still cannot parse finds nothing rather than failing the tool


def _bound(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= SNIPPET_MAX_CHARS else text[: SNIPPET_MAX_CHARS - 1].rstrip() + "…"


def index_version(cache_dir: Path) -> str | None:
    """Installed-Triton version the index was built with, or None when there is no readable index."""
    path = cache_dir / INDEX_FILE
    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'installed_triton'").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return None
    return row[0] if row else None
