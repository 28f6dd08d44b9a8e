#!/usr/bin/env python
"""Generate docs/ops.md: every MXNet operator and its AMP category for float16 and bfloat16.

Reads lists/float16.toml and lists/bfloat16.toml (standard library ``tomllib``) and the live
operator registry of the installed MXNet (``MXListAllOpNames``), and writes a Markdown table
with one row per registered name (aliases included).

Usage::

    python tools/gen_op_table.py            # rewrite docs/ops.md
    python tools/gen_op_table.py --check    # exit 1 if docs/ops.md is out of date

It exits with status 2 (and writes nothing) when a list leaves a registry op unclassified,
classifies one twice or names an op the registry lacks.
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's mxnet_amp, installed or not
from mxnet_amp.mx.registry import mxnet_op_names, op_signature  # noqa: E402

LISTS = ROOT / "lists"
DOC = ROOT / "docs" / "ops.md"
DTYPES = ("float16", "bfloat16")
ABBREV = {"float16": "H", "bfloat16": "B"}
COMMAND = "python tools/gen_op_table.py"


# --------------------------------------------------------------------------- registry
def registry() -> dict[str, str]:
    """Every registered op name -> the name of the operator it is an alias of (or itself)."""
    return {name: op_signature(name).name for name in mxnet_op_names()}


# --------------------------------------------------------------------------- lists
def load_list(dtype: str, folder: Path = LISTS) -> dict:
    with open(folder / f"{dtype}.toml", "rb") as f:
        return tomllib.load(f)


def header_comment(dtype: str, folder: Path = LISTS) -> list[str]:
    """The comment block at the top of a list file, without the leading '# '."""
    lines = []
    for line in (folder / f"{dtype}.toml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return lines


def classify(data: dict, names) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """Map each op in ``names`` to (category text, rule id); also return the problems found.

    Rule ids: ``H3`` = third [[group]] of float16.toml, ``HC2`` = second [[conditional]],
    ``HS1`` = first [[slow_kernel]], ``HP1`` = first [[pattern]] (``B...`` for bfloat16).
    """
    tag = ABBREV[data["target_dtype"]]
    names = set(names)
    where: dict[str, tuple[str, str]] = {}
    problems = []
    for k, group in enumerate(data.get("group", []), 1):
        for op in group["ops"]:
            if op in where:
                problems.append(f"{op}: listed in {where[op][1]} and {tag}{k}")
            where[op] = (group["category"], f"{tag}{k}")
    conds: dict[str, list[tuple[str, list[str], str]]] = {}
    for k, cond in enumerate(data.get("conditional", []), 1):
        conds.setdefault(cond["op"], []).append((cond["attr"], cond["values"], f"{tag}C{k}"))
    for op, entries in conds.items():
        if op in where:
            problems.append(f"{op}: listed in {where[op][1]} and as conditional")
        text = "conditional: fp32 if " + " or ".join(
            f"{attr} in {{{', '.join(values)}}}" for attr, values, _ in entries) + ", else follow"
        where[op] = (text, ", ".join(rid for _, _, rid in entries))
    for k, rule in enumerate(data.get("slow_kernel", []), 1):
        for op in rule["ops"]:
            if where.get(op, ("",))[0] != "target":
                problems.append(f"{op}: slow kernel {tag}S{k} names an op outside the target list")
                continue
            where[op] = (f"target: fp32 if depthwise over channels not a multiple of "
                         f"{rule['channels_not_multiple_of']}", f"{where[op][1]}, {tag}S{k}")
    for op in sorted(set(where) - names):
        problems.append(f"{op}: not in the MXNet registry")
    for op in sorted(names - set(where)):
        for k, pat in enumerate(data.get("pattern", []), 1):
            if op.startswith(pat["prefix"]):
                where[op] = (pat["category"], f"{tag}P{k}")
                break
        else:
            problems.append(f"{op}: not classified")
    return where, problems


# --------------------------------------------------------------------------- rendering
def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _code(name: str) -> str:
    return f"`{name}`"


def render(reg: dict[str, str] | None = None, folder: Path = LISTS) -> str:
    """The full text of docs/ops.md (raises ValueError listing problems in the lists)."""
    reg = registry() if reg is None else reg
    datas = {dt: load_list(dt, folder) for dt in DTYPES}
    table, problems = {}, []
    for dt, data in datas.items():
        table[dt], p = classify(data, reg)
        problems += [f"{dt}: {x}" for x in p]
    if problems:
        raise ValueError("op lists are inconsistent with the registry:\n  " + "\n  ".join(problems))

    out = []
    w = out.append
    w("# Operator categories for float16 and bfloat16")
    w("")
    w("<!-- Generated by tools/gen_op_table.py from lists/float16.toml and lists/bfloat16.toml; "
      "do not edit by hand. -->")
    w("")
    w(f"This page is generated from `lists/float16.toml`, `lists/bfloat16.toml` and the operator "
      f"registry of the installed MXNet ({len(reg)} registered names, aliases included). "
      f"Regenerate it after editing a list with:")
    w("")
    w("```sh")
    w(COMMAND)
    w("```")
    w("")
    w(f"`{COMMAND} --check` exits 1 when this file is stale; `tests/test_lists.py` checks the same.")
    w("")
    w("## Categories")
    w("")
    w("| category | what the AMP pass does |")
    w("|---|---|")
    w("| target | computes in the target dtype; every float input is cast to it |")
    w("| fp32 | computes in float32; every float input is cast to float32 |")
    w("| widest | when its float inputs differ in dtype, one `amp_multicast` makes them agree on "
      "the widest |")
    w("| follow | *follows its input*: no casts, runs in whatever dtype its inputs have (falls back "
      "to widest when MXNet's type inference rejects mixed inputs); written `category = \"follow\"` "
      "in the list files |")
    w("| conditional | fp32 when the node's attribute has one of the listed values, otherwise "
      "follow |")
    w("| target: fp32 if ... | a `[[slow_kernel]]` rule: target, except the nodes of the shape "
      "named, whose low precision kernel in MXNet is far slower than float32 |")
    w("")
    w("Integer and bool tensors are never cast. Inputs named in a list's `[index_inputs]` table "
      "(indices, masks, lengths) are never cast to low precision.")
    w("")
    w("Each op appears in exactly one `[[group]]` or `[[conditional]]` entry per list. "
      "**Pattern rule:** a `[[pattern]]` prefix applies only to ops that no group or conditional "
      "names; it covers the gradient operators:")
    w("")
    for dt in DTYPES:
        for k, pat in enumerate(datas[dt].get("pattern", []), 1):
            w(f"- {ABBREV[dt]}P{k} ({dt}): names starting with `{pat['prefix']}` → "
              f"{pat['category']}: {_md(pat['reason'])}")
    w("")

    w("## The principle")
    w("")
    text = header_comment("float16", folder)
    start = next((i for i, line in enumerate(text) if line.startswith("The principle")), None)
    if start is not None:
        end = next((i for i in range(start, len(text)) if not text[i].strip()), len(text))
        w(" ".join(line.strip() for line in text[start:end]))
        w("")
    w("## Counts")
    w("")
    w("| category | float16 | bfloat16 |")
    w("|---|---:|---:|")
    for cat in ("target", "fp32", "widest", "follow", "conditional"):
        n = {dt: sum(1 for c, _ in table[dt].values() if c.split(":")[0] == cat) for dt in DTYPES}
        w(f"| {cat} | {n['float16']} | {n['bfloat16']} |")
    by_pattern = {dt: sum(1 for _, rid in table[dt].values() if "P" in rid) for dt in DTYPES}
    w(f"| (of these, by pattern) | {by_pattern['float16']} | {by_pattern['bfloat16']} |")
    w(f"| total | {len(table['float16'])} | {len(table['bfloat16'])} |")
    w("")

    w("## How bfloat16 differs from float16")
    w("")
    w("From the header of `lists/bfloat16.toml`:")
    w("")
    text = header_comment("bfloat16", folder)
    start = next((i for i, line in enumerate(text) if line.startswith("How and why")), 0)
    w("```text")
    out.extend(line.rstrip() for line in text[start:])
    w("```")
    w("")
    differ = sorted(op for op in reg if table["float16"][op][0] != table["bfloat16"][op][0])
    w(f"{len(differ)} registry names have a different category in the two lists:")
    w("")
    w("| op | float16 | bfloat16 |")
    w("|---|---|---|")
    for op in differ:
        w(f"| {_code(op)} | {_md(table['float16'][op][0])} | {_md(table['bfloat16'][op][0])} |")
    w("")

    w("## Rules (group reasons)")
    w("")
    for dt in DTYPES:
        tag = ABBREV[dt]
        w(f"### {dt}")
        w("")
        w("| id | category | reason |")
        w("|---|---|---|")
        for k, group in enumerate(datas[dt].get("group", []), 1):
            w(f"| {tag}{k} | {group['category']} | {_md(group['reason'])} |")
        for k, cond in enumerate(datas[dt].get("conditional", []), 1):
            w(f"| {tag}C{k} | conditional ({_code(cond['op'])}: {cond['attr']} in "
              f"{{{', '.join(cond['values'])}}}) | {_md(cond['reason'])} |")
        for k, rule in enumerate(datas[dt].get("slow_kernel", []), 1):
            w(f"| {tag}S{k} | slow kernel ({', '.join(map(_code, rule['ops']))}: fp32 if depthwise "
              f"over channels not a multiple of {rule['channels_not_multiple_of']}) | "
              f"{_md(rule['reason'])} |")
        for k, pat in enumerate(datas[dt].get("pattern", []), 1):
            w(f"| {tag}P{k} | {pat['category']} (prefix `{pat['prefix']}`) | {_md(pat['reason'])} |")
        w("")

    w("## Every operator")
    w("")
    w("Rule ids refer to the tables above. *alias of* names the operator a registry name is "
      "registered under.")
    w("")
    w("| op | alias of | float16 | rule | bfloat16 | rule |")
    w("|---|---|---|---|---|---|")
    for op in sorted(reg, key=lambda s: (s.lstrip("_").lower(), s)):
        real = reg[op]
        h, b = table["float16"][op], table["bfloat16"][op]
        w(f"| {_code(op)} | {_code(real) if real != op else ''} | {_md(h[0])} | {h[1]} | "
          f"{_md(b[0])} | {b[1]} |")
    w("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/ops.md is out of date")
    ap.add_argument("--output", type=Path, default=DOC, help="file to write (default docs/ops.md)")
    args = ap.parse_args(argv)
    try:
        text = render()
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text() if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is out of date; run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
