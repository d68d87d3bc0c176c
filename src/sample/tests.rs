//! End-to-end checks of the generator: determinism, manifests that match their files, AWS's
//! layouts, the data-quality facts the SQL library relies on.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};
use serde_json::Value;

use super::export::{EMPTY_GZIP, hex, iso_millis};
use super::shop::expected_items;
use super::{SampleError, SampleFormat, SampleOptions, generate};

fn options(out: &Path, users: u64, files: usize, scan: bool) -> SampleOptions {
    SampleOptions {
        out: out.to_owned(),
        users,
        files,
        seed: 42,
        scan_json: scan.then(|| out.join("scan.json")),
        format: SampleFormat::DynamodbJson,
    }
}

fn all_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = fs::read(&path).unwrap();
                found.insert(path.strip_prefix(dir).unwrap().to_owned(), bytes);
            }
        }
    }
    found
}

fn gunzip_lines(bytes: &[u8]) -> Vec<String> {
    let mut lines = Vec::new();
    for line in BufReader::new(MultiGzDecoder::new(bytes)).split(b'\n') {
        lines.push(String::from_utf8(line.unwrap()).unwrap());
    }
    lines
}

fn is_canonical_number(v: &str) -> bool {
    let digits = v.strip_prefix('-').unwrap_or(v);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let int_ok = !int.is_empty() && int.bytes().all(|b| b.is_ascii_digit()) && (int == "0" || !int.starts_with('0'));
    let frac_ok = frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) && !f.ends_with('0'));
    int_ok && frac_ok && v != "-0"
}

/// An attribute name and the check its deliberately spelled values must pass.
type Spelling = (&'static str, fn(&str) -> bool);

/// Attributes the shop spells in another form on purpose, for etl to canonicalise.
const SPELLED: [Spelling; 2] = [
    // `123456000E-9`: an integer mantissa and an exponent.
    ("volume_m3", |v| v.strip_suffix("E-9").is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))),
    // `0.190`: three decimals, trailing zeros kept.
    ("tax_rate", |v| v.len() == 5 && v.starts_with("0.") && v[2..].bytes().all(|b| b.is_ascii_digit())),
];

/// No whitespace outside JSON strings.
fn is_compact(json: &str) -> bool {
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') | (false, _, '"') => in_string = !in_string,
            (false, _, c) if c.is_whitespace() => return false,
            _ => {}
        }
    }
    !in_string
}

/// Asserts the DynamoDB AttributeValue rules for one value, recursively.
fn check_av(av: &Value, at: &str) {
    let obj = av.as_object().unwrap_or_else(|| panic!("{at}: not an object"));
    assert_eq!(obj.len(), 1, "{at}: {obj:?} must have exactly one type key");
    let (ty, v) = obj.iter().next().unwrap();
    let b64 = |s: &Value| STANDARD.decode(s.as_str().unwrap()).unwrap_or_else(|e| panic!("{at}: bad base64: {e}"));
    let set = |v: &Value| {
        let xs = v.as_array().unwrap();
        assert!(!xs.is_empty(), "{at}: empty set");
        let mut seen: Vec<&Value> = xs.iter().collect();
        seen.sort_by_key(|x| x.to_string());
        seen.dedup();
        assert_eq!(seen.len(), xs.len(), "{at}: duplicate set member");
        xs.clone()
    };
    match ty.as_str() {
        "S" => assert!(v.is_string(), "{at}"),
        "N" => match SPELLED.iter().find(|(name, _)| *name == at) {
            Some((_, spelled)) => assert!(spelled(v.as_str().unwrap()), "{at}: {v}"),
            None => assert!(is_canonical_number(v.as_str().unwrap()), "{at}: {v}"),
        },
        "B" => {
            b64(v);
        }
        "BOOL" => assert!(v.is_boolean(), "{at}"),
        "NULL" => assert_eq!(v, &Value::Bool(true), "{at}"),
        "SS" => set(v).iter().for_each(|x| assert!(x.is_string(), "{at}")),
        "NS" => set(v).iter().for_each(|x| assert!(is_canonical_number(x.as_str().unwrap()), "{at}")),
        "BS" => set(v).iter().for_each(|x| {
            b64(x);
        }),
        "L" => v.as_array().unwrap().iter().enumerate().for_each(|(i, x)| check_av(x, &format!("{at}[{i}]"))),
        "M" => v.as_object().unwrap().iter().for_each(|(k, x)| check_av(x, &format!("{at}.{k}"))),
        other => panic!("{at}: unknown type key {other}"),
    }
}

#[test]
fn same_options_give_identical_bytes() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sa = generate(&options(a.path(), 60, 3, true)).unwrap();
    let sb = generate(&options(b.path(), 60, 3, true)).unwrap();
    assert_eq!(sa.items, sb.items);
    assert_eq!(sa.items_by_type, sb.items_by_type);
    let (fa, fb) = (all_files(a.path()), all_files(b.path()));
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (path, bytes) in &fa {
        assert!(bytes == &fb[path], "{} differs", path.display());
    }
    // 4 data files + 5 manifests/markers + scan.json
    assert_eq!(fa.len(), 10);

    let c = tempfile::tempdir().unwrap();
    let mut other = options(c.path(), 60, 3, false);
    other.seed = 43;
    let sc = generate(&other).unwrap();
    assert_ne!(sc.export_dir.file_name(), sa.export_dir.file_name());
}

#[test]
fn export_is_consistent_with_its_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let summary = generate(&options(dir.path(), 200, 4, true)).unwrap();
    let export = &summary.export_dir;
    let id = export.file_name().unwrap().to_str().unwrap().to_owned();
    assert_eq!(id.len(), 23, "{id}");
    assert_eq!(&id[14..15], "-");
    assert!(id[..14].bytes().all(|b| b.is_ascii_digit()));
    assert!(id[15..].bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(fs::read(export.join("_started")).unwrap(), b"");

    let summary_bytes = fs::read(export.join("manifest-summary.json")).unwrap();
    assert_ne!(summary_bytes.last(), Some(&b'\n'));
    let md5_file = fs::read_to_string(export.join("manifest-summary.md5")).unwrap();
    assert_eq!(md5_file, STANDARD.encode(Md5::digest(&summary_bytes)));
    assert_eq!(md5_file.len(), 24);
    let manifest: Value = serde_json::from_slice(&summary_bytes).unwrap();
    let keys: Vec<&str> = manifest.as_object().unwrap().keys().map(String::as_str).collect();
    for key in [
        "version",
        "exportArn",
        "startTime",
        "endTime",
        "tableArn",
        "tableId",
        "exportTime",
        "s3Bucket",
        "s3Prefix",
        "s3SseAlgorithm",
        "s3SseKmsKeyId",
        "manifestFilesS3Key",
        "billedSizeBytes",
        "itemCount",
        "outputFormat",
    ] {
        assert!(keys.contains(&key), "missing {key}");
    }
    assert_eq!(manifest["version"], "2020-06-30");
    assert_eq!(manifest["s3Prefix"], Value::Null);
    assert_eq!(manifest["exportArn"], format!("arn:aws:dynamodb:eu-west-1:111122223333:table/shop/export/{id}"));
    let start_ms: u64 = id[..14].parse().unwrap();
    assert_eq!(manifest["startTime"], iso_millis(start_ms));
    assert_eq!(manifest["manifestFilesS3Key"], format!("AWSDynamoDB/{id}/manifest-files.json"));

    let files_bytes = fs::read(export.join("manifest-files.json")).unwrap();
    assert_eq!(files_bytes.last(), Some(&b'\n'));
    assert_eq!(
        fs::read_to_string(export.join("manifest-files.md5")).unwrap(),
        STANDARD.encode(Md5::digest(&files_bytes))
    );
    let mut total = 0;
    let mut empties = 0;
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut keys_seen = std::collections::BTreeSet::new();
    let mut compressed = 0;
    let entries: Vec<Value> = files_bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 5);
    assert_eq!(entries.len(), summary.data_files);
    for entry in &entries {
        let key = entry["dataFileS3Key"].as_str().unwrap();
        let name = key.strip_prefix(&format!("AWSDynamoDB/{id}/data/")).unwrap();
        let stem = name.strip_suffix(".json.gz").unwrap();
        assert_eq!(stem.len(), 26);
        assert!(stem.bytes().all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b)));
        let bytes = fs::read(export.join("data").join(name)).unwrap();
        compressed += bytes.len() as u64;
        let digest = Md5::digest(&bytes);
        assert_eq!(entry["md5Checksum"], STANDARD.encode(digest));
        assert_eq!(entry["etag"], format!("{}-1", hex(&Md5::digest(digest))));
        assert_eq!(&bytes[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
        let lines = gunzip_lines(&bytes);
        assert_eq!(entry["itemCount"], lines.len() as u64, "{name}");
        total += lines.len() as u64;
        if lines.is_empty() {
            empties += 1;
            assert_eq!(bytes, EMPTY_GZIP);
            assert_eq!(entry["md5Checksum"], "FjvgqIxwymKf1RbbqtrZag==");
            assert_eq!(entry["etag"], "7deb4078f238dd87d6af0538152c04e9-1");
        }
        for line in &lines {
            assert!(is_compact(line), "not compact: {line}");
            let v: Value = serde_json::from_str(line).unwrap();
            let obj = v.as_object().unwrap();
            assert_eq!(obj.len(), 1);
            let item = obj["Item"].as_object().unwrap();
            for (name, av) in item {
                check_av(av, name);
            }
            let ty = item["Type"]["S"].as_str().unwrap().to_owned();
            *by_type.entry(ty).or_default() += 1;
            let pk = item["PK"]["S"].as_str().unwrap().to_owned();
            let sk = item["SK"]["S"].as_str().unwrap().to_owned();
            assert!(keys_seen.insert((pk, sk)), "duplicate key in {line}");
        }
    }
    assert_eq!(empties, 1, "exactly one empty data file");
    assert_eq!(manifest["itemCount"], total);
    assert_eq!(summary.items, total);
    assert_eq!(summary.items_by_type, by_type);
    assert_eq!(summary.compressed_bytes, compressed);
    assert_eq!(by_type["User"], 200);
    assert_eq!(by_type["Product"], 50);

    // The AWS CLI v1 layout: Python's json.dumps(indent=4, ensure_ascii=False) plus a newline.
    let text = fs::read_to_string(dir.path().join("scan.json")).unwrap();
    assert!(text.starts_with(concat!(
        "{\n    \"Items\": [\n        {\n            \"PK\": {\n",
        "                \"S\": \"USER#user00001@example.com\"\n            },\n"
    )));
    assert!(text.ends_with(&format!(
        "\n        }}\n    ],\n    \"Count\": {total},\n    \"ScannedCount\": {total},\n    \"ConsumedCapacity\": null\n}}\n"
    )));
    assert!(text.contains("Zieliński") && !text.contains("\\u"));
    let scan: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(scan["Count"], total);
    assert_eq!(scan["ScannedCount"], total);
    assert_eq!(scan["ConsumedCapacity"], Value::Null);
    assert_eq!(scan["Items"].as_array().unwrap().len() as u64, total);
}

#[test]
fn data_quality_facts_hold() {
    let dir = tempfile::tempdir().unwrap();
    let summary = generate(&options(dir.path(), 400, 2, false)).unwrap();
    let mut items = Vec::new();
    for entry in fs::read_dir(summary.export_dir.join("data")).unwrap() {
        for line in gunzip_lines(&fs::read(entry.unwrap().path()).unwrap()) {
            let v: Value = serde_json::from_str(&line).unwrap();
            items.push(v["Item"].clone());
        }
    }
    let cents = |v: &Value| -> i64 {
        let (i, f) = v.as_str().unwrap().split_once('.').unwrap_or((v.as_str().unwrap(), ""));
        i.parse::<i64>().unwrap() * 100 + format!("{f:0<2}").parse::<i64>().unwrap()
    };
    let mut line_totals: BTreeMap<String, i64> = BTreeMap::new();
    for it in items.iter().filter(|it| it["Type"]["S"] == "OrderItem") {
        *line_totals.entry(it["order_id"]["S"].as_str().unwrap().to_owned()).or_default() +=
            it["quantity"]["N"].as_str().unwrap().parse::<i64>().unwrap() * cents(&it["unit_price"]["N"]);
    }
    let orders: Vec<&Value> = items.iter().filter(|it| it["Type"]["S"] == "Order").collect();
    let mut off = 0;
    for o in &orders {
        let id = o["order_id"]["S"].as_str().unwrap();
        let embedded: i64 = o["lines"]["L"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["M"]["qty"]["N"].as_str().unwrap().parse::<i64>().unwrap() * cents(&l["M"]["unit_price"]["N"]))
            .sum();
        assert_eq!(embedded, line_totals[id], "{id}");
        let diff = cents(&o["total"]["N"]) - embedded;
        if diff != 0 {
            assert!(diff.abs() <= 9, "{id}: off by {diff}");
            off += 1;
        }
        assert!(
            o["SK"]["S"]
                .as_str()
                .unwrap()
                .starts_with(&format!("ORDER#{}#{id}", o["ordered_at"]["N"].as_str().unwrap()))
        );
    }
    assert!(off > 0 && off * 20 < orders.len(), "{off} of {}", orders.len());
    let users: Vec<&Value> = items.iter().filter(|it| it["Type"]["S"] == "User").collect();
    for u in &users {
        let active = u["status"]["S"] == "active";
        assert_eq!(u.get("StatusIndexPK").is_some(), active);
    }
    assert!(users.iter().any(|u| u["lifetime_points"]["N"].as_str().unwrap().len() == 25));
    // Negative numbers, exponent form and trailing zeros, for etl to keep exact.
    let negative = users.iter().filter(|u| u["credit_balance"]["N"].as_str().unwrap().starts_with('-')).count();
    assert!(negative * 5 > users.len() && negative * 2 < users.len(), "{negative} negative balances");
    assert!(orders.iter().all(|o| o["tax_rate"]["N"].as_str().unwrap().ends_with('0')));
    let products: Vec<&Value> = items.iter().filter(|it| it["Type"]["S"] == "Product").collect();
    assert!(products.iter().all(|p| p["volume_m3"]["N"].as_str().unwrap().ends_with("E-9")));
    // The catalog's last product is never ordered; every other product of this catalog is.
    let ordered: std::collections::BTreeSet<&str> =
        items.iter().filter(|it| it["Type"]["S"] == "OrderItem").map(|it| it["sku"]["S"].as_str().unwrap()).collect();
    let last = products.iter().map(|p| p["sku"]["S"].as_str().unwrap()).max().unwrap();
    assert!(!ordered.contains(last), "{last} was ordered");
    assert_eq!(ordered.len(), products.len() - 1);
    assert!(users.iter().any(|u| u["phone"].get("NULL").is_some()));
    assert!(items.iter().any(|it| it["title"]["S"] == "Très bien ✓"));
    // `expected_items` is a fair estimate.
    let expected = expected_items(400) as f64;
    let ratio = summary.items as f64 / expected;
    assert!((0.9..1.1).contains(&ratio), "{} vs {expected}", summary.items);
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(generate(&options(dir.path(), 0, 1, false)), Err(SampleError::NoUsers)));
    assert!(matches!(generate(&options(dir.path(), 1, 0, false)), Err(SampleError::NoFiles)));
    assert!(matches!(
        generate(&options(dir.path(), 1, 22, false)),
        Err(SampleError::TooManyFiles { files: 22, keys: 21 })
    ));
    // Tiny exports still fill every requested file.
    let s = generate(&options(dir.path(), 1, 21, false)).unwrap();
    assert_eq!(s.data_files, 22);
    let manifest = fs::read_to_string(s.export_dir.join("manifest-files.json")).unwrap();
    let empty = manifest.lines().filter(|l| l.starts_with("{\"itemCount\":0,")).count();
    assert_eq!((manifest.lines().count(), empty), (22, 1));
    assert!(matches!(generate(&options(dir.path(), 1, 21, false)), Err(SampleError::ExportExists { .. })));
}

#[test]
fn an_ion_sample_is_the_same_export_in_ion() {
    let tmp = tempfile::tempdir().unwrap();
    let json = generate(&options(&tmp.path().join("json"), 30, 3, false)).unwrap();
    let ion = generate(&SampleOptions { format: SampleFormat::Ion, ..options(&tmp.path().join("ion"), 30, 3, false) })
        .unwrap();
    assert_eq!((ion.items, ion.data_files, &ion.items_by_type), (json.items, json.data_files, &json.items_by_type));
    let files = all_files(&ion.export_dir);
    let summary: Value = serde_json::from_slice(&files[Path::new("manifest-summary.json")]).unwrap();
    assert_eq!(summary["outputFormat"], "ION");
    let listed = std::str::from_utf8(&files[Path::new("manifest-files.json")]).unwrap();
    let mut lines = 0;
    for entry in listed.lines() {
        let entry: Value = serde_json::from_str(entry).unwrap();
        let key = entry["dataFileS3Key"].as_str().unwrap();
        assert!(key.ends_with(".ion.gz"), "{key}");
        let rel = key.split_once("/data/").map(|(_, name)| PathBuf::from("data").join(name)).unwrap();
        let bytes = &files[&rel];
        assert_eq!(entry["md5Checksum"], STANDARD.encode(Md5::digest(bytes)));
        let text: Vec<String> = gunzip_lines(bytes).into_iter().filter(|l| !l.is_empty()).collect();
        assert_eq!(entry["itemCount"].as_u64(), Some(text.len() as u64));
        assert!(text.iter().all(|l| l.starts_with("$ion_1_0 {Item:{") && l.ends_with("}}")), "{text:?}");
        lines += text.len() as u64;
    }
    assert_eq!(lines, json.items);
}
