"""Report tables as one model, laid out as text for a terminal and as HTML.

A :class:`Table` is data: a title, column heads, rows, a closing total row, notes. The report
(:mod:`mxnet_amp.report.pages`, :mod:`mxnet_amp.auto.html`) builds its tables once and
:func:`render_text` / :func:`render_html` lay every one of them out, so a table added to the
report shows in the terminal and in the page alike. Words that read differently in the two
(markup in HTML, a list of names shortened in a terminal) are a :class:`Rich`; a table's
``layout`` picks one of the forms below (the default, ``'grid'``, fits any new table) and
``formats`` says which renderings show it. Nothing here knows what a report holds.
"""
from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, Union

__all__ = ["Rich", "Table", "Words", "Cell", "TEXT", "HTML", "BOTH", "render_text", "render_html",
           "shorten"]

TEXT, HTML = "text", "html"
BOTH = frozenset({TEXT, HTML})
# rows of a sub-list shown in a terminal before "… (+N)"
_SUBLIST_ROWS = 10


@dataclass(frozen=True)
class Rich:
    """Words with a text form and an HTML form (markup, inserted as is); an empty form is
    left out of that rendering. As a note, the HTML form is a whole block (``<p>...</p>``)."""

    text: str
    html: str


Words = Union[str, Rich]
Cell = Union[str, int, Rich]


@dataclass(frozen=True)
class Table:
    """One table of a report.

    Attributes
    ----------
    title : str or Rich
        Its heading ('' for none).
    header : tuple
        Column heads (empty: no head row). A head whose text form is empty drops that column
        from the text.
    rows : tuple of tuples
        The cells, str, int or :class:`Rich`.
    total : tuple or None
        A closing row (totals), set apart.
    notes : tuple
        Sentences under the table.
    layout : str
        The form: ``'grid'`` (default) and the forms of :data:`TEXT_LAYOUTS` /
        :data:`HTML_LAYOUTS` (a renderer without that form uses its grid).
    formats : frozenset of {'text', 'html'}
        The renderings that show the table.
    wide : tuple of int
        Columns of words (left aligned; HTML class ``names``).
    key : str
        A short name; the HTML ``class`` of the table when set.
    """

    title: Words = ""
    header: tuple[Words, ...] = ()
    rows: tuple[tuple[Cell, ...], ...] = ()
    total: tuple[Cell, ...] | None = None
    notes: tuple[Words, ...] = ()
    layout: str = "grid"
    formats: frozenset[str] = BOTH
    wide: tuple[int, ...] = ()
    key: str = ""


def shorten(names: Sequence[str], max_names: int) -> str:
    """The first ``max_names`` of ``names``, then how many more ("a, b, c, … (+4)")."""
    more = f", … (+{len(names) - max_names})" if len(names) > max_names else ""
    return ", ".join(names[:max_names]) + more


def _text(w: Cell) -> str:
    return w.text if isinstance(w, Rich) else str(w)


def _html(w: Cell) -> str:
    return w.html if isinstance(w, Rich) else html.escape(str(w))


# --- text ----------------------------------------------------------------------------------

def _heading(t: Table) -> list[str]:
    """A blank line and the title (nothing when the title has no text form)."""
    return ["", _text(t.title)] if _text(t.title) else []


def _notes_text(t: Table) -> list[str]:
    return ["  " + _text(n) for n in t.notes if _text(n)]


def _grid_text(t: Table) -> list[str]:
    """Columns as wide as their cells, two spaces apart; words left, figures right."""
    keep = [i for i, h in enumerate(t.header) if _text(h)] if t.header else \
        list(range(max((len(r) for r in t.rows), default=0)))
    body = [tuple(_text(r[i]) for i in keep) for r in t.rows]
    head = tuple(_text(t.header[i]) for i in keep) if t.header else None
    total = tuple(_text(t.total[i]) for i in keep) if t.total else None
    every = [x for x in (head, *body, total) if x is not None]
    widths = [max(len(x[j]) for x in every) for j in range(len(keep))]

    def line(cells: tuple[str, ...]) -> str:
        return "  " + "  ".join(c.ljust(w) if j == 0 or keep[j] in t.wide else c.rjust(w)
                                for j, (c, w) in enumerate(zip(cells, widths))).rstrip()
    lines = _heading(t)
    if head is not None:
        lines += [line(head), "  " + "-" * (sum(widths) + 2 * (len(widths) - 1))]
    lines += [line(x) for x in body] + ([line(total)] if total else [])
    return lines + _notes_text(t)


def _counts_text(t: Table) -> list[str]:
    """Counts per name: names left, counts right in 11 columns ('.' for none), the row's
    total last."""
    def line(cells: Sequence[Cell], blank: bool) -> str:
        return ("  " + _text(cells[0]).ljust(width)
                + "".join(f"{_text((c or '.') if blank else c):>11}" for c in cells[1:-1])
                + f"{_text(cells[-1]):>8}")
    width = max(len(_text(r[0])) for r in (t.header, *t.rows, *([t.total] if t.total else [])))
    head = line(t.header, False)
    return (_heading(t) + [head, "  " + "-" * (len(head) - 2)] + [line(r, True) for r in t.rows]
            + ([line(t.total, False)] if t.total else []) + _notes_text(t))


def _ledger_text(t: Table) -> list[str]:
    """The title heads the label column; label, count, size, words."""
    heads = [_text(h) for h in t.header if _text(h)]
    lines = ["", f"{_text(t.title):<14}{heads[0]:>9}  {heads[1]:>13}   {heads[2]}"]
    for label, count, size, _, words in t.rows:
        lines.append(f"  {_text(label):<12}{_text(count):>9}  {_text(size):>13}   {_text(words)}")
    return lines + _notes_text(t)


def _sublist_text(t: Table) -> list[str]:
    """Under the table before: an indented title and ``name: why`` lines, the first few."""
    lines = ["  " + _text(t.title)] + [f"    {_text(a)}: {_text(b)}" for a, b in t.rows[:_SUBLIST_ROWS]]
    if len(t.rows) > _SUBLIST_ROWS:
        lines.append(f"    … (+{len(t.rows) - _SUBLIST_ROWS})")
    return lines


def _reasons_text(t: Table) -> list[str]:
    """Per row: the count, the words wrapped at word boundaries (never cut: they are the
    table's answer), the names on a line of their own."""
    lines = _heading(t)
    for words, count, names in t.rows:
        wrapped = textwrap.wrap(_text(words), 110, break_long_words=False, break_on_hyphens=False)
        lines.append(f"  {_text(count):>5}  " + ("\n" + " " * 9).join(wrapped or [""]))
        lines.append(f"         {_text(names)}")
    return lines + _notes_text(t)


TEXT_LAYOUTS: dict[str, Callable[[Table], list[str]]] = {
    "grid": _grid_text, "counts": _counts_text, "ledger": _ledger_text,
    "sublist": _sublist_text, "reasons": _reasons_text}


def render_text(tables: Iterable[Table]) -> list[str]:
    """The text lines of every table the text shows, in order (a table with a title set off
    by a blank line)."""
    lines: list[str] = []
    for t in tables:
        if TEXT in t.formats:
            lines += TEXT_LAYOUTS.get(t.layout, _grid_text)(t)
    return lines


# --- HTML ----------------------------------------------------------------------------------

def _notes_html(t: Table) -> str:
    return "".join(n.html if isinstance(n, Rich) else f"<p>{_html(n)}</p>" for n in t.notes if _html(n))


def _grid_html(t: Table) -> str:
    """A heading, the table (head row, rows, total row in ``th``) and the notes."""
    out = f"<h2>{_html(t.title)}</h2>" if _html(t.title) else ""
    if t.header or t.rows:
        out += f"<table class='{t.key}'>" if t.key else "<table>"
        if t.header:
            out += "<tr>" + "".join(f"<th>{_html(h)}</th>" for h in t.header) + "</tr>"
        out += "".join("<tr>" + "".join(f"<td class='names'>{_html(c)}</td>" if i in t.wide else
                                        f"<td>{_html(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                       for r in t.rows)
        if t.total:
            out += "<tr>" + "".join(f"<th>{_html(c)}</th>" for c in t.total) + "</tr>"
        out += "</table>"
    return out + _notes_html(t)


def _pairs_html(t: Table) -> str:
    """``label: value`` rows, the label as a row head."""
    return (f"<h2>{_html(t.title)}</h2><table>"
            + "".join(f"<tr><th>{_html(k)}</th><td class='names'>{_html(v)}</td></tr>" for k, v in t.rows)
            + "</table>" + _notes_html(t))


def _list_html(t: Table) -> str:
    """One item per row."""
    return f"<h2>{_html(t.title)}</h2><ul>" + "".join(f"<li>{_html(r[0])}</li>" for r in t.rows) + "</ul>"


def _line_html(t: Table) -> str:
    """The title as a sentence."""
    return f"<p>{_html(t.title)}</p>"


HTML_LAYOUTS: dict[str, Callable[[Table], str]] = {
    "grid": _grid_html, "pairs": _pairs_html, "list": _list_html, "line": _line_html}


def render_html(tables: Iterable[Table]) -> list[str]:
    """The HTML blocks of every table the page shows, in order."""
    return [HTML_LAYOUTS.get(t.layout, _grid_html)(t) for t in tables if HTML in t.formats]
