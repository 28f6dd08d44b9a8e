"""The HTML page of `mxnet-amp auto`: the figures the terminal shows (no placeholder), each
kept node's reason with units, and the attribution bars, read back from the rendered page."""
import json
from html.parser import HTMLParser

import mxnet as mx
import numpy as np

from mxnet_amp.cli.main import main
from mxnet_amp.mx.io import save_checkpoint

from auto_models import cancellation_model


class _Page(HTMLParser):
    """Text by table row, and the bars of the attribution picture."""

    def __init__(self):
        super().__init__()
        self.rows, self.row, self.text = [], None, []
        self.bars, self.in_svg, self.svg_text = [], False, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr":
            self.row = []
        if tag == "svg" and a.get("class") == "attribution":
            self.in_svg = True
        if tag == "rect" and self.in_svg:
            self.bars.append((a["class"], float(a["width"])))

    def handle_endtag(self, tag):
        if tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None
        if tag == "svg":
            self.in_svg = False

    def handle_data(self, data):
        self.text.append(data)
        if self.row is not None and data.strip():
            self.row.append(data.strip())
        if self.in_svg and data.strip():
            self.svg_text.append(data.strip())


def _run_auto(tmp_path, *extra):
    sym, args, x = cancellation_model()
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    np.save(tmp_path / "x.npy", x)
    page, rep = tmp_path / "a.html", tmp_path / "a.json"
    assert main(["auto", prefix, "--epoch", "0", "--target-dtype", "float16",
                 "--input", f"data:{tmp_path / 'x.npy'}", "--out", str(tmp_path / "o"),
                 "--html", str(page), "--report", str(rep), "-q", *extra]) == 0
    parsed = _Page()
    parsed.feed(page.read_text())
    return parsed, json.loads(rep.read_text())["extra"]["auto"]


def test_auto_page_shows_the_check_the_kept_reasons_and_the_attribution(tmp_path, capsys):
    page, auto = _run_auto(tmp_path)
    text = " ".join(page.text)
    assert "?" not in text.replace("?>", "")           # no placeholder figure anywhere
    rows = {r[0]: " ".join(r[1:]) for r in page.rows if r}
    assert f"{auto['relative_error']:.3g}" in rows["check"]
    assert "tolerance 0.01" in rows["check"]
    assert rows["executions"].startswith(f"{auto['executions']} (1 reference, 1 check, "
                                         "1 attribution, 1 validate")
    kept = [r for r in page.rows if r and r[0] == "fc_c"]
    assert kept and kept[0][2] == "accuracy" and "relative error" in kept[0][3]
    assert "> tolerance 0.01" in kept[0][3]
    # one bar pair per node, sorted by contribution: the kept node first and longest
    assert page.bars and page.bars[0][0] == "kept"
    contrib = page.bars[0::2]
    assert contrib[0][1] == max(w for _, w in contrib)
    assert [w for _, w in contrib] == sorted((w for _, w in contrib), reverse=True)
    assert len(contrib) == len(auto["attribution"])
    every = [a["name"] for a in auto["attribution"]]
    assert [t for t in page.svg_text if t in set(every)] == every and every[0] == "fc_c"


def test_auto_page_states_allclose_bounds(tmp_path, capsys):
    page, auto = _run_auto(tmp_path, "--rtol", "0.02", "--atol", "0.001")
    rows = {r[0]: " ".join(r[1:]) for r in page.rows if r}
    assert "allclose rtol 0.02, atol 0.001" in rows["check"]
    assert f"{auto['max_abs_error']:.3g}" in rows["check"]


def test_auto_eval_data_judges_by_the_metric_and_the_page_says_so(tmp_path, capsys):
    from auto_models import run as run_model
    sym, args, x = cancellation_model()
    np.savez(tmp_path / "eval.npz", data=x)
    np.save(tmp_path / "y.npy", run_model(sym, args, {}, x))   # regression targets
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    page_path, rep = tmp_path / "a.html", tmp_path / "a.json"
    assert main(["auto", prefix, "--epoch", "0", "--target-dtype", "float16", "--eval-data",
                 str(tmp_path / "eval.npz"), "--labels", str(tmp_path / "y.npy"), "--metric",
                 "mse", "--max-drop", "0.001", "--out", str(tmp_path / "o"), "--html",
                 str(page_path), "--report", str(rep), "-q"]) == 0
    auto = json.loads(rep.read_text())["extra"]["auto"]
    assert auto["criterion"] == "metric" and auto["validated"]
    assert auto["metric"]["name"] == "mse" and auto["metric"]["drop"] <= 0.001
    assert [(k["name"], k["reason"]) for k in auto["kept_fp32"]] == [("fc_c", "metric")]
    page = _Page()
    page.feed(page_path.read_text())
    rows = {r[0]: " ".join(r[1:]) for r in page.rows if r}
    assert rows["metric"].startswith("mse: float32 ") and "allowed 0.001, absolute" in rows["metric"]
    assert [r[2] for r in page.rows if r and r[0] == "fc_c"] == ["user metric"]


def test_auto_eval_data_needs_labels(tmp_path, capsys):
    sym, args, x = cancellation_model()
    np.savez(tmp_path / "eval.npz", data=x)
    prefix = str(tmp_path / "m")
    save_checkpoint(prefix, 0, sym, args, {})
    assert main(["auto", prefix, "--epoch", "0", "--eval-data", str(tmp_path / "eval.npz")]) == 2
    assert "--eval-data needs --labels" in capsys.readouterr().err
