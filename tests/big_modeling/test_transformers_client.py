"""transformers as a real client: its ``device_map="auto"`` path runs on our hooks and dispatch."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
# transformers enables its accelerate integration only from this version on (ACCELERATE_MIN_VERSION).
NEEDED = (1, 1, 0)


def _env(tmp_path: Path) -> dict[str, str]:
    paths = [str(ROOT / "src"), str(ROOT)]
    installed = tuple(int(p) for p in importlib.metadata.version("accelerate").split(".")[:3] if p.isdigit())
    if installed < NEEDED:
        # The venv's metadata is from an older install of this package; present it as the version
        # the package declares upstream compatibility with, so transformers' gate opens.
        info = tmp_path / "meta" / "accelerate-1.15.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 1.15.0\n")
        paths.append(str(tmp_path / "meta"))
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def test_from_pretrained_device_map_auto_with_disk_offload(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.big_modeling.transformers_client_run", str(tmp_path / "model")],
        capture_output=True, text=True, cwd=ROOT, env=_env(tmp_path), timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["accelerate_available"], report
    assert "disk" in report["devices"] and report["hooked"] > 0, report
    assert report["equal"] and report["generate_equal"], report


def test_transformers_imports_accelerate_hooks(tmp_path: Path) -> None:
    code = "import transformers.modeling_utils, accelerate.hooks; print('ok')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-4000:]
