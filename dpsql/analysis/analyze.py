"""Resolve a parsed query against the policy and build its QueryPlan.

This is the subset check (it mirrors grammars/dpsql.lark, the documented subset) and
the privacy analysis in one walk. It accepts, on one protected table:

* SELECT items: GROUP BY columns, COUNT(*), COUNT(col), SUM(col), AVG(col) of
  declared numeric columns, and + - * / and unary minus over those and numeric
  literals (post-processing of noisy values);
* WHERE: AND/OR/NOT of comparisons, BETWEEN, IN (literal list), IS [NOT] NULL and
  LIKE/ILIKE (literal pattern) between declared columns and literals of the same
  type, so that no row can make the predicate fail at run time;
* GROUP BY declared columns (public domain, or thresholded partition selection);
* HAVING, ORDER BY, LIMIT, OFFSET, evaluated after the noise, on noisy values.

Everything else is refused with QueryRejected naming the construct and the reason.
Messages name constructs and columns, never data values.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Mapping

from sqlglot import exp

from dpsql.analysis import reconstruction
from dpsql.analysis import sensitivity as sens
from dpsql.analysis.plan import (Expr, GroupKey, Measure, NoiseSpec, Output, QueryPlan,
                                 Selection)
from dpsql.cost import Cost
from dpsql.errors import QueryRejected
from dpsql.policy import ColumnPolicy, Policy, TablePolicy

MAX_PUBLIC_GROUPS = 1_000_000
MAX_PATTERN = 1000
_LITERAL_LIMIT = 1e18
_NUMBER = re.compile(r"\d{1,19}(\.\d{0,18})?|\.\d{1,18}|\d+(\.\d*)?[eE][+-]?\d{1,3}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?")


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class Schema:
    """What the engine says about the tables, read once at connect time."""
    columns: Mapping[str, Mapping[str, str]]          # protected table -> column -> type
    unique_units: frozenset[str] = frozenset()        # protected tables whose unit is PK/UNIQUE
    base_tables: frozenset[str] = frozenset()         # every base table (lower-case)
    views: frozenset[str] = frozenset()
    not_null_units: frozenset[str] = frozenset()      # protected tables whose unit is NOT NULL


@dataclass(frozen=True)
class Settings:
    epsilon: float
    delta: float
    mechanism: str


@dataclass(frozen=True)
class PublicQuery:
    """A query touching no protected table: passed through unchanged, charged nothing."""
    sql: str
    tree: exp.Expression = field(repr=False)


def family(sql_type: str) -> str:
    """Coarse type family of an engine type name: int, float, decimal, text, bool, date, other."""
    t = sql_type.lower()
    if re.match(r"^(u?(tiny|small|big|huge)?int(eger)?|int[248]|smallint|bigint|u?hugeint|integer|serial|bigserial|long|short|byte)\b", t):
        return "int"
    if t.startswith(("decimal", "numeric")):
        return "decimal"
    if t.startswith(("double", "float", "real")):
        return "float"
    if t.startswith(("varchar", "text", "char", "character", "string", "bpchar")):
        return "text"
    if t.startswith(("bool",)):
        return "bool"
    if t.startswith(("date",)) and not t.startswith("datetime"):
        return "date"
    if t.startswith(("timestamp", "datetime")):
        return "timestamp"
    return "other"


_NUMERIC = {"int", "float", "decimal"}


def check_policy_types(policy: Policy, schema: Schema) -> list[str]:
    """Problems between declared bounds/domains and the engine's column types."""
    problems = []
    for t in policy.tables.values():
        cols = schema.columns.get(t.name, {})
        for c in t.columns.values():
            fam = family(cols.get(c.name, "other"))
            if c.bounded and fam not in _NUMERIC:
                problems.append(f"tables.{t.name}.columns.{c.name}: bounds given but the column is not numeric")
            if c.values is not None:
                want_str = fam in ("text",)
                if fam not in ("text", "int"):
                    problems.append(f"tables.{t.name}.columns.{c.name}: a value domain needs a text or integer column")
                elif any(isinstance(v, str) != want_str for v in c.values):
                    problems.append(f"tables.{t.name}.columns.{c.name}: domain values must be "
                                    f"{'strings' if want_str else 'whole numbers'} like the column")
    return problems


# ----------------------------------------------------------------------------- entry

def analyze(tree: exp.Expression, policy: Policy, schema: Schema, settings: Settings,
            dialect: str = "duckdb") -> QueryPlan | PublicQuery:
    """Check the query against the subset and the policy; build its plan."""
    _refuse_statement_kind(tree)
    _refuse_qualified_names(tree)
    protected = _protected_tables(tree, policy)
    if not protected:
        return _public(tree, schema, dialect)
    return _Analysis(tree, policy, schema, settings, dialect).plan()


def _refuse_qualified_names(tree: exp.Expression) -> None:
    """Tables are named plainly: `other_schema.t` or `db.main.t` could read a table the policy and the
    engine's catalog checks never saw (a copy of a protected table in another schema, an attached file)."""
    for t in tree.find_all(exp.Table):
        if t.args.get("db") or t.args.get("catalog"):
            raise QueryRejected("a schema-qualified table name",
                                "dpsql reads tables from the database's default schema only",
                                "use the table's plain name")


def _refuse_statement_kind(tree: exp.Expression) -> None:
    if isinstance(tree, exp.Select):
        return
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        raise QueryRejected("set operations (UNION/INTERSECT/EXCEPT)",
                            "combining result sets would let one person's rows count twice")
    names = {
        exp.Insert: "INSERT", exp.Update: "UPDATE", exp.Delete: "DELETE", exp.Create: "CREATE",
        exp.Drop: "DROP", exp.Alter: "ALTER", exp.Copy: "COPY", exp.Pragma: "PRAGMA",
        exp.Attach: "ATTACH", exp.Detach: "DETACH", exp.Export: "EXPORT", exp.Merge: "MERGE",
        exp.Use: "USE", exp.Set: "SET", exp.Describe: "DESCRIBE", exp.Transaction: "a transaction statement",
        exp.Commit: "COMMIT", exp.Rollback: "ROLLBACK", exp.TruncateTable: "TRUNCATE",
    }
    for cls, name in names.items():
        if isinstance(tree, cls):
            raise QueryRejected(name, "dpsql answers read-only aggregate SELECT queries only")
    if isinstance(tree, exp.Command):
        word = str(tree.this).split()[0].upper() if tree.this else "this command"
        raise QueryRejected(word, "dpsql answers read-only aggregate SELECT queries only")
    raise QueryRejected(type(tree).__name__.upper(), "dpsql answers read-only aggregate SELECT queries only")


def _table_name(t: exp.Table) -> str | None:
    return t.this.name.lower() if isinstance(t.this, exp.Identifier) else None


def _policy_table(policy: Policy, name: str) -> TablePolicy | None:
    """The protected table a reference names: by its policy name or by its `source`."""
    table = policy.table(name)
    if table is not None:
        return table
    for t in policy.tables.values():
        if t.source and t.source.lower().split(".")[-1] == name:
            return t
    return None


def _protected_tables(tree: exp.Expression, policy: Policy) -> set[str]:
    found = set()
    for t in tree.find_all(exp.Table):
        name = _table_name(t)
        if name and _policy_table(policy, name):
            found.add(name)
    return found


# ----------------------------------------------------------------------------- public

_PUBLIC_FUNCS = (
    exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Coalesce, exp.Cast, exp.Abs, exp.Round,
    exp.Lower, exp.Upper, exp.Length, exp.Substring, exp.Concat, exp.Case, exp.If, exp.Floor,
    exp.Ceil, exp.Trim, exp.Nullif, exp.Extract, exp.DateTrunc, exp.CurrentDate,
)


def _public(tree: exp.Expression, schema: Schema, dialect: str) -> PublicQuery:
    """Pass a query on public tables through, if it only reads known base tables.

    Views are refused (dpsql cannot see what a view reads: it might read a protected
    table), and so is every function not on a short list of plain scalar and
    aggregate functions (no file readers, table functions or settings).
    """
    for t in tree.find_all(exp.Table):
        name = _table_name(t)
        if name is None:
            raise QueryRejected("a table function or file reader",
                                "it can read data that the policy does not describe")
        if name in schema.views:
            raise QueryRejected(f"the view {name!r}", "a view may read protected tables; query the tables themselves")
        if name not in schema.base_tables:
            raise QueryRejected(f"the table {name!r}", "no such table")
    for node in tree.find_all(exp.Func):
        if isinstance(node, exp.Anonymous) or not isinstance(node, _PUBLIC_FUNCS + (exp.Binary, exp.Unary, exp.Connector)):
            raise QueryRejected(f"the function {node.sql_name() if not isinstance(node, exp.Anonymous) else node.name}",
                                "only plain scalar and aggregate functions are allowed on public tables")
    for cls, what in ((exp.Into, "SELECT INTO"), (exp.Lock, "locking clauses")):
        if tree.find(cls):
            raise QueryRejected(what, "dpsql answers read-only queries only")
    return PublicQuery(tree.sql(dialect, comments=False), tree)


# ----------------------------------------------------------------------------- private

_ALLOWED_SELECT_ARGS = {"expressions", "from_", "where", "group", "having", "order", "limit", "offset"}
_ARG_NAMES = {
    "with_": ("WITH (common table expressions)", "CTEs are not supported yet; write the query on the table itself"),
    "joins": ("JOIN", "joins can multiply one person's rows beyond the declared contribution limits"),
    "distinct": ("SELECT DISTINCT", "distinct rows reveal which values exist"),
    "qualify": ("QUALIFY", "window filters act on true values"),
    "windows": ("WINDOW", "window functions act on true values"),
    "laterals": ("LATERAL", "lateral joins are not supported"),
    "sample": ("TABLESAMPLE", "sampling is not part of the accepted subset"),
    "into": ("SELECT INTO", "dpsql answers read-only queries only"),
    "locks": ("locking clauses", "dpsql answers read-only queries only"),
    "pivots": ("PIVOT", "pivoting is not part of the accepted subset"),
}

_CMP = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_ARITH = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div"}


def _refuse_expression(node: exp.Expression, where: str) -> QueryRejected:
    """A clear refusal for a construct found in a clause."""
    if isinstance(node, exp.Star):
        return QueryRejected("SELECT *", "it would release individual rows", "select aggregates such as COUNT(*)")
    if isinstance(node, (exp.Min, exp.Max)):
        return QueryRejected(f"{node.sql_name()}()", "a minimum or maximum can be set by one person alone")
    if isinstance(node, exp.Window):
        return QueryRejected("window functions (OVER)", "they compute on true, un-noised values")
    if isinstance(node, (exp.Subquery, exp.Exists)) or (isinstance(node, exp.In) and node.args.get("query")):
        return QueryRejected("subqueries", "a nested query is not bounded by the policy's limits (not supported yet)")
    if isinstance(node, exp.Select):
        return QueryRejected("subqueries", "a nested query is not bounded by the policy's limits (not supported yet)")
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return QueryRejected("CAST", "a cast can fail on some rows, and the error would reveal them")
    if isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)) and where == "WHERE":
        return QueryRejected("division in WHERE", "it can fail on some rows (division by zero)")
    if isinstance(node, (exp.RegexpLike, exp.RegexpExtract, exp.RegexpReplace, exp.RegexpILike)):
        return QueryRejected("regular expressions", "a pattern can fail on some rows or take data-dependent time")
    if isinstance(node, exp.Anonymous) and node.name.lower() == "error":
        return QueryRejected("error()", "it raises an error that depends on the rows")
    if isinstance(node, exp.Placeholder):
        return QueryRejected("an unbound parameter", "pass a value for every placeholder")
    if isinstance(node, exp.Func):
        name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
        return QueryRejected(f"the function {name}() in {where}",
                             "only COUNT, SUM and AVG are released, and WHERE accepts only comparisons "
                             "with literals, which cannot fail on any row")
    if isinstance(node, exp.Binary) and not isinstance(node, exp.Connector) and where == "WHERE":
        return QueryRejected(f"arithmetic ({type(node).__name__.lower()}) in WHERE",
                             "arithmetic on row values can fail (overflow) on some rows")
    return QueryRejected(f"{type(node).__name__} in {where}", "it is not part of the accepted subset")


class _Analysis:
    def __init__(self, tree: exp.Expression, policy: Policy, schema: Schema, settings: Settings,
                 dialect: str):
        self.tree, self.policy, self.schema, self.settings, self.dialect = tree, policy, schema, settings, dialect
        self.measures: dict[tuple, Measure] = {}
        self.keys: list[GroupKey] = []
        self.key_exprs: list[str] = []      # column name of each key
        self.aliases: dict[str, Expr] = {}

    # -- helpers
    def column_type(self, name: str) -> str:
        return self.schema.columns.get(self.table.name, {}).get(name, "other")

    def resolve(self, col: exp.Column, where: str) -> str:
        """The declared column a reference names (or the privacy unit)."""
        if col.args.get("catalog") or (col.args.get("db") and not isinstance(col.args.get("db"), exp.Identifier)):
            raise QueryRejected("a qualified column", "qualify columns by the table or its alias only")
        qual = col.table.lower() if col.table else None
        if qual and qual not in self.qualifiers:
            raise QueryRejected(f"the qualifier {col.table!r}", "it is not the queried table or its alias")
        name = col.name.lower()
        if not name or isinstance(col.this, exp.Star):
            raise _refuse_expression(exp.Star(), where)
        if not self.table.declared(name):
            raise QueryRejected(f"the column {name!r}",
                                f"it is not declared in the policy for table {self.table.name!r}",
                                "ask the data owner to declare it (bounds or a public value domain)")
        return name

    # -- main
    def plan(self) -> QueryPlan:
        sel = self.tree
        assert isinstance(sel, exp.Select)
        for key, value in sel.args.items():
            if value in (None, [], False) or key in _ALLOWED_SELECT_ARGS:
                continue
            construct, reason = _ARG_NAMES.get(key, (key.upper(), "not part of the accepted subset"))
            raise QueryRejected(construct, reason)
        self._scan_forbidden(sel)
        self._from(sel)
        where = self._where(sel.args.get("where"))
        self._group(sel)
        outputs = self._select(sel)
        having = self._post(sel.args["having"].this, "HAVING") if sel.args.get("having") else None
        order = self._order(sel)
        limit = self._count_literal(sel.args.get("limit"), "LIMIT")
        offset = self._count_literal(sel.args.get("offset"), "OFFSET") or 0
        if not self.measures:
            raise QueryRejected("a query without aggregates", "dpsql releases only COUNT, SUM and AVG",
                                "add COUNT(*) or another aggregate")
        return self._finish(outputs, where, having, order, limit, offset)

    def _scan_forbidden(self, sel: exp.Select) -> None:
        for node in sel.walk():
            if node is sel:
                continue
            if isinstance(node, (exp.Window, exp.Subquery, exp.Exists, exp.Select, exp.Union,
                                 exp.Intersect, exp.Except)):
                raise _refuse_expression(node, "the query")
            if isinstance(node, (exp.Min, exp.Max, exp.Star)) and not isinstance(node.parent, exp.Count):
                raise _refuse_expression(node, "the query")
            if isinstance(node, exp.In) and node.args.get("query"):
                raise _refuse_expression(node, "the query")

    def _from(self, sel: exp.Select) -> None:
        src = sel.args.get("from_")
        if src is None:
            raise QueryRejected("a query without FROM", "name the protected table")
        t = src.this
        if not isinstance(t, exp.Table) or not isinstance(t.this, exp.Identifier):
            raise QueryRejected("a table function or derived table in FROM",
                                "the query must read one protected table directly")
        if t.args.get("joins") or sel.args.get("joins"):
            raise QueryRejected("JOIN", _ARG_NAMES["joins"][1])
        for arg in ("laterals", "pivots", "sample", "version", "when", "changes"):
            if t.args.get(arg):
                raise QueryRejected(arg.upper(), "not part of the accepted subset")
        name = t.this.name.lower()
        table = _policy_table(self.policy, name)
        if table is None:  # a public table mixed with a protected one elsewhere
            raise QueryRejected("mixing public and protected tables", "the query must read one protected table")
        alias = t.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            raise QueryRejected("a column list on the table alias", "refer to the table's own column names")
        self.table = table
        self.qualifiers = {name, table.name}
        if t.alias:
            self.qualifiers.add(t.alias.lower())
        if t.args.get("db"):
            self.qualifiers.add(f"{t.args['db'].name.lower()}.{name}")

    # -- WHERE
    def _where(self, where: exp.Where | None) -> exp.Expression | None:
        if where is None:
            return None
        return self._predicate(where.this)

    def _predicate(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Paren):
            return exp.Paren(this=self._predicate(node.this))
        if isinstance(node, (exp.And, exp.Or)):
            return type(node)(this=self._predicate(node.this), expression=self._predicate(node.expression))
        if isinstance(node, exp.Not):
            return exp.Not(this=self._predicate(node.this))
        if isinstance(node, exp.Boolean):
            return node.copy()
        if type(node) in _CMP:
            _only_args(node, {"this", "expression"})
            left, right = node.this, node.expression
            lt, rt = self._operand(left), self._operand(right)
            if not isinstance(left, exp.Column) and not isinstance(right, exp.Column):
                raise QueryRejected("a comparison without a column", "compare a declared column with a literal")
            self._compatible(lt, rt, node)
            if isinstance(left, exp.Column) and isinstance(right, exp.Column):
                cast = self._column_pair_cast(lt, rt)
                return type(node)(this=self._operand_sql(left, cast), expression=self._operand_sql(right, cast))
            ct = lt if isinstance(left, exp.Column) else rt
            return type(node)(this=self._operand_sql(left, ct), expression=self._operand_sql(right, ct))
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                raise QueryRejected("BETWEEN SYMMETRIC", "not part of the accepted subset")
            _only_args(node, {"this", "low", "high"})
            ct = self._column_operand(node.this, "BETWEEN")
            for side in ("low", "high"):
                self._compatible(ct, self._literal_type(node.args[side], "BETWEEN"), node)
            return exp.Between(this=self._operand_sql(node.this), low=self._literal_sql(node.args["low"], ct),
                               high=self._literal_sql(node.args["high"], ct))
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise _refuse_expression(exp.Subquery(), "WHERE")
            _only_args(node, {"this", "expressions"})
            ct = self._column_operand(node.this, "IN")
            items = node.expressions
            if not items:
                raise QueryRejected("an empty IN list", "give at least one value")
            for item in items:
                self._compatible(ct, self._literal_type(item, "IN"), node)
            return exp.In(this=self._operand_sql(node.this), expressions=[self._literal_sql(i, ct) for i in items])
        if isinstance(node, exp.Is):
            _only_args(node, {"this", "expression", "negate"})   # negate: PostgreSQL's IS NOT
            ct = self._column_operand(node.this, "IS")
            if isinstance(node.expression, exp.Boolean):
                if family(ct) != "bool":
                    raise QueryRejected("IS TRUE/FALSE on a non-boolean column",
                                        "converting each row to a boolean could fail on some rows")
            elif not isinstance(node.expression, exp.Null):
                raise QueryRejected("IS with a non-NULL operand", "use IS [NOT] NULL, IS TRUE or IS FALSE")
            test = exp.Is(this=self._operand_sql(node.this), expression=node.expression.copy())
            return exp.Not(this=test) if node.args.get("negate") else test
        if isinstance(node, exp.Escape):
            raise QueryRejected("LIKE ... ESCAPE", "dpsql sets the escape itself: a backslash, as PostgreSQL does",
                                "escape % and _ with a backslash")
        if isinstance(node, (exp.Like, exp.ILike)):
            return self._like(node, "\\")
        if isinstance(node, exp.Column):
            t = self.column_type(self.resolve(node, "WHERE"))
            if family(t) != "bool":
                raise QueryRejected("a non-boolean column as a condition", "compare it with a literal")
            return self._operand_sql(node)
        raise _refuse_expression(node, "WHERE")

    def _like(self, node: exp.Like | exp.ILike, escape: str) -> exp.Expression:
        """LIKE/ILIKE with a literal pattern, sent with an explicit ESCAPE on every engine.

        Why this cannot fail on any row: a pattern is malformed only through its escape
        character (PostgreSQL and DuckDB raise on a pattern ending in it; Spark also on it
        preceding anything but %, _ or itself). The pattern is a literal, so it is checked
        here, once, and refused unless every escape is followed by %, _ or the escape itself;
        such a pattern is well-formed on every engine, whatever row it meets. The escape is
        always written out: PostgreSQL's and Spark's default is a backslash, DuckDB's is
        none, so the same text means the same thing everywhere. (PostgreSQL's planner also
        matches prefix patterns against its statistics, i.e. real values: a well-formed
        pattern cannot fail there either.)"""
        ct = self._column_operand(node.this, "LIKE")
        if family(ct) != "text":
            raise QueryRejected("LIKE on a non-text column", "a cast of each row could fail")
        pat = node.expression
        if not (isinstance(pat, exp.Literal) and pat.is_string) or node.args.get("escape"):
            raise QueryRejected("LIKE with a non-literal pattern", "only a literal pattern cannot fail on some rows")
        _only_args(node, {"this", "expression", "negate"})
        text = pat.this
        if len(text) > MAX_PATTERN:
            raise QueryRejected(f"a LIKE pattern longer than {MAX_PATTERN} characters", "patterns are kept short")
        i = 0
        while i < len(text):
            if text[i] == escape:
                if i + 1 >= len(text) or text[i + 1] not in ("%", "_", escape):
                    raise QueryRejected("a LIKE pattern with a dangling escape",
                                        f"the escape {escape!r} must be followed by %, _ or itself "
                                        "(the engine would fail on some rows)",
                                        f"write {escape}{escape} for a literal {escape}")
                i += 2
            else:
                i += 1
        like = type(node)(this=self._operand_sql(node.this), expression=pat.copy())
        out = exp.Escape(this=like, expression=exp.Literal.string(escape))
        return exp.Not(this=out) if node.args.get("negate") else out

    def _operand(self, node: exp.Expression) -> str | None:
        """Type of a comparison operand: a column's type, or a literal's pseudo-type."""
        if isinstance(node, exp.Column):
            return self.column_type(self.resolve(node, "WHERE"))
        return self._literal_type(node, "WHERE")

    def _column_operand(self, node: exp.Expression, what: str) -> str:
        if not isinstance(node, exp.Column):
            raise QueryRejected(f"{what} on an expression", f"the left side of {what} must be a declared column")
        return self.column_type(self.resolve(node, "WHERE"))

    def _operand_sql(self, node: exp.Expression, column_type: str | None = None) -> exp.Expression:
        """A comparison operand for the rewrite: columns unqualified, literals typed safely.

        For a column, column_type is a cast from _column_pair_cast ("cast:DOUBLE" or
        "cast:NUMERIC", two numeric columns of different types) or None. For a literal, it is the type of the column compared with it."""
        if isinstance(node, exp.Column):
            col = exp.column(node.name.lower())
            if column_type in ("cast:DOUBLE", "cast:NUMERIC") and family(self.column_type(node.name.lower())) in _NUMERIC:
                return exp.Cast(this=col, to=exp.DataType.build(column_type[5:]))
            return col
        return self._literal_sql(node, column_type)

    def _column_pair_cast(self, a: str, b: str) -> str | None:
        """How two columns are compared so that no value of either type can make it fail.

        Identical types: as they are (a comparison of two values of one type never raises on
        any engine; NaN, infinities and NULL have defined orders). Two text types: as they are
        (the engines widen CHAR/VARCHAR to text, which cannot fail). Two numeric types: each
        cast to a type every numeric value converts to without error: DOUBLE on DuckDB and
        Spark (HUGEINT, UBIGINT and DECIMAL(38) are far below DOUBLE's range); NUMERIC on
        PostgreSQL, whose NUMERIC holds values beyond DOUBLE's range (a cast of 1e400 to
        float8 raises) while every integer and float8 value (NaN, Infinity) converts to it.
        Anything else, notably DATE against TIMESTAMP or TIMESTAMP against TIMESTAMP_NS, is
        refused: the engine would convert every value of one column, and 9999-12-31 does not
        fit a TIMESTAMP_NS, nor DuckDB's year 5881580 a TIMESTAMP."""
        if " ".join(a.lower().split()) == " ".join(b.lower().split()):
            return None
        fa, fb = family(a), family(b)
        if fa == fb == "text":
            return None
        if fa in _NUMERIC and fb in _NUMERIC:
            return "cast:NUMERIC" if self.dialect == "postgres" else "cast:DOUBLE"
        raise QueryRejected(f"comparing a {a} column with a {b} column",
                            "the engine would convert every value of one of them, which fails on some values",
                            "compare columns of the same type, or each column with a literal")

    def _literal_sql(self, node: exp.Expression, column_type: str | None) -> exp.Expression:
        """A literal compared with a column of column_type, written so that the comparison
        cannot fail on any row.

        Numbers. DuckDB and Spark: a numeric literal compared with anything but an integer
        column, and a fractional one always, becomes a DOUBLE, so the engine casts the column
        to DOUBLE (total for every numeric type there) instead of to a DECIMAL wide enough for
        the literal, which can overflow on some rows. PostgreSQL: the literal stays NUMERIC,
        so integers and NUMERIC compare exactly and float columns take the literal's (constant)
        conversion; a cast of the column to DOUBLE would fail for a NUMERIC beyond 1e308.
        Integral literals are below 1e18 (_literal_type), inside every engine's BIGINT.

        Dates and times: a DATE literal may meet a DATE or TIMESTAMP column (the constant is
        converted, never the column); a TIMESTAMP literal only a TIMESTAMP column (_compatible).
        A column of nanosecond precision holds only 1677-09-21..2262-04-11: a literal outside
        it is refused here (the engine would fail converting it, whether or not rows exist)."""
        lit = node.this if isinstance(node, exp.Neg) else node
        if isinstance(lit, exp.Literal) and not lit.is_string:
            if self.dialect == "postgres":
                return node.copy()
            integral = re.fullmatch(r"\d+", lit.this) is not None
            if not (integral and column_type is not None and family(column_type) == "int"):
                value = -float(lit.this) if isinstance(node, exp.Neg) else float(lit.this)
                return exp.Cast(this=exp.Literal.number(repr(value)), to=exp.DataType.build("DOUBLE"))
        if (isinstance(node, exp.Cast) and column_type is not None and family(column_type) == "timestamp"
                and _nanosecond(column_type) and isinstance(node.this, exp.Literal)):
            year = int(node.this.this[:4])
            if not 1678 <= year <= 2261:
                raise QueryRejected(f"a date or time literal outside {column_type}'s range",
                                    "the column holds only 1678-2261 at nanosecond precision")
        return node.copy()

    def _literal_type(self, node: exp.Expression, where: str) -> str:
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
            node = node.this
        if isinstance(node, exp.Null):
            return "null"
        if isinstance(node, exp.Boolean):
            return "lit:bool"
        if isinstance(node, exp.Literal):
            if node.is_string:
                return "lit:text"
            if not _NUMBER.fullmatch(node.this):
                raise QueryRejected("a numeric literal with more than 19 integer or 18 decimal digits",
                                    "comparing it could make the engine overflow on some rows")
            v = float(node.this)
            if not math.isfinite(v) or abs(v) > _LITERAL_LIMIT:
                raise QueryRejected("a numeric literal beyond 1e18", "it could overflow the column's type")
            return "lit:num"
        if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
            target = node.to.this
            text = node.this.this
            try:
                if target == exp.DataType.Type.DATE and _DATE.fullmatch(text):
                    _dt.date.fromisoformat(text)
                    return "lit:date"
                if target in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME, exp.DataType.Type.TIMESTAMPNTZ,
                              exp.DataType.Type.TIMESTAMPTZ) and _TIMESTAMP.fullmatch(text):
                    _dt.datetime.fromisoformat(text)
                    return "lit:timestamp"
            except ValueError:
                pass
            raise QueryRejected("a malformed date literal",
                                "write dates as DATE 'YYYY-MM-DD' and timestamps as TIMESTAMP 'YYYY-MM-DD HH:MM:SS'")
        raise _refuse_expression(node, where)

    def _compatible(self, a: str | None, b: str | None, node: exp.Expression) -> None:
        """Refuse comparisons between operands whose types the engine would reconcile by a
        conversion that can fail on some values (see _literal_sql and _column_pair_cast)."""
        fa = "null" if a == "null" else (a[4:] if a and a.startswith("lit:") else family(a or "other"))
        fb = "null" if b == "null" else (b[4:] if b and b.startswith("lit:") else family(b or "other"))
        groups = {"int": "num", "float": "num", "decimal": "num", "num": "num", "text": "text",
                  "bool": "bool", "date": "date", "timestamp": "timestamp", "null": "null"}
        ga, gb = groups.get(fa, "other"), groups.get(fb, "other")
        if "other" in (ga, gb):
            raise QueryRejected("a comparison on a column of an unsupported type",
                                "only numeric, text, boolean, date and timestamp columns can be filtered")
        if ga != gb and "null" not in (ga, gb):
            column_is_a = not (a or "").startswith("lit:")
            col_group, lit_kind = (ga, b) if column_is_a else (gb, a)
            if not (col_group == "timestamp" and lit_kind == "lit:date"):
                hint = ("compare a DATE column with a DATE literal" if col_group == "date"
                        else "compare values of the same type")
                raise QueryRejected(f"comparing {ga} with {gb}", "the implicit cast could fail on some rows", hint)

    # -- GROUP BY
    def _group(self, sel: exp.Select) -> None:
        group = sel.args.get("group")
        if not group:
            return
        for arg in ("rollup", "cube", "grouping_sets", "totals", "all"):
            if group.args.get(arg):
                raise QueryRejected(f"GROUP BY {arg.upper()}", "grouping sets are not supported yet")
        if not group.expressions:
            raise QueryRejected("an empty GROUP BY", "name the columns to group by")
        for node in group.expressions:
            if isinstance(node, exp.Literal) and not node.is_string:
                if not node.this.isdigit():
                    raise QueryRejected("GROUP BY a constant", "group by declared columns or their positions")
                pos = int(node.this)
                items = sel.expressions
                if not 1 <= pos <= len(items):
                    raise QueryRejected("GROUP BY position", "it does not name a SELECT item")
                node = items[pos - 1].unalias() if isinstance(items[pos - 1], exp.Alias) else items[pos - 1]
            if not isinstance(node, exp.Column):
                raise QueryRejected("GROUP BY an expression", "group by declared columns only")
            name = self.resolve(node, "GROUP BY")
            if name == self.table.privacy_unit:
                raise QueryRejected("GROUP BY the privacy unit", "every group would hold one person")
            if name in self.key_exprs:
                continue
            col = self.table.column(name)
            if family(self.column_type(name)) == "other":
                raise QueryRejected(f"GROUP BY {name}", "the column's type is not supported for grouping")
            self.keys.append(GroupKey(f"_g{len(self.keys)}", name, col.values if col else None))
            self.key_exprs.append(name)

    # -- SELECT
    def _select(self, sel: exp.Select) -> list[Output]:
        outputs = []
        for i, item in enumerate(sel.expressions):
            alias = item.alias if isinstance(item, exp.Alias) else None
            node = item.unalias() if isinstance(item, exp.Alias) else item
            expr = self._post(node, "SELECT")
            noisy = _has_noise(expr)
            if not noisy and expr[0] != "key":
                raise QueryRejected("a constant in SELECT", "select group columns and aggregates")
            name = alias or (node.name.lower() if isinstance(node, exp.Column) else _output_name(node, i))
            outputs.append(Output(name, expr, noisy, node.sql(self.dialect)))
            if alias:
                self.aliases[alias.lower()] = expr
        return outputs

    def _post(self, node: exp.Expression, where: str) -> Expr:
        """Compile a post-processing expression over noisy aggregates and keys."""
        if isinstance(node, exp.Paren):
            return self._post(node.this, where)
        if isinstance(node, exp.Alias):
            raise QueryRejected("an alias inside an expression", "alias whole SELECT items only")
        if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
            return self._aggregate(node)
        if isinstance(node, exp.Column):
            if not node.table and node.name.lower() in self.aliases and where != "SELECT":
                return self.aliases[node.name.lower()]
            name = self.resolve(node, where)
            if name not in self.key_exprs:
                raise QueryRejected(f"the bare column {name!r} in {where}",
                                    "only GROUP BY columns and aggregates can be released",
                                    f"add {name} to GROUP BY or aggregate it")
            return ("key", self.key_exprs.index(name))
        if isinstance(node, exp.Literal):
            if node.is_string:
                return ("lit", node.this)
            if not _NUMBER.fullmatch(node.this):
                raise QueryRejected("a malformed number", "write numbers in plain decimal form")
            return ("lit", float(node.this))
        if isinstance(node, exp.Boolean):
            return ("lit", bool(node.this))
        if isinstance(node, exp.Null):
            return ("lit", None)
        if isinstance(node, exp.Neg):
            return ("neg", self._numeric(self._post(node.this, where)))
        if type(node) in _ARITH:
            return (_ARITH[type(node)], self._numeric(self._post(node.this, where)),
                    self._numeric(self._post(node.expression, where)))
        if where != "SELECT":
            if type(node) in _CMP:
                return ("cmp", _CMP[type(node)], self._post(node.this, where), self._post(node.expression, where))
            if isinstance(node, exp.And):
                return ("and", self._post(node.this, where), self._post(node.expression, where))
            if isinstance(node, exp.Or):
                return ("or", self._post(node.this, where), self._post(node.expression, where))
            if isinstance(node, exp.Not):
                return ("not", self._post(node.this, where))
            if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
                return ("isnull", self._post(node.this, where), bool(node.args.get("negate")))
            if isinstance(node, exp.Between):
                v = self._post(node.this, where)
                return ("and", ("cmp", ">=", v, self._post(node.args["low"], where)),
                        ("cmp", "<=", v, self._post(node.args["high"], where)))
        raise _refuse_expression(node, where)

    @staticmethod
    def _numeric(expr: Expr) -> Expr:
        """Arithmetic takes noisy aggregates and numeric literals only."""
        if expr[0] == "key":
            raise QueryRejected("arithmetic on a GROUP BY column", "arithmetic applies to aggregates and numbers")
        if expr[0] == "lit" and (expr[1] is None or isinstance(expr[1], (str, bool))):
            raise QueryRejected("arithmetic on a non-number", "arithmetic applies to aggregates and numbers")
        return expr

    def _aggregate(self, node: exp.Expression) -> Expr:
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise QueryRejected(f"{node.sql_name()}(DISTINCT ...)", "distinct counting is not supported yet")
        if node.args.get("expressions") or (isinstance(node, exp.Count) and node.expressions):
            raise QueryRejected(f"{node.sql_name()} with several arguments", "not part of the accepted subset")
        if isinstance(node, exp.Count):
            if isinstance(arg, exp.Star):
                return ("ref", self._measure("count", None, False, "COUNT(*)").name)
            if not isinstance(arg, exp.Column):
                raise QueryRejected("COUNT of an expression", "count rows, or a declared column")
            name = self.resolve(arg, "COUNT")
            return ("ref", self._measure("count", name, False, f"COUNT({name})").name)
        fname = node.sql_name()
        if not isinstance(arg, exp.Column):
            raise QueryRejected(f"{fname} of an expression", f"{fname} takes a declared numeric column")
        name = self.resolve(arg, fname)
        col = self.table.column(name)
        if col is None or not col.bounded:
            raise QueryRejected(f"{fname}({name})", "the column has no declared bounds, so one person's "
                                "influence on the result is unbounded",
                                "ask the data owner to declare lower and upper bounds")
        if family(self.column_type(name)) not in _NUMERIC:
            raise QueryRejected(f"{fname}({name})", "the column is not numeric")
        if isinstance(node, exp.Sum):
            return ("ref", self._measure("sum", name, False, f"SUM({name})").name)
        s = self._measure("sum", name, True, f"AVG({name}) numerator")
        c = self._measure("count", name, False, f"COUNT({name})")
        return ("avg", s.name, c.name, float(s.lo), float(s.hi))

    def _measure(self, kind: str, column: str | None, centered: bool, label: str) -> Measure:
        key = (kind, column, centered)
        if key not in self.measures:
            name = f"_v{len(self.measures)}"
            if kind == "sum":
                col = self.table.column(column)
                lo, hi, scale = _exact_bounds(col, self.column_type(column))
                m = Measure(name, kind, column, centered, lo, hi, scale, label)
            else:
                m = Measure(name, kind, column, label=label)
            self.measures[key] = m
        return self.measures[key]

    # -- ORDER BY, LIMIT
    def _order(self, sel: exp.Select) -> tuple:
        order = sel.args.get("order")
        if not order:
            return ()
        out = []
        for o in order.expressions:
            node = o.this
            if isinstance(node, exp.Literal) and not node.is_string:
                if not node.this.isdigit():
                    raise QueryRejected("ORDER BY a constant", "order by outputs or their positions")
                pos = int(node.this)
                if not 1 <= pos <= len(sel.expressions):
                    raise QueryRejected("ORDER BY position", "it does not name a SELECT item")
                item = sel.expressions[pos - 1]
                expr = self._post(item.unalias() if isinstance(item, exp.Alias) else item, "ORDER BY")
            else:
                expr = self._post(node, "ORDER BY")
            desc = bool(o.args.get("desc"))
            nulls_first = o.args.get("nulls_first")
            out.append((expr, desc, bool(nulls_first) if nulls_first is not None else desc))
        return tuple(out)

    def _count_literal(self, node: exp.Expression | None, what: str) -> int | None:
        if node is None:
            return None
        if node.args.get("limit_options") or node.args.get("expressions"):
            raise QueryRejected(f"{what} with PERCENT, WITH TIES or BY", f"{what} takes a whole number of rows")
        value = node.args.get("expression") or node.this
        if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
            raise QueryRejected(f"{what} with a non-literal", f"{what} takes a whole number")
        return int(value.this)

    # -- finish: split the budget, sensitivities, selection
    def _finish(self, outputs, where, having, order, limit, offset) -> QueryPlan:
        table, s = self.table, self.settings
        bounded = table.name not in self.schema.unique_units
        rows = table.max_rows_per_unit if bounded else 1
        public = all(k.domain is not None for k in self.keys)
        domain_size = math.prod(len(k.domain) for k in self.keys) if public else None
        if domain_size is not None and domain_size > MAX_PUBLIC_GROUPS:
            raise QueryRejected("this GROUP BY", f"its public domains give more than {MAX_PUBLIC_GROUPS} groups")
        most = self.policy.limits.max_released_rows
        if domain_size is not None and domain_size > most and (limit is None or limit > most):
            raise QueryRejected("this GROUP BY", f"its public domains give {domain_size} groups, more than the "
                                f"{most} rows one query may release (the policy's max_released_rows)",
                                f"add LIMIT {most} or fewer, or group by fewer columns")
        if not self.keys or not bounded:
            l0 = 1
        else:
            l0 = table.max_groups_per_unit
            if domain_size is not None:
                l0 = min(l0, domain_size)
        group_choice = bounded and bool(self.keys) and (domain_size is None or table.max_groups_per_unit < domain_size)
        measures = tuple(self.measures.values())
        units_only = bounded and rows == 1 and all(m.kind == "count" and m.column is None for m in measures)
        needs_selection = bool(self.keys) and not public
        parts = len(measures) + (1 if needs_selection else 0)
        eps_part = s.epsilon / parts
        gaussian = s.mechanism != "laplace"
        delta_parts = (len(measures) if gaussian else 0) + (1 if needs_selection else 0)
        if delta_parts and s.delta <= 0:
            raise QueryRejected("this query with delta = 0",
                                "partition selection and Gaussian noise need a positive delta",
                                "SET dpsql.delta to a small positive value")
        delta_part = s.delta / delta_parts if delta_parts else 0.0
        noise = []
        for m in measures:
            linf = sens.per_group_bound(m, rows)
            if linf == 0:
                linf = Fraction(1, 10**6)   # a measure that cannot vary; keep the mechanisms well-defined
            noise.append(NoiseSpec(m.name, s.mechanism, sens.l1(linf, l0), sens.l2(linf, l0), float(linf),
                                   eps_part, delta_part if gaussian else 0.0))
        selection = sel_noise = None
        if needs_selection:
            thr = sens.selection_threshold(eps_part, delta_part, l0)
            selection = Selection(eps_part, delta_part, l0, thr)
            sel_noise = NoiseSpec("_units", "laplace", float(l0), math.sqrt(l0), 1.0, eps_part, 0.0)
        cost = Cost(s.epsilon, s.delta if delta_parts else 0.0)
        return QueryPlan(
            text=self.tree.sql(self.dialect, comments=False), table=table, table_ref=table.source or table.name,
            bounded=bounded, l0=l0, keys=tuple(self.keys), measures=measures, noise=tuple(noise),
            selection=selection, selection_noise=sel_noise, outputs=tuple(outputs), where=where,
            having=having, order=order, limit=limit, offset=offset, cost=cost, mechanism=s.mechanism,
            group_choice=group_choice, domain_size=domain_size, units_only=units_only,
            unit_not_null=table.name in self.schema.not_null_units,
            subset=reconstruction.classify(where, table))


def _only_args(node: exp.Expression, allowed: set[str]) -> None:
    """Refuse a predicate carrying a modifier the rewrite would not reproduce
    (dropping one silently would change the answer, e.g. NOT LIKE into LIKE)."""
    extra = [k for k, v in node.args.items() if v not in (None, False, []) and k not in allowed]
    if extra:
        raise QueryRejected(f"{type(node).__name__.upper()} with {extra[0].upper()}",
                            "this form of the predicate is not part of the accepted subset")


def _exact_bounds(col: ColumnPolicy, sql_type: str) -> tuple[Fraction, Fraction, int]:
    """Per-row clamp bounds and the integer scale the engine sums at.

    Integer columns with whole bounds sum as themselves (scale 1). Anything else is
    clamped in its own type, multiplied by scale = 10^s and cast to BIGINT (rounding),
    then clamped again to the bounds rounded outward to that grid: the cast of a large
    double need not round exactly, the second clamp makes the bounds hold whatever it
    does. Those outward bounds are what the sensitivity uses. |bound| * scale stays
    below 10^17, so the cast cannot overflow.
    """
    lo, hi = Fraction(col.lower), Fraction(col.upper)
    if family(sql_type) == "int" and col.is_integral:
        return lo, hi, 1
    digits = len(str(int(max(abs(lo), abs(hi))))) + 1
    scale = 10 ** max(0, min(6, 17 - digits))
    lo_out = Fraction(math.floor(lo * scale), scale)
    hi_out = Fraction(math.ceil(hi * scale), scale)
    return lo_out, hi_out, scale


def _nanosecond(sql_type: str) -> bool:
    """A timestamp type of nanosecond precision (DuckDB's TIMESTAMP_NS; TIMESTAMP(9) elsewhere)."""
    t = sql_type.lower().replace(" ", "")
    return t.startswith("timestamp_ns") or t.startswith("timestamp(9)")


def _has_noise(expr: Expr) -> bool:
    if expr[0] in ("ref", "avg"):
        return True
    return any(isinstance(a, tuple) and _has_noise(a) for a in expr[1:])


def _output_name(node: exp.Expression, i: int) -> str:
    if isinstance(node, (exp.Count, exp.Sum, exp.Avg)):
        return node.sql_name().lower()
    return f"col{i + 1}"
