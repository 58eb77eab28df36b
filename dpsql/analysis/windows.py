"""Window functions (and SELECT DISTINCT) over a private aggregate's released rows: post-processing.

    SELECT c_mktsegment, SUM(c_acctbal) AS s,
           SUM(SUM(c_acctbal)) OVER () AS total,
           RANK() OVER (ORDER BY COUNT(*) DESC) AS r
    FROM customer GROUP BY c_mktsegment ORDER BY r

is split, before anything else reads it, into the aggregate query (the core) with every input of
a window as an output of its own, and an outer query that computes the windows over the core's
released rows:

    core:  SELECT c_mktsegment AS _dpo0, SUM(c_acctbal) AS s, SUM(c_acctbal) AS _dpw0,
                  COUNT(*) AS _dpw1 FROM customer GROUP BY c_mktsegment
    outer: SELECT _dpo0 AS c_mktsegment, s, SUM(_dpw0) OVER () AS total,
                  RANK() OVER (ORDER BY _dpw1 DESC) AS r FROM released ORDER BY r

Privacy argument: the outer query reads the released rows only (noisy values, released keys),
never the engine's data, so it is post-processing and costs nothing (Dwork & Roth 2014, Prop.
2.1). A window inside the aggregate query, over true values, stays refused
(dpsql.analysis.normalize.check_shape). The outer query runs in an in-memory DuckDB of its own
that has no tables but the released rows and no file or network access (dpsql.postprocess
.sql_wrap); it admits the window functions and row functions listed here only, so that its work
is bounded by the released rows (no repeat(), no generate_series()).
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import QueryRejected
from dpsql.postprocess.expr import Key, Win

# Functions the outer query may call (sqlglot class names, lower-case; Anonymous by name).
_WINDOW_FUNCS = {"rownumber", "rank", "denserank", "percentrank", "cumedist", "ntile", "lag", "lead",
                 "firstvalue", "lastvalue", "nthvalue", "sum", "avg", "count", "min", "max"}
_ROW_FUNCS = {"round", "abs", "floor", "ceil", "coalesce", "nullif", "greatest", "least", "sign", "sqrt", "ln",
              "exp", "pow", "cast", "case", "if"}
_RANKS = {"rownumber", "rank", "denserank", "ntile", "count"}


@dataclass(frozen=True)
class SqlWrap:
    """An outer query evaluated over the released rows by an in-memory DuckDB of its own.

    columns: the core's output names, in order (the released table's columns). sql: the outer
    query in DuckDB's SQL, FROM `_released` (with a `_dprow` column: the released row's position,
    selected last so that a selected column keeps its half-width). outputs: (name, Key(i)
    for a core column selected as it is, or Win(sql type) for a computed one)."""
    columns: tuple[str, ...]
    sql: str
    outputs: tuple[tuple[str, tuple], ...]
    distinct: bool
    limit: int | None = None
    offset: int = 0
    where: None = None
    order: tuple = ()


def has_windows(tree: exp.Expression) -> bool:
    return isinstance(tree, exp.Select) and any(
        w.find_ancestor(exp.Select) is tree for w in tree.find_all(exp.Window))


def distinct_over_groups(tree: exp.Expression) -> bool:
    """SELECT DISTINCT (not DISTINCT ON) over an aggregate query's rows: the DISTINCT is applied
    to the released rows, as the outer query of a split without windows (post-processing too)."""
    d = tree.args.get("distinct") if isinstance(tree, exp.Select) else None
    return d is not None and not d.args.get("on") and bool(
        tree.args.get("group") or any(a.find_ancestor(exp.Select) is tree for a in tree.find_all(exp.AggFunc)))


def split(tree: exp.Select, output_name) -> tuple[exp.Select, dict]:
    """The core aggregate query and the outer query's parts (compiled by `compile_wrap` once the
    core's output names are known). Windows anywhere but this SELECT's items and ORDER BY are
    left in place (and refused as before)."""
    if not (tree.args.get("group") or any(a.find_ancestor(exp.Window) is None and a.find_ancestor(exp.Select) is tree
                                          for a in tree.find_all(exp.AggFunc))):
        raise QueryRejected("window functions over rows", "they would compute on true, un-noised values",
                            "use them over an aggregate query's results: SELECT k, COUNT(*), "
                            "RANK() OVER (ORDER BY COUNT(*) DESC) FROM t GROUP BY k")
    for key in ("qualify", "windows"):
        if tree.args.get(key):
            raise QueryRejected("QUALIFY or WINDOW clauses", "not part of the accepted subset",
                                "write the window in the select list")
    core = tree.copy()
    group = core.args.get("group")
    if group is not None:                 # positions refer to the items as written: resolve them first
        items = [e.unalias() if isinstance(e, exp.Alias) else e for e in tree.expressions]
        for g in list(group.expressions):
            if isinstance(g, exp.Literal) and not g.is_string and g.this.isdigit() and 1 <= int(g.this) <= len(items):
                if items[int(g.this) - 1].find(exp.Window):
                    raise QueryRejected("GROUP BY a window function", "groups are formed before windows")
                g.replace(items[int(g.this) - 1].copy())
    keys = {g.sql(dialect="postgres") for g in (group.expressions if group is not None else [])}
    names = [output_name(item, i) for i, item in enumerate(tree.expressions)]
    first = {}
    for i, n in enumerate(names):
        first.setdefault(n.lower(), i)

    def core_name(i: int, item: exp.Expression) -> str:
        """An item's name in the core: its AS name, unless an item before it has that name (the
        core's outputs are the released table's columns, so each needs a name of its own; HAVING
        reads a name as the first item of that name, as the query without the outer part does)."""
        return item.alias if isinstance(item, exp.Alias) and first[names[i].lower()] == i else f"_dpo{i}"

    hidden: dict[str, str] = {}           # the SQL of a window input -> its core output name
    hidden_items: list[exp.Expression] = []
    for i, item in enumerate(tree.expressions):     # an input that is an item already: read it there
        node = item.unalias() if isinstance(item, exp.Alias) else item
        if node.find(exp.Window) is None:
            hidden.setdefault(node.sql(dialect="postgres"), core_name(i, item))

    def take(node: exp.Expression) -> exp.Expression:
        key = node.sql(dialect="postgres")
        if key not in hidden:
            hidden[key] = f"_dpw{len(hidden_items)}"
            hidden_items.append(exp.alias_(node.copy(), hidden[key], copy=False))
        return exp.column(hidden[key])

    def outer_expr(node: exp.Expression) -> exp.Expression:
        """The expression over the core's outputs: every aggregate (with its FILTER or WITHIN
        GROUP) and every column (outside an aggregate: a GROUP BY key) becomes a hidden output;
        the window functions stay. (transform visits top-down and does not enter what it replaced.)"""
        def swap(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Window) or isinstance(n.parent, exp.Window) and n.arg_key == "this":
                return n                            # the window, and its own function
            if n.sql(dialect="postgres") in hidden and not n.find(exp.Window):
                return take(n)                      # an item of the select list, whole (COUNT(*) + 1)
            if isinstance(n, (exp.Filter, exp.WithinGroup, exp.AggFunc, exp.Column)) or (
                    n.sql(dialect="postgres") in keys):     # a GROUP BY expression, whole
                return take(n)
            return n
        return node.copy().transform(swap, copy=False)

    core_items: list[exp.Expression] = []
    outer_items: list[tuple[str, exp.Expression | int]] = []
    for i, item in enumerate(tree.expressions):
        node = item.unalias() if isinstance(item, exp.Alias) else item
        if node.find(exp.Window) is None:
            core_items.append(exp.alias_(node.copy(), core_name(i, item), copy=False))
            outer_items.append((names[i], len(core_items) - 1))
        else:
            _check_outer(node)
            outer_items.append((names[i], outer_expr(node)))
    order = []
    own = {n.lower() for n in names}
    for o in (tree.args.get("order").expressions if tree.args.get("order") else []):
        e = o.this
        if isinstance(e, exp.Column) and not e.table and e.name.lower() in own:
            if len({i.this.sql(dialect="postgres") for i in tree.expressions
                    if isinstance(i, exp.Alias) and i.alias.lower() == e.name.lower()}) > 1:
                # two different items of that AS name: PostgreSQL refuses it too (so does the analysis)
                raise QueryRejected(f'ORDER BY "{e.name}"', "it is ambiguous: two outputs have that name",
                                    "give each output its own name with AS, or order by position")
            order.append(o.copy())
        elif isinstance(e, exp.Literal) and not e.is_string:
            order.append(o.copy())
        else:
            _check_outer(e)
            order.append(exp.Ordered(this=outer_expr(e), desc=o.args.get("desc"), nulls_first=o.args.get("nulls_first")))
    if tree.args.get("distinct"):
        # PostgreSQL: "for SELECT DISTINCT, ORDER BY expressions must appear in select list"
        # (an order by anything else is ambiguous among the rows DISTINCT merges)
        selected = {core_items[e].alias.lower() for _, e in outer_items if isinstance(e, int)}
        for o in order:
            e = o.this
            if isinstance(e, exp.Literal) or isinstance(e, exp.Column) and e.name.lower() in own:
                continue
            if isinstance(e, exp.Column) and e.name.lower() in selected:
                continue
            raise QueryRejected("this ORDER BY with SELECT DISTINCT",
                                "for SELECT DISTINCT, ORDER BY expressions must appear in the select list",
                                "order by an output's name or position")
    core.set("expressions", core_items + hidden_items)
    for key in ("order", "limit", "offset", "distinct"):
        core.set(key, None)
    return core, {"outputs": outer_items, "order": order, "limit": tree.args.get("limit"),
                  "offset": tree.args.get("offset"), "distinct": bool(tree.args.get("distinct"))}


def _check_outer(node: exp.Expression) -> None:
    """Only the listed window and row functions, no subquery."""
    for n in node.walk():
        if isinstance(n, (exp.Subquery, exp.Select, exp.Exists)):
            raise QueryRejected("a subquery beside window functions", "not part of the accepted subset")
        if isinstance(n, exp.Func) and not isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Window):
            name = (n.name if isinstance(n, exp.Anonymous) else type(n).__name__).lower()
            if name not in _ROW_FUNCS:      # no repeat(), generate_series(): work bounded by the released rows
                raise QueryRejected(f"the function {name.upper()} beside window functions",
                                    "not part of the accepted subset",
                                    "ROUND, ABS, FLOOR, CEIL, COALESCE, NULLIF, GREATEST, LEAST, SIGN, SQRT, LN, EXP, "
                                    "POW, CAST and CASE are")
        if isinstance(n, exp.Window):
            fn = n.this
            name = (fn.name if isinstance(fn, exp.Anonymous) else type(fn).__name__).lower()
            if name not in _WINDOW_FUNCS:
                raise QueryRejected(f"the window function {fn.sql(dialect='postgres')}", "not part of the accepted subset",
                                    "ROW_NUMBER, RANK, DENSE_RANK, PERCENT_RANK, CUME_DIST, NTILE, LAG, LEAD, "
                                    "FIRST_VALUE, LAST_VALUE, NTH_VALUE, SUM, AVG, COUNT, MIN and MAX are")
            spec = n.args.get("spec")
            if spec is not None and str(spec.args.get("kind") or "").upper() == "GROUPS":
                raise QueryRejected("GROUPS frames", "not part of the accepted subset")


def compile_wrap(parts: dict, core_names: list[str], limit: int | None, offset: int) -> SqlWrap:
    """The outer query in DuckDB's SQL over `_released` (columns: the core's output names);
    limit and offset: the query's LIMIT and OFFSET, checked by the analysis."""
    select = []
    outputs = []
    for name, e in parts["outputs"]:
        if isinstance(e, int):
            select.append(exp.alias_(exp.column(core_names[e], quoted=True), name, quoted=True))
            outputs.append((name, Key(e)))
        else:
            select.append(exp.alias_(_quote_columns(e), name, quoted=True))
            outputs.append((name, Win(_type_of(e))))
    distinct = parts["distinct"]
    if not distinct:
        select.append(exp.column("_dprow"))
    q = exp.Select(expressions=select).from_("_released")
    if distinct:
        q.set("distinct", exp.Distinct())
    if parts["order"]:
        q.set("order", exp.Order(expressions=[_quote_columns(o) for o in parts["order"]]))
    elif not distinct:
        q.set("order", exp.Order(expressions=[exp.Ordered(this=exp.column("_dprow"))]))
    if limit is not None:
        q.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
    if offset:
        q.set("offset", exp.Offset(expression=exp.Literal.number(offset)))
    sql = q.sql(dialect="duckdb")
    return SqlWrap(tuple(core_names), sql, tuple(outputs), distinct, limit, offset)


def _quote_columns(node: exp.Expression) -> exp.Expression:
    """Column references as quoted names of the released table's columns (unqualified)."""
    def q(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            return exp.column(n.name, quoted=True)
        return n
    return node.copy().transform(q, copy=False)


def _type_of(node: exp.Expression) -> str:
    """The SQL type of a computed output, for clients that describe before they execute."""
    w = node if isinstance(node, exp.Window) else None
    if w is not None:
        fn = w.this
        name = (fn.name if isinstance(fn, exp.Anonymous) else type(fn).__name__).lower()
        if name in _RANKS:
            return "BIGINT"
    return "DOUBLE"
