"""``docs/design.md`` is the contract the code cites: every citation must land in it.

Code and tests name invariants by number ("invariant 7", ``test_invariant_07_...``) and
sections as ``docs/design.md § <heading>``. These tests read the sources and fail when a
citation points at nothing: an invariant number the design does not define, a section
heading it does not have, or a specification that is not in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
CITING = ("core", "runtimes", "remote_env", "tests")
"""The trees whose comments, docstrings and test names cite the design."""

_INVARIANT = re.compile(r"\b[Ii]nvariants? (\d+)(?:(?:, | and | or )(\d+))*")
_NUMBERS = re.compile(r"\d+")
_TEST_NAME = re.compile(r"def test_invariant_(\d+)_")
_SECTION = re.compile(r"docs/design\.md §\s*([A-Za-z][A-Za-z ]*[A-Za-z])")


def _sources() -> list[Path]:
    return sorted(
        path
        for tree in CITING
        for path in (ROOT / tree).rglob("*")
        if path.suffix in (".py", ".md") and path.is_file() and "node_modules" not in path.parts
    )


def _defined_invariants() -> set[int]:
    """The numbers of the numbered list under the design's ``## Invariants``."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("\n## Invariants\n", 1)[1].split("\n## ", 1)[0]
    return {int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)}


def _headings() -> set[str]:
    text = DESIGN.read_text(encoding="utf-8")
    return {h.strip() for h in re.findall(r"^#{2,3} (.+)$", text, re.M)}


def test_the_invariants_are_numbered_from_one_without_gaps() -> None:
    defined = _defined_invariants()
    assert defined == set(range(1, max(defined) + 1)) and max(defined) >= 19


def test_every_cited_invariant_is_defined() -> None:
    defined = _defined_invariants()
    cited: dict[int, list[str]] = {}
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for match in _INVARIANT.finditer(text):
            for number in _NUMBERS.findall(match.group(0)):
                cited.setdefault(int(number), []).append(str(path.relative_to(ROOT)))
        for number in _TEST_NAME.findall(text):
            cited.setdefault(int(number), []).append(str(path.relative_to(ROOT)))
    assert cited, "no citation found: the pattern is broken"
    undefined = {n: where for n, where in cited.items() if n not in defined}
    assert undefined == {}


def test_every_cited_section_is_a_heading_of_the_design() -> None:
    headings = _headings()
    missing = [
        f"{path.relative_to(ROOT)}: § {name}"
        for path in _sources()
        for name in _SECTION.findall(path.read_text(encoding="utf-8"))
        if name not in headings
    ]
    assert missing == []


@pytest.mark.parametrize("tree", ["core", "runtimes", "remote_env", "tests"])
def test_no_citation_points_outside_the_repository(tree: str) -> None:
    """A spec the repository does not hold cannot be read by the next engineer."""
    outside = re.compile(r"\bSPEC\b(?!_)|shared/reference|reference/[a-z-]+\.md")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _sources()
        if path.relative_to(ROOT).parts[0] == tree and path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if outside.search(line)
    ]
    assert found == []
