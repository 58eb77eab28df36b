"""Pure parts of the field benchmark: parse worker output, compute the speed and accuracy tables,
render markdown. No database, no anchors: tests/bench/test_field_harness.py drives it with fixtures.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

SYSTEMS = ("dpsql", "smartnoise", "qrlew")


class WorkerError(ValueError):
    """A worker's output is not the JSON the harness expects."""


def parse_worker_output(text: str, system: str) -> dict:
    """Check and normalise a worker's stdout: {"system", "version", "settings", "results": [...]}.

    Each result gets status "ok" or "refused"; an ok result's times are positive numbers and its
    releases map an epsilon (string) to a list of releases, each a list of rows (keys..., value).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise WorkerError(f"{system}: worker output is not JSON ({err.msg} at {err.pos})") from None
    if not isinstance(data, dict) or data.get("system") != system:
        raise WorkerError(f"{system}: worker output names system {data.get('system') if isinstance(data, dict) else None!r}")
    results = data.get("results")
    if not isinstance(results, list):
        raise WorkerError(f"{system}: no results list")
    seen = set()
    for r in results:
        key = r.get("key")
        if not isinstance(key, str) or key in seen:
            raise WorkerError(f"{system}: result without a unique key: {key!r}")
        seen.add(key)
        status = r.get("status")
        if status not in ("ok", "refused"):
            raise WorkerError(f"{system} {key}: status {status!r}")
        if status == "refused":
            if not r.get("error"):
                raise WorkerError(f"{system} {key}: refused without an error")
            continue
        times = r.get("times_ms")
        if times is not None and (not isinstance(times, list)
                                  or not all(isinstance(t, (int, float)) and t > 0 for t in times)):
            raise WorkerError(f"{system} {key}: times_ms must be positive numbers")
        rel = r.setdefault("releases", {})
        for eps, releases in rel.items():
            float(eps)
            if not isinstance(releases, list) or not all(isinstance(x, list) for x in releases):
                raise WorkerError(f"{system} {key}: releases at epsilon {eps} are not lists of rows")
    data["by_key"] = {r["key"]: r for r in results}
    return data


def median(xs: Sequence[float] | None) -> float | None:
    return statistics.median(xs) if xs else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of nothing")
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# --- speed -------------------------------------------------------------------------------------------

SPEED_COLUMNS = ("raw_pg", "dpsql_pg", "smartnoise_pg", "raw_duckdb", "dpsql_duckdb", "qrlew_duckdb")


@dataclass
class SpeedRow:
    size: int
    query: str
    ms: dict[str, float | None]              # median per column of SPEED_COLUMNS
    notes: dict[str, str]                     # e.g. {"smartnoise_pg": "refused: ..."}

    @property
    def dpsql_vs_smartnoise(self) -> float | None:
        return ratio(self.ms.get("dpsql_pg"), self.ms.get("smartnoise_pg"))

    @property
    def dpsql_vs_qrlew(self) -> float | None:
        return ratio(self.ms.get("dpsql_duckdb"), self.ms.get("qrlew_duckdb"))

    @property
    def smartnoise_speedup(self) -> float | None:
        """How many times faster dpsql is than SmartNoise (target >= 3 at 1M people)."""
        return ratio(self.ms.get("smartnoise_pg"), self.ms.get("dpsql_pg"))


def speed_rows(speed: dict[str, dict[str, dict[str, Any]]]) -> list[SpeedRow]:
    """speed[size][query][column] = list of ms, or {"refused": error}; -> one row per (size, query)."""
    rows = []
    for size in sorted(speed, key=int):
        for q in sorted(speed[size]):
            ms, notes = {}, {}
            for col in SPEED_COLUMNS:
                v = speed[size][q].get(col)
                if isinstance(v, dict):
                    ms[col] = None
                    notes[col] = "refused" if "refused" in v else "skipped"
                else:
                    ms[col] = median(v)
            rows.append(SpeedRow(int(size), q, ms, notes))
    return rows


# --- accuracy ----------------------------------------------------------------------------------------

@dataclass
class ErrorStats:
    median_rel: float | None
    p95_abs: float | None
    suppressed: float              # fraction of (release, exact group) pairs missing from releases
    cells: int                     # released (release, group) values compared


def _keyed(rows: Iterable[Sequence[Any]]) -> dict[tuple, float | None]:
    out = {}
    for r in rows:
        key = tuple("" if k is None else str(k) for k in r[:-1])
        v = r[-1]
        out[key] = None if v is None else float(v)
    return out


def error_stats(releases: Sequence[Sequence[Sequence[Any]]], exact: Sequence[Sequence[Any]]) -> ErrorStats:
    """Errors of every released value against the exact answer, over all releases and groups.

    A row is (keys..., value); rows are matched on their keys. A group of the exact answer that a
    release lacks is counted as suppressed (not as an error); a released value of None (e.g. an AVG
    with no count) counts as suppressed too. Groups a release invents (not in the exact answer) are
    ignored.
    """
    truth = _keyed(exact)
    rel, ab, missing, total = [], [], 0, 0
    for release in releases:
        got = _keyed(release)
        for key, e in truth.items():
            total += 1
            v = got.get(key)
            if v is None or e is None or math.isnan(v):
                missing += 1
                continue
            err = abs(v - e)
            ab.append(err)
            rel.append(err / abs(e) if e else math.inf)
    return ErrorStats(median(rel), percentile(ab, 95) if ab else None,
                      missing / total if total else 0.0, len(ab))


def accuracy_table(acc: dict[str, dict[str, dict[str, list]]], exact: dict[str, list], epsilon: str
                   ) -> dict[str, dict[str, ErrorStats]]:
    """acc[query][system][epsilon] = releases -> table[query][system] = ErrorStats (at `epsilon`)."""
    table: dict[str, dict[str, ErrorStats]] = {}
    for q in sorted(acc):
        for system, by_eps in acc[q].items():
            releases = by_eps.get(epsilon)
            if releases:
                table.setdefault(q, {})[system] = error_stats(releases, exact[q])
    return table


def error_curves(acc: dict[str, dict[str, dict[str, list]]], exact: dict[str, list]
                 ) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """curves[query][system] = [(epsilon, median relative error)] sorted by epsilon."""
    curves: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for q in sorted(acc):
        for system, by_eps in acc[q].items():
            pts = []
            for eps, releases in by_eps.items():
                s = error_stats(releases, exact[q])
                if s.median_rel is not None:
                    pts.append((float(eps), s.median_rel))
            if pts:
                curves.setdefault(q, {})[system] = sorted(pts)
    return curves


# --- targets -----------------------------------------------------------------------------------------

def speed_target(rows: Sequence[SpeedRow], size: int, factor: float = 3.0) -> list[tuple[str, float | None, bool]]:
    """(query, dpsql speed-up over SmartNoise, met) for every query at `size`."""
    out = []
    for r in rows:
        if r.size == size:
            s = r.smartnoise_speedup
            out.append((r.query, s, s is not None and s >= factor))
    return out


def accuracy_target(table: dict[str, dict[str, ErrorStats]], strict: Iterable[str]
                    ) -> list[tuple[str, float | None, float | None, bool]]:
    """(query, dpsql median rel. error, SmartNoise's, met): dpsql <= SmartNoise, and < on `strict` queries."""
    strict = set(strict)
    out = []
    for q, systems in table.items():
        d, s = systems.get("dpsql"), systems.get("smartnoise")
        dm = d.median_rel if d else None
        sm = s.median_rel if s else None
        if dm is None or sm is None:
            out.append((q, dm, sm, False))
            continue
        out.append((q, dm, sm, dm < sm if q in strict else dm <= sm))
    return out


# --- rendering ---------------------------------------------------------------------------------------

def fmt_ms(v: float | None, note: str | None = None) -> str:
    if v is None:
        return note or "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def fmt_ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def fmt_err(v: float | None) -> str:
    if v is None:
        return "—"
    if v == 0:
        return "0"
    if math.isinf(v):
        return "inf"
    return f"{v:.2e}" if (abs(v) < 1e-3 or abs(v) >= 1e5) else f"{v:.4g}"


def render_speed(rows: Sequence[SpeedRow]) -> str:
    head = ("| size | query | raw PG | dpsql PG | SmartNoise PG | dpsql/SmartNoise | raw DuckDB | "
            "dpsql DuckDB | Qrlew DuckDB | dpsql/Qrlew |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        c = [fmt_ms(r.ms.get(k), r.notes.get(k)) for k in SPEED_COLUMNS]
        lines.append(f"| {r.size:,} | {r.query} | {c[0]} | {c[1]} | {c[2]} | {fmt_ratio(r.dpsql_vs_smartnoise)} | "
                     f"{c[3]} | {c[4]} | {c[5]} | {fmt_ratio(r.dpsql_vs_qrlew)} |")
    return "\n".join(lines)


def render_accuracy(table: dict[str, dict[str, ErrorStats]], systems: Sequence[str] = SYSTEMS,
                    refused: dict[str, dict[str, str]] | None = None) -> str:
    refused = refused or {}
    head = "| query | " + " | ".join(f"{s} med. rel. err | {s} p95 abs. err | {s} suppressed" for s in systems) + " |"
    lines = [head, "|" + "---|" * (1 + 3 * len(systems))]
    for q, by in table.items():
        cells = []
        for s in systems:
            st = by.get(s)
            if st is None:
                why = "refused" if q in refused.get(s, {}) else "—"
                cells += [why, why, why]
            else:
                cells += [fmt_err(st.median_rel), fmt_err(st.p95_abs), f"{st.suppressed:.0%}"]
        lines.append(f"| {q} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
