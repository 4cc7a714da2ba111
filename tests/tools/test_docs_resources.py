"""Every page that search_triton_docs names can be read back as a triton-docs:// resource through the SDK's
in-memory client (page paths hold folders: web/python-api/…, installed/…)."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp.client import Client

from mcp_server.server import build_server

QUERIES = ("tl.dot input_precision", "tl.load mask other", "autotune configs key", "atomic_add", "libdevice erf")


def test_every_page_search_returns_reads_as_a_resource(tmp_path, monkeypatch):
    cache = tmp_path / "docs"
    monkeypatch.setenv("PTT_TRITON_DOCS_DIR", str(cache))

    async def go():
        async with Client(build_server()) as client:
            pages: set[str] = set()
            for query in QUERIES:
                result = await client.call_tool("search_triton_docs", {"query": query, "k": 8})
                pages |= {h["page"] for h in result.structured_content["hits"]}
            read = {}
            for page in sorted(pages):
                read[page] = await client.read_resource(f"triton-docs://{page}")
            missing = None
            try:
                await client.read_resource("triton-docs://installed/no-such-page.md")
            except Exception as exc:  # the SDK raises the server's resource error
                missing = str(exc)
            return pages, read, missing

    pages, read, missing = anyio.run(go)
    assert len(pages) >= 5 and any("/" in p for p in pages), pages
    for page, contents in read.items():
        assert contents.contents[0].text == (cache / page).read_text(encoding="utf-8"), page
    assert missing and "no cached doc page" in missing


def test_doc_resource_refuses_paths_outside_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "docs"
    cache.mkdir()
    (tmp_path / "secret.md").write_text("outside")
    monkeypatch.setenv("PTT_TRITON_DOCS_DIR", str(cache))

    async def go():
        errors = []
        async with Client(build_server()) as client:
            for uri in (
                "triton-docs://../secret.md",
                "triton-docs://web/%2E%2E/%2E%2E/secret.md",
                "triton-docs:///etc/passwd",
            ):
                try:
                    result = await client.read_resource(uri)
                    errors.append(("read", uri, result.contents[0].text))
                except Exception as exc:
                    errors.append(("refused", uri, str(exc)))
        return errors

    for outcome, uri, text in anyio.run(go):
        assert outcome == "refused", (uri, text)
        assert "outside" not in text
    assert Path(tmp_path / "secret.md").read_text() == "outside"
