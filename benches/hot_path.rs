//! Micro-benchmarks of `etl unwind`'s hot path on the bundled sample export
//! (`sample-exports/shop`, 3,245 items of five entities): decode -> normalize -> spill -> batch,
//! without files, threads or Parquet, so a change to one stage is measured in seconds.
//!
//! ```text
//! cargo bench --bench hot_path                  # every stage
//! cargo bench --bench hot_path -- pass_one      # a filter (divan's own options follow `--`)
//! ```
//!
//! Each benchmark runs over every item of the sample and reports the time per pass over all of
//! them; the throughput line counts items.

// A measuring tool: setup failures are bugs in the bench, not conditions to handle.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use etl::decode::{self, Format, Record};
use etl::mapping::infer::EntityShape;
use etl::mapping::{self, Mapping};
use etl::normalize::{BatchBuilder, MappedTables, Normalized, Normalizer, apply};
use etl::pipeline::spill;
use etl::schema::TableSchema;
use flate2::read::MultiGzDecoder;

fn main() {
    divan::main();
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every line of the sample export's data files, in file-name order.
static LINES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let exports = root().join("sample-exports/shop/AWSDynamoDB");
    let export = std::fs::read_dir(&exports).unwrap().next().unwrap().unwrap().path();
    let mut files: Vec<PathBuf> = std::fs::read_dir(export.join("data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for f in files {
        let r = BufReader::new(MultiGzDecoder::new(std::fs::File::open(&f).unwrap()));
        for line in r.split(b'\n') {
            let line = line.unwrap();
            if !line.is_empty() {
                lines.push(line);
            }
        }
    }
    assert!(lines.len() > 3000, "the sample export has {} lines", lines.len());
    lines
});

static MAPPING: LazyLock<(Mapping, MappedTables)> = LazyLock::new(|| {
    let path = root().join("mappings/ecommerce.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let m = mapping::parse_str(Path::new(&path), &text).expect("mappings/ecommerce.toml compiles");
    let t = MappedTables::new(&m);
    (m, t)
});

fn items() -> ItemsCount {
    ItemsCount::new(LINES.len())
}

fn decode_line(line: &[u8]) -> Record<'_> {
    decode::decode(Format::ExportJson, line).unwrap()
}

/// JSON line -> `Record` (UTF-8 check, parse, exact numbers).
#[divan::bench]
fn decode_only(b: Bencher) {
    b.counter(items()).bench(|| {
        for line in LINES.iter() {
            black_box(decode_line(line));
        }
    });
}

/// Pass one without a mapping: decode, route by `Type`, infer the entity's shape, spill.
#[divan::bench]
fn pass_one_inferred(b: Bencher) {
    b.counter(items()).bench(pass_one);
}

/// Pass one without a mapping over every line: each entity's shape and spilled items.
fn pass_one() -> BTreeMap<String, (EntityShape, Vec<u8>)> {
    let mut normalizer = Normalizer::new("Type", None);
    let mut shapes: BTreeMap<String, (EntityShape, Vec<u8>)> = BTreeMap::new();
    let mut slots = Vec::new();
    for (i, line) in LINES.iter().enumerate() {
        let record = decode_line(line);
        if let Normalized::Inferred { entity, item } = normalizer.normalize(&record) {
            let (shape, spilled) = shapes.entry(entity.unwrap_or_default().to_owned()).or_default();
            slots.clear();
            shape.observe_slots(item, 0, i as u64, |s| slots.push(s));
            spill::encode_item_slots(item, &slots, spilled);
        }
    }
    shapes
}

/// Pass one with `mappings/ecommerce.toml`: decode, apply the mapping (keys, coercion, child
/// rows), spill.
#[divan::bench]
fn pass_one_mapped(b: Bencher) {
    let (m, t) = &*MAPPING;
    b.counter(items()).bench(|| {
        let mut normalizer = Normalizer::new(&m.type_attribute, Some((m, t)));
        let mut spilled: Vec<Vec<u8>> = vec![Vec::new(); t.tables.len()];
        let names = apply::row_names(m);
        let mut slots = Vec::new();
        for line in LINES.iter() {
            let record = decode_line(line);
            if let Normalized::Mapped { rows } = normalizer.normalize(&record) {
                for (table, row) in &rows {
                    let table = *table as usize;
                    spill::column_slots(&names[table], row, &mut slots);
                    spill::encode_item_slots(row, &slots, &mut spilled[table]);
                }
            }
        }
        spilled
    });
}

/// Every line decoded once, for the benchmarks of the stages after decoding.
static RECORDS: LazyLock<Vec<Record<'static>>> = LazyLock::new(|| LINES.iter().map(|l| decode_line(l)).collect());

/// Applying `mappings/ecommerce.toml` alone (keys, coercion, child rows) to decoded items: the
/// part of a mapped pass one that an unmapped one does not do.
#[divan::bench]
fn apply_mapped(b: Bencher) {
    let (m, t) = &*MAPPING;
    let records = &*RECORDS;
    b.counter(items()).bench(|| {
        let mut normalizer = Normalizer::new(&m.type_attribute, Some((m, t)));
        let mut rows = 0usize;
        for record in records {
            if let Normalized::Mapped { rows: r } = normalizer.normalize(record) {
                rows += black_box(r).len();
            }
        }
        rows
    });
}

/// An inferred table as pass one leaves it: its schema, its spilled items and the names their
/// slots stand for.
type Spilled = (TableSchema, Vec<u8>, Vec<Box<str>>);

/// Every inferred table as pass one leaves it.
static INFERRED: LazyLock<Vec<Spilled>> = LazyLock::new(|| {
    let mut widenings = Vec::new();
    pass_one()
        .into_iter()
        .map(|(entity, (shape, spilled))| {
            let table = etl::normalize::naming::snake_case(&entity);
            (shape.schema(&table, Some(entity.as_str()), &mut widenings).schema, spilled, shape.names())
        })
        .collect()
});

/// Pass two without a mapping: spilled items read back and built into one Arrow batch per table.
#[divan::bench]
fn pass_two_inferred(b: Bencher) {
    let tables = &*INFERRED;
    b.counter(items()).bench(|| {
        let mut rows = 0;
        for (schema, spilled, names) in tables {
            let mut builder = BatchBuilder::new(schema);
            let places: Vec<_> = names.iter().map(|n| builder.slot_of(n)).collect();
            let mut r = spill::Reader::new(spilled);
            while !r.at_end() {
                r.append_row(names, &places, &mut builder).unwrap();
            }
            rows += builder.finish().unwrap().num_rows();
        }
        rows
    });
}

/// The whole hot path with a mapping, without the spill: decode, apply, append to each declared
/// table's builder, one batch per table.
#[divan::bench]
fn decode_apply_batch_mapped(b: Bencher) {
    let (m, t) = &*MAPPING;
    b.counter(items()).bench(|| {
        let mut normalizer = Normalizer::new(&m.type_attribute, Some((m, t)));
        let mut builders: Vec<BatchBuilder> = t.tables.iter().map(BatchBuilder::new).collect();
        for line in LINES.iter() {
            let record = decode_line(line);
            if let Normalized::Mapped { rows } = normalizer.normalize(&record) {
                for (table, row) in &rows {
                    builders[*table as usize].append(row).unwrap();
                }
            }
        }
        builders.iter_mut().map(|b| b.finish().unwrap().num_rows()).sum::<usize>()
    });
}
