"""What a user of the command line sees: the HTML page of every command, --version, dtype
aliases, the note when this machine cannot run the model, and byte progress bars."""
import html
import json
import re

import numpy as np
import pytest

from mxnet_amp import convert_model
from mxnet_amp.cli.main import main
from mxnet_amp.errors import TargetDtypeError
from mxnet_amp.mx.io import load_checkpoint, save_checkpoint
from mxnet_amp.policy import check_target_dtype

from helpers import small_model


@pytest.fixture()
def ckpt(tmp_path):
    sym, args, auxs = small_model()
    prefix = str(tmp_path / "small")
    save_checkpoint(prefix, 0, sym, args, auxs)
    return prefix


def _text(page: str) -> str:
    """Visible text of an HTML page (tags dropped, whitespace collapsed), the SVG left out."""
    page = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _summary_fields_present(text: str, report: dict) -> None:
    for label in ("Summary", "target dtype", "op nodes", "casts inserted", "Nodes kept in float32"):
        assert label in text, label
    assert f"op nodes {report['total_nodes']}" in text
    # every float32 node is named on the page
    for node in report["fp32_nodes"]:
        assert node["name"] in text, node["name"]


def test_convert_html(ckpt, tmp_path, capsys):
    page, rep = tmp_path / "c.html", tmp_path / "c.json"
    assert main(["convert", ckpt, "--target-dtype", "fp16", "--out", str(tmp_path / "o"),
                 "--exclude", "conv2", "--no-cast-optional-params", "--html", str(page),
                 "--report", str(rep), "-q"]) == 0
    report = json.loads(rep.read_text())
    text = _text(page.read_text())
    _summary_fields_present(text, report)
    assert report["target_dtype"] == "float16" and "conv2" in text
    # the weight-cast hint is on the page too, not only in the terminal table
    assert report["weight_casts"] > 0 and f"{report['weight_casts']} of the amp_casts convert weights" in text
    # float16 never runs on this CPU: the note says so, on stderr and on the page
    err = capsys.readouterr().err
    assert "mxnet-amp: note: this machine cannot execute the float16 model" in err
    assert "NVIDIA GPU" in text and report["extra"]["notes"]
    assert "Result" not in text     # convert measures nothing


def test_auto_html_shows_its_result(ckpt, tmp_path, capsys):
    pytest.importorskip("mxnet_amp.auto")
    page, rep = tmp_path / "a.html", tmp_path / "a.json"
    assert main(["auto", ckpt, "--target-dtype", "bf16", "--input", "data:2x3x8x8",
                 "--out", str(tmp_path / "o"), "--html", str(page), "--report", str(rep), "-q"]) == 0
    auto = json.loads(rep.read_text())["extra"]["auto"]
    text = _text(page.read_text())
    assert ("Result validated" if auto["validated"] else "Result NOT validated") in text
    assert f"executions {auto['executions']}" in text
    assert f"{auto['tolerance_ratio']:.3g} x tolerance" in text and "check max |out - fp32|" in text
    for kept in auto["kept_fp32"]:
        assert kept["name"] in text


def test_auto_html_says_the_reference_holds_inf(capsys):
    """A float32 reference with inf: automatic mode's note reaches the page.

    The CLI refuses such a run (tests/stories/test_data_safety.py); an API caller still gets the
    report, and its page must say why nothing could be validated."""
    import dataclasses

    import mxnet as mx
    from mxnet_amp import auto_convert_model
    from mxnet_amp.auto.html import report_section
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.report.model import build_report
    from mxnet_amp.report.pages import report_html
    d = mx.sym.var("data")
    sym = mx.sym.exp(mx.sym.FullyConnected(d, num_hidden=4, name="fc"), name="e")
    args = {"fc_weight": mx.nd.ones((4, 4)) * 100, "fc_bias": mx.nd.zeros(4)}
    inputs = {"data": np.ones((2, 4), "float32")}
    *_, auto = auto_convert_model(sym, args, {}, inputs, quiet=True)
    assert not auto.reference_finite
    _, new_args, new_aux, conversion = convert_model_full(sym, args, {})
    report = build_report(conversion, args, {}, new_args, new_aux)
    report = dataclasses.replace(report, auto=report_section(auto))
    assert "the float32 reference outputs hold inf/nan" in _text(report_html(report))


@pytest.mark.native_bf16   # native: the speed-up; elsewhere the emulation sentence
def test_demo_html_shows_its_result(tmp_path, capsys):
    page, rep = tmp_path / "d.html", tmp_path / "d.json"
    assert main(["demo", "--size", "32", "--runs", "1", "--html", str(page), "--report", str(rep)]) == 0
    report = json.loads(rep.read_text())
    text = _text(page.read_text())
    _summary_fields_present(text, report)
    extra = report["extra"]
    assert f"max |diff| / max |fp32| {extra['relative_max_error']:.2e}" in text
    assert f"top-1 agreement {extra['top1_agreement'] * 100:.0f}%" in text
    assert extra["execution"] in text and extra["input"] == "2x3x32x32"
    if extra["native"]:
        assert f"speed-up x{extra['speedup']:.2f}" in text
    else:   # the terminal's sentence, word for word: unavailable, emulated, speed not measured
        [said] = [line for line in capsys.readouterr().out.splitlines()
                  if line.startswith("Native bfloat16 is unavailable on this CPU")]
        assert "checked by emulation" in said and "speed was not measured" in said
        assert said in text
    assert f"CPU: {report['cpu']}" in text and "native bfloat16: " in report["cpu"]
    assert "<svg" in page.read_text()


def test_demo_takes_gluoncv_names(tmp_path, capsys):
    pytest.importorskip("gluoncv")
    rep = tmp_path / "d.json"
    assert main(["demo", "--model", "resnet18_v1b", "--size", "32", "--runs", "1",
                 "--report", str(rep), "-q"]) == 0
    assert json.loads(rep.read_text())["model"] == "resnet18_v1b"
    assert main(["demo", "--model", "no_such_net", "-q"]) == 2
    assert "no_such_net" in capsys.readouterr().err


def test_demo_runs_a_gluoncv_detector_and_says_its_outputs_select(tmp_path, capsys):
    """gluoncv's SSD gives its heads a Xavier init that fails on 1-D params: the demo
    initialises standard params itself; its NMS outputs get a note, not a bare error figure."""
    pytest.importorskip("gluoncv")
    rep = tmp_path / "d.json"
    assert main(["demo", "--model", "ssd_300_mobilenet0.25_voc", "--size", "64", "--runs", "1",
                 "--report", str(rep), "-q"]) == 0
    notes = json.loads(rep.read_text())["extra"]["notes"]
    assert any("_contrib_box_nms" in n and "says little" in n for n in notes)
    assert "_contrib_box_nms" in capsys.readouterr().out


def test_version(capsys):
    import mxnet_amp
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mxnet-amp {mxnet_amp.__version__}"


@pytest.mark.parametrize("alias,name", [("fp16", "float16"), ("float16", "float16"), ("half", "float16"),
                                        ("FP16", "float16"), ("bf16", "bfloat16"),
                                        ("bfloat16", "bfloat16"), ("BF16", "bfloat16")])
def test_dtype_aliases_everywhere(alias, name, ckpt, tmp_path, capsys):
    assert check_target_dtype(alias) == name
    sym, args, auxs = small_model()
    sym16, _, _ = convert_model(sym, args, auxs, target_dtype=alias)
    from mxnet_amp.mx.io import symbol_json
    casts = {n["attrs"]["dtype"] for n in json.loads(symbol_json(sym16))["nodes"] if n["op"] == "amp_cast"}
    assert name in casts
    rep = tmp_path / "r.json"
    assert main(["inspect", ckpt, "--target-dtype", alias, "--report", str(rep), "-q"]) == 0
    assert json.loads(rep.read_text())["target_dtype"] == name


def test_bad_dtype_names_the_choices(ckpt, capsys):
    with pytest.raises(TargetDtypeError, match="fp16"):
        check_target_dtype("fp8")
    assert main(["inspect", ckpt, "--target-dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert "'fp8'" in err and "float16" in err and "bf16" in err


def test_progress_bars_count_bytes(ckpt, tmp_path, capsys):
    from mxnet_amp.checkpoint import convert_checkpoint
    convert_checkpoint(ckpt, 0, str(tmp_path / "o"), target_dtype="bfloat16", progress=True)
    err = capsys.readouterr().err
    for what in ("reading small-0000.params", "converting params", "writing o-0000.params"):
        assert what in err, err
    assert "B/s" in err or "B " in err
    # off by default, and the result is the same either way
    sym, args, _ = load_checkpoint(str(tmp_path / "o"), 0)
    convert_checkpoint(ckpt, 0, str(tmp_path / "q"), target_dtype="bfloat16")
    assert capsys.readouterr().err == ""
    sym2, args2, _ = load_checkpoint(str(tmp_path / "q"), 0)
    assert sym.tojson() == sym2.tojson() and sorted(args) == sorted(args2)


def test_hardware_note_matches_the_probe():
    from mxnet_amp.mx.hardware import bf16_runs_natively, native_note
    note = native_note("bf16")
    assert (note is None) == bf16_runs_natively()
    if note is not None:
        assert "avx512_bf16" in note and "emulate_model" in note
    fp16 = native_note("float16")
    import mxnet as mx
    if mx.context.num_gpus() == 0:
        assert "GPU" in fp16 and "emulate_model" in fp16
