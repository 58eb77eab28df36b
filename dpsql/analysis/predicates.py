"""Row predicates (WHERE, join conditions) that cannot fail on any row.

An error that depends on one row is an exact, noise-free answer about that row. So every
predicate dpsql sends to an engine is total on every value its columns' types can hold (NULL,
NaN, +-Infinity, -0.0, the type's extremes, 'infinity' and BC dates, any string): comparisons,
BETWEEN, IN lists, IS [NOT] NULL / TRUE / FALSE and LIKE/ILIKE between declared columns and
literals of the same type, or two columns compared at one type or through a cast that cannot
fail on that engine. Each admitted form carries its argument beside the code that admits it.
Nothing else is admitted; refusals name the construct and the reason, never a data value.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from fractions import Fraction
from collections.abc import Callable

from sqlglot import exp

from dpsql.analysis.relation import ColRef, ColumnInfo
from dpsql.dialects import EngineDialect
from dpsql.errors import QueryRejected
from dpsql.sqltext import collation

MAX_PATTERN = 1000
LITERAL_LIMIT = 1e18
NUMBER = re.compile(r"\d{1,19}(\.\d{0,18})?|\.\d{1,18}|\d+(\.\d*)?[eE][+-]?\d{1,3}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,6})?")

_TIMESTAMPS = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ,
               exp.DataType.Type.DATETIME)
DATE_FUNCTIONS = (exp.TimestampTrunc, exp.DateTrunc, exp.Extract)
CMP = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
NUMERIC = {"int", "float", "decimal"}


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


def one_collation(seen: dict[str, str], info) -> None:
    """Note a column's explicit collation (info: a ColumnInfo); refuse a second, different one.

    PostgreSQL cannot compare, sort, hash or combine text of two different implicit collations,
    and it says so ("could not determine which collation to use") only when rows reach the
    expression: the same query would fail on a table with rows and succeed on an empty one, or on
    a join that matches no row, an error that depends on the data. So the columns one
    expression context reads carry at most one explicit collation (any number of columns with the
    database's default collation may meet it: the explicit one wins, without error). An
    expression context is one GROUP BY or SELECT expression, one WHERE (all of it: `a = 'x' AND
    b = 'y'` is refused too, though the two never meet), one FILTER, one join's ON."""
    c = collation(info.sql_type)
    if c is None:
        return
    seen.setdefault(c, info.name)
    if len(seen) > 1:
        (c1, n1), (c2, n2) = list(seen.items())[:2]
        raise QueryRejected(f"reading {n1!r} (collation {c1}) and {n2!r} (collation {c2}) together",
                            "PostgreSQL cannot compare or combine text of two collations, and it reports "
                            "that only when rows meet, so the error would depend on the data",
                            "ask the data owner for a view that gives these columns one collation")


def tracking(resolve):
    """resolve, refusing a second explicit collation among the columns it names (one_collation)."""
    seen: dict[str, str] = {}

    def tracked(col, where):
        ref, info = resolve(col, where)
        one_collation(seen, info)
        return ref, info
    return tracked


def nanosecond(sql_type: str) -> bool:
    """A timestamp type of nanosecond precision (DuckDB's TIMESTAMP_NS; TIMESTAMP(9) elsewhere)."""
    t = sql_type.lower().replace(" ", "")
    return t.startswith("timestamp_ns") or t.startswith("timestamp(9)")


def zoned(sql_type: str) -> bool:
    """A timestamp type with a time zone (PostgreSQL's timestamptz, DuckDB's TIMESTAMP WITH TIME
    ZONE): its dates and hours are those of the session's time zone."""
    t = " ".join(sql_type.lower().split())
    return t.startswith("timestamptz") or ("with time zone" in t and "without time zone" not in t)


def date_bounds_problem(column, sql_type: str) -> str | None:
    """Why a column's declared date bounds (ColumnPolicy.span) do not fit its engine type, or None.
    DATE: dates only. TIMESTAMP without time zone: dates or local date-times (a nanosecond one only
    within the years it holds, 1678-2261). Zoned timestamps take none: clamping and date functions
    there would depend on the session's time zone."""
    fam = family(sql_type)
    if fam == "date":
        return "a DATE column's bounds are dates (2023-01-01), not date-times" if column.timed else None
    if fam != "timestamp":
        return "date bounds given but the column is not a DATE or TIMESTAMP"
    if zoned(sql_type):
        return ("bounds of a TIMESTAMP WITH TIME ZONE column are not supported: its dates and hours depend on "
                "the session's time zone")
    lo, hi = column.time_span
    if nanosecond(sql_type) and not (1678 <= lo.year and hi.year <= 2261):
        return "a nanosecond TIMESTAMP holds only the years 1678-2261: give bounds within them"
    return None


def _unparen(node: exp.Expression) -> exp.Expression:
    """A comparison operand without its parentheses when they hold a date function."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    return inner if isinstance(inner, DATE_FUNCTIONS) else node


def same_type(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def only_args(node: exp.Expression, allowed: set[str]) -> None:
    """Refuse a predicate carrying a modifier the rewrite would not reproduce
    (dropping one silently would change the answer, e.g. NOT LIKE into LIKE)."""
    extra = [k for k, v in node.args.items() if v not in (None, False, []) and k not in allowed]
    if extra:
        raise QueryRejected(f"{type(node).__name__.upper()} with {extra[0].upper()}",
                            "this form of the predicate is not part of the accepted subset")


def refuse_expression(node: exp.Expression, where: str) -> QueryRejected:
    """A clear refusal for a construct found in a clause."""
    if isinstance(node, exp.Star):
        return QueryRejected("SELECT *", "it would release individual rows", "select aggregates such as COUNT(*)")
    if isinstance(node, (exp.Min, exp.Max)):
        return QueryRejected(f"{node.sql_name()}()", "a minimum or maximum can be set by one person alone")
    if isinstance(node, exp.Window):
        return QueryRejected("window functions (OVER)", "they compute on true, un-noised values")
    if isinstance(node, (exp.Subquery, exp.Select)) and not isinstance(node.parent, (exp.In, exp.Exists)):
        # x > (SELECT AVG(x) ...): the inner value is an exact aggregate of the data, and the
        # outer query would use it unnoised
        return QueryRejected(f"a scalar subquery in {where}", "its value would be an exact, un-noised aggregate "
                             "of the data", "ask it as a query of its own first (a noisy answer, charged), then "
                             "write that number in its place: WHERE c_acctbal > 4500.12")
    if isinstance(node, (exp.Subquery, exp.Exists, exp.Select)) or (isinstance(node, exp.In) and node.args.get("query")):
        return QueryRejected(f"a subquery in {where}", "only semi-joins are supported there: on the privacy unit "
                             "(unit IN (SELECT unit ...), EXISTS with unit equality) or through a link key "
                             "(EXISTS (SELECT 1 FROM lineitem WHERE l_orderkey = o_orderkey ...)), and FROM subqueries")
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return QueryRejected("CAST", "a cast can fail on some rows, and the error would reveal them")
    if isinstance(node, (exp.Div, exp.IntDiv, exp.Mod)) and where == "WHERE":
        return QueryRejected("division in WHERE", "it can fail on some rows (division by zero)")
    if isinstance(node, (exp.RegexpLike, exp.RegexpExtract, exp.RegexpReplace, exp.RegexpILike)) or (
            isinstance(node, exp.Anonymous) and node.name.lower().startswith(("regexp", "similar"))):
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


class Predicates:
    """Checks a row predicate and writes it for the rewrite (columns qualified, literals typed).

    resolve(column, clause) -> (ColRef, ColumnInfo) names the column a reference means;
    subquery(node, negated) handles IN (SELECT ...) and EXISTS (a semi-join), or refuses."""

    def __init__(self, resolve: Callable[[exp.Column, str], tuple[ColRef, ColumnInfo]], dialect: EngineDialect,
                 subquery: Callable[[exp.Expression], exp.Expression] | None = None):
        self.resolve, self.dialect, self.subquery = resolve, dialect, subquery

    def check(self, node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Paren):
            return exp.Paren(this=self.check(node.this))
        if isinstance(node, (exp.And, exp.Or)):
            return type(node)(this=self.check(node.this), expression=self.check(node.expression))
        if isinstance(node, exp.Not):
            return exp.Not(this=self.check(node.this))
        if isinstance(node, exp.Boolean):
            return node.copy()
        if isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query")):
            if self.subquery is None:
                raise refuse_expression(node, "WHERE")
            return self.subquery(node)
        if type(node) in CMP:
            only_args(node, {"this", "expression"})
            left, right = _unparen(node.this), _unparen(node.expression)
            lt, rt = self._operand(left), self._operand(right)
            if self._is_column(left) and rt == "lit:text":
                right = self._date_text(right, lt)
                rt = self._operand(right)
            elif self._is_column(right) and lt == "lit:text":
                left = self._date_text(left, rt)
                lt = self._operand(left)
            if not self._is_column(left) and not self._is_column(right):
                raise QueryRejected("a comparison without a column", "compare a declared column with a literal")
            self._compatible(lt, rt)
            if self._is_column(left) and self._is_column(right):
                if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                    raise QueryRejected("comparing a date function with a column",
                                        "compare date_trunc or EXTRACT of a column with a literal")
                cast = self.column_pair_cast(lt, rt)
                return type(node)(this=self._operand_sql(left, cast), expression=self._operand_sql(right, cast))
            ct = lt if self._is_column(left) else rt
            return type(node)(this=self._operand_sql(left, ct), expression=self._operand_sql(right, ct))
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                raise QueryRejected("BETWEEN SYMMETRIC", "not part of the accepted subset")
            only_args(node, {"this", "low", "high"})
            ct = self._column_operand(node.this, "BETWEEN")
            low, high = (self._date_text(node.args[side], ct) for side in ("low", "high"))
            for side in (low, high):
                self._compatible(ct, self.literal_type(side, "BETWEEN"))
            return exp.Between(this=self._operand_sql(_unparen(node.this)), low=self.literal_sql(low, ct),
                               high=self.literal_sql(high, ct))
        if isinstance(node, exp.In):
            if node.args.get("unnest") or node.args.get("field"):
                raise refuse_expression(exp.Subquery(), "WHERE")
            only_args(node, {"this", "expressions"})
            ct = self._column_operand(node.this, "IN")
            items = [self._date_text(i, ct) for i in node.expressions]
            if not items:
                raise QueryRejected("an empty IN list", "give at least one value")
            for item in items:
                self._compatible(ct, self.literal_type(item, "IN"))
            return exp.In(this=self._operand_sql(_unparen(node.this)),
                          expressions=[self.literal_sql(i, ct) for i in items])
        if isinstance(node, exp.Is):
            only_args(node, {"this", "expression", "negate"})   # negate: PostgreSQL's IS NOT
            ct = self._column_operand(node.this, "IS")
            if isinstance(node.expression, exp.Boolean):
                if family(ct) != "bool":
                    raise QueryRejected("IS TRUE/FALSE on a non-boolean column",
                                        "converting each row to a boolean could fail on some rows")
            elif not isinstance(node.expression, exp.Null):
                raise QueryRejected("IS with a non-NULL operand", "use IS [NOT] NULL, IS TRUE or IS FALSE")
            test = exp.Is(this=self._operand_sql(_unparen(node.this)), expression=node.expression.copy())
            return exp.Not(this=test) if node.args.get("negate") else test
        if isinstance(node, exp.Escape):
            raise QueryRejected("LIKE ... ESCAPE", "dpsql sets the escape itself: a backslash, as PostgreSQL does",
                                "escape % and _ with a backslash")
        if isinstance(node, (exp.Like, exp.ILike)):
            return self._like(node, "\\")
        if isinstance(node, exp.Column):
            _, info = self.resolve(node, "WHERE")
            if family(info.sql_type) != "bool":
                raise QueryRejected("a non-boolean column as a condition", "compare it with a literal")
            return self._operand_sql(node)
        raise refuse_expression(node, "WHERE")

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
        only_args(node, {"this", "expression", "negate"})
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

    # -- operands
    @staticmethod
    def _date_text(node: exp.Expression, column_type: str) -> exp.Expression:
        """A string literal compared with a DATE (or TIMESTAMP) column, as PostgreSQL reads it: a
        date constant. Only a text that is a valid date written YYYY-MM-DD is admitted, checked
        here in Python, and it becomes a DATE literal (the constant is converted, never the
        column: no row can make the comparison fail); any other text is refused with the fix."""
        if not (isinstance(node, exp.Literal) and node.is_string) or family(column_type) not in ("date", "timestamp"):
            return node
        text = node.this
        if _DATE.fullmatch(text):
            try:
                _dt.date.fromisoformat(text)
                return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("DATE"))
            except ValueError:
                pass
        kind = "DATE" if family(column_type) == "date" else "TIMESTAMP"
        raise QueryRejected(f"comparing a {kind} column with a string that is not a date",
                            "converting the string could fail, and dpsql converts only valid dates",
                            "write the date as DATE 'YYYY-MM-DD', e.g. DATE '2024-01-31'"
                            + (", or a time as TIMESTAMP 'YYYY-MM-DD HH:MM:SS'" if kind == "TIMESTAMP" else ""))

    @staticmethod
    def _is_column(node: exp.Expression) -> bool:
        """A column, or a date function of one (date_trunc, EXTRACT/date_part): what a literal is
        compared with."""
        return isinstance(node, (exp.Column, *DATE_FUNCTIONS))

    def _date_function(self, node: exp.Expression):
        """date_trunc/EXTRACT of a DATE or TIMESTAMP column with declared bounds, derived by
        dpsql.analysis.expressions: SQL total on every value of the column's type (the column is
        clamped to its bounds first, so the function meets years 1-9999 only) of type DATE,
        TIMESTAMP (without zone) or BIGINT. Compared with a literal of that type (_compatible,
        literal_sql), the comparison is then one of a value of a known type with a constant, as
        for a column: total. It is part of the row's WHERE flag like any other condition
        (dpsql.rewrite.rows), never a filter the engine could decide from an index or statistics."""
        from dpsql.analysis.expressions import Expressions
        return Expressions(self.resolve, self.dialect, self, "WHERE").derive(node)

    def _operand(self, node: exp.Expression) -> str:
        """Type of a comparison operand: a column's type, a date function's, or a literal's pseudo-type."""
        if isinstance(node, exp.Column):
            return self.resolve(node, "WHERE")[1].sql_type
        if isinstance(node, DATE_FUNCTIONS):
            return self._date_function(node).sql_type
        return self.literal_type(node, "WHERE")

    def _column_operand(self, node: exp.Expression, what: str) -> str:
        node = _unparen(node)
        if isinstance(node, DATE_FUNCTIONS):
            return self._date_function(node).sql_type
        if not isinstance(node, exp.Column):
            raise QueryRejected(f"{what} on an expression", f"the left side of {what} must be a declared column "
                                "(or date_trunc or EXTRACT of one)")
        return self.resolve(node, "WHERE")[1].sql_type

    def column_sql(self, node: exp.Column) -> exp.Column:
        (alias, name), _ = self.resolve(node, "WHERE")
        return exp.column(name, table=alias)

    def _operand_sql(self, node: exp.Expression, column_type: str | None = None) -> exp.Expression:
        """A comparison operand for the rewrite: columns qualified by their FROM item, literals
        typed safely. For a column, column_type is a cast from column_pair_cast ("cast:DOUBLE" or
        "cast:NUMERIC": two numeric columns of different types) or None. For a literal, it is the
        type of the column compared with it."""
        if isinstance(node, DATE_FUNCTIONS):
            return self._date_function(node).sql
        if isinstance(node, exp.Column):
            col = self.column_sql(node)
            if column_type and column_type.startswith("cast:") and \
                    family(self.resolve(node, "WHERE")[1].sql_type) in NUMERIC:
                return exp.Cast(this=col, to=exp.DataType.build(column_type[5:]))
            return col
        return self.literal_sql(node, column_type)

    def column_pair_cast(self, a: str, b: str) -> str | None:
        """How two columns are compared so that no value of either type can make it fail.

        Identical types: as they are (a comparison of two values of one type never raises on
        any engine; NaN, infinities and NULL have defined orders). Two text types: as they are
        (the engines widen CHAR/VARCHAR to text, which cannot fail). Two numeric types: each cast
        to the dialect's numeric_compare type, to which every numeric value converts without
        error (dpsql.dialects). Anything else, notably DATE against TIMESTAMP or TIMESTAMP
        against TIMESTAMP_NS, is refused: the engine would convert every value of one column, and
        9999-12-31 does not fit a TIMESTAMP_NS, nor DuckDB's year 5881580 a TIMESTAMP."""
        if self.dialect.name == "spark" and a.strip().lower() == b.strip().lower() == "timestamp":
            # Spark's engine reports TIMESTAMP and TIMESTAMP_NTZ alike, and where the two meet
            # Spark converts the NTZ value to TIMESTAMP in the session's time zone, row by row:
            # west of UTC that overflows on the largest NTZ values. Two such columns may be one of
            # each, so they are not compared (until the engine tells them apart).
            raise QueryRejected("comparing two TIMESTAMP columns on Spark",
                                "one may be a TIMESTAMP_NTZ, whose conversion fails on some values",
                                "compare each column with a literal")
        if same_type(a, b):
            return None
        fa, fb = family(a), family(b)
        if fa == fb == "text":
            return None
        if fa in NUMERIC and fb in NUMERIC:
            return "cast:" + self.dialect.numeric_compare
        raise QueryRejected(f"comparing a {a} column with a {b} column",
                            "the engine would convert every value of one of them, which fails on some values",
                            "compare columns of the same type, or each column with a literal")

    def literal_sql(self, node: exp.Expression, column_type: str | None) -> exp.Expression:
        """A literal compared with a column of column_type, written so that the comparison
        cannot fail on any row.

        Numbers: see EngineDialect.exact_literals and the cases below. Integral literals are below 1e18
        (literal_type), inside every engine's BIGINT. Dates and times: a DATE literal may meet a
        DATE or TIMESTAMP column (the constant is converted, never the column); a TIMESTAMP
        literal only a TIMESTAMP column (_compatible). A column of nanosecond precision holds
        only 1677-09-21..2262-04-11: a literal outside it is refused here (the engine would fail
        converting it, whether or not rows exist)."""
        lit = node.this if isinstance(node, exp.Neg) else node
        if isinstance(lit, exp.Literal) and not lit.is_string:
            if self.dialect.exact_literals:
                if column_type is not None and family(column_type) == "float":
                    # PostgreSQL converts a NUMERIC literal to the float column's type (real in an
                    # IN list, double precision in `=`), and that conversion fails for a literal
                    # beyond the type's range (1e-400, 1e-50 as real) on every run. Python's float
                    # of an admitted literal cannot fail (finite, |x| <= 1e18; tiny ones round to a
                    # subnormal or 0), and double precision holds it: the column then meets a
                    # double precision constant, and widening a real to it is total.
                    value = -float(lit.this) if isinstance(node, exp.Neg) else float(lit.this)
                    return exp.Cast(this=exp.Literal.number(repr(value)), to=exp.DataType.build("DOUBLE"))
                return node.copy()
            integral = re.fullmatch(r"\d+", lit.this) is not None
            # An integer column meets an integral literal in a common integer type, except that no
            # integer type holds both a UHUGEINT and a negative number: DuckDB then converts the
            # column to HUGEINT, which fails on every value above 2**127. A negative literal
            # against an unsigned column is therefore a DOUBLE too (every UHUGEINT converts to one).
            unsigned_negative = isinstance(node, exp.Neg) and column_type is not None \
                and column_type.strip().lower().startswith("u")
            if not (integral and column_type is not None and family(column_type) == "int") or unsigned_negative:
                value = -float(lit.this) if isinstance(node, exp.Neg) else float(lit.this)
                return exp.Cast(this=exp.Literal.number(repr(value)), to=exp.DataType.build("DOUBLE"))
        if (self.dialect.ntz_timestamp_literals and isinstance(node, exp.Cast)
                and isinstance(node.this, exp.Literal) and node.to.this in _TIMESTAMPS):
            # A TIMESTAMP literal (Spark: in the session's time zone) meeting a TIMESTAMP_NTZ column
            # makes Spark convert the column to TIMESTAMP, row by row, which overflows west of UTC
            # on its largest values. Written as TIMESTAMP_NTZ, the literal meets an NTZ column as it
            # is, and a TIMESTAMP column by its own conversion to TIMESTAMP in the session's zone,
            # which is what the TIMESTAMP literal meant (a constant of years 1-9999: in range).
            return exp.Cast(this=node.this.copy(), to=exp.DataType.build("TIMESTAMPNTZ"))
        if (isinstance(node, exp.Cast) and column_type is not None and family(column_type) == "timestamp"
                and nanosecond(column_type) and isinstance(node.this, exp.Literal)):
            year = int(node.this.this[:4])
            if not 1678 <= year <= 2261:
                raise QueryRejected(f"a date or time literal outside {column_type}'s range",
                                    "the column holds only 1678-2261 at nanosecond precision")
        return node.copy()

    def literal_type(self, node: exp.Expression, where: str) -> str:
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
            node = node.this
        if isinstance(node, exp.Null):
            return "null"
        if isinstance(node, exp.Boolean):
            return "lit:bool"
        if isinstance(node, exp.Literal):
            if node.is_string:
                return "lit:text"
            if not NUMBER.fullmatch(node.this):
                raise QueryRejected("a numeric literal with more than 19 integer or 18 decimal digits",
                                    "comparing it could make the engine overflow on some rows")
            v = float(node.this)
            if not math.isfinite(v) or abs(v) > LITERAL_LIMIT:
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
        raise refuse_expression(node, where)

    @staticmethod
    def _compatible(a: str | None, b: str | None) -> None:
        """Refuse comparisons between operands whose types the engine would reconcile by a
        conversion that can fail on some values (see literal_sql and column_pair_cast)."""
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
                hint = ("write the date as DATE 'YYYY-MM-DD', e.g. DATE '2024-01-31'" if col_group == "date"
                        else "compare values of the same type")
                raise QueryRejected(f"comparing {ga} with {gb}", "the implicit cast could fail on some rows", hint)


# ----------------------------------------------------------------------------- constant date arithmetic

_INTERVAL_PART = re.compile(r"\s*([+-]?\d{1,6})\s*(years?|months?|mons?|weeks?|days?)\s*", re.IGNORECASE)
_QUALIFIER_UNITS = {"YEAR": (12, 0), "MONTH": (1, 0), "DAY": (0, 1)}     # PostgreSQL's interval qualifiers
_TEXT_UNITS = {"year": (12, 0), "mon": (1, 0), "month": (1, 0), "week": (0, 7), "day": (0, 1)}
ACCEPTED_DATE_ARITHMETIC = ("DATE 'YYYY-MM-DD' + INTERVAL 'n' DAY (or MONTH, YEAR, or INTERVAL 'n days', "
                            "'n months', 'n years', 'n weeks'), or DATE 'YYYY-MM-DD' + n (days)")


def _interval(node: exp.Interval) -> tuple[int, int] | None:
    """(months, days) of a constant interval of whole days, weeks, months and years; None otherwise
    (a time of day, a bare number, which PostgreSQL reads as seconds, or any other unit)."""
    value, unit = node.this, node.args.get("unit")
    if not (isinstance(value, exp.Literal) and value.is_string):
        return None
    if unit is None:
        text, months, days, pos = value.this, 0, 0, 0
        while pos < len(text):
            m = _INTERVAL_PART.match(text, pos)
            if m is None or m.end() == pos:
                return None
            k = _TEXT_UNITS[m.group(2).lower().rstrip("s")]
            months, days, pos = months + int(m.group(1)) * k[0], days + int(m.group(1)) * k[1], m.end()
        return (months, days) if text.strip() else None
    if not isinstance(unit, exp.Var) or not re.fullmatch(r"\s*[+-]?\d{1,6}\s*", value.this):
        return None
    name = unit.name.upper()
    n = int(value.this)
    if name in _QUALIFIER_UNITS:
        k = _QUALIFIER_UNITS[name]
    elif name.lower().rstrip("s") in _TEXT_UNITS and name.lower() != "mon":  # '3 months': sqlglot splits the text
        k = _TEXT_UNITS[name.lower().rstrip("s")]
    else:
        return None
    return n * k[0], n * k[1]


def _date_constant(node: exp.Expression) -> _dt.date | None:
    """DATE 'YYYY-MM-DD' or CAST('YYYY-MM-DD' AS DATE): a real calendar date."""
    if (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.this == exp.DataType.Type.DATE and _DATE.fullmatch(node.this.this)):
        try:
            return _dt.date.fromisoformat(node.this.this)
        except ValueError:
            return None
    return None


def shift_date(day: _dt.date, months: int, days: int) -> _dt.date:
    """PostgreSQL's date + interval (timestamp + interval, at midnight): the months first, the day
    of month clamped to the last day of the month reached (Jan 31 + 1 month = Feb 28 or 29), then
    the days. OverflowError outside years 1-9999."""
    total = day.year * 12 + (day.month - 1) + months
    year, month = divmod(total, 12)
    if not 1 <= year <= 9999:
        raise OverflowError(year)
    last = (_dt.date(year + (month == 11), (month + 1) % 12 + 1, 1) - _dt.timedelta(days=1)).day
    return _dt.date(year, month + 1, min(day.day, last)) + _dt.timedelta(days=days)


def fold_dates(tree: exp.Expression) -> exp.Expression:
    """Constant date arithmetic (`DATE '1998-12-01' - INTERVAL '90' DAY`, `DATE '1994-01-01' +
    INTERVAL '1' YEAR`, TPC-H's form), folded at analysis time to the DATE literal it makes.

    Why this is the same query: PostgreSQL computes date +- interval as a TIMESTAMP at midnight
    (the months added first with the day clamped to the month's end, then the days: shift_date
    does exactly that) and date + integer as a DATE; a DATE or TIMESTAMP column compared with a
    timestamp at midnight compares as with that date. The value depends on the query text alone,
    so folding it releases nothing; the literal it leaves is then checked like any DATE literal
    the analyst could have written (predicates: a real date, compared at its column's type, total
    on every row). What is not folded (a time of day, a column in the arithmetic, a result outside
    years 1-9999) is refused here, naming the accepted form."""
    def fold(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, (exp.Add, exp.Sub)):
            return node
        left, right = node.this, node.expression
        if isinstance(node, exp.Add) and isinstance(left, exp.Interval):
            left, right = right, left          # interval + date
        left = fold(left)
        if not (isinstance(right, exp.Interval) or isinstance(left, exp.Interval)
                or _date_constant(left) is not None):
            return node
        day = _date_constant(left)
        if isinstance(right, exp.Interval):
            shift = _interval(right)
        elif (isinstance(right, exp.Literal) and not right.is_string and right.this.isdigit()
              and len(right.this) <= 7):
            shift = (0, int(right.this))
        else:
            shift = None
        if day is None or shift is None:
            raise QueryRejected(f"the date arithmetic {node.sql('postgres')}",
                                "only whole days, months and years added to a DATE literal are folded to a "
                                "date; other arithmetic on dates is not part of the subset",
                                ACCEPTED_DATE_ARITHMETIC)
        sign = -1 if isinstance(node, exp.Sub) else 1
        try:
            out = shift_date(day, sign * shift[0], sign * shift[1])
        except (OverflowError, ValueError):
            raise QueryRejected(f"the date arithmetic {node.sql('postgres')}",
                                "its result is outside the years 1 to 9999") from None
        return exp.Cast(this=exp.Literal.string(out.isoformat()), to=exp.DataType.build("DATE"))

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Add, exp.Sub)) and any(isinstance(a, exp.Interval) or _date_constant(a) is not None
                                                        or isinstance(a, (exp.Add, exp.Sub))
                                                        for a in (node.this, node.expression)):
            folded = fold(node)
            return folded
        return node
    return tree.transform(visit)


def fold_numbers(tree: exp.Expression) -> exp.Expression:
    """Constant numeric arithmetic (`l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01`, TPC-H Q6's
    form) folded at analysis time to the literal PostgreSQL would compute: exactly, typed as
    PostgreSQL types it (integers stay integers, and integer division truncates toward zero; a
    numeric literal makes the result numeric). The value depends on the query text alone, so
    folding releases nothing; the literal it leaves is checked like one the analyst wrote. What
    does not fold to a terminating decimal (1.0 / 3), or divides by zero, is left as written (and
    refused or answered as before)."""
    def value(node: exp.Expression) -> tuple[Fraction, bool] | None:
        """(exact value, integer-typed) of a constant numeric expression, or None."""
        if isinstance(node, exp.Paren):
            return value(node.this)
        if isinstance(node, exp.Literal) and not node.is_string:
            if not NUMBER.fullmatch(node.this):
                return None
            whole = node.this.isdigit() and int(node.this) < 2 ** 63
            return Fraction(node.this), whole
        if isinstance(node, exp.Neg):
            v = value(node.this)
            return None if v is None else (-v[0], v[1])
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            a, b = value(node.this), value(node.expression)
            if a is None or b is None:
                return None
            whole = a[1] and b[1]
            if isinstance(node, exp.Add):
                return a[0] + b[0], whole
            if isinstance(node, exp.Sub):
                return a[0] - b[0], whole
            if isinstance(node, exp.Mul):
                return a[0] * b[0], whole
            if b[0] == 0:
                return None
            q = a[0] / b[0]
            return (Fraction(int(q)), True) if whole else (q, False)     # int(): toward zero
        return None

    def literal(v: Fraction, whole: bool) -> exp.Expression | None:
        den, digits = v.denominator, 0
        while den % 10 == 0 or den % 2 == 0 or den % 5 == 0:
            if den % 10 == 0:
                den //= 10
            elif den % 2 == 0:
                den //= 2
            else:
                den //= 5
            digits += 1
        if den != 1 or digits > 30:
            return None                    # not a terminating decimal
        scale = max(digits, 0 if whole else 1)
        n = abs(v) * 10 ** scale                  # a whole number: v terminates within `scale` places
        text = str(int(n)).rjust(scale + 1, "0")
        text = f"{text[:-scale]}.{text[-scale:]}" if scale else text
        lit = exp.Literal.number(text)
        return exp.Neg(this=lit) if v < 0 else lit

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            v = value(node)
            if v is not None:
                out = literal(*v)
                if out is not None:
                    return out
        return node
    # Conditions only (WHERE, HAVING, ON, FILTER): a SELECT item or GROUP BY key `1 * 0` must stay
    # as written to match its GROUP BY expression, and GROUP BY 0 would be a position
    for cond in [n for n in tree.find_all(exp.Where, exp.Having)] + \
            [j.args["on"] for j in tree.find_all(exp.Join) if j.args.get("on") is not None]:
        cond.replace(cond.transform(visit))
    return tree
