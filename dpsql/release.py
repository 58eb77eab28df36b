"""Release: a plan's mechanisms and the noisy answer drawn from the engine's exact rows.

    mechanisms_for(plan)                       -> each target's mechanism, and partition selection's
    release(plan, rows, mechs, sel, rng, ...)  -> partition selection, noise, post-processing
    accuracy(plan, mechs, table)               -> each released column's Accuracy
    present(result, plan, settings)            -> the result as SET dpsql.intervals/round show it

and release_delay, which holds an answer back until the policy's [timing] allows it. Nothing here
reads the ledger or the engine: the charge is made before the engine runs (dpsql.charge, Session).
"""
from __future__ import annotations

import datetime as _dt
import itertools
import math
import re
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

from dpsql import postprocess
from dpsql.analysis import topk as topk_plan
from dpsql.analysis.measures import Count
from dpsql.analysis.plan import QueryPlan
from dpsql.analysis.sqltypes import family
from dpsql.noise import make_mechanism, vector
from dpsql.noise.exponential import QuantileEM
from dpsql.noise.topk import NoisyTopK
from dpsql.result import Accuracy, Result, ResultKind, type_name
from dpsql.rewrite.quantiles import histograms as quantile_histograms


def _no_check() -> None:
    """No cancel and no time limit (release outside a Session)."""


def mechanisms_for(plan: QueryPlan) -> tuple[dict, Any]:
    """The plan's mechanisms (immutable, a function of the plan alone): by target, and partition
    selection's (None without selection)."""
    mechs = {spec.target: make_mechanism(spec.mechanism, spec.sensitivity, spec.epsilon, spec.delta)
             for spec in plan.noise if spec.mechanism.additive}
    mechs.update(_quantile_mechanisms(plan))
    t = plan.topk
    if t is not None:
        mechs[topk_plan.TARGET] = NoisyTopK(t.epsilon, t.k, t.sensitivity, t.monotone, t.candidates)
    sel = None
    if plan.selection_noise is not None:
        s = plan.selection_noise
        sel = make_mechanism("laplace", s.l1, s.epsilon, 0.0)
    return mechs, sel


def _batches(release, values: list, check) -> list:
    """release(batch) over values in batches of vector.BATCH, checking between them."""
    out: list = []
    for at in range(0, len(values), vector.BATCH):
        check()
        out.extend(release(values[at:at + vector.BATCH]))
    return out


def release(plan: QueryPlan, rows: list[tuple], mechs, sel, rng, *, max_rows: int,
            check=_no_check) -> postprocess.Table:
    """Partition selection, then noise on every measure of every released group: the release of
    the engine's rows, with the plan's mechanisms (mechanisms_for) and randomness from rng.
    max_rows: the policy's [limits] max_released_rows; check(): between batches (Session.check).

    Group keys arrive as text (dpsql.rewrite.keys). Nothing here can fail on
    a key's value: public-domain keys are looked up in their domain, and selected keys are
    turned into typed values only once released, by typed_key, which never raises."""
    nk, measures = len(plan.keys), plan.measures
    types = [k.sql_type for k in plan.keys]
    groups: dict[tuple, tuple] = {}
    for r in rows:
        groups[tuple(r[:nk])] = r[nk:]
    if plan.keys and plan.selection is None:      # public domains: exactly the domain
        lookups = [_domain_lookup(k.domain, t) for k, t in zip(plan.keys, types)]
        found = {}
        for text_key, values in groups.items():
            key = tuple(look(t) for look, t in zip(lookups, text_key))
            if _OUTSIDE not in key:
                found[key] = values
        zero = (0,) * (len(measures))
        domain = itertools.product(*[k.domain for k in plan.keys])
        read = [k.domain_source is not None for k in plan.keys]    # a public table's values, as text
        if any(read):
            groups = {tuple(typed_key(v, ty) if r else v for v, ty, r in zip(key, types, read)):
                      found.get(key, zero) for key in domain}
        else:
            get = found.get
            groups = {key: get(key, zero) for key in domain}
    elif not plan.keys:
        groups = groups or {(): (0,) * len(measures)}
    if plan.topk is not None:
        return _top(plan, groups, mechs, rng)
    widths = {m.name: mechs[m.name].half_width() for m in measures}
    widths.update({q.name: math.inf for q in plan.quantiles})    # a value's error is not bounded; its rank's is
    widths.update({dc.name: mechs[dc.name].half_width() for dc in plan.distincts})
    at = len(measures) + (1 if sel is not None else 0)    # distinct counts, then histograms, follow _units
    hists = {h: at + len(plan.distincts) + i for i, h in enumerate(quantile_histograms(plan))}
    # Every group's values are released at once, one column at a time, in batches
    # (dpsql.noise.vector: the same exact laws as each mechanism's release, from the CSPRNG);
    # which groups are released depends only on the selection's noisy counts, as before.
    keys, rows_of = list(groups), list(groups.values())
    cut = 0
    if sel is not None:
        units = [r[len(measures)] or 0 for r in rows_of]
        noisy = _batches(lambda b: vector.release_values(sel, b, rng), units, check)
        kept = [i for i, u in enumerate(noisy) if u > plan.selection.threshold]
        keys = [tuple(typed_key(t, ty) for t, ty in zip(keys[i], types)) for i in kept]
        rows_of = [rows_of[i] for i in kept]
        # Selected groups: the engine's row order depends on the data (hash tables,
        # threads), so release them in an order fixed by the keys alone (a total order).
        order = sorted(range(len(keys)), key=lambda i: key_order(keys[i]))
        keys, rows_of = [keys[i] for i in order], [rows_of[i] for i in order]
        # Only the first max_released_rows of them (in that order) can be released when
        # nothing after this reorders or filters them: the rest are cut before their values
        # are drawn, not after (the same rows, and the same count of cut ones, either way).
        most, final = max_rows, plan.limit
        if (len(keys) > most and plan.having is None and not plan.order and not plan.offset
                and not plan.wraps and (final is None or final > most)):
            cut = min(len(keys), final if final is not None else len(keys)) - most
            keys, rows_of = keys[:most], rows_of[:most]
    columns = {}
    for j, m in enumerate(measures):
        mech, div = mechs[m.name], m.divisor
        columns[m.name] = _batches(lambda b: vector.release_values(mech, b, rng, div),
                               [r[j] for r in rows_of], check)
    for i, dc in enumerate(plan.distincts, at):
        mech = mechs[dc.name]
        columns[dc.name] = _batches(lambda b: vector.release_values(mech, b, rng),
                                [r[i] if i < len(r) else None for r in rows_of], check)
    for q in plan.quantiles:
        i, em = hists[q.hist], mechs[q.name]
        columns[q.name] = _batches(lambda b: vector.release_quantiles(em, b, rng),
                               [r[i] if i < len(r) else None for r in rows_of], check)
    check()
    names = list(columns)
    released = [(key, dict(zip(names, vals)), widths) for key, vals in zip(keys, zip(*columns.values()))] \
        if names else [(key, {}, widths) for key in keys]
    outputs = [(o.name, o.expr, o.noisy) for o in plan.outputs]
    noise = {m.name: (mechs[m.name].name, mechs[m.name].scale) for m in measures}
    table = postprocess.finish(released, outputs, plan.having, plan.order, plan.limit, plan.offset, noise,
                               check=check)
    table = postprocess.wrap(table, plan.wraps, check=check)
    table.cut = cut
    return table


def _top(plan: QueryPlan, groups: dict, mechs, rng) -> postprocess.Table:
    """SET dpsql.topk: the k keys report-noisy-max chooses from the public domain's exact bounded
    aggregates (dpsql.noise.topk: nothing else of them leaves this function), in its rank order;
    each with the aggregate measured afresh when the query outputs it (dpsql.analysis.topk)."""
    t = plan.topk
    m = plan.measure(t.measure)
    keys = list(groups)
    scores = []
    for key in keys:
        v = groups[key][0]
        exact = Fraction(0 if v is None else v) / m.divisor     # ints and Decimals: exact
        scores.append(exact if t.desc else -exact)
    chosen = mechs[topk_plan.TARGET].choose(scores, rng)
    released = []
    for i in chosen:
        env, widths = {}, {}
        if t.values:
            v = groups[keys[i]][0]
            env[m.name] = mechs[m.name].release(Fraction(0 if v is None else v) / m.divisor, rng)
            widths[m.name] = mechs[m.name].half_width()
        released.append((keys[i], env, widths))
    outputs = [(o.name, o.expr, o.noisy) for o in plan.outputs]
    noise = {m.name: (mechs[m.name].name, mechs[m.name].scale)} if t.values else None
    table = postprocess.finish(released, outputs, None, (), None, 0, noise)
    return postprocess.wrap(table, plan.wraps)


def db_types(plan: QueryPlan) -> list[str]:
    """The SQL type of each output: noisy values are DOUBLE; group keys keep their column's type."""
    out = []
    for o in plan.outputs:
        if o.noisy:
            out.append("DOUBLE")
        elif isinstance(o.expr, postprocess.Key):
            out.append(plan.keys[o.expr.index].sql_type or "VARCHAR")
        else:
            out.append("VARCHAR")
    return postprocess.through(out, plan.wraps, "VARCHAR")


def _accuracy(output, mechs) -> Accuracy | None:
    if not output.noisy:
        return None
    expr = output.expr
    if isinstance(expr, postprocess.Clamp):      # sample-and-aggregate: [mid +] one noisy mean, clamped
        expr = expr.arg.b if isinstance(expr.arg, postprocess.Add) else expr.arg
    if isinstance(expr, postprocess.Ref):
        m = mechs[expr.name]
        return Accuracy(m.name, m.scale, m.half_width())
    names = output.expr.refs()
    kinds = {mechs[n].name for n in names}
    return Accuracy(kinds.pop() if len(kinds) == 1 else "mixed", None, None)


def accuracy(plan: QueryPlan, mechs, table: postprocess.Table) -> list:
    """Each released column's Accuracy (None for exact columns): a plain aggregate's mechanism and
    scale, a derived column's widest released half-width (widest)."""
    out = postprocess.through([_accuracy(o, mechs) for o in plan.outputs], plan.wraps)
    return widest(out, table.widths)


def present(r: Result, plan: QueryPlan, settings, check=None) -> Result:
    """The released result as the connection's settings (dpsql.settings: intervals, round) show it
    (postprocess.present): only post-processing of released values and public facts of the plan.
    check: between batches (Session.check); None for a cached answer."""
    counts = postprocess.through([o.noisy and isinstance(o.expr, postprocess.Ref) and _is_count(plan, o.expr.name)
                                  for o in plan.outputs], plan.wraps, False)
    noisy = postprocess.through([o.noisy for o in plan.outputs], plan.wraps, False)
    bounds = postprocess.through([(float(o.expr.lo), float(o.expr.hi))
                                  if o.noisy and isinstance(o.expr, postprocess.Avg) else None
                                  for o in plan.outputs], plan.wraps, None)
    p = postprocess.present(r.columns, r.types, r.db_types, r.rows, r.accuracy, r.half_widths, counts, noisy,
                            intervals=settings.intervals, round_counts=settings.round, bounds=bounds,
                            check=None if r.cached else check)
    r.columns, r.types, r.db_types, r.rows, r.accuracy, r.half_widths = p
    # How many groups partition selection removed, and why only this may be released.
    # Without selection (no GROUP BY, or every key with a public domain) the released groups
    # are exactly the public domain's: none is removed, and 0 is a fact of the plan. (HAVING,
    # LIMIT and the wrappers drop released rows afterwards: post-processing of released
    # values, not suppression.) With selection the candidate groups are the keys found in
    # the data, so the number of candidates, and with it "candidates - released", is a
    # function of the data that no mechanism noised: a group held by a single person that
    # selection removed would still add 1 to it, exactly what selection exists to hide.
    # So it is not released, not even as a bound: None, and the status line says only that
    # some groups may have been suppressed. (Releasing it would need a noisy count of
    # candidates, charged like any other measure.)
    r.suppressed = None if plan.selection is not None else 0
    t = plan.topk
    if t is not None and not r.cached:
        r.topk = (f"; the rows are the {'top' if t.desc else 'bottom'} {t.k} of {t.candidates} keys chosen by "
                  "report-noisy-max, in its rank order (SET dpsql.topk)")
    return r


def _is_count(plan: QueryPlan, name: str) -> bool:
    """Whether the released value `name` is a Count measure (not a sum, quantile or distinct count)."""
    return any(isinstance(m, Count) and m.name == name for m in plan.measures)


def key_order(key: tuple) -> tuple:
    """A total order on released group keys: NULL last, then by type, NaN after every number;
    never raises (Decimal NaN would, in a comparison)."""
    out = []
    for v in key:
        if v is None:
            out.append((1, "", 0, 0))
        elif isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
            nan = v.is_nan() if isinstance(v, Decimal) else (isinstance(v, float) and math.isnan(v))
            out.append((0, "number", 1 if nan else 0, 0 if nan else v))
        else:
            out.append((0, type(v).__name__, 0, v))
    return tuple(out)


_OUTSIDE = object()


def _domain_lookup(domain: tuple, sql_type: str):
    """Text of a key (as the engine prints it) -> the public domain's value, or _OUTSIDE.

    Integers print alike on every engine. A text key reaches this only through the engine's own
    `key IN (domain)`, so it equals a domain value by the engine's comparison; the only way its
    text can differ from that value is CHAR(n)'s blank padding: Spark pads CHAR(n) on read and
    compares with padding, yet reports the column as a plain string, so the column's type cannot
    tell. A text key is therefore looked up as it is, then without trailing blanks (a VARCHAR key
    with blanks matched its domain value exactly, so the second lookup never moves it). A boolean
    prints as true/false on every engine (CAST(b AS TEXT))."""
    table = {("true" if v else "false") if isinstance(v, bool) else str(v): v for v in domain}
    pad = family(sql_type) == "text"

    def look(text):
        if text is None:            # a LEFT JOIN's NULL key is a value of a public table's domain
            return None if None in domain else _OUTSIDE
        v = table.get(text, _OUTSIDE)
        if v is _OUTSIDE and pad:
            v = table.get(text.rstrip(" "), _OUTSIDE)
        return v
    return look


_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([+-]\d{2}(:?\d{2})?)?")


def typed_key(text: str | None, sql_type: str) -> Any:
    """A released key's value from its text, in the column's Python type where it has one.

    Never raises: a value Python cannot hold (a date 'infinity', a year past 9999 or BC, a
    nanosecond timestamp) stays the engine's text.

    A group's text is that of whichever of its rows the engine met first, and equal values can
    print differently: -0.0 and 0.0 are one group (DuckDB and PostgreSQL print the first seen),
    and so are 1.0 and 1.00 in a PostgreSQL NUMERIC without a declared scale. The released key
    would then show whether someone's row holds -0.0 or 1.00, which partition selection does not
    cover (the group is released either way). So a released key is a function of the group's
    value alone: floats are canonical (-0.0 + 0.0 is 0.0; NaN and infinities are unchanged),
    and a NUMERIC of free scale loses its trailing fractional zeros (PostgreSQL's trim_scale)."""
    if text is None:
        return None
    fam = family(sql_type)
    try:
        if fam == "int":
            return int(text)
        if fam == "decimal":
            if "(" not in sql_type and "." in text and "e" not in text.lower():   # free scale: its own
                text = text.rstrip("0").rstrip(".")                              # (text: exact, no rounding)
            return Decimal(text)
        if fam == "float":
            return float(text) + 0.0
        if fam == "bool":
            low = text.strip().lower()
            return True if low in ("true", "t") else False if low in ("false", "f") else text
        if fam == "date" and _DATE_TEXT.fullmatch(text):
            return _dt.date.fromisoformat(text)
        if fam == "timestamp" and _TIMESTAMP_TEXT.fullmatch(text):
            frac = re.search(r"\.(\d+)", text)
            if frac and len(frac.group(1)) > 6:
                return text
            return _dt.datetime.fromisoformat(text.replace("T", " "))
    except (ValueError, ArithmeticError, OverflowError):
        return text
    return text


def _quantile_mechanisms(plan: QueryPlan) -> dict:
    """The exponential mechanism of each quantile (dpsql.noise.exponential), at its NoiseSpec's epsilon
    share, with rank sensitivity each unit's per-group row bound, over the plan's L0 groups."""
    specs = {spec.target: spec for spec in plan.noise}
    return {q.name: QuantileEM(specs[q.name].epsilon, q.q, q.lo, q.hi, int(specs[q.name].linf), plan.l0, q.bins)
            for q in plan.quantiles}


def widest(accuracy: list, widths: list[tuple]) -> list:
    """A derived column's accuracy (AVG, VARIANCE, arithmetic): the widest 95% half-width among
    its released values (each value's own is in Result.half_widths), None if one is unbounded."""
    out = []
    for i, a in enumerate(accuracy):
        if a is not None and a.ci95 is None and widths:
            col = [w[i] for w in widths]
            if all(w is not None for w in col):
                a = Accuracy(a.mechanism, None, max(col))
        out.append(a)
    return out


def output_names(plan: QueryPlan) -> list[str]:
    """The released columns' names: the outermost query's."""
    if plan.wraps:
        return [name for name, _ in plan.wraps[-1].outputs] if not plan.names else list(plan.names)
    return [o.name for o in plan.outputs]


def release_delay(start: float, timing) -> None:
    """Sleep until the answer may be released: at least timing.floor seconds after `start`, and
    then at the next whole multiple of timing.quantum seconds after it.

    Run time is released with every answer and carries no noise. Work that depends on the data
    is kept small by construction (no statistics-based pruning: dpsql.rewrite.rows),
    and what remains is hidden here: a query that finishes before the floor is released at the
    floor exactly, whatever its data; a longer one at a multiple of the quantum, so that only a
    difference that moves it across a multiple shows. This is Haeberlen, Pierce & Narayan's
    predictable query time ("Differential Privacy Under Fire", USENIX Security 2011) in its
    simplest form; the README's threat model states the residual channel."""
    if timing.quantum <= 0 and timing.floor <= 0:
        return
    target = release_at(start, timing) - start
    while (left := target - (time.monotonic() - start)) > 0:
        time.sleep(left)


def release_at(start: float, timing, now: float | None = None) -> float:
    """The time.monotonic() at which an answer ready at `now` (default: now) of a statement begun
    at `start` may be released: release_delay's rule (floor, then the next multiple of the
    quantum), for a front end that waits without a thread (the proxy: asyncio.sleep until then).
    The earlier `start` is taken, the more of the wait is hidden: the proxy takes the moment it
    received the statement, so its waits for a query slot and a worker thread are hidden too."""
    elapsed = (time.monotonic() if now is None else now) - start
    target = elapsed
    if timing.quantum > 0:
        target = math.ceil(elapsed / timing.quantum) * timing.quantum
    return start + max(target, timing.floor)


def answer(plan: QueryPlan, rows: list[tuple], mechs, sel, rng, *, max_rows: int, check=_no_check,
           charged=None, spending=None, surcharge: float = 0.0) -> Result:
    """A private query's Result: release() of the engine's rows, each column's accuracy and SQL
    type, cut to the policy's max_released_rows; charged, spending, surcharge: for its status."""
    table = release(plan, rows, mechs, sel, rng, max_rows=max_rows, check=check)
    types = db_types(plan)
    acc = accuracy(plan, mechs, table)
    rows, widths, cut = table.rows, table.widths, table.cut
    if len(rows) > max_rows:       # partition selection released more groups than the policy allows
        rows, widths, cut = rows[:max_rows], widths[:max_rows], len(rows) - max_rows
    return Result(table.columns, [type_name(t) for t in types], rows, ResultKind.PRIVATE, acc,
                  widths, charged, spending, tag=f"SELECT {len(rows)}", db_types=types,
                  surcharge=surcharge, truncated=cut)


def describe(plan: QueryPlan, settings, check=None) -> tuple[list[str], list[str]]:
    """A private query's result column names and SQL types as the settings show them (no rows)."""
    names, types = output_names(plan), db_types(plan)
    r = present(Result(names, [type_name(t) for t in types], [], ResultKind.PRIVATE, [], [], db_types=types), plan, settings,
                check)
    return r.columns, r.db_types
