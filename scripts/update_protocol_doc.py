"""Rewrite the JSON Schema blocks of docs/protocol.md from controller/wire/records.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from controller.wire.records import json_schemas

DOC = Path(__file__).parents[1] / "docs" / "protocol.md"
ORDER = ("assignment", "fence", "constraints", "presence", "lag", "offset_sample", "trace_event")


def main() -> None:
    schemas = iter(json_schemas()[name] for name in ORDER)
    text = re.sub(
        r"```json\n.*?\n```",
        lambda _m: "```json\n" + json.dumps(next(schemas), indent=2, sort_keys=True) + "\n```",
        DOC.read_text(),
        flags=re.S,
    )
    DOC.write_text(text)


if __name__ == "__main__":
    main()
