"""Write docs/reference/ from the code: the config keys (from the config model and its
``#:`` comments), the metrics (from the registries that export them) and the command line
(from the parser). ``tests/test_reference_docs.py`` fails when a page is stale.

    python scripts/update_reference.py
"""

from __future__ import annotations

import argparse
import ast
import os
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeGuard

import annotated_types
from prometheus_client import CollectorRegistry, Metric
from prometheus_client.metrics import MetricWrapperBase
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from controller import config
from controller.cli import build_parser
from controller.client import failure, grants
from controller.runtime.metrics import GroupGauges, Metrics
from controller.wire.records import ConstraintSet
from pipeline.progress import PipelineMetrics

DOCS = Path(__file__).parents[1] / "docs" / "reference"
#: The width help text is wrapped to (argparse reads ``COLUMNS``).
HELP_WIDTH = "100"


# ------------------------------------------------------------------ config


def _comments() -> dict[tuple[str, str], str]:
    """Each field's ``#:`` comment in controller/config.py, by (class, field)."""
    source = Path(config.__file__).read_text(encoding="utf-8")
    lines = source.splitlines()
    out: dict[tuple[str, str], str] = {}
    for cls in ast.parse(source).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            above: list[str] = []
            at = node.lineno - 2
            while at >= 0 and lines[at].strip().startswith("#:"):
                above.insert(0, lines[at].strip()[2:].strip())
                at -= 1
            if above:
                out[(cls.name, node.target.id)] = " ".join(above)
    return out


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type(a) for a in args)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is list:
        return f"list of {_type(args[0])}"
    if isinstance(annotation, type) and issubclass(annotation, SecretStr):
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _metadata(field: FieldInfo) -> list[Any]:
    """The field's constraints, also where they sit inside an optional (``X | None``)."""
    inner = [
        m
        for arg in typing.get_args(field.annotation)
        if typing.get_origin(arg) is typing.Annotated
        for m in arg.__metadata__
    ]
    return [*field.metadata, *inner]


def _bounds(field: FieldInfo) -> str:
    marks = (
        (annotated_types.Ge, "ge", ">="),
        (annotated_types.Gt, "gt", ">"),
        (annotated_types.Le, "le", "<="),
        (annotated_types.Lt, "lt", "<"),
    )
    found = []
    for meta in _metadata(field):
        for kind, attribute, sign in marks:
            if isinstance(meta, kind):
                found.append(f"{sign} {getattr(meta, attribute)}")
        for inner in getattr(meta, "metadata", [meta]):  # a Field() inside the Annotated
            pattern = getattr(inner, "pattern", None)
            if pattern:
                found.append(f"matches `{pattern}`")
            for kind, attribute, sign in marks:
                if isinstance(inner, kind) and inner is not meta:
                    found.append(f"{sign} {getattr(inner, attribute)}")
    return ", ".join(found)


def _default(field: FieldInfo) -> str:
    if _is_duration(field) and isinstance(field.default, float):
        return f"`{field.default:g}s`"
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _is_duration(field: FieldInfo) -> bool:
    return any(
        getattr(getattr(m, "func", None), "__name__", "") == "_duration" for m in _metadata(field)
    )


def _rows(model: type[BaseModel], prefix: str, env: str | None) -> Iterator[str]:
    comments = _comments()
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        inner = field.annotation
        args = [a for a in typing.get_args(inner) if isinstance(a, type)]
        nested = next((a for a in (inner, *args) if _is_model(a)), None)
        if nested is not None and nested is not ConstraintSet:
            below = (
                f"{env}__{name.upper()}" if env and typing.get_origin(inner) is not list else None
            )
            yield from _rows(
                nested, f"{key}[]." if typing.get_origin(inner) is list else f"{key}.", below
            )
            continue
        kind = "duration" if _is_duration(field) else _type(inner)
        where = f"`{env}__{name.upper()}`" if env else ""
        text = comments.get((model.__name__, name), "").replace("``", "`")
        yield f"| `{key}` | {kind} | {_default(field)} | {_bounds(field)} | {where} | {text} |"


def _is_model(candidate: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


def config_reference() -> str:
    head = [
        "# Configuration reference",
        "",
        "Generated from `controller/config.py` by `python scripts/update_reference.py`; do",
        "not edit. Every key can be set in the YAML file (`ballast run --config FILE`,",
        "validated by `ballast check-config FILE`) or, for keys of a section, from the",
        "environment variable shown. Durations take a number of seconds or a unit: `250ms`,",
        "`10s`, `2m`, `1h`. `config/ballast.yaml` shows every key with its default.",
        "",
        "| key | type | default | valid | environment | description |",
        "|---|---|---|---|---|---|",
    ]
    sections: list[str] = []
    for name, field in config.Config.model_fields.items():
        inner = field.annotation
        if typing.get_origin(inner) is typing.Annotated:
            inner = typing.get_args(inner)[0]
        item = typing.get_args(inner)[0] if typing.get_origin(inner) is list else None
        if _is_model(item):
            sections.extend(_rows(item, f"{name}[].", None))
        elif _is_model(inner):
            sections.extend(_rows(inner, f"{name}.", f"{config.ENV_PREFIX}{name.upper()}"))
    tail = [
        "",
        "`groups[].constraints` holds the group's pins, caps and rack overrides",
        '(docs/operations.md, "Constraints"); `groups` is set in the file only.',
    ]
    return "\n".join([*head, *sections, *tail]) + "\n"


# ------------------------------------------------------------------ metrics


def _families(registry_objects: list[Any]) -> Iterator[tuple[str, str, tuple[str, ...], str]]:
    for item in registry_objects:
        if isinstance(item, MetricWrapperBase):
            (described,) = item.describe()
            labels = tuple(item._labelnames)  # private: prometheus_client keeps them there
            yield described.name, described.type, labels, described.documentation
        elif isinstance(item, Metric):
            labels = tuple(getattr(item, "_labelnames", ()))  # private, as above
            yield item.name, item.type, labels, item.documentation


def _metric_name(name: str, kind: str) -> str:
    return f"{name}_total" if kind == "counter" else name


def metrics_reference() -> str:
    daemon = Metrics(CollectorRegistry())
    parts: dict[str, list[Any]] = {
        "The controller (`ballast run`, `/metrics`)": [
            *(v for v in vars(daemon).values() if isinstance(v, MetricWrapperBase)),
            *GroupGauges().collect(),
        ],
        "Managed consumers (the client library, in the application's default registry)": [
            failure.FAIL_STOPS,
            grants.INVALID_RECORDS,
        ],
        "The Spark lag job's driver (`pipeline.metrics_port`)": [
            v
            for v in vars(PipelineMetrics(CollectorRegistry())).values()
            if isinstance(v, MetricWrapperBase)
        ],
    }
    out = [
        "# Metrics reference",
        "",
        "Generated from the registries by `python scripts/update_reference.py`; do not edit.",
        "Labels take bounded values: configured group names, reasons, sources, connection",
        "and task names; `member` only with `metrics.per_member`, capped per group. Besides",
        "these, the controller exports the Python process collector's `process_*` series.",
    ]
    for title, objects in parts.items():
        out += ["", f"## {title}", "", "| metric | type | labels | meaning |", "|---|---|---|---|"]
        rows = sorted(_families(objects))
        for name, kind, labels, doc in rows:
            shown = ", ".join(f"`{label}`" for label in labels)
            out.append(f"| `{_metric_name(name, kind)}` | {kind} | {shown} | {doc} |")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ command line


def _commands(
    parser: argparse.ArgumentParser, path: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:  # private: argparse offers no walk of subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def cli_reference() -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        out = [
            "# Command-line reference",
            "",
            "Generated from the parser by `python scripts/update_reference.py`; do not edit.",
            "Each section is the command's `--help`.",
        ]
        for path, parser in _commands(build_parser(), "ballast"):
            out += ["", f"## `{path}`", "", "```", parser.format_help().rstrip(), "```"]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(out) + "\n"


PAGES = {"config.md": config_reference, "metrics.md": metrics_reference, "cli.md": cli_reference}


def main() -> None:
    DOCS.mkdir(exist_ok=True)
    for name, render in PAGES.items():
        (DOCS / name).write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    main()
