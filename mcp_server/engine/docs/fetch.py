"""Fetching Triton's doc pages over HTTP: bounded concurrency, retries with backoff, conditional requests."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urljoin

import httpx

from .htmlmd import convert, version_note
from .models import PageEntry, PageFailure, PageSource

WEB_DIR = "web"
# Longest wait honoured from a Retry-After header; a docs sync should not stall for minutes.
_MAX_RETRY_AFTER_S = 10.0

ClientFactory = Callable[[], httpx.AsyncClient]


@dataclass(frozen=True)
class DocPage:
    """A page to fetch, relative to the base URL; ``follow`` fetches the pages it links under that prefix."""

    path: str
    follow: str | None = None


@dataclass
class FetchOutcome:
    url: str
    entry: PageEntry | None = None  # written or kept
    not_modified: bool = False
    failure: PageFailure | None = None


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def url_to_path(url: str, base_url: str) -> str | None:
    """Cache path of a page under the base URL (``web/python-api/triton.language.md``); None outside it."""
    if not url.startswith(base_url):
        return None
    rel = url[len(base_url) :].split("#", 1)[0].split("?", 1)[0]
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") or p.startswith(".") for p in parts):
        return None
    name = parts[-1]
    parts[-1] = (name[: -len(".html")] if name.endswith(".html") else name) + ".md"
    return "/".join([WEB_DIR, *parts])


class PageFetcher:
    """Fetches pages into ``dest``, reusing ``previous`` entries for conditional requests."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        dest: Path,
        base_url: str,
        installed_version: str,
        previous: dict[str, PageEntry],
        *,
        concurrency: int,
        retries: int,
        backoff_s: float,
    ) -> None:
        self.client = client
        self.dest = dest
        self.base_url = base_url
        self.installed_version = installed_version
        self.previous = {e.url: e for e in previous.values() if e.url}
        self.sem = asyncio.Semaphore(max(1, concurrency))
        self.retries = max(0, retries)
        self.backoff_s = backoff_s

    async def fetch(self, url: str, follow: str | None) -> FetchOutcome:
        path = url_to_path(url, self.base_url)
        if path is None:
            return FetchOutcome(url, failure=PageFailure(url=url, error="outside the docs base URL"))
        old = self.previous.get(url)
        headers = {}
        if old is not None and (self.dest / old.path).is_file():
            if old.etag:
                headers["If-None-Match"] = old.etag
            if old.last_modified:
                headers["If-Modified-Since"] = old.last_modified
        async with self.sem:
            response, failure = await self._get(url, headers)
        if failure is not None:
            return FetchOutcome(url, entry=old, failure=failure)
        assert response is not None
        if response.status_code == 304:
            if old is None:
                failure = PageFailure(url=url, error="HTTP 304 for a page not in the cache", status=304)
                return FetchOutcome(url, failure=failure)
            kept = old.model_copy(update={"checked_at": now_iso()})
            return FetchOutcome(url, entry=kept, not_modified=True)
        prefix = urljoin(self.base_url, follow) if follow else None
        page = convert(response.text, url, follow=prefix)
        data = page.markdown.encode("utf-8")
        target = self.dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".md.tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
        entry = PageEntry(
            path=path,
            url=url,
            title=page.title,
            source=PageSource.web,
            fetched_at=now_iso(),
            etag=response.headers.get("etag"),
            last_modified=response.headers.get("last-modified"),
            triton_version=page.version,
            version_note=version_note(page.version, self.installed_version),
            links=page.links,
            sha256=hashlib.sha256(data).hexdigest(),
        )
        return FetchOutcome(url, entry=entry)

    async def _get(self, url: str, headers: dict[str, str]) -> tuple[httpx.Response | None, PageFailure | None]:
        """GET with retries on connection errors, timeouts, 5xx and 429; other 4xx fail at once."""
        error = ""
        status: int | None = None
        for attempt in range(self.retries + 1):
            delay = self.backoff_s * (2**attempt)
            try:
                response = await self.client.get(url, headers=headers)
            except httpx.TransportError as exc:  # connect errors, timeouts, broken connections
                error, status = f"{type(exc).__name__}: {exc}".strip(), None
            else:
                status = response.status_code
                if status < 400:  # 2xx, and 304 for a conditional request
                    return response, None
                error = f"HTTP {status}"
                if status != 429 and status < 500:
                    return None, PageFailure(url=url, error=error, status=status, attempts=attempt + 1)
                delay = max(delay, _retry_after(response))
            if attempt < self.retries:
                await asyncio.sleep(delay)
        return None, PageFailure(url=url, error=error, status=status, attempts=self.retries + 1)


def _retry_after(response: httpx.Response) -> float:
    value = response.headers.get("retry-after", "")
    try:
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0


def default_client_factory(timeout_s: float, concurrency: int) -> ClientFactory:
    def make() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=True,
            limits=httpx.Limits(max_connections=max(1, concurrency)),
            headers={"User-Agent": "pytorch-to-triton docs sync"},
        )

    return make
