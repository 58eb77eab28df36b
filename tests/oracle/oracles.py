"""The oracles: what a release at a huge epsilon on data bounding leaves alone must satisfy.

Every check compares dpsql's released rows with something dpsql did not compute: the plain query
on the same engine, the release on a neighbouring database, the other engine, or the release of
a related query. A released noisy value is judged within K times the 95% half-width the release
itself claims (cur.half_widths; Laplace: P(|noise| > K * hw95) = 20^-K, about 1e-13 at K = 10, so
even a million values give a false failure far rarer than 1 in 10,000), plus a relative 1e-9 for
float arithmetic.

1. value: each released cell equals the plain query's answer on the engine. Keys exactly equal.
   Groups: with public key domains every group with rows is released, and each released group
   without rows has zero counts and sums; with partition selection (threshold 1 + (L0/eps) ln(L0/2
   delta), about 1 at a huge epsilon) a group is released exactly when at least two units have
   rows in it (the plain query's COUNT(DISTINCT unit)). LIMIT releases a true top-k. Every noisy
   cell claims a positive half-width (noise is continuous: a claim of 0 is false). AVG/VARIANCE
   are not judged where the plain answer is NULL (no reference exists).
2. sensitivity: removing one unit's rows everywhere moves each released measure (a plain COUNT,
   SUM or COUNT(DISTINCT unit) output) by at most the per-group sensitivity (Linf) the plan
   charged, and the sum of moves over groups by at most L1 (the DP claim, checked directly).
3. agree: DuckDB and PostgreSQL release the same groups and values.
4. metamorphic: scaling a column's values and bounds by c scales SUM and AVG by c; SUM and COUNT
   over a WHERE equal the sums over the two halves of a split of it.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal

import duckdb

import dpsql
from dpsql.postprocess import Ref
from dpsql.errors import QueryRejected

from tests.oracle.generator import Case, Pair

K = 10.0
REL = 1e-9
EPSILON = 1e9


@dataclass
class Release:
    """A dpsql answer: rows, per-value half-widths, the plan; or why there is none."""
    status: str                        # ok | refused | error
    rows: list[tuple] = field(default_factory=list)
    widths: list[tuple] = field(default_factory=list)
    plan: object = None
    reason: str = ""


@dataclass(frozen=True)
class Mismatch:
    oracle: str
    engine: str
    sql: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.oracle}/{self.engine}] {self.detail}\n    SQL: {self.sql}"


class Target:
    """One database (DuckDB file or PostgreSQL URL): a dpsql connection at a huge epsilon and a
    plain connection running the same SQL directly."""

    def __init__(self, engine: str, location: str, policy: dict):
        self.engine, self.location = engine, location
        self.conn = dpsql.connect(location, policy=policy, analyst="oracle")
        self.cur = self.conn.cursor()
        self.cur.execute(f"SET dpsql.epsilon = {EPSILON:g}")
        if engine == "duckdb":
            from dpsql.engines.duckdb import LOCKED_CONFIG
            self.raw = duckdb.connect(location, read_only=True, config=dict(LOCKED_CONFIG))
        else:
            import psycopg
            self.raw = psycopg.connect(location, autocommit=True)

    def release(self, sql: str) -> Release:
        try:
            plan = self.conn.session.plan(sql)
            self.cur.execute(sql)
            return Release("ok", self.cur.fetchall(), self.cur.half_widths, plan)
        except QueryRejected as err:
            return Release("refused", reason=_reason(err))
        except Exception as err:                     # InternalError and anything else: a failure
            cause = err.__cause__ or err.__context__
            why = f"{type(err).__name__}: {err}" + (f" <- {type(cause).__name__}: {cause}" if cause else "")
            return Release("error", reason=why)

    def plain(self, sql: str) -> list[tuple]:
        if self.engine == "duckdb":
            sql = duckdb_sql(sql)
        return [tuple(r) for r in self.raw.execute(sql).fetchall()]

    def close(self) -> None:
        self.raw.close()
        self.conn.close()


_WIDTH_BUCKET = re.compile(r"WIDTH_BUCKET\(([a-z_]+\.[a-z_]+), (-?[0-9.]+), (-?[0-9.]+), ([0-9]+)\)")


def duckdb_sql(sql: str) -> str:
    """The plain query in DuckDB: it has no WIDTH_BUCKET, so PostgreSQL's definition is spelled out."""
    def spell(m: re.Match) -> str:
        x, lo, hi, n = m.groups()
        return (f"(CASE WHEN {x} IS NULL THEN NULL WHEN {x} < {lo} THEN 0 WHEN {x} >= {hi} THEN {int(n) + 1} "
                f"ELSE CAST(FLOOR(({x} - ({lo})) * {n} / (({hi}) - ({lo}))) AS INTEGER) + 1 END)")
    return _WIDTH_BUCKET.sub(spell, sql)


def _reason(err: QueryRejected) -> str:
    text = str(err).split("\n")[0]
    return text[:140]


# -- normalisation -------------------------------------------------------------------------------

def key(v):
    """A group key's value, comparable across engines and with the plain answer."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float, Decimal)):
        return float(v)
    if isinstance(v, dt.datetime):
        v = v.replace(tzinfo=None)
        return v.date() if v.time() == dt.time(0) else v
    return v


def num(v):
    return None if v is None else float(v)


def _close(got, want, hw, factor_hw: float = 0.0) -> bool:
    if got is None or want is None:
        return got is None and want is None
    tol = K * ((hw or 0.0) + factor_hw) + REL * max(abs(want), abs(got)) + 1e-9
    return abs(float(got) - float(want)) <= tol


def _keyed(rows, widths, nkeys) -> dict:
    out = {}
    for r, w in zip(rows, widths):
        out[tuple(key(v) for v in r[:nkeys])] = (r[nkeys:], w[nkeys:])
    return out


def _sort_key(k):
    return tuple((v is None, str(type(v)), v if v is not None else 0) for v in k)


# -- 1. value ------------------------------------------------------------------------------------

def check_value(case: Case, rel: Release, target: Target) -> list[Mismatch]:
    def bad(detail: str) -> Mismatch:
        return Mismatch("value", target.engine, case.sql, detail)

    plain_sql = case.sql.rsplit(" LIMIT ", 1)[0] if case.limit is not None else case.sql
    plain = {tuple(key(v) for v in r[:case.nkeys]): r[case.nkeys:] for r in target.plain(plain_sql)}
    got = _keyed(rel.rows, rel.widths, case.nkeys)
    out: list[Mismatch] = []
    kinds = case.kinds[case.nkeys:]
    if len(got) != len(rel.rows):
        out.append(bad(f"duplicate keys released: {rel.rows}"))
    for k, (vals, hws) in got.items():
        for i, (v, h, kind) in enumerate(zip(vals, hws, kinds)):
            if v is None and kind in ("avg", "var"):
                continue            # NULL: the noisy count rounds to no row (checked against the plain value below)
            if h is None or h < 0 or math.isinf(h):     # 0 is honest for a constant (AVG(x * 0)); a wrong value shows below
                if not (kind == "var" and h is not None and math.isinf(h)):
                    out.append(bad(f"group {k} output v{i} ({kind}) claims half-width {h} for noisy value {v}"))
        if k in plain:
            for i, (v, h, w, kind) in enumerate(zip(vals, hws, plain[k], kinds)):
                if w is None and kind in ("avg", "var"):
                    continue                     # no reference: the plain AVG/VARIANCE is NULL
                want = 0.0 if w is None else float(w)      # SUM of only NULLs: dpsql releases 0
                if not _close(v, want, h):
                    out.append(bad(f"group {k} output v{i} ({kind}): got {v} want {w} (half-width {h})"))
        elif rel.plan.selection is not None or not case.nkeys:
            out.append(bad(f"group {k} released but the plain query has no such group: {vals}"))
        else:                                    # a public-domain group without rows
            for i, (v, h, kind) in enumerate(zip(vals, hws, kinds)):
                if kind in ("count", "sum", "distinct") and not _close(v, 0.0, h):
                    out.append(bad(f"empty public group {k} output v{i} ({kind}): got {v} want 0"))
    expected = set(plain)
    if rel.plan.selection is not None and case.units_sql is not None:
        units = {tuple(key(v) for v in r[:-1]): r[-1] for r in target.plain(case.units_sql)}
        expected = {k for k in plain if units.get(k, 0) >= 2}
        for k in got:
            if k in plain and units.get(k, 0) < 2:
                out.append(bad(f"group {k} held by {units.get(k, 0)} unit(s) released past the threshold "
                               f"{rel.plan.selection.threshold}"))
    if rel.plan.selection is None:
        # a public domain releases exactly its values: rows whose key is NULL fall in no released
        # group (dpsql's documented rule, docs/SQL.md), so no NULL group is expected
        expected = {k for k in expected if None not in k}
    missing = expected - set(got)
    if case.limit is None:
        if missing:
            out.append(bad(f"{len(missing)} group(s) with rows not released, e.g. {sorted(missing, key=_sort_key)[:3]}"))
        return out
    # LIMIT: a true top-k of the expected groups by the ORDER BY.
    if len(got) > case.limit or len(got) < min(case.limit, len(expected)):
        out.append(bad(f"LIMIT {case.limit}: released {len(got)} of {len(expected)} expected groups"))
    idx, desc = case.order
    if idx >= case.nkeys and got and missing:
        j = idx - case.nkeys
        released = [float(vals[j]) for vals, _ in got.values() if vals[j] is not None]
        hw = max((h[j] or 0.0) for _, h in got.values())
        edge = (min(released) if desc else max(released)) if released else None
        for k in missing if edge is not None else ():
            w = plain[k][j]
            if w is not None and ((desc and float(w) > edge + K * hw + 1e-9) or
                                  (not desc and float(w) < edge - K * hw - 1e-9)):
                out.append(bad(f"LIMIT: group {k} (value {w}) left out, but {edge} was released"))
                break
    return out


# -- 2. sensitivity ------------------------------------------------------------------------------

def measures(case: Case, plan) -> dict[int, tuple[float, float]]:
    """Output index (among the values) -> (Linf, L1) the plan charged, for outputs that are one
    noisy measure released as is (no HAVING, LIMIT or wrapper in between)."""
    if plan is None or plan.wraps or plan.having is not None or plan.limit is not None or plan.quantiles:
        return {}
    spec = {n.target: n for n in plan.noise}
    out = {}
    for i, o in enumerate(plan.outputs[case.nkeys:]):
        if o.noisy and isinstance(o.expr, Ref) and o.expr.name in spec:
            out[i] = (spec[o.expr.name].linf, spec[o.expr.name].l1)
    return out


def check_sensitivity(case: Case, base: Release, neighbour: Release, engine: str, unit: int,
                      stats: dict | None = None) -> list[Mismatch]:
    """stats["ratio"]: the largest move / Linf seen (how close the data comes to the charge)."""
    if neighbour.status != "ok":
        return [Mismatch("sensitivity", engine, case.sql, f"without unit {unit}: {neighbour.status} {neighbour.reason}")]
    out = []
    a = _keyed(base.rows, base.widths, case.nkeys)
    b = _keyed(neighbour.rows, neighbour.widths, case.nkeys)
    keys = set(a) & set(b) if base.plan.selection is not None else set(a) | set(b)
    for i, (linf, l1) in measures(case, base.plan).items():
        total = slack = 0.0
        for k in keys:
            va, ha = (float(a[k][0][i] or 0), a[k][1][i] or 0) if k in a else (0.0, 0.0)
            vb, hb = (float(b[k][0][i] or 0), b[k][1][i] or 0) if k in b else (0.0, 0.0)
            d, s = abs(va - vb), K * (ha + hb) + REL * max(abs(va), abs(vb))
            total, slack = total + d, slack + s
            if stats is not None and linf > 0:
                stats["ratio"] = max(stats.get("ratio", 0.0), d / linf)
            if d > linf + s + 1e-9:
                out.append(Mismatch("sensitivity", engine, case.sql,
                                    f"without unit {unit}: group {k} output v{i} moved {d} > charged Linf {linf}"))
        if total > l1 + slack + 1e-9:
            out.append(Mismatch("sensitivity", engine, case.sql,
                                f"without unit {unit}: output v{i} moved {total} in all > charged L1 {l1}"))
    return out


# -- 3. engines agree ----------------------------------------------------------------------------

def check_agree(case: Case, a: Release, b: Release) -> list[Mismatch]:
    def bad(detail):
        return Mismatch("agree", "duckdb~postgres", case.sql, detail)
    if a.status != b.status:
        return [bad(f"duckdb {a.status} {a.reason!r}, postgres {b.status} {b.reason!r}")]
    if a.status != "ok":
        return []
    ga, gb = _keyed(a.rows, a.widths, case.nkeys), _keyed(b.rows, b.widths, case.nkeys)
    if case.limit is not None and case.order[0] >= case.nkeys:
        # Ties at the k-th value: which of the tied groups is kept is the noise's choice. The
        # released order values must agree; the groups both released, their values.
        j = case.order[0] - case.nkeys
        va = sorted(num(v[0][j]) or 0.0 for v in ga.values())
        vb = sorted(num(v[0][j]) or 0.0 for v in gb.values())
        hw = max([w[1][j] or 0.0 for w in list(ga.values()) + list(gb.values())] or [0.0])
        if len(va) != len(vb) or any(not _close(x, y, hw, hw) for x, y in zip(va, vb)):
            return [bad(f"top-{case.limit} values differ: duckdb {va}, postgres {vb}")]
        common = set(ga) & set(gb)
        ga, gb = {k: ga[k] for k in common}, {k: gb[k] for k in common}
    if set(ga) != set(gb):
        return [bad(f"groups differ: only duckdb {sorted(set(ga) - set(gb), key=_sort_key)[:3]}, "
                    f"only postgres {sorted(set(gb) - set(ga), key=_sort_key)[:3]}")]
    out = []
    for k in ga:
        for i, (x, y, hx, hy) in enumerate(zip(ga[k][0], gb[k][0], ga[k][1], gb[k][1])):
            if not _close(num(x), num(y), hx, hy or 0.0):
                out.append(bad(f"group {k} output v{i}: duckdb {x} postgres {y}"))
    return out


# -- 4. metamorphic ------------------------------------------------------------------------------

def check_pair(p: Pair, whole: Release, parts: list[Release], engine: str) -> list[Mismatch]:
    def bad(detail):
        return Mismatch("metamorphic", engine, p.whole.sql + "  ~  " + "  ~  ".join(c.sql for c in p.parts), detail)
    if whole.status != "ok" or any(r.status != "ok" for r in parts):
        return []                                   # refusals and errors are reported by the value runs
    n = p.whole.nkeys
    gw = _keyed(whole.rows, whole.widths, n)
    gps = [_keyed(r.rows, r.widths, n) for r in parts]
    out = []
    kinds = p.whole.kinds[n:]
    for k, (vals, hws) in gw.items():
        for i, (v, h, kind) in enumerate(zip(vals, hws, kinds)):
            if p.kind == "scale":
                if k not in gps[0]:
                    out.append(bad(f"group {k} missing from the unscaled query"))
                    continue
                u, hu = gps[0][k][0][i], gps[0][k][1][i]
                if kind == "avg" and u is None:
                    continue
                if not _close(num(v), None if u is None else p.factor * float(u), h, abs(p.factor) * (hu or 0)):
                    out.append(bad(f"group {k} v{i} ({kind}): scaled {v} != {p.factor} x {u}"))
            else:
                s, hs = 0.0, 0.0
                for g in gps:
                    if k in g:
                        s += float(g[k][0][i] or 0)
                        hs += g[k][1][i] or 0
                if not _close(num(v), s, h, hs):
                    out.append(bad(f"group {k} v{i} ({kind}): whole {v} != sum of parts {s}"))
    return out


def mismatch_report(found: list[Mismatch], limit: int = 12) -> str:
    """The mismatches grouped by oracle, each with its SQL (a failure is reproducible from it)."""
    lines = [f"{len(found)} mismatch(es)"]
    for m in found[:limit]:
        lines.append(str(m))
    if len(found) > limit:
        lines.append(f"... and {len(found) - limit} more")
    return "\n".join(lines)
