"""The `dpsql` command.

    dpsql query "SELECT state, COUNT(*) FROM people GROUP BY state"      # the bundled demo
    dpsql query people.duckdb "SELECT ..." --policy policy.toml --analyst alice
    dpsql demo                                                             # where the demo lives

Front ends talk only to a Session (and the error classes).
"""
from __future__ import annotations

import click

from dpsql import errors
from dpsql.frontends.render import render_csv, render_json, render_table
from dpsql.session import Session


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
