"""mxnet_amp.cli.output (cli/output): what every command prints and writes."""
import json
import os
from argparse import Namespace

import mxnet as mx

from mxnet_amp.cli.output import PROG, finish, native_log_silenced, say, with_note, write_outputs
from mxnet_amp.convert import convert_graph
from mxnet_amp.mx.io import graph_from_symbol
from mxnet_amp.options import make_options
from mxnet_amp.report.model import build_report


def _conversion_and_report():
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    conv = convert_graph(graph_from_symbol(sym), make_options("bfloat16"), data_names=["data"])
    return conv, build_report(conv, model="tiny")


def _args(**kw):
    base = dict(report=None, graph=None, html=None, quiet=False, detail=False)
    base.update(kw)
    return Namespace(**base)


def test_say_writes_to_stderr_only(capsys):
    """Messages go to stderr; stdout is kept for the report."""
    say(f"{PROG}:", "hello")
    out, err = capsys.readouterr()
    assert out == "" and err == "mxnet-amp: hello\n"


def test_notes_are_added_without_changing_the_report():
    """with_note appends to the report's notes, which the JSON writes as ``extra.notes``;
    the original is untouched."""
    _, report = _conversion_and_report()
    noted = with_note(with_note(report, "first"), "second")
    assert noted.notes == ("first", "second")
    assert noted.to_dict()["extra"] == {"notes": ["first", "second"]}
    assert report.notes == () and "extra" not in report.to_dict()


def test_write_outputs_writes_the_files_the_flags_name(tmp_path):
    """--report writes the report JSON and --html a page holding the graph picture."""
    conv, report = _conversion_and_report()
    rep, page = tmp_path / "r.json", tmp_path / "r.html"
    written = write_outputs(_args(report=str(rep), html=str(page)), conv, report)
    assert written == [str(rep), str(page)]
    assert json.loads(rep.read_text())["model"] == "tiny"
    assert "<svg" in page.read_text()


def test_the_html_page_opens_with_a_precision_map_at_the_given_input_shape(tmp_path):
    """--html: the precision map comes first, its FLOPs estimated at --input-shape's shape
    (assumed nothing), and the graph picture last."""
    conv, report = _conversion_and_report()
    page = tmp_path / "r.html"
    write_outputs(_args(html=str(page), input_shapes=["data:4x10"]), conv, report)
    text = page.read_text()
    assert text.index("precision-map") < text.index("<h2>Graph")
    assert "estimated FLOPs at input data 4x10</text>" in text
    assert "bfloat16: 1 ops, 100.0% of FLOPs" in text
    write_outputs(_args(html=str(page), inputs=["data:3x5"]), conv, report)   # auto's --input
    assert "estimated FLOPs at input data 3x5</text>" in page.read_text()
    write_outputs(_args(html=str(page), inputs=["data:x.npy"]), conv, report)
    assert "no shapes known" in page.read_text()


def test_finish_prints_the_table_to_stderr_when_the_report_goes_to_stdout(capsys):
    """With --report - the JSON alone is on stdout; the table and 'wrote -' go to stderr."""
    conv, report = _conversion_and_report()
    finish(_args(report="-"), conv, report, ["a finding"])
    out, err = capsys.readouterr()
    assert json.loads(out)["model"] == "tiny"
    assert "a finding" in err and "wrote - (standard output)" in err


def test_native_log_silenced_hides_fd2_and_restores_it(capfd):
    """What is written to file descriptor 2 inside the block is dropped; after, it shows again."""
    with native_log_silenced():
        os.write(2, b"hidden\n")
    os.write(2, b"shown\n")
    err = capfd.readouterr().err
    assert "hidden" not in err and "shown" in err


def test_a_report_that_cannot_be_written_after_the_checkpoint_says_what_is_on_disk(tmp_path):
    """--report /dev/full fails after the checkpoint is written: the OutputPathError (exit 2)
    names the cause and the files written and complete before it (newcomer audit, #42)."""
    import pytest
    from mxnet_amp.errors import OutputPathError
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    conv, report = _conversion_and_report()
    rep = tmp_path / "r.json"
    with pytest.raises(OutputPathError, match=r"cannot write /dev/full: No space left on device; "
                       r"written and complete before it: m-symbol.json, m-0000.params$"):
        finish(_args(report="/dev/full"), conv, report, on_disk=["m-symbol.json", "m-0000.params"])
    # a report written before the failing page is named too
    with pytest.raises(OutputPathError, match=r"complete before it: m-symbol.json, .*r.json$"):
        finish(_args(report=str(rep), html="/dev/full"), conv, report, on_disk=["m-symbol.json"])
    assert json.loads(rep.read_text())["model"] == "tiny"
