"""The node forms a row condition is built from (CMP, DATE_FUNCTIONS), and the refusals for the rest:
only_args (a modifier the rewrite would not reproduce), refuse_expression (a clear reason for any
construct outside the accepted subset, in any clause).
"""
from __future__ import annotations

from sqlglot import exp

from dpsql.errors import QueryRejected

DATE_FUNCTIONS = (exp.TimestampTrunc, exp.DateTrunc, exp.Extract)
CMP = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}


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

