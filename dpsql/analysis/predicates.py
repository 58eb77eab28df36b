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

from collections.abc import Callable

from sqlglot import exp

from dpsql.analysis.expressions import Expressions
from dpsql.analysis.literals import compatible, date_text, literal_sql, literal_type
from dpsql.analysis.relation import ColRef, ColumnInfo
from dpsql.analysis.sqltypes import NUMERIC, family, same_type
from dpsql.analysis.subset import CMP, DATE_FUNCTIONS, only_args, refuse_expression
from dpsql.dialects import EngineDialect, data_type
from dpsql.errors import QueryRejected

MAX_PATTERN = 1000


def _unparen(node: exp.Expression) -> exp.Expression:
    """A comparison operand without its parentheses when they hold a date function."""
    inner = node
    while isinstance(inner, exp.Paren):
        inner = inner.this
    return inner if isinstance(inner, DATE_FUNCTIONS) else node



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
            return self._comparison(node)
        if isinstance(node, exp.Between):
            return self._between(node)
        if isinstance(node, exp.In):
            return self._in(node)
        if isinstance(node, exp.Is):
            return self._is(node)
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

    def _comparison(self, node: exp.Expression) -> exp.Expression:
        """column op literal, literal op column, or column op column (column_pair_cast)."""
        only_args(node, {"this", "expression"})
        left, right = _unparen(node.this), _unparen(node.expression)
        lt, rt = self._operand(left), self._operand(right)
        if self._is_column(left) and rt == "lit:text":
            right = date_text(right, lt)
            rt = self._operand(right)
        elif self._is_column(right) and lt == "lit:text":
            left = date_text(left, rt)
            lt = self._operand(left)
        if not self._is_column(left) and not self._is_column(right):
            raise QueryRejected("a comparison without a column", "compare a declared column with a literal")
        compatible(lt, rt)
        if self._is_column(left) and self._is_column(right):
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                raise QueryRejected("comparing a date function with a column",
                                    "compare date_trunc or EXTRACT of a column with a literal")
            cast = self.column_pair_cast(lt, rt)
            return type(node)(this=self._operand_sql(left, cast), expression=self._operand_sql(right, cast))
        ct = lt if self._is_column(left) else rt
        return type(node)(this=self._operand_sql(left, ct), expression=self._operand_sql(right, ct))

    def _between(self, node: exp.Between) -> exp.Expression:
        if node.args.get("symmetric"):
            raise QueryRejected("BETWEEN SYMMETRIC", "not part of the accepted subset")
        only_args(node, {"this", "low", "high"})
        ct = self._column_operand(node.this, "BETWEEN")
        low, high = (date_text(node.args[side], ct) for side in ("low", "high"))
        for side in (low, high):
            compatible(ct, literal_type(side, "BETWEEN"))
        return exp.Between(this=self._operand_sql(_unparen(node.this)), low=literal_sql(low, ct, self.dialect),
                           high=literal_sql(high, ct, self.dialect))

    def _in(self, node: exp.In) -> exp.Expression:
        if node.args.get("unnest") or node.args.get("field"):
            raise refuse_expression(exp.Subquery(), "WHERE")
        only_args(node, {"this", "expressions"})
        ct = self._column_operand(node.this, "IN")
        items = [date_text(i, ct) for i in node.expressions]
        if not items:
            raise QueryRejected("an empty IN list", "give at least one value")
        for item in items:
            compatible(ct, literal_type(item, "IN"))
        return exp.In(this=self._operand_sql(_unparen(node.this)),
                      expressions=[literal_sql(i, ct, self.dialect) for i in items])

    def _is(self, node: exp.Is) -> exp.Expression:
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
    def _is_column(node: exp.Expression) -> bool:
        """A column, or a date function of one (date_trunc, EXTRACT/date_part): what a literal is
        compared with."""
        return isinstance(node, (exp.Column, *DATE_FUNCTIONS))

    def _date_function(self, node: exp.Expression):
        """date_trunc/EXTRACT of a DATE or TIMESTAMP column with declared bounds, derived by
        dpsql.analysis.expressions: SQL total on every value of the column's type (the column is
        clamped to its bounds first, so the function meets years 1-9999 only) of type DATE,
        TIMESTAMP (without zone) or BIGINT. Compared with a literal of that type (compatible,
        literal_sql), the comparison is then one of a value of a known type with a constant, as
        for a column: total. It is part of the row's WHERE flag like any other condition
        (dpsql.rewrite.rows), never a filter the engine could decide from an index or statistics."""
        return Expressions(self.resolve, self.dialect, self, "WHERE").derive(node)

    def _operand(self, node: exp.Expression) -> str:
        """Type of a comparison operand: a column's type, a date function's, or a literal's pseudo-type."""
        if isinstance(node, exp.Column):
            return self.resolve(node, "WHERE")[1].sql_type
        if isinstance(node, DATE_FUNCTIONS):
            return self._date_function(node).sql_type
        return literal_type(node, "WHERE")

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
                return exp.Cast(this=col, to=data_type(column_type[5:]))
            return col
        return literal_sql(node, column_type, self.dialect)

    def column_pair_cast(self, a: str, b: str) -> str | None:
        """How two columns are compared so that no value of either type can make it fail.

        Identical types: as they are (a comparison of two values of one type never raises on
        any engine; NaN, infinities and NULL have defined orders). Two text types: as they are
        (the engines widen CHAR/VARCHAR to text, which cannot fail). Two numeric types: each cast
        to the dialect's numeric_compare type, to which every numeric value converts without
        error (dpsql.dialects). Anything else, notably DATE against TIMESTAMP or TIMESTAMP
        against TIMESTAMP_NS, is refused: the engine would convert every value of one column, and
        9999-12-31 does not fit a TIMESTAMP_NS, nor DuckDB's year 5881580 a TIMESTAMP."""
        if not self.dialect.timestamp_pairs and a.strip().lower() == b.strip().lower() == "timestamp":
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
