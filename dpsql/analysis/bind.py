"""Bind a normalised SELECT's FROM clause to a Relation (dpsql.analysis.relation).

Each FROM item becomes an Instance: a protected table (by its policy name or source), a
public table, a row-level CTE that could not be merged (a filtered reference to one table,
used twice), or a per-unit subquery (an inner query grouped by the unit). Joins are checked
here: equi-joins only, INNER or LEFT with the protected side preserved; two protected inputs
only on equality of their units (directly, or through declared links to a unique key), at
identical types; anything else is refused with its reason. Links are resolved here too: a
linked table's unit comes from a join to the table it links to, the one the analyst wrote
(ON column = key) or one dpsql adds.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from sqlglot import exp

from dpsql.analysis.per_unit import per_unit_instance
from dpsql.analysis.predicates import Predicates
from dpsql.analysis.relation import (
    PER_UNIT_HITS,
    ColRef,
    ColumnInfo,
    Instance,
    JoinStep,
    Relation,
    UnitClasses,
)
from dpsql.analysis.scope import exact_equality, resolve_in
from dpsql.analysis.sql import conjuncts
from dpsql.analysis.sqltypes import one_collation, same_type, tracking
from dpsql.analysis.suggest import table_hint
from dpsql.analysis.suggest import undeclared_table_hint as _or_ask
from dpsql.dialects import EngineDialect
from dpsql.errors import QueryRejected
from dpsql.policy import Policy, TablePolicy

@dataclass
class Catalog:
    """What binding needs to know: the policy, each relation's facts and the engine's dialect.

    protected: policy table name -> {column: type}; facts: engine reference -> TableFacts
    (unique columns, NOT NULL); public: public table name -> {column: type}."""
    policy: Policy
    protected: Mapping[str, Mapping[str, str]]
    facts: Mapping[str, object]
    public: Mapping[str, Mapping[str, str]]
    dialect: EngineDialect
    ctes: Mapping[str, exp.Select] = field(default_factory=dict)
    counter: list[int] = field(default_factory=lambda: [0])
    binding: list[str] = field(default_factory=list)     # the CTEs being bound, innermost last

    def fresh(self, prefix: str) -> str:
        self.counter[0] += 1
        return f"{prefix}{self.counter[0]}"

    def policy_table(self, name: str) -> TablePolicy | None:
        """The protected table a reference names: by its policy name or by its `source`."""
        t = self.policy.table(name)
        if t is not None:
            return t
        for t in self.policy.tables.values():
            if t.source and t.source.lower().split(".")[-1] == name:
                return t
        return None

    def unique(self, t: TablePolicy, column: str) -> bool:
        f = self.facts.get(t.source or t.name)
        return f is not None and column in (getattr(f, "unique", None) or ())

    def not_null(self, t: TablePolicy, column: str) -> bool:
        f = self.facts.get(t.source or t.name)
        return f is not None and column in (getattr(f, "not_null", None) or ())

    def inexact(self, ref: str) -> frozenset[str]:
        """The columns of an engine relation whose equality is not that of their text
        (TableFacts.inexact: exact_equality)."""
        f = self.facts.get(ref)
        return frozenset(getattr(f, "inexact", None) or ())

    def columns(self, t: TablePolicy) -> dict[str, ColumnInfo]:
        """A protected table's columns as the policy declares them and the engine types them."""
        inexact = self.inexact(t.source or t.name)
        return {c: ColumnInfo(c, ty, t.column(c), inexact=c in inexact) for c, ty in self.protected[t.name].items()}

    def bind(self, sel: exp.Select, *, where_conjuncts: list[exp.Expression] | None = None) -> Relation:
        """bind(sel, self): how the subqueries bound inside a query (per-unit subqueries, semi-joins:
        dpsql.analysis.per_unit, dpsql.analysis.semijoin) reach binding, through the catalog they
        are given."""
        return bind(sel, self, where_conjuncts=where_conjuncts)


def bind(sel: exp.Select, cat: Catalog, *, where_conjuncts: list[exp.Expression] | None = None) -> Relation:
    """The Relation of a qualified SELECT's FROM and joins. Row filters of unmerged row-level
    CTEs are appended to `where_conjuncts`, already checked (they apply to every row of an
    INNER join)."""
    src = sel.args.get("from_")
    if src is None:
        raise QueryRejected("a query without FROM", "name the protected table")
    extra = where_conjuncts if where_conjuncts is not None else []
    first = _instance(src.this, cat, extra, preserved=True)
    steps: list[JoinStep] = []
    classes = UnitClasses()
    seen = [first]
    for j in sel.args.get("joins") or []:
        steps.append(_join(j, seen, cat, classes, extra))
        seen.append(steps[-1].instance)
    return _finish(first, steps, classes, cat)


def _instance(node: exp.Expression, cat: Catalog, extra: list[exp.Expression], *, preserved: bool) -> Instance:
    if isinstance(node, exp.Subquery):
        raise QueryRejected("this subquery in FROM", "it could not be inlined or read as a per-unit subquery")
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise QueryRejected("a table function or derived table in FROM",
                            "FROM reads tables, CTEs and subqueries only")
    for arg in ("laterals", "pivots", "sample", "version", "when", "changes"):
        if node.args.get(arg):
            raise QueryRejected(arg.upper(), "not part of the accepted subset")
    alias_node = node.args.get("alias")
    if alias_node is not None and alias_node.args.get("columns"):
        raise QueryRejected("a column list on the table alias", "refer to the table's own column names")
    name, alias = node.name.lower(), node.alias_or_name
    if name in cat.ctes:
        # A CTE reads only the CTEs before it (sqlglot resolves a name in its own body to the table),
        # so this cannot recur; the guard keeps that a checked fact, not a belief.
        if name in cat.binding or len(cat.binding) > 64:
            raise QueryRejected(f"the common table expression {name!r}", "it reads itself, or CTEs nest too deep")
        cat.binding.append(name)
        try:
            return _cte_instance(cat.ctes[name], alias, cat, extra, preserved)
        finally:
            cat.binding.pop()
    t = cat.policy_table(name)
    if t is not None:
        columns = cat.columns(t)
        return Instance(alias, "protected", t.source or t.name, columns, unit=t.privacy_unit, link=t.link,
                        unique=t.privacy_unit is not None and cat.unique(t, t.privacy_unit),
                        not_null=t.privacy_unit is not None and cat.not_null(t, t.privacy_unit),
                        rows=t.max_rows_per_unit, groups=t.max_groups_per_unit, policy=t)
    if name in cat.public:
        inexact = cat.inexact(name)
        columns = {c: ColumnInfo(c, ty, public=True, inexact=c in inexact) for c, ty in cat.public[name].items()}
        return Instance(alias, "public", name, columns)
    raise QueryRejected(f"the table {name!r}", "the policy does not declare it public",
                        _or_ask(table_hint(name, cat.policy, cat.public)))


def _cte_instance(body: exp.Select, alias: str, cat: Catalog, extra: list[exp.Expression],
                  preserved: bool) -> Instance:
    if body.args.get("group") or any(body.find_all(exp.AggFunc)):
        inst = per_unit_instance(body, alias, cat)
        if inst.per_unit is not None and inst.per_unit.where is not None:
            if not preserved:
                raise QueryRejected("a filtered per-unit subquery on the NULL side of a LEFT JOIN",
                                    "its filter cannot be moved to WHERE; join it with an INNER JOIN")
            # its WHERE, as a flag of the joined row: the unit counts only with a passing row
            extra.append(exp.GT(this=exp.column(PER_UNIT_HITS, table=alias), expression=exp.Literal.number(0)))
        return inst
    return _row_cte(body, alias, cat, extra, preserved)


def _row_cte(body: exp.Select, alias: str, cat: Catalog, extra: list[exp.Expression], preserved: bool) -> Instance:
    """A row-level CTE that sqlglot did not merge (it is read twice, or it is a derived table that
    eliminate_subqueries made a CTE): one FROM item (a table, or another CTE, row-level or per-unit),
    plain columns (renamed or not) and a WHERE, read as that item under the reference's alias, its
    WHERE (checked here, at that alias) added to the query's own: for an INNER join or the first FROM
    item, a row of the join passes it exactly when the CTE's row does. Reading a CTE is reading its
    item's rows unchanged, so the item's facts (unit, uniqueness, limits, per-unit bounds) carry over."""
    src = body.args.get("from_")
    if (body.args.get("joins") or body.args.get("distinct") or body.args.get("limit") or body.args.get("offset")
            or body.args.get("order") or src is None or not isinstance(src.this, exp.Table)):
        raise QueryRejected("this common table expression", "a CTE read more than once must select plain "
                            "columns of one table or CTE (with a WHERE), so that it can be inlined")
    inner_alias = src.this.alias_or_name
    inner_extra: list[exp.Expression] = []
    base = _instance(src.this, cat, inner_extra, preserved=preserved)

    def realias(c: exp.Expression) -> exp.Expression:
        if isinstance(c, exp.Column) and c.table == inner_alias:
            return exp.column(c.name, table=alias)
        return c
    # the inner item's own row flags (a per-unit CTE's WHERE), now at this alias
    extra.extend(e.transform(realias) for e in inner_extra)
    full = replace(base, alias=alias)
    columns: dict[str, ColumnInfo] = {}
    for item in body.expressions:
        node = item.unalias() if isinstance(item, exp.Alias) else item
        if not isinstance(node, exp.Column) or node.name.lower() not in base.columns:
            raise QueryRejected("an expression in a CTE read more than once", "select plain columns there")
        columns[item.alias_or_name.lower()] = base.columns[node.name.lower()]
    where = body.args.get("where")
    if where is not None:
        if not preserved:
            raise QueryRejected("a filtered CTE on the NULL side of a LEFT JOIN",
                                "its filter cannot be moved to WHERE; write the condition in WHERE instead")
        check = Predicates(tracking(lambda c, w: resolve_in([full], c)), cat.dialect)
        extra.append(check.check(where.this.copy().transform(realias)))
    return replace(base, alias=alias, columns=columns)


def _join(j: exp.Join, left: list[Instance], cat: Catalog, classes: UnitClasses,
          extra: list[exp.Expression]) -> JoinStep:
    side, kind = (j.args.get("side") or "").upper(), (j.args.get("kind") or "").upper()
    if kind == "OUTER" and side == "LEFT":          # LEFT OUTER JOIN is LEFT JOIN
        kind = ""
    if j.args.get("method") or kind in ("CROSS", "NATURAL", "SEMI", "ANTI", "ASOF", "OUTER", "STRAIGHT_JOIN"):
        raise QueryRejected(f"{kind or j.args.get('method')} JOIN", "joins must be equi-joins (ON a = b)")
    if side in ("RIGHT", "FULL"):
        raise QueryRejected(f"{side} JOIN", "it would NULL-extend a protected table's side",
                            "write it as a LEFT JOIN with the protected table first")
    on = j.args.get("on")
    if on is None and j.meta.get("comma") == "mixed":
        raise QueryRejected("a comma-separated FROM list beside JOIN", "PostgreSQL would join the JOINs first, "
                            "and the comma items only through WHERE",
                            "write every join as JOIN ... ON, or list every table with commas and join them in WHERE")
    if on is None and j.meta.get("comma"):
        name, first = j.this.alias_or_name, left[0].alias
        raise QueryRejected(f"the comma join of {name!r} with no equality joining it (a cross join)",
                            "it pairs every row with every other row; WHERE must equate a column of "
                            f"{name!r} with a column of a table before it",
                            f"... FROM {first}, {name} WHERE {first}.x = {name}.y (or {first} JOIN {name} ON "
                            f"{first}.x = {name}.y)")
    if on is None:
        raise QueryRejected("a join without ON (a cross join)", "it pairs every row with every other row",
                            "join on equal columns: ON a.x = b.x")
    inst = _instance(j.this, cat, extra, preserved=side != "LEFT")
    if side == "LEFT" and inst.protected and not any(i.protected for i in left):
        raise QueryRejected("a LEFT JOIN onto a protected table", "it would NULL-extend the protected side",
                            "put the protected table first")
    scope = left + [inst]
    pairs, others = [], []
    for cond in conjuncts(on):
        if isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column) and isinstance(cond.expression, exp.Column):
            a, b = (resolve_in(scope, c) for c in (cond.this, cond.expression))
            seen: dict[str, str] = {}
            one_collation(seen, a[1])
            one_collation(seen, b[1])
            if a[0][0] != b[0][0]:
                pairs.append((cond, a, b))
                continue
        others.append(cond)
    if not pairs:
        raise QueryRejected("this join condition", "ON must equate a column of each side (a.x = b.y)")
    check = Predicates(tracking(lambda c, where: resolve_in(scope, c)), cat.dialect)
    if others:
        # Any other condition of an INNER join (an analyst's, or the WHERE of a subquery sqlglot
        # merged into ON) keeps exactly the joined rows that pass it: it is a row condition of the
        # query, evaluated with its WHERE (per row, in FILTER), never in ON where the engine could
        # push it into a scan. On the NULL side of a LEFT JOIN it would not be, so it is refused.
        if side == "LEFT":
            raise QueryRejected("this LEFT JOIN condition", "ON takes equalities between columns of the two sides "
                                "(a.x = b.y), joined by AND; other conditions would change which rows are NULL-"
                                "extended", "keep the equalities in ON and put the condition in FILTER on what reads the joined "
                                "table: COUNT(o.o_orderkey) FILTER (WHERE o.o_comment NOT LIKE '%x%'); or use an "
                                "INNER JOIN and WHERE")
        extra.extend(check.check(c) for c in others)
    sql = []
    for cond, (ra, ia), (rb, ib) in pairs:
        _join_column(scope, ra, ia, rb, ib)
        sql.append(check.check(cond))          # totality: identical types or a cast that cannot fail
        if same_type(ia.sql_type, ib.sql_type):
            classes.union(ra, rb)
    on_sql = sql[0]
    for s in sql[1:]:
        on_sql = exp.And(this=on_sql, expression=s)
    return JoinStep("left" if side == "LEFT" else "inner", inst, on_sql)


def _join_column(scope: list[Instance], ra: ColRef, ia: ColumnInfo, rb: ColRef, ib: ColumnInfo) -> None:
    """A join equality's columns. A protected table's column must be declared (or be its unit or
    link), as in WHERE: a join is a filter too. And a column that identifies people (the unit, a
    link, an identifier) is never equated with a public table's: the public table's values would
    then select people by identity (WHERE t.x = 17 on a list of ids), past the reconstruction
    defence, which reads the analyst's WHERE."""
    insts = {i.alias: i for i in scope}
    sides = [(insts[ra[0]], ra[1], ia), (insts[rb[0]], rb[1], ib)]
    for inst, col, info in sides:
        if inst.kind != "protected":
            continue
        link = (inst.link.column,) if inst.link else ()
        keys = {lk.key for i in scope if i.link is not None for lk in (i.link,)}
        if not (info.declared or col == inst.unit or col in link or col in keys):
            owner = inst.policy.name if inst.policy is not None else inst.alias
            raise QueryRejected(f"the column {col!r}", f"it is not declared in the policy for table {owner!r}",
                                "ask the data owner to declare it (bounds or a public value domain)")
    kinds = {s[0].kind for s in sides}
    if "public" in kinds and kinds & {"protected", "per_unit"}:
        for inst, col, info in sides:
            if inst.kind != "public" and (col == inst.unit or info.identifier
                                          or (inst.link is not None and col == inst.link.column)):
                raise QueryRejected(f"joining a public table on {col!r}",
                                    "the column identifies people: the public table's rows would select them "
                                    "by identity", "join public tables on other columns")


def _finish(first: Instance, steps: list[JoinStep], classes: UnitClasses, cat: Catalog) -> Relation:
    instances = [first] + [s.instance for s in steps]
    units: dict[str, ColRef] = {}
    for inst in instances:
        if inst.kind != "public" and inst.unit is not None:
            units[inst.alias] = (inst.alias, inst.unit)
            classes.find(units[inst.alias])
    # Links: a linked table's unit is the unit of the row its link column points at.
    for inst in list(instances):
        if inst.kind == "public" or inst.link is None:
            continue
        units[inst.alias] = _link_unit(inst, instances, steps, classes, cat, units)
    for inst in instances:      # the columns read without being named: units, links, link keys
        if inst.kind == "public":
            continue
        read = [(inst.unit, " (the privacy unit)")] if inst.unit is not None else []
        if inst.link is not None:
            read.append((inst.link.column, " (a link)"))
        read += [(i.link.key, " (a link's key)") for i in instances if i.link is not None
                 and inst.policy is not None and i.link.table == inst.policy.name]
        for col, role in read:
            info = inst.columns.get(col)
            if info is not None:
                exact_equality(info, role)
    protected = [i for i in instances if i.kind != "public"]
    if not protected:
        return Relation(first, tuple(steps))
    roots = {classes.find(units[i.alias]) for i in protected}
    if len(roots) > 1:
        names = [i.alias for i in protected]
        raise QueryRejected(f"the join of {', '.join(repr(n) for n in names)}",
                            "protected tables can be joined only on equality of their privacy units "
                            "(at the same type), so that each joined row belongs to one person",
                            "add the unit equality to ON, e.g. a.person_id = b.person_id")
    unit = units[protected[0].alias]
    unit_inst = next(i for i in instances if i.alias == unit[0])
    written = [i for i in protected if not i.implicit]
    unique = all(i.unique for i in written) and all(
        _public_unique(s, cat) for s in steps if s.instance.kind == "public")
    rows, groups = _join_limits(first, steps, cat) if not unique else (1, 1)
    return Relation(first, tuple(steps), unit=unit, unit_unique=unique, unit_not_null=unit_inst.not_null,
                    rows_per_unit=min(rows, 1_000_000), groups_per_unit=min(groups, 1_000_000),
                    unit_class=classes.members(unit))


def _unique_columns(inst: Instance, cat: Catalog) -> set[ColRef]:
    """Columns the engine guarantees unique in one FROM item (a per-unit subquery: its unit)."""
    if inst.kind == "per_unit":
        return {(inst.alias, inst.unit)} if inst.unit is not None else set()
    f = cat.facts.get(inst.ref)
    return {(inst.alias, c) for c in (getattr(f, "unique", None) or ())}


def _join_limits(first: Instance, steps: list[JoinStep], cat: Catalog) -> tuple[int, int]:
    """How many rows of the joined relation one unit can have in one group, and in how many
    groups, when each protected table's rows keep within its own limits: the clamp parameters m
    and L0 of bounding.

    Joining L and B on L.x = B.k where the engine guarantees k unique in B (a foreign key to a
    primary key, lineitem to its order) matches each row of L with at most one row of B: each
    joined row is determined by its row of L (so is its group), the unit's joined rows in a group
    are at most L's, in at most L's groups, and L's unique columns stay unique. Symmetrically when x
    is unique in L (an INNER join). Otherwise each row of L can meet each of B's: the product.
    For LEFT JOIN only the first rule applies (an unmatched row of L stays, NULL-extended).

    This bounds utility, not privacy: m and L0 are clamps that the rewrite enforces whatever the
    data hold (rewrite/per_unit, group_choice, totals), and the sensitivity follows from the
    clamps alone (dpsql.analysis.sensitivity). A uniqueness the engine stopped guaranteeing would
    only make the clamps clip; it is still checked when each query runs, with every fact the
    plan read (engines' run(expect=...)). Public tables add no unit's rows here (their fan-out is
    bounded by the same clamps: see the module docstring of dpsql.analysis.relation); one whose
    ON misses a unique key of its own can repeat the rows before it, so their keys stop being
    unique."""
    limit: tuple[int, int] | None = None
    uniq: set[ColRef] = set()
    items: list[tuple[Instance, JoinStep | None]] = [(first, None)] + [(s.instance, s) for s in steps]
    for inst, step in items:
        if inst.kind == "public":
            if step is not None and not _public_unique(step, cat):
                uniq = set()
            continue
        own = (inst.rows, inst.groups) if not inst.implicit else (1, 1)
        mine = _unique_columns(inst, cat)
        if limit is None:
            limit, uniq = own, mine
            continue
        left_unique = right_unique = False
        for c in conjuncts(step.on) if step is not None else ():
            if not (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Column)):
                continue
            for a, b in ((c.this, c.expression), (c.expression, c.this)):
                if b.table == inst.alias and a.table != inst.alias:
                    right_unique |= (inst.alias, b.name) in mine
                    left_unique |= (a.table, a.name) in uniq
        if step is not None and step.kind == "left":
            left_unique = False
        if right_unique and left_unique:
            limit, uniq = (min(limit[0], own[0]), min(limit[1], own[1])), uniq | mine
        elif right_unique:
            pass                                   # each row of L meets at most one of B
        elif left_unique:
            limit, uniq = own, mine                # each row of B meets at most one of L
        else:
            limit, uniq = (limit[0] * own[0], limit[1] * own[1]), set()
    return limit if limit is not None else (1, 1)


def _public_unique(step: JoinStep, cat: Catalog) -> bool:
    """A public join adds no rows per protected row when its ON equates a column the engine
    guarantees unique in the public table."""
    f = cat.facts.get(step.instance.ref)
    uniq = set(getattr(f, "unique", None) or ())
    return any(isinstance(c, exp.EQ) and any(isinstance(s, exp.Column) and s.table == step.instance.alias
                                             and s.name in uniq for s in (c.this, c.expression))
               for c in conjuncts(step.on))


def _link_unit(inst: Instance, instances: list[Instance], steps: list[JoinStep], classes: UnitClasses,
               cat: Catalog, units: dict[str, ColRef]) -> ColRef:
    """The unit column of a linked instance: through an instance of the linked table that the
    query joins on link column = key, or through a join dpsql adds (INNER: a row whose link
    points nowhere belongs to nobody and is dropped, as a NULL unit is)."""
    link = inst.link
    assert link is not None
    target = cat.policy.tables[link.table]
    if not cat.unique(target, link.key):
        raise QueryRejected(f"the link {inst.policy.name if inst.policy else inst.alias}.{link.column} -> "
                            f"{link.table}.{link.key}",
                            f"the engine does not guarantee {link.table}.{link.key} is unique (a PRIMARY KEY or "
                            "UNIQUE constraint), so a row could belong to several people")
    mine = (inst.alias, link.column)
    for other in instances:
        if other.policy is target and classes.same(mine, (other.alias, link.key)) and other.alias in units:
            return units[other.alias]
    alias = cat.fresh("_l")
    cols = cat.protected[target.name]
    columns = cat.columns(target)
    own = cat.protected[inst.policy.name] if inst.policy is not None else {}
    if not same_type(own.get(link.column, "?"), cols.get(link.key, "")):
        raise QueryRejected(f"the link {link.column} -> {link.table}.{link.key}",
                            "the two columns have different types, so matching them could convert values")
    added = Instance(alias, "protected", target.source or target.name, columns, unit=target.privacy_unit,
                     link=target.link, unique=False, not_null=target.privacy_unit is not None
                     and cat.not_null(target, target.privacy_unit), rows=1, groups=1, policy=target, implicit=True)
    on = exp.EQ(this=exp.column(link.column, table=inst.alias), expression=exp.column(link.key, table=alias))
    steps.append(JoinStep("inner", added, on))
    instances.append(added)
    classes.union(mine, (alias, link.key))
    if added.link is not None:
        units[alias] = _link_unit(added, instances, steps, classes, cat, units)
    else:
        units[alias] = (alias, target.privacy_unit)
        classes.find(units[alias])
    return units[alias]
