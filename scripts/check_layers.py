#!/usr/bin/env python3
"""Checks that every #include of Lockstep's sources follows the layer table of
docs/architecture.md: a layer includes only its own headers and those of the
layers it depends on, directly or transitively.

    check_layers.py [--root DIR] [--table FILE]
        (exit 1 and one line per violation when any; exit 2 when the table
        cannot be read)

It scans every .h, .hpp, .cc and .cpp under src/<layer>/,
include/lockstep/<layer>/ and cli/ (layer `cli`), and judges each include:
  - "lockstep/<X>/..." (or <...>) is a public header of layer X;
  - "lockstep/lockstep.h", the umbrella, holds all of layer `train`;
  - a quoted include whose first folder is a layer ("tensor/ops/loops.h") is a
    private header of that layer: only that layer's own sources may include it
    (src/<layer>/, or cli/ for `cli`), never its public headers;
  - a quoted include without a folder ("host_cores.h") is the same folder's;
  - anything else (system and third-party headers) is not ours to judge.
Lines whose text starts with // are skipped. A folder of src/ or
include/lockstep/ that is not a layer of the table is a violation too, so that
a new layer cannot escape the check."""
import argparse
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".h", ".hpp", ".cc", ".cpp"}
UMBRELLA = "lockstep/lockstep.h"
UMBRELLA_LAYER = "train"
NONE_MARKS = {"", "—", "-", "–", "none"}  # a "depends on" cell meaning none

INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')


class TableError(Exception):
    """The layer table is missing or malformed."""


def cells(row):
    """The cells of a markdown table row, without backticks or padding."""
    row = row.strip()
    if not (row.startswith("|") and row.endswith("|")) or len(row) < 2:
        return None
    return [c.strip().replace("`", "").strip() for c in row[1:-1].split("|")]


def read_table(path):
    """{layer: [direct dependencies]}, both in the table's order, from the
    first table under the `## Layers` heading of the markdown file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TableError(f"{path}: cannot read the layer table: {e.strerror}") from None
    start = next((i for i, line in enumerate(lines)
                  if re.fullmatch(r"##\s+Layers\s*", line)), None)
    if start is None:
        raise TableError(f"{path}: no '## Layers' section")
    # The table: the first run of '|' lines before the next heading.
    rows = []
    for n in range(start + 1, len(lines)):
        line = lines[n]
        if line.startswith("#"):
            break
        if line.lstrip().startswith("|"):
            rows.append((n + 1, line))
        elif rows:
            break
    if not rows:
        raise TableError(f"{path}:{start + 1}: '## Layers' holds no table")
    header_line, header = rows[0][0], cells(rows[0][1])
    if header is None or "layer" not in header or "depends on" not in header:
        raise TableError(f"{path}:{header_line}: the layers table's header must name "
                         "the columns 'layer' and 'depends on', e.g. "
                         "'| layer | holds | depends on |'")
    if len(rows) < 2 or not all(re.fullmatch(r":?-+:?", c or "")
                                for c in (cells(rows[1][1]) or [None])):
        raise TableError(f"{path}:{header_line + 1}: the layers table has no "
                         "'|---|' line under its header")
    layer_col, deps_col = header.index("layer"), header.index("depends on")

    deps, where = {}, {}
    for n, row in rows[2:]:
        c = cells(row)
        if c is None or len(c) != len(header):
            raise TableError(f"{path}:{n}: expected {len(header)} cells, as in the "
                             f"header: {row.strip()}")
        layer = c[layer_col]
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", layer):
            raise TableError(f"{path}:{n}: '{layer}' is not a layer name")
        if layer in deps:
            raise TableError(f"{path}:{n}: layer '{layer}' is listed twice")
        cell = c[deps_col]
        deps[layer] = [] if cell.lower() in NONE_MARKS else \
            [d.strip() for d in cell.split(",")]
        where[layer] = n
    if not deps:
        raise TableError(f"{path}:{header_line}: the layers table has no rows")
    for layer, ds in deps.items():
        for d in ds:
            if d not in deps:
                raise TableError(f"{path}:{where[layer]}: layer '{layer}' depends on "
                                 f"'{d}', which is no layer of the table")
    check_acyclic(deps, path)
    return deps


def check_acyclic(deps, path):
    """Dependencies point down only: a cycle makes the table malformed."""
    state = {}  # layer -> "visiting" | "done"

    def visit(layer, trail):
        if state.get(layer) == "done":
            return
        if state.get(layer) == "visiting":
            cycle = trail[trail.index(layer):] + [layer]
            raise TableError(f"{path}: the layers depend on each other in a cycle: "
                             + " -> ".join(cycle))
        state[layer] = "visiting"
        for d in deps[layer]:
            visit(d, trail + [layer])
        state[layer] = "done"

    for layer in deps:
        visit(layer, [])


def closure(deps):
    """{layer: every layer it depends on, directly or transitively}."""
    below = {}

    def reach(layer):
        if layer not in below:
            below[layer] = set()
            for d in deps[layer]:
                below[layer] |= {d} | reach(d)
        return below[layer]

    for layer in deps:
        reach(layer)
    return below


def sources(root, layers):
    """(path, layer, own) for every source file to scan, where `own` says the
    file is one of its layer's own sources (may include private headers), and
    a list of violations for folders that are no layer."""
    found, strays = [], []

    def walk(folder, layer, own):
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.suffix in SOURCE_SUFFIXES:
                found.append((p, layer, own))

    for base, own in ((root / "src", True), (root / "include" / "lockstep", False)):
        if not base.is_dir():
            continue
        for sub in sorted(base.iterdir()):
            if not sub.is_dir():
                continue  # src/CMakeLists.txt, include/lockstep/lockstep.h
            if sub.name in layers:
                walk(sub, sub.name, own)
            else:
                strays.append(f"{sub.relative_to(root)}/: folder '{sub.name}' is no "
                              "layer of the table; add it to the table or move it")
    if (root / "cli").is_dir():
        if "cli" in layers:
            walk(root / "cli", "cli", True)
        else:
            strays.append("cli/: the table has no layer 'cli'")
    return found, strays


def judge(header, quoted, layer, own, deps, below):
    """(counted, reason): `counted` says the include names one of Lockstep's
    layers (ours to judge); `reason` is None when `layer` may include it,
    otherwise why not. `own` says the including file is its layer's source."""
    parts = header.split("/")
    if header == UMBRELLA:
        target, named = UMBRELLA_LAYER, f"'{header}' (the umbrella: layer '{UMBRELLA_LAYER}')"
    elif parts[0] == "lockstep" and len(parts) > 2:
        target, named = parts[1], f"'{header}' (layer '{parts[1]}')"
        if target not in deps:
            return True, f"includes '{header}', but '{target}' is no layer of the table"
    elif quoted and len(parts) > 1 and parts[0] in deps:
        target = parts[0]
        if own and target == layer:
            return True, None
        return True, (f"includes private header '{header}' of layer '{target}'; "
                      f"only {target}'s own sources may")
    else:
        return False, None  # same folder, system or third-party
    if target == layer or target in below[layer]:
        return True, None
    return True, f"includes {named}, but {layer} depends on: {describe(layer, deps, below)}"


def describe(layer, deps, below):
    """What a layer may include, e.g. 'autodiff (so also tensor, core)': its
    direct dependencies as the table lists them, then the layers below those,
    top down (the table lists the layers bottom up)."""
    direct = deps[layer]
    if not direct:
        return "nothing"
    rest = [other for other in reversed(deps) if other in below[layer] and other not in direct]
    return ", ".join(direct) + (f" (so also {', '.join(rest)})" if rest else "")


def shown(path, root):
    """The path relative to the repository when it is inside it."""
    path = path.resolve()
    return path.relative_to(root) if path.is_relative_to(root) else path


def main():
    here = pathlib.Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=pathlib.Path, default=here.parent,
                    help="the repository to check (default: the one holding this script)")
    ap.add_argument("--table", type=pathlib.Path,
                    help="the markdown file with the '## Layers' table "
                         "(default: ROOT/docs/architecture.md)")
    args = ap.parse_args()
    root = args.root.resolve()
    table = args.table or root / "docs" / "architecture.md"

    try:
        deps = read_table(table)
    except TableError as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    below = closure(deps)

    files, violations = sources(root, deps)
    checked = 0
    for path, layer, own in files:
        rel = path.relative_to(root)
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip().startswith("//"):
                continue
            m = INCLUDE.match(line)
            if not m:
                continue
            quoted = m.group(1) is not None
            header = m.group(1) if quoted else m.group(2)
            counted, reason = judge(header.strip(), quoted, layer, own, deps, below)
            checked += counted
            if reason:
                violations.append(f"{rel}:{n}: layer '{layer}' {reason}")

    for v in violations:
        print(v)
    if violations:
        sys.stdout.flush()  # the lines above come first in a merged log
        print(f"check_layers: {len(violations)} violation(s) of the layer table in "
              f"{shown(table, root)}; fix the include, or change the table on purpose "
              "and say why", file=sys.stderr)
        return 1
    print(f"check_layers: {len(files)} files scanned, {checked} includes of Lockstep's "
          f"layers checked against {len(deps)} layers: no violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
