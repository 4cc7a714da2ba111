"""The web fetcher against a local docs site: discovery, cleaning, retries, 404s, incremental sync."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

from mcp_server.engine.docs import DocPage, PageSource, load_manifest, sync, sync_async

PAGES = (
    DocPage("python-api/triton.language.html", follow="python-api/generated/"),
    DocPage("flaky.html"),
    DocPage("limited.html"),
    DocPage("missing.html"),
)
FAST = {"retries": 2, "backoff_s": 0.01, "timeout_s": 5.0, "concurrency": 2}
LOAD_MD = "web/python-api/generated/triton.language.load.md"
DOT_MD = "web/python-api/generated/triton.language.dot.md"


def run_sync(site, dest: Path, **options: object):
    return sync(dest, base_url=site.base_url, pages=PAGES, include_installed=False, **{**FAST, **options})


def test_sync_discovers_op_pages_linked_from_the_index(docs_site, tmp_path: Path) -> None:
    report = run_sync(docs_site, tmp_path)
    assert report.ok and not report.offline
    assert LOAD_MD in report.fetched and DOT_MD in report.fetched
    assert "web/python-api/triton.language.md" in report.fetched
    requested = {path for path, _, _ in docs_site.log}
    assert "/main/getting-started/installation.html" not in requested  # outside the followed prefix
    assert len(docs_site.requests_for("/main/python-api/generated/triton.language.load.html")) == 1
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    entry = manifest["pages"][LOAD_MD]
    assert entry["url"] == docs_site.base_url + "python-api/generated/triton.language.load.html"
    assert entry["source"] == "web" and entry["etag"] and entry["last_modified"] and entry["fetched_at"]


def test_sync_strips_navigation_headers_footers_sidebars_and_scripts(docs_site, tmp_path: Path) -> None:
    run_sync(docs_site, tmp_path)
    text = (tmp_path / LOAD_MD).read_text()
    for furniture in (
        "SIDEBAR-NAV",
        "HEADER-BANNER",
        "BREADCRUMB",
        "ASIDE-TEXT",
        "FOOTER-TEXT",
        "SCRIPT-TEXT",
    ):
        assert furniture not in text
    assert "color: red" not in text and "¶" not in text
    assert text.startswith("# triton.language.load")
    assert "quokkaword other value" in text
    assert "x = tl.load(ptr + offs, mask=offs < n, other=0.0)" in text
    assert "## Notes on padding" in text


def test_sync_retries_a_500_and_a_429_then_keeps_the_page(docs_site, tmp_path: Path) -> None:
    report = run_sync(docs_site, tmp_path)
    assert [s for _, s, _ in docs_site.requests_for("/main/flaky.html")] == [500, 200]
    assert [s for _, s, _ in docs_site.requests_for("/main/limited.html")] == [429, 200]
    assert "web/flaky.md" in report.fetched and "zebraword" in (tmp_path / "web/flaky.md").read_text()


def test_sync_reports_a_404_once_without_retrying(docs_site, tmp_path: Path) -> None:
    report = run_sync(docs_site, tmp_path)
    (failure,) = report.failed
    assert failure.status == 404 and failure.attempts == 1 and failure.url.endswith("/missing.html")
    assert len(docs_site.requests_for("/main/missing.html")) == 1
    assert report.ok  # one missing page does not make the cache unusable


def test_gives_up_after_the_retry_budget(docs_site, tmp_path: Path) -> None:
    docs_site.failures["/main/flaky.html"] = [503, 503, 503, 503]
    report = run_sync(docs_site, tmp_path, retries=1)
    (failure,) = [f for f in report.failed if f.url.endswith("/flaky.html")]
    assert failure.status == 503 and failure.attempts == 2


def test_second_sync_sends_conditional_requests_and_keeps_pages_on_304(docs_site, tmp_path: Path) -> None:
    run_sync(docs_site, tmp_path)
    before = (tmp_path / LOAD_MD).read_text()
    docs_site.log.clear()
    report = run_sync(docs_site, tmp_path)
    _, status, inm = docs_site.requests_for("/main/python-api/generated/triton.language.load.html")[0]
    assert status == 304 and inm
    assert LOAD_MD in report.not_modified and LOAD_MD not in report.fetched
    assert DOT_MD in report.not_modified  # links of a 304 index page come from the manifest
    assert (tmp_path / LOAD_MD).read_text() == before
    entry = load_manifest(tmp_path).pages[LOAD_MD]
    assert entry.checked_at is not None


def test_a_changed_page_is_fetched_again(docs_site, tmp_path: Path) -> None:
    run_sync(docs_site, tmp_path)
    docs_site.set_page(
        "/main/python-api/generated/triton.language.dot.html",
        "triton.language.dot",
        "<p>Now with a new paragraph about tensor cores.</p>",
    )
    report = run_sync(docs_site, tmp_path)
    assert DOT_MD in report.fetched
    assert "tensor cores" in (tmp_path / DOT_MD).read_text()


def test_a_failed_refetch_keeps_the_previous_copy(docs_site, tmp_path: Path) -> None:
    run_sync(docs_site, tmp_path)
    docs_site.failures["/main/flaky.html"] = [500, 500, 500]
    report = run_sync(docs_site, tmp_path)
    assert any(f.url.endswith("/flaky.html") for f in report.failed)
    assert "web/flaky.md" in load_manifest(tmp_path).pages
    assert "zebraword" in (tmp_path / "web/flaky.md").read_text()


def test_web_pages_of_another_triton_version_are_noted_in_the_manifest(docs_site, tmp_path: Path) -> None:
    report = run_sync(docs_site, tmp_path)
    manifest = load_manifest(tmp_path)
    load_entry = manifest.pages[LOAD_MD]
    assert load_entry.triton_version == "3.1.0"
    assert "3.1.0" in load_entry.version_note and manifest.installed_triton in load_entry.version_note
    assert manifest.pages[DOT_MD].triton_version == "main"  # read from the /main/ address
    assert any("3.1.0" in note for note in report.version_notes)


def test_unreachable_site_falls_back_to_the_installed_reference(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = sync(tmp_path, base_url=f"http://127.0.0.1:{port}/main/", pages=PAGES, include_installed=False, **FAST)
    assert report.ok and report.offline
    assert report.installed_pages > 100 and report.sections_indexed > 0
    assert "installed Triton" in report.notes[0]
    manifest = load_manifest(tmp_path)
    assert manifest.pages["installed/triton.language.load.md"].source is PageSource.installed


def test_sync_can_be_awaited_and_called_from_a_running_loop(docs_site, tmp_path: Path) -> None:
    async def inside_a_loop():
        awaited = await sync_async(
            tmp_path / "a", base_url=docs_site.base_url, pages=PAGES[:1], include_installed=False, **FAST
        )
        blocking = sync(tmp_path / "b", base_url=docs_site.base_url, pages=PAGES[:1], **FAST)
        return awaited, blocking

    awaited, blocking = asyncio.run(inside_a_loop())
    assert awaited.ok and LOAD_MD in awaited.fetched
    assert blocking.ok and blocking.installed_pages > 100
