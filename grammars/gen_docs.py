"""Generate docs/SUBSET.md from grammars/dpsql.lark.

    python grammars/gen_docs.py           # rewrite docs/SUBSET.md
    python grammars/gen_docs.py --check   # exit 1 if docs/SUBSET.md is stale

The grammar is the single source of truth: its leading comment block (terminals and side
conditions) becomes the introduction, and each `// ---- NAME` section becomes a heading
with the section's comments as prose and its rules verbatim. tests/analysis/test_grammar.py
checks that the committed doc equals this script's output.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRAMMAR = ROOT / "grammars" / "dpsql.lark"
DOC = ROOT / "docs" / "SUBSET.md"

_SECTION = re.compile(r"^//\s*-{4,}\s*(.*?)\s*$")


def _prose(comment_lines: list[str]) -> list[str]:
    """Comment lines (without //) as Markdown: indented runs become code blocks."""
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            out.extend(["```text", *block, "```"])
            block.clear()

    for line in comment_lines:
        if line.startswith("  ") and line.strip():
            block.append(line[2:].rstrip())
            continue
        flush()
        if line.startswith("## "):
            out.extend(["", line, ""])
        else:
            out.append(line.rstrip())
    flush()
    # collapse runs of blank lines
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text.split("\n") if text else []


def _uncomment(line: str) -> str:
    body = line.lstrip()[2:]
    return body[1:] if body.startswith(" ") else body


def render(grammar: str) -> str:
    """The Markdown document for the grammar text."""
    lines = grammar.splitlines()
    i = 0
    header: list[str] = []
    while i < len(lines) and (lines[i].lstrip().startswith("//") or not lines[i].strip()):
        if _SECTION.match(lines[i]):
            break
        header.append(_uncomment(lines[i]) if lines[i].strip() else "")
        i += 1
    title = header[0] if header else "dpsql.lark"
    out = [
        "# The accepted SQL subset",
        "",
        "<!-- Generated from grammars/dpsql.lark by grammars/gen_docs.py. Do not edit by hand: "
        "edit the grammar and run `python grammars/gen_docs.py`. -->",
        "",
        f"*{title}*",
        "",
        *_prose(header[1:]),
    ]

    sections: list[tuple[str, list[str]]] = [("Query", [])]
    for line in lines[i:]:
        m = _SECTION.match(line)
        if m:
            sections.append((m.group(1), []))
        else:
            sections[-1][1].append(line)

    out += ["", "## Grammar", "",
            "Lark EBNF: `\"KEYWORD\"i` is a case-insensitive keyword, `?rule` is inlined in parse trees, "
            "`x?` is optional, `x*` repeats, `col{X}` is a column of class X, optionally qualified.", ""]
    for name, body in sections:
        if not any(l.strip() for l in body):
            continue
        out += [f"### {name[:1].upper() + name[1:]}", ""]
        chunk_comments: list[str] = []
        chunk_rules: list[str] = []

        def emit() -> None:
            nonlocal out
            if chunk_comments:
                out += _prose(chunk_comments) + [""]
            rules = "\n".join(chunk_rules).strip("\n")
            if rules:
                out += ["```lark", rules, "```", ""]
            chunk_comments.clear()
            chunk_rules.clear()

        for line in body:
            if line.lstrip().startswith("//"):
                if chunk_rules and any(r.strip() for r in chunk_rules):
                    emit()
                chunk_comments.append(_uncomment(line))
            else:
                chunk_rules.append(line.rstrip())
        emit()
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render(GRAMMAR.read_text(encoding="utf-8"))
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC.relative_to(ROOT)} is stale: run python grammars/gen_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
