"""Every shell command of README.md and docs/getting_started.md runs and exits 0.

The two set-up commands (install + ``mxnet-amp demo``, install + the tests) are checked
here; the ``mxnet-amp ...`` lines of getting_started run with its examples
(``tests/house/test_docs.py``). In CI the demo command runs with this environment's console
script (the install part is what CI itself just did, by ``.ci/run``, which must be the
README's test command); the test command is not run from inside pytest (it would run this
suite again): it must equal ``.ci/run``'s, which is what CI runs. The fresh-venv variant,
which runs both set-up commands from scratch in a copy of the repository, is slow.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", ROOT / "docs" / "getting_started.md")
_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def shell_commands(text: str) -> list[str]:
    """Command lines of the shell blocks (no language, sh, bash) of a markdown text."""
    out = []
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in ("", "sh", "bash", "shell"):
            out += [ln.strip() for ln in m.group(2).splitlines()
                    if ln.strip() and not ln.strip().startswith("#")]
    return out


def setup_commands(path: Path) -> list[str]:
    return [c for c in shell_commands(path.read_text(encoding="utf-8")) if c.startswith("python3 -m venv")]


def ci_commands() -> list[str]:
    return [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
            if ln.strip() and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]


def ci_command() -> str:
    """The README's test command: the line of .ci/run that runs the suite. Lines before it set
    up what tests use beside the extras (an onnx>=1.23 environment, onnxruntime); one line
    after it, the AVX2 pass."""
    lines = ci_commands()
    runs = [ln for ln in lines if ln.endswith("-m pytest")]
    assert len(runs) == 1 and lines.index(runs[0]) == len(lines) - 2, lines
    return runs[0]


def test_ci_reruns_the_hardware_gated_tests_as_an_avx2_cpu():
    """.ci/run's second, short pass: the tests marked native_bf16 (tests/conftest.py marks
    every test that asks the hardware gate) under DNNL_MAX_CPU_ISA=AVX2, in the venv the
    first command made; exit 5 (nothing selected) is no failure."""
    lines = ci_commands()
    second = lines[lines.index(ci_command()) + 1]
    assert second.startswith("DNNL_MAX_CPU_ISA=AVX2 .venv/bin/python -m pytest ")
    assert '-m "native_bf16 and not slow"' in second and second.endswith("|| [ $? -eq 5 ]")
    assert "native_bf16:" in (ROOT / "pytest.ini").read_text()   # registered


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_second():
    demo, tests = setup_commands(ROOT / "README.md")    # exactly two
    assert demo.endswith(".venv/bin/mxnet-amp demo")
    assert tests == ci_command()
    # getting_started shows the same two, not variants of them
    assert setup_commands(ROOT / "docs" / "getting_started.md") == [demo, tests]


def test_every_shell_command_is_checked():
    """A command of these pages is a set-up command (checked here) or an ``mxnet-amp`` line
    of getting_started's examples (run by tests/house/test_docs.py)."""
    for page in PAGES:
        for command in shell_commands(page.read_text(encoding="utf-8")):
            assert command.startswith("python3 -m venv") or (
                page.name == "getting_started.md" and command.startswith("mxnet-amp ")), \
                f"{page.name}: no test runs `{command}`"


def test_setup_commands_install_extras_that_exist():
    extras = set(importlib.metadata.metadata("mxnet-amp").get_all("Provides-Extra"))
    for command in setup_commands(ROOT / "README.md"):
        install = next(part for part in command.split("&&") if "pip install" in part)
        (spec,) = [w for w in shlex.split(install) if w.startswith(".[")]
        asked = set(spec[2:-1].split(","))
        assert asked <= extras, f"`{install.strip()}` asks for extras {asked - extras} setup.py lacks"


def test_readme_demo_command_runs(tmp_path):
    (demo, _) = setup_commands(ROOT / "README.md")
    last = demo.split("&&")[-1].split()
    assert last[0] == ".venv/bin/mxnet-amp"
    script = Path(sys.executable).parent / "mxnet-amp"     # this environment's console script
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "mxnet_amp"]
    done = subprocess.run(argv + last[1:], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Accuracy (" in done.stdout


@pytest.mark.slow
def test_setup_commands_in_a_fresh_venv(tmp_path):
    """Both README set-up commands from scratch, in a copy of the tracked files; the test
    command runs with ``--collect-only`` (the suite itself is what CI runs)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src, dst = ROOT / name, tmp_path / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    demo, tests = setup_commands(ROOT / "README.md")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    for command in (demo, tests + " --collect-only -q"):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                              timeout=1800, env=env)
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
