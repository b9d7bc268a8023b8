"""The Python examples in the documentation run as written.

Every ```python block of ``docs/guide.md`` and ``README.md`` is a complete program: it
is run in a fresh interpreter, from an empty directory, against this checkout, and must
exit 0. The examples use the scripted ``FauxModel``, so no network or key is needed; they
check what they claim with ``assert``. A block that is not meant to run does not belong
in a ```python fence (use ```text or ```sh).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = {"docs/guide.md": 12, "README.md": 1}
"""Each document with the number of examples it holds: a lost example fails too."""


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The ```python fences of a Markdown file: (first line, 1-based; code)."""
    tokens = MarkdownIt().parse(path.read_text(encoding="utf-8"))
    return [
        (token.map[0] + 1 if token.map else 0, token.content)
        for token in tokens
        if token.type == "fence" and token.info.strip() == "python"
    ]


EXAMPLES = [
    pytest.param(ROOT / doc, line, code, id=f"{doc}:{line}")
    for doc in DOCUMENTS
    for line, code in python_blocks(ROOT / doc)
]


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_the_documents_hold_their_examples(doc: str) -> None:
    assert len(python_blocks(ROOT / doc)) == DOCUMENTS[doc]


@pytest.mark.parametrize(("path", "line", "code"), EXAMPLES)
def test_example_runs(path: Path, line: int, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, (
        f"the example at {path.relative_to(ROOT)}:{line} failed "
        f"(exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    )


def test_the_readme_is_what_a_visitor_needs() -> None:
    """Short, with the quick start's two commands; the rest lives in docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    assert "pip install . && perdure demo " in readme
    assert "pip install '.[test]' && pytest " in readme
    for doc in ("guide", "design", "hosts", "operations", "performance", "security"):
        assert f"(docs/{doc}.md)" in readme, doc
