"""Read one analyst statement: dpsql commands by pattern, SQL with sqlglot.

dpsql's own commands (SET/RESET/SHOW dpsql.*, EXPLAIN DP) are recognised here; any
other text is parsed by sqlglot into exactly one statement, and query parameters
are bound as literals in the tree (never spliced into text). The subset check itself
(what a private query may contain) is in dpsql.analysis.analyze and mirrors
grammars/dpsql.lark.

One input dialect, parsed strictly: the analyst writes PostgreSQL-flavoured SQL whatever the
engine (the proxy speaks PostgreSQL, and psql, JDBC and BI tools send it), so every statement
is read as PostgreSQL and the engine's dialect is generated only at the end. sqlglot reads
more than PostgreSQL accepts, and a query PostgreSQL would reject must be refused, not
reinterpreted and charged (`SELECT COUNT(*) FROM t GROUP` would read GROUP as an alias of t):
_strict() refuses, from the tokens, what sqlglot forgives: a reserved word used as a bare
name, a comma before a clause keyword or a closing parenthesis, `==`, `<=>`, QUALIFY, an empty
GROUP BY or IN list, and 0x literals.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError

from dpsql.analysis.suggest import keyword_hint
from dpsql.dialects import data_type
from dpsql.errors import QueryRejected, SqlSyntaxError
from dpsql.sqltext import blank_comments, code_spans, strip_comments, unterminated

INPUT_DIALECT = "postgres"

# PostgreSQL 15's reserved key words (Appendix C, "reserved" and "reserved (can be function or
# type)"): never a bare table, column or alias name; the second group may name a function.
_RESERVED = frozenset(["all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric", "both", "case", "cast", "check", "collate", "column", "constraint", "create", "current_catalog", "current_date", "current_role", "current_time", "current_timestamp", "current_user", "default", "deferrable", "desc", "distinct", "do", "else", "end", "except", "false", "fetch", "for", "foreign", "from", "grant", "group", "having", "in", "initially", "intersect", "into", "lateral", "leading", "limit", "localtime", "localtimestamp", "not", "null", "offset", "on", "only", "or", "order", "placing", "primary", "references", "returning", "select", "session_user", "some", "symmetric", "table", "then", "to", "trailing", "true", "union", "unique", "user", "using", "variadic", "when", "where", "window", "with"])
_RESERVED_FUNC = frozenset(["authorization", "binary", "collation", "concurrently", "cross", "current_schema", "freeze", "full", "ilike", "inner", "is", "isnull", "join", "left", "like", "natural", "notnull", "outer", "overlaps", "right", "similar", "tablesample", "verbose"])
_COMMANDS = frozenset(["ATTACH", "DETACH", "EXPORT", "IMPORT", "INSTALL", "LOAD", "PRAGMA", "COPY", "CALL", "VACUUM", "ANALYZE", "CHECKPOINT", "SUMMARIZE", "DESCRIBE", "USE", "INSERT", "UPDATE", "DELETE", "MERGE", "UPSERT", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE", "BEGIN", "START", "COMMIT", "ROLLBACK", "ABORT", "END", "PREPARE", "EXECUTE", "DEALLOCATE", "LISTEN", "NOTIFY", "UNLISTEN", "LOCK", "REINDEX", "CLUSTER", "COMMENT", "DO", "FETCH", "MOVE", "CLOSE", "DECLARE", "SECURITY", "REFRESH", "DISCARD", "REASSIGN", "IMPORT"])
_CLAUSE_AFTER_COMMA = {"FROM", "WHERE", "GROUP_BY", "ORDER_BY", "HAVING", "LIMIT", "OFFSET", "R_PAREN",
                       "SEMICOLON", "UNION", "EXCEPT", "INTERSECT", "WINDOW", "JOIN", "ON"}

_SET = re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][\w.]*)\s*(?:=|\bTO\b)\s*(.*?)\s*;?\s*$",
                  re.IGNORECASE | re.DOTALL)
_RESET = re.compile(r"^\s*RESET\s+([A-Za-z_][\w.]*)\s*;?\s*$", re.IGNORECASE)
_SHOW = re.compile(r"^\s*SHOW\s+([A-Za-z_][\w.]*)\s*;?\s*$", re.IGNORECASE)
_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+DP\s+(?:\(\s*(SQL|WIDE)\s*\)\s*)?(.*)$", re.IGNORECASE | re.DOTALL)
_EXPLAIN_OTHER = re.compile(r"^\s*EXPLAIN\b(.*)$", re.IGNORECASE | re.DOTALL)


class StatementKind(StrEnum):
    """What an analyst statement is (its value is the word the front ends and tests read)."""
    SET = "set"
    RESET = "reset"
    SHOW = "show"
    EXPLAIN = "explain"
    QUERY = "query"
    EMPTY = "empty"


@dataclass(frozen=True, slots=True)
class Statement:
    kind: StatementKind
    name: str | None = None    # setting name for set/reset/show; explain: its form (facts | sql | wide)
    value: str | None = None   # raw value text for set
    tree: exp.Expression | None = None
    text: str = ""
    params: str = ""           # repr of the bound parameters (part of what the statement means)


def classify(text: str, params: Sequence[Any] | Mapping[str, Any] | None = None,
             dialect: str = INPUT_DIALECT) -> Statement:
    """Split dpsql commands from SQL; parse SQL into one sqlglot tree (PostgreSQL's dialect:
    `dialect` exists for the emulated catalog's own reading, which is PostgreSQL too)."""
    if not isinstance(text, str):
        raise QueryRejected("a non-text statement", "statements are SQL text")
    bare = strip_comments(text).strip()
    blank = blank_comments(text)       # comments blanked, every offset kept (error positions)
    if (open_ := unterminated(text)) is not None and open_[1] == "/* comment":
        raise SqlSyntaxError(f'unterminated /* comment at or near "{text[open_[0]:open_[0] + 40]}"',
                             position=open_[0] + 1)
    if not bare.rstrip(";").strip():
        return Statement(StatementKind.EMPTY, text=text)
    if m := _SET.match(bare):
        return Statement(StatementKind.SET, m.group(1).lower(), _unquote(m.group(2)), text=text)
    if m := _RESET.match(bare):
        return Statement(StatementKind.RESET, m.group(1).lower(), text=text)
    if m := _SHOW.match(bare):
        return Statement(StatementKind.SHOW, m.group(1).lower(), text=text)
    if m := _EXPLAIN.match(blank):
        try:
            inner = classify(text[m.start(2):], params, dialect)
        except SqlSyntaxError as err:    # the position is in the whole text, as PostgreSQL's
            raise SqlSyntaxError(err.reason, err.hint,
                                 position=None if err.position is None else err.position + m.start(2)) from None
        if inner.kind is not StatementKind.QUERY:
            raise QueryRejected("EXPLAIN DP of a command", "EXPLAIN DP takes one SELECT query")
        return Statement(StatementKind.EXPLAIN, (m.group(1) or "facts").lower(), tree=inner.tree, text=inner.text,
                         params=inner.params)
    if m := _EXPLAIN_OTHER.match(bare):
        raise QueryRejected("EXPLAIN" + (" ANALYZE" if "ANALYZE" in m.group(1).upper() else ""),
                            "the engine's plan shows row estimates and timings drawn from the data",
                            "use EXPLAIN DP to see how dpsql would answer a query")
    pyformat = params is not None and _uses_pyformat(blank)
    if pyformat:
        blank = _percents(blank)
    tree = parse_sql(blank, dialect)
    if pyformat:
        tree = tree.transform(_unescape_percents)
    if params is not None:
        tree = bind_params(tree, params)
    elif any(_is_holder(n) for n in tree.find_all(exp.Placeholder, exp.Parameter)):
        raise QueryRejected("a query parameter", "the query has placeholders but no parameters were given")
    return Statement(StatementKind.QUERY, tree=tree, text=text, params=repr(params) if params is not None else "")


def parse_sql(text: str, dialect: str = INPUT_DIALECT) -> exp.Expression:
    """One statement, read strictly; a syntax error says what PostgreSQL would say (`syntax error
    at or near "X"`) with X's 1-based position in `text`, and never sqlglot's own wording."""
    try:
        tokens = None
        if dialect == INPUT_DIALECT:
            tokens = _tokens(text)
            _strict(text, tokens)
        trees = [t for t in _parse(text, dialect, tokens) if t is not None]
    except SqlSyntaxError:
        raise
    except (ParseError, TokenError) as err:
        word = text.split(None, 1)[0].upper() if text.split() else ""
        if word in _COMMANDS:
            raise QueryRejected(word, "dpsql answers read-only aggregate SELECT queries only") from None
        raise _syntax_error(text, err) from None
    except Exception:  # sqlglot can raise other errors on odd input: refuse, never crash
        raise _syntax_error(text, None) from None
    if not trees:
        raise SqlSyntaxError("empty statement")
    if len(trees) > 1:
        raise QueryRejected("several statements", "send one statement at a time, so each is checked and charged alone")
    return trees[0]


_STARTS = frozenset(["SELECT", "WITH", "L_PAREN", "VALUES", "TABLE"])
# Words that begin a PostgreSQL statement (refused or handled elsewhere, never a syntax error here).
_STATEMENT_WORDS = _COMMANDS | {"SELECT", "WITH", "VALUES", "TABLE", "SHOW", "SET", "RESET", "EXPLAIN", "SAVEPOINT",
                                "RELEASE", "SUMMARIZE", "PIVOT", "UNPIVOT"}


def _parse(text: str, dialect: str, tokens: list | None) -> list:
    """sqlglot.parse(text, read=dialect), from the tokens _strict read when there are any: that is
    what sqlglot.parse does (the dialect's parser over the dialect's tokens of the text), without
    tokenizing the text a second time. No tokens (none read, or the text did not tokenize): sqlglot
    reads the text itself, and raises what it raises."""
    if not tokens:
        return sqlglot.parse(text, read=dialect)
    return Postgres().parser().parse(tokens, text)


def _tokens(text: str) -> list:
    try:
        return list(Postgres().tokenize(text))
    except Exception:  # noqa: BLE001 - an untokenisable text has no token to point at
        return []


def _near(text: str, tok) -> SqlSyntaxError:
    """`syntax error at or near "X"` at token `tok` (PostgreSQL names the first word of a
    multi-word keyword, and a quoted literal with its quotes), with a keyword hint when X, or
    the name before it, is a misspelt keyword."""
    raw = text[tok.start:tok.end + 1]
    if tok.token_type.name not in ("STRING", "IDENTIFIER", "NATIONAL_STRING") and " " in raw.strip():
        raw = raw.split()[0]
    hint = keyword_hint(raw) if tok.token_type.name == "VAR" else None
    if hint is None:
        prev = _previous(text, tok)
        if prev is not None and prev.token_type.name == "VAR":
            hint = keyword_hint(prev.text)
    return SqlSyntaxError(f'at or near "{raw}"', hint, position=tok.start + 1)


def _previous(text: str, tok):
    before = [t for t in _tokens(text) if t.end < tok.start]
    return before[-1] if before else None


def _syntax_error(text: str, err: Exception | None) -> SqlSyntaxError:
    """PostgreSQL's message for a statement sqlglot cannot read: the token it stopped at, or the
    end of input when the statement ends early; an unterminated quote or comment by name."""
    if (open_ := unterminated(text)) is not None:
        at, what = open_
        if what == "/* comment":
            return SqlSyntaxError(f'unterminated /* comment at or near "{text[at:at + 40]}"', position=at + 1)
        return SqlSyntaxError(f'unterminated {what} at or near "{text[at:at + 40]}"', position=at + 1)
    tokens = _tokens(text)
    if not tokens:
        return SqlSyntaxError("at end of input", position=len(text) + 1)
    if tokens[0].token_type.name not in _STARTS:
        return _near(text, tokens[0])
    info = (getattr(err, "errors", None) or [{}])[0] if err is not None else {}
    line, col = info.get("line"), info.get("col")
    desc = str(info.get("description") or "")
    idx = None
    if line and col:
        starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        end = (starts[line - 1] if line - 1 < len(starts) else 0) + col - 1    # the highlight's last character
        for k, tok in enumerate(tokens):
            if tok.start <= end <= tok.end:
                idx = k
                break
            if tok.start > end:
                idx = k
                break
    if idx is None:
        return SqlSyntaxError("at end of input", position=len(text.rstrip()) + 1)
    if desc.startswith(("Required keyword", "Expected")) and not desc.startswith("Expecting"):
        idx += 1        # a construct ended early: PostgreSQL points at what follows it
    while idx < len(tokens) and tokens[idx].token_type.name == "SEMICOLON" and idx == len(tokens) - 1:
        idx += 1
    if idx >= len(tokens):
        return SqlSyntaxError("at end of input", keyword_hint(tokens[-1].text) if tokens[-1].token_type.name == "VAR"
                              else None, position=len(text.rstrip().rstrip(";").rstrip()) + 1)
    return _near(text, tokens[idx])


def _strict(text: str, tokens: list) -> None:
    """Refuse what sqlglot reads but PostgreSQL rejects (see the module docstring), naming the
    token and its position as PostgreSQL does: `syntax error at or near "GROUP"`. `tokens`:
    _tokens(text)."""
    if tokens and tokens[0].token_type.name not in _STARTS and tokens[0].text.upper() not in _STATEMENT_WORDS \
            and (tokens[0].token_type.name == "VAR" or tokens[0].token_type.name in _CLAUSE_AFTER_COMMA):
        raise _near(text, tokens[0])        # 'SELEC ...', 'FROM t SELECT ...': no statement PostgreSQL knows
    if not tokens or tokens[0].token_type.name not in ("SELECT", "WITH", "L_PAREN"):
        return      # not a query: refused as the command it is (COPY, INSERT, ...), whatever its syntax
    for i, tok in enumerate(tokens):
        kind, word = tok.token_type.name, tok.text
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        bad = False
        if kind == "VAR":       # a reserved word read as a name (CAST(...), LEFT(...) are constructs)
            low = word.lower()
            bad = (low in _RESERVED or low in _RESERVED_FUNC) and not (nxt and nxt.token_type.name == "L_PAREN")
            # INTERVAL '1' WEEK: PostgreSQL's interval qualifiers are YEAR ... SECOND (and TO) only
            bad = bad or (i >= 2 and tokens[i - 1].token_type.name == "STRING"
                          and tokens[i - 2].token_type.name == "INTERVAL"
                          and low not in ("year", "month", "day", "hour", "minute", "second"))
        elif kind == "COMMA":
            bad = nxt is None or nxt.token_type.name in _CLAUSE_AFTER_COMMA
            if bad:
                tok = nxt or tok
                word = tok.text if nxt else "end of input"
        elif kind == "EQ" and word == "==" or kind in ("NULLSAFE_EQ", "QUALIFY", "HEX_STRING"):
            bad = True
        elif kind in ("GROUP_BY", "IN") and (nxt is None or nxt.token_type.name in
                                             ("ORDER_BY", "HAVING", "LIMIT", "OFFSET", "SEMICOLON", "R_PAREN")):
            bad, tok, word = True, nxt or tok, nxt.text if nxt else "end of input"
        elif kind == "L_PAREN" and nxt is not None and nxt.token_type.name == "R_PAREN" and i > 0 \
                and tokens[i - 1].token_type.name == "IN":
            bad, tok, word = True, nxt, ")"
        if bad:
            if word == "end of input":
                raise SqlSyntaxError("at end of input", position=len(text.rstrip()) + 1)
            raise _near(text, tok)


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
        return exp.Cast(this=exp.Literal.string(value.isoformat(sep=" ")), to=data_type("TIMESTAMP"))
    if isinstance(value, _dt.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=data_type("DATE"))
    raise QueryRejected(f"a parameter of type {type(value).__name__}",
                        "parameters must be numbers, strings, booleans, dates or None")


# psycopg's paramstyles (%s, %(name)s), read in code only (outside quotes and comments);
# sqlglot reads both as placeholders, which bind_params binds as literals like ? and :name.
_PYFORMAT = re.compile(r"%(?:\(\w+\))?s")


def _uses_pyformat(text: str) -> bool:
    return any(_PYFORMAT.search(text, a, b) for a, b in code_spans(text))


def _percents(text: str) -> str:
    """In a query written with %s / %(name)s, `%%` is one literal percent (as psycopg reads it):
    in code it becomes '% ' (one modulo operator; the offsets of the text are kept)."""
    out = list(text)
    for a, b in code_spans(text):
        i = text.find("%%", a, b)
        while 0 <= i < b - 1:
            out[i + 1] = " "
            i = text.find("%%", i + 2, b)
    return "".join(out)


def _unescape_percents(node: exp.Expression) -> exp.Expression:
    """`%%` inside a string literal of a %s-style query is one percent, as psycopg sends it."""
    if isinstance(node, exp.Literal) and node.is_string and "%%" in node.this:
        return exp.Literal.string(node.this.replace("%%", "%"))
    return node
