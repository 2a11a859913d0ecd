"""Every internal link of the built book resolves: the target page exists and so does the
anchor (make links; part of make test). External links are not fetched (no network in CI)."""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

HTML = Path(__file__).resolve().parent.parent / "_build" / "html"
SKIP = ("_static/", "_sources/", "_images/", "genindex", "search", "_sphinx_design_static")


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def main() -> int:
    pages = {p: parse(p) for p in HTML.rglob("*.html")
             if not any(s in str(p.relative_to(HTML)) for s in SKIP)}
    if not pages:
        print("links: no built book in _build/html (run make book first)")
        return 1
    cache = dict(pages)
    broken, checked = [], 0
    for path, page in pages.items():
        for href in page.links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            checked += 1
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{path.relative_to(HTML)}: {href} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = (cache.get(target) or cache.setdefault(target, parse(target))).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(HTML)}: {href} (no such anchor)")
    for line in broken:
        print(f"links: broken: {line}")
    print(f"links: {checked} internal links in {len(pages)} pages, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
