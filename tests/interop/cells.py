"""What the interop oracles share, and nothing of etl: DynamoDB JSON read by meaning, and the
cell comparison of an expected value (built by an oracle from the source items) with what
pyarrow or DuckDB read.

Expected values are plain Python values, or tagged tuples for what needs a rule:
`("dec", scale, n)` a decimal at that exact scale; `("dectext", n)` etl's exact decimal text;
`("json", v)` / `("json-item", {name: v})` DynamoDB JSON text compared by meaning (numbers by
value, sets unordered, binary decoded); `("set", [members])` a list in any order; `("map", {k: v})`
a map as either reader gives it.
"""
import base64
import datetime as dt
import decimal
import json
import re

D = decimal.Decimal
# etl's exact decimal text: no exponent, no trailing fraction zeros, no `-0`.
CANONICAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?")


def num(text):
    """A DynamoDB number, exactly; NaN and infinities are not numbers there."""
    n = D(text)
    if not n.is_finite():
        raise ValueError(f"not a number: {text}")
    return n


def dyn(v):
    """A DynamoDB JSON value by meaning: numbers by value, sets unordered, binary decoded."""
    ((tag, x),) = v.items()
    if tag in ("S", "BOOL"):
        return (tag, x)
    if tag == "NULL":
        if x is not True:
            raise ValueError(f"not DynamoDB JSON: {v}")
        return (tag, x)
    if tag == "N":
        return (tag, num(x))
    if tag == "B":
        return (tag, base64.b64decode(x, validate=True))
    if tag == "SS":
        return (tag, sorted(x))
    if tag == "NS":
        return (tag, sorted(num(n) for n in x))
    if tag == "BS":
        return (tag, sorted(base64.b64decode(b, validate=True) for b in x))
    if tag == "L":
        return (tag, [dyn(e) for e in x])
    if tag == "M":
        return (tag, {k: dyn(e) for k, e in x.items()})
    raise ValueError(f"not DynamoDB JSON: {v}")


def as_dict(got):
    """A map as pyarrow (list of pairs) or DuckDB (dict, or {"key": [...], "value": [...]}) gives it."""
    if isinstance(got, list):
        return dict(got)
    if isinstance(got, dict) and set(got) == {"key", "value"} and isinstance(got["key"], list):
        return dict(zip(got["key"], got["value"]))
    return got if isinstance(got, dict) else None


def same(exp, got, where, errors):
    """Appends to `errors` every way `got` (as a reader gave it) differs from `exp`."""
    if exp is None or got is None:
        if exp is not got:
            errors.append(f"{where}: expected {exp!r}, read {got!r}")
        return
    if isinstance(exp, tuple) and exp[0] == "dec":
        _, scale, n = exp
        if not isinstance(got, D) or got != n or got.as_tuple().exponent != -scale:
            errors.append(f"{where}: expected {n} at scale {scale}, read {got!r}")
    elif isinstance(exp, tuple) and exp[0] == "dectext":
        if not isinstance(got, str) or not CANONICAL.fullmatch(got) or got == "-0" or D(got) != exp[1]:
            errors.append(f"{where}: expected the exact decimal text of {exp[1]}, read {got!r}")
    elif isinstance(exp, tuple) and exp[0] in ("json", "json-item"):
        try:
            parsed = json.loads(got)
            parsed = dyn(parsed) if exp[0] == "json" else {k: dyn(v) for k, v in parsed.items()}
        except Exception as e:  # noqa: BLE001 - any failure to parse is the finding
            errors.append(f"{where}: not DynamoDB JSON text ({e}): {got!r}")
            return
        if parsed != exp[1]:
            errors.append(f"{where}: expected {exp[1]!r}, read {parsed!r}")
    elif isinstance(exp, tuple) and exp[0] == "set":
        if not isinstance(got, list) or len(got) != len(exp[1]):
            errors.append(f"{where}: expected a set of {len(exp[1])}, read {got!r}")
            return
        # Set order is not part of a set: compare each expected member with a read one.
        left = list(got)
        for e in exp[1]:
            for i, g in enumerate(left):
                if not diff(e, g):
                    del left[i]
                    break
            else:
                errors.append(f"{where}: member {e!r} not read in {got!r}")
    elif isinstance(exp, tuple) and exp[0] == "map":
        got = as_dict(got)
        if got is None or set(got) != set(exp[1]):
            errors.append(f"{where}: expected keys {sorted(exp[1])}, read {got!r}")
            return
        for k, e in exp[1].items():
            same(e, got[k], f"{where}[{k!r}]", errors)
    elif isinstance(exp, list):
        if not isinstance(got, list) or len(got) != len(exp):
            errors.append(f"{where}: expected {len(exp)} elements, read {got!r}")
            return
        for i, (e, g) in enumerate(zip(exp, got)):
            same(e, g, f"{where}[{i}]", errors)
    elif isinstance(exp, dict):
        if not isinstance(got, dict) or list(got) != list(exp):
            errors.append(f"{where}: expected fields {list(exp)}, read {got!r}")
            return
        for k, e in exp.items():
            same(e, got[k], f"{where}.{k}", errors)
    elif isinstance(exp, dt.datetime):
        if not isinstance(got, dt.datetime) or got.tzinfo is None or got != exp:
            errors.append(f"{where}: expected {exp.isoformat()}, read {got!r}")
    elif isinstance(exp, dt.date):
        if type(got) is not dt.date or got != exp:
            errors.append(f"{where}: expected {exp}, read {got!r}")
    elif isinstance(exp, bytes):
        if not isinstance(got, (bytes, bytearray, memoryview)) or bytes(got) != exp:
            errors.append(f"{where}: expected {exp!r}, read {got!r}")
    elif type(exp) is not type(got) or exp != got:
        errors.append(f"{where}: expected {exp!r} ({type(exp).__name__}), read {got!r} ({type(got).__name__})")


def diff(exp, got):
    """Every difference of `got` from `exp`; empty when they are the same."""
    errors = []
    same(exp, got, "", errors)
    return errors
