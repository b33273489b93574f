"""docs/protocol.md embeds the JSON Schemas generated from controller/wire/records.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from controller.wire.records import json_schemas

DOC = Path(__file__).parents[3] / "docs" / "protocol.md"


def test_protocol_doc_schemas_match_the_code() -> None:
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", DOC.read_text(), re.S)]
    schemas = json_schemas()
    assert blocks == [
        schemas[k]
        for k in (
            "assignment",
            "fence",
            "constraints",
            "presence",
            "lag",
            "offset_sample",
            "trace_event",
        )
    ], "docs/protocol.md is stale: run `python scripts/update_protocol_doc.py`"
