"""The `dpsql` command.

    dpsql query "SELECT state, COUNT(*) FROM people GROUP BY state"      # the bundled demo
    dpsql query people.duckdb "SELECT ..." --policy policy.toml --analyst alice
    dpsql repl                                                             # interactive, on the demo
    dpsql repl people.duckdb -p policy.toml -a alice < script.sql          # script mode
    dpsql explain "SELECT AVG(income) FROM people"                         # how, without charging
    dpsql budget --policy policy.toml                                      # every analyst's spending
    dpsql policy check policy.toml [--database people.duckdb]              # validate a policy
    dpsql demo                                                             # where the demo lives
    dpsql serve --backend people.duckdb --policy policy.toml               # PostgreSQL wire protocol
    dpsql init people.csv                                                  # a starter policy for a file
    dpsql passwd alice                                                     # a SCRAM verifier for the policy

Front ends talk only to a Session (and the error classes).
"""
from __future__ import annotations

import asyncio
import logging
import re
import shlex
import signal
import sys
from pathlib import Path

import click

from dpsql import errors
from dpsql.admin import check_policy, data_dir, spending_report
from dpsql.frontends.pgwire.auth import make_verifier
from dpsql.frontends.pgwire.limits import tune_allocator
from dpsql.frontends.pgwire.server import Server
from dpsql.frontends.pgwire.workers import Supervisor, WorkerFailed
from dpsql.frontends.render import caret, render_csv, render_json, render_table
from dpsql.frontends.script import run_script
from dpsql.backend import Backend
from dpsql.result import Result, ResultKind
from dpsql.session import Session
from dpsql.starter import database_starter_policy, is_file, starter_policy, table_name

_FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
                       show_default=True, help="Output format.")
_EXPLAIN_DP = re.compile(r"^\s*EXPLAIN\s+DP\b", re.IGNORECASE)


def _fail(err: errors.Error, sql: str | None = None) -> click.ClickException:
    msg = f"{err} [{err.sqlstate}]"
    if (pointer := caret(sql or "", err.position)) is not None:
        msg += "\n" + pointer
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

    TARGET is a DuckDB file (or duckdb:///path), a .csv or .parquet file
    (or a glob of them; one table named by the file's stem), a postgresql:// URL or a
    spark:// URL. Without it, the query runs on the bundled demo as the demo
    analyst.
    """
    target, sql = _target(args, policy, analyst, "SQL string")
    result = _run_one(target, policy, analyst, epsilon, mechanism, sql)
    _echo_result(result, fmt)
    if fmt == "table" and result.kind == "private":
        click.echo(result.status, err=True)


@cli.command()
@click.argument("target")
@click.option("--table", "-t", "tables", multiple=True,
              help="With a database (a DuckDB file or a postgresql:// URL): a table to protect; repeat it.")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Where to write the policy (default: the table's name + .toml in the current directory: "
                   "people.csv -> people.toml; for a database, policy.toml).")
@click.option("--force", is_flag=True, help="Overwrite the output file if it exists.")
def init(target: str, tables: tuple[str, ...], output: str | None, force: bool) -> None:
    """Write a starter policy for a CSV or Parquet file, or for --table tables of a database.

    TARGET is a .csv/.tsv/.parquet file, a DuckDB file or a postgresql:// URL. Every column is
    listed commented out with its type and what each declaration means (privacy_unit,
    lower/upper bounds, values), with a [budget] section. Only column names and types are read:
    no minimum, maximum or distinct values go into the policy. For a file, the table's types
    ([tables.T.types]) are written uncommented: dpsql reads the file with them, never with types
    guessed from the values. Uncomment one privacy_unit line per table and the columns analysts
    may use, then run `dpsql policy check`.
    """
    file_target = is_file(target)
    if file_target and tables:
        raise click.UsageError("--table is for databases; a file is one table, named after the file")
    default = table_name(target) + ".toml" if file_target else "policy.toml"
    out = Path(output) if output else Path(default)
    if out.exists() and not force:
        raise click.ClickException(f"{out} exists; give --force to overwrite it, or --output another file")
    try:
        text = starter_policy(target) if file_target else database_starter_policy(target, list(tables))
    except errors.Error as err:
        raise _fail(err) from None
    out.write_text(text, encoding="utf-8")
    click.echo(f"wrote {out}: uncomment one privacy_unit per table and the columns analysts may use, then run\n"
               f"  dpsql policy check {out} --database {shlex.quote(target)}")


@cli.command()
def demo() -> None:
    """Create the bundled demo if needed and print where it is."""
    db, pol, analyst = Session.demo()
    click.echo(f"database: {db}\npolicy:   {pol}\nanalyst:  {analyst}")


def _target(args: tuple[str, ...], policy: str | None, analyst: str | None, what: str) -> tuple:
    """Split [TARGET] SQL arguments; a TARGET needs --policy and --analyst."""
    if len(args) > 2:
        raise click.UsageError(f"give at most a TARGET and one {what} (quote the SQL)")
    target, rest = (None, args[0]) if len(args) == 1 else args
    if target is not None and (policy is None or analyst is None):
        raise click.UsageError("with a TARGET, give --policy and --analyst")
    return target, rest


def _run_one(target, policy, analyst, epsilon: float | None, mechanism: str | None, sql: str) -> Result:
    """Open a session, apply the one-off settings, run one statement."""
    try:
        with Session.open(target, policy, analyst) as session:
            if epsilon is not None:
                session.execute(f"SET dpsql.epsilon = {epsilon!r}")
            if mechanism is not None:
                session.execute(f"SET dpsql.mechanism = '{mechanism}'")
            return session.execute(sql)
    except errors.Error as err:
        raise _fail(err, sql) from None


def _echo_result(result: Result, fmt: str) -> None:
    if fmt == "csv":
        click.echo(render_csv(result))
    elif fmt == "json":
        click.echo(render_json(result))
    else:
        click.echo(render_table(result))


def _stdin_is_tty() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@cli.command()
@click.argument("target", required=False)
@click.option("--policy", "-p", help="Policy TOML file (required with a TARGET; default: the demo's).")
@click.option("--analyst", "-a", help="Whose budget is charged (required with a TARGET).")
@click.option("--history", type=click.Path(dir_okay=False),
              help="File keeping the interactive command history (default: <data dir>/history, "
                   "where the data dir is $DPSQL_HOME or ~/.local/share/dpsql).")
@click.option("--ascii", "ascii_", is_flag=True,
              help="Draw tables with ASCII characters only (as \\pset linestyle ascii; script output "
                   "always is).")
@_FORMAT
def repl(target: str | None, policy: str | None, analyst: str | None, history: str | None, ascii_: bool,
         fmt: str) -> None:
    """Ask queries interactively, or run a script piped to stdin.

    On a terminal this opens the interactive prompt. When stdin is a pipe or a file
    (dpsql repl < script.sql) it runs script mode: statements end with ';', and
    meta-commands stand on their own lines, the same as at the prompt: \\d [NAME], \\dt,
    \\x, \\pset, \\o FILE, \\i FILE, \\copy (QUERY) TO FILE, \\budget, \\policy, \\epsilon X,
    \\rho X, \\delta X, \\mechanism M, \\explain QUERY, \\timing, \\chart, \\help, \\q (also
    quit, exit, help, .tables, .schema, SHOW TABLES; DESCRIBE t), except \\e, which needs a
    terminal. Each result is printed; a failing statement prints "ERROR: message
    [sqlstate]" to stderr and the script goes on. The exit status is 1 if any statement
    failed, else 0.

    TARGET is a DuckDB file (or duckdb:///path), a .csv or .parquet file (a table named by
    its stem), a postgresql:// URL or a spark:// URL. Without it, the bundled demo is used.
    """
    if target is not None and (policy is None or analyst is None):
        raise click.UsageError("with a TARGET, give --policy and --analyst")
    interactive = _stdin_is_tty()
    try:
        with Session.open(target, policy, analyst) as session:
            if interactive:
                try:
                    # the prompt is optional for every other command: importing prompt_toolkit at the
                    # top would slow every `dpsql query` by its import time (tests/frontends/test_cli.py
                    # checks that the CLI imports neither)
                    from dpsql.frontends import repl as interactive_repl  # optional: the prompt only
                except ImportError as err:
                    raise click.ClickException(f"the interactive prompt is not available ({err}); "
                                               "pipe a script instead: dpsql repl < script.sql") from None
                hist = Path(history) if history else data_dir() / "history"
                code = interactive_repl.run(session, history=hist, ascii=ascii_)
            else:
                code = run_script(session, sys.stdin, sys.stdout, sys.stderr, fmt)
    except errors.Error as err:
        raise _fail(err) from None
    sys.exit(code or 0)


@cli.command()
@click.argument("args", nargs=-1, required=True, metavar="[TARGET] SQL")
@click.option("--policy", "-p", help="Policy TOML file (required with a TARGET).")
@click.option("--analyst", "-a", help="Whose settings and budget apply (required with a TARGET); "
                                      "nothing is charged.")
@click.option("--epsilon", "-e", type=float, help="Epsilon to plan with (default: the policy's).")
@click.option("--mechanism", type=click.Choice(["laplace", "gaussian", "gaussian_classic"]),
              help="Noise mechanism to plan with (default: the policy's).")
@_FORMAT
def explain(args: tuple[str, ...], policy: str | None, analyst: str | None, epsilon: float | None,
            mechanism: str | None, fmt: str) -> None:
    """Plan a query without running or charging it (EXPLAIN DP).

    Prints EXPLAIN DP: each noisy value's mechanism, sensitivity, epsilon, noise scale
    and 95% half-width, the total charge, the contribution bounding, and the rewritten
    SQL that would run. TARGET is a DuckDB file (or duckdb:///path), a .csv or .parquet file
    (or a glob of them; one table named by the file's stem), a postgresql:// URL or a
    spark:// URL; without it, the bundled demo is used.
    """
    target, sql = _target(args, policy, analyst, "SQL string")
    if not _EXPLAIN_DP.match(sql):
        sql = f"EXPLAIN DP {sql}"
    _echo_result(_run_one(target, policy, analyst, epsilon, mechanism, sql), fmt)


@cli.command()
@click.option("--policy", "-p", type=click.Path(dir_okay=False),
              help="Policy TOML file whose ledger to read (default: the demo's).")
@_FORMAT
def budget(policy: str | None, fmt: str) -> None:
    """Show every analyst's privacy spending (admin view).

    Reads the ledger named by the policy (budget.ledger, or <policy>.ledger.sqlite) and
    prints, per analyst: epsilon and delta spent and remaining of the policy's lifetime
    budget, the number of answered queries, rho spent and remaining, and the accountant
    (zcdp: epsilon_spent is what the composed rho implies at the budget's delta; basic: sums).
    Needs no database; charges nothing.
    """
    if policy is None:
        policy = str(Session.demo()[1])
    try:
        report = spending_report(policy)
    except errors.Error as err:
        raise _fail(err) from None
    cols = ["analyst", "epsilon_spent", "epsilon_remaining", "delta_spent", "delta_remaining", "queries",
            "rho_spent", "rho_remaining", "accountant"]
    rows = [(r.spending.analyst, r.spending.epsilon_spent, r.spending.epsilon_remaining,
             r.spending.delta_spent, r.spending.delta_remaining, r.queries,
             r.spending.rho_spent, r.spending.rho_remaining, r.spending.accountant) for r in report]
    result = Result(cols, ["string"] + ["number"] * 7 + ["string"], rows, ResultKind.SHOW, [None] * len(cols),
                    [(None,) * len(cols) for _ in rows], tag=f"SELECT {len(rows)}")
    _echo_result(result, fmt)


@cli.group("policy")
def policy_group() -> None:
    """Validate policy files."""


@policy_group.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--database", "-d", metavar="TARGET",
              help="Also check the policy against this database (a DuckDB file or duckdb:///path, a "
                   ".csv or .parquet file, a postgresql:// or spark:// URL): "
                   "every protected table and declared column exists, with types that fit the "
                   "bounds and domains. Reads the schema only: opens no session and touches no ledger.")
def policy_check(path: str, database: str | None) -> None:
    """Validate a policy file (and optionally match it to a database).

    Prints "OK: FILE: N protected tables" and exits 0, or prints each problem with the
    key and its line in the file and exits 1.
    """
    try:
        report = check_policy(path, database)
    except errors.Error as err:
        raise _fail(err) from None
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if report.ok:
        n = len(report.tables)
        click.echo(f"OK: {path}: {n} protected table{'s' if n != 1 else ''}"
                   + (f" (checked against {database})" if database else ""))
        return
    for problem in report.problems:
        click.echo(problem)
    n = len(report.problems)
    click.echo(f"{path}: {n} problem{'s' if n != 1 else ''}", err=True)
    sys.exit(1)


@cli.command()
@click.option("--backend", "target", metavar="TARGET",
              help="The database: a DuckDB file (or duckdb:///path), a .csv or .parquet file, a "
                   "postgresql:// URL or a spark:// URL (default: the bundled demo).")
@click.option("--policy", "-p", type=click.Path(dir_okay=False),
              help="Policy TOML file (required with --backend; its [server] and [analysts.NAME] "
                   "sections set authentication, TLS and passwords).")
@click.option("--listen", default="127.0.0.1:6432", show_default=True, metavar="HOST:PORT",
              help="Address to listen on.")
@click.option("--max-message-bytes", type=click.IntRange(1024, 1 << 30),
              help="Largest protocol message accepted (default: [server] max_message_bytes, 16 MiB).")
@click.option("--startup-timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds a new connection has to start up and authenticate.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Server processes (N > 1: Linux). One process uses about one CPU core; with N > 1 a supervisor "
                   "hands connections to N processes in turn, and the ledger, the [server] "
                   "limits and cancel requests hold over all of them.")
def serve(target: str | None, policy: str | None, listen: str, max_message_bytes: int | None,
          startup_timeout: float, workers: int) -> None:
    """Serve dpsql over the PostgreSQL wire protocol (psql, psycopg, JDBC, asyncpg...).

    Each client connects as an analyst (the user name) and gets its own session; passwords
    are SCRAM-SHA-256 verifiers in the policy ([analysts.NAME] password = "SCRAM-SHA-256$...",
    printed by `dpsql passwd NAME`). With no --backend and no --policy it serves the bundled
    demo with trust authentication (any user name, loopback clients only). A policy whose
    analysts have no password and whose [server] auth is not "trust" is refused: nobody could
    log in (the error says how to add passwords, or trust on loopback for a demo).

    TARGET is a DuckDB file (or duckdb:///path), a .csv or .parquet file (a table named by its
    stem), a postgresql:// URL or a spark:// URL.
    """
    if target is not None and policy is None:
        raise click.UsageError("with --backend, give --policy")
    host, port = _listen_address(listen)
    demo = target is None and policy is None
    _check_workers(workers, target)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    backend = _serving_backend(target, policy, demo)
    auth = "trust" if demo else None
    tune_allocator()
    if workers > 1:
        _serve_workers(backend, demo, auth, host, port, listen, workers, max_message_bytes, startup_timeout)
        return
    try:
        asyncio.run(_serve_one(backend, demo, auth, host, port, listen, max_message_bytes, startup_timeout))
    finally:
        backend.close()


def _listen_address(listen: str) -> tuple[str, int]:
    """--listen HOST:PORT -> (host, port); an IPv6 host may be bracketed."""
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise click.UsageError("--listen takes HOST:PORT, e.g. 127.0.0.1:6432")
    return host, int(port_text)


def _check_workers(workers: int, target: str | None) -> None:
    """--workers above 1 needs Linux and a DuckDB or PostgreSQL backend."""
    if workers > 1 and not sys.platform.startswith("linux"):
        raise click.UsageError("--workers above 1 needs Linux (it hands connections to the processes over "
                               "SOCK_SEQPACKET sockets); serve with one process here")
    if workers > 1 and (target or "").lower().startswith("spark://"):
        raise click.UsageError("--workers above 1 is for DuckDB and PostgreSQL backends: each process would "
                               "start its own Spark driver; serve Spark with one process")


def _serving_backend(target: str | None, policy: str | None, demo: bool) -> Backend:
    """Open the backend; refuse a policy under which nobody could log in (no analyst has a
    password and [server] auth is not "trust"). The demo is served with trust on loopback."""
    try:
        backend = Backend(target, policy)
    except errors.Error as err:
        raise _fail(err) from None
    if not demo and backend.policy.server.auth != "trust" and \
            not any(a.password for a in backend.policy.analysts.values()):
        backend.close()
        raise click.ClickException(
            f"refusing to start a server nobody can log in to: {policy} gives no analyst a password "
            f"and [server] auth is {backend.policy.server.auth} (the default without a [server] section).\n"
            "Either give each analyst a password: `dpsql passwd alice` prints the lines to add "
            "([analysts.alice] password = \"SCRAM-SHA-256$...\");\n"
            "or, for a demo on this machine only, add\n  [server]\n  auth = \"trust\"\n"
            "to the policy: any user name is then admitted as that analyst, from loopback clients only.")
    return backend


async def _serve_one(backend: Backend, demo: bool, auth: str | None, host: str, port: int, listen: str,
                     max_message_bytes: int | None, startup_timeout: float) -> None:
    """`dpsql serve` in this process: listen until SIGINT or SIGTERM, then close the server."""
    try:
        server = Server(backend, host=host, port=port, auth=auth,
                        max_message_bytes=max_message_bytes, startup_timeout=startup_timeout)
    except (OSError, ValueError) as err:      # an unreadable TLS certificate or key
        raise click.ClickException(f"cannot set up the server: {err}") from None
    try:
        await server.start()
    except OSError as err:
        raise click.ClickException(f"cannot listen on {listen}: {err.strerror or err}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    _serving_line(backend, demo, host, server.port, server.auth, server.ssl_context is not None)
    await stop.wait()
    click.echo("dpsql: shutting down", err=True)
    await server.close()


def _serving_line(backend, demo: bool, host: str, port: int, auth: str, tls: bool, workers: int = 1) -> None:
    who = "analyst" if demo else (sorted(backend.policy.analysts) or ["<analyst>"])[0]
    db = Path(str(backend.target)).stem if demo or "://" not in str(backend.target) else \
        (str(backend.target).rsplit("/", 1)[-1].split("?")[0] or "dpsql")
    procs = f", {workers} processes" if workers > 1 else ""
    click.echo(f"dpsql serving {_safe_target(backend.target)} on {host}:{port} "
               f"(auth {auth}{', tls' if tls else ''}{procs}); connect with: "
               f"psql -h {host} -p {port} -U {who} {db}", err=True)


def _serve_workers(backend, demo: bool, auth: str | None, host: str, port: int, listen: str, workers: int,
                   max_message_bytes: int | None, startup_timeout: float) -> None:
    """`dpsql serve --workers N`: the supervisor (dpsql.frontends.pgwire.workers). The Backend
    opened above has checked the target and the policy; each worker opens its own."""
    target, server_policy, source = str(backend.target), backend.policy.server, backend.policy.source
    backend.close()
    config = {"target": target, "policy": str(Path(source).resolve()), "auth": auth,
              "max_message_bytes": max_message_bytes, "startup_timeout": startup_timeout}
    sup = Supervisor(config, workers, host, port)
    try:
        sup.start()
    except WorkerFailed as err:
        raise click.ClickException(str(err)) from None
    except OSError as err:
        raise click.ClickException(f"cannot listen on {listen}: {err.strerror or err}") from None
    try:
        tls = server_policy.tls_cert is not None and server_policy.tls_key is not None
        _serving_line(backend, demo, host, sup.port, auth or server_policy.auth, tls, workers)
        sup.serve()
        click.echo("dpsql: shutting down", err=True)
    finally:
        sup.close()
    if sup.failure:
        raise click.ClickException(sup.failure)


def _safe_target(target) -> str:
    """The backend for the startup line, without a password."""
    text = str(target)
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", text)


@cli.command()
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin (one line) instead of prompting.")
@click.option("--iterations", type=click.IntRange(4096, 10_000_000), default=4096, show_default=True,
              help="PBKDF2 iterations.")
def passwd(name: str, password_stdin: bool, iterations: int) -> None:
    """Print a SCRAM-SHA-256 verifier for an analyst's password (stdout), for the policy:

        [analysts.NAME]
        password = "SCRAM-SHA-256$4096:..."

    The server stores only the verifier; it cannot recover the password from it.
    """
    if not re.fullmatch(r"[\w.@+-]{1,128}", name):
        raise click.UsageError("an analyst name has 1-128 letters, digits or . _ @ + -")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt="Repeat password", err=True)
    if not password:
        raise click.ClickException("the password is empty")
    verifier = make_verifier(password, iterations=iterations)
    click.echo(verifier)
    click.echo(f'add to the policy:\n[analysts.{name}]\npassword = "{verifier}"', err=True)


def main() -> None:
    cli(prog_name="dpsql")


if __name__ == "__main__":
    main()
