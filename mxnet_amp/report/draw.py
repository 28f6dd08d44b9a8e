"""The converted graph as a picture: each node coloured by the dtype it computes in.

No system binary needed: :func:`graph_svg` lays the graph out itself and writes SVG;
:func:`graph_dot` writes the same picture as graphviz DOT for users who have ``dot``;
:func:`write_graph` writes either, or PNG. Three modules, one job each: what the picture
shows (:mod:`mxnet_amp.report.picture`: the conversion read as boxes and edges, large graphs
collapsed into blocks), where each box and edge goes (:mod:`mxnet_amp.report.layout`), and here
the rendering to SVG, DOT and PNG.
"""
from __future__ import annotations

import html
import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from ..errors import DrawError
from ..files.atomic import atomic_write
from .layout import CHAR_WIDTH, DTYPE_COLOURS, FONT_SIZE, LINE_HEIGHT, box_lines, fit_text, layout
from .picture import Box, Picture, collapse
from .precision_svg import precision_map_svg, stacked_svg

if TYPE_CHECKING:   # only annotations name it
    from ..record import Conversion

__all__ = ["graph_svg", "graph_dot", "write_graph", "check_graph_path"]



def graph_svg(conversion: Conversion, title: str = "", detail_limit: int | None = 80, max_boxes: int = 48) -> str:
    """The picture of ``conversion`` as a standalone SVG document (text).

    Parameters
    ----------
    conversion : mxnet_amp.record.Conversion
    title : str
        Shown above the picture, before the summary.
    detail_limit : int or None, default 80
        Graphs with more drawn nodes are collapsed into blocks; None draws every node.
    max_boxes : int, default 48
        About how many boxes a collapsed picture may have.

    Returns
    -------
    str
        Each box is a ``<g>`` whose ``rect`` carries ``data-box`` (its index) and each
        edge a ``path`` with ``data-edge="SRC DST"`` (box indices).
    """
    pic = collapse(conversion, detail_limit, max_boxes, title)
    lay = layout(pic, conversion.policy.target_dtype)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width:.0f}" height="{lay.height:.0f}" '
           f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" font-family="DejaVu Sans, Arial, sans-serif" '
           f'font-size="{FONT_SIZE}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="20" y="24" font-size="15" font-weight="bold">{html.escape(pic.title)}</text>',
           *_svg_legend(pic)]
    for (u, v, dt), d in zip(pic.edges, lay.paths):
        stroke = DTYPE_COLOURS.get(dt, DTYPE_COLOURS["non-float"])[1]
        out.append(f'<path d="{d}" data-edge="{u} {v}" fill="none" stroke="{stroke}" stroke-width="1.6" '
                   'marker-end="url(#arrow)"/>')
    for b, box in enumerate(pic.boxes):
        tip = html.escape(", ".join(conversion.graph.nodes[i].name for i in box.nodes[:40]))
        out += _svg_box(b, box, lay.geom[b], lay.lines[b], tip)
    out.append('</svg>')
    return "\n".join(out) + "\n"


def _svg_legend(pic: Picture) -> list[str]:
    """The legend under the title: a swatch per dtype drawn, and what a block box means."""
    out, x = [], 20
    used = sorted({b.dtype for b in pic.boxes} | {d for b in pic.boxes for d in b.dtypes})
    for d in used:
        fill, stroke = DTYPE_COLOURS.get(d, DTYPE_COLOURS["non-float"])
        out.append(f'<rect x="{x}" y="36" width="14" height="14" fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{x + 19}" y="48">{html.escape(d)}</text>')
        x += 30 + int(CHAR_WIDTH * len(d)) + 10
    if pic.collapsed:
        out.append(f'<text x="{x}" y="48" fill="#555">boxes: blocks of nodes (fill: majority dtype; '
                   'bar: dtype mix; × N: N identical blocks in a row)</text>')
    return out


def _svg_box(b: int, box: Box, geom: tuple[float, float, float, float], lines: list[str], tip: str) -> list[str]:
    """One box as an SVG ``<g>``: its tooltip (``tip``), a stacked shadow when it stands for
    repeated blocks, the box with its ``lines`` of text, and a group's dtype-mix bar."""
    x, y, w, h = geom
    fill, stroke = DTYPE_COLOURS.get(box.dtype, DTYPE_COLOURS["non-float"])
    rx = 12 if box.kind in ("input", "cast") else 4
    out = [f'<g><title>{tip}</title>']
    if box.repeat > 1:  # a stacked look for repeated blocks
        out.append(f'<rect x="{x + 5:.1f}" y="{y + 5:.1f}" width="{w}" height="{h}" rx="{rx}" '
                   f'fill="{fill}" stroke="{stroke}"/>')
    out.append(f'<rect data-box="{b}" x="{x:.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="{rx}" '
               f'fill="{fill}" stroke="{stroke}" stroke-width="1.4"/>')
    for k, text in enumerate(lines):
        weight = ' font-weight="bold"' if k == 0 else ""
        out.append(f'<text x="{x + 8:.1f}" y="{y + 8 + LINE_HEIGHT * (k + 1) - 4:.1f}"{weight}>'
                   f'{html.escape(fit_text(text, (w - 14) / (1.12 if k == 0 else 1)))}</text>')
    if box.kind == "group" and box.dtypes:
        total = sum(box.dtypes.values())
        bx = x + 8
        for d, cnt in sorted(box.dtypes.items(), key=lambda kv: -kv[1]):
            bw = (w - 16) * cnt / total
            bf, bs = DTYPE_COLOURS.get(d, DTYPE_COLOURS["non-float"])
            out.append(f'<rect x="{bx:.1f}" y="{y + h - 12:.1f}" width="{bw:.1f}" height="6" '
                       f'fill="{bs}"/>')
            bx += bw
    out.append('</g>')
    return out


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_dot(conversion: Conversion, title: str = "", detail_limit: int | None = 80, max_boxes: int = 48) -> str:
    """The same picture as graphviz DOT text (render with ``dot -Tsvg`` / ``-Tpng``)."""
    pic = collapse(conversion, detail_limit, max_boxes, title)
    target = conversion.policy.target_dtype
    out = ["digraph mxnet_amp {", f"  label={_dot_quote(pic.title)}; labelloc=t; rankdir=TB;",
           '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11];']
    for b, box in enumerate(pic.boxes):
        fill, stroke = DTYPE_COLOURS.get(box.dtype, DTYPE_COLOURS["non-float"])
        label = "\\n".join(_dot_quote(t)[1:-1] for t in box_lines(box, target))
        peri = ", peripheries=2" if box.repeat > 1 else ""
        out.append(f'  b{b} [label="{label}", fillcolor="{fill}", color="{stroke}"{peri}];')
    for u, v, dt in pic.edges:
        out.append(f'  b{u} -> b{v} [color="{DTYPE_COLOURS.get(dt, DTYPE_COLOURS["non-float"])[1]}"];')
    out.append("}")
    return "\n".join(out) + "\n"


def check_graph_path(path: str | os.PathLike) -> str:
    """The format :func:`write_graph` would write ``path`` in; :class:`DrawError` when it
    cannot (unknown extension, or PNG with no renderer), so callers can check first."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    fmt = {".svg": "svg", ".dot": "dot", ".gv": "dot", ".png": "png"}.get(ext)
    if fmt is None:
        raise DrawError(f"cannot write a picture to {path}: use a .svg, .png, .dot or .gv file name")
    if fmt == "png" and _cairosvg() is None and shutil.which("dot") is None:
        raise DrawError(_NO_PNG)
    return fmt


def _cairosvg() -> Any:
    try:
        import cairosvg
    except (ImportError, OSError):   # OSError: the package is there but libcairo is not
        return None
    return cairosvg


_NO_PNG = ("PNG output needs the cairosvg package (pip install cairosvg) or graphviz's dot "
           "program (apt-get install graphviz); write a .svg or .dot file instead")


def write_graph(conversion: Conversion, path: str | os.PathLike, title: str = "",
                detail_limit: int | None = 80) -> str:
    """Write the picture to ``path``; the format follows the extension.

    ``.svg`` and ``.dot``/``.gv`` need nothing beyond Python; ``.png`` needs the ``cairosvg``
    package or graphviz's ``dot`` program. Returns the format written. ``detail_limit`` is
    that of :func:`graph_svg` (None: every node drawn).

    Raises
    ------
    DrawError
        Unknown extension, or PNG asked for with neither renderer available.
    """
    path = os.fspath(path)
    fmt = check_graph_path(path)
    if fmt == "svg":
        data = stacked_svg(precision_map_svg(conversion, title), graph_svg(conversion, title, detail_limit)).encode()
    elif fmt == "dot":
        data = graph_dot(conversion, title, detail_limit).encode()
    else:
        data = _png(conversion, title, detail_limit)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
    atomic_write(path, write)
    return fmt


def _png(conversion: Conversion, title: str, detail_limit: int | None = 80) -> bytes:
    cairosvg = _cairosvg()
    if cairosvg is not None:
        page = stacked_svg(precision_map_svg(conversion, title), graph_svg(conversion, title, detail_limit))
        return bytes(cairosvg.svg2png(bytestring=page.encode()))
    dot = shutil.which("dot")
    if dot is not None:
        done = subprocess.run([dot, "-Tpng"], input=graph_dot(conversion, title, detail_limit).encode(),
                              capture_output=True, check=False)
        if done.returncode == 0:
            return done.stdout
        raise DrawError(f"dot failed to render the PNG: {done.stderr.decode(errors='replace')[:200]}")
    raise DrawError(_NO_PNG)
