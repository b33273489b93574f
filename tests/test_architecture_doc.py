"""docs/architecture.md names every module of the controller, the pipeline and the assignors, and every
module of the engine in its own table: a module added without a line there fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def unnamed(package: str, *, whole_dirs: tuple[str, ...] = ()) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT / package).as_posix()
        if path.name == "__init__.py" or rel.startswith(whole_dirs):
            continue
        if f"`{rel}`" not in DOC and f"`{rel}` (" not in DOC:
            out.append(rel)
    return out


def test_every_controller_and_pipeline_module_has_a_line() -> None:
    assert unnamed("controller", whole_dirs=("tools/chaos/",)) == []
    assert "`tools/chaos/`" in DOC
    assert unnamed("pipeline") == []
    assert unnamed("assignors", whole_dirs=("engine/",)) == []


def test_every_engine_module_has_a_line_in_the_engines_table() -> None:
    table = DOC[DOC.index("### Inside the engine") :]
    engine = ROOT / "assignors" / "engine"
    missing = [p.name for p in sorted(engine.glob("*.py")) if f"| `{p.name}` |" not in table]
    assert missing == []
