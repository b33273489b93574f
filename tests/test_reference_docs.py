"""docs/reference/ is generated from the code (``python scripts/update_reference.py``),
and config/ballast.yaml shows every key of the config: a key added, renamed or
re-described without them fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from controller.config import Config
from scripts import update_reference

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("page", sorted(update_reference.PAGES))
def test_the_reference_page_is_what_the_code_says(page: str) -> None:
    written = (update_reference.DOCS / page).read_text(encoding="utf-8")
    assert written == update_reference.PAGES[page](), (
        f"docs/reference/{page} is stale: run `python scripts/update_reference.py`"
    )


def test_every_setting_is_described() -> None:
    rows = update_reference.config_reference().splitlines()
    keys = [r for r in rows if r.startswith("| `")]
    assert len(keys) > 90
    undescribed = [r.split(" | ")[0] for r in keys if not r[:-2].rsplit(" | ", 1)[1].strip()]
    assert undescribed == []


def _shown(text: str) -> set[str]:
    """``section.key`` for every key config/ballast.yaml sets or shows commented out."""
    shown: set[str] = set()
    section = ""
    for line in text.splitlines():
        top = re.match(r"^([a-z_]+):", line)
        if top:
            section = top.group(1)
            continue
        inner = re.match(r"^\s+(?:-\s+)?#?\s*(?:-\s+)?([a-z0-9_]+):", line)
        if inner and section:
            shown.add(f"{section}.{inner.group(1)}")
    return shown


def test_the_example_config_shows_every_key() -> None:
    shown = _shown((ROOT / "config" / "ballast.yaml").read_text(encoding="utf-8"))
    wanted = {
        f"{section}.{key}"
        for section, field in Config.model_fields.items()
        for key in _keys(field.annotation)
    }
    assert sorted(wanted - shown) == []


def _keys(annotation: object) -> list[str]:
    model = next(
        (
            a
            for a in (annotation, *getattr(annotation, "__args__", ()))
            if isinstance(a, type) and hasattr(a, "model_fields")
        ),
        None,
    )
    if model is None:  # groups: a list of sections
        model = annotation.__args__[0].__args__[0]  # type: ignore[attr-defined]
    return list(model.model_fields)
