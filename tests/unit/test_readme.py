"""README is a short path (issue 23): its Quick start is exactly the two commands, demo first, and the test command
is the one CI runs; it stays within 200 lines; and every relative link of README, runtime/README.md and docs/
points at a file, and at a heading of it, that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = [ROOT / "README.md", ROOT / "runtime" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_quick_start_is_exactly_the_demo_then_the_test_command_that_ci_runs() -> None:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == ["scripts/demo.sh", "scripts/test.sh"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert any(re.search(r"(^|[\s/])scripts/test\.sh\b", line) for line in ci), ci
    assert "`scripts/test.sh --fast`" in README


def test_readme_is_at_most_200_lines() -> None:
    assert len(README.splitlines()) <= 200, "move detail to docs/ (issue 23)"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_an_existing_file_and_heading(doc: Path) -> None:
    text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in _anchors(path)):
            broken.append(target)
    assert broken == []
