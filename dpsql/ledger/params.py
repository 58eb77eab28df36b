"""A charge's arguments made exact: Decimal helpers, argument checks and the parameters' JSON.

Exact arithmetic:
    Epsilons, deltas, rhos and delta parts are stored as decimal TEXT and summed as
    ``decimal.Decimal`` in a context wide enough for any sum of doubles and trapping ``Inexact``,
    so no sum is ever rounded. A float argument becomes ``Decimal(repr(x))``: 0.1 stays 0.1, six
    charges of 0.5 fit a budget of 3.0 exactly, 150 charges of 0.01 fit 1.5 exactly, and
    2.7 + 0.30000000000000004 exceeds 3.0. A rho (an exact rational) is rounded *up* to 30
    significant digits once, when it is recorded; the conversion of a total to (epsilon, delta)
    rounds every step towards refusing (dpsql.ledger.accounting).

Bad arguments are a caller's bug and raise ``ValueError``; a malformed stored amount is the
ledger file's problem and raises ``OperationalError`` naming the ledger path.
"""
from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterator, Mapping
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from fractions import Fraction
from functools import lru_cache

from dpsql.errors import OperationalError
from dpsql.ledger import accounting

__all__ = ["EXACT", "ZERO", "ChargeParams", "amount", "encode_params", "epsilon_rho", "name", "rho_amount",
           "show", "show_rho", "stored", "total"]

# Sums of doubles span at most ~650 decimal digits (1e308 down to 5e-324 with 17 digits);
# 1000 digits make every sum exact, and the Inexact trap would catch anything that is not.
EXACT = Context(prec=1000, traps=[Inexact, InvalidOperation, Overflow])
ZERO = Decimal(0)


def show_rho(value: Decimal) -> str:
    """A rho for a message, to 6 significant digits (the comparison itself is exact)."""
    if not value.is_finite():
        return "unlimited"
    return f"{float(value):.6g}"


def rho_amount(value: object) -> Decimal:
    """A query's rho, rounded up to accounting.RHO_DIGITS significant digits."""
    if isinstance(value, bool):
        raise ValueError("rho must be a number, not a bool")
    if isinstance(value, Decimal):
        if not value.is_finite() or value < 0:
            raise ValueError("rho must be finite and >= 0")
        frac = Fraction(value)
    elif isinstance(value, (Fraction, numbers.Integral)):
        frac = Fraction(value)
    elif isinstance(value, numbers.Real):
        x = float(value)
        if not math.isfinite(x):
            raise ValueError("rho must be finite")
        frac = Fraction(x)
    else:
        raise ValueError(f"rho must be a number, not {type(value).__name__}")
    if frac < 0:
        raise ValueError("rho must be >= 0")
    return _rho_up(frac)


@lru_cache(maxsize=1024)
def _rho_up(frac: Fraction) -> Decimal:
    """accounting.decimal_up, kept: a plan's rho is charged again and again."""
    return accounting.decimal_up(frac)


@lru_cache(maxsize=1024)
def epsilon_rho(eps: Decimal) -> Decimal:
    """The zCDP cost of a generic epsilon-DP charge, eps^2 / 2 rounded up (accounting, claim 3)."""
    return accounting.decimal_up(Fraction(eps) ** 2 / 2)


def name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    return value


@lru_cache(maxsize=4096)
def _float_decimal(value: float) -> Decimal:
    """_decimal of a float that is >= 0 (a query's amounts repeat: kept, not converted again)."""
    result = Decimal(float.__repr__(value))
    return ZERO if result.is_zero() else result


def _decimal(what: str, value: object) -> Decimal:
    """Exact decimal of a number; floats through their shortest repr, so 0.1 stays 0.1."""
    if type(value) is float and value >= 0:     # the common case (NaN and negatives fail the test)
        return _float_decimal(value)
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, not a bool")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, numbers.Integral):
        result = Decimal(int(value))
    elif isinstance(value, numbers.Real):   # float, numpy floats: through the float's shortest repr
        result = Decimal(float.__repr__(float(value)))   # not repr(): numpy's says "np.float64(0.1)"
    else:
        raise ValueError(f"{what} must be a number, not {type(value).__name__}")
    if result.is_nan() or result < 0:
        raise ValueError(f"{what} must be >= 0")
    return ZERO if result.is_zero() else result


def amount(what: str, value: object) -> Decimal:
    result = _decimal(what, value)
    if not result.is_finite():
        raise ValueError(f"{what} must be finite")
    return result


def total(what: str, value: object) -> Decimal:
    return _decimal(what, value)   # +inf allowed: an unlimited budget


class ChargeParams(Mapping):
    """A charge's mechanism parameters, encoded once: what the ledger records is the JSON made
    when this object is, and reading it gives that JSON's content (changing the mapping it was
    made from afterwards changes neither). For callers that charge the same parameters again and
    again (a session charges a plan's on each run): the ledger takes it in place of a dict."""

    __slots__ = ("json", "_items")

    def __init__(self, mechanism: str, params: Mapping[str, object]):
        self.json = encode_params(mechanism, params)
        self._items = json.loads(self.json)

    def __getitem__(self, key: str) -> object:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def encode_params(mechanism: str, params: object) -> str:
    if type(params) is ChargeParams:
        return params.json
    if not isinstance(params, Mapping):
        raise ValueError(f"params of {mechanism!r} must be a mapping")
    try:
        return json.dumps(dict(params), sort_keys=True, allow_nan=False, separators=(",", ":"),
                          default=_json_scalar)
    except (TypeError, ValueError) as err:
        raise ValueError(f"params of {mechanism!r} must be JSON-serialisable: {err}") from None


def _json_scalar(value: object) -> object:
    item = getattr(value, "item", None)   # numpy scalars
    if callable(item):
        plain = item()
        if isinstance(plain, (int, float, str, bool)) or plain is None:
            return plain
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def show(value: Decimal) -> str:
    """Plain decimal notation: 0.000001, not 1E-6."""
    if not value.is_finite():
        return "unlimited"
    return format(value.normalize(EXACT), "f") if value else "0"


def stored(path: str, text: object) -> Decimal:
    """An amount read back from the ledger file at path (decimal text, finite, >= 0)."""
    try:
        value = Decimal(text) if isinstance(text, str) else None
    except InvalidOperation:
        value = None
    if value is None or not value.is_finite() or value < 0:
        raise OperationalError(f"privacy ledger {path}: malformed amount in the ledger")
    return value
