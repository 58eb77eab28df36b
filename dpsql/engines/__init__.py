"""The engines: run one SELECT and answer catalog questions, nothing about privacy.

    base      the Engine protocol, Rows, TableFacts and check_facts
    factory   open_engine (by target) and path_sources (a policy's file sources)
    duckdb, postgres, spark   one module per engine
"""
from __future__ import annotations

from dpsql.engines.base import Engine, Expect, Rows, TableFacts, check_facts
from dpsql.engines.factory import open_engine, path_sources

__all__ = ["Engine", "Expect", "Rows", "TableFacts", "check_facts", "open_engine", "path_sources"]
