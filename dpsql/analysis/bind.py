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

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.predicates import NUMERIC, Predicates, family, one_collation, same_type, tracking
from dpsql.analysis.relation import (
    PER_UNIT_HITS,
    ColRef,
    ColumnInfo,
    Instance,
    JoinStep,
    PerUnit,
    PerUnitAggregate,
    Relation,
    UnitClasses,
)
from dpsql.analysis.suggest import table_hint
from dpsql.analysis.suggest import undeclared_table_hint as _or_ask
from dpsql.dialects import EngineDialect
from dpsql.errors import QueryRejected
from dpsql.policy import Policy, TablePolicy

PER_UNIT_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


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
        inst = _per_unit(body, alias, cat)
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
        check = Predicates(tracking(lambda c, w: _resolve_in([full], c)), cat.dialect)
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
    for cond in _conjuncts(on):
        if isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column) and isinstance(cond.expression, exp.Column):
            a, b = (_resolve_in(scope, c) for c in (cond.this, cond.expression))
            seen: dict[str, str] = {}
            one_collation(seen, a[1])
            one_collation(seen, b[1])
            if a[0][0] != b[0][0]:
                pairs.append((cond, a, b))
                continue
        others.append(cond)
    if not pairs:
        raise QueryRejected("this join condition", "ON must equate a column of each side (a.x = b.y)")
    check = Predicates(tracking(lambda c, where: _resolve_in(scope, c)), cat.dialect)
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


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _resolve_in(scope: list[Instance], col: exp.Column) -> tuple[ColRef, ColumnInfo]:
    """The column a qualified reference names. Every column a query reads (in any clause, at any
    depth: keys, aggregates, WHERE, ON, semi-joins, per-unit subqueries) is resolved here, so
    exact_equality is checked here for all of them."""
    if not col.table:
        raise QueryRejected(f"the column {col.name!r}", "it could not be resolved to a table")
    for inst in scope:
        if inst.alias == col.table:
            info = inst.columns.get(col.name.lower())
            if info is None:
                raise QueryRejected(f"the column {col.name!r}", f"it is not a column of {inst.alias!r}")
            exact_equality(info)
            return (inst.alias, info.name), info
    raise QueryRejected(f"the qualifier {col.table!r}", "it is not a table or alias of this query")


def exact_equality(info: ColumnInfo, role: str = "") -> None:
    """Refuse to read a column whose equality in the engine is not the equality of its text.

    The attack. A column with a case- or accent-insensitive collation (DuckDB's COLLATE NOCASE,
    NOACCENT, NFC or an ICU locale; a PostgreSQL ICU collation created with deterministic = false;
    PostgreSQL's citext type, whose = compares lower-cased text) makes the engine hold 'CA' and
    'ca' equal. GROUP BY then merges them into one group and prints it with the spelling of the
    first row it meets, and that row may be one person's. The release looks each key's text up
    in the public domain by exact string (session._domain_lookup; partition selection releases
    the text itself): when the one person who wrote 'ca' is met first, the whole group of 'CA'
    is dropped (released as 0 plus noise) or released under that person's spelling. Either way
    the output reveals that person's row with certainty, at any epsilon: the released key is no
    longer a function of the group's value, which the privacy of a released key relies on
    (partition selection, Korolova et al. 2009 and Desfontaines et al. 2022, releases keys whose
    value many units share; a public domain releases only its own values: REFERENCES.md,
    "Bounding contributions and groups"). The same equality decides the other places dpsql lets
    the engine compare text: joins of the parts of a query (quantiles, sample-and-aggregate,
    COUNT(DISTINCT), top-k) on the keys' text, a key IN its domain, a WHERE comparison with a
    declared value (V5 narrows a domain by Python's equality), COUNT(DISTINCT col), joins and
    semi-joins, and the privacy unit itself: two people whose ids differ only in case would be
    one unit to the engine, and removing one of them would change that unit's bounded
    contribution in up to twice the groups (L0) the sensitivity counts (Wilson et al. 2020).

    The rule: one equality, the text's, everywhere. The engine reports which columns it compares
    otherwise (engines.base.TableFacts.inexact, read from its catalog with the other facts and
    checked again in each query's own transaction, on connections passed in by their owner too),
    and no private query reads one: every column reference resolves through _resolve_in, which
    calls this, and the columns a query reads without naming them (its units, links and link
    keys) are checked in _finish. Refusing every read, not only the comparisons, keeps the rule
    one check with no list of places to miss; what is lost is COUNT(col) and IS NULL of such a
    column. A DuckDB connection whose default_collation is not binary compares every text so,
    literals and dpsql's own key texts included: analyze refuses every private query on it
    (analyze._check_collation)."""
    if not info.inexact:
        return
    raise QueryRejected(f"the column {info.name!r}{role}",
                        "the engine compares its values by a non-deterministic collation or a type of its own "
                        "(a case- or accent-insensitive collation, citext), so differently spelled values would "
                        "be one group shown with the spelling of whichever row the engine meets first: the "
                        "answer could reveal one person's row",
                        "ask the data owner for a view that gives the column an exact equality and declare its "
                        "domain in that spelling, e.g. lower(col) COLLATE \"C\" on PostgreSQL (lower(col::text) "
                        "for citext), lower(col) COLLATE \"binary\" on DuckDB")


def _unit_ref(inst: Instance) -> ColRef | None:
    return (inst.alias, inst.unit) if inst.unit is not None else None


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
        for c in _conjuncts(step.on) if step is not None else ():
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
               for c in _conjuncts(step.on))


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


# ----------------------------------------------------------------------------- per-unit subqueries

def exact_bounds(lo: Fraction, hi: Fraction, sql_type: str, whole: bool) -> tuple[Fraction, Fraction, int]:
    """Per-row clamp bounds and the integer scale the engine sums at.

    Integer columns with whole bounds sum as themselves (scale 1). Anything else is clamped in
    its own type, multiplied by scale = 10^s and cast to BIGINT (rounding), then clamped again to
    the bounds rounded outward to that grid: the cast of a large double need not round exactly,
    the second clamp makes the bounds hold whatever it does (for DOUBLE inputs with bounds * scale
    within 2^50 it provably holds without it, and the rewrite leaves it out: cast_in_bounds). Those
    outward bounds are what the sensitivity uses. |bound| * scale stays below 10^17, so the cast
    cannot overflow.
    """
    if family(sql_type) == "int" and whole:
        return lo, hi, 1
    digits = len(str(int(max(abs(lo), abs(hi))))) + 1
    scale = 10 ** max(0, min(6, 17 - digits))
    return Fraction(math.floor(lo * scale), scale), Fraction(math.ceil(hi * scale), scale), scale


#: Types whose clamp-scale-round (dpsql.rewrite.clip.scaled_cast) provably lands in the integer
#: bounds: IEEE binary64 (every engine's DOUBLE), and PostgreSQL's unconstrained NUMERIC (the `real`
#: type fractional expressions are computed in there), whose arithmetic is exact.
CAST_IN_BOUNDS_TYPES = frozenset({"double", "double precision", "float8", "float64", "numeric"})
CAST_IN_BOUNDS_LIMIT = 2 ** 50


def cast_in_bounds(sql_type: str, lo: Fraction, hi: Fraction, scale: int) -> bool:
    """Whether CAST(clamp(x, lo, hi) * scale AS BIGINT) is always in [lo*scale, hi*scale], so the
    second (integer) clamp of exact_bounds can be left out.

    lo and hi are on the 10^-s grid (exact_bounds), so L = lo*scale and H = hi*scale are integers;
    require |L|, |H| <= 2^50 and scale = 10^s <= 10^22 (exactly representable in binary64).

    binary64 (round to nearest): the clamp compares in the column's type and returns x itself, or
    the bound literal converted to it, fl(hi) or fl(lo) (a NULL stays NULL; NaN compares above
    every number on DuckDB, PostgreSQL and Spark, so it becomes fl(hi); +-Infinity become the
    bounds). So v = clamp(x) satisfies fl(lo) <= v <= fl(hi). The product fl(v * scale) is
    monotone in v (a correctly rounded multiplication by a positive constant), so it lies between
    fl(fl(lo) * scale) and fl(fl(hi) * scale). Now |fl(hi) - hi| <= |hi| * 2^-53, so
    |fl(hi) * scale - H| <= |H| * 2^-53 <= 1/8, and rounding that product moves it by at most half
    an ulp at magnitude <= 2^50 + 1/8, i.e. 1/8 (2^51 would make it 1/4). So fl(fl(hi) * scale) is
    within 1/4 of H, and likewise for L. The final rounding to an integer (DuckDB's CAST rounds
    half away from zero, PostgreSQL's half to even, Spark's ROUND half up; each is monotone and
    maps every number within 1/4 of an integer to that integer) therefore gives a result in
    [L, H]. NUMERIC (PostgreSQL): the clamp, the product and the bounds are exact, and L, H are
    integers, so the cast returns an integer in [L, H] outright.

    Other types keep both clamps: FLOAT/REAL (binary32: fl32(hi) * 10^6 can be thousands of units
    above H), DECIMAL columns (DuckDB may compare and scale them through DOUBLE of a scaled
    integer beyond 2^53), integers with fractional bounds. tests/rewrite/test_cast_in_bounds.py
    checks the argument numerically and on the engines."""
    return (sql_type.strip().lower() in CAST_IN_BOUNDS_TYPES and 1 < scale <= 10 ** 22
            and max(abs(lo * scale), abs(hi * scale)) <= CAST_IN_BOUNDS_LIMIT
            and (lo * scale).denominator == 1 and (hi * scale).denominator == 1)


def _per_unit(body: exp.Select, alias: str, cat: Catalog) -> Instance:
    """`SELECT unit [AS u], agg(col) AS name, ... FROM relation [WHERE p] GROUP BY unit`.

    Each unit's rows in the inner relation are at most R = max rows x max groups (the limits of
    every query on that relation), so each aggregate gets bounds from the limits and the
    declared bounds: COUNT in [0, R]; SUM in [min(0, R lo), max(0, R hi)] (exact, on the scale
    grid); AVG, MIN and MAX of values clamped to [lo, hi] in [lo, hi]. The rewrite clamps every
    value to these bounds, so they hold whatever the data (dpsql.rewrite.relation). The result
    has one row per unit: a relation whose unit is unique."""
    for key, what in (("having", "HAVING"), ("distinct", "DISTINCT"), ("order", "ORDER BY"),
                      ("limit", "LIMIT"), ("offset", "OFFSET")):
        if body.args.get(key):
            raise QueryRejected(f"{what} in a per-unit subquery", "an inner aggregate query may only group by "
                                "the privacy unit")
    extra: list[exp.Expression] = []
    rel = bind(body, cat, where_conjuncts=extra)
    if rel.unit is None:
        raise QueryRejected("an aggregate subquery over public tables", "it is not supported yet")
    group = body.args.get("group")
    if group is None or len(group.expressions) != 1 or not isinstance(group.expressions[0], exp.Column):
        raise QueryRejected("an aggregate subquery in FROM", "an inner query must be grouped by the privacy unit "
                            "alone (one row per person); aggregate the outer query over it")
    gref, _ = _resolve_in(list(rel.instances), group.expressions[0])
    if gref not in rel.unit_class:
        raise QueryRejected("an aggregate subquery grouped by another column",
                            "an inner query must be grouped by the privacy unit alone")
    where = body.args.get("where")
    pred = None
    if where is not None:
        from dpsql.analysis.semijoin import SemiJoins
        semis = SemiJoins(rel, cat)
        check = Predicates(tracking(lambda c, w: _resolve_in(list(rel.instances), c)), cat.dialect, semis.handle)
        pred = check.check(where.this)
        rel = semis.attach(rel)
    if extra:
        pred = _and_all(([pred] if pred is not None else []) + extra)
    R = rel.rows_per_unit * rel.groups_per_unit
    unit_name = None
    aggs: list[PerUnitAggregate] = []
    columns: dict[str, ColumnInfo] = {}
    for item in body.expressions:
        name = item.alias_or_name.lower()
        if name == PER_UNIT_HITS:
            raise QueryRejected(f"the name {name!r}", "dpsql uses it itself", "choose another alias")
        if name in columns:       # the outer query could not tell them apart (PostgreSQL: ambiguous)
            raise QueryRejected(f"two columns named {name!r} in a per-unit subquery",
                                "each item needs its own name", "give each a distinct alias with AS")
        node = item.unalias() if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Column):
            ref, info = _resolve_in(list(rel.instances), node)
            if ref not in rel.unit_class:
                raise QueryRejected(f"the column {node.name!r} in a per-unit subquery",
                                    "only the privacy unit and aggregates can be selected there")
            unit_name = name
            columns[name] = ColumnInfo(name, info.sql_type)
            continue
        if not isinstance(node, PER_UNIT_AGGREGATES):
            raise QueryRejected("this expression in a per-unit subquery",
                                "select the unit and COUNT, SUM, AVG, MIN or MAX of declared columns")
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise QueryRejected(f"{node.sql_name()}(DISTINCT ...)", "not supported in a per-unit subquery yet")
        if isinstance(node, exp.Count) and isinstance(arg, exp.Star):
            aggs.append(PerUnitAggregate(name, "count", None, (Fraction(0), Fraction(R))))
            columns[name] = ColumnInfo(name, "BIGINT", bounds=(Fraction(0), Fraction(R)), integral=True)
            continue
        if not isinstance(arg, exp.Column):
            raise QueryRejected(f"{node.sql_name()} of an expression", "aggregate a declared column")
        ref, info = _resolve_in(list(rel.instances), arg)
        col_sql = exp.column(ref[1], table=ref[0])
        if isinstance(node, exp.Count):
            if not info.declared and ref not in rel.unit_class:
                raise QueryRejected(f"the column {arg.name!r}", "it is not declared in the policy")
            aggs.append(PerUnitAggregate(name, "count", col_sql, (Fraction(0), Fraction(R))))
            columns[name] = ColumnInfo(name, "BIGINT", bounds=(Fraction(0), Fraction(R)), integral=True)
            continue
        fname = node.sql_name()
        if not info.bounded or family(info.sql_type) not in NUMERIC:
            raise QueryRejected(f"{fname}({arg.name})", "the column has no declared bounds, so one person's "
                                "influence on the result is unbounded",
                                "ask the data owner to declare lower and upper bounds")
        lo, hi, scale = exact_bounds(*info.range(), info.sql_type, info.whole_bounds)
        if isinstance(node, exp.Sum):
            b = (min(Fraction(0), R * lo), max(Fraction(0), R * hi))
            aggs.append(PerUnitAggregate(name, "sum", col_sql, b, (lo, hi), scale))
            whole = scale == 1
            columns[name] = ColumnInfo(name, "BIGINT" if whole else "DOUBLE", bounds=b, integral=whole)
        else:
            kind = {exp.Avg: "avg", exp.Min: "min", exp.Max: "max"}[type(node)]
            aggs.append(PerUnitAggregate(name, kind, col_sql, (lo, hi), (lo, hi), scale))
            whole = kind != "avg" and scale == 1
            columns[name] = ColumnInfo(name, info.sql_type if kind != "avg" else "DOUBLE", bounds=(lo, hi),
                                       integral=whole)
    if unit_name is None:
        raise QueryRejected("a per-unit subquery without its unit", "select the privacy unit it is grouped by, "
                            "so that the outer query can bound each person")
    pu = PerUnit(rel, pred, unit_name, tuple(aggs), R)
    return Instance(alias, "per_unit", "", columns, unit=unit_name, unique=True, not_null=True, rows=1, groups=1,
                    per_unit=pu)


def _and_all(conds: list[exp.Expression]) -> exp.Expression:
    out = conds[0]
    for c in conds[1:]:
        out = exp.And(this=exp.Paren(this=out) if isinstance(out, exp.Or) else out,
                      expression=exp.Paren(this=c) if isinstance(c, exp.Or) else c)
    return out


def resolver(rel: Relation) -> Callable[[exp.Column, str], tuple[ColRef, ColumnInfo]]:
    return lambda c, where: _resolve_in(list(rel.instances), c)
