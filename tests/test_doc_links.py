"""Every relative link in README.md and docs/*.md reaches a file, and its #anchor a heading.

Anchors follow GitHub's rule for heading ids (lower case, punctuation dropped, spaces
as hyphens, repeats numbered), which is how readers will follow them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Pages that changes under way add beside this one: links to them are allowed to dangle
# until they land. Remove a name once its page exists; any other broken link fails.
PENDING: frozenset[str] = frozenset()
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`[^`]*`")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(text: str) -> set[str]:
    """The ids GitHub gives the headings of a Markdown page."""
    seen: dict[str, int] = {}
    ids = set()
    for line in prose(text):
        match = HEADING.match(line)
        if match is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(2).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def links(text: str) -> list[str]:
    """The relative link targets of a page's prose (not in code)."""
    found = []
    for line in prose(text):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                found.append(target)
    return found


def broken(page: Path) -> list[str]:
    """Each link of `page` that leads nowhere, with what is wrong."""
    problems = []
    for target in links(page.read_text()):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
        if relative in PENDING:
            continue
        if not resolved.exists():
            problems.append(f"{target}: no file {relative}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {relative}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert links(page.read_text()) or page.name != "index.md", "the docs index links nothing"
    problems = broken(page)
    assert not problems, f"{page.relative_to(ROOT)}: " + "; ".join(problems)


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Bad disks, bad clocks\n\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#bad-disks-bad-clocks) [gone](missing.md) [anchor](other.md#not-a-heading)\n"
                    "[web](https://example.com) `[code](nowhere.md)`\n")
    assert [p.split(":")[0] for p in broken(page)] == ["missing.md", "other.md#not-a-heading"]
