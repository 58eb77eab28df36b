"""Read one analyst statement: dpsql commands by pattern, SQL with sqlglot.

dpsql's own commands (SET/RESET/SHOW dpsql.*, EXPLAIN DP) are recognised here; any
other text is parsed by sqlglot into exactly one statement, and query parameters
are bound as literals in the tree (never spliced into text). The subset check itself
(what a private query may contain) is in dpsql.analysis.analyze and mirrors
grammars/dpsql.lark.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dpsql.errors import QueryRejected, SqlSyntaxError
from dpsql.sqltext import strip_comments

_SET = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][\w.]*)\s*(?:=|\bTO\b)\s*(.*?)\s*;?\s*$",
                  re.I | re.S)
_RESET = re.compile(r"^\s*RESET\s+([A-Za-z_][\w.]*)\s*;?\s*$", re.I)
_SHOW = re.compile(r"^\s*SHOW\s+([A-Za-z_][\w.]*)\s*;?\s*$", re.I)
_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+DP\s+(.*)$", re.I | re.S)
_EXPLAIN_OTHER = re.compile(r"^\s*EXPLAIN\b(.*)$", re.I | re.S)


@dataclass(frozen=True, slots=True)
class Statement:
    kind: str                  # set | reset | show | explain | query | empty
    name: str | None = None    # setting name for set/reset/show
    value: str | None = None   # raw value text for set
    tree: exp.Expression | None = None
    text: str = ""


def classify(text: str, params: Sequence[Any] | Mapping[str, Any] | None = None,
             dialect: str = "duckdb") -> Statement:
    """Split dpsql commands from SQL; parse SQL into one sqlglot tree."""
    if not isinstance(text, str):
        raise QueryRejected("a non-text statement", "statements are SQL text")
    bare = strip_comments(text).strip()
    head = bare
    if not head.rstrip(";").strip():
        return Statement("empty", text=text)
    if m := _SET.match(bare):
        return Statement("set", m.group(1).lower(), _unquote(m.group(2)), text=text)
    if m := _RESET.match(bare):
        return Statement("reset", m.group(1).lower(), text=text)
    if m := _SHOW.match(bare):
        return Statement("show", m.group(1).lower(), text=text)
    if m := _EXPLAIN.match(head):
        inner = classify(m.group(1), params, dialect)
        if inner.kind != "query":
            raise QueryRejected("EXPLAIN DP of a command", "EXPLAIN DP takes one SELECT query")
        return Statement("explain", tree=inner.tree, text=inner.text)
    if m := _EXPLAIN_OTHER.match(bare):
        raise QueryRejected("EXPLAIN" + (" ANALYZE" if "ANALYZE" in m.group(1).upper() else ""),
                            "the engine's plan shows row estimates and timings drawn from the data",
                            "use EXPLAIN DP to see how dpsql would answer a query")
    tree = parse_sql(head, dialect)
    if params is not None:
        tree = bind_params(tree, params)
    elif any(_is_holder(n) for n in tree.find_all(exp.Placeholder, exp.Parameter)):
        raise QueryRejected("a query parameter", "the query has placeholders but no parameters were given")
    return Statement("query", tree=tree, text=text)


def parse_sql(text: str, dialect: str = "duckdb") -> exp.Expression:
    try:
        trees = [t for t in sqlglot.parse(text, read=dialect) if t is not None]
    except (ParseError, TokenError) as err:
        raise SqlSyntaxError(_syntax_detail(err)) from None
    except Exception:  # sqlglot can raise other errors on odd input: refuse, never crash
        raise SqlSyntaxError("the statement could not be parsed") from None
    if not trees:
        raise SqlSyntaxError("empty statement")
    if len(trees) > 1:
        raise QueryRejected("several statements", "send one statement at a time, so each is checked and charged alone")
    return trees[0]


def _syntax_detail(err: Exception) -> str:
    errors = getattr(err, "errors", None)
    if errors:
        first = errors[0]
        desc = first.get("description") or "invalid SQL"
        line, col = first.get("line"), first.get("col")
        if line:
            return f"{desc} (line {line}, column {col})"
        return desc
    return str(err).splitlines()[0][:200] if str(err) else "invalid SQL"


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _is_holder(node: exp.Expression) -> bool:
    """?, :name and $n placeholders; the postgres dialect reads $n as a Parameter of a number."""
    if isinstance(node, exp.Placeholder):
        return True
    return (isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal)
            and not node.this.is_string and node.this.name.isdigit())


def bind_params(tree: exp.Expression, params: Sequence[Any] | Mapping[str, Any]) -> exp.Expression:
    """Replace ?, $n and :name placeholders by literal nodes (a copy)."""
    holders = [n for n in tree.find_all(exp.Placeholder, exp.Parameter) if _is_holder(n)]
    positional = iter(params) if not isinstance(params, Mapping) else None
    used = 0

    def value_for(node: exp.Expression) -> Any:
        nonlocal used
        name = node.args.get("this")
        name = (name.name if isinstance(name, exp.Expression) else str(name)) if name is not None else ""
        if isinstance(params, Mapping):
            if not name or name not in params:
                raise QueryRejected("a query parameter", f"no value given for parameter {name or '?'!r}")
            return params[name]
        if name and name.isdigit():
            i = int(name) - 1
            if not 0 <= i < len(params):
                raise QueryRejected("a query parameter", f"no value given for parameter ${name}")
            used = max(used, i + 1)
            return params[i]
        if name:
            raise QueryRejected("a named parameter", "pass a mapping for named parameters")
        try:
            v = next(positional)
        except StopIteration:
            raise QueryRejected("a query parameter", "fewer parameters than placeholders") from None
        used += 1
        return v

    def swap(node: exp.Expression) -> exp.Expression:
        if _is_holder(node):
            return literal(value_for(node))
        return node

    if not holders:
        if params:
            raise QueryRejected("query parameters", "parameters were given but the query has no placeholders")
        return tree
    out = tree.transform(swap)
    if not isinstance(params, Mapping) and used != len(params):
        raise QueryRejected("query parameters", "more parameters than placeholders")
    return out


def literal(value: Any) -> exp.Expression:
    """A sqlglot literal for a Python value; refuses types it cannot type-check."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, (float, decimal.Decimal)):
        if not math.isfinite(value):
            raise QueryRejected("a non-finite parameter", "NaN and infinity cannot be compared safely")
        return exp.Literal.number(repr(value) if isinstance(value, float) else str(value))
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, _dt.datetime):
        return exp.Cast(this=exp.Literal.string(value.isoformat(sep=" ")), to=exp.DataType.build("TIMESTAMP"))
    if isinstance(value, _dt.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("DATE"))
    raise QueryRejected(f"a parameter of type {type(value).__name__}",
                        "parameters must be numbers, strings, booleans, dates or None")
