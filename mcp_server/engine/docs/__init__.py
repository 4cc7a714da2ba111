"""The Triton docs cache: fetch the docs that matter, fall back to the installed Triton, search with FTS5.

Public functions (plain, typed; the CLI ``ptt docs sync|search`` and the MCP tool ``search_triton_docs`` are
thin adapters over them):

- :func:`sync` / :func:`sync_async` — fetch the web docs into the cache, add the installed-Triton API
  reference, rebuild the search index; returns a :class:`SyncReport`.
- :func:`build_offline` — the installed-Triton reference and the index only, no network.
- :func:`search` — bm25 search over sections; builds the offline cache first when none exists.
- :func:`default_cache_dir`, :func:`load_manifest`.

Cache layout (``docs/.triton_docs/`` in a checkout): ``web/…/*.md`` fetched pages, ``installed/*.md`` pages
generated from the installed package, ``manifest.json`` (one entry per page: url, fetched_at, etag,
last_modified, triton_version, version_note, source, path) and ``index.sqlite`` (FTS5).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urljoin

from pydantic import ValidationError

from mcp_server.engine.errors import UsageError

from .fetch import WEB_DIR, ClientFactory, DocPage, FetchOutcome, PageFetcher, default_client_factory, now_iso
from .index import INDEX_FILE, build_index, index_version, query_index
from .installed import INSTALLED_DIR, build_pages, triton_version
from .models import DocHit, DocSearchResult, Manifest, PageEntry, PageFailure, PageSource, SyncReport

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_PAGES",
    "INDEX_FILE",
    "MANIFEST_FILE",
    "DocHit",
    "DocPage",
    "DocSearchResult",
    "Manifest",
    "PageEntry",
    "PageFailure",
    "PageSource",
    "SyncReport",
    "build_offline",
    "default_cache_dir",
    "load_manifest",
    "search",
    "sync",
    "sync_async",
]

DEFAULT_BASE_URL = "https://triton-lang.org/main/"
# The pages an agent needs while writing kernels. Index pages are followed one level to the per-op
# pages they link (python-api/generated/…) and to each tutorial.
DEFAULT_PAGES: tuple[DocPage, ...] = (
    DocPage("python-api/triton.language.html", follow="python-api/generated/"),
    DocPage("python-api/triton.html", follow="python-api/generated/"),
    DocPage("python-api/triton.testing.html", follow="python-api/generated/"),
    DocPage("python-api/triton-semantics.html"),
    DocPage("getting-started/tutorials/index.html", follow="getting-started/tutorials/"),
    DocPage("programming-guide/chapter-1/introduction.html"),
    DocPage("programming-guide/chapter-3/debugging.html"),
)
MANIFEST_FILE = "manifest.json"
ENV_CACHE_DIR = "PTT_TRITON_DOCS_DIR"


def default_cache_dir() -> Path:
    """``$PTT_TRITON_DOCS_DIR``, else ``docs/.triton_docs`` of this checkout, else a per-user cache."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[3] / "docs" / ".triton_docs"
    if (checkout / "README.md").is_file():
        return checkout
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytorch-to-triton" / "triton_docs"


def load_manifest(cache_dir: Path) -> Manifest | None:
    """The cache's manifest, or None when there is none (or it cannot be read: it is then rebuilt)."""
    path = Path(cache_dir) / MANIFEST_FILE
    try:
        return Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError):
        return None


async def sync_async(
    dest: Path | None = None,
    *,
    base_url: str = DEFAULT_BASE_URL,
    pages: Sequence[DocPage] = DEFAULT_PAGES,
    client_factory: ClientFactory | None = None,
    concurrency: int = 4,
    timeout_s: float = 20.0,
    retries: int = 3,
    backoff_s: float = 0.5,
    include_installed: bool = True,
    max_pages: int = 800,
) -> SyncReport:
    """Fetch the Triton docs into ``dest`` and rebuild the search index.

    Pages already cached are requested conditionally (If-None-Match / If-Modified-Since); a 304 keeps
    them. Connection errors, timeouts, 5xx and 429 are retried ``retries`` times with exponential
    backoff from ``backoff_s``; a failed page keeps its previous copy. The API reference of the installed
    Triton is always written too (``include_installed``), and whatever the flag, when no web page could
    be fetched, so the cache always documents the version that runs.

    Adapters show: ``ok``, ``offline``, how many pages were fetched / kept / failed (with each failure's
    url and error), ``version_notes`` (web pages documenting another Triton than the installed one) and
    ``notes``. Call from async code (the MCP server); :func:`sync` is the blocking form for the CLI.
    """
    started = time.monotonic()
    dest = Path(dest) if dest is not None else default_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    base_url = base_url if base_url.endswith("/") else base_url + "/"
    installed = triton_version()
    old = load_manifest(dest)
    previous = dict(old.pages) if old else {}
    factory = client_factory or default_client_factory(timeout_s, concurrency)

    outcomes: list[FetchOutcome] = []
    notes: list[str] = []
    async with factory() as client:
        fetcher = PageFetcher(
            client,
            dest,
            base_url,
            installed,
            previous,
            concurrency=concurrency,
            retries=retries,
            backoff_s=backoff_s,
        )
        seeds = [(urljoin(base_url, p.path), p.follow) for p in pages]
        first = await asyncio.gather(*(fetcher.fetch(url, follow) for url, follow in seeds))
        outcomes.extend(first)
        seen = {url for url, _ in seeds}
        discovered: list[str] = []
        for (_, follow), outcome in zip(seeds, first, strict=True):
            if follow and outcome.entry is not None:
                for link in outcome.entry.links:
                    if link not in seen:
                        seen.add(link)
                        discovered.append(link)
        if len(discovered) > max_pages:
            notes.append(f"{len(discovered) - max_pages} linked pages left out (max_pages={max_pages})")
            discovered = discovered[:max_pages]
        outcomes.extend(await asyncio.gather(*(fetcher.fetch(url, None) for url in discovered)))

    entries: dict[str, PageEntry] = {}
    for outcome in outcomes:
        if outcome.entry is not None:
            entries[outcome.entry.path] = outcome.entry
    failed = [o.failure for o in outcomes if o.failure is not None]
    web_ok = any(o.entry is not None and o.failure is None for o in outcomes)
    _remove_orphans(dest, WEB_DIR, keep=set(entries))

    installed_count = 0
    if include_installed or not web_ok:
        installed_entries = _write_installed(dest)
        entries.update(installed_entries)
        installed_count = len(installed_entries)
    else:
        _remove_orphans(dest, INSTALLED_DIR, keep=set())

    manifest = Manifest(installed_triton=installed, base_url=base_url, updated_at=now_iso(), pages=entries)
    _write_manifest(dest, manifest)
    sections = build_index(dest, manifest)

    if not web_ok:
        first_error = failed[0].error if failed else "no pages requested"
        notes.append(
            f"No web page could be fetched ({first_error}); the cache holds the API reference of the "
            f"installed Triton {installed}, built from its signatures and docstrings."
        )
    elif failed:
        notes.append(f"{len(failed)} page(s) failed; a previous copy, where there was one, is kept.")
    counts = Counter(e.version_note for e in entries.values() if e.source is PageSource.web and e.version_note)
    version_notes = [f"{n} page(s): {note}" for note, n in counts.most_common()]
    return SyncReport(
        ok=sections > 0,
        dest=str(dest),
        installed_triton=installed,
        base_url=base_url,
        offline=not web_ok,
        fetched=sorted(o.entry.path for o in outcomes if o.entry and not o.failure and not o.not_modified),
        not_modified=sorted(o.entry.path for o in outcomes if o.entry and o.not_modified),
        failed=failed,
        installed_pages=installed_count,
        sections_indexed=sections,
        version_notes=version_notes,
        notes=notes,
        duration_s=round(time.monotonic() - started, 3),
    )


def sync(
    dest: Path | None = None,
    *,
    base_url: str = DEFAULT_BASE_URL,
    pages: Sequence[DocPage] = DEFAULT_PAGES,
    client_factory: ClientFactory | None = None,
    concurrency: int = 4,
    timeout_s: float = 20.0,
    retries: int = 3,
    backoff_s: float = 0.5,
    include_installed: bool = True,
    max_pages: int = 800,
) -> SyncReport:
    """Blocking form of :func:`sync_async` (same arguments, same report), for the CLI and scripts.

    Safe with or without a running event loop: inside one, the sync runs on a worker thread.
    """

    def run() -> SyncReport:
        return asyncio.run(
            sync_async(
                dest,
                base_url=base_url,
                pages=pages,
                client_factory=client_factory,
                concurrency=concurrency,
                timeout_s=timeout_s,
                retries=retries,
                backoff_s=backoff_s,
                include_installed=include_installed,
                max_pages=max_pages,
            )
        )

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with ThreadPoolExecutor(max_workers=1) as pool:  # an async caller: its loop cannot be re-entered
        return pool.submit(run).result()


def build_offline(dest: Path | None = None) -> SyncReport:
    """Write the installed-Triton API reference and rebuild the index, without touching the network.

    Web pages already in the cache stay. Adapters show ``installed_pages`` and ``notes``.
    """
    started = time.monotonic()
    dest = Path(dest) if dest is not None else default_cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    installed = triton_version()
    old = load_manifest(dest)
    entries = {
        path: e
        for path, e in (old.pages.items() if old else ())
        if e.source is PageSource.web and (dest / e.path).is_file()
    }
    installed_entries = _write_installed(dest)
    entries.update(installed_entries)
    manifest = Manifest(
        installed_triton=installed,
        base_url=old.base_url if old else None,
        updated_at=now_iso(),
        pages=entries,
    )
    _write_manifest(dest, manifest)
    sections = build_index(dest, manifest)
    return SyncReport(
        ok=sections > 0,
        dest=str(dest),
        installed_triton=installed,
        base_url=manifest.base_url or "",
        offline=True,
        installed_pages=len(installed_entries),
        sections_indexed=sections,
        notes=[f"Built the API reference of the installed Triton {installed} (no network used)."],
        duration_s=round(time.monotonic() - started, 3),
    )


def search(query: str, k: int = 8, *, cache_dir: Path | None = None) -> DocSearchResult:
    """The ``k`` best sections of the cached Triton docs for ``query`` (bm25 over FTS5), best first.

    Any text is a valid query: FTS syntax characters are neutralised. API names work as written in
    kernels (``tl.load``, ``libdevice.erf``, ``triton.autotune``) and an exact name ranks its own page
    first. With no cache, the offline reference is built from the installed Triton first
    (``built_cache=True`` and a note say so); when the installed Triton changed since the cache was
    written, its reference is rebuilt. Adapters show each hit's heading, page (or url), source,
    triton_version / version_note and snippet, then the notes.
    """
    if not query.strip():
        raise UsageError("The docs search needs a query: an API name (tl.load, triton.autotune) or a few words.")
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    k = max(1, min(int(k), 50))
    notes: list[str] = []
    built = False
    installed = triton_version()
    manifest = load_manifest(cache_dir)
    if manifest is None or not manifest.pages:
        build_offline(cache_dir)
        built = True
        notes.append(
            f"No docs cache at {cache_dir}: built the API reference of the installed Triton {installed} "
            "first. `ptt docs sync` adds the tutorials, semantics and debugging guides from the web."
        )
    elif manifest.installed_triton != installed:
        build_offline(cache_dir)
        notes.append(f"Installed Triton changed ({manifest.installed_triton} → {installed}): rebuilt its reference.")
    elif index_version(cache_dir) is None:
        build_index(cache_dir, manifest)
        notes.append("The search index was missing or unreadable: rebuilt it.")
    hits = query_index(cache_dir, query, k)
    if not hits:
        notes.append("No section matched; try an API name (tl.load, triton.autotune) or fewer words.")
    return DocSearchResult(ok=True, query=query, hits=hits, cache_dir=str(cache_dir), built_cache=built, notes=notes)


def _write_installed(dest: Path) -> dict[str, PageEntry]:
    """Regenerate ``installed/`` (removing pages of names the installed Triton no longer has)."""
    root = dest / INSTALLED_DIR
    if root.is_dir():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    version = triton_version()
    stamp = now_iso()
    entries: dict[str, PageEntry] = {}
    for page in build_pages():
        data = page.markdown.encode("utf-8")
        (dest / page.path).write_bytes(data)
        entries[page.path] = PageEntry(
            path=page.path,
            qualname=page.qualname,
            title=page.title,
            source=PageSource.installed,
            fetched_at=stamp,
            triton_version=version,
            sha256=hashlib.sha256(data).hexdigest(),
        )
    return entries


def _write_manifest(dest: Path, manifest: Manifest) -> None:
    tmp = dest / f".{MANIFEST_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest.model_dump(mode="json"), indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(dest / MANIFEST_FILE)


def _remove_orphans(dest: Path, subdir: str, keep: set[str]) -> None:
    """Delete cached .md files under ``subdir`` that the new manifest no longer lists."""
    root = dest / subdir
    if not root.is_dir():
        return
    for path in root.rglob("*.md"):
        if path.relative_to(dest).as_posix() not in keep:
            path.unlink()
