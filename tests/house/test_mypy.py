"""mypy over the package, at the strictness mypy.ini states: zero errors.

Part of the README's test command (and so of .ci/run): annotations that no checker reads drift.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_reports_no_errors():
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    # a cache outside the tree: the repository stays clean, later runs are incremental; one per
    # checkout, since a cache written by a tree with other module paths crashes mypy
    tree = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / f"mxnet-amp-mypy-cache-{tree}"
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini"),
                           "--cache-dir", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_mypy_config_is_strict_where_stated():
    text = (ROOT / "mypy.ini").read_text()
    assert "disallow_untyped_defs = False" not in text
    for option in ("disallow_untyped_defs = True", "disallow_incomplete_defs = True", "check_untyped_defs = True",
                   "warn_return_any = True", "no_implicit_optional = True"):
        assert option in text
