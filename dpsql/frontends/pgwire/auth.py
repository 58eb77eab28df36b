"""SCRAM-SHA-256 (RFC 5802, RFC 7677) for `dpsql serve`, sans-IO.

Verifiers have PostgreSQL's format, `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
(base64 fields), so one made by `dpsql passwd` or copied from pg_authid works. The server keeps
only StoredKey and ServerKey: it can check a client's proof, never recover the password.

An unknown user gets a mock exchange (MockParams) that looks like a real user's and fails like
a wrong password: no user enumeration. Its salt is derived from the name and a server secret
that survives restarts, its iteration count and salt length are those of the server's real
verifiers. Every comparison of secrets is hmac.compare_digest.
Channel binding is not offered (SCRAM-SHA-256 only, never -PLUS).
"""
from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import logging
import os
import re
import secrets
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from dpsql.errors import AuthenticationFailed, OperationalError, ProtocolViolation
from dpsql.sources import ledger_path

log = logging.getLogger("dpsql.server")

MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096
_VERIFIER = re.compile(r"^SCRAM-SHA-256\$(\d+):([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+):([A-Za-z0-9+/=]+)$")
DEFAULT_SALT_LENGTH = 16
SECRET_BYTES = 32


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _h(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _unb64(s: str) -> bytes:
    try:
        return base64.b64decode(s, validate=True)
    except (ValueError, base64.binascii.Error):
        raise ProtocolViolation("malformed SCRAM message: bad base64") from None


def _normalize(password: str) -> bytes:
    """SASLprep's effect on ordinary passwords (NFKC; non-ASCII spaces to space); PostgreSQL
    uses the raw bytes when SASLprep fails, and so do we for anything odd."""
    try:
        mapped = "".join(" " if unicodedata.category(c) == "Zs" else c for c in password
                         if c not in "\u00ad\u200b\u2060\ufeff")
        return unicodedata.normalize("NFKC", mapped).encode("utf-8")
    except Exception:   # pragma: no cover - defensive
        return password.encode("utf-8")


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", _normalize(password), salt, iterations)


def make_verifier(password: str, *, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS) -> str:
    """A PostgreSQL-format SCRAM-SHA-256 verifier for a password."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    sp = salted_password(password, salt, iterations)
    stored = _h(_hmac(sp, b"Client Key"))
    server = _hmac(sp, b"Server Key")
    return f"SCRAM-SHA-256${iterations}:{_b64(salt)}${_b64(stored)}:{_b64(server)}"


def parse_verifier(verifier: str) -> tuple[int, bytes, bytes, bytes]:
    """(iterations, salt, StoredKey, ServerKey); ValueError if it is not a verifier."""
    m = _VERIFIER.match(verifier or "")
    if not m:
        raise ValueError("not a SCRAM-SHA-256 verifier")
    it = int(m.group(1))
    salt, stored, server = (base64.b64decode(m.group(i)) for i in (2, 3, 4))
    if it < 1 or len(stored) != 32 or len(server) != 32:
        raise ValueError("not a SCRAM-SHA-256 verifier")
    return it, salt, stored, server


@dataclass(frozen=True)
class MockParams:
    """How the server answers a user name it has no verifier for.

    The server-first message of SCRAM shows the salt and the iteration count. If an unknown name
    got a different shape (iteration count, salt length) than the real ones, or a salt that
    changes when the server restarts while a real user's never does, anyone could tell which
    names are analysts by connecting twice. So the mock exchange has:

    - the iteration count and salt length of the server's real verifiers (the most common pair
      among the policy's [analysts.NAME] passwords; 4096 and 16 bytes, what `dpsql passwd` makes,
      when there are none);
    - a salt derived from the name by HMAC-SHA-256 under `secret`: the same name always gets the
      same salt, different names different salts, and nobody without the secret can tell the
      salt from random. The secret survives restarts (`server_secret`), as PostgreSQL's mock
      nonce does (it lives in pg_control).

    A real analyst whose verifier has an unusual shape remains distinguishable from the unknown
    names, as they are on PostgreSQL: only the common shape can be imitated.
    """
    secret: bytes
    iterations: int = DEFAULT_ITERATIONS
    salt_length: int = DEFAULT_SALT_LENGTH

    @classmethod
    def for_policy(cls, policy) -> MockParams:
        verifiers = [a.password for a in policy.analysts.values() if a.password]
        iterations, salt_length = verifier_shape(verifiers)
        return cls(server_secret(policy), iterations, salt_length)

    def verifier(self, user: str) -> tuple[int, bytes, bytes, bytes]:
        """(iterations, salt, StoredKey, ServerKey) for an unknown user: keys nobody knows."""
        name = user.encode("utf-8", "replace")
        salt = b""
        block = 0
        while len(salt) < self.salt_length:
            salt += _hmac(self.secret, b"salt:%d:" % block + name)
            block += 1
        return (self.iterations, salt[:self.salt_length], _hmac(self.secret, b"stored"),
                _hmac(self.secret, b"server"))


def verifier_shape(verifiers) -> tuple[int, int]:
    """The most common (iterations, salt length) among SCRAM verifiers; the default if none parses."""
    shapes = collections.Counter()
    for v in verifiers:
        try:
            it, salt, _, _ = parse_verifier(v)
        except ValueError:
            continue
        shapes[(it, len(salt))] += 1
    if not shapes:
        return DEFAULT_ITERATIONS, DEFAULT_SALT_LENGTH
    return max(shapes.items(), key=lambda kv: (kv[1], kv[0]))[0]


def secret_path(policy) -> Path | None:
    """Where the server secret lives: beside the ledger (LEDGER.server-secret); None when the
    ledger is in memory."""
    try:
        ledger = ledger_path(policy)
    except Exception:     # noqa: BLE001 - no ledger file named: nothing persistent to put it beside
        return None
    text = str(ledger)
    if text in ("", ":memory:") or text.startswith("file::memory:"):
        return None
    return ledger.with_name(ledger.stem + ".server-secret")


def server_secret(policy) -> bytes:
    """A 32-byte secret that survives restarts, for the mock SCRAM salts.

    Kept in a file beside the privacy ledger (LEDGER.server-secret), created on first start
    with mode 0600: the ledger's directory is already the server's persistent, private state,
    and a file of its own does not change when analysts or passwords do (a secret derived from
    the verifiers would, and every unknown name's salt with it, which is the very difference
    this hides). Created under a temporary name and linked into place, so two servers starting
    at once agree on one secret.

    With the ledger in memory nothing persists (budgets neither); the secret is then derived
    from the policy's verifiers (secret, and stable while the analysts are), or random if
    there are none."""
    path = secret_path(policy)
    if path is not None:
        try:
            return _load_or_create(path)
        except OSError as err:
            log.warning("server secret %s: %s; unknown users' SCRAM salts will change when the analysts do",
                        path, err.strerror or err)
    keys = sorted(f"{name}\0{a.password}" for name, a in policy.analysts.items() if a.password)
    if keys:
        return _hmac(b"dpsql mock SCRAM secret", "\n".join(keys).encode("utf-8"))
    return secrets.token_bytes(SECRET_BYTES)


def _load_or_create(path: Path) -> bytes:
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)     # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(SECRET_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)          # atomic, never replaces: the first server to start wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    with open(path, "rb") as f:
        data = f.read(SECRET_BYTES + 1)
        mode = os.fstat(f.fileno()).st_mode
    if len(data) != SECRET_BYTES:
        raise OperationalError(f"server secret {path}: expected {SECRET_BYTES} bytes; delete the file to "
                               f"make a new one (unknown users' SCRAM salts will change once)")
    if mode & 0o077:
        log.warning("server secret %s is readable by other users; chmod 600 it", path)
    return data


_PROCESS_MOCK = MockParams(secrets.token_bytes(SECRET_BYTES))


def mock_verifier(user: str, params: MockParams | None = None) -> tuple[int, bytes, bytes, bytes]:
    """What an unknown user is checked against (see MockParams; without one, a per-process secret)."""
    return (params or _PROCESS_MOCK).verifier(user)


class ScramServer:
    """One server-side SCRAM-SHA-256 exchange.

        s = ScramServer(verifier_or_None, user)
        server_first = s.first(client_first)      # AuthenticationSASLContinue
        server_final = s.final(client_final)      # AuthenticationSASLFinal; AuthenticationFailed if wrong
    """

    def __init__(self, verifier: str | None, user: str, *, nonce: str | None = None,
                 mock: MockParams | None = None):
        self.user = user
        self._known = verifier is not None
        try:
            self._it, self._salt, self._stored, self._server = (
                parse_verifier(verifier) if verifier is not None else mock_verifier(user, mock))
        except ValueError:
            self._known = False
            self._it, self._salt, self._stored, self._server = mock_verifier(user, mock)
        self._nonce_suffix = nonce
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, client_first: bytes) -> bytes:
        try:
            text = client_first.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation("malformed SCRAM message: not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise ProtocolViolation("malformed SCRAM client-first-message")
        cbind, authzid, bare = parts
        if cbind.startswith("p="):
            raise ProtocolViolation("channel binding is not supported; use SCRAM-SHA-256 without -PLUS")
        if cbind not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ProtocolViolation("malformed SCRAM client-first-message")
        attrs = _attrs(bare)
        cnonce = attrs.get("r")
        if not cnonce or "n" not in attrs or any(c == "," or not 0x21 <= ord(c) <= 0x7E for c in cnonce):
            raise ProtocolViolation("malformed SCRAM client-first-message")
        suffix = self._nonce_suffix or _b64(secrets.token_bytes(18))
        self._gs2 = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce = cnonce + suffix
        self._server_first = f"r={self._nonce},s={_b64(self._salt)},i={self._it}"
        return self._server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        try:
            text = client_final.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation("malformed SCRAM message: not UTF-8") from None
        if ",p=" not in text:
            raise ProtocolViolation("malformed SCRAM client-final-message")
        without_proof, proof_b64 = text.rsplit(",p=", 1)
        attrs = _attrs(without_proof)
        cbind = _unb64(attrs.get("c", ""))
        proof = _unb64(proof_b64)
        ok_binding = hmac.compare_digest(cbind, self._gs2.encode("utf-8"))
        ok_nonce = hmac.compare_digest(attrs.get("r", "").encode("utf-8"), self._nonce.encode("utf-8"))
        if not ok_binding or not ok_nonce:
            raise ProtocolViolation("malformed SCRAM client-final-message: nonce or channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._stored, auth_message)
        if len(proof) != len(signature):
            proof = bytes(len(signature))
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        good = hmac.compare_digest(_h(client_key), self._stored)
        if not (good and self._known):
            raise AuthenticationFailed(f'password authentication failed for user "{self.user}"')
        return f"v={_b64(_hmac(self._server, auth_message))}".encode("ascii")


def _attrs(s: str) -> dict[str, str]:
    out = {}
    for part in s.split(","):
        if len(part) >= 2 and part[1] == "=":
            out.setdefault(part[0], part[2:])
    return out
