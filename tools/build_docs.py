#!/usr/bin/env python
"""Build the documentation site into ``docs/_build/`` (HTML), checking it on the way.

Usage::

    python tools/build_docs.py                 # build docs/_build/
    python tools/build_docs.py --out DIR       # build elsewhere
    python tools/build_docs.py --examples      # also run the code examples of the pages

What it writes:

* ``DIR/api/``: the API reference of every public module of ``mxnet_amp``, generated from
  the numpydoc docstrings by pdoc (``pdoc.pdoc``);
* ``DIR/<page>.html``: each ``docs/*.md`` page (and ``README.html``) converted with
  markdown2, links to ``.md`` pages rewritten to their ``.html``.

It exits with status 1, writing nothing, when a relative link in ``docs/*.md`` or
``README.md`` points at no file, when a public function or class has no docstring, or
(with ``--examples``) when a page's code example fails or prints something other than the
output the page shows. Every problem is listed, one line each.

Example convention (``--examples`` and ``tests/house/test_docs.py``): the fenced ``python`` blocks
of the pages in ``EXAMPLE_PAGES`` run in order in one namespace, in a scratch folder; a
fenced ``text`` block right after a ``python`` block is what a reader's terminal shows of it:
its stderr (MXNet's log lines, Python's warnings; install paths written ``.../``, the clock of
the log lines not compared), then its stdout; a
fenced ``sh`` block whose every command line starts with ``mxnet-amp`` runs there too
(as ``python -m mxnet_amp``, which must exit 0). ``--update-examples`` rewrites the
``text`` blocks with what the code prints now.
"""
from __future__ import annotations

import argparse
import contextlib
import html
import importlib
import importlib.util
import inspect
import io
import os
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = "mxnet_amp"
# not part of the documented surface: the ``python -m`` entry point and a private helper
INTERNAL_MODULES = frozenset({"mxnet_amp.__main__", "mxnet_amp.ir.gcpause"})
EXAMPLE_PAGES = ("getting_started.md", "lists.md")

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"  # [text](target)
                   r"|!\[[^\]]*\]\(\s*<?([^)\s>]+)>?\s*\)"                         # ![img](target)
                   r"|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$"                     # [ref]: target
                   r"|\bhref=\"([^\"]+)\"", re.MULTILINE)
_FENCE = re.compile(r"^```[ \t]*([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


class DocsError(Exception):
    """The docs do not build; the message lists every problem found."""


# --- checks -------------------------------------------------------------------------------

def markdown_files(root: Path = ROOT) -> list[Path]:
    """The pages whose links are checked: ``docs/*.md`` and ``README.md``."""
    files = sorted((root / "docs").glob("*.md"))
    readme = root / "README.md"
    return files + ([readme] if readme.is_file() else [])


def _strip_code(text: str) -> str:
    # links inside code blocks and inline code are examples, not links
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"`[^`\n]*`", "", text)


def relative_links(text: str) -> list[str]:
    """Link targets in markdown ``text`` that are relative paths (no scheme, not ``#...``)."""
    targets = []
    for m in _LINK.finditer(_strip_code(text)):
        target = next(g for g in m.groups() if g)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")):
            continue
        targets.append(target)
    return targets


def broken_links(files: Iterable[Path]) -> list[str]:
    """``'page: link -> missing path'`` for each relative link that names no existing file."""
    problems = []
    for page in files:
        # one line per distinct target: a page may link the same file many times
        for target in dict.fromkeys(relative_links(page.read_text(encoding="utf-8"))):
            path = target.split("#", 1)[0].split("?", 1)[0]
            if not path:
                continue
            resolved = (page.parent / path).resolve()
            if not resolved.exists():
                problems.append(f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}: "
                                f"broken link {target!r} -> {resolved} does not exist")
    return problems


def public_modules() -> list[str]:
    """Dotted names of the documented modules: the package and its submodules, less internals."""
    pkg = importlib.import_module(PACKAGE)
    names = [PACKAGE] + [m.name for m in pkgutil.walk_packages(pkg.__path__, PACKAGE + ".")]
    return [n for n in names if n not in INTERNAL_MODULES]


def _public_members(module) -> list[tuple[str, object]]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
    members = []
    for name in names:
        obj = getattr(module, name, None)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            members.append((f"{module.__name__}.{name}", obj))
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attr, value in vars(obj).items():
                    if inspect.isfunction(value) and not attr.startswith("_"):
                        members.append((f"{module.__name__}.{name}.{attr}", value))
    return members


def missing_docstrings(modules: Sequence[str]) -> list[str]:
    """``'module.name: no docstring'`` for each public function, method or class without one."""
    problems = []
    for modname in modules:
        module = importlib.import_module(modname)
        if not (module.__doc__ or "").strip():
            problems.append(f"{modname}: module has no docstring")
        for qualname, obj in _public_members(module):
            # __doc__, not inspect.getdoc: a class must not pass on its base class's docstring
            if not (obj.__doc__ or "").strip():
                problems.append(f"{qualname}: public {'class' if inspect.isclass(obj) else 'function'} "
                                "has no docstring")
    return problems


def _returns_value(func) -> bool:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return False
    ann = sig.return_annotation
    if ann is not inspect.Signature.empty:
        return ann not in (None, "None")
    import ast
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0]
    # returns in nested functions belong to them, not to func
    nested = {id(n) for d in ast.walk(body) if d is not body and isinstance(d, (ast.FunctionDef, ast.Lambda))
              for n in ast.walk(d)}
    return any(isinstance(n, ast.Return) and n.value is not None and id(n) not in nested
               for n in ast.walk(body))


def _section(doc: str, title: str) -> bool:
    return re.search(rf"^\s*{title}\s*\n\s*-{{3,}}\s*$", doc, re.MULTILINE) is not None


def numpydoc_problems(names: Sequence[str], namespace) -> list[str]:
    """Functions in ``names`` (of ``namespace``) whose docstring lacks a numpydoc section.

    A function that takes arguments needs a ``Parameters`` section, one that returns a value
    a ``Returns`` section. A docstring starting ``Alias of :func:`` is exempt: the aliased
    function's docstring is the documentation.
    """
    problems = []
    for name in names:
        obj = getattr(namespace, name)
        if not inspect.isfunction(obj):
            continue
        doc = inspect.getdoc(obj) or ""
        if doc.startswith("Alias of :func:"):
            continue
        params = [p for p in inspect.signature(obj).parameters.values() if p.name not in ("self", "cls")]
        if params and not _section(doc, "Parameters"):
            problems.append(f"{namespace.__name__}.{name}: takes {', '.join(p.name for p in params)} "
                            "but its docstring has no 'Parameters' section")
        if _returns_value(obj) and not _section(doc, "Returns"):
            problems.append(f"{namespace.__name__}.{name}: returns a value but its docstring "
                            "has no 'Returns' section")
    return problems


# --- executable examples ------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    lang: str
    code: str
    start: int      # offsets of the block's body in the page text
    end: int
    line: int       # line of the opening fence (1-based)


def code_blocks(text: str) -> list[Block]:
    """The fenced code blocks of markdown ``text``, in order."""
    return [Block(m.group(1).lower(), m.group(2), m.start(2), m.end(2),
                  text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def _expected_output(blocks: list[Block], i: int, text: str) -> Block | None:
    nxt = blocks[i + 1] if i + 1 < len(blocks) else None
    if nxt is not None and nxt.lang == "text":
        between = text[blocks[i].end:nxt.start]
        # only the closing and opening fences (and blank lines) between them
        if re.fullmatch(r"\s*```\s*```text[^\n]*\n", between):
            return nxt
    return None


def _cli_commands(code: str) -> list[list[str]] | None:
    lines = [ln.strip() for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if not lines or not all(ln.startswith("mxnet-amp ") for ln in lines):
        return None
    return [shlex.split(ln)[1:] for ln in lines]


def _normalise(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


# what differs between two readers' terminals: the clock in MXNet's log lines, and where
# Python and its packages are installed
_CLOCK = re.compile(r"^\[\d\d:\d\d:\d\d\] ", re.MULTILINE)
_INSTALLED = re.compile(r"(?:/[^\s:]*)?/(?:site-packages|dist-packages|lib/python3\.\d+)/")


def _as_shown(stderr: str) -> str:
    """What a page shows of a block's stderr: install paths as ``.../``."""
    return _INSTALLED.sub(".../", stderr)


def _comparable(output: str) -> str:
    return _normalise(_CLOCK.sub("[hh:mm:ss] ", _as_shown(output)))


# a reader's shell sets none of these (the test suite and the CLI quiet MXNet's log with the
# first two; the pages show MXNet's default backend's log lines)
_READER_UNSET = ("MXNET_SUBGRAPH_VERBOSE", "MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "MXNET_SUBGRAPH_BACKEND")


@contextlib.contextmanager
def _readers_warnings() -> Iterator[None]:
    """Python's warnings as a fresh interpreter shows them (its default filters, printed on
    stderr), whatever the caller set up (pytest records them instead)."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", category)
        # "this machine cannot execute the model" depends on the machine the page is checked
        # on (float16 without a GPU, bfloat16 without avx512): the page says it in words
        from mxnet_amp.mx.hardware import HardwareWarning
        warnings.simplefilter("ignore", HardwareWarning)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__docs_example__")

        def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))
        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _stderr_captured(into: list[str]) -> Iterator[None]:
    """Everything written to file descriptor 2 in the block (MXNet's C++ log lines and
    Python's warnings alike, in the order written), appended to ``into`` as text."""
    sys.stderr.flush()
    saved, saved_stream = os.dup(2), sys.stderr
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        # sys.stderr may not be fd 2 (pytest's capture): Python's writes go to the same file
        sys.stderr = open(tmp.fileno(), "w", encoding="utf-8", buffering=1, closefd=False)
        try:
            yield
        finally:
            sys.stderr.flush()
            sys.stderr.close()
            sys.stderr = saved_stream
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            into.append(tmp.read().decode("utf-8", "replace"))


def run_examples(page: Path, workdir: Path, update: bool = False) -> list[str]:
    """Run the examples of ``page`` in ``workdir``; problems found, one line each.

    With ``update``, rewrite the page's expected-output blocks with the actual output.
    """
    text = page.read_text(encoding="utf-8")
    blocks = code_blocks(text)
    namespace: dict = {"__name__": "__docs_example__"}
    problems, replacements = [], []
    for name in _READER_UNSET:   # MXNet reads them once, at its first use
        os.environ.pop(name, None)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    old_cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for i, block in enumerate(blocks):
            where = f"{page.name}:{block.line}"
            if block.lang == "python":
                out, err_text = io.StringIO(), []
                try:
                    # the page shows what a reader sees: stderr (MXNet's log lines, the
                    # warnings Python shows once per place) above what the block prints
                    with contextlib.redirect_stdout(out), _readers_warnings(), \
                            _stderr_captured(err_text):
                        exec(compile(block.code, where, "exec"), namespace)
                except Exception as err:  # the page is wrong: report, do not crash the build
                    problems.append(f"{where}: python example raised {type(err).__name__}: {err}")
                    break   # later blocks depend on this one
                expected = _expected_output(blocks, i, text)
                if expected is not None:
                    seen = _as_shown("".join(err_text)) + out.getvalue()
                    got = _normalise(seen)
                    if update:
                        replacements.append((expected, got + "\n"))
                    elif _comparable(seen) != _comparable(expected.code):
                        problems.append(f"{where}: the example prints\n{got}\n--- but the page shows "
                                        f"(line {expected.line})\n{_normalise(expected.code)}")
            elif block.lang in ("sh", "bash", "console"):
                commands = _cli_commands(block.code)
                for argv in commands or ():
                    proc = subprocess.run([sys.executable, "-m", PACKAGE, *argv], cwd=workdir,
                                          env=env, capture_output=True, text=True, timeout=300)
                    if proc.returncode != 0:
                        problems.append(f"{where}: `mxnet-amp {shlex.join(argv)}` exited "
                                        f"{proc.returncode}: {proc.stderr.strip()[-400:]}")
    finally:
        os.chdir(old_cwd)
    if update and replacements and not problems:
        for block, new in sorted(replacements, key=lambda r: -r[0].start):
            text = text[:block.start] + new + text[block.end:]
        page.write_text(text, encoding="utf-8")
    return problems


# --- build --------------------------------------------------------------------------------

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title} - mxnet-amp</title>
<style>body{{max-width:60rem;margin:2rem auto;padding:0 1rem;font-family:sans-serif;line-height:1.5}}
pre{{background:#f6f8fa;padding:.8rem;overflow-x:auto}}code{{background:#f6f8fa}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.2rem .5rem}}</style>
</head><body><p><a href="index.html">mxnet-amp docs</a> · <a href="api/mxnet_amp.html">API reference</a></p>
{body}
</body></html>
"""


def _rewrite_href(target: str, source_dir: Path, out_dir: Path) -> str:
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
        return target
    path, sep, anchor = target.partition("#")
    resolved = (source_dir / path).resolve()
    if resolved.suffix == ".md" and resolved.parent == DOCS.resolve():
        return resolved.with_suffix(".html").name + sep + anchor
    if resolved == (ROOT / "README.md").resolve():
        return "README.html" + sep + anchor
    if resolved == (DOCS / "api").resolve() or path.rstrip("/") == "_build/api":
        return "api/mxnet_amp.html"
    # anything else (a list file, a benchmark script) stays a link into the source tree
    return os.path.relpath(resolved, out_dir) + sep + anchor


def render_page(page: Path, out_dir: Path) -> str:
    """``page`` (markdown) as a standalone HTML document for ``out_dir``."""
    import markdown2
    body = markdown2.markdown(page.read_text(encoding="utf-8"),
                              extras=["fenced-code-blocks", "tables", "header-ids", "code-friendly"])
    body = re.sub(r'href="([^"]+)"',
                  lambda m: 'href="%s"' % html.escape(_rewrite_href(html.unescape(m.group(1)),
                                                                    page.parent, out_dir)), body)
    title = next((ln.lstrip("# ").strip() for ln in page.read_text(encoding="utf-8").splitlines()
                  if ln.startswith("#")), page.stem)
    from pygments.formatters import HtmlFormatter   # a pdoc dependency; colours the code blocks
    page_html = _PAGE.format(title=html.escape(title), body=body)
    return page_html.replace("</style>", HtmlFormatter().get_style_defs(".codehilite") + "</style>", 1)


def build_api(modules: Sequence[str], out_dir: Path) -> None:
    """Write the pdoc API reference of ``modules`` into ``out_dir``."""
    import pdoc
    import pdoc.render
    pdoc.render.configure(docformat="numpy", search=True, show_source=False,
                          footer_text="mxnet-amp API reference")
    with warnings.catch_warnings():
        # pdoc warns about string annotations it cannot resolve; the text is shown as written
        warnings.simplefilter("ignore")
        pdoc.pdoc(*modules, output_directory=out_dir)


def check(examples: bool = False) -> list[str]:
    """Every problem that stops the build: broken links, missing docstrings, failing examples."""
    problems = broken_links(markdown_files())
    problems += missing_docstrings(public_modules())
    if examples:
        for name in EXAMPLE_PAGES:
            with tempfile.TemporaryDirectory(prefix="mxnet-amp-docs-") as tmp:
                problems += run_examples(DOCS / name, Path(tmp))
    return problems


def build(out_dir: Path, examples: bool = False) -> list[Path]:
    """Check the docs, then write the site to ``out_dir``; returns the HTML files written.

    Raises
    ------
    DocsError
        A check failed; nothing is written.
    """
    for module, extra in (("pdoc", "docs"), ("markdown2", "docs")):
        if importlib.util.find_spec(module) is None:
            raise DocsError(f"{module} is not installed; install the docs tools with "
                            f"pip install -e '.[{extra}]' (or pip install pdoc)")
    problems = check(examples)
    if problems:
        raise DocsError("\n".join(problems))
    out_dir = out_dir.resolve()
    # build beside the target and swap it in, so a failed build leaves the old site whole
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        build_api(public_modules(), staging / "api")
        for page in markdown_files():
            name = "README.html" if page.name == "README.md" else page.with_suffix(".html").name
            (staging / name).write_text(render_page(page, out_dir), encoding="utf-8")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sorted(out_dir.rglob("*.html"))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOCS / "_build", help="output folder (default docs/_build)")
    parser.add_argument("--examples", action="store_true", help="also run the pages' code examples")
    parser.add_argument("--update-examples", action="store_true",
                        help="run the examples and rewrite their output blocks; builds nothing")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.update_examples:
        problems = []
        for name in EXAMPLE_PAGES:
            with tempfile.TemporaryDirectory(prefix="mxnet-amp-docs-") as tmp:
                problems += run_examples(DOCS / name, Path(tmp), update=True)
        for p in problems:
            print(f"build_docs: {p}", file=sys.stderr)
        return 1 if problems else 0
    try:
        files = build(args.out, args.examples)
    except DocsError as err:
        print(f"build_docs: the docs do not build:\n{err}", file=sys.stderr)
        return 1
    print(f"build_docs: wrote {len(files)} HTML files to {args.out} "
          f"(start at {args.out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
