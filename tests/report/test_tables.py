"""mxnet_amp.report.tables (report/tables): one table model rendered as text and as HTML."""
from mxnet_amp.report.tables import HTML, TEXT, Rich, Table, render_html, render_text, shorten


def test_shorten_counts_the_names_left_out():
    """Past max_names the rest is '… (+N)'; a short list is shown whole."""
    assert shorten(["a", "b", "c", "d", "e"], 3) == "a, b, c, … (+2)"
    assert shorten(["a", "b"], 3) == "a, b"


def test_a_grid_renders_as_aligned_text_with_its_title():
    """A title set off by a blank line, a head row, a rule, and numbers right-aligned."""
    t = Table(title="Casts", header=("op", "count"), rows=(("amp_cast", 12), ("amp_multicast", 3)))
    assert render_text([t]) == ["", "Casts", "  op             count", "  --------------------",
                                "  amp_cast          12", "  amp_multicast      3"]


def test_formats_choose_which_rendering_shows_a_table():
    """A TEXT-only table is absent from the HTML and an HTML-only one from the text."""
    only_text = Table(title="terminal only", rows=(("x",),), formats=frozenset({TEXT}))
    only_html = Table(title="page only", rows=(("y",),), formats=frozenset({HTML}))
    text = "\n".join(render_text([only_text, only_html]))
    html = "\n".join(render_html([only_text, only_html]))
    assert "terminal only" in text and "page only" not in text
    assert "page only" in html and "terminal only" not in html


def test_rich_words_show_their_own_form_in_each_rendering():
    """A Rich cell is plain text in the terminal and markup (inserted as is) in the page."""
    t = Table(header=("node",), rows=((Rich("fc1", "<code>fc1</code>"),),))
    assert any("fc1" in ln and "<code>" not in ln for ln in render_text([t]))
    assert "<code>fc1</code>" in "".join(render_html([t]))


def test_html_escapes_plain_strings():
    """A plain string cell with '<' is escaped in the page (only Rich markup is kept as is)."""
    t = Table(header=("name",), rows=(("a<b",),))
    html = "".join(render_html([t]))
    assert "a&lt;b" in html and "a<b" not in html
