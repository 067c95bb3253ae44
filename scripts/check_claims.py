#!/usr/bin/env python3
"""Checks two claims of the docs against the tree, so they cannot go stale:

  1. The library writes through the log sink only (core/log.h): no
     std::cout, std::cerr, std::clog, printf, fprintf, puts or writes to
     stdout/stderr in src/ but in src/core/log.cc. (snprintf formats into a
     buffer and is not a write.) The `lockstep` command (cli/) may print.
  2. Every file that the README and docs/*.md name in backticks exists: a
     path with a folder and a file suffix ("train/fit_loops.cc",
     "scripts/check_layers.py") is looked up from the repository root, src/,
     include/lockstep/ and include/. Paths with braces or wildcards are
     patterns, not files, and are skipped; so are upstream projects' files
     (keras/..., tensorflow/..., canned/... as TensorFlow's estimator names
     them).

    check_claims.py [--root DIR]   (exit 1 and one line per violation)"""
import argparse
import pathlib
import re
import sys

SINK = pathlib.PurePosixPath("src/core/log.cc")
WRITE = re.compile(r"std::cout|std::cerr|std::clog|(?<![sn])printf\s*\(|\bfprintf\s*\(|"
                   r"\bputs\s*\(|\bfputs\s*\(|\bfwrite\s*\([^;]*\b(stdout|stderr)\b|"
                   r"\b(STDOUT|STDERR)_FILENO\b.*\bwrite\s*\(")
SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".py", ".sh", ".md", ".cmake", ".txt", ".json", ".toml")
TICKED = re.compile(r"`([^`\s]+)`")
UPSTREAM = ("keras/", "tensorflow/", "tensorflow_estimator/", "canned/", "torch/", "tf_keras/")


def library_writes(root):
    problems = []
    for path in sorted((root / "src").rglob("*")):
        if path.suffix not in (".h", ".hpp", ".cc", ".cpp") or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if pathlib.PurePosixPath(rel) == SINK:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("//", 1)[0]
            if WRITE.search(code):
                problems.append(f"{rel}:{n}: writes past the log sink (core/log.h): "
                                f"{line.strip()}")
    return problems


def stale_references(root, doc):
    problems = []
    text = (root / doc).read_text()
    bases = [root, root / "src", root / "include" / "lockstep", root / "include"]
    for n, line in enumerate(text.splitlines(), 1):
        for ref in TICKED.findall(line):
            ref = ref.split(":", 1)[0].rstrip(".,;")
            if "/" not in ref or not ref.endswith(SUFFIXES) or re.search(r"[{}*<>]", ref):
                continue
            if ref.startswith(("http", "/", "../") + UPSTREAM):
                continue
            if not any((b / ref).exists() for b in bases):
                problems.append(f"{doc}:{n}: names `{ref}`, which is not in the tree")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent,
                        type=pathlib.Path)
    args = parser.parse_args()
    docs = ["README.md"] + sorted(p.relative_to(args.root).as_posix()
                                  for p in (args.root / "docs").glob("*.md"))
    problems = library_writes(args.root)
    for doc in docs:
        if (args.root / doc).is_file():
            problems += stale_references(args.root, doc)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("check_claims: the library writes through the log sink only; every file "
          "the README and docs/*.md name exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
