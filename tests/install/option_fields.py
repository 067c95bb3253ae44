#!/usr/bin/env python3
"""Lists the fields of public aggregate structs that have no default member
initializer: a user who fills such a struct partly with designated
initializers gets GCC's -Wmissing-field-initializers for each of them.

    option_fields.py include/      (exit 1 and one line per field when any)

A struct counts as an aggregate when it declares no constructor. Fields are
the declarations at the struct's own brace level that are not functions,
types, aliases, statics or friends."""
import pathlib
import re
import sys


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def strip_templates(decl):
    # Removes <...> (nested), so that the parentheses of std::function<R(A)>
    # do not look like a function declaration.
    out, depth = [], 0
    for ch in decl:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def body_end(text, open_brace):
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def top_level_statements(body):
    # Statements at depth 0 of the body; nested braces are kept inside.
    stmts, cur, depth = [], [], 0
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                cur.append(ch)
                stmt = "".join(cur).strip()
                # A function or nested type with a body ends here, unless a
                # ';' follows (a braced initializer or a nested struct).
                if "(" in strip_templates(stmt.split("{", 1)[0]) or re.match(
                        r"(struct|class|enum|union)\b", stmt):
                    stmts.append(stmt)
                    cur = []
                continue
        if ch == ";" and depth == 0:
            stmts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return stmts


def fields_without_initializer(name, body):
    stmts = top_level_statements(body)
    flat = [strip_templates(s) for s in stmts]
    if any(re.search(r"(^|[\s~])" + re.escape(name) + r"\s*\(", s) for s in flat):
        return []  # has a constructor: not an aggregate
    missing = []
    for stmt, s in zip(stmts, flat):
        s = re.sub(r"^(public|private|protected)\s*:", "", s).strip()
        if not s or re.match(r"(using|static|friend|typedef|struct|class|enum|union|template)\b", s):
            continue
        head = s.split("=", 1)[0].split("{", 1)[0]
        if "(" in head or "operator" in head:
            continue  # a function
        if "=" in s or "{" in s:
            continue  # has an initializer
        for var in head.split(","):
            missing.append(var.split()[-1].lstrip("*&"))
    return missing


def main(root):
    bad = 0
    for path in sorted(pathlib.Path(root).rglob("*.h")):
        text = strip_comments(path.read_text())
        for m in re.finditer(r"\bstruct\s+(?:\w+::)*(\w+)\s*(?:final\s*)?(?::[^{;]*)?\{", text):
            end = body_end(text, m.end() - 1)
            for field in fields_without_initializer(m.group(1), text[m.end():end]):
                print(f"{path}: struct {m.group(1)}: field '{field}' has no default member "
                      "initializer (add '{}' or a value)")
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "include"))
