"""The README and the manual's pages: every relative link resolves (a file, and a heading
for an anchor, as mkdocs and GitHub make them), every page is in `mkdocs.yml`'s nav, and the
README stays short."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's `toc` (mkdocs) and GitHub make it."""
    text = unicodedata.normalize("NFKD", heading).replace("`", "")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(line.lstrip("#").strip()) for line in text.splitlines() if line.startswith("#")}


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:: not ours to check offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert broken == []


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r"([\w-]+\.md)", config))
    assert {p.name for p in DOCS.glob("*.md")} == listed


def test_the_readme_is_short_and_starts_with_what_to_run():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    first = "\n".join(lines[:100])
    for command in ("pip install", "emitter-filter demo", ".venv/bin/python -m pytest"):
        assert command in first, command
