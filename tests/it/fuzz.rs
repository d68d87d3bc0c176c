//! Coverage-less mutation fuzzing of everything that reads untrusted text, on the stable
//! toolchain inside this test binary: the export line decoder, the scan-document reader, key
//! templates, the mapping loader, and the export manifests and run reports.
//!
//! Each target starts from its checked-in seed corpus (`tests/fuzz/corpus/<target>/`, rebuilt by
//! `tests/fuzz/make_corpus.py`), mutates it with a seeded xorshift generator (bit flips, byte
//! inserts and deletes, truncation, splices of two entries, dictionary tokens, long digit runs,
//! deep nesting) and keeps a mutant in its pool when it reaches an outcome (an error kind, a shape
//! of result) not seen before: the only feedback there is without coverage instrumentation. The
//! property is the same for every target: no panic, bounded time, and where a result is `Ok`, a
//! cheap invariant that must hold (a decoded item re-encodes to itself, a matched key renders
//! back to itself). Panics are caught inside the loop, so the input is saved under
//! `tests/fuzz/crashes/<target>/` before the test fails; that folder is replayed by
//! [`fuzz_crashes_replay`] for ever after.
//!
//! `ETL_FUZZ_SECS` is the time for all targets together (default 60 s, split evenly);
//! `ETL_FUZZ_SEED` replays a run (the seed is printed with every finding and summary). This
//! module must never write outside `tests/fuzz/crashes/` and its own temporary folders.

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etl::decode::scan::{ScanError, parse_scan_output};
use etl::decode::{self, Format, Item, MAX_ITEM_SIZE, Number, Record, Value};
use etl::mapping::parse_str;
use etl::mapping::template::KeyTemplate;
use etl::sink::RunManifest;
use etl::source::{Input, Plan};
use etl::store::Location;

use crate::common::root;

/// Total time for all targets when `ETL_FUZZ_SECS` is unset.
const DEFAULT_SECS: f64 = 60.0;
const TARGETS: usize = 5;
/// Longest input a mutation may produce.
const MAX_LEN: usize = 64 * 1024;
/// Most entries kept in a target's pool.
const MAX_POOL: usize = 4096;
/// One execution slower than this is a finding (inputs are at most `MAX_LEN` bytes, or the
/// size of a checked-in case).
const SLOW: Duration = Duration::from_secs(2);
/// A target stops after this many findings (they are usually one bug).
const MAX_FINDINGS: usize = 8;

/// xorshift64*: small, fast, and the same sequence for the same seed everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
}

/// Tokens every target's mutator may insert: DynamoDB JSON structure and JSON's sharp edges.
const COMMON_DICT: &[&str] = &[
    "{\"S\":",
    "\"N\":",
    "\"B\":",
    "\"SS\":[",
    "\"NS\":[",
    "\"BS\":[",
    "\"M\":{",
    "\"L\":[",
    "NULL",
    "BOOL",
    "{\"NULL\":true}",
    "{\"BOOL\":false}",
    "\"Item\":",
    "\"Keys\":",
    "\"NewImage\":",
    "\"OldImage\":",
    "\"Metadata\":{\"WriteTimestampMicros\":{\"N\":\"1\"}}",
    "\\u0000",
    "\\ud800",
    "\\udc00",
    "\\ud83d\\ude00",
    "\\\"",
    "\\\\",
    "\u{0}",
    "\u{feff}",
    "\u{2028}",
    "é",
    "ユ",
    "😀",
    "1E+125",
    "9.9999999999999999999999999999999999999E+125",
    "1E-130",
    "-0",
    "0.0000",
    "1e",
    "NaN",
    "Infinity",
    "true",
    "false",
    "null",
    "\"\"",
    "{}",
    "[]",
    ",",
    ":",
    "\"",
    "{",
    "}",
    "[",
    "]",
    "\n",
    "\r\n",
    "\t",
    "=",
    "==",
    "AAAA",
    "3q2+7w==",
];

/// Runs one input of a kind; panics when an invariant fails; returns an outcome signature.
type RunFn = Box<dyn Fn(u8, &[u8]) -> u64>;

/// One target: how to run an input, the dictionary its mutator adds, and its seed kinds.
struct Target {
    name: &'static str,
    dict: &'static [&'static str],
    /// Splits a corpus file name into a kind (a target may read several formats); `0` for one.
    kind_of: fn(&str) -> u8,
    /// Runs one input of a kind; panics when an invariant fails; returns an outcome signature.
    run: RunFn,
    /// The file name prefix of a finding of this kind.
    prefix: fn(u8) -> &'static str,
}

fn one_kind(_: &str) -> u8 {
    0
}

fn crash_prefix(_: u8) -> &'static str {
    "crash"
}

fn sig(parts: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// The variant name of an enum value from its `Debug` text: a cheap, typed outcome signature.
fn variant(debug: &str) -> &str {
    let end = debug.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(debug.len());
    &debug[..end]
}

/// Applies one to four stacked mutations to `input`, drawing splices from `pool`.
fn mutate(rng: &mut Rng, input: &[u8], pool: &[(u8, Vec<u8>)], kind: u8, dict: &[&str]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(14) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                out.insert(i, b"{}[]\":,\\ \nuSNBLM0123456789-+.eE"[rng.below(31)]);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(16));
                out.drain(i..i + n);
            }
            4 if len > 0 => out.truncate(rng.below(len)),
            5 => {
                // Splice: a prefix of this input and a suffix of another of the same kind.
                let others: Vec<&Vec<u8>> = pool.iter().filter(|(k, _)| *k == kind).map(|(_, b)| b).collect();
                let other = others[rng.below(others.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            6 | 7 => {
                let tokens = if rng.chance(2) { dict } else { COMMON_DICT };
                let token = tokens[rng.below(tokens.len())].as_bytes();
                let i = rng.below(len + 1);
                out.splice(i..i, token.iter().copied());
            }
            8 => {
                let digits: Vec<u8> = (0..1 + rng.below(200)).map(|_| b'0' + rng.below(10) as u8).collect();
                let i = rng.below(len + 1);
                out.splice(i..i, digits);
            }
            9 => {
                // Deep nesting: an opener repeated, sometimes closed again.
                let (open, close): (&[u8], &[u8]) = match rng.below(4) {
                    0 => (b"{\"L\":[", b"]}"),
                    1 => (b"{\"M\":{\"a\":", b"}}"),
                    2 => (b"[", b"]"),
                    _ => (b"{\"a\":", b"}"),
                };
                let max_depth = if rng.chance(4) { 2000 } else { 40 };
                let depth = 1 + rng.below(max_depth);
                let i = rng.below(len + 1);
                let mut nest = open.repeat(depth);
                if rng.chance(2) {
                    nest.extend(close.repeat(depth));
                }
                out.splice(i..i, nest);
            }
            10 if len > 1 => {
                // Copy a chunk of the input elsewhere in it.
                let a = rng.below(len);
                let n = 1 + rng.below((len - a).min(256));
                let chunk = out[a..a + n].to_vec();
                let i = rng.below(len + 1);
                out.splice(i..i, chunk);
            }
            11 => {
                // Invalid or unusual UTF-8.
                const BYTES: &[&[u8]] =
                    &[b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"];
                let i = rng.below(len + 1);
                out.splice(i..i, BYTES[rng.below(BYTES.len())].iter().copied());
            }
            12 if len > 0 => {
                // Replace a byte with a structural one.
                let i = rng.below(len);
                out[i] = b"{}[]\":,\\"[rng.below(8)];
            }
            _ => {
                // Interesting integers as text.
                const NUMS: &[&str] = &[
                    "0",
                    "-1",
                    "18446744073709551615",
                    "18446744073709551616",
                    "9223372036854775807",
                    "-9223372036854775808",
                    "4294967296",
                ];
                let i = rng.below(len + 1);
                out.splice(i..i, NUMS[rng.below(NUMS.len())].bytes());
            }
        }
        out.truncate(MAX_LEN);
    }
    out
}

fn budget() -> Duration {
    let total = std::env::var("ETL_FUZZ_SECS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(DEFAULT_SECS);
    Duration::from_secs_f64((total / TARGETS as f64).max(0.0))
}

fn base_seed() -> u64 {
    match std::env::var("ETL_FUZZ_SEED") {
        Ok(s) => s.parse().unwrap_or_else(|_| panic!("`ETL_FUZZ_SEED` must be an unsigned integer, got `{s}`")),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
    }
}

fn corpus_dir(target: &str) -> PathBuf {
    root().join("tests/fuzz/corpus").join(target)
}

fn crash_dir(target: &str) -> PathBuf {
    root().join("tests/fuzz/crashes").join(target)
}

/// The files of a folder, sorted by name; none when it does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

/// Runs one input under `catch_unwind` and the time bound: `Err` describes a finding.
fn execute(t: &Target, kind: u8, input: &[u8]) -> Result<u64, String> {
    let start = Instant::now();
    let r = catch_unwind(AssertUnwindSafe(|| (t.run)(kind, input)));
    let took = start.elapsed();
    match r {
        Ok(_) if took > SLOW => Err(format!("took {took:?}, more than {SLOW:?}")),
        Ok(s) => Ok(s),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".to_owned());
            Err(format!("panicked: {msg}"))
        }
    }
}

/// Saves a finding where the replay test finds it; returns its path.
fn save_finding(t: &Target, kind: u8, input: &[u8], slow: bool) -> PathBuf {
    let dir = crash_dir(t.name);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("{}-{}{:016x}", (t.prefix)(kind), if slow { "slow-" } else { "" }, sig(input));
    let path = dir.join(name);
    std::fs::write(&path, input).unwrap();
    path
}

/// The fuzzing loop of one target for its share of `ETL_FUZZ_SECS`.
fn fuzz(t: Target) {
    let seed = base_seed() ^ sig(t.name);
    let mut rng = Rng::new(seed);
    let mut pool: Vec<(u8, Vec<u8>)> = Vec::new();
    for f in files_in(&corpus_dir(t.name)) {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        pool.push(((t.kind_of)(&name), std::fs::read(&f).unwrap()));
    }
    assert!(!pool.is_empty(), "no seed corpus in {}", corpus_dir(t.name).display());
    let seeds = pool.len();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut findings: Vec<String> = Vec::new();
    let mut execs: u64 = 0;
    let budget = budget();
    let start = Instant::now();
    // The seeds themselves first, then mutants until the budget is spent.
    let mut i = 0usize;
    while findings.len() < MAX_FINDINGS && (i < seeds || start.elapsed() < budget) {
        let (kind, input) = if i < seeds {
            pool[i].clone()
        } else {
            let (kind, parent) = &pool[rng.below(pool.len())];
            (*kind, mutate(&mut rng, parent, &pool, *kind, t.dict))
        };
        i += 1;
        execs += 1;
        match execute(&t, kind, &input) {
            Ok(outcome) => {
                if seen.insert(sig((kind, outcome))) && i > seeds {
                    if pool.len() < MAX_POOL {
                        pool.push((kind, input));
                    } else {
                        let at = seeds + rng.below(MAX_POOL - seeds);
                        pool[at] = (kind, input);
                    }
                }
            }
            Err(why) => {
                let path = save_finding(&t, kind, &input, why.starts_with("took"));
                eprintln!(
                    "fuzz {}: finding after {execs} executions (ETL_FUZZ_SEED={}): {why}; input saved to {}",
                    t.name,
                    seed ^ sig(t.name),
                    path.display()
                );
                findings.push(format!("{}: {why}", path.display()));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fuzz {}: {execs} executions in {secs:.1} s ({:.0}/s), {} outcomes, pool {} ({seeds} seeds), {} findings, ETL_FUZZ_SEED={}",
        t.name,
        execs as f64 / secs.max(1e-9),
        seen.len(),
        pool.len(),
        findings.len(),
        seed ^ sig(t.name)
    );
    assert!(findings.is_empty(), "fuzz {}: {} findings:\n{}", t.name, findings.len(), findings.join("\n"));
}

// ---- invariants -------------------------------------------------------------------------------

/// What holds for every item the decoder accepts: not empty, within DynamoDB's size limit,
/// unique names, canonical numbers of at most 38 digits, and it re-encodes to itself.
fn check_item(item: &Item<'_>) {
    assert!(!item.is_empty(), "accepted an empty item");
    assert!(decode::item_size(item) <= MAX_ITEM_SIZE, "accepted an item above 400 KB");
    check_map(item);
    let mut text = String::new();
    decode::write_item_json(item, &mut text);
    let again = decode::json::decode_item_object(&text)
        .unwrap_or_else(|e| panic!("an accepted item does not decode after re-encoding ({e}): {text}"));
    assert_eq!(&again, item, "an accepted item changes when re-encoded: {text}");
}

fn check_map(map: &[(Cow<'_, str>, Value<'_>)]) {
    for (i, (name, v)) in map.iter().enumerate() {
        assert!(map[..i].iter().all(|(n, _)| n != name), "accepted a duplicate attribute `{name}`");
        check_value(v);
    }
}

fn check_number(n: &Number<'_>) {
    let again =
        Number::parse(n.as_str()).unwrap_or_else(|e| panic!("canonical `{}` does not parse: {e:?}", n.as_str()));
    assert_eq!(again.as_str(), n.as_str(), "canonical form is not a fixed point");
    assert!(n.significant_digits() <= 38, "`{}` keeps more than 38 digits", n.as_str());
}

fn check_value(v: &Value<'_>) {
    match v {
        Value::N(n) => check_number(n),
        Value::NS(ns) => {
            assert!(!ns.is_empty(), "accepted an empty NS");
            ns.iter().for_each(check_number);
        }
        Value::SS(s) => assert!(!s.is_empty(), "accepted an empty SS"),
        Value::BS(b) => assert!(!b.is_empty(), "accepted an empty BS"),
        Value::L(l) => l.iter().for_each(check_value),
        Value::M(m) => check_map(m),
        Value::S(_) | Value::B(_) | Value::Bool(_) | Value::Null => {}
    }
}

fn decode_outcome(format: Format, bytes: &[u8]) -> u64 {
    match decode::decode(format, bytes) {
        Ok(Record::Put(item)) => {
            check_item(&item);
            sig((1u8, item.len().min(8)))
        }
        Ok(Record::Change(c)) => {
            assert!(format == Format::ExportJson, "a scan item decoded as a change record");
            assert!(!c.keys.is_empty(), "accepted a change record without keys");
            assert!(c.write_time_micros >= 0, "accepted a negative write time");
            check_map(&c.keys);
            for image in [&c.old, &c.new].into_iter().flatten() {
                check_item(image);
                for (k, v) in &c.keys {
                    assert!(image.iter().any(|(n, iv)| n == k && iv == v), "image disagrees with `Keys` on `{k}`");
                }
            }
            sig((2u8, c.old.is_some(), c.new.is_some()))
        }
        Err(e) => {
            assert!(!e.message.is_empty(), "a reject without a message");
            assert!(e.offset <= bytes.len(), "reject offset {} beyond the input ({} bytes)", e.offset, bytes.len());
            let depth = e.attribute.matches(['.', '[']).count().min(6);
            sig((3u8, e.reason, depth))
        }
    }
}

fn export_target() -> Target {
    Target {
        name: "export",
        dict: &["{\"Item\":{", "\"PK\":{\"S\":\"k\"}", "}}", "\"WriteTimestampMicros\":", "{\"N\":\"-1\"}"],
        kind_of: one_kind,
        prefix: crash_prefix,
        run: Box::new(|_, bytes| {
            let line = decode_outcome(Format::ExportJson, bytes);
            let item = decode_outcome(Format::ScanItemJson, bytes);
            sig((line, item))
        }),
    }
}

fn scan_target() -> Target {
    Target {
        name: "scan",
        dict: &[
            "\"Items\":[",
            "\"Count\":",
            "\"ScannedCount\":",
            "\"ConsumedCapacity\":",
            "\"NextToken\":",
            "\"LastEvaluatedKey\":",
        ],
        kind_of: one_kind,
        prefix: crash_prefix,
        run: Box::new(|_, bytes| {
            let text = String::from_utf8_lossy(bytes);
            match parse_scan_output(&text) {
                Ok(out) => {
                    assert!(out.documents >= 1, "scan output without a document");
                    let mut outcomes = Vec::new();
                    for it in &out.items {
                        assert_eq!(
                            text.get(it.offset..it.offset + it.text.len()),
                            Some(it.text),
                            "item text is not at its offset"
                        );
                        let line = 1 + text[..it.offset].matches('\n').count() as u64;
                        assert_eq!(it.line, line, "wrong line for the item at byte {}", it.offset);
                        outcomes.push(decode_outcome(Format::ScanItemJson, it.text.as_bytes()));
                    }
                    outcomes.sort_unstable();
                    outcomes.dedup();
                    sig((1u8, out.partial_marker, outcomes))
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    if let ScanError::Syntax { line, column, .. } = &e {
                        assert!(*line >= 1 && *column >= 1, "syntax error at line {line}, column {column}");
                        assert!(*line <= 1 + text.matches('\n').count() as u64, "syntax error past the last line");
                    }
                    sig((2u8, variant(&format!("{e:?}")).to_owned()))
                }
            }
        }),
    }
}

fn template_target() -> Target {
    Target {
        name: "template",
        dict: &[
            "{x}",
            "{y:int}",
            "{n:int(4)}",
            "{d:decimal}",
            "{t:epoch_s}",
            "{t:epoch_ms}",
            "{t:iso8601}",
            "{t:iso8601_ms}",
            "{d:date}",
            "{u:uuid}",
            "{l:lower}",
            "{u:upper}",
            "[#",
            "]",
            "\\{",
            "\\}",
            "\\[",
            "\\]",
            "\\\\",
            "#",
            "2024-02-29",
            "2024-03-01T12:00:00.123Z",
            "123e4567-e89b-12d3-a456-426614174000",
        ],
        kind_of: one_kind,
        prefix: crash_prefix,
        run: Box::new(|_, bytes| {
            let text = String::from_utf8_lossy(bytes);
            let (source, key) = text.split_once('\n').unwrap_or((&text, ""));
            let t = match KeyTemplate::parse(source) {
                Ok(t) => t,
                Err(e) => {
                    assert!(e.offset <= source.chars().count(), "error offset {} beyond the template", e.offset);
                    assert!(!e.message.is_empty());
                    return sig((1u8, e.hint.is_some()));
                }
            };
            assert_eq!(t.source(), source);
            assert_eq!(KeyTemplate::parse(source).as_ref(), Ok(&t), "parsing is not deterministic");
            match t.captures(key) {
                Ok(values) => {
                    assert_eq!(values.len(), t.placeholders().len());
                    for (v, p) in values.iter().zip(t.placeholders()) {
                        assert!(v.is_some() || p.optional, "required placeholder `{}` captured nothing", p.name);
                    }
                    assert!(key.starts_with(t.literal_prefix()), "matched a key without the literal prefix");
                    let rendered = t.render(&values).unwrap_or_else(|e| panic!("captured values do not render: {e}"));
                    assert_eq!(rendered, key, "captured values render to another key");
                    assert_eq!(t.captures(&rendered).as_deref(), Ok(&values[..]), "a rendered key does not re-match");
                    sig((
                        2u8,
                        values
                            .iter()
                            .map(|v| v.as_ref().map(|v| variant(&format!("{v:?}")).to_owned()))
                            .collect::<Vec<_>>(),
                    ))
                }
                Err(e) => {
                    assert!(!e.message.is_empty());
                    sig((3u8, e.placeholder.is_some(), t.placeholders().len().min(8)))
                }
            }
        }),
    }
}

fn mapping_target() -> Target {
    Target {
        name: "mapping",
        dict: &[
            "[entity.X]\n",
            "[[entity.X.children]]\n",
            "[settings]\n",
            "table = \"t\"\n",
            "match = [\"A\"]\n",
            "keys = { PK = \"A#{a}\" }\n",
            "columns = [\n",
            "{ name = \"a\", type = \"int64\" },\n",
            "type = \"",
            "decimal(38,0)",
            "struct<a: string>",
            "list<int64>",
            "set<string>",
            "map<string, int64>",
            "timestamp",
            "format = \"epoch_ms\"",
            "required = true",
            "unmapped = \"extra\"",
            "on_error = \"reject\"",
            "drop = [\"x\"]",
            "key_prefix = { SK = \"P#\" }",
            "source = \"lines\"",
            "position = \"i\"",
            "parent_columns = [\"a\"]",
            "type_attribute = \"Type\"",
            "unmatched = \"table\"",
            "'''",
            "\"\"\"",
            " = ",
        ],
        kind_of: one_kind,
        prefix: crash_prefix,
        run: Box::new(|_, bytes| {
            let text = String::from_utf8_lossy(bytes);
            match parse_str(Path::new("fuzz.toml"), &text) {
                Ok(m) => {
                    for e in &m.entities {
                        for k in &e.keys {
                            assert_eq!(
                                KeyTemplate::parse(k.template.source()).as_ref(),
                                Ok(&k.template),
                                "entity `{}` key `{}`: its template does not re-parse to itself",
                                e.name,
                                k.attribute
                            );
                        }
                    }
                    sig((1u8, m.entities.len().min(8)))
                }
                Err(errs) => {
                    assert!(!errs.0.is_empty(), "a mapping refused without a reason");
                    for e in &errs.0 {
                        assert!(!e.to_string().is_empty());
                    }
                    let kinds: Vec<String> =
                        errs.0.iter().map(|e| variant(&format!("{:?}", e.kind)).to_owned()).collect();
                    sig((2u8, kinds))
                }
            }
        }),
    }
}

const SUMMARY: u8 = 0;
const FILES: u8 = 1;
const RUN: u8 = 2;

/// A temporary export that the manifest target rewrites for each input: the seed manifests'
/// data files exist (empty), so resolution gets past them.
struct Export {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dir: PathBuf,
    out: PathBuf,
    summary: Vec<u8>,
    files: Vec<u8>,
}

impl Export {
    fn new() -> Export {
        let corpus = corpus_dir("manifest");
        let summary = std::fs::read(corpus.join("summary-sample.json")).unwrap();
        let files = std::fs::read(corpus.join("files-sample.jsonl")).unwrap();
        // Rewriting a file in place on ext4 flushes it on close (`auto_da_alloc`): a RAM-backed
        // folder keeps the target at thousands of executions per second.
        let shm = Path::new("/dev/shm");
        let tmp = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() }.unwrap();
        let root = tmp.path().join("export");
        let mut dir = None;
        for line in String::from_utf8_lossy(&files).lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let key = Path::new(v["dataFileS3Key"].as_str().unwrap());
            let path = root.join(key);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"").unwrap();
            dir = Some(root.join(key.parent().unwrap().parent().unwrap()));
        }
        let out = tmp.path().join("out");
        std::fs::create_dir_all(out.join("_etl")).unwrap();
        Export { dir: dir.unwrap(), root, out, summary, files, _tmp: tmp }
    }

    fn resolve(&self, summary: &[u8], files: &[u8]) -> u64 {
        std::fs::write(self.dir.join("manifest-summary.json"), summary).unwrap();
        std::fs::write(self.dir.join("manifest-files.json"), files).unwrap();
        let spool = self.root.join("spool");
        let r = etl::source::resolve(
            &[Location::Path(self.root.clone())],
            &Default::default(),
            &Default::default(),
            &spool,
        );
        match r {
            Ok(plan) => {
                check_plan(&plan, &self.root);
                sig((1u8, plan.files.len().min(8), plan.exports.len()))
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                sig((2u8, variant(&format!("{e:?}")).to_owned()))
            }
        }
    }
}

/// What a resolved export promises: data files inside the export root, each listed once, and
/// item counts that add up.
fn check_plan(plan: &Plan, root: &Path) {
    let real_root = std::fs::canonicalize(root).unwrap();
    let mut seen = HashSet::new();
    let mut total = 0u64;
    for f in &plan.files {
        if let Input::Path(p) = &f.input {
            assert!(p.starts_with(&real_root), "data file `{}` outside the export root", p.display());
            assert!(seen.insert(p.clone()), "data file `{}` listed twice", p.display());
        }
        if let Some(e) = &f.expected {
            total = total.checked_add(e.item_count).expect("item counts overflow after resolution");
        }
    }
    let listed: u64 = plan.exports.iter().map(|e| e.manifest_files_item_count).sum();
    assert_eq!(total, listed, "data files' item counts do not add up to the export's");
}

fn manifest_target() -> Target {
    let export = Export::new();
    Target {
        name: "manifest",
        dict: &[
            "\"itemCount\":",
            "\"md5Checksum\":",
            "\"dataFileS3Key\":",
            "\"manifestFilesS3Key\":",
            "\"s3Prefix\":",
            "\"outputFormat\":\"ION\"",
            "\"exportType\":\"INCREMENTAL_EXPORT\"",
            "AWSDynamoDB/",
            "../",
            "/./",
            "//",
            "\\\\",
            "\"tables\":",
            "\"files\":",
            "\"path\":",
            "18446744073709551615",
            ".ion.gz",
        ],
        kind_of: |name| {
            if name.starts_with("summary") {
                SUMMARY
            } else if name.starts_with("files") {
                FILES
            } else {
                RUN
            }
        },
        prefix: |kind| match kind {
            SUMMARY => "summary",
            FILES => "files",
            _ => "run",
        },
        run: Box::new(move |kind, bytes| match kind {
            SUMMARY => export.resolve(bytes, &export.files),
            FILES => export.resolve(&export.summary, bytes),
            _ => {
                let parsed = RunManifest::parse("run.json", bytes);
                std::fs::write(export.out.join("_etl/run.json"), bytes).unwrap();
                let read = RunManifest::read(&export.out);
                assert_eq!(parsed.is_ok(), read.is_ok(), "`parse` and `read` disagree");
                match parsed {
                    Ok(m) => {
                        for t in &m.tables {
                            for f in &t.files {
                                let p = Path::new(&f.path);
                                assert!(
                                    p.is_relative()
                                        && p.components().all(|c| matches!(c, std::path::Component::Normal(_))),
                                    "accepted a run manifest listing `{}`",
                                    f.path
                                );
                            }
                        }
                        let again = RunManifest::parse("run.json", &m.to_bytes());
                        assert!(again.is_ok(), "a parsed run manifest does not parse after writing: {again:?}");
                        sig((1u8, m.tables.len().min(8)))
                    }
                    Err(e) => sig((2u8, variant(&format!("{e:?}")).to_owned())),
                }
            }
        }),
    }
}

#[test]
fn fuzz_export() {
    fuzz(export_target());
}

#[test]
fn fuzz_scan() {
    fuzz(scan_target());
}

#[test]
fn fuzz_template() {
    fuzz(template_target());
}

#[test]
fn fuzz_mapping() {
    fuzz(mapping_target());
}

#[test]
fn fuzz_manifest() {
    fuzz(manifest_target());
}

/// Every saved finding of every target, run again: each must now pass the target's property.
#[test]
fn fuzz_crashes_replay() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for t in [export_target(), scan_target(), template_target(), mapping_target(), manifest_target()] {
        for f in files_in(&crash_dir(t.name)) {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let input = std::fs::read(&f).unwrap();
            replayed += 1;
            if let Err(why) = execute(&t, (t.kind_of)(&name), &input) {
                failures.push(format!("{}: {why}", f.display()));
            }
        }
    }
    println!("fuzz: replayed {replayed} saved findings");
    assert!(failures.is_empty(), "saved findings still fail:\n{}", failures.join("\n"));
}

/// The loop's own safety net: a panic and an over-long execution are findings, not test aborts.
#[test]
fn fuzz_harness_catches_panics_and_slow_inputs() {
    let t = Target {
        name: "self-test",
        dict: &[],
        kind_of: one_kind,
        prefix: crash_prefix,
        run: Box::new(|_, bytes| match bytes {
            b"boom" => panic!("boom"),
            b"slow" => {
                std::thread::sleep(SLOW + Duration::from_millis(100));
                0
            }
            _ => 7,
        }),
    };
    assert_eq!(execute(&t, 0, b"fine"), Ok(7));
    assert_eq!(execute(&t, 0, b"boom"), Err("panicked: boom".to_owned()));
    assert!(execute(&t, 0, b"slow").is_err_and(|why| why.starts_with("took")));
}
