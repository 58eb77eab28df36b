"""What kind of statement a client sent: the proxy's one statement classifier.

`classify(sql)` reads a statement's first keyword (comments, leading `(` and `;` skipped) into a
`StatementKind`; the protocol (protocol.py) keeps transaction status and query slots by it, the
handler (handler.py) picks the catalog or the Session by it, and the catalog emulation
(catalog.py) dispatches its housekeeping commands by it. The kind says which family a statement
belongs to, not that it is well formed: the `*_RE` patterns below are the full syntax the
catalog accepts for each family (a statement of the family that does not match goes on to the
Session, which reports why it is not one).

The Session has its own reader, `dpsql.analysis.parse.classify`, for the statements that reach
it (dpsql's SET/SHOW/RESET, EXPLAIN DP and queries, parsed into sqlglot trees); this module
decides only what the wire layer must know before, and without, parsing.
"""
from __future__ import annotations

import enum
import re

from dpsql.sqltext import strip_comments


class StatementKind(enum.Enum):
    EMPTY = "empty"              # no keyword at its start (an empty statement, or not one at all)
    BEGIN = "begin"              # BEGIN, START TRANSACTION
    COMMIT = "commit"            # COMMIT, END
    ROLLBACK = "rollback"        # ROLLBACK, ABORT
    ROLLBACK_TO = "rollback to"  # ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name
    SAVEPOINT = "savepoint"
    RELEASE = "release"
    SET = "set"
    RESET = "reset"
    SHOW = "show"
    DISCARD = "discard"
    DEALLOCATE = "deallocate"
    COPY = "copy"
    QUERY = "query"              # SELECT, WITH, VALUES, TABLE
    OTHER = "other"              # EXPLAIN and everything else: the Session decides

    @property
    def starts_transaction(self) -> bool:
        return self is StatementKind.BEGIN

    @property
    def ends_transaction(self) -> bool:
        """COMMIT or ROLLBACK (not ROLLBACK TO, which stays in the block)."""
        return self in (StatementKind.COMMIT, StatementKind.ROLLBACK)

    @property
    def transaction_control(self) -> bool:
        return self in _TRANSACTION

    @property
    def housekeeping(self) -> bool:
        """Answered from the connection's own state (settings, transaction status, prepared
        statements) in microseconds: it never reaches an engine or the catalog database, so it
        cannot hold a worker, and refusing it would only break drivers' connection setup and
        COMMIT/ROLLBACK. Every other statement (private, public and catalog queries, EXPLAIN,
        Describe) takes one of the analyst's query slots."""
        return self in _HOUSEKEEPING


_TRANSACTION = frozenset({StatementKind.BEGIN, StatementKind.COMMIT, StatementKind.ROLLBACK,
                          StatementKind.ROLLBACK_TO, StatementKind.SAVEPOINT, StatementKind.RELEASE})
_HOUSEKEEPING = _TRANSACTION | {StatementKind.SET, StatementKind.RESET, StatementKind.SHOW,
                                StatementKind.DISCARD, StatementKind.DEALLOCATE}

_WORDS = {
    "BEGIN": StatementKind.BEGIN, "START": StatementKind.BEGIN, "COMMIT": StatementKind.COMMIT,
    "END": StatementKind.COMMIT, "ROLLBACK": StatementKind.ROLLBACK, "ABORT": StatementKind.ROLLBACK,
    "SAVEPOINT": StatementKind.SAVEPOINT, "RELEASE": StatementKind.RELEASE, "SET": StatementKind.SET,
    "RESET": StatementKind.RESET, "SHOW": StatementKind.SHOW, "DISCARD": StatementKind.DISCARD,
    "DEALLOCATE": StatementKind.DEALLOCATE, "COPY": StatementKind.COPY, "SELECT": StatementKind.QUERY,
    "WITH": StatementKind.QUERY, "VALUES": StatementKind.QUERY, "TABLE": StatementKind.QUERY,
}


def first_word(sql: str) -> str:
    """The statement's first keyword in upper case ("" if it does not start with one)."""
    text = strip_comments(sql).lstrip(" \t\r\n(;")
    i = 0
    while i < len(text) and (text[i].isalpha() or text[i] == "_"):
        i += 1
    return text[:i].upper()


def classify(sql: str) -> StatementKind:
    word = first_word(sql)
    if not word:
        return StatementKind.EMPTY
    kind = _WORDS.get(word, StatementKind.OTHER)
    if word == "ROLLBACK" and _rollback_to(sql):
        return StatementKind.ROLLBACK_TO
    return kind


def _rollback_to(sql: str) -> bool:
    words = strip_comments(sql).upper().split()
    return len(words) >= 2 and words[1] == "TO" or (len(words) >= 3 and words[2] == "TO")


def normalize(sql: str) -> str:
    """Comments off, outer blanks and trailing semicolons off: the text the patterns read."""
    return strip_comments(sql).strip().rstrip(";").strip()


def deallocated(sql: str) -> str:
    """The name a DEALLOCATE names ("ALL" in any case for all of them)."""
    return strip_comments(sql).split()[-1].strip(' ;"')


def discards_all(sql: str) -> bool:
    return "ALL" in sql.upper()


def transaction_tag(sql: str) -> str:
    """The command tag of a transaction command (START -> START TRANSACTION, END -> COMMIT...)."""
    word = first_word(sql)
    return {"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}.get(word, word)


def mentions_dpsql(sql: str) -> bool:
    """A statement about dpsql's own settings (SET/SHOW/RESET dpsql.*), which the Session reads."""
    return "dpsql." in sql.lower()


# Settings drivers send on connecting, accepted when the catalog layer is absent.
DRIVER_SETTING_RE = re.compile(r"^\s*SET\s+(?:SESSION\s+)?(extra_float_digits|application_name|client_encoding|"
                               r"datestyle|timezone|search_path|intervalstyle)\b", re.IGNORECASE)

# The full syntax of each housekeeping family, on normalize()d text (catalog.py answers these).
SET_RE = re.compile(r"(?is)^set\s+(?:(session|local)\s+)?(?!session\s+characteristics|transaction\b)"
                    r"(time\s+zone|names|schema|role|session\s+authorization|[\w.\"]+)\s*(?:(?:=|\bto\b)\s*)?(.*)$")
SET_ROLE_RE = re.compile(r"(?is)^set\s+(session\s+|local\s+)?(role|session\s+authorization)\b")
SHOW_RE = re.compile(r"(?is)^show\s+(transaction\s+isolation\s+level|time\s+zone|session\s+authorization|all|"
                     r"[\w.\"]+)$")
RESET_RE = re.compile(r"(?is)^reset\s+(all|time\s+zone|session\s+authorization|[\w.\"]+)$")
BEGIN_RE = re.compile(r"(?is)^(begin|start)(\s+(work|transaction))?(\s+.*)?$")
COMMIT_RE = re.compile(r"(?is)^(commit|end)(\s+(work|transaction))?(\s+and\s+(no\s+)?chain)?$")
ROLLBACK_RE = re.compile(r"(?is)^(rollback|abort)(\s+(work|transaction))?(\s+and\s+(no\s+)?chain)?$")
ROLLBACK_TO_RE = re.compile(r"(?is)^rollback(\s+(work|transaction))?\s+to\s+(savepoint\s+)?[\w\"]+$")
SAVEPOINT_RE = re.compile(r"(?is)^savepoint\s+[\w\"]+$")
RELEASE_RE = re.compile(r"(?is)^release(\s+savepoint)?\s+[\w\"]+$")
DEALLOCATE_RE = re.compile(r"(?is)^deallocate(\s+prepare)?\s+(all|[\w\"]+)$")
DISCARD_RE = re.compile(r"(?is)^discard\s+(all|plans|sequences|temp|temporary)$")
TRANSACTION_SETTING_RE = re.compile(r"(?is)^set\s+(session\s+characteristics\s+as\s+)?transaction\b")
ISOLATION_RE = re.compile(r"(?is)isolation\s+level\s+(read\s+committed|read\s+uncommitted|repeatable\s+read|"
                          r"serializable)")
