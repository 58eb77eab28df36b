"""The shell's commands that read and write files: \\o FILE (results to a file), \\i FILE (run a
file), \\e (edit the last query), \\copy (QUERY) TO FILE and \\g [FILE] (the last query again).

`\\copy` writes a released (noisy) result as CSV: nothing reaches the file that the analyst could
not see on the screen (a table's rows are refused by `meta.parse_copy`).

FileCommands is a part of `commands.Shell`, kept apart by job; it uses the Shell's state (session,
output, last_query, last_private, depth) and its methods (statement, meta, error, info, write_raw).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from dpsql import errors
from dpsql.frontends.meta import parse_copy, split_script, unquote
from dpsql.frontends.render import render_csv
from dpsql.sqltext import split_statements

MAX_INCLUDE_DEPTH = 16


class FileCommands:
    """\\o, \\i, \\e, \\copy and \\g of a Shell."""

    def do_o(self, arg: str) -> None:
        if self.output is not None:
            self.output.close()
            self.output = None
        if arg:
            try:
                path = os.path.expanduser(unquote(arg))
                self.output = open(path, "w", encoding="utf-8")  # noqa: SIM115 - open until \\o or the end
            except OSError as err:
                self.error(errors.InterfaceError(f"\\o: cannot write {arg}: {err.strerror}"))

    def do_i(self, arg: str) -> bool:
        if not arg:
            self.error(errors.SqlSyntaxError("\\i takes a file name"))
            return True
        if self.depth >= MAX_INCLUDE_DEPTH:
            self.error(errors.InterfaceError(f"\\i: more than {MAX_INCLUDE_DEPTH} nested files"))
            return True
        try:
            text = Path(os.path.expanduser(unquote(arg))).read_text(encoding="utf-8")
        except OSError as err:
            self.error(errors.InterfaceError(f"\\i: cannot read {arg}: {err.strerror}"))
            return True
        self.depth += 1
        try:
            for stmt in split_script(text):
                if stmt.meta:
                    if not self.meta(stmt.text):
                        return False
                else:
                    self.statement(stmt.text)
        finally:
            self.depth -= 1
        return True

    def do_e(self, arg: str) -> None:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False, encoding="utf-8") as f:
            f.write((self.last_query or "").rstrip().rstrip(";") + (";\n" if self.last_query else ""))
            path = f.name
        try:
            try:
                subprocess.run([*shlex.split(editor), path], check=False)
            except OSError as err:
                self.error(errors.InterfaceError(f"\\e: cannot run the editor {editor!r}: {err.strerror}"))
                return
            text = Path(path).read_text(encoding="utf-8").strip()
        finally:
            os.unlink(path)
        if not text:
            return
        statements, rest = split_statements(text)
        self.info(text, style="")
        for stmt in statements:
            self.statement(stmt)
        if rest.strip():
            self.last_query = rest.strip()
            self.info("not run: the edited query does not end with ';' (\\e again to finish it)")

    def do_copy(self, arg: str) -> None:
        try:
            query, dest = parse_copy(arg)
        except errors.Error as err:
            self.error(err)
            return
        try:
            result = self.session.execute(query)
        except errors.Error as err:
            self.error(err)
            return
        if result.kind == "private":
            self.last_private = result
        if not result.columns:
            self.error(errors.ProgrammingError("\\copy: the statement returned no rows to copy"))
            return
        text = render_csv(result) + "\n"
        if dest is None:
            self.write_raw(text)
        else:
            try:
                Path(dest).write_text(text, encoding="utf-8")
            except OSError as err:
                self.error(errors.InterfaceError(f"\\copy: cannot write {dest}: {err.strerror}"))
                return
        self.info(f"COPY {len(result.rows)}")
        if result.kind == "private":
            self.info(result.status, style="cyan")

    def do_g(self, arg: str) -> None:
        """psql's \\g: the last query again; \\g FILE sends its result to FILE (the screen after)."""
        if self.last_query is None:
            self.error(errors.ProgrammingError("\\g: there is no query to run yet", "type a query ending with ';'"))
            return
        if not arg:
            self.statement(self.last_query)
            return
        saved, self.output = self.output, None
        try:
            path = os.path.expanduser(unquote(arg))
            self.output = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as err:
            self.output = saved
            self.error(errors.InterfaceError(f"\\g: cannot write {arg}: {err.strerror}"))
            return
        try:
            self.statement(self.last_query)
        finally:
            self.output.close()
            self.output = saved
