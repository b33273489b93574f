"""Every relative link in the docs and the README reaches a file that exists, and every
section a doc names in quotes after a link to another page ("[ops](operations.md),
"Autoscaling"") is a heading there: pages moved or renamed fail here, not in a reader's
browser."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
#: ``[page](page.md), "Section"``: a link followed by the section's name in quotes.
SECTION = re.compile(r"\[[^\]]*\]\(([^)\s#]+\.md)\),?\s+\"([^\"]+)\"")


def _flat(page: Path) -> str:
    """The page on one line: a section's name may wrap."""
    return re.sub(r"\s+", " ", page.read_text())


def _targets(page: Path) -> list[tuple[str, Path]]:
    return [
        (link, (page.parent / link).resolve())
        for link in LINK.findall(page.read_text())
        if "://" not in link and not link.startswith("mailto:")
    ]


def test_every_relative_link_reaches_a_file() -> None:
    broken = [
        f"{page.relative_to(ROOT)}: {link}"
        for page in PAGES
        for link, target in _targets(page)
        if not target.exists()
    ]
    assert not broken, broken


def test_every_section_named_after_a_link_is_a_heading_there() -> None:
    missing = []
    for page in PAGES:
        for link, section in SECTION.findall(_flat(page)):
            target = (page.parent / link).resolve()
            if not target.exists():
                continue  # the test above names it
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.M)
            if not any(h.startswith(section) for h in headings):
                missing.append(f"{page.relative_to(ROOT)}: {link}, {section!r}")
    assert not missing, missing


def test_the_checks_see_links_and_sections() -> None:
    """A regex that matched nothing would pass both tests above."""
    found = [t for page in PAGES for t in _targets(page)]
    assert len(found) > 50
    assert ("operations.md", "Autoscaling") in SECTION.findall(_flat(ROOT / "docs/README.md"))
