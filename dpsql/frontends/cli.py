"""The `dpsql` command.

    dpsql query "SELECT state, COUNT(*) FROM people GROUP BY state"      # the bundled demo
    dpsql query people.duckdb "SELECT ..." --policy policy.toml --analyst alice
    dpsql demo                                                             # where the demo lives

Front ends talk only to a Session (and the error classes).
"""
from __future__ import annotations

import csv
import io
import json
import math
import sys
from typing import Any

import click

from dpsql import errors
from dpsql.session import Result, Session


def format_value(value: Any, half_width: float | None) -> str:
    """A value for people: noisy numbers rounded to what their noise allows, with ±."""
    if value is None:
        return "NULL"
    if half_width is None or not isinstance(value, float):
        if isinstance(value, float):
            return f"{value:.6g}"
        return str(value)
    if half_width <= 0 or not math.isfinite(half_width):
        return f"{value:.6g}"
    digits = max(0, 1 - math.floor(math.log10(half_width)))
    return f"{value:.{digits}f} ±{half_width:.{digits}f}"


def render_table(result: Result) -> str:
    """An aligned text table; noisy values carry their 95% half-width."""
    if not result.columns:
        return result.tag
    cells = [[format_value(v, hw) for v, hw in zip(row, widths or (None,) * len(row))]
             for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows))]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]
    numeric = [t == "number" for t in result.types]
    def line(values):
        return " | ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()
    out = [line(result.columns), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(out)


def render_csv(result: Result) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(result.columns)
    w.writerows(result.rows)
    return buf.getvalue().rstrip("\n")


def render_json(result: Result) -> str:
    rows = []
    for row, widths in zip(result.rows, result.half_widths or [None] * len(result.rows)):
        item = {}
        for name, v, hw in zip(result.columns, row, widths or (None,) * len(row)):
            item[name] = v if isinstance(v, (int, float, str, bool)) or v is None else str(v)
            if hw is not None:
                item[f"{name}_ci95"] = hw
        rows.append(item)
    doc: dict[str, Any] = {"columns": result.columns, "rows": rows}
    if result.cost is not None:
        doc["epsilon_charged"], doc["delta_charged"] = result.cost.epsilon, result.cost.delta
    if result.spending is not None:
        doc["epsilon_remaining"] = result.spending.epsilon_remaining
        doc["delta_remaining"] = result.spending.delta_remaining
    return json.dumps(doc, indent=2, default=str)


def _fail(err: errors.Error) -> click.ClickException:
    msg = f"{err} [{err.sqlstate}]"
    if getattr(err, "hint", None):
        msg += f"\nhint: {err.hint}"
    return click.ClickException(msg)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpsql")
def cli() -> None:
    """dpsql: differentially private SQL.

    Ask ordinary aggregate SQL of sensitive tables; get noisy answers with their
    accuracy, charged against your privacy budget. With no target, commands use the
    bundled demo (people and visits), created on first use.
    """


@cli.command()
@click.argument("args", nargs=-1, required=True, metavar="[TARGET] SQL")
@click.option("--policy", "-p", help="Policy TOML file (required with a TARGET).")
@click.option("--analyst", "-a", help="Whose budget is charged (required with a TARGET).")
@click.option("--epsilon", "-e", type=float, help="Epsilon for this query (default: the policy's).")
@click.option("--mechanism", type=click.Choice(["laplace", "gaussian", "gaussian_classic"]),
              help="Noise mechanism (default: the policy's).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="Output format.")
def query(args: tuple[str, ...], policy: str | None, analyst: str | None, epsilon: float | None,
          mechanism: str | None, fmt: str) -> None:
    """Run one private query and print the noisy rows.

    TARGET is a DuckDB file (or duckdb:///path). Without it, the query runs on the
    bundled demo as the demo analyst.
    """
    if len(args) > 2:
        raise click.UsageError("give at most a TARGET and one SQL string (quote the SQL)")
    target, sql = (None, args[0]) if len(args) == 1 else args
    if target is not None and (policy is None or analyst is None):
        raise click.UsageError("with a TARGET, give --policy and --analyst")
    try:
        with Session.open(target, policy, analyst) as session:
            if epsilon is not None:
                session.execute(f"SET dpsql.epsilon = {epsilon!r}")
            if mechanism is not None:
                session.execute(f"SET dpsql.mechanism = '{mechanism}'")
            result = session.execute(sql)
    except errors.Error as err:
        raise _fail(err) from None
    if fmt == "csv":
        click.echo(render_csv(result))
    elif fmt == "json":
        click.echo(render_json(result))
    else:
        click.echo(render_table(result))
        if result.kind == "private":
            click.echo(result.status, err=True)


@cli.command()
def demo() -> None:
    """Create the bundled demo if needed and print where it is."""
    db, pol, analyst = Session.demo()
    click.echo(f"database: {db}\npolicy:   {pol}\nanalyst:  {analyst}")


def main() -> None:
    cli(prog_name="dpsql")


if __name__ == "__main__":
    main()
