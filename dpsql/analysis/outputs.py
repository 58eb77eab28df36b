"""The outputs of a private query, evaluated after the noise: SELECT items, HAVING, ORDER BY, LIMIT
and outer wrapper queries, compiled to the post-processing expressions of dpsql.analysis.plan.
A mixin of dpsql.analysis.private_query.Analysis: it reads self.resolve, self.key_refs, self.norm
and self.aliases, and hands aggregates to self._aggregate."""
from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dpsql.analysis import quantiles as quantile_measures
from dpsql.analysis.aggregates import AGGREGATES
from dpsql.analysis.normalize import Wrapper, output_name
from dpsql.analysis.plan import Expr, Output, Wrap
from dpsql.analysis.literals import NUMBER
from dpsql.analysis.predicates import Predicates
from dpsql.analysis.sqltypes import tracking
from dpsql.analysis.subset import CMP, refuse_expression
from dpsql.errors import QueryRejected
from dpsql.postprocess.expr import Add, And, Cmp, Div, IsNull, Key, Lit, Mul, Neg, Not, Or, Sub

_ARITH = {exp.Add: Add, exp.Sub: Sub, exp.Mul: Mul, exp.Div: Div}


class Outputs:
    """SELECT items, HAVING, ORDER BY, LIMIT/OFFSET and the wrappers, as post-processing."""

    # -- SELECT
    def _select(self, sel: exp.Select) -> list[Output]:
        outputs = []
        for i, item in enumerate(sel.expressions):
            alias = item.alias if isinstance(item, exp.Alias) else None
            node = item.unalias() if isinstance(item, exp.Alias) else item
            expr = self._post(node, "SELECT")
            noisy = expr.noisy()
            if not noisy and not isinstance(expr, Key):
                raise QueryRejected("a constant in SELECT", "select group columns and aggregates")
            name = alias or output_name(node, i)
            outputs.append(Output(name, expr, noisy, node.sql("postgres")))
            if alias:
                if alias.lower() in self.aliases and self.aliases[alias.lower()] != expr:
                    self.alias_twice.add(alias.lower())      # of two different items: ambiguous
                self.aliases[alias.lower()] = expr
        return outputs

    def _post(self, node: exp.Expression, where: str) -> Expr:
        """Compile a post-processing expression over noisy aggregates and keys."""
        if isinstance(node, exp.Paren):
            return self._post(node.this, where)
        if isinstance(node, exp.Alias):
            raise QueryRejected("an alias inside an expression", "alias whole SELECT items only")
        if isinstance(node, exp.Filter):
            if not isinstance(node.this, AGGREGATES):
                raise refuse_expression(node.this, where)
            cond = Predicates(tracking(self.resolve), self.engine).check(node.expression.this)
            return self._aggregate(node.this, cond)
        if isinstance(node, AGGREGATES):
            return self._aggregate(node)
        if quantile_measures.is_quantile(node):
            return quantile_measures.aggregate(self, node)
        ref = "expr:" + node.sql("postgres")
        if not isinstance(node, exp.Column) and ref in self.key_refs:
            return Key(self.key_refs.index(ref))
        if isinstance(node, exp.Column):
            if not node.table and node.name.lower() in self.aliases and where != "SELECT":
                if node.name.lower() in self.alias_twice:       # PostgreSQL refuses it too
                    raise QueryRejected(f'{where} "{node.name}"', "it is ambiguous: two outputs have that name",
                                        "give each output its own name with AS, or order by position")
                return self.aliases[node.name.lower()]
            ref, info = self.resolve(node, where)
            if ref not in self.key_refs:
                raise QueryRejected(f"the bare column {info.name!r} in {where}",
                                    "only GROUP BY columns and aggregates can be released",
                                    f"add {info.name} to GROUP BY or aggregate it")
            return Key(self.key_refs.index(ref))
        return _literal_or_op(node, where, lambda n: self._post(n, where))

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
            out.append(_ordering(o, expr))
        return tuple(out)

    @staticmethod
    def _count_literal(node: exp.Expression | None, what: str) -> int | None:
        return count_literal(node, what)

    # -- outer wrapper queries
    def _wraps(self, outputs: list[Output]) -> tuple[Wrap, ...]:
        names = [o.name.lower() for o in outputs]
        out = []
        for w in self.norm.wrappers:
            out.append(_compile_wrap(w, names))
            names = [n.lower() for n, _ in w.outputs]
        return tuple(out)


def _ordering(o: exp.Ordered, expr: Expr) -> tuple[Expr, bool, bool]:
    desc = bool(o.args.get("desc"))
    nulls_first = o.args.get("nulls_first")
    return (expr, desc, bool(nulls_first) if nulls_first is not None else desc)



def count_literal(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    if node.args.get("limit_options") or node.args.get("expressions"):
        raise QueryRejected(f"{what} with PERCENT, WITH TIES or BY", f"{what} takes a whole number of rows")
    value = node.args.get("expression") or node.this
    if not (isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit()):
        raise QueryRejected(f"{what} with a non-literal", f"{what} takes a whole number")
    return int(value.this)



def _literal_or_op(node: exp.Expression, where: str, sub: Callable[[exp.Expression], Expr]) -> Expr:
    """Literals, arithmetic and (outside SELECT) comparisons and logic of post-processing."""
    if isinstance(node, exp.Literal):
        if node.is_string:
            return Lit(node.this)
        if not NUMBER.fullmatch(node.this):
            raise QueryRejected("a malformed number", "write numbers in plain decimal form")
        return Lit(float(node.this))
    if isinstance(node, exp.Boolean):
        return Lit(bool(node.this))
    if isinstance(node, exp.Null):
        return Lit(None)
    if isinstance(node, exp.Neg):
        return Neg(_numeric(sub(node.this)))
    if type(node) in _ARITH:
        return _ARITH[type(node)](_numeric(sub(node.this)), _numeric(sub(node.expression)))
    if where != "SELECT":
        if type(node) in CMP:
            return Cmp(CMP[type(node)], sub(node.this), sub(node.expression))
        if isinstance(node, exp.And):
            return And(sub(node.this), sub(node.expression))
        if isinstance(node, exp.Or):
            return Or(sub(node.this), sub(node.expression))
        if isinstance(node, exp.Not):
            return Not(sub(node.this))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return IsNull(sub(node.this), bool(node.args.get("negate")))
        if isinstance(node, exp.Between):
            v = sub(node.this)
            return And(Cmp(">=", v, sub(node.args["low"])), Cmp("<=", v, sub(node.args["high"])))
    raise refuse_expression(node, where)



def _numeric(expr: Expr) -> Expr:
    """Arithmetic takes noisy aggregates and numeric literals only."""
    if isinstance(expr, Key):
        raise QueryRejected("arithmetic on a GROUP BY column", "arithmetic applies to aggregates and numbers")
    if isinstance(expr, Lit) and (expr.value is None or isinstance(expr.value, (str, bool))):
        raise QueryRejected("arithmetic on a non-number", "arithmetic applies to aggregates and numbers")
    return expr



def _compile_wrap(w: Wrapper, names: list[str]) -> Wrap:
    """An outer query's items, filter and order as expressions over the inner rows' columns
    (Key(i): the inner output at position i): post-processing of released values only. Its
    ORDER BY may also name its own outputs (by alias or position), as PostgreSQL's does."""
    def sub(where: str):
        def compile_(node: exp.Expression) -> Expr:
            if isinstance(node, exp.Paren):
                return compile_(node.this)
            if isinstance(node, exp.Column):
                name = node.name.lower()
                if name not in names:
                    if where == "ORDER BY" and name in own:
                        return outputs[own.index(name)][1]
                    raise QueryRejected(f"the column {node.name!r} of the outer query",
                                        "it is not an output of the query it wraps")
                return Key(names.index(name))
            if where == "ORDER BY" and isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
                pos = int(node.this)
                if not 1 <= pos <= len(outputs):
                    raise QueryRejected("ORDER BY position", "it does not name an output of the outer query")
                return outputs[pos - 1][1]
            if isinstance(node, exp.AggFunc):
                raise QueryRejected("an aggregate in an outer query", "an outer query can only select, filter, "
                                    "order and limit the inner query's rows")
            if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg)):
                raise QueryRejected("arithmetic in an outer query", "do the arithmetic in the inner query")
            return _literal_or_op(node, where, compile_)
        return compile_
    outputs = tuple((name, sub("SELECT")(e)) for name, e in w.outputs)
    own = [name.lower() for name, _ in outputs]
    where = sub("WHERE")(w.where) if w.where is not None else None
    order = tuple(_ordering(o, sub("ORDER BY")(o.this)) for o in w.order)
    return Wrap(outputs, where, order, count_literal(w.limit, "LIMIT"), count_literal(w.offset, "OFFSET") or 0)


