"""Prints the oracle's coverage (queries, refusals, distinct shapes, mismatches per oracle) at
the end of a pytest run that ran it."""
from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.oracle.run import SUMMARIES
    if SUMMARIES:
        terminalreporter.section("dpsql oracle coverage")
        for s in SUMMARIES:
            terminalreporter.write_line(s)
