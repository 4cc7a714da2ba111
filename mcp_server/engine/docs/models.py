"""Pydantic models of the Triton docs cache: its manifest, a sync's report, and search results."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field

# Longest snippet a search hit carries; an agent reads many hits, so each stays short.
SNIPPET_MAX_CHARS = 400


class PageSource(str, Enum):
    web = "web"  # fetched from the Triton docs site
    installed = "installed-triton"  # generated from the signatures and docstrings of the installed package


class PageEntry(BaseModel):
    """One Markdown page of the cache, as recorded in ``manifest.json``."""

    path: str = Field(description="Path of the .md file, relative to the cache directory (POSIX).")
    url: str | None = Field(default=None, description="Web address; None for pages built from the package.")
    qualname: str | None = Field(default=None, description="Python name documented (installed pages).")
    title: str
    source: PageSource
    fetched_at: str = Field(description="When the content was last written (ISO 8601, UTC).")
    checked_at: str | None = Field(default=None, description="Last conditional request answered 304.")
    etag: str | None = None
    last_modified: str | None = None
    triton_version: str | None = Field(
        default=None, description="Triton version the page documents ('main' for the web's main branch)."
    )
    version_note: str | None = Field(
        default=None, description="Set when the page may not describe the installed Triton."
    )
    links: list[str] = Field(default_factory=list, description="Doc pages an index page links to.")
    sha256: str = ""


class Manifest(BaseModel):
    schema_version: int = 1
    installed_triton: str
    base_url: str | None = None
    updated_at: str
    pages: dict[str, PageEntry] = Field(default_factory=dict)


class PageFailure(BaseModel):
    url: str
    error: str
    status: int | None = None
    attempts: int = 1


class SyncReport(BaseModel):
    """What ``sync`` did. Adapters show: ok, counts, failures, version notes and notes."""

    ok: bool = Field(description="The cache is usable: it has pages and a search index.")
    dest: str
    installed_triton: str
    base_url: str
    offline: bool = Field(description="No web page could be fetched; only the installed reference is there.")
    fetched: list[str] = Field(default_factory=list, description="Pages written from fresh downloads.")
    not_modified: list[str] = Field(default_factory=list, description="Pages kept after a 304.")
    failed: list[PageFailure] = Field(default_factory=list)
    installed_pages: int = 0
    sections_indexed: int = 0
    version_notes: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    duration_s: float = 0.0


class DocHit(BaseModel):
    page: str = Field(description="Path of the page in the cache directory.")
    title: str
    heading: str
    anchor: str
    url: str | None = Field(default=None, description="Web address with anchor; None for installed pages.")
    snippet: str = Field(max_length=SNIPPET_MAX_CHARS + 40)
    score: float = Field(
        description="Higher is better: negated bm25, +50 with every query word, +100 for the exact API name."
    )
    source: PageSource
    triton_version: str | None = None
    version_note: str | None = None


class DocSearchResult(BaseModel):
    """Search hits, best first. Adapters show each hit's heading, page, source and snippet, then notes."""

    ok: bool
    query: str
    hits: list[DocHit] = Field(default_factory=list)
    cache_dir: str
    built_cache: bool = Field(
        default=False, description="No cache existed, so the offline reference was built before searching."
    )
    notes: list[str] = Field(default_factory=list)
