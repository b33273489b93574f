"""How long ``ballast`` takes to answer: what importing the CLI module costs
(``python -X importtime``) and the wall time of a few commands, beside the interpreter's
own start, for this checkout and for any other given with ``--tree`` (an earlier commit's
worktree: the same interpreter and packages, that tree's code), in one run.

    python benchmarks/cli_startup.py
    git worktree add /tmp/before 3678b41 && python benchmarks/cli_startup.py --tree /tmp/before
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

#: Runs ``ballast`` from ``tree``: the editable install's finder (which would resolve
#: ``controller`` to this checkout whatever sys.path says) is taken out first.
LAUNCH = (
    "import sys; sys.path.insert(0, {tree!r}); "
    "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
    "getattr(f, '__module__', '')]; "
    "{body}"
)
MAIN = "from controller.cli import main; sys.exit(main(sys.argv[1:]))"

#: The commands timed: an operator's (the controller is on a closed port: refused at
#: once), the two that only print, and a worker's (every simulated member starts so).
COMMANDS: dict[str, list[str]] = {
    "--version": ["--version"],
    "--help": ["--help"],
    "status": ["status", "--url", "http://127.0.0.1:9"],
    "worker --help": ["worker", "--help"],
}


def _wall(argv: list[str], runs: int) -> float:
    """Median seconds of ``runs`` runs of ``argv``."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _import_ms(tree: Path, runs: int) -> float:
    """Median cumulative microseconds ``-X importtime`` gives ``controller.cli``, in ms."""
    code = LAUNCH.format(tree=str(tree), body="import controller.cli")
    samples = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            check=True,
        )
        (line,) = [
            ln for ln in done.stderr.splitlines() if ln.rstrip().endswith("| controller.cli")
        ]
        samples.append(int(line.split("|")[1]) / 1000)
    return statistics.median(samples)


def measure(tree: Path, runs: int) -> dict[str, float]:
    """Milliseconds: the import, then each command's wall time."""
    launch = [sys.executable, "-c", LAUNCH.format(tree=str(tree), body=MAIN)]
    row = {"import controller.cli": _import_ms(tree, runs)}
    for name, words in COMMANDS.items():
        row[f"ballast {name}"] = 1000 * _wall([*launch, *words], runs)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another checkout")
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (median)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args()
    interpreter = _wall([sys.executable, "-c", "pass"], args.runs)
    rows = {str(t): measure(t.resolve(), args.runs) for t in [HERE, *args.tree]}
    if args.json:
        print(json.dumps({"python_start_ms": 1000 * interpreter, "trees_ms": rows}, indent=2))
        return
    print(f"python -c pass: {interpreter * 1000:.0f} ms; medians of {args.runs} runs, in ms")
    names = list(next(iter(rows.values())))
    print(f"{'tree':<24}" + "".join(f"{n:>24}" for n in names))
    for tree, row in rows.items():
        print(f"{tree:<24}" + "".join(f"{v:>24.0f}" for v in row.values()))
    here = rows[str(HERE)]
    for tree, row in rows.items():
        if tree != str(HERE):
            ratios = ", ".join(f"{n} {row[n] / here[n]:.1f}x" for n in names)
            print(f"{tree} / this checkout: {ratios}")


if __name__ == "__main__":
    main()
