"""The installed package (not the source tree) finds its op lists."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_the_lists_and_an_installed_copy_loads_them(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(wheels), str(ROOT)], check=True, capture_output=True)
    (wheel,) = wheels.glob("mxnet_amp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "mxnet_amp/lists/float16.toml" in names and "mxnet_amp/lists/bfloat16.toml" in names
    assert "mxnet_amp/kernels/round.cc" in names   # compiled on first use (mxnet_amp.kernels)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    code = ("import mxnet_amp, mxnet_amp.policy_load as p; "
            "print(p.lists_dir()); print(len(mxnet_amp.list_lp16_ops('bfloat16')))")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=env, cwd=tmp_path).stdout.split()
    assert Path(out[0]) == target / "mxnet_amp" / "lists"
    assert int(out[1]) > 0
