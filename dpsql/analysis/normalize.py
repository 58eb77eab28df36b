"""Normalise a private query before analysis: names resolved, row-level subqueries inlined,
BI-tool wrappers split off.

    tree --check (statement kind, constructs refused with their reason)
         --qualify (sqlglot's optimizer: every column qualified by its FROM item, stars expanded,
                    positional GROUP BY/ORDER BY and HAVING aliases resolved)
         --eliminate_subqueries + merge_subqueries (sqlglot: row-level derived tables and CTEs
                    merged into the query that reads them; what cannot be merged stays a CTE)
         --unwrap: while the outermost SELECT only reads one aggregate CTE (Superset's
                    `SELECT ... FROM (<query>) AS virtual_table LIMIT 1000`, Metabase's "source"),
                    it is post-processing of that aggregate's released rows
         --> Normalized(core SELECT, remaining CTEs by name, wrappers innermost first, output names)

Everything here is about names and shapes; the privacy analysis is dpsql.analysis.analyze.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.eliminate_subqueries import eliminate_subqueries
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dpsql.analysis.suggest import did_you_mean
from dpsql.errors import QueryRejected, UndefinedColumn


@dataclass
class Wrapper:
    """An outer query over a private aggregate's released rows: post-processing only.
    outputs: (name, expression over the inner output names); where/order: over those names."""
    outputs: list[tuple[str, exp.Expression]]
    where: exp.Expression | None
    order: list[exp.Ordered]
    limit: exp.Expression | None
    offset: exp.Expression | None


@dataclass
class Normalized:
    core: exp.Select
    ctes: dict[str, exp.Select] = field(default_factory=dict)
    wrappers: list[Wrapper] = field(default_factory=list)      # innermost first
    names: list[str] = field(default_factory=list)             # output names of the outermost query


def output_name(node: exp.Expression, i: int) -> str:
    """The name PostgreSQL gives an unaliased SELECT item (count, sum, avg, the column's name)."""
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)):
        return node.sql_name().lower()
    if isinstance(node, exp.Paren):
        return output_name(node.this, i)
    return f"col{i + 1}"


def check_shape(tree: exp.Expression) -> None:
    """Constructs refused wherever they appear, each with its reason."""
    for node in tree.walk():
        if isinstance(node, exp.Join) and (node.args.get("method") or "").upper() == "NATURAL":
            raise QueryRejected("NATURAL JOIN", "it joins on every column name the tables share, undeclared ones "
                                "too", "join ON the columns you mean, e.g. ON a.person_id = b.person_id")
        if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
            raise QueryRejected("set operations (UNION/INTERSECT/EXCEPT)",
                                "combining result sets would let one person's rows count twice",
                                "ask each SELECT as a query of its own (each charged), or one GROUP BY over the rows")
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise QueryRejected("WITH RECURSIVE", "a recursive query's work and output are not bounded by the policy")
        if isinstance(node, exp.Window):
            raise QueryRejected("window functions (OVER)", "they compute on true, un-noised values")
        if isinstance(node, exp.Lateral):
            raise QueryRejected("LATERAL", "a lateral subquery runs once per row: it is not bounded by the policy")
        if isinstance(node, exp.Select):
            for key, what in (("laterals", "LATERAL"), ("windows", "WINDOW"), ("qualify", "QUALIFY"),
                              ("into", "SELECT INTO"), ("locks", "locking clauses"), ("sample", "TABLESAMPLE"),
                              ("pivots", "PIVOT")):
                if node.args.get(key):
                    raise QueryRejected(what, "not part of the accepted subset")


_SCHEMAS: dict[tuple, tuple[MappingSchema, tuple]] = {}


def _mapping_schema(schema: Mapping[str, Mapping[str, str]]) -> MappingSchema:
    """sqlglot's MappingSchema of `schema`, built once per distinct set of tables (its
    construction normalises every name: a fifth of normalize's time, per query, before).

    Keyed by each table's name and the identity of its column mapping: the session's schema
    facts are read once and not changed in place, and each entry holds those mappings, so no
    identity it is keyed by can be reused while it is cached. Read-only after construction:
    qualify only looks names up."""
    key = tuple((name, id(cols)) for name, cols in schema.items())
    hit = _SCHEMAS.get(key)
    if hit is not None:
        return hit[0]
    made = MappingSchema(dict(schema), dialect="postgres")
    if len(_SCHEMAS) >= 64:
        _SCHEMAS.pop(next(iter(_SCHEMAS)))
    _SCHEMAS[key] = (made, tuple(schema.values()))
    return made


def normalize(tree: exp.Select, schema: Mapping[str, Mapping[str, str]]) -> Normalized:
    """`schema`: table name -> {column: type} for every table the query may read."""
    tree = tree.copy()
    for sel in tree.find_all(exp.Select):      # remembered through qualify, which expands stars
        if any(_is_star(e) for e in sel.expressions):
            sel.meta["star"] = True
    names = [] if tree.meta.get("star") else [output_name(e, i) for i, e in enumerate(tree.expressions)]
    _check_positions(tree)
    _implicit_names(tree)
    using = {c.name.lower() for j in tree.find_all(exp.Join) for c in (j.args.get("using") or [])}
    try:
        q = qualify(tree, schema=_mapping_schema(schema), dialect="postgres",
                    quote_identifiers=False, validate_qualify_columns=True, expand_alias_refs=True)
        if using:
            q = _using_columns(q, using)
        for sel in list(q.find_all(exp.Select)):
            _comma_joins(sel)
        if any(sel is not q for sel in q.find_all(exp.Select)):   # (a flat SELECT has nothing to merge)
            written = {c.alias.lower() for c in (q.args.get("with_") or exp.With(expressions=[])).expressions}
            q = merge_subqueries(_one_cte_per_derived_table(eliminate_subqueries(q), written))
    except OptimizeError as err:
        raise _resolution_error(err, tree, schema) from None
    except QueryRejected:
        raise
    except Exception as err:     # sqlglot's optimizer on an odd tree: refuse, never crash
        raise QueryRejected("this query", f"its names could not be resolved ({type(err).__name__})") from None
    if not isinstance(q, exp.Select):
        raise QueryRejected(type(q).__name__.upper(), "dpsql answers read-only aggregate SELECT queries only")
    ctes: dict[str, exp.Select] = {}
    with_ = q.args.get("with_") or q.args.get("with")
    if with_ is not None:
        for cte in with_.expressions:
            body = cte.this
            if not isinstance(body, exp.Select):
                raise QueryRejected("this WITH clause", "each common table expression must be one SELECT")
            ctes[cte.alias] = body
        q.set("with_", None)
        q.set("with", None)
    out = Normalized(q, ctes, [], [])
    _unwrap(out)
    if out.core.meta.get("star"):
        raise QueryRejected("SELECT *", "it would release individual rows", "select aggregates such as COUNT(*)")
    if names:
        out.names = names
    elif out.wrappers:
        out.names = [name for name, _ in out.wrappers[-1].outputs]
    else:
        out.names = [output_name(e, i) for i, e in enumerate(out.core.expressions)]
    return out


def _one_cte_per_derived_table(q: exp.Expression, written: set[str]) -> exp.Expression:
    """Undo eliminate_subqueries' sharing: it makes textually identical derived tables one CTE,
    which is then read twice and cannot be merged. Each derived table the analyst wrote becomes
    its own CTE again (a copy per reference), so it is merged into, or bound as, the one FROM item
    it was written as. CTEs the analyst wrote (`written`) are left as they are. A CTE reads only
    CTEs before it, so going from the last to the first counts the references that copies of
    later CTEs add."""
    with_ = q.args.get("with_")
    if with_ is None:
        return q
    taken = {c.alias.lower() for c in with_.expressions} | {t.name.lower() for t in q.find_all(exp.Table)}
    ctes = list(with_.expressions)
    for cte in reversed(list(ctes)):
        name = cte.alias
        if name.lower() in written:
            continue
        refs = [t for t in q.find_all(exp.Table) if t.name == name and not t.args.get("db")]
        copies = []
        for k, ref in enumerate(refs[1:], start=1):
            new = f"{name}_{k}"
            while new.lower() in taken:
                new += "_"
            taken.add(new.lower())
            copy = cte.copy()
            copy.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
            copies.append(copy)
            ref.set("this", exp.to_identifier(new))
        if copies:
            position = ctes.index(cte)
            ctes[position + 1:position + 1] = copies
            with_.set("expressions", [c.copy() for c in ctes])
            ctes = list(with_.expressions)
    return q


def _is_comma(j: exp.Expression) -> bool:
    return isinstance(j, exp.Join) and not any(j.args.get(k) for k in ("on", "using", "kind", "side", "method"))


def _comma_joins(sel: exp.Select) -> None:
    """`FROM a, b, c WHERE a.k = b.k AND b.j = c.j AND ...` (TPC-H's form) as the INNER JOINs it
    means: each comma item's ON is the WHERE conjuncts `x = y` that equate one of its columns
    with a column of an item before it (the items taken in the first order in which each has
    one), and those conjuncts leave WHERE. A row of the comma list passes WHERE exactly when it
    passes every conjunct, so it is a row of the joins passing the rest of WHERE: the same rows,
    the same query, and from here on every rule and guarantee of an explicit JOIN ... ON applies
    (bind: equi-joins, protected tables on their units). An item no equality reaches stays a
    comma item, refused in bind as the cross join it is. Only a FROM whose joins are all commas
    is read so (PostgreSQL binds `a, b JOIN c ON ...` as a, (b JOIN c)). Columns are qualified
    by now (qualify), so each side names its item."""
    joins = sel.args.get("joins") or []
    if not joins or not all(_is_comma(j) for j in joins):
        for j in joins:
            if _is_comma(j):
                j.meta["comma"] = "mixed" if joins and not all(_is_comma(k) for k in joins) else "unjoined"
        return
    src = sel.args.get("from_")
    where = sel.args.get("where")
    if src is None:
        return
    conjuncts = list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And) else \
        ([where.this] if where is not None else [])
    def split(c: exp.Expression) -> list[exp.Expression]:     # (a AND b) AND c: every conjunct, parentheses too
        c = c.unnest()
        return [x for part in c.flatten() for x in split(part)] if isinstance(c, exp.And) else [c]
    conjuncts = [h for c in conjuncts for part in split(c) for h in _hoist_common(part)]

    def alias(node: exp.Expression) -> str:
        return node.alias_or_name

    def equality(c: exp.Expression) -> tuple[str, str] | None:
        if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column) \
                and c.this.table and c.expression.table and c.this.table != c.expression.table:
            return c.this.table, c.expression.table
        return None
    scope = {alias(src.this)}
    todo = list(joins)
    done: list[exp.Join] = []
    used: set[int] = set()
    while todo:
        for j in todo:
            me = alias(j.this)
            mine = [c for c in conjuncts if id(c) not in used and (e := equality(c)) is not None
                    and me in e and (set(e) - {me}) <= scope]
            if mine:
                break
        else:
            break
        used.update(id(c) for c in mine)
        # exp.and_ parenthesises an OR among the conjuncts (flatten took their parentheses off:
        # rebuilt bare, `(a OR b) AND c` would read `a OR b AND c`)
        j.set("on", exp.and_(*(c.copy() for c in mine)))
        todo.remove(j)
        done.append(j)
        scope.add(me)
    for j in todo:
        j.meta["comma"] = "unjoined"
    if not used:
        return
    sel.set("joins", done + todo)
    rest = [c for c in conjuncts if id(c) not in used]
    if not rest:
        sel.set("where", None)
    else:
        sel.set("where", exp.Where(this=exp.and_(*(c.copy() for c in rest))))


def _implicit_names(tree: exp.Expression) -> None:
    """Give a subquery's unaliased aggregates the names PostgreSQL gives them (count, sum, avg,
    min, max), so an outer query can refer to them as in PostgreSQL (`SELECT t.count FROM (SELECT
    state, COUNT(*) FROM people GROUP BY state) t`); sqlglot would name them _col_N."""
    for sel in tree.find_all(exp.Select):
        if sel is tree:
            continue
        taken = {e.alias_or_name.lower() for e in sel.expressions}
        for i, e in enumerate(list(sel.expressions)):
            if isinstance(e, (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)):
                name = e.sql_name().lower()
                if name not in taken:
                    e.replace(exp.alias_(e.copy(), name))
                    taken.add(name)


def _using_columns(tree: exp.Expression, using: set[str]) -> exp.Expression:
    """An unqualified column named in USING (c), which qualify writes COALESCE(a.c, b.c): it is
    a.c, in an INNER and in a LEFT JOIN alike (b.c is only ever a.c or NULL beside it)."""
    def one(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Coalesce):
            args = [node.this, *node.expressions]
            if (all(isinstance(a, exp.Column) for a in args) and len({a.name.lower() for a in args}) == 1
                    and args[0].name.lower() in using and len({a.table for a in args}) == len(args)):
                return args[0].copy()
        return node
    return tree.transform(one)


def _hoist_common(cond: exp.Expression) -> list[exp.Expression]:
    """`(a = b AND x) OR (a = b AND y)` as `a = b AND (x OR y)` (TPC-H Q19 writes its join
    condition in every branch of an OR): the same rows by distributivity, and the equality can
    then join the comma-separated tables. Only column equalities common to every branch move."""
    node = cond.unnest()
    if not isinstance(node, exp.Or):
        return [cond]
    branches = list(node.flatten())
    sets = [list(b.flatten()) if isinstance(b, exp.And) else [b] for b in branches]
    def key(c: exp.Expression) -> str:
        return c.sql(dialect="postgres")
    first = {key(c): c for c in sets[0] if isinstance(c, exp.EQ) and isinstance(c.this, exp.Column)
             and isinstance(c.expression, exp.Column)}
    common = [k for k in first if all(any(key(c) == k for c in cs) for cs in sets[1:])]
    if not common:
        return [cond]
    rest = []
    for cs in sets:
        left = [c.copy() for c in cs if key(c) not in common]
        if not left:                        # a branch that is only the equalities: the OR is always true
            return [first[k].copy() for k in common]
        rest.append(exp.and_(*left))
    return [first[k].copy() for k in common] + [exp.paren(exp.or_(*rest), copy=False)]


def _is_star(e: exp.Expression) -> bool:
    return isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))


def _unwrap(n: Normalized) -> None:
    """Split BI-tool wrappers off: `SELECT items FROM <aggregate CTE> [WHERE] [ORDER BY] [LIMIT]`
    with no aggregate, GROUP BY, join or DISTINCT of its own."""
    while True:
        q = n.core
        src = q.args.get("from_")
        table = src.this if src is not None else None
        if not (isinstance(table, exp.Table) and table.name in n.ctes and not q.args.get("joins")
                and not q.args.get("group") and not q.args.get("having") and not q.args.get("distinct")
                and not any(q.find_all(exp.AggFunc))):
            return
        inner = n.ctes[table.name]
        if not _leads_to_aggregate(inner, n.ctes):
            return          # a row-level CTE that could not be merged: the analysis handles it
        alias = table.alias_or_name
        outputs = []
        for i, item in enumerate(q.expressions):
            node = item.unalias() if isinstance(item, exp.Alias) else item
            outputs.append((item.alias if isinstance(item, exp.Alias) else output_name(item, i), _inner_refs(node, alias)))
        where = q.args.get("where")
        order = q.args.get("order")
        wrapper = Wrapper(outputs, _inner_refs(where.this, alias) if where is not None else None,
                          [_inner_refs(o, alias) for o in order.expressions] if order is not None else [],
                          q.args.get("limit"), q.args.get("offset"))
        del n.ctes[table.name]
        n.wrappers.insert(0, wrapper)
        n.core = inner


def _aggregate(sel: exp.Select) -> bool:
    return bool(sel.args.get("group") or any(sel.find_all(exp.AggFunc)))


def _leads_to_aggregate(sel: exp.Select, ctes: dict[str, exp.Select], depth: int = 0) -> bool:
    """An aggregate, or a wrapper (one CTE in FROM, no aggregate, join, GROUP BY or DISTINCT of its
    own) of one: a wrapper of a wrapper unwraps too."""
    if _aggregate(sel):
        return True
    src = sel.args.get("from_")
    t = src.this if src is not None else None
    return (depth < 32 and isinstance(t, exp.Table) and t.name in ctes and not sel.args.get("joins")
            and not sel.args.get("distinct") and _leads_to_aggregate(ctes[t.name], ctes, depth + 1))


def _inner_refs(node: exp.Expression, alias: str) -> exp.Expression:
    """The wrapper's columns as bare references to the inner query's output names."""
    def strip(c: exp.Expression) -> exp.Expression:
        if isinstance(c, exp.Column):
            if c.table and c.table != alias:
                raise QueryRejected(f"the qualifier {c.table!r}", "it is not the wrapped query's alias")
            return exp.column(c.name)
        if isinstance(c, (exp.Subquery, exp.Select, exp.Exists)):
            raise QueryRejected("a subquery in an outer query", "an outer query can only filter, order and "
                                "limit the inner query's rows")
        return c
    return node.copy().transform(strip)


def _check_positions(tree: exp.Expression) -> None:
    """GROUP BY and ORDER BY positions name a SELECT item: 1 to the number of items. sqlglot reads
    `+2` as the position 2 (it drops a unary plus), and would read the position 0 as the last item
    (a Python index of -1): refused here, before it resolves them."""
    for sel in tree.find_all(exp.Select):
        group = sel.args.get("group")
        order = sel.args.get("order")
        items = list(group.expressions) if group is not None else []
        items += [o.this for o in order.expressions] if order is not None else []
        most = None if any(_is_star(e) for e in sel.expressions) else len(sel.expressions)   # * expands later
        for node in items:
            if isinstance(node, exp.Literal) and node.is_int and not 1 <= int(node.this) <= (most or int(node.this)):
                raise QueryRejected(f"the position {node.this} in GROUP BY or ORDER BY",
                                    "it does not name a SELECT item")


_UNKNOWN = re.compile(r"Column '([^']*)' could not be resolved(?: for table: '([^']*)')?|Unknown column: (\S+)")


def _column_hint(col: str, qualifier: str | None, tree: exp.Expression,
                 schema: Mapping[str, Mapping[str, str]]) -> str | None:
    """A close column name of the tables the query reads (their schema, never their data)."""
    aliases = {}
    for t in tree.find_all(exp.Table):
        aliases[t.alias_or_name.lower()] = t.name.lower()
        aliases[t.name.lower()] = t.name.lower()
    tables = [aliases[qualifier.lower()]] if qualifier and qualifier.lower() in aliases else set(aliases.values())
    names = [c for t in tables for c in schema.get(t, {})]
    return did_you_mean(col, names)


def _resolution_error(err: OptimizeError, tree: exp.Expression,
                      schema: Mapping[str, Mapping[str, str]]) -> QueryRejected:
    text = str(err)
    m = _UNKNOWN.search(text)
    if m:
        col = m.group(1) or m.group(3) or "?"
        where = f" of {m.group(2)!r}" if m.group(2) else ""
        return UndefinedColumn(f"the column {col!r}{where}", "no such column in the tables the query reads",
                             _column_hint(col, m.group(2), tree, schema))
    if "Unknown output column" in text:
        return QueryRejected("a GROUP BY or ORDER BY position", "it does not name a SELECT item")
    if "Ambiguous" in text or "ambiguous" in text:
        return QueryRejected("an ambiguous column", "several tables of the query have it",
                             "qualify it with its table or alias")
    if "Unknown table" in text:
        return QueryRejected("a column qualifier", "it is not a table or alias of the query")
    return QueryRejected("this query", "its names could not be resolved")
