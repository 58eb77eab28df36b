"""Per-query detection of subset selection by identity: the raw material of reconstruction.

Why these patterns. Dinur & Nissim ("Revealing information while preserving privacy",
PODS 2003) show that answers to O(n) *subset* queries -- counts or sums over a subset of
the n units chosen by the attacker -- each with noise of magnitude o(sqrt(n)), let the
attacker reconstruct almost every unit's secret bit by linear-programming decoding. The
attack needs one thing from the query language: a way to name an arbitrary subset of
units. In dpsql's subset that means a WHERE that mentions an identity column (the
table's privacy unit, or a column the policy marks ``identifier = true``) and so picks
units by who they are rather than by what they are:

* ``id = 5`` (kind ``equality``), ``id IN (...)`` (``in_list``) and OR-chains of such
  equalities, nested and parenthesised in any way (``or_chain``) name the subset directly;
* ``id <> 5``, ``NOT id = 5``, ``id NOT IN (...)`` (``exclusion``) name its complement:
  the difference attack, which subtracts "everyone but x" from "everyone" (Gadotti et al.,
  USENIX Security 2019, and Aircloak's attack catalogue);
* ``id BETWEEN a AND b``, ``id < a``, ``id >= a`` (``range``) pick a contiguous block of ids,
  and enough overlapping blocks form a full-rank system for the LP decoder just as well;
* ``name LIKE '12%'`` on an identity column (``pattern``) picks ids by their digits;
* ``id = household`` (``column_comparison``) picks units by comparing the id with data;
* an OR that mixes identity and non-identity predicates (``mixed_or``) still selects by
  identity: ``id = 5 OR age > 200`` is ``id = 5`` with a decoy.

An identity predicate AND-ed with other predicates selects the identity subset of a
*population*; the population is reported as a canonical text (the non-identity
conjuncts' SQL, sorted) so that a caller can tell that a stream of queries probes the
same population with different identity subsets, which is the Dinur--Nissim query pattern.

``id IS NULL`` mentions the unit but is not flagged: rows with a NULL privacy unit are
dropped before aggregation, so it selects no unit at all (``IS NOT NULL`` selects every
unit). On an identifier column ``IS [NOT] NULL`` names no identity value either.

Cohen & Nissim ("Linear Program Reconstruction in Practice", JPC 2020) broke Diffix with
subsets picked by *arithmetic* on the user id (e.g. ``floor(id * c) % 2 = 0`` style
selectors), no OR needed. Such selectors cannot reach this detector: the subset check in
dpsql.analysis.analyze admits no arithmetic and no function in WHERE (only comparisons
between declared columns and literals), so those queries are refused with QueryRejected
before a plan exists (tests/analysis/test_reconstruction.py shows it).

The input is the validated WHERE tree the analysis stores as ``plan.where``: columns
unqualified and lower-case, literals possibly wrapped in ``CAST(... AS DOUBLE)``, and
two-column comparisons possibly ``CAST(col AS DOUBLE)`` on both sides. NOT is pushed
through AND/OR by De Morgan (valid in SQL's three-valued logic), so that, for instance,
``NOT (id = 1 OR age > 3)`` is seen as the exclusion ``id <> 1`` within the population
``NOT age > 3``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from dpsql.policy import TablePolicy

__all__ = [
    "CAP_CEILING",
    "CAP_FLOOR",
    "SubsetPattern",
    "auto_cap",
    "classify",
    "identity_columns",
    "population_key",
]

_POINT = frozenset({"equality", "in_list", "or_chain"})
_RANGE_CMP = (exp.LT, exp.LTE, exp.GT, exp.GTE)


@dataclass(frozen=True, slots=True)
class SubsetPattern:
    """What a WHERE clause does with identity columns."""
    flagged: bool                  # the WHERE selects a subset of units by identity
    kinds: tuple[str, ...]         # e.g. ("equality",), ("in_list",), ("or_chain",), ("range",), ("exclusion",)
    columns: tuple[str, ...]       # identity columns involved (privacy unit and/or identifier columns)
    selected: int | None           # identity values named (IN list length, OR-chain size, 1 for =); None for ranges
    population: str                # canonical text of the non-identity conjuncts, '' if none
    named: frozenset[str] = frozenset()   # the identity values named, as 'column=literal' (query text, not data)

    def describe(self) -> str:
        """One line for EXPLAIN DP."""
        pop = f"; population: {self.population}" if self.population else "; population: all rows"
        cols = ", ".join(self.columns)
        if self.flagged:
            what = " + ".join(self.kinds)
            if self.selected is not None:
                what += f" of {self.selected} value{'' if self.selected == 1 else 's'}"
            return f"subset selection by {cols}: {what}{pop}"
        if "is_null" in self.kinds or "is_not_null" in self.kinds:
            return (f"no subset selection: IS [NOT] NULL on {cols} names no identity value "
                    f"(rows whose privacy unit is NULL are dropped, so 'unit IS NULL' selects no unit){pop}")
        return f"no subset selection by identity{pop}"


def identity_columns(table: TablePolicy) -> frozenset[str]:
    """The privacy unit (or the link column that stands for it) plus every column declared
    ``identifier = true``."""
    unit = table.privacy_unit if table.privacy_unit is not None else (table.link.column if table.link else None)
    return frozenset(({unit.lower()} if unit else set())
                     | {c.name.lower() for c in table.columns.values() if c.identifier})


def classify(where: exp.Expression | None, ids: frozenset[str] | TablePolicy) -> SubsetPattern:
    """Classify a validated WHERE tree (``plan.where``) against identity columns (by name: the
    units and identifier columns of every protected table the query reads)."""
    if where is None:
        return SubsetPattern(False, (), (), None, "")
    if isinstance(ids, TablePolicy):
        ids = identity_columns(ids)
    tree = _nnf(where, False)
    conjuncts = tree.items if isinstance(tree, _Junction) and tree.conj else (tree,)
    population = " AND ".join(sorted({_render(c, top=True) for c in conjuncts if not _mentions(c, ids)}))
    shape = _shape(tree, ids)
    if shape is None:
        return SubsetPattern(False, (), (), None, population)
    selected = len(shape.values) if shape.flag and shape.values is not None else None
    named = frozenset(f"{c}={v}" for c, v in shape.values) if shape.flag and shape.values is not None else frozenset()
    return SubsetPattern(shape.flag, shape.kinds, tuple(sorted(shape.columns)), selected, population, named)


# ----------------------------------------------------------------------------- normal form
# A node is a _Leaf (a condition, perhaps negated) or a _Junction (AND or OR of nodes, flattened:
# no child is a junction of the same kind).

@dataclass(frozen=True, slots=True)
class _Leaf:
    expr: exp.Expression
    negated: bool


@dataclass(frozen=True, slots=True)
class _Junction:
    conj: bool                                  # True: AND, False: OR
    items: tuple[_Leaf | _Junction, ...]


_Node = _Leaf | _Junction


def _nnf(node: exp.Expression, neg: bool) -> _Node:
    """Negation normal form over AND/OR/NOT/Paren, flattened; other nodes are leaves."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Not):
        return _nnf(node.this, not neg)
    if isinstance(node, (exp.And, exp.Or)):
        conj = isinstance(node, exp.And) != neg
        out: list[_Node] = []
        for side in (node.this, node.expression):
            child = _nnf(side, neg)
            out.extend(child.items if isinstance(child, _Junction) and child.conj == conj else [child])
        return _Junction(conj, tuple(out))
    return _Leaf(node, neg)


def _render(node: _Node, top: bool = False) -> str:
    """Canonical SQL of a normal-form node: operands of AND/OR sorted and deduplicated."""
    if isinstance(node, _Leaf):
        return (exp.Not(this=node.expr.copy()) if node.negated else node.expr).sql()
    # a junction's children are leaves or junctions of the other kind, which take parentheses
    parts = {f"({_render(c)})" if isinstance(c, _Junction) else _render(c) for c in node.items}
    text = (" AND " if node.conj else " OR ").join(sorted(parts))
    return f"({text})" if top and not node.conj else text


def _mentions(node: _Node, ids: frozenset[str]) -> bool:
    if isinstance(node, _Leaf):
        return any(c.name.lower() in ids for c in node.expr.find_all(exp.Column))
    return any(_mentions(c, ids) for c in node.items)


# ----------------------------------------------------------------------------- shapes

@dataclass(frozen=True, slots=True)
class _Shape:
    kind: str                                   # the shape as a whole
    kinds: tuple[str, ...]                      # what to report
    columns: frozenset[str]
    values: frozenset[tuple[str, str]] | None   # identity values named, (column, literal SQL)
    flag: bool


def _unique(items) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _shape(node: _Node, ids: frozenset[str]) -> _Shape | None:
    """The identity shape of a normal-form node; None if it mentions no identity column."""
    if not _mentions(node, ids):
        return None
    if isinstance(node, _Leaf):
        return _leaf(node.expr, node.negated, ids)
    subs = [_shape(c, ids) for c in node.items]
    shapes = [s for s in subs if s is not None]
    if len(shapes) == 1 and node.conj:
        return shapes[0]
    columns = frozenset().union(*(s.columns for s in shapes))
    return _and(shapes, columns) if node.conj else _or(shapes, columns, mixed=None in subs)


def _and(shapes: list[_Shape], columns: frozenset[str]) -> _Shape:
    """Several identity conjuncts: a subset of the most selective named set, if any."""
    kinds = _unique(k for s in shapes for k in s.kinds)
    flag = any(s.flag for s in shapes)
    points = [s for s in shapes if s.kind in _POINT and s.values is not None]
    excl = [s for s in shapes if s.kind == "exclusion" and s.values is not None]
    if points:
        best = min(points, key=lambda s: len(s.values))
        return _Shape(best.kind, kinds, columns, best.values, flag)
    if excl:
        return _Shape("exclusion", kinds, columns, frozenset().union(*(s.values for s in excl)), flag)
    kind = "range" if all(s.kind == "range" for s in shapes) else shapes[0].kind
    return _Shape(kind, kinds, columns, None, flag)


def _or(shapes: list[_Shape], columns: frozenset[str], mixed: bool) -> _Shape:
    flag = any(s.flag for s in shapes)
    named = [s for s in shapes if s.flag]
    values = (frozenset().union(*(s.values for s in named))
              if named and all(s.values is not None for s in named) else None)
    if not flag:        # e.g. id IS NULL OR age > 3: no unit is picked by identity
        return _Shape(shapes[0].kind, _unique(k for s in shapes for k in s.kinds), columns, None, False)
    if mixed:
        kind = "mixed_or"
    elif all(s.kind == "range" for s in named):
        kind = "range"
    else:
        kind = "or_chain"
    extra = [k for s in named for k in s.kinds if k not in _POINT and k != kind]
    return _Shape(kind, _unique([kind, *extra]), columns, values, True)


def _column(node: exp.Expression) -> exp.Column | None:
    """The column an operand names (through the analysis' CAST to DOUBLE), else None."""
    if isinstance(node, exp.Cast):
        node = node.this
    return node if isinstance(node, exp.Column) else None


def _leaf(node: exp.Expression, neg: bool, ids: frozenset[str]) -> _Shape:
    if isinstance(node, exp.Escape):        # LIKE ... ESCAPE: the analysis writes every pattern so
        node = node.this
    cols = frozenset(c.name.lower() for c in node.find_all(exp.Column)) & ids

    def shape(kind: str, values=None, flag: bool = True) -> _Shape:
        return _Shape(kind, (kind,), cols, values, flag)

    def named(col: exp.Column, lits) -> frozenset[tuple[str, str]]:
        return frozenset((col.name.lower(), lit.sql()) for lit in lits)

    if isinstance(node, (exp.EQ, exp.NEQ, *_RANGE_CMP)):
        left, right = _column(node.this), _column(node.expression)
        if left is not None and right is not None:
            return shape("column_comparison")
        col, lit = (left, node.expression) if left is not None else (right, node.this)
        if isinstance(node, _RANGE_CMP):
            return shape("range")
        point = isinstance(node, exp.EQ) != neg
        return shape("equality" if point else "exclusion", named(col, [lit]))
    if isinstance(node, exp.In):
        return shape("exclusion" if neg else "in_list", named(node.this, node.expressions))
    if isinstance(node, exp.Between):
        return shape("range")
    if isinstance(node, exp.Is):
        if isinstance(node.expression, exp.Null):
            return shape("is_not_null" if neg else "is_null", flag=False)
        return shape("equality", named(node.this, [node.expression]))      # IS TRUE/FALSE
    if isinstance(node, (exp.Like, exp.ILike)):
        return shape("pattern")
    if isinstance(node, exp.Column):                                      # a boolean identity column
        return shape("equality", named(node, [exp.false() if neg else exp.true()]))
    return shape("other")                                                 # not produced by the analysis


# ----------------------------------------------------------------------------- the cap

CAP_FLOOR = 2       # the difference attack's pair (everyone, everyone but x) needs two; allow one subset
CAP_CEILING = 16    # what any series may reach, however many identity values it names


def auto_cap(named: int | None) -> int:
    """The default ``max_subset_queries`` for a population whose subset queries have named
    ``named`` distinct identity values so far (None: a range or another shape that names none).

    Why this number. Reconstructing n secret bits from counts over subsets of n people needs
    at least n / log2(n + 1) answers even when the answers are exact, since each count is one
    of n + 1 values and carries at most log2(n + 1) bits (the information bound behind
    Dinur & Nissim 2003's lower bound; their LP decoder needs on the order of n answers with
    noise o(sqrt n)). The cap allows a quarter of that bound, so even noise-free answers could
    pin down at most a quarter of the bits; dpsql's answers also carry noise and a surcharge.

    n is read from the queries' text, never from the data: the true population size is itself
    a count of people, and a refusal that depended on it would release it without noise. An
    attacker can inflate the named set with identity values that match nobody, so the cap never
    exceeds CAP_CEILING whatever is named; and shapes that name no values (ranges) get the
    ceiling. The floor CAP_FLOOR keeps one-off lookups usable.
    """
    if named is None:
        return CAP_CEILING
    if named <= 0:
        return CAP_FLOOR
    bound = named / math.log2(named + 1)
    return max(CAP_FLOOR, min(CAP_CEILING, int(bound // 4)))


def population_key(table: str, aggregates: tuple[str, ...], pattern: SubsetPattern) -> str:
    """What makes two subset queries probe the same population: the table, the aggregates
    (sorted) and the canonical non-identity filter. A series is counted per key."""
    aggs = ", ".join(sorted(set(aggregates)))
    return f"{table} | {aggs} | {pattern.population or 'all rows'}"
