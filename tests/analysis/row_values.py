"""Side conditions X1-X6 of grammars/dpsql.lark: row values (aggregate arguments, computed group
keys, CASE branches, FILTER), for the grammar tests' checker (checker._Walk mixes this in).

A row value is derived bottom-up, as the grammar's side conditions state it: its type, its range
(interval arithmetic over the policy's bounds, exact with fractions), whether it is whole, its
public domain (the finite set of values it can take, when that follows from literals, declared
values and bounds) and whether it reads a unit column. In repair mode each violation is fixed
where it is: an operation that leaves its type or range is replaced by its first operand (which
meets the conditions on its own), an operand of the wrong type by the number 1.

This is the test's own reading of the grammar's text, written from the conditions, not from
dpsql.analysis.expressions: where the two disagree, the grammar tests fail.
"""
from __future__ import annotations

import datetime as dt
import itertools
import math
import types
from dataclasses import dataclass
from fractions import Fraction

from lark import Token, Tree

INT_LIMIT = Fraction(2) ** 53          # X2: whole arithmetic
REAL_LIMIT = Fraction(10) ** 300       # X2: other arithmetic
MAX_DOMAIN = 10_000                    # X4: a derived domain has at most this many values
SAMPLE_LIMIT = Fraction(10) ** 15      # V4
INT_TYPES = ("SMALLINT", "INTEGER", "INT", "BIGINT", "TINYINT")


class GiveUp(Exception):
    """(repair) No edit fixes this construct in place: an enclosing one replaces itself."""


@dataclass(frozen=True)
class V:
    """What the checker knows of one row value."""
    kind: str                          # num | text | bool | date | timestamp | null
    lo: Fraction | None = None
    hi: Fraction | None = None
    whole: bool = False
    dom: frozenset | None = None       # its public domain (X4), if any
    unit: bool = False                 # reads a unit column (X3)
    cols: bool = False                 # reads a column at all
    span: tuple | None = None          # a date's or timestamp's bounds (X1: declared, or truncated)

    @property
    def bounded(self) -> bool:
        return self.lo is not None and self.hi is not None


ONE = V("num", Fraction(1), Fraction(1), True, frozenset({Fraction(1)}))


def _number(text: str) -> Fraction:
    return Fraction(text)


def _with_dom(v: V, values) -> V:
    values = frozenset(values)
    return V(v.kind, v.lo, v.hi, v.whole, values if len(values) <= MAX_DOMAIN else None, v.unit, v.cols)


def _trunc(x: Fraction) -> Fraction:
    return Fraction(math.trunc(x))


CONDITIONS = ("row_or", "row_and", "row_not", "row_test", "num_test", "text_test", "date_test", "timestamp_test",
              "date_fn_test", "null_test")
TIME_PARTS = ("hour", "minute")        # X1: fields and units of a TIMESTAMP only
FIELD_WORDS = {"dayofweek": "dow", "dayofyear": "doy"}
# X4: every value of a field (EXTRACT's ISO week, DOW from Sunday = 0, ISODOW from Monday = 1)
FIELD_VALUES = {"quarter": range(1, 5), "month": range(1, 13), "week": range(1, 54), "day": range(1, 32),
                "dow": range(0, 7), "isodow": range(1, 8), "doy": range(1, 367), "hour": range(0, 24),
                "minute": range(0, 60)}


def field_of(day: dt.date, field: str) -> int:
    """A date's field, by the calendar (proleptic Gregorian, as PostgreSQL, DuckDB and Spark)."""
    iso = day.isocalendar()
    return {"year": day.year, "quarter": (day.month + 2) // 3, "month": day.month, "week": iso[1],
            "day": day.day, "dow": iso[2] % 7, "isodow": iso[2], "doy": day.toordinal()
            - dt.date(day.year, 1, 1).toordinal() + 1}[field]


def truncate(v, unit: str):
    """date_trunc(unit, v): a date stays a date, a datetime a datetime; weeks start on Monday."""
    stamp = isinstance(v, dt.datetime)
    day = v.date() if stamp else v
    if unit in TIME_PARTS:
        return v.replace(second=0, microsecond=0) if unit == "minute" else v.replace(minute=0, second=0,
                                                                                    microsecond=0)
    first = {"year": lambda: day.replace(month=1, day=1),
             "quarter": lambda: day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1),
             "month": lambda: day.replace(day=1),
             "week": lambda: day - dt.timedelta(days=day.weekday()),
             "day": lambda: day}[unit]()
    return dt.datetime.combine(first, dt.time()) if stamp else first


def after(v, unit: str):
    """The start of the next unit after v (v truncated), or None past year 9999."""
    try:
        if unit in TIME_PARTS:
            return v + dt.timedelta(hours=unit == "hour", minutes=unit == "minute")
        if unit in ("week", "day"):
            return v + dt.timedelta(days=7 if unit == "week" else 1)
        months = {"year": 12, "quarter": 3, "month": 1}[unit]
        m = v.month - 1 + months
        return v.replace(year=v.year + m // 12, month=m % 12 + 1)
    except (OverflowError, ValueError):
        return None


class Values:
    """Mixed into checker._Walk: bad, replace, render, column, resolve, condition, toks, trees."""

    # -- entry points
    def value(self, node, scope) -> V:
        """Derive a row value (X1-X4), repairing in place."""
        if isinstance(node, Token):
            return self._token_value(node)
        d = node.data
        if d in ("any_col", "col", "num_col"):
            return self._col_value(node, scope)
        if d in ("value_sum", "value_prod"):
            return self._binary(node, scope)
        if d == "value_unary":
            return self._unary(node, scope)
        if d == "value_atom":
            return self._atom(node, scope)
        if d == "date_fn":
            return self.date_fn(node, scope)
        if d in ("dated", "fn_operand"):             # ( ... )
            return self.value(node.children[1], scope)
        if d in CONDITIONS:
            return self.bool_value(node, scope)
        if d == "num_lit":
            sign = -1 if any(t.value == "-" for t in self.toks(node, "SIGN")) else 1
            v = sign * _number(self.toks(node, "NUMBER")[0].value)
            return V("num", v, v, v.denominator == 1, frozenset({v}))
        raise AssertionError(f"not a row value: {d}")

    def bool_value(self, node, scope) -> V:
        """A condition (WHERE's tests, no semi-joins) as a value: true, false or NULL. It reads the
        unit if a column it names, or one the repair put in its place, is a unit column."""
        used, picked = [], []
        column, pick = self.column, self.pick           # (a condition may hold a value holding one)
        self.column = lambda *a, **k: used.append(column(*a, **k)) or used[-1]
        self.pick = lambda *a, **k: picked.append(pick(*a, **k)) or picked[-1]
        try:
            self.condition(node, scope)
        finally:
            if isinstance(column, types.MethodType):
                del self.column, self.pick
            else:                                        # an enclosing condition's recorders
                self.column, self.pick = column, pick
        used += [p[1:] for p in picked]
        used += [r for r in (self.resolve(c, scope) for c in node.iter_subtrees_topdown() if c.data == "col")
                 if r is not None]
        return V("bool", dom=frozenset({False, True}), unit=any(scope.is_unit(*r) for r in used),
                 cols=bool(used))

    # -- leaves
    def _token_value(self, tok: Token) -> V:
        if tok.type == "NUMBER":
            v = _number(tok.value)
            return V("num", v, v, v.denominator == 1, frozenset({v}))
        if tok.type == "STRING":
            return V("text", dom=frozenset({tok.value[1:-1].replace("''", "'")}))
        if tok.value.upper() == "NULL":
            return V("null", dom=frozenset())
        raise AssertionError(f"not a row value: {tok!r}")

    def _col_value(self, node, scope) -> V:
        from tests.analysis.checker import ANY_COL   # (checker imports this module)
        colnode = self.col_of(node)
        item, col = self.column(colnode, scope, ANY_COL | {"COMPUTED"}, "column")
        if col.computed is not None:               # X7: the value it stands for
            return col.computed
        unit = scope.is_unit(item, col)
        if col.family == "num":
            if col.rng is None:
                return V("num", whole=col.family == "num" and col.type in ("BIGINT", "INTEGER"), unit=unit,
                         cols=True)
            return V("num", col.rng[0], col.rng[1], col.whole, None, unit, True)
        kind = {"text": "text", "date": "date", "timestamp": "timestamp"}.get(col.family, "other")
        return V(kind, dom=col.dom if kind == "text" else None, unit=unit, cols=True, span=col.span)

    # -- X1: operands of arithmetic
    def num(self, node, scope) -> V:
        """An operand of arithmetic: a number with a range (X1); else repaired to 1."""
        v = self.value(node, scope)
        if v.kind == "num" and v.bounded:
            return v
        self.bad(f"X1: arithmetic on a {v.kind if v.kind != 'num' else 'number without bounds'}")
        self.replace(node, "1")
        return ONE

    def limited(self, node, v: V, parts: list[V], fallback) -> V:
        """X2: the result of an operation stays in range; else the operation becomes its first operand."""
        limit = INT_LIMIT if v.whole else REAL_LIMIT
        if abs(v.lo) < limit and abs(v.hi) < limit:
            return V(v.kind, v.lo, v.hi, v.whole, v.dom, any(p.unit for p in parts), any(p.cols for p in parts))
        self.bad("X2: arithmetic whose range could overflow")
        self.replace(node, self.render(fallback))
        return parts[0]

    def _binary(self, node: Tree, scope) -> V:
        a_node, op, b_node = node.children
        a = self.num(a_node, scope)
        if op.type == "DIV_OP":
            return self._divide(node, a, op.value, b_node)
        b = self.num(b_node, scope)
        whole = a.whole and b.whole
        if op.value == "+":
            lo, hi, fn = a.lo + b.lo, a.hi + b.hi, lambda x, y: x + y
        elif op.value == "-":
            lo, hi, fn = a.lo - b.hi, a.hi - b.lo, lambda x, y: x - y
        else:
            p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
            lo, hi, fn = min(p), max(p), lambda x, y: x * y
        out = self.limited(node, V("num", lo, hi, whole), [a, b], a_node)
        if out is a:                       # repaired: the operation became its first operand
            return a
        if a.dom is not None and b.dom is not None and len(a.dom) * len(b.dom) <= MAX_DOMAIN:
            out = _with_dom(out, {fn(x, y) for x in a.dom for y in b.dom})
        return out

    def _divide(self, node: Tree, a: V, op: str, lit: Tree) -> V:
        d = self.value(lit, None)
        if d.lo == 0:
            self.bad("X2: division or modulo by zero")
            self.replace(lit, "2")
            d = V("num", Fraction(2), Fraction(2), True)
        dv = d.lo
        if op == "%":
            if not (a.whole and dv.denominator == 1):
                self.bad("X2: % of a fraction, or by a fraction")
                self.replace(node, self.render(node.children[0]))
                return a
            m = abs(dv) - 1
            lo = Fraction(0) if a.lo >= 0 else -min(m, -a.lo)
            hi = Fraction(0) if a.hi <= 0 else min(m, a.hi)
            out = self.limited(node, V("num", lo, hi, True), [a], node.children[0])
            if a.dom is not None:
                return _with_dom(out, {Fraction(math.fmod(x, abs(dv))) for x in a.dom})
            if hi - lo >= MAX_DOMAIN:
                return out
            return _with_dom(out, {Fraction(i) for i in range(int(lo), int(hi) + 1)})
        if a.whole and dv.denominator == 1:        # integer division, truncating toward zero
            q = [_trunc(a.lo / dv), _trunc(a.hi / dv)]
            out = self.limited(node, V("num", min(q), max(q), True), [a], node.children[0])
            if a.dom is not None:
                return _with_dom(out, {_trunc(x / dv) for x in a.dom})
            if a.hi - a.lo < MAX_DOMAIN * abs(dv):
                return _with_dom(out, {Fraction(i) for i in range(int(min(q)), int(max(q)) + 1)})
            return out
        q = [a.lo / dv, a.hi / dv]
        return self.limited(node, V("num", min(q), max(q), False), [a], node.children[0])

    def _unary(self, node: Tree, scope) -> V:
        sign, inner = node.children
        if sign.value == "+":
            return self.value(inner, scope)
        lit = self._literal(inner)
        if lit is not None:
            return V("num", -lit, -lit, lit.denominator == 1, frozenset({-lit}))
        a = self.num(inner, scope)
        return self.limited(node, V("num", -a.hi, -a.lo, a.whole), [a], inner)

    def _literal(self, node) -> Fraction | None:
        """A number, possibly in parentheses (a negative literal when a minus stands before it)."""
        while isinstance(node, Tree) and node.data == "value_atom" and len(node.children) == 3 \
                and node.children[0] == "(":
            node = node.children[1]
        if isinstance(node, Token) and node.type == "NUMBER":
            return _number(node.value)
        return None

    # -- functions, CASE, COALESCE, CAST, dates
    def _atom(self, node: Tree, scope) -> V:
        first = node.children[0]
        word = first.value.upper() if isinstance(first, Token) else ""
        args = [c for c in node.children if isinstance(c, (Tree,)) or isinstance(c, Token) and c.type in (
            "NUMBER", "STRING") or isinstance(c, Token) and c.value.upper() == "NULL" and c is not first]
        if word == "(":
            return self.value(node.children[1], scope)
        if first.type == "NUM_FN" or word == "ROUND":
            return self._numeric_fn(node, word, scope)
        if first.type == "EXTREME_FN":
            parts = [self.num(a, scope) for a in args]
            pick = min if word == "LEAST" else max
            whole = all(p.whole for p in parts)
            out = self.limited(node, V("num", pick(p.lo for p in parts), pick(p.hi for p in parts), whole),
                               parts, args[0])
            if all(p.dom is not None for p in parts) and math.prod(len(p.dom) for p in parts) <= MAX_DOMAIN:
                out = _with_dom(out, {pick(c) for c in itertools.product(*[p.dom for p in parts])})
            return out
        if word == "COALESCE":
            return self._union(node, [self.value(a, scope) for a in args], args)
        if word == "CASE":
            parts, nodes, unit = [], [], False
            for wt in self.trees(node, "when_then"):
                unit = self.bool_value(wt.children[1], scope).unit or unit
                parts.append(self.value(wt.children[3], scope))
                nodes.append(wt.children[3])
            tail = [c for c in node.children[1:] if not (isinstance(c, Tree) and c.data == "when_then")]
            if len(tail) > 1:              # ELSE value END
                parts.append(self.value(tail[1], scope))
                nodes.append(tail[1])
            out = self._union(node, parts, nodes)
            return V(out.kind, out.lo, out.hi, out.whole, out.dom, out.unit or unit, True)
        if word == "CAST":
            a = self.value(node.children[2], scope)
            to = self.toks(node, "NUM_TYPE")[0].value.upper()
            if a.kind != "num" or not a.bounded:
                self.bad("X1: CAST of anything but a number with bounds")
                self.replace(node, "1")
                return ONE
            if to.startswith(INT_TYPES):
                if not a.whole:
                    self.bad("X1: CAST of a fraction to an integer type")
                    self.replace(node, self.render(node.children[2]))
                return a
            return V("num", a.lo, a.hi, False, a.dom, a.unit, a.cols)
        if word == "WIDTH_BUCKET":
            a = self.num(node.children[2], scope)
            lo, hi = (self.value(n, scope).lo for n in self.trees(node, "num_lit"))
            count = int(self.toks(node, "COUNT_LIT")[0].value)
            if not (lo < hi and 1 <= count <= MAX_DOMAIN):
                self.bad("X2: WIDTH_BUCKET with low >= high or a bucket count outside 1..10,000")
                self.replace(node, "1")
                return ONE
            n = Fraction(count)
            scaled = [(a.lo - lo) * n, (a.hi - lo) * n]
            if max(abs(v) for v in scaled) >= REAL_LIMIT:
                self.bad("X2: WIDTH_BUCKET's arithmetic could overflow")
                self.replace(node, "1")
                return ONE

            def bucket(v: Fraction) -> int:
                return 0 if v < lo else count + 1 if v >= hi else math.floor((v - lo) * n / (hi - lo)) + 1
            b_lo, b_hi = bucket(a.lo), bucket(a.hi)
            return _with_dom(V("num", Fraction(b_lo), Fraction(b_hi), True, None, a.unit, a.cols),
                             {Fraction(b) for b in range(b_lo, b_hi + 1)})
        raise AssertionError(f"unknown value atom {word}")

    # -- date functions (X1, X4)
    def date_fn(self, node: Tree, scope, strict: bool = False) -> V:
        """EXTRACT / DATE_PART / DATE_TRUNC of a date or timestamp with bounds. Repair: DATE_TRUNC
        becomes its argument, EXTRACT the number 1 (strict, in a condition: _GiveUp)."""
        word = node.children[0].value.upper()
        if word == "EXTRACT":
            part = self.toks(node, "DATE_FIELD")[0].value.lower()
        else:
            part = self.toks(node, "FIELD_STRING" if word == "DATE_PART" else "TRUNC_STRING")[0].value
            part = part.strip("'").lower()
        part = FIELD_WORDS.get(part, part)
        inner = node.children[-2]
        a = self.value(inner, scope)
        if a.kind not in ("date", "timestamp") or a.span is None or (part in TIME_PARTS and a.kind == "date"):
            self.bad(f"X1: {word} ({part}) of a {a.kind} value without bounds, or a time of a DATE")
            if strict:
                raise GiveUp
            if word == "DATE_TRUNC":
                self.replace(node, self.render(inner))
                return a
            self.replace(node, "1")
            return ONE
        lo, hi = a.span
        if word == "DATE_TRUNC":
            lo, hi = truncate(lo, part), truncate(hi, part)
            values, v = [], lo
            while v is not None and v <= hi and len(values) <= MAX_DOMAIN:
                values.append(v)
                v = after(v, part)
            dom = frozenset(values) if len(values) <= MAX_DOMAIN else None
            return V(a.kind, dom=dom, unit=a.unit, cols=a.cols, span=(lo, hi))
        first, last = (x.date() if isinstance(x, dt.datetime) else x for x in (lo, hi))
        if part in FIELD_VALUES and (part in TIME_PARTS or (last - first).days > 4 * 366):
            values = set(FIELD_VALUES[part])
        elif part == "year":
            values = set(range(first.year, last.year + 1))
        else:
            values = {field_of(first + dt.timedelta(days=i), part) for i in range((last - first).days + 1)}
        return _with_dom(V("num", Fraction(min(values)), Fraction(max(values)), True, None, a.unit, a.cols),
                         {Fraction(x) for x in values})

    def date_fn_test(self, node: Tree, scope) -> None:
        """A date function compared with literals of its type (X1); a test it cannot repair
        (_GiveUp) becomes `col IS NULL` in the caller."""
        fn = self.trees(node, "date_fn", "fn_operand")[0]
        while fn.data == "fn_operand":
            fn = fn.children[1]
        v = self.date_fn(fn, scope, strict=True)
        self.real_dates(node)
        want = {"num": ("num_lit",), "date": ("date_lit",), "timestamp": ("date_lit", "timestamp_lit")}[v.kind]
        for lit in self.trees(node, "num_lit", "date_lit", "timestamp_lit"):
            if lit.data not in want:
                self.bad(f"X1: a {lit.data} compared with a date function of type {v.kind}")
                self.replace(lit, "1" if v.kind == "num" else "DATE '2024-01-01'")

    def _numeric_fn(self, node: Tree, word: str, scope) -> V:
        arg = node.children[2]
        a = self.num(arg, scope)
        if word == "ABS":
            nlo = Fraction(0) if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
            return self.limited(node, V("num", nlo, max(abs(a.lo), abs(a.hi)), a.whole), [a], arg)
        places = Fraction(0)
        p = self.toks(node, "PLACES")
        if p:
            places = Fraction(int(p[0].value.lstrip("+")))
            if places > 10:
                self.bad("X2: ROUND to more than 10 places")
                self.replace(p[0], "2")
                places = Fraction(2)
        if a.whole:
            return a
        step = Fraction(1, 10 ** int(places)) if word == "ROUND" else Fraction(1)
        # FLOOR and CEIL move both ends alike; ROUND outward (ties go either way by engine)
        down, up = {"FLOOR": (math.floor, math.floor), "CEIL": (math.ceil, math.ceil),
                    "CEILING": (math.ceil, math.ceil)}.get(word, (math.floor, math.ceil))
        lo, hi = down(a.lo / step) * step, up(a.hi / step) * step
        out = self.limited(node, V("num", Fraction(lo), Fraction(hi), False), [a], arg)
        if places == 0 and out is not a and hi - lo < MAX_DOMAIN:
            out = _with_dom(out, {Fraction(i) for i in range(int(lo), int(hi) + 1)})
        return out

    def _union(self, node: Tree, parts: list[V], nodes: list) -> V:
        """CASE branches, COALESCE arguments: one type (X1), the union of ranges and domains."""
        kinds = {p.kind for p in parts if p.kind != "null"}
        if len(kinds) > 1:
            self.bad("X1: branches of different types")
            first = next(i for i, p in enumerate(parts) if p.kind != "null")
            for n, p in zip(nodes, parts):
                if p.kind not in ("null", parts[first].kind):
                    self.replace(n, "NULL")
            parts = [p if p.kind in ("null", parts[first].kind) else V("null", dom=frozenset()) for p in parts]
            kinds = {parts[first].kind}
        kind = kinds.pop() if kinds else "null"
        dom = frozenset().union(*(p.dom for p in parts)) if all(p.dom is not None for p in parts) else None
        unit, cols = any(p.unit for p in parts), any(p.cols for p in parts)
        if kind != "num":
            return V(kind, dom=dom if dom is None or len(dom) <= MAX_DOMAIN else None, unit=unit, cols=cols)
        real = [p for p in parts if p.kind == "num"]
        if not all(p.bounded for p in real):
            self.bad("X1: a numeric branch without bounds")
            for n, p in zip(nodes, parts):
                if p.kind == "num" and not p.bounded:
                    self.replace(n, "1")
            real = [p if p.bounded else ONE for p in real]
        whole = all(p.whole for p in real)
        first_num = next(n for n, p in zip(nodes, parts) if p.kind == "num")      # (not a NULL before it)
        out = self.limited(node, V("num", min(p.lo for p in real), max(p.hi for p in real), whole), real,
                           first_num)
        return V("num", out.lo, out.hi, out.whole, dom if dom is None or len(dom) <= MAX_DOMAIN else None,
                 unit, cols)

    def computed(self, node, scope, name: str):
        """X7: a row-level query's item that computes a value: a column that stands for it."""
        from tests.analysis.checker import Column   # (checker imports this module)
        v = self.counted(node, scope)
        if v.kind == "num" and v.bounded:
            return Column(name, "BIGINT" if v.whole else "DOUBLE", frozenset({"KEY_COL", "COMPUTED"}),
                          rng=(v.lo, v.hi), whole=v.whole, computed=v)
        ty = {"text": "VARCHAR", "date": "DATE", "timestamp": "TIMESTAMP", "bool": "BOOLEAN"}.get(v.kind, "NULL")
        return Column(name, ty, frozenset({"KEY_COL", "COMPUTED"} if v.kind in ("text", "date", "timestamp", "bool")
                                          else {"COMPUTED"}), computed=v)

    # -- aggregates' arguments
    def measured(self, node, scope, what: str) -> V:
        """The argument of SUM, AVG, VAR/STDDEV, a quantile or a sample-and-aggregate function (X3):
        a number with a range, reading no unit column; else repaired to a bounded column or 1."""
        v = self.value(node, scope)
        if v.kind == "num" and v.bounded and not v.unit:
            return v
        self.bad(f"X3: {what} of {'the unit' if v.unit else 'a value without a numeric range'}")
        self.replace(node, "1")
        return ONE

    def counted(self, node, scope) -> V:
        if isinstance(node, Tree) and node.data in CONDITIONS:
            return self.bool_value(node, scope)
        return self.value(node, scope)

    def key_value(self, node, scope) -> V:
        """A group key computed from the row (X3, X5): reads no unit column; a number, a text, a
        date or a condition; its domain kept only for whole numbers."""
        v = self.counted(node, scope)
        if v.unit or v.kind not in ("num", "text", "bool", "date", "timestamp"):
            self.bad("X3: a group key of the unit, or a NULL key")
            self.replace(node, "'x'")
            return V("text", dom=frozenset({"x"}))
        if v.kind == "num" and not v.whole:
            return V(v.kind, v.lo, v.hi, v.whole, None, v.unit, v.cols)
        return v
