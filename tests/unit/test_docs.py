"""The documentation holds together: every relative link in README.md and docs/*.md points at a file
that exists and, with an ``#anchor``, at a heading of that file; the README stays a front page
(under 300 lines); and the files the guides show whole are the repository's own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 300

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text outside fenced code blocks (a ``# comment`` in a bash block is not a heading)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text, lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for match in HEADING.finditer(prose(path.read_text(encoding="utf-8"))):
        base = slug(match[2])
        name, n = base, 0
        while name in found:  # GitHub numbers repeated headings: name, name-1, name-2...
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", prose(path.read_text(encoding="utf-8")))
    return [m[1] for m in LINK.finditer(text)]


def relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: ...


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in filter(relative, links(page)):
        file_part, _, anchor = target.partition("#")
        file = (page.parent / file_part).resolve() if file_part else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(REPO) if file.is_relative_to(REPO) else file}")
            continue
        if anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}:\n" + "\n".join(broken)


def test_the_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move the details into docs/"


def test_the_slugs_are_githubs():
    assert slug("CLI (maprcli's grammar)") == "cli-maprclis-grammar"
    assert (
        slug("How topics are named: `stream create -topicnaming`") == "how-topics-are-named-stream-create--topicnaming"
    )
    assert slug("Docker (issue 17, 25 Nov 2026)") == "docker-issue-17-25-nov-2026"
    assert slug("Airflow 3.2 and 3.3") == "airflow-32-and-33"


def test_the_dags_file_the_airflow_guide_shows_is_the_repositorys():
    """tests/e2e/test_wheel_install.py installs the file the guide shows; it is dags/streamrep_dags.py."""
    guide = (REPO / "docs" / "airflow.md").read_text(encoding="utf-8")
    shown = re.search(r"<!-- file: dags/streamrep_dags.py -->\n```\w*\n(.*?)```", guide, re.DOTALL)
    assert shown, "docs/airflow.md no longer shows dags/streamrep_dags.py after a <!-- file: --> marker"
    assert shown[1] == (REPO / "dags" / "streamrep_dags.py").read_text(encoding="utf-8")
