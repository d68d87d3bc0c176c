#!/usr/bin/env python3
"""Rebuilds the seed corpus of the fuzz targets (tests/it/fuzz.rs) under tests/fuzz/corpus/.

Seeds come from the project's own fixtures only: the sample generator (`etl sample`, the tests'
oracle) with a fixed seed, the run report `etl unwind` writes for it, the mapping files under
`mappings/` and `tests/mappings/broken/`, and the inline cases of the decoder, scan reader and key
template unit tests. Never from /work/shared/fixtures.

    python3 tests/fuzz/make_corpus.py "$CARGO_TARGET_DIR/release/etl"
"""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# Inline cases of src/decode/json.rs's unit tests (accepted and rejected lines).
DECODER_CASES = [
    r'{"Item":{"PK":{"S":"CUST#7"},"SK":{"S":"PROFILE"},"Type":{"S":"Customer"},"score":{"N":"-12.50"},"big":{"N":"12345678901234567890123456789012345678"},"photo":{"B":"3q2+7w=="},"vip":{"BOOL":true},"nick":{"NULL":true},"tags":{"SS":["gold","eu"]},"lucky":{"NS":["7","13"]},"keys":{"BS":["AQI=","AwQ="]},"history":{"L":[{"S":"x"},{"N":"1"},{"M":{}}]},"addr":{"M":{"city":{"S":"Oslo"},"zip":{"N":"150"}}}}}',
    r'{"Metadata":{"WriteTimestampMicros":{"N":"1768386096366933"}},"Keys":{"pk":{"N":"3"},"sk":{"N":"2"}},"OldImage":{"sk":{"N":"2"},"pk":{"N":"3"},"number":{"N":"7"}},"NewImage":{"pk":{"N":"3"},"sk":{"N":"2"}}}',
    r'{"Keys":{"pk":{"S":"a"}},"Metadata":{"WriteTimestampMicros":{"N":"5"}}}',
    r'{"Item":{"b":{"B":"3q2\/7w=="}}}',
    r'{"Item":{"PK":{"S":"a\"b"},"n":{"N":"-1.5E3"},"b":{"B":"3q2+7w=="},"ss":{"SS":["x","y"]},"ns":{"NS":["1","2"]},"l":{"L":[{"M":{"k":{"BOOL":true}}},{"NULL":true}]},"bs":{"BS":["AA=="]}}}',
    r'{"Item":{"a":{"N":"1E+126"}}}',
    r'{"Item":{"a":{"NS":["1","1.0"]}}}',
    r'{"Item":{"a":{"S":"bad \u12"}}}',
    r'{"Item":{"lines":{"L":[{"M":{"qty":{"N":"x"}}}]}}}',
    '{"Item":{"s":{"S":"esc \\u00e9 \\ud83d\\ude00 \\n \\t"}}}',
]

# (template, key) pairs from src/mapping/template.rs's unit tests and mappings/ecommerce.toml.
TEMPLATES = [
    ("ORDER#{ordered_at:epoch_s}#{order_id}[#LINE#{line:int(4)}]", "ORDER#1754724756#ORD-000001#LINE#0007"),
    ("ORDER#{ordered_at:epoch_s}#{order_id}", "ORDER#1754724756#ORD-000001"),
    ("USER#{email}", "USER#user00001@example.com"),
    ("PROFILE", "PROFILE"),
    ("V\\[1\\]#{x}", "V[1]#a"),
    ("PROFILE[#V#{v:int}]", "PROFILE#V#3"),
    ("K#{at:iso8601_ms}", "K#2024-03-01T12:00:00.000Z"),
    ("E#{at:iso8601}", "E#2024-03-01T12:00:00.123456Z"),
    ("$shop#userid_{user_id:lower}", "$shop#userid_abc"),
    ("$TASK_1#STATUS_{status:upper}", "$TASK_1#STATUS_IN-PROGRESS"),
    ("SEQ#{n:int(3)}", "SEQ#007"),
    ("P#{price:decimal}", "P#-12.50"),
    ("T#{at:epoch_ms}", "T#1700000000000"),
    ("D#{day:date}", "D#2024-02-29"),
    ("U#{id:uuid}", "U#123e4567-E89B-12d3-a456-426614174000"),
    ("A#{x}#{y:int}", "A#p#q#7"),
    ("{a}##{b:int}", "x##1"),
    ("X#[{a}#{b:int}]", "X#q#2"),
    ("{a}#END[#{b}]", "z#END#w"),
    ("[{only}]", "v"),
    ("ユーザー#{name}→{n:int}", "ユーザー#山田→3"),
    ("É#{a}é{b}", "É#xéy"),
    ("{a}#{b:int}#{c}#{d:int}#{e}", "a#1#c#2#e"),
    ("REVIEW#{reviewed_at:epoch_s}#{user_email}", "REVIEW#1767661272#user00001@example.com"),
    ("ITEM#{sku}", "ITEM#SKU-00017"),
]

SCAN_DOCS = [
    # src/decode/scan.rs's unit tests.
    '{"Items":[{"a":{"S":"x"}}],"Count":1,"ScannedCount":1,"LastEvaluatedKey":{"a":{"S":"x"}}}\n'
    '{"Items":[],"Count":0,"ScannedCount":0,"ConsumedCapacity":{"TableName":"T","CapacityUnits":0.5},"NextToken":"abc"}',
    '{"Items":[],"Foo":1}',
    '{"Count":3}',
]


def main():
    etl = sys.argv[1]
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    tmp = tempfile.mkdtemp()
    try:
        sample = os.path.join(tmp, "sample")
        scan = os.path.join(tmp, "scan.json")
        subprocess.run([etl, "sample", "--out", sample, "--users", "3", "--files", "2", "--seed", "7",
                        "--scan-json", scan, "-q"], check=True)
        [export] = glob.glob(os.path.join(sample, "AWSDynamoDB", "*"))
        # export: one line per entity type, and the decoder's own cases.
        seen = set()
        for path in sorted(glob.glob(os.path.join(export, "data", "*.json.gz"))):
            for line in gzip.open(path, "rt"):
                t = json.loads(line)["Item"].get("Type", {}).get("S")
                if t not in seen:
                    seen.add(t)
                    put("export", f"sample-{t}.json", line.rstrip("\n"))
        for i, case in enumerate(DECODER_CASES):
            put("export", f"unit-{i:02}.json", case)
        # scan: the first three items as the AWS CLI prints them, and the unit tests' documents.
        doc = json.load(open(scan))
        small = {"Items": doc["Items"][:3], "Count": 3, "ScannedCount": 3, "ConsumedCapacity": None}
        put("scan", "sample-cli.json", json.dumps(small, indent=4, ensure_ascii=False) + "\n")
        for i, case in enumerate(SCAN_DOCS):
            put("scan", f"unit-{i:02}.json", case)
        # template: `template\nkey`.
        for i, (t, k) in enumerate(TEMPLATES):
            put("template", f"pair-{i:02}.txt", f"{t}\n{k}")
        # mapping: every mapping file of the repository.
        for path in [os.path.join(ROOT, "mappings", "ecommerce.toml")] + sorted(
                glob.glob(os.path.join(ROOT, "tests", "mappings", "broken", "*.toml"))):
            put("mapping", os.path.basename(path), open(path, "rb").read())
        # manifest: the sample's manifests and the run report of unwinding it.
        put("manifest", "summary-sample.json", open(os.path.join(export, "manifest-summary.json"), "rb").read())
        put("manifest", "files-sample.jsonl", open(os.path.join(export, "manifest-files.json"), "rb").read())
        out = os.path.join(tmp, "out")
        subprocess.run([etl, "unwind", sample, "--out", out, "-q"], check=True)
        run = open(os.path.join(out, "_etl", "run.json")).read().replace(tmp, "/tmp/sample")
        put("manifest", "run-sample.json", run)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
