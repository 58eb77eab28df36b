"""Date functions of row values: date_trunc and EXTRACT/date_part of a DATE or TIMESTAMP clamped to
declared bounds (so within years 1-9999, where every engine computes them without error), with
their derived ranges and domains from Python's (proleptic Gregorian) calendar; and the clamp of a
date to its bounds (clamp_date).
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from fractions import Fraction

from sqlglot import exp

from dpsql.analysis.arithmetic import Arithmetic
from dpsql.analysis.derived import MAX_DOMAIN, Derived, with_domain
from dpsql.analysis.sqltypes import date_bounds_problem, zoned
from dpsql.dialects import EngineDialect, data_type
from dpsql.errors import QueryRejected


class DateFunctions:
    """Derives date functions. derive(node) -> Derived derives their argument (any row expression:
    dpsql.analysis.expressions.Expressions.derive); arith checks the ranges of EXTRACT's numbers."""

    def __init__(self, derive: Callable[[exp.Expression], Derived], dialect: EngineDialect, arith: Arithmetic):
        self.derive, self.dialect, self.arith = derive, dialect, arith

    def argument(self, node: exp.Expression, what: str) -> Derived:
        """The DATE or TIMESTAMP argument of a date function: admitted only clamped to declared
        bounds (so within years 1-9999), and a TIMESTAMP only where its dates and hours do not
        depend on the session's time zone."""
        d = self.derive(node)
        if d.kind in ("date", "timestamp") and d.span is not None:
            return d
        name = d.column[1].name if d.column else "the value"
        if d.kind not in ("date", "timestamp"):
            raise QueryRejected(f"{what} of a {d.kind} value", "it applies to dates and timestamps")
        info = d.column[1] if d.column else None
        stamp = d.kind == "timestamp"
        if stamp and not self.dialect.wall_clock_timestamps:
            raise QueryRejected(f"{what} of a TIMESTAMP column on Spark", "Spark reports its TIMESTAMP (in the "
                                "session's time zone) and TIMESTAMP_NTZ alike, so the result could depend on "
                                "the session's time zone", "group by a DATE column")
        if stamp and info is not None and zoned(info.sql_type):
            raise QueryRejected(f"{what} of {name}, a TIMESTAMP WITH TIME ZONE", "its dates and hours depend "
                                "on the session's time zone", "use a TIMESTAMP column without time zone")
        if info is not None and info.span is not None:
            raise QueryRejected(f"{what} of {name}", date_bounds_problem(info.policy, info.sql_type) or
                                "its declared bounds do not fit its type")
        raise QueryRejected(f"{what} of {name}" + (" (a TIMESTAMP)" if stamp else ""),
                            f"the column has no declared {'' if stamp else 'date '}bounds, so the "
                            "function could fail on some rows ('infinity', years past 9999)",
                            f"ask the data owner to declare lower and upper {'date-times' if stamp else 'dates'}")

    def trunc(self, node: exp.Expression) -> Derived:
        """date_trunc('unit', d) of a DATE with declared bounds: the clamp keeps d inside years
        1-9999, where the conversion to TIMESTAMP and the truncation are total on every engine
        (the conversion is written out, so PostgreSQL does not pick its timestamptz form, which
        depends on the session's time zone); the result is cast back to DATE. Its derived domain
        is every truncated date between the bounds' truncations."""
        unit = node.args.get("unit")
        name = (unit.name if unit is not None else "").lower()
        if name not in _TRUNC_UNITS + _TIME_UNITS:
            raise QueryRejected(f"date_trunc('{name}', ...)", f"the units admitted are {', '.join(_TRUNC_UNITS)} "
                                f"(and {', '.join(_TIME_UNITS)} of a TIMESTAMP)")
        d = self.argument(node.this, "date_trunc")
        if d.kind == "date" and name in _TIME_UNITS:
            raise QueryRejected(f"date_trunc('{name}', ...) of a DATE", f"the units admitted for dates are "
                                f"{', '.join(_TRUNC_UNITS)}")
        lo, hi = (_truncate(v, name) for v in d.span)
        if d.kind == "timestamp":
            # date_trunc of the clamped TIMESTAMP (years 1-9999; a week of 0001-01-01, a Monday,
            # starts on it): total on DuckDB and PostgreSQL, a TIMESTAMP without zone.
            sql = exp.TimestampTrunc(this=d.sql, unit=exp.var(name.upper()))
        elif name == "day":
            sql = d.sql
        else:
            ts = exp.Cast(this=d.sql, to=data_type("TIMESTAMP"))
            sql = exp.Cast(this=exp.TimestampTrunc(this=ts, unit=exp.var(name.upper())),
                           to=data_type("DATE"))
        domain = None
        values, v = [], lo
        while v <= hi and len(values) <= MAX_DOMAIN and (not values or v > values[-1]):
            values.append(v)
            v = _truncate(_step(v, name), name)
        if len(values) <= MAX_DOMAIN:
            domain = tuple(values)
        return Derived(sql, d.kind, d.sql_type, domain=domain, refs=d.refs, span=(lo, hi))

    def extract(self, node: exp.Extract) -> Derived:
        """EXTRACT(field FROM d) / date_part('field', d) of a DATE with declared bounds, as a
        BIGINT: total on the clamped date on every engine (PostgreSQL's numeric result converts
        exactly). DOW counts 0-6 from Sunday as PostgreSQL and DuckDB do; an engine that starts
        elsewhere is shifted by its dialect (EngineDialect.dow_first: Spark's 1-7). Its derived
        range and domain are computed from the bounds with Python's (proleptic Gregorian)
        calendar, which all three engines use."""
        field = node.this.name.lower() if node.this is not None else ""
        field = _FIELD_ALIASES.get(field, field)
        if field not in _FIELDS:
            raise QueryRejected(f"EXTRACT({field.upper()} ...)", f"the fields admitted are "
                                f"{', '.join(f for f in _FIELDS if f not in _TIME_FIELDS)} (and "
                                f"{', '.join(_TIME_FIELDS)} of a TIMESTAMP)")
        d = self.argument(node.expression, "EXTRACT")
        if d.kind == "date" and field in _TIME_FIELDS:
            raise QueryRejected(f"EXTRACT({field.upper()} ...) of a DATE", "a date has no time of day")
        part = {"dow": self.dialect.dow_field, "isodow": self.dialect.isodow_field}.get(field, field.upper())
        sql: exp.Expression = exp.Extract(this=exp.var(part), expression=d.sql)
        if field == "dow" and self.dialect.dow_first:
            sql = exp.Sub(this=sql, expression=exp.Literal.number(self.dialect.dow_first))
        sql = exp.Cast(this=sql, to=data_type("BIGINT"))
        lo, hi = (v.date() if isinstance(v, _dt.datetime) else v for v in d.span)
        if field in _TIME_FIELDS:
            values = set(range(*_FIELD_RANGE[field]))
        elif (hi - lo).days <= 4 * 366:
            values = {_FIELDS[field](lo + _dt.timedelta(days=i)) for i in range((hi - lo).days + 1)}
        elif field == "year":
            values = set(range(lo.year, hi.year + 1))
        else:
            values = set(range(*_FIELD_RANGE[field]))
        out = self.arith.result(sql, Fraction(min(values)), Fraction(max(values)), True, d)
        return with_domain(out, {Fraction(v) for v in values})


_TRUNC_UNITS = ("year", "quarter", "month", "week", "day")
_TIME_UNITS = ("hour", "minute")                # TIMESTAMP only
_TIME_FIELDS = ("hour", "minute")               # TIMESTAMP only (whole numbers on every engine; not SECOND)
_FIELD_ALIASES = {"years": "year", "months": "month", "days": "day", "dayofweek": "dow", "dayofyear": "doy",
                  "weeks": "week", "quarters": "quarter", "hours": "hour", "minutes": "minute"}
_FIELDS: dict[str, Callable[[_dt.date], int]] = {
    "year": lambda d: d.year,
    "quarter": lambda d: (d.month - 1) // 3 + 1,
    "month": lambda d: d.month,
    "week": lambda d: d.isocalendar()[1],
    "day": lambda d: d.day,
    "dow": lambda d: d.isoweekday() % 7,
    "isodow": lambda d: d.isoweekday(),
    "doy": lambda d: d.timetuple().tm_yday,
    "hour": lambda d: d.hour,
    "minute": lambda d: d.minute,
}
_FIELD_RANGE = {"quarter": (1, 5), "month": (1, 13), "week": (1, 54), "day": (1, 32), "dow": (0, 7),
                "isodow": (1, 8), "doy": (1, 367), "hour": (0, 24), "minute": (0, 60)}


def _truncate(v: _dt.date, unit: str) -> _dt.date:
    """v truncated to the unit, as date_trunc does (a datetime stays a datetime)."""
    if isinstance(v, _dt.datetime):
        if unit == "minute":
            return v.replace(second=0, microsecond=0)
        if unit == "hour":
            return v.replace(minute=0, second=0, microsecond=0)
        v = v.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "year":
        return v.replace(month=1, day=1)
    if unit == "quarter":
        return v.replace(month=(v.month - 1) // 3 * 3 + 1, day=1)
    if unit == "month":
        return v.replace(day=1)
    if unit == "week":
        return v - _dt.timedelta(days=v.weekday())     # ISO weeks start on Monday on every engine
    return v


def _step(v: _dt.date, unit: str) -> _dt.date:
    """The first date (or time) of the unit after v's (v truncated); past 9999-12-31 the largest
    value of v's type (the loop ends: it exceeds every truncated bound)."""
    try:
        if unit in _TIME_UNITS:
            return v + _dt.timedelta(hours=1 if unit == "hour" else 0, minutes=1 if unit == "minute" else 0)
        if unit in ("year", "quarter", "month"):
            months = {"year": 12, "quarter": 3, "month": 1}[unit]
            m = v.month - 1 + months
            return v.replace(year=v.year + m // 12, month=m % 12 + 1, day=1)
        return v + _dt.timedelta(days=7 if unit == "week" else 1)
    except (ValueError, OverflowError):
        return _dt.datetime.max if isinstance(v, _dt.datetime) else _dt.date.max


def clamp_date(value: exp.Expression, lo: _dt.date, hi: _dt.date) -> exp.Expression:
    """CASE WHEN d < DATE lo THEN DATE lo WHEN d > DATE hi THEN DATE hi ELSE d END: comparisons of a
    DATE with a DATE constant are total on every engine ('infinity' and BC dates order); NULL
    stays NULL. With datetime bounds (a TIMESTAMP column without zone) the constants are
    TIMESTAMPs, compared as dpsql.analysis.predicates admits a TIMESTAMP column with a literal."""
    def lit(v: _dt.date) -> exp.Expression:
        if isinstance(v, _dt.datetime):
            return exp.Cast(this=exp.Literal.string(v.isoformat(sep=" ")), to=data_type("TIMESTAMP"))
        return exp.Cast(this=exp.Literal.string(v.isoformat()), to=data_type("DATE"))
    return exp.Case(ifs=[exp.If(this=exp.LT(this=value.copy(), expression=lit(lo)), true=lit(lo)),
                         exp.If(this=exp.GT(this=value.copy(), expression=lit(hi)), true=lit(hi))],
                    default=value.copy())
