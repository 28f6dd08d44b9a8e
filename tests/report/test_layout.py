"""mxnet_amp.report.layout (report/layout): boxes placed in layers, text fitted, edges routed."""
from types import MappingProxyType

from mxnet_amp.report.layout import CHAR_WIDTH, box_lines, fit_text, layout
from mxnet_amp.report.picture import Box, Picture


def _box(title, kind="op", dtype="float32", ops=None):
    ops = ops or {"FullyConnected": 1}
    return Box(title, (0,), MappingProxyType({dtype: 1}), MappingProxyType(ops), 0, kind=kind, dtype=dtype)


def test_fit_text_cuts_with_an_ellipsis_to_the_width():
    """Text wider than the width ends in '…' and fits; shorter text is unchanged."""
    assert fit_text("short", 100 * CHAR_WIDTH) == "short"
    cut = fit_text("a" * 50, 10 * CHAR_WIDTH)
    assert cut.endswith("…") and len(cut) == 10


def test_box_lines_say_what_each_kind_of_box_holds():
    """An input says 'input · dtype', a cast its target, an op its op and dtype, a repeated
    group 'N identical blocks'."""
    assert box_lines(_box("data", "input"), "float16") == ["data", "input · float32"]
    assert box_lines(_box("c", "cast", "float16"), "float16") == ["c → float16"]
    assert box_lines(_box("fc", dtype="float16"), "float16") == ["fc", "FullyConnected · float16"]
    group = Box("stage1", (0, 1), MappingProxyType({"float16": 3}), MappingProxyType({"Convolution": 3}),
                2, repeat=4, kind="group", dtype="float16")
    lines = box_lines(group, "float16")
    assert lines[1] == "3 ops: 3 float16 · 2 casts"
    assert lines[-1] == "per block; 4 identical blocks in a row"


def test_layout_puts_each_box_below_the_box_it_reads():
    """In a chain a -> b -> c each box lies below its source, inside the picture, and every
    edge gets a path."""
    pic = Picture((_box("a", "input"), _box("b"), _box("c")), ((0, 1, "float32"), (1, 2, "float32")),
                  False, "chain")
    lay = layout(pic, "float16")
    ys = [lay.geom[k][1] for k in range(3)]
    assert ys[0] < ys[1] < ys[2]
    assert len(lay.paths) == 2 and all(p.startswith("M") for p in lay.paths)
    assert all(x + w <= lay.width and y + h <= lay.height for x, y, w, h in lay.geom.values())
