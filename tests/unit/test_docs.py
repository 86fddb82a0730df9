"""The documentation has no dead links: every relative link in the README, ``docs/`` and
``examples/`` names a file of the repository (and, with a ``#fragment``, a heading in it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *REPO.glob("docs/**/*.md"), *REPO.glob("examples/*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as dashes."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    return [m for m in LINK.findall(text) if not m.startswith(EXTERNAL)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(page: Path) -> None:
    dead = []
    for link in links(page):
        target, _, fragment = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        outside = REPO not in path.parents and path != REPO
        unknown = bool(fragment) and path.suffix == ".md" and fragment not in anchors(path)
        if not path.exists() or outside or unknown:
            dead.append(link)
    assert not dead, f"{page.relative_to(REPO)}: dead links {dead}"


def test_every_page_is_reachable_from_the_index() -> None:
    index = REPO / "docs" / "README.md"
    named = {(index.parent / link.partition("#")[0]).resolve() for link in links(index)}
    pages = {p.resolve() for p in REPO.glob("docs/**/*.md")} - {index.resolve()}
    assert not pages - named, f"pages not in docs/README.md: {sorted(pages - named)}"


def test_no_link_leaves_the_repository() -> None:
    outside = [(p.name, link) for p in PAGES for link in links(p) if link.startswith("../../")
               or "shared/" in link]
    assert not outside, outside
