"""The reference built from the installed Triton, and search over the cache."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import triton

from mcp_server.engine.docs import DocPage, build_offline, search, sync
from mcp_server.engine.docs.installed import signature_of
from mcp_server.engine.errors import UsageError


@pytest.fixture(scope="module")
def offline_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("triton_docs")
    report = build_offline(dest)
    assert report.ok and report.installed_pages > 100
    return dest


def test_offline_reference_has_tl_load_and_tl_dot_with_their_signatures(offline_cache: Path) -> None:
    load = (offline_cache / "installed/triton.language.load.md").read_text()
    assert f"triton.language.load{signature_of(triton.language.load)}" in load
    assert "mask=None, other=None" in load and "`tl.load`" in load
    assert f"installed Triton {triton.__version__}" in load
    dot = (offline_cache / "installed/triton.language.dot.md").read_text()
    assert "input_precision" in dot


def test_offline_reference_has_triton_autotune_with_its_real_signature(offline_cache: Path) -> None:
    text = (offline_cache / "installed/triton.autotune.md").read_text()
    real = inspect.signature(triton.autotune)
    assert f"triton.autotune{real}" in text
    assert "key" in real.parameters and "configs" in real.parameters


def test_offline_reference_lists_libdevice_and_testing(offline_cache: Path) -> None:
    libdevice = (offline_cache / "installed/triton.language.extra.libdevice.md").read_text()
    assert "## triton.language.extra.libdevice.asin" in libdevice and "libdevice.erf(" in libdevice
    assert (offline_cache / "installed/triton.testing.do_bench.md").is_file()
    assert (offline_cache / "installed/triton.next_power_of_2.md").is_file()


def test_manifest_marks_installed_pages_with_their_source_and_version(offline_cache: Path) -> None:
    manifest = json.loads((offline_cache / "manifest.json").read_text())
    entry = manifest["pages"]["installed/triton.language.load.md"]
    assert entry["source"] == "installed-triton"
    assert entry["triton_version"] == triton.__version__ == manifest["installed_triton"]


@pytest.mark.parametrize(
    ("query", "page"),
    [
        ("tl.load", "installed/triton.language.load.md"),
        ("tl.dot", "installed/triton.language.dot.md"),
        ("triton.autotune", "installed/triton.autotune.md"),
        ("ceiling division", "installed/triton.language.cdiv.md"),
        ("atomic add", "installed/triton.language.atomic_add.md"),
        ("program id axis", "installed/triton.language.program_id.md"),
    ],
)
def test_search_ranks_the_right_page_first(offline_cache: Path, query: str, page: str) -> None:
    result = search(query, 5, cache_dir=offline_cache)
    assert result.ok and result.hits, result.notes
    assert result.hits[0].page == page, [h.page for h in result.hits]


def test_search_finds_a_libdevice_function_by_its_kernel_name(offline_cache: Path) -> None:
    hit = search("libdevice.erf", 3, cache_dir=offline_cache).hits[0]
    assert hit.heading == "triton.language.extra.libdevice.erf"
    assert hit.source.value == "installed-triton"


@pytest.mark.parametrize(
    "query",
    ['"', 'tl.load" OR', "NEAR(a b", "*", "load*", "a AND OR NOT", "x:y", "^dot", "(((", "-", "'"],
)
def test_search_survives_fts_syntax_characters(offline_cache: Path, query: str) -> None:
    result = search(query, 5, cache_dir=offline_cache)
    assert result.ok
    assert all(len(h.snippet) <= 440 for h in result.hits)


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_a_blank_query_is_a_usage_error_that_says_what_to_ask(offline_cache: Path, query: str) -> None:
    with pytest.raises(UsageError, match="needs a query: an API name"):
        search(query, 5, cache_dir=offline_cache)


def test_search_builds_the_offline_cache_when_there_is_none(tmp_path: Path) -> None:
    result = search("tl.store", 3, cache_dir=tmp_path / "empty")
    assert result.built_cache and "built the API reference" in result.notes[0]
    assert result.hits[0].page == "installed/triton.language.store.md"
    assert search("tl.store", 3, cache_dir=tmp_path / "empty").built_cache is False


def test_search_rebuilds_the_reference_when_the_installed_triton_changed(tmp_path: Path) -> None:
    build_offline(tmp_path)
    manifest_path = tmp_path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["installed_triton"] = "0.0.1"
    manifest_path.write_text(json.dumps(manifest))
    result = search("tl.load", 1, cache_dir=tmp_path)
    assert any("changed" in note for note in result.notes)
    assert json.loads(manifest_path.read_text())["installed_triton"] == triton.__version__


@pytest.mark.slow
def test_search_ranks_a_fetched_web_page_and_gives_its_url(docs_site, tmp_path: Path) -> None:
    pages = (
        DocPage("python-api/triton.language.html", follow="python-api/generated/"),
        DocPage("flaky.html"),
    )
    sync(tmp_path, base_url=docs_site.base_url, pages=pages, retries=1, backoff_s=0.01)
    hit = search("zebraword", 3, cache_dir=tmp_path).hits[0]
    assert hit.page == "web/flaky.md" and hit.source.value == "web"
    assert hit.url == docs_site.base_url + "flaky.html"
    section = search("padding block pointers quokkaword", 3, cache_dir=tmp_path).hits
    assert section[0].page == "web/python-api/generated/triton.language.load.md"
    padding = next(h for h in search("Notes on padding", 5, cache_dir=tmp_path).hits if h.page.startswith("web/"))
    assert padding.url.endswith("triton.language.load.html#notes-on-padding")
    assert padding.version_note and "3.1.0" in padding.version_note
