"""The end of a private query's analysis: its L0 and per-unit row bound, the work limits, the split
of epsilon and delta over its parts (measures, distinct counts, quantiles, partition selection:
each a measures.Part with its own NoiseSpec), and the QueryPlan. A mixin of
dpsql.analysis.private_query.Analysis: it reads self.settings, self.policy, self.rel, self.keys,
self.measures and self.norm."""
from __future__ import annotations

import math

from sqlglot import exp

from dpsql.analysis import distinct as distinct_counts
from dpsql.analysis import quantiles as quantile_measures
from dpsql.analysis import reconstruction
from dpsql.analysis import sensitivity as sens
from dpsql.analysis.measures import Count, Mechanism, NoiseSpec
from dpsql.analysis.plan import QueryPlan, Selection
from dpsql.analysis.relation import Relation
from dpsql.ledger.accounting import Cost
from dpsql.errors import QueryRejected

MAX_PUBLIC_GROUPS = 1_000_000


class Budget:
    """Bounds, limits, the budget split and the plan."""

    # -- a refusal: delta = 0
    def _no_delta(self, selection: bool, gaussian: bool) -> QueryRejected:
        """The refusal of a query that needs a delta when the session's is 0, with a fix the
        analyst can apply, or, when the policy gives the analyst no delta at all, what its
        administrator can change."""
        s = self.settings
        open_keys = [k.column for k in self.keys if k.domain is None]
        what = ("partition selection (GROUP BY " + ", ".join(open_keys) + ", which has no public value "
                "domain, so which groups exist must itself be released privately)") if selection else ""
        if gaussian:
            what = (what + " and " if what else "") + f"the {s.mechanism} mechanism"
        fixes = []
        if gaussian:
            fixes.append("SET dpsql.mechanism = 'laplace'")
        if s.budget_delta is not None and s.budget_delta <= 0:
            reason = f"{what} needs a positive delta, and the policy gives this analyst's budget no delta (delta = 0)"
            admin = []
            if selection:
                admin.append("declare a public value domain for " + ", ".join(open_keys)
                             + " (values = [...] under its [tables.TABLE.columns.COLUMN])")
            admin.append("set a positive budget.delta (e.g. 1e-6) in the policy")
            hint = ("; or ".join(fixes) + "; otherwise " if fixes else "") + \
                "the policy's administrator can " + ", or ".join(admin)
            return QueryRejected("this query", reason, hint)
        fixes.insert(0, "SET dpsql.delta = 1e-7 (any small positive value"
                     + (f" up to the budget's {s.budget_delta:g}" if s.budget_delta else "") + ")")
        return QueryRejected("this query with delta = 0", f"{what} needs a positive delta", "; or ".join(fixes))

    def _check_work(self, domain_size: int | None, per_group: int, quantiles: int) -> None:
        """[limits] max_released_cells and max_quantile_work (dpsql.policy.Limits), before anything
        is charged: the groups are the public domains' product when every key has one (all are
        released, whatever the LIMIT), else max_released_rows; one group without keys. Facts of the
        query and the policy only."""
        lim = self.policy.limits
        groups = 1 if not self.keys else domain_size if domain_size is not None else lim.max_released_rows
        why = ("the product of its keys' public domains" if self.keys and domain_size is not None else
               "max_released_rows: a key has no public domain" if self.keys else "no GROUP BY")
        cells, work = groups * per_group, groups * quantiles
        if cells > lim.max_released_cells:
            raise QueryRejected("this query", f"it demands {groups} groups ({why}) x {per_group} noisy values = "
                                f"{cells} cells, more than the {lim.max_released_cells} one query may demand "
                                "(the policy's max_released_cells)",
                                "group by fewer or narrower keys, or ask for fewer aggregates")
        if work > lim.max_quantile_work:
            raise QueryRejected("this query", f"it demands {groups} groups ({why}) x {quantiles} quantiles = "
                                f"{work} quantile choices, more than the {lim.max_quantile_work} one query may "
                                "demand (the policy's max_quantile_work)",
                                "group by fewer or narrower keys, or ask for fewer quantiles")

    def _text(self) -> str:
        """The query as analysed, in PostgreSQL's SQL without comments (the plan's text). Without
        sqlglot's defensive copy (the generator may change the tree it writes): self.original is
        this analysis's own tree (analyze's copy of the statement's), read by nothing after this,
        and the text of a tree is the text of its copy."""
        return self.original.sql("postgres", comments=False, copy=False)

    # -- finish: split the budget, sensitivities, selection
    def _finish(self, outputs, where, having, order, limit, offset, wraps) -> QueryPlan:
        s, rel = self.settings, self.rel
        bounded = not rel.unit_unique
        rows = rel.rows_per_unit if bounded else 1
        public = all(k.domain is not None for k in self.keys)
        domain_size = math.prod(len(k.domain) for k in self.keys) if public else None
        if domain_size is not None and domain_size > MAX_PUBLIC_GROUPS:
            raise QueryRejected("this GROUP BY", f"its public domains give more than {MAX_PUBLIC_GROUPS} groups")
        most = self.policy.limits.max_released_rows
        final_limit = limit if not wraps else min((w.limit for w in wraps if w.limit is not None), default=limit)
        if domain_size is not None and domain_size > most and (final_limit is None or final_limit > most):
            raise QueryRejected("this GROUP BY", f"its public domains give {domain_size} groups, more than the "
                                f"{most} rows one query may release (the policy's max_released_rows)",
                                f"add LIMIT {most} or fewer, or group by fewer columns")
        if not self.keys or not bounded:
            l0 = 1
        else:
            l0 = rel.groups_per_unit
            if domain_size is not None:
                l0 = min(l0, domain_size)
        group_choice = bounded and bool(self.keys) and (domain_size is None or rel.groups_per_unit < domain_size)
        measures = tuple(self.measures.values())
        quantiles = quantile_measures.plan_quantiles(self)
        distincts = distinct_counts.plan_distincts(self)
        self._check_work(domain_size, len(measures) + len(quantiles) + len(distincts), len(quantiles))
        units_only = bounded and all(isinstance(m, Count) and m.input is None and m.filter is None
                                     and (rows == 1 or m.cap == 1) for m in measures)
        needs_selection = bool(self.keys) and not public
        parts = len(measures) + len(quantiles) + len(distincts) + (1 if needs_selection else 0)
        eps_part = s.epsilon / parts
        gaussian = Mechanism(s.mechanism).gaussian
        delta_parts = (len(measures) + len(distincts) if gaussian else 0) + (1 if needs_selection else 0)
        if delta_parts and s.delta <= 0:
            raise self._no_delta(needs_selection, gaussian)
        delta_part = s.delta / delta_parts if delta_parts else 0.0
        # each part (measure, distinct count, quantile: a measures.Part) at its share of the budget
        noise = [p.noise_spec(s.mechanism, rows, l0, eps_part, delta_part) for p in (*measures, *distincts, *quantiles)]
        selection = sel_noise = None
        if needs_selection:
            thr = sens.selection_threshold(eps_part, delta_part, l0)
            selection = Selection(eps_part, delta_part, l0, thr)
            sel_noise = NoiseSpec("_units", Mechanism.LAPLACE, float(l0), math.sqrt(l0), 1.0, eps_part, 0.0)
        cost = Cost(s.epsilon, s.delta if delta_parts else 0.0)
        table = next(iter(rel.policies))
        first = next(i for i in rel.instances if i.protected)
        ids = frozenset(c for t in rel.policies for c in reconstruction.identity_columns(t))
        subset_where = where
        for sj in _all_semis(rel):
            if sj.where is not None:
                subset_where = sj.where if subset_where is None else exp.And(this=paren(subset_where),
                                                                            expression=paren(sj.where))
        if subset_where is not None:
            subset_where = _canonical_names(subset_where, rel)
        return QueryPlan(
            text=self._text(), table=table, table_ref=first.ref or table.name,
            bounded=bounded, l0=l0, keys=tuple(self.keys), measures=measures, noise=tuple(noise),
            selection=selection, selection_noise=sel_noise, outputs=tuple(outputs), where=where,
            having=having, order=order, limit=limit, offset=offset, cost=cost, mechanism=s.mechanism,
            group_choice=group_choice, domain_size=domain_size, units_only=units_only,
            unit_not_null=rel.unit_not_null, subset=reconstruction.classify(subset_where, ids),
            relation=rel, rows_per_unit=rows, wraps=wraps, names=tuple(self.norm.names), quantiles=quantiles,
            distincts=distincts, public_reads=self.public_reads,
            where_rows=where is not None and self.policy.timing.where == "rows")


def _canonical_names(where: exp.Expression, rel: Relation) -> exp.Expression:
    """Columns named by their table, not by the query's aliases, for the reconstruction defence's
    population: renaming an alias must not start a new subset series (a way round the cap). A
    query reading one table names columns bare; several tables of one name share a population
    (the stricter reading)."""
    tables: dict[str, str] = {}
    for r in rel.walk():
        for i in r.instances:
            tables[i.alias] = i.policy.name if i.policy is not None else (i.ref or i.alias)
        for sj in r.semi:
            tables[sj.name] = sj.name
    single = len(set(tables.values())) == 1

    def rename(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.table in tables:
            return exp.column(node.name) if single else exp.column(node.name, table=tables[node.table])
        return node
    return where.transform(rename)      # (a copy: transform copies)



def _all_semis(rel: Relation):
    for r in rel.walk():
        yield from r.semi



def paren(node: exp.Expression) -> exp.Expression:
    return exp.Paren(this=node) if isinstance(node, exp.Or) else node
