"""Links between the documents lead somewhere: a file that exists, a heading it has.

The pages under ``docs/`` link to each other, to the infra guides and to the code;
renaming a file or a heading must not leave a reader at a dead end.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("guide", "design", "hosts", "operations", "performance", "security")
PAGES = sorted(
    {"README.md", "tests/README.md"}
    | {f"docs/{name}.md" for name in DOCS}
    | {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
)
"""The pages checked: the ones named (they must exist) and any other page in docs/."""


def _links(path: Path) -> list[str]:
    tokens = MarkdownIt().parse(path.read_text(encoding="utf-8"))
    return [
        str(child.attrs["href"])
        for token in tokens
        if token.type == "inline"
        for child in token.children or []
        if child.type == "link_open"
    ]


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of ``path``: lower case, punctuation dropped,
    spaces as hyphens."""
    tokens = MarkdownIt().parse(path.read_text(encoding="utf-8"))
    titles = [
        tokens[i + 1].content for i, token in enumerate(tokens) if token.type == "heading_open"
    ]
    return {re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-") for title in titles}


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page: str) -> None:
    source = ROOT / page
    dead = []
    for href in _links(source):
        if re.match(r"^[a-z]+:", href):
            continue  # another site: not checked offline
        target, _, anchor = href.partition("#")
        path = (source.parent / target).resolve() if target else source
        if not path.exists():
            dead.append(href)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            dead.append(href)
    assert dead == []
