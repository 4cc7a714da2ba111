"""A local docs site: fixture HTML pages served on 127.0.0.1 (ephemeral port) from a thread."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

PAGE_TEMPLATE = """<!DOCTYPE html>
<html><head><title>{title} — Triton documentation</title>
<script>var DOCUMENTATION_OPTIONS = {{ {version_js} }};</script>
<style>body {{ color: red }}</style></head>
<body>
<nav class="wy-nav-side" role="navigation"><a href="/main/index.html">Home</a> SIDEBAR-NAV-TEXT</nav>
<header>HEADER-BANNER-TEXT</header>
<div role="navigation" aria-label="breadcrumbs">BREADCRUMB-TEXT</div>
<div role="main" class="document"><div itemprop="articleBody">
<h1>{title}<a class="headerlink" href="#x">¶</a></h1>
{body}
</div></div>
<aside class="sidebar">ASIDE-TEXT</aside>
<footer>FOOTER-TEXT © someone</footer>
<script>console.log("SCRIPT-TEXT")</script>
</body></html>
"""

LANGUAGE_INDEX_BODY = """
<p>The language reference.</p>
<table>
<tr><td><a href="generated/triton.language.load.html">load</a></td><td>Load a tensor.</td></tr>
<tr><td><a href="generated/triton.language.load.html#triton.language.load">load again</a></td></tr>
<tr><td><a href="generated/triton.language.dot.html">dot</a></td><td>Matrix product.</td></tr>
<tr><td><a href="../getting-started/installation.html">outside the followed prefix</a></td></tr>
<tr><td><a href="https://example.com/python-api/generated/evil.html">another site</a></td></tr>
</table>
"""

LOAD_BODY = """
<dl class="py function"><dt class="sig sig-object py" id="triton.language.load">
<span class="sig-prename">triton.language.</span><span class="sig-name">load</span>
(pointer, mask=None, other=None)</dt>
<dd><p>Returns a tensor loaded from memory. Where mask is false the quokkaword other value is used.</p>
<div class="highlight"><pre>x = tl.load(ptr + offs, mask=offs &lt; n, other=0.0)</pre></div>
</dd></dl>
<h2>Notes on padding</h2><p>Padding applies to block pointers only.</p>
"""

DOT_BODY = "<p>Returns the matrix product of two blocks; accumulate in float32 with acc.</p>"
FLAKY_BODY = "<p>This page answered 500 first; zebraword lives here.</p>"
LIMITED_BODY = "<p>This page answered 429 first.</p>"


def render(title: str, body: str, version: str | None = None) -> bytes:
    version_js = f"VERSION: '{version}'" if version else ""
    return PAGE_TEMPLATE.format(title=title, body=body, version_js=version_js).encode()


@dataclass
class DocsSite:
    port: int
    pages: dict[str, bytes] = field(default_factory=dict)
    # path -> status codes to answer before serving the page normally
    failures: dict[str, list[int]] = field(default_factory=dict)
    log: list[tuple[str, int, str | None]] = field(default_factory=list)  # (path, status, If-None-Match)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/main/"

    def requests_for(self, path: str) -> list[tuple[str, int, str | None]]:
        return [entry for entry in self.log if entry[0] == path]

    def set_page(self, path: str, title: str, body: str, version: str | None = None) -> None:
        with self.lock:
            self.pages[path] = render(title, body, version)


def _handler(site: DocsSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            inm = self.headers.get("If-None-Match")
            with site.lock:
                pending = site.failures.get(path)
                status = pending.pop(0) if pending else None
                body = site.pages.get(path)
            if status is None:
                status = 200 if body is not None else 404
            etag = f'"{hashlib.sha256(body).hexdigest()[:16]}"' if body is not None else None
            if status == 200 and etag and inm == etag:
                status = 304
            with site.lock:
                site.log.append((path, status, inm))
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            if status in (200, 304) and etag:
                self.send_header("ETag", etag)
                self.send_header("Last-Modified", "Wed, 01 Jan 2025 00:00:00 GMT")
            payload = body if status == 200 and body is not None else b"" if status == 304 else b"error"
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

    return Handler


@pytest.fixture
def docs_site() -> Iterator[DocsSite]:
    site = DocsSite(port=0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    site.port = server.server_address[1]
    site.pages.update(
        {
            "/main/python-api/triton.language.html": render("triton.language", LANGUAGE_INDEX_BODY),
            "/main/python-api/generated/triton.language.load.html": render(
                "triton.language.load", LOAD_BODY, version="3.1.0"
            ),
            "/main/python-api/generated/triton.language.dot.html": render("triton.language.dot", DOT_BODY),
            "/main/flaky.html": render("A flaky page", FLAKY_BODY),
            "/main/limited.html": render("A rate-limited page", LIMITED_BODY),
        }
    )
    site.failures["/main/flaky.html"] = [500]
    site.failures["/main/limited.html"] = [429]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
