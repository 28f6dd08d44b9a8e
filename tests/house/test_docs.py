"""The docs build, their links hold, the API is documented, and every example still runs.

The site is built with the documented command (``python tools/build_docs.py``); the code
examples of docs/getting_started.md and docs/lists.md are run and their printed output
compared with what the pages show, so the docs cannot drift from the code.
"""
from __future__ import annotations

import argparse
import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _load_build_docs():
    spec = importlib.util.spec_from_file_location("build_docs", ROOT / "tools" / "build_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_docs"] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bd = _load_build_docs()


def _text(markup: str) -> str:
    """Visible text of an HTML fragment, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


def _first_line(obj) -> str:
    return " ".join(obj.__doc__.strip().splitlines()[0].replace("``", "").replace(":func:", "")
                    .replace("`", "").split())


# --- the documented build command ---------------------------------------------------------

@pytest.fixture(scope="module")
def api_site(tmp_path_factory):
    out = tmp_path_factory.mktemp("api")
    bd.build_api(bd.public_modules(), out)
    return out


def test_build_command_succeeds(tmp_path):
    out = tmp_path / "site"
    proc = subprocess.run([sys.executable, "tools/build_docs.py", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"`python tools/build_docs.py` failed:\n{proc.stderr[-3000:]}"
    for page in ("index.html", "getting_started.html", "lists.html", "api.html", "README.html",
                 "api/mxnet_amp.html", "api/mxnet_amp/convert.html", "api/mxnet_amp/gluon.html"):
        assert (out / page).is_file(), f"the build wrote no {page}"


@pytest.mark.parametrize("name", ["convert_symbol", "convert_model", "convert_hybrid_block"])
def test_api_page_documents_function(api_site, name):
    import mxnet_amp
    page = (api_site / "mxnet_amp.html").read_text(encoding="utf-8")
    assert f'id="{name}"' in page, f"no entry for {name} on the mxnet_amp API page"
    # the entry's own text, up to the next documented member
    entry = page[page.index(f'id="{name}"'):]
    entry = entry[:entry.find('<section id="', 20)] if '<section id="' in entry[20:] else entry
    assert _first_line(getattr(mxnet_amp, name)) in _text(entry)


def test_api_pages_render_numpydoc_sections(api_site):
    page = (api_site / "mxnet_amp" / "convert.html").read_text(encoding="utf-8")
    entry = _text(page[page.index('id="convert_symbol"'):])
    # docformat=numpy turns the sections into headed lists; the raw underline must not show
    assert "Parameters" in entry and "cast_optional_params" in entry
    assert "----------" not in entry


def test_markdown_pages_link_to_html(tmp_path):
    index = bd.render_page(DOCS / "index.md", DOCS / "_build")
    hrefs = set(re.findall(r'href="([^"]+)"', index))
    assert {"getting_started.html", "lists.html", "cli.html", "api.html", "README.html"} <= hrefs
    assert not [h for h in hrefs if h.endswith(".md")], "a .md link was left in the HTML"


def test_build_fails_on_broken_link(tmp_path, monkeypatch, capsys):
    page = tmp_path / "bad.md"
    page.write_text("See [nothing](no_such_page.md).\n", encoding="utf-8")
    monkeypatch.setattr(bd, "markdown_files", lambda root=bd.ROOT: [page])
    out = tmp_path / "site"
    assert bd.main(["--out", str(out)]) == 1
    assert "no_such_page.md" in capsys.readouterr().err
    assert not out.exists(), "a failed build must write nothing"


# --- links --------------------------------------------------------------------------------

def test_every_relative_link_resolves():
    files = bd.markdown_files()
    assert DOCS / "index.md" in files and ROOT / "README.md" in files
    assert bd.broken_links(files) == []


def test_link_checker_finds_broken_links(tmp_path):
    (tmp_path / "there.md").write_text("x", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md#a) [web](https://example.com) [anchor](#top)\n"
                    "[gone](gone.md) ![pic](img/missing.svg) `[code](not_a_link.md)`\n"
                    "```\n[in a block](also_not_a_link.md)\n```\n[ref]: ref_missing.txt\n",
                    encoding="utf-8")
    found = bd.broken_links([page])
    assert len(found) == 3, found
    assert all(any(name in p for p in found) for name in ("gone.md", "missing.svg", "ref_missing.txt"))


# --- the CLI reference --------------------------------------------------------------------

def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _code(text: str) -> str:
    """The fenced blocks and inline code spans of a markdown text, joined by newlines."""
    spans = [m.group(2) for m in bd._FENCE.finditer(text)]
    spans += re.findall(r"`([^`\n]+)`", bd._FENCE.sub("", text))
    return "\n".join(spans)


def documented_commands(text: str) -> list[tuple[str, list[str]]]:
    """``(subcommand, options)`` for each ``mxnet-amp ...`` command line in the code of ``text``."""
    commands = []
    for line in _code(text).splitlines():
        for m in re.finditer(r"mxnet-amp((?:\s+--?[a-z][\w-]*)*)\s+([a-z][\w-]*)([^\n|]*)", line):
            commands.append((m.group(2), re.findall(r"(?<![\w-])--?[a-z][\w-]*", m.group(3))))
    return commands


def cli_doc_problems(text: str, parser: argparse.ArgumentParser) -> list[str]:
    subs = _subparsers(parser)
    problems = []
    for sub, opts in documented_commands(text):
        if sub not in subs:
            problems.append(f"`mxnet-amp {sub}` is documented but the parser has no such command")
            continue
        known = _options(subs[sub]) | _options(parser)
        problems += [f"`mxnet-amp {sub} {o}`: no such option" for o in opts if o not in known]
    every = set().union(_options(parser), *map(_options, subs.values()))
    problems += [f"option {o} is documented but no command has it"
                 for o in sorted(set(re.findall(r"(?<![\w-])--[a-z][\w-]*", _code(text))) - every)]
    return problems


def test_cli_reference_matches_the_parser():
    from mxnet_amp.cli.main import build_parser
    parser = build_parser()
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    documented = {sub for sub, _ in documented_commands(text)}
    assert set(_subparsers(parser)) <= documented, "a command of the parser is not in docs/cli.md"
    assert cli_doc_problems(text, parser) == []


def test_cli_reference_counts_and_tables_every_command():
    """docs/cli.md's "N commands:" and its table hold every command of the parser (it said
    "four commands" without export-onnx; newcomer audit, #42)."""
    from mxnet_amp.cli.main import build_parser
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    subs = sorted(_subparsers(build_parser()))
    count = re.search(r"\b(\w+) commands:", text)
    assert count and count.group(1).lower() == words[len(subs) - 1], (count and count.group(0), subs)
    after = text[count.end():].lstrip("\n")
    table = re.findall(r"^\| `([\w-]+)[^`]*` \|", after[:after.find("\n\n")], re.M)
    assert sorted(table) == subs


def test_no_two_documented_commands_of_a_page_write_one_file():
    """An ONNX file two ``mxnet-amp`` commands of a docs page write (``-o``, ``--onnx``) is
    the same file both times (the same input shapes, both with or without a dynamic batch):
    docs/onnx.md's ``export-onnx ... --opset 13`` line overwrote the dynamic-batch file its
    onnxruntime snippet reads at batch 8 with a batch-1 one (newcomer audit, #42)."""
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8").replace("\\\n", " ")
        written: dict[str, tuple] = {}
        for line in re.findall(r"^\s*mxnet-amp (?:export-onnx|convert) .*$", text, re.M):
            shape = (sorted(re.findall(r"--input-shape\s+(\S+)", line)), "--dynamic-batch" in line)
            for path in re.findall(r"(?:^|\s)(?:-o|--onnx)\s+(\S+\.onnx)", line):
                assert written.setdefault(path, shape) == shape, (page.name, path, line)


def test_cli_check_finds_unknown_commands_and_options():
    from mxnet_amp.cli.main import build_parser
    bad = ("```\nmxnet-amp frobnicate model\nmxnet-amp convert m --target-dtype float16 --fast\n```\n"
           "and `mxnet-amp --debug inspect m --no-such-flag`\n")
    problems = cli_doc_problems(bad, build_parser())
    assert any("frobnicate" in p for p in problems)
    assert any("convert --fast" in p for p in problems)
    assert any("inspect --no-such-flag" in p for p in problems)
    assert not any("--target-dtype" in p or "--debug" in p for p in problems)


def undocumented_options(text: str, parser: argparse.ArgumentParser) -> list[str]:
    """``command --option`` for each option of each command that ``text`` never mentions
    (``--no-X`` counts as mentioned by ``--[no-]X`` or ``--X``)."""
    missing = []
    for sub, sp in [("", parser), *_subparsers(parser).items()]:
        for option in sorted(_options(sp) - {"-h", "--help"}):
            spellings = {option}
            if option.startswith("--no-"):
                spellings |= {"--" + option[5:], "--[no-]" + option[5:]}
            elif option.startswith("--"):
                spellings.add("--[no-]" + option[2:])
            if not any(re.search(r"(?<![\w-])" + re.escape(s) + r"(?![\w-])", text) for s in spellings):
                missing.append(f"{sub} {option}".strip())
    return missing


def test_every_cli_option_is_documented():
    from mxnet_amp.cli.main import build_parser
    assert undocumented_options((DOCS / "cli.md").read_text(encoding="utf-8"), build_parser()) == []


def test_option_check_finds_an_undocumented_flag():
    from mxnet_amp.cli.main import build_parser
    text = (DOCS / "cli.md").read_text(encoding="utf-8").replace("--max-drop", "--max-dr0p")
    assert undocumented_options(text, build_parser()) == ["auto --max-drop"]


@pytest.mark.parametrize("command", ["convert", "inspect", "auto"])
def test_help_usage_puts_prefix_first(command, capsys):
    from mxnet_amp.cli.main import main
    assert main([command, "--help"]) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.startswith(f"usage: mxnet-amp {command} PREFIX ["), usage
    assert usage.count("PREFIX ") == 1 and "--epoch N" in usage and "--target-dtype" in usage


def _json_table_keys(text: str) -> set[str]:
    """The keys named in the first column of the JSON table of docs/cli.md's report section."""
    section = text[text.index("| JSON key | meaning |"):]
    table = section[:section.index("\n\n")]
    return {k for line in table.splitlines()[2:] for k in re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])}


def test_every_json_report_key_is_documented(tmp_path):
    import mxnet as mx
    from mxnet_amp.convert import convert_model_full
    from mxnet_amp.options import make_options
    from mxnet_amp.report.model import build_report
    from helpers import init_params
    data = mx.sym.var("data")
    sym = mx.sym.FullyConnected(mx.sym.BatchNorm(mx.sym.Convolution(data, kernel=(3, 3), num_filter=4,
                                                                      name="c"), name="bn"),
                                num_hidden=2, name="fc")
    args, auxs = init_params(sym, {"data": (1, 3, 6, 6)})
    conversion = convert_model_full(sym, args, auxs, make_options("bfloat16"))[3]
    keys = set(build_report(conversion, args, auxs).to_dict()) | {"extra"}
    documented = _json_table_keys((DOCS / "cli.md").read_text(encoding="utf-8"))
    assert keys - documented == set()
    assert documented - keys == set()


def test_hardware_is_reachable_after_import_mxnet_amp():
    """getting_started.md writes ``mxnet_amp.hardware.bf16_runs_natively()`` after a plain
    ``import mxnet_amp`` (a fresh interpreter: no test imported the submodule first)."""
    code = "import mxnet_amp; print(type(mxnet_amp.hardware.bf16_runs_natively()).__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "bool"


# --- docstrings ---------------------------------------------------------------------------

def test_public_api_has_numpydoc_docstrings():
    import mxnet_amp
    assert "convert_model" in mxnet_amp.__all__
    assert bd.numpydoc_problems(mxnet_amp.__all__, mxnet_amp) == []


def test_public_modules_have_docstrings():
    modules = bd.public_modules()
    assert "mxnet_amp.convert" in modules and "mxnet_amp.gluon" in modules
    assert bd.missing_docstrings(modules) == []


def test_docstring_checks_find_gaps(tmp_path, monkeypatch):
    source = tmp_path / "fake_docs_mod.py"
    source.write_text('''"""A module."""
__all__ = ["bare", "no_sections", "good", "alias", "Thing", "nothing"]
def bare(x):
    return x
def no_sections(x):
    """Does things."""
    return x
def good(x):
    """Does things.

    Parameters
    ----------
    x : int

    Returns
    -------
    int
    """
    return x
def alias(x):
    """Alias of :func:`good`."""
    return good(x)
def nothing():
    """Takes and returns nothing."""
class Thing:
    def method(self):
        pass
''', encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("fake_docs_mod")
    missing = bd.missing_docstrings(["fake_docs_mod"])
    assert sorted(missing) == sorted(["fake_docs_mod.bare: public function has no docstring",
                                      "fake_docs_mod.Thing: public class has no docstring",
                                      "fake_docs_mod.Thing.method: public function has no docstring"])
    numpy = bd.numpydoc_problems(module.__all__, module)
    flagged = {p.split(":")[0] for p in numpy}
    assert flagged == {"fake_docs_mod.bare", "fake_docs_mod.no_sections"}
    assert sum("no_sections" in p for p in numpy) == 2   # no Parameters, no Returns


# --- the examples -------------------------------------------------------------------------

@pytest.mark.parametrize("page", bd.EXAMPLE_PAGES)
def test_page_examples_run_and_print_what_the_page_shows(page, tmp_path):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert sum(b.lang == "python" for b in bd.code_blocks(text)) >= 5, "the page lost its examples"
    # a fresh interpreter, as a reader has: Gluon numbers its layer names per process, so
    # the names the page shows only come out in a process that built nothing before
    code = ("import json, sys; from pathlib import Path; "
            f"sys.path.insert(0, {str(ROOT / 'tools')!r}); import build_docs as bd; "
            f"print('PROBLEMS=' + json.dumps(bd.run_examples(Path({str(DOCS / page)!r}), "
            f"Path({str(tmp_path)!r}))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    marker = [line for line in proc.stdout.splitlines() if line.startswith("PROBLEMS=")]
    assert proc.returncode == 0 and marker, proc.stderr[-2000:]
    import json
    assert json.loads(marker[-1][len("PROBLEMS="):]) == []
    if page == "getting_started.md":
        # the checkpoint examples and the CLI commands wrote their files
        for name in ("tiny-bf16-symbol.json", "tiny-fp16-0000.params", "tiny-cli-symbol.json",
                     "tiny-cli-0000.params", "tiny-cli.json"):
            assert (tmp_path / name).is_file(), f"the getting started examples wrote no {name}"


def test_example_runner_catches_drift(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 2\nprint(x)\n```\n\n```text\n3\n```\n", encoding="utf-8")
    problems = bd.run_examples(page, tmp_path)
    assert len(problems) == 1 and "prints\n2" in problems[0]
    page.write_text("```python\nraise ValueError('boom')\n```\n", encoding="utf-8")
    assert "ValueError: boom" in bd.run_examples(page, tmp_path)[0]
    page.write_text("```sh\nmxnet-amp convert no-such-model --target-dtype float16\n```\n",
                    encoding="utf-8")
    assert "exited 2" in bd.run_examples(page, tmp_path)[0]


def test_example_runner_shows_stderr_as_a_reader_sees_it(tmp_path):
    """Python's warnings and what is written to file descriptor 2 (MXNet's C++ log) are part
    of what a reader sees: above the printed lines, install paths as ``.../``, the clock of
    MXNet's log lines not compared."""
    page = tmp_path / "page.md"
    code = ("import os, warnings\nos.write(2, b'[01:02:03] ../src/x.cc:1: native line\\n')\n"
            "warnings.warn('careful')\nprint('done')\n")
    shown = "[09:09:09] ../src/x.cc:1: native line\npage.md:1:3: UserWarning: careful\ndone\n"
    page.write_text(f"```python\n{code}```\n\n```text\n{shown}```\n", encoding="utf-8")
    assert bd.run_examples(page, tmp_path) == []
    page.write_text(f"```python\n{code}```\n\n```text\ndone\n```\n", encoding="utf-8")
    assert "UserWarning: careful" in bd.run_examples(page, tmp_path)[0]
    assert bd._as_shown("/usr/lib/python3.11/site-packages/mxnet/gluon/block.py:1: W") == \
        ".../mxnet/gluon/block.py:1: W"


def test_update_examples_rewrites_outputs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nprint('a')\n```\n\n```text\nold\n```\n", encoding="utf-8")
    assert bd.run_examples(page, tmp_path, update=True) == []
    assert page.read_text(encoding="utf-8") == "# t\n\n```python\nprint('a')\n```\n\n```text\na\n```\n"
    assert bd.run_examples(page, tmp_path) == []
