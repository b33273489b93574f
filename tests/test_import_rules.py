"""The import rules of docs/architecture.md: each import-linter contract is broken on
purpose in a copy of the source and must be reported, aiokafka's, aiomqtt's and paho's
internals are used in ``controller/adapters`` only, and a client binding loads no other
binding's library."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("assignors", "controller", "pipeline")

#: One import per contract that breaks it (and, where possible, no other).
BREAKS = {
    "floors": ("controller/runtime/daemon.py", "import controller.client.consumer"),
    "wire-pure": ("controller/wire/records.py", "import asyncio"),
    "core-pure": ("controller/core/deadlines.py", "import aiokafka"),
    "client-pipeline": ("pipeline/traces.py", "import controller.runtime.health"),
    "leaves": ("controller/errors.py", "import controller.adapters.side_loop"),
    "assignors-public": ("controller/tools/scenario.py", "import assignors.engine"),
    "assignors-alone": ("assignors/types.py", "import controller.errors"),
    "no-pipeline": ("controller/tools/demo.py", "import pipeline.traces"),
}

#: aiokafka's and aiomqtt's modules meant for applications (their documented API).
PUBLIC_MODULES = {
    "aiokafka",
    "aiokafka.admin",
    "aiokafka.errors",
    "aiokafka.structs",
    "aiokafka.helpers",
    "aiokafka.abc",
    "aiomqtt",
    # paho's documented client API, used directly by the synchronous bindings' presence
    # (client/sync_presence.py); what aiomqtt keeps of paho's stays in the adapters.
    "paho.mqtt.client",
    "paho.mqtt.enums",
}
#: Private attributes of their objects that the adapters use, named once each there.
PRIVATE_ATTRIBUTES = {
    "_client",
    "_topics",
    "_coordinator",
    "_loop",
    "_disconnected",
    "_on_socket_register_write",
}


def contracts() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c["name"] for c in config["tool"]["importlinter"]["contracts"]}


def lint_imports(root: Path) -> str:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout + done.stderr


def test_every_contract_is_broken_on_purpose_somewhere() -> None:
    assert set(BREAKS) == set(contracts())


def test_each_contract_reports_the_import_that_breaks_it(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    clean = lint_imports(tmp_path)
    assert "0 broken" in clean, clean
    for module, line in BREAKS.values():
        with (tmp_path / module).open("a") as source:
            source.write(f"\n{line}  # noqa\n")
    broken = lint_imports(tmp_path)
    for ident, name in contracts().items():
        reported = " ".join(broken.split())
        assert f"{name} BROKEN" in reported, f"{ident}: {BREAKS[ident]} not reported"
    assert f"0 kept, {len(BREAKS)} broken" in broken


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def internals_used(path: Path) -> list[str]:
    """Imports of the client libraries' internal modules and uses of their private
    attributes in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            top = module.split(".")[0]
            if top in {"aiokafka", "aiomqtt", "paho"} and module not in PUBLIC_MODULES:
                found.append(f"imports {module}")
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            owner = ast.unparse(node.value)
            found += (
                [] if owner in {"self", "cls"} else [f"line {node.lineno}: {owner}.{node.attr}"]
            )
    return found


def test_client_library_internals_are_used_in_the_adapters_only() -> None:
    adapters = ROOT / "controller" / "adapters"
    outside = {
        str(p.relative_to(ROOT)): used
        for p in sources()
        if adapters not in p.parents and (used := internals_used(p))
    }
    assert outside == {}
    inside = [used for p in adapters.glob("*.py") for used in internals_used(p)]
    assert len(inside) >= 10  # the adapters are where they are


@pytest.mark.parametrize(
    "code",
    [
        "from aiokafka.protocol.metadata import MetadataRequest",
        "import aiokafka.client",
        "import paho.mqtt.reasoncodes",
        "x = consumer._coordinator",
    ],
)
def test_the_internals_check_sees_each_kind(tmp_path: Path, code: str) -> None:
    module = tmp_path / "m.py"
    module.write_text(code + "\n")
    assert internals_used(module)


#: A group's state keeps its engine and its reconciler to itself: the runtime, the tools
#: and the client use ``GroupState``'s own methods (and ``core.views``).
INNER = {"engine", "reconciler"}


def inner_state_reached(path: Path) -> list[str]:
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in INNER
        and ast.unparse(node.value) not in {"self", "cls"}
    ]


def test_only_the_core_reaches_into_a_groups_engine_or_reconciler() -> None:
    core = ROOT / "controller" / "core"
    outside = {
        str(p.relative_to(ROOT)): found
        for p in sources()
        if "assignors" not in p.relative_to(ROOT).parts[:1]
        and core not in p.parents
        and (found := inner_state_reached(p))
    }
    assert outside == {}
    assert any(inner_state_reached(p) for p in core.glob("*.py"))  # the views do


def test_the_front_door_check_sees_a_reach(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("g.state.reconciler.timed_out.clear()\nx = state.engine\n")
    assert len(inner_state_reached(module)) == 2


def _loaded_by(imports: str) -> set[str]:
    """The Kafka client libraries and daemon modules a fresh interpreter has loaded after
    ``imports``."""
    probe = (
        f"import sys; {imports}; "
        "print(' '.join({m.split('.')[0] for m in sys.modules} & "
        "{'aiokafka', 'kafka', 'confluent_kafka'} | "
        "{m for m in sys.modules if m.startswith('controller.runtime')}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    ("binding", "library"),
    [
        ("from controller.client.confluent import BallastConsumer", "confluent_kafka"),
        ("from controller.client.kafka_python import BallastKafkaConsumer", "kafka"),
        ("from controller.client import ManagedConsumer", "aiokafka"),
    ],
)
def test_a_client_binding_loads_its_library_only_and_not_the_daemon(
    binding: str, library: str
) -> None:
    """An application imports its binding (and the package's shared public names)
    without the other bindings' client libraries or the daemon being loaded."""
    shared = "from controller.client import PresenceOptions, MqttAuth"
    assert _loaded_by(f"{binding}; {shared}") == {library}
