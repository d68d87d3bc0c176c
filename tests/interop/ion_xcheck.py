"""An independent Ion implementation (the `amazon.ion` package) checks etl's Ion exports.

`read FILE.ion.gz...`: reads every line of etl's Ion data files with `amazon.ion` and prints each
item as a DynamoDB JSON export line (`{"Item":{"PK":{"S":"..."}}}`), or each change record of an
incremental export as one (`{"Metadata":{"WriteTimestampMicros":{"N":"..."}},"Keys":...,
"OldImage":...,"NewImage":...}`), numbers as Python's `Decimal` text, so that etl's JSON decoder
can compare them with the JSON export of the same items.

`write IN.json.gz OUT.ion.gz`: reads a DynamoDB JSON data file and writes the same items as Ion
text lines with `amazon.ion`'s writer (its own number forms: `6d+2`, `103d0`), for etl to read.
"""

import base64
import gzip
import json
import sys
from decimal import Decimal

from amazon.ion import simpleion
from amazon.ion.core import IonType
from amazon.ion.simple_types import IonPyList

SETS = {"$dynamodb_SS": "SS", "$dynamodb_NS": "NS", "$dynamodb_BS": "BS"}


def to_ddb(v):
    """An Ion value as a DynamoDB JSON attribute value."""
    t = v.ion_type
    notes = [a.text for a in getattr(v, "ion_annotations", ())]
    if notes:
        if len(notes) != 1 or notes[0] not in SETS or t != IonType.LIST:
            raise ValueError(f"unexpected annotations {notes} on {t}")
        kind = SETS[notes[0]]
        if kind == "SS":
            return {"SS": [str(m) for m in v]}
        if kind == "NS":
            return {"NS": [str(Decimal(m)) for m in v]}
        return {"BS": [base64.b64encode(bytes(m)).decode() for m in v]}
    if t == IonType.NULL:
        return {"NULL": True}
    if t == IonType.BOOL:
        return {"BOOL": bool(v)}
    if t in (IonType.INT, IonType.DECIMAL):
        return {"N": str(Decimal(v))}
    if t == IonType.STRING:
        return {"S": str(v)}
    if t == IonType.BLOB:
        return {"B": base64.b64encode(bytes(v)).decode()}
    if t == IonType.LIST:
        return {"L": [to_ddb(m) for m in v]}
    if t == IonType.STRUCT:
        return {"M": {k: to_ddb(m) for k, m in v.items()}}
    raise ValueError(f"Ion type {t} is not a DynamoDB type")


def from_ddb(av):
    """A DynamoDB JSON attribute value as a Python value `amazon.ion` writes."""
    ((tag, p),) = av.items()
    if tag == "S":
        return p
    if tag == "N":
        return Decimal(p)
    if tag == "B":
        return base64.b64decode(p)
    if tag == "BOOL":
        return p
    if tag == "NULL":
        return None
    if tag in ("SS", "NS", "BS"):
        conv = {"SS": str, "NS": Decimal, "BS": base64.b64decode}[tag]
        return IonPyList.from_value(IonType.LIST, [conv(m) for m in p], ("$dynamodb_" + tag,))
    if tag == "L":
        return [from_ddb(m) for m in p]
    if tag == "M":
        return {k: from_ddb(m) for k, m in p.items()}
    raise ValueError(f"unknown type key {tag}")


def main():
    mode, *paths = sys.argv[1:]
    if mode == "read":
        for path in paths:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        continue
                    top = simpleion.loads(line)
                    fields = list(top.keys())
                    if fields == ["Item"]:
                        item = {k: to_ddb(v) for k, v in top["Item"].items()}
                        print(json.dumps({"Item": item}, ensure_ascii=False))
                        continue
                    images = [f for f in ("OldImage", "NewImage") if f in top]
                    if fields != ["Metadata", "Keys"] + images:
                        raise ValueError(f"{path}: line is neither {{Item:...}} nor a change record: {line[:80]}")
                    meta = {k: to_ddb(v) for k, v in top["Metadata"].items()}
                    record = {"Metadata": meta}
                    for f in ["Keys"] + images:
                        record[f] = {k: to_ddb(v) for k, v in top[f].items()}
                    print(json.dumps(record, ensure_ascii=False))
    elif mode == "write":
        src, dst = paths
        lines = []
        with gzip.open(src, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    item = json.loads(line)["Item"]
                    value = {"Item": {k: from_ddb(v) for k, v in item.items()}}
                    lines.append(simpleion.dumps(value, binary=False) + "\n")
        with gzip.open(dst, "wt", encoding="utf-8") as f:
            f.write("".join(lines))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
