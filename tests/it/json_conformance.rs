//! JSON conformance of the line decoder against JSONTestSuite's parsing cases
//! (`tests/fixtures/jsontestsuite/`, see its README): `n_` files are not JSON, `y_` files are,
//! `i_` files are either.
//!
//! DynamoDB JSON is a subset of JSON, so a case is fed in three ways, each a place where the
//! decoder must read arbitrary JSON to decide:
//! - raw, as a whole export line: no case is an export line (none is `{"Item":{...}}`), so every
//!   case is refused; a `y_` case must be refused as valid JSON that is not an export line, never
//!   with a JSON syntax reason;
//! - as the payload of an `S` value, `{"Item":{"PK":{"S":<case>}}}`: the `y_` cases that are one
//!   string are accepted, and the string must be what `serde_json` reads;
//! - as the payload of an `SS` value, `{"Item":{"PK":{"S":"k"},"v":{"SS":<case>}}}`: most of the
//!   suite's string cases are arrays of strings (`["\uD834\uDD1E"]`), which are string sets, so
//!   this is where escapes, surrogates and raw Unicode are checked; again the members must be
//!   what `serde_json` reads.
//!
//! Wrapping a case as an untyped value (`"v":<case>`) would test nothing: DynamoDB values are
//! typed, so the decoder refuses it at the first byte. In every wrapping an `n_` case must be
//! refused with a reason (never accepted, never a panic); a `y_` case must be accepted or refused
//! with a DynamoDB-level reason (not `InvalidJson` or `InvalidUtf8`); an `i_` case must not panic.

use std::panic::{AssertUnwindSafe, catch_unwind};

use etl::decode::{self, DecodeReason, Format, Record, Value};

use crate::common::root;

/// Where a case is put, and how to read back what the decoder accepted.
#[derive(Clone, Copy, Debug)]
enum Feed {
    Raw,
    S,
    SS,
}

impl Feed {
    fn line(self, case: &[u8]) -> Vec<u8> {
        let (head, tail): (&[u8], &[u8]) = match self {
            Feed::Raw => (b"", b""),
            Feed::S => (br#"{"Item":{"PK":{"S":"#, b"}}}"),
            Feed::SS => (br#"{"Item":{"PK":{"S":"k"},"v":{"SS":"#, b"}}}"),
        };
        [head, case, tail].concat()
    }
}

/// The strings an accepted line holds in the fed position.
fn fed_strings(feed: Feed, record: &Record<'_>) -> Option<Vec<String>> {
    let Record::Put(item) = record else { return None };
    let name = match feed {
        Feed::Raw => return None,
        Feed::S => "PK",
        Feed::SS => "v",
    };
    match item.iter().find(|(n, _)| n == name).map(|(_, v)| v) {
        Some(Value::S(s)) => Some(vec![s.to_string()]),
        Some(Value::SS(ss)) => Some(ss.iter().map(|s| s.to_string()).collect()),
        _ => None,
    }
}

/// What `serde_json` reads from a case in the fed position.
fn serde_strings(feed: Feed, case: &[u8]) -> Option<Vec<String>> {
    match feed {
        Feed::Raw => None,
        Feed::S => serde_json::from_slice::<String>(case).ok().map(|s| vec![s]),
        Feed::SS => serde_json::from_slice::<Vec<String>>(case).ok(),
    }
}

#[test]
fn jsontestsuite_cases_through_the_line_decoder() {
    let dir = root().join("tests/fixtures/jsontestsuite");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    cases.sort();
    let mut failures = Vec::new();
    let (mut y, mut n, mut i, mut accepted) = (0, 0, 0, 0);
    for path in &cases {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let case = std::fs::read(path).unwrap();
        match name.as_bytes()[0] {
            b'y' => y += 1,
            b'n' => n += 1,
            b'i' => i += 1,
            _ => panic!("{name}: not a `y_`, `n_` or `i_` case"),
        }
        for feed in [Feed::Raw, Feed::S, Feed::SS] {
            let line = feed.line(&case);
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                // A scan item of the same text must not panic either.
                let _ = decode::decode(Format::ScanItemJson, &line);
                decode::decode(Format::ExportJson, &line)
                    .map(|r| fed_strings(feed, &r))
                    .map_err(|e| (e.reason, e.message))
            }));
            let Ok(result) = outcome else {
                failures.push(format!("{name} ({feed:?}): the decoder panicked"));
                continue;
            };
            match (name.as_bytes()[0], result) {
                (b'n', Ok(_)) => failures.push(format!("{name} ({feed:?}): accepted a line that is not JSON")),
                (b'n', Err((_, message))) if message.is_empty() => {
                    failures.push(format!("{name} ({feed:?}): refused without a message"))
                }
                (b'y', Err((reason @ (DecodeReason::InvalidJson | DecodeReason::InvalidUtf8), message))) => {
                    failures.push(format!("{name} ({feed:?}): valid JSON refused as {reason:?}: {message}"))
                }
                (b'y', Ok(strings)) => {
                    accepted += 1;
                    let want = serde_strings(feed, &case);
                    if strings != want {
                        failures.push(format!("{name} ({feed:?}): decoded {strings:?}, serde_json reads {want:?}"));
                    }
                }
                _ => {}
            }
        }
    }
    assert_eq!((y, n, i), (95, 188, 35), "the suite's 318 parsing cases");
    assert!(failures.is_empty(), "{} JSONTestSuite failures:\n{}", failures.len(), failures.join("\n"));
    // The 3 `y_` cases that are one string (`S`) and the 45 that are sets of distinct strings
    // (`SS`), by Python's `json` module.
    assert_eq!(accepted, 48, "`y_` lines accepted");
}
