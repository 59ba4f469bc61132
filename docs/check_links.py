"""Find the dead links of a built documentation site.

Usage: ``python docs/check_links.py SITE`` (SITE: the folder ``mkdocs build -d SITE``
wrote). Every ``href`` and ``src`` of every HTML page that points inside the site (no
scheme, not ``//host``) must name a file of the site, or a folder holding an
``index.html``; a fragment or a query after it is ignored. Prints one line per dead link,
``page: link``, and exits with 1 when there is any. Standard library only.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Links(HTMLParser):
    """The ``href`` and ``src`` values of one page, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [value for name, value in attrs if name in ("href", "src") and value]


def _target(site: Path, page: Path, link: str) -> Path | None:
    """The file ``link`` on ``page`` names, or None when it leads outside the site."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or not parts.path:
        return None  # another site, mailto:, data:, or a fragment of this page
    path = unquote(parts.path)
    base = site if path.startswith("/") else page.parent
    return (base / path.lstrip("/")).resolve()


def _exists(site: Path, target: Path) -> bool:
    if not target.is_relative_to(site):
        return False
    return target.is_file() or (target.is_dir() and (target / "index.html").is_file())


def dead_links(site: Path) -> list[tuple[str, str]]:
    """Every ``(page, link)`` of ``site`` whose link names nothing in it, pages sorted."""
    site = site.resolve()
    dead = []
    for page in sorted(site.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for link in parser.links:
            target = _target(site, page, link)
            if target is not None and not _exists(site, target):
                dead.append((page.relative_to(site).as_posix(), link))
    return dead


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python docs/check_links.py SITE (the folder mkdocs build wrote)", file=sys.stderr)
        return 2
    dead = dead_links(Path(args[0]))
    for page, link in dead:
        print(f"{page}: {link}")
    pages = sum(1 for _ in Path(args[0]).rglob("*.html"))
    print(f"{len(dead)} dead link(s) in {pages} page(s)", file=sys.stderr)
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
