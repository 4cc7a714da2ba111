"""HTML of a Sphinx docs page → Markdown of its article, plus the links and version it carries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit

from bs4 import BeautifulSoup
from markdownify import markdownify

# Page furniture that says nothing about Triton: navigation, headers, footers, sidebars, scripts.
_STRIP_TAGS = ("script", "style", "noscript", "nav", "header", "footer", "aside", "form", "button", "svg")
_STRIP_SELECTORS = (
    '[role="navigation"]',
    '[role="search"]',
    '[role="banner"]',
    '[role="contentinfo"]',
    ".headerlink",  # the pilcrow after each heading
    ".wy-nav-side",
    ".wy-breadcrumbs",
    ".rst-versions",
    ".rst-footer-buttons",
    ".sphinxsidebar",
    ".related",
    ".sidebar",
    ".bd-sidebar",
    ".bd-header",
    ".bd-footer",
    ".prev-next-area",
    ".sphx-glr-download-link-note",
    ".sphx-glr-footer",
    ".sphx-glr-signature",
    "#searchbox",
)
# Where the article is, most specific first.
_MAIN_SELECTORS = ('[itemprop="articleBody"]', "main", '[role="main"]', "div.body", "article", "body")

_VERSION_PATTERNS = (
    re.compile(r"""VERSION\s*:\s*['"]([^'"]+)['"]"""),
    re.compile(r"""data-version\s*=\s*['"]([^'"]+)['"]"""),
    re.compile(r"""<div class="version">\s*([^<\s]+)\s*</div>"""),
)
_VERSION_IN_PATH = re.compile(r"^(main|master|latest|stable|v?\d+\.\d+(?:\.\d+)?)$")


@dataclass(frozen=True)
class ConvertedPage:
    title: str
    markdown: str
    links: list[str]
    version: str | None


def convert(html: str, url: str, *, follow: str | None = None) -> ConvertedPage:
    """Markdown of the page's article; ``links`` are absolute .html addresses under ``follow``."""
    soup = BeautifulSoup(html, "html.parser")
    links = discover_links(soup, url, follow) if follow else []
    version = detect_version(html, url)
    for tag in soup.find_all(_STRIP_TAGS):
        tag.decompose()
    for selector in _STRIP_SELECTORS:
        for tag in soup.select(selector):
            tag.decompose()
    main = next((m for m in (soup.select_one(s) for s in _MAIN_SELECTORS) if m is not None), soup)
    h1 = main.find("h1")
    title = _clean_title(h1.get_text(" ", strip=True) if h1 else (soup.title.string if soup.title else ""))
    markdown = markdownify(
        str(main),
        heading_style="ATX",
        strip=["a", "img"],
        bullets="-",
        escape_underscores=False,
        escape_asterisks=False,
        escape_misc=False,
    )
    markdown = re.sub(r"[ \t]+\n", "\n", markdown)
    markdown = re.sub(r"\n{3,}", "\n\n", markdown).strip() + "\n"
    return ConvertedPage(title=title or url.rsplit("/", 1)[-1], markdown=markdown, links=links, version=version)


def discover_links(soup: BeautifulSoup, page_url: str, prefix_url: str | None) -> list[str]:
    """Absolute addresses of the .html pages under ``prefix_url`` the page links to, in page order."""
    if not prefix_url:
        return []
    seen: dict[str, None] = {}
    own = urldefrag(page_url).url
    for a in soup.find_all("a", href=True):
        target = urldefrag(urljoin(page_url, str(a["href"]))).url.split("?", 1)[0]
        if target == own or not target.startswith(prefix_url) or not target.endswith(".html"):
            continue
        name = target.rsplit("/", 1)[-1]
        if name in ("index.html", "genindex.html", "search.html", "sg_execution_times.html"):
            continue
        seen.setdefault(target, None)
    return list(seen)


def detect_version(html: str, url: str) -> str | None:
    """The Triton version a docs page documents, read from the page or its address; None if unknown."""
    for pattern in _VERSION_PATTERNS:
        m = pattern.search(html)
        if m:
            return m.group(1).strip()
    for part in urlsplit(url).path.split("/"):
        if _VERSION_IN_PATH.match(part):
            return part
    return None


def version_note(page_version: str | None, installed: str) -> str | None:
    """A sentence when a page may describe another Triton than the installed one, else None."""
    if page_version is None:
        return f"the page does not say which Triton it documents; installed is {installed}"
    if _major_minor(page_version) == _major_minor(installed):
        return None
    return f"the page documents Triton {page_version}; installed is {installed}"


def _major_minor(version: str) -> str:
    m = re.match(r"v?(\d+)\.(\d+)", version)
    return f"{m.group(1)}.{m.group(2)}" if m else version


def _clean_title(text: str | None) -> str:
    text = (text or "").replace("¶", "").replace("#", "").strip()
    return re.split(r"\s+[—|-]\s+Triton\b", text)[0].strip()
