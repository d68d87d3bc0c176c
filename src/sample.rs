//! Deterministic synthetic exports of a fake e-commerce single table (`etl sample`).
//!
//! This module owns the made-up `shop` table (users, orders, order items, products, reviews), how
//! its items spread over data files, and writing them as a DynamoDB full export in
//! `DYNAMODB_JSON` (`_started`, manifests, `.md5` side files, gzip data files, one of them empty)
//! and, on request, as `aws dynamodb scan` output. The same options always give the same bytes:
//! every random choice comes from a seeded splitmix64 stream keyed by the entity it describes, so
//! the data files can be written in parallel without sharing state. It never reads exports and
//! must not depend on the pipeline modules: tests and benchmarks use it as an independent source
//! of truth.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use base64::Engine as _;
use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use flate2::{Compression, GzBuilder};
use md5::{Digest, Md5};
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Folder to create; the export goes to `out/AWSDynamoDB/<ExportId>/…`.
    pub out: PathBuf,
    /// Scale knob; every other count derives from it (see [`users_for_items`]).
    pub users: u64,
    /// Number of non-empty data files (at least 1); one extra empty data file is always added.
    pub files: usize,
    pub seed: u64,
    /// If set, also write the same items as `aws dynamodb scan` (CLI v1) output to this file.
    pub scan_json: Option<PathBuf>,
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleSummary {
    /// `out/AWSDynamoDB/<ExportId>`: the folder holding `manifest-summary.json`.
    pub export_dir: PathBuf,
    pub items: u64,
    /// Item count per `Type` value (`Order`, `OrderItem`, `Product`, `Review`, `User`).
    pub items_by_type: BTreeMap<String, u64>,
    /// Data files written, the empty one included (`files + 1`).
    pub data_files: usize,
    /// Total size of the `.json.gz` data files.
    pub compressed_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("a sample needs at least 1 user, got 0")]
    NoUsers,
    #[error("a sample needs at least 1 non-empty data file, got 0")]
    NoFiles,
    #[error("cannot fill {files} data files with {keys} partition keys; hint: ask for fewer files or more items")]
    TooManyFiles { files: usize, keys: u64 },
    #[error("export folder `{path}` already exists; hint: remove it or choose another output folder")]
    ExportExists { path: PathBuf },
    #[error("cannot create folder `{path}`: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot write `{path}`: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot encode an item for `{path}`: {source}")]
    Encode { path: PathBuf, source: serde_json::Error },
}

/// Generates the export described by `opts`; see the module documentation.
pub fn generate(opts: &SampleOptions) -> Result<SampleSummary, SampleError> {
    if opts.users == 0 {
        return Err(SampleError::NoUsers);
    }
    if opts.files == 0 {
        return Err(SampleError::NoFiles);
    }
    let shop = Shop::new(opts.seed, opts.users, opts.files)?;
    let export = ExportNames::new(opts.seed, opts.files);

    let export_dir = opts.out.join("AWSDynamoDB").join(&export.id);
    if export_dir.exists() {
        return Err(SampleError::ExportExists { path: export_dir });
    }
    let data_dir = export_dir.join("data");
    fs::create_dir_all(&data_dir).map_err(|source| SampleError::CreateDir { path: data_dir.clone(), source })?;
    write_file(&export_dir.join("_started"), b"")?;

    // Slot `export.empty_slot` holds the empty file; the others hold partitions 0..files in order.
    let slots: Vec<Option<usize>> = (0..=opts.files)
        .map(|slot| match slot.cmp(&export.empty_slot) {
            std::cmp::Ordering::Less => Some(slot),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(slot - 1),
        })
        .collect();
    let paths: Vec<PathBuf> = export.file_names.iter().map(|name| data_dir.join(format!("{name}.json.gz"))).collect();
    let mut partition_paths = vec![PathBuf::new(); opts.files];
    for (slot, partition) in slots.iter().enumerate() {
        if let Some(p) = partition {
            partition_paths[*p] = paths[slot].clone();
        }
    }

    let stats = write_partitions(&shop, &partition_paths)?;
    write_file(&paths[export.empty_slot], &EMPTY_GZIP)?;
    let empty = FileStats {
        counts: [0; KINDS],
        raw_bytes: 0,
        compressed_bytes: EMPTY_GZIP.len() as u64,
        md5: Md5::digest(EMPTY_GZIP).into(),
    };

    let mut manifest_files = Vec::new();
    for (slot, partition) in slots.iter().enumerate() {
        let s = match partition {
            Some(p) => &stats[*p],
            None => &empty,
        };
        let line = ManifestFileLine {
            item_count: s.items(),
            md5_checksum: STANDARD.encode(s.md5),
            etag: format!("{}-1", hex(&Md5::digest(s.md5))),
            data_file_s3_key: format!("AWSDynamoDB/{}/data/{}.json.gz", export.id, export.file_names[slot]),
        };
        let path = export_dir.join("manifest-files.json");
        serde_json::to_writer(&mut manifest_files, &line).map_err(|source| SampleError::Encode { path, source })?;
        manifest_files.push(b'\n');
    }

    let mut counts = [0u64; KINDS];
    let mut raw_bytes = 0;
    let mut compressed_bytes = empty.compressed_bytes;
    for s in &stats {
        for (total, n) in counts.iter_mut().zip(s.counts) {
            *total += n;
        }
        raw_bytes += s.raw_bytes;
        compressed_bytes += s.compressed_bytes;
    }
    let items: u64 = counts.iter().sum();

    let files_path = export_dir.join("manifest-files.json");
    write_file(&files_path, &manifest_files)?;
    write_file(&export_dir.join("manifest-files.md5"), STANDARD.encode(Md5::digest(&manifest_files)).as_bytes())?;

    let summary = export.summary(items, raw_bytes);
    let summary_path = export_dir.join("manifest-summary.json");
    let summary_bytes =
        serde_json::to_vec(&summary).map_err(|source| SampleError::Encode { path: summary_path.clone(), source })?;
    write_file(&summary_path, &summary_bytes)?;
    write_file(&export_dir.join("manifest-summary.md5"), STANDARD.encode(Md5::digest(&summary_bytes)).as_bytes())?;

    if let Some(path) = &opts.scan_json {
        write_scan_json(&shop, path)?;
    }

    Ok(SampleSummary {
        export_dir,
        items,
        items_by_type: Kind::ALL.iter().map(|k| (k.name().to_owned(), counts[*k as usize])).collect(),
        data_files: opts.files + 1,
        compressed_bytes,
    })
}

/// How many users give about `items` items in total (at least 1).
///
/// Per user: 1 profile, 3.5 orders on average, 2.5 lines per order, and 0.34 reviews per line,
/// so 1 + 3.5 × (1 + 2.5 × 1.34) = 16.225 items; plus a catalog of max(20, users / 4) products.
pub fn users_for_items(items: u64) -> u64 {
    let (mut lo, mut hi) = (1u64, items.max(1));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if expected_items(mid) >= items {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// Expected item count for `users` users; see [`users_for_items`].
fn expected_items(users: u64) -> u64 {
    let per_user_milli = 16_225u128;
    let items = u128::from(users) * per_user_milli / 1000 + u128::from(catalog_size(users));
    u64::try_from(items).unwrap_or(u64::MAX)
}

fn catalog_size(users: u64) -> u64 {
    (users / 4).max(20)
}

// ---------------------------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------------------------

/// splitmix64: tiny, fast, and good enough for fake data.
#[derive(Debug, Clone)]
struct Rng(u64);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// An independent stream for entity `id` of kind `tag`; `mix` is a bijection, so distinct
    /// `(tag, id)` pairs (ids below 2^56) start from distinct states.
    fn stream(seed: u64, tag: u64, id: u64) -> Self {
        Rng(mix(seed ^ mix((tag << 56) ^ id)))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    /// `k` distinct elements of `xs` (k <= xs.len()), in random order.
    fn distinct<T: Copy>(&mut self, xs: &[T], k: usize) -> Vec<T> {
        let mut idx: Vec<usize> = (0..xs.len()).collect();
        for i in 0..k {
            let j = i + self.below((xs.len() - i) as u64) as usize;
            idx.swap(i, j);
        }
        idx[..k].iter().map(|&i| xs[i]).collect()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    fn digits(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from(b'0' + self.below(10) as u8)).collect()
    }
}

const TAG_PLAN: u64 = 1;
const TAG_USER: u64 = 2;
const TAG_ORDER: u64 = 3;
const TAG_PRODUCT_CORE: u64 = 4;
const TAG_PRODUCT: u64 = 5;
const TAG_REVIEW: u64 = 6;
const TAG_EXPORT: u64 = 7;

// ---------------------------------------------------------------------------------------------
// Items and AttributeValues
// ---------------------------------------------------------------------------------------------

/// One DynamoDB AttributeValue; numbers are already in canonical form.
#[derive(Debug, Clone)]
enum Av {
    S(String),
    N(String),
    B(Vec<u8>),
    Bool(bool),
    Null,
    Ss(Vec<String>),
    Ns(Vec<String>),
    Bs(Vec<Vec<u8>>),
    L(Vec<Av>),
    M(Vec<(&'static str, Av)>),
}

fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

fn n(v: impl ToString) -> Av {
    Av::N(v.to_string())
}

/// Attributes in insertion order (a fixed order per entity, deliberately not sorted).
#[derive(Debug, Clone, Default)]
struct Item(Vec<(&'static str, Av)>);

impl Item {
    fn put(&mut self, name: &'static str, value: Av) -> &mut Self {
        self.0.push((name, value));
        self
    }
}

struct B64<'a>(&'a [u8]);

impl Serialize for B64<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(&Base64Display::new(self.0, &STANDARD))
    }
}

struct Attrs<'a>(&'a [(&'static str, Av)]);

impl Serialize for Attrs<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

struct Blobs<'a>(&'a [Vec<u8>]);

impl Serialize for Blobs<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut seq = ser.serialize_seq(Some(self.0.len()))?;
        for blob in self.0 {
            seq.serialize_element(&B64(blob))?;
        }
        seq.end()
    }
}

impl Serialize for Av {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(1))?;
        match self {
            Av::S(v) => map.serialize_entry("S", v)?,
            Av::N(v) => map.serialize_entry("N", v)?,
            Av::B(v) => map.serialize_entry("B", &B64(v))?,
            Av::Bool(v) => map.serialize_entry("BOOL", v)?,
            Av::Null => map.serialize_entry("NULL", &true)?,
            Av::Ss(v) => map.serialize_entry("SS", v)?,
            Av::Ns(v) => map.serialize_entry("NS", v)?,
            Av::Bs(v) => map.serialize_entry("BS", &Blobs(v))?,
            Av::L(v) => map.serialize_entry("L", v)?,
            Av::M(v) => map.serialize_entry("M", &Attrs(v))?,
        }
        map.end()
    }
}

impl Serialize for Item {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        Attrs(&self.0).serialize(ser)
    }
}

/// A data-file line: `{"Item":{…}}`.
struct ExportLine<'a>(&'a Item);

impl Serialize for ExportLine<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(1))?;
        map.serialize_entry("Item", self.0)?;
        map.end()
    }
}

/// `value / 10^scale` in DynamoDB's canonical form: no trailing fractional zeros, no exponent.
fn fixed(value: u64, scale: u32) -> String {
    let div = 10u64.pow(scale);
    let (int, mut frac) = (value / div, value % div);
    if frac == 0 {
        return int.to_string();
    }
    let mut digits = scale as usize;
    while frac % 10 == 0 {
        frac /= 10;
        digits -= 1;
    }
    format!("{int}.{frac:0digits$}")
}

fn money(cents: u64) -> Av {
    Av::N(fixed(cents, 2))
}

// ---------------------------------------------------------------------------------------------
// The shop
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    User = 0,
    Order = 1,
    OrderItem = 2,
    Product = 3,
    Review = 4,
}

const KINDS: usize = 5;

impl Kind {
    const ALL: [Kind; KINDS] = [Kind::User, Kind::Order, Kind::OrderItem, Kind::Product, Kind::Review];

    fn name(self) -> &'static str {
        match self {
            Kind::User => "User",
            Kind::Order => "Order",
            Kind::OrderItem => "OrderItem",
            Kind::Product => "Product",
            Kind::Review => "Review",
        }
    }
}

const T_SIGNUP_START: u64 = 1_640_995_200; // 2022-01-01T00:00:00Z
const T_ORDERS_START: u64 = 1_735_689_600; // 2025-01-01T00:00:00Z
const T_ORDERS_END: u64 = 1_777_593_600; // 2026-05-01T00:00:00Z: reviews then end before the export
const T_EXPORT: u64 = 1_780_272_000; // 2026-06-01T00:00:00Z
const DAY: u64 = 86_400;

const FIRST_NAMES: &[&str] = &[
    "Anna", "Ben", "Chloé", "David", "Elif", "Fatima", "Giulia", "Hans", "Inès", "Jonas", "Karin", "Lucas", "Maëlle",
    "Noah", "Olga", "Pedro", "Quentin", "Rosa", "Sven", "Tomás", "Ursula", "Víctor", "Wiebke", "Yusuf", "Zoë",
];
const LAST_NAMES: &[&str] = &[
    "Andersen",
    "Bauer",
    "Costa",
    "Dubois",
    "Eriksson",
    "Fischer",
    "García",
    "Horvath",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "López",
    "Martin",
    "Nowak",
    "O'Brien",
    "Peeters",
    "Rossi",
    "Schmidt",
    "Tanaka",
    "Ünal",
    "Van Dijk",
    "Weiß",
    "Yılmaz",
    "Zieliński",
];
/// (city, ISO country, phone prefix)
const CITIES: &[(&str, &str, &str)] = &[
    ("Paris", "FR", "+33"),
    ("Lyon", "FR", "+33"),
    ("Berlin", "DE", "+49"),
    ("München", "DE", "+49"),
    ("Madrid", "ES", "+34"),
    ("Lisboa", "PT", "+351"),
    ("Dublin", "IE", "+353"),
    ("Amsterdam", "NL", "+31"),
    ("Milano", "IT", "+39"),
    ("Kraków", "PL", "+48"),
    ("Zürich", "CH", "+41"),
    ("Göteborg", "SE", "+46"),
];
const STREETS: &[&str] = &[
    "Main Street",
    "Rue de la Paix",
    "Hauptstraße",
    "Calle Mayor",
    "Via Roma",
    "Kungsgatan",
    "Nowy Świat",
    "Damrak",
    "Avenida da Liberdade",
];
const USER_TAGS: &[&str] = &["vip", "newsletter", "beta", "wholesale"];
const CATEGORIES: &[&str] = &["shoes", "apparel", "kitchen", "garden", "electronics", "toys", "books"];
const NOUNS: [&[&str]; 7] = [
    &["Sneaker", "Boot", "Sandal", "Loafer", "Trail Runner"],
    &["T-Shirt", "Hoodie", "Jacket", "Jeans", "Dress"],
    &["Kettle", "Chef's Knife", "Pan", "Teapot", "Cutting Board"],
    &["Hose", "Planter", "Rake", "Bird House", "Lantern"],
    &["Headphones", "Charger", "Speaker", "Keyboard", "Webcam"],
    &["Puzzle", "Robot", "Plush Bear", "Kite", "Train Set"],
    &["Cookbook", "Novel", "Atlas", "Notebook", "Comic"],
];
const ADJECTIVES: &[&str] = &[
    "Classic", "Organic", "Compact", "Deluxe", "Eco", "Vintage", "Smart", "Ultra", "Cozy", "Rugged", "Petite", "Grand",
];
const PRODUCT_TAGS: &[&str] = &["organic", "eco", "bestseller", "new", "limited", "handmade", "sale"];
const MATERIALS: &[&str] = &["organic", "cotton", "steel", "recycled", "bamboo", "leather"];
const ORDER_STATUS: &[(&str, u64)] =
    &[("placed", 10), ("paid", 15), ("shipped", 20), ("delivered", 50), ("cancelled", 5)];
const COUPONS: &[&str] = &["WELCOME10", "SPRING25", "FREESHIP", "VIP15", "BLACKFRIDAY"];
const REVIEW_TITLES: &[&str] = &[
    "Great value",
    "Très bien ✓",
    "Not as described",
    "Five stars",
    "Works as expected",
    "Says \"perfect\" on the box \\ it isn't",
    "Günstig und gut",
    "完璧です",
    "Meh",
    "Would buy again",
];
const REVIEW_SENTENCES: &[&str] = &[
    "Arrived quickly.",
    "The quality is better than I expected.",
    "Smaller than in the pictures.",
    "My kids love it.",
    "Packaging was damaged but the item was fine.",
    "Returned it after a week.",
    "Exactly what I needed.",
    "Colour is a bit off.",
    "Qualité au rendez-vous, livraison rapide.",
    "Würde ich wieder kaufen.",
];

fn weighted<'a>(rng: &mut Rng, choices: &[(&'a str, u64)]) -> &'a str {
    let total: u64 = choices.iter().map(|(_, w)| w).sum();
    let mut roll = rng.below(total);
    for &(value, weight) in choices {
        if roll < weight {
            return value;
        }
        roll -= weight;
    }
    choices[choices.len() - 1].0
}

/// What every order line needs to know about a product; computed once for the whole catalog.
#[derive(Debug, Clone)]
struct ProductCore {
    name: String,
    category: usize,
    price_cents: u64,
    partition: usize,
}

#[derive(Debug, Clone)]
struct OrderPlan {
    seq: u64,
    ts: u64,
    lines: Range<usize>,
    /// Cents added to the true total: non-zero on about 1% of orders (a data-quality defect).
    defect: i64,
}

#[derive(Debug, Clone)]
struct LinePlan {
    product: usize,
    qty: u64,
    reviews: Range<usize>,
}

#[derive(Debug, Clone)]
struct ReviewPlan {
    product: usize,
    ts: u64,
    id: u64,
}

/// The structural facts of one user's items, drawn from the user's plan stream. Every data-file
/// writer draws them for every user (they are cheap) so that order numbers stay consistent.
#[derive(Debug, Default)]
struct UserPlan {
    orders: Vec<OrderPlan>,
    lines: Vec<LinePlan>,
    reviews: Vec<ReviewPlan>,
}

struct Shop {
    seed: u64,
    users: u64,
    files: usize,
    products: Vec<ProductCore>,
    user_width: usize,
    order_width: usize,
    sku_width: usize,
}

fn digits_of(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// FNV-1a, then a splitmix finish so that `% files` sees well-mixed low bits.
fn partition_hash(key: &str, files: usize) -> usize {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    (mix(h) % files as u64) as usize
}

impl Shop {
    fn new(seed: u64, users: u64, files: usize) -> Result<Self, SampleError> {
        let n_products = catalog_size(users);
        let keys = n_products.saturating_add(users);
        if files as u64 > keys {
            return Err(SampleError::TooManyFiles { files, keys });
        }
        let mut shop = Shop {
            seed,
            users,
            files,
            products: Vec::new(),
            user_width: digits_of(users).max(5),
            order_width: digits_of(users.saturating_mul(6)).max(6),
            sku_width: digits_of(n_products).max(5),
        };
        let products = (0..n_products)
            .map(|p| {
                let mut r = Rng::stream(seed, TAG_PRODUCT_CORE, p);
                let category = r.below(CATEGORIES.len() as u64) as usize;
                let name = format!("{} {}", r.pick(ADJECTIVES), r.pick(NOUNS[category]));
                let mut cents = r.range(199, 19_999);
                match r.below(10) {
                    0 | 1 => cents = (cents / 100).max(2) * 100,
                    2 | 3 => cents = (cents / 10) * 10,
                    _ => {}
                }
                // The first `files` products are pinned one per file, so no file is left empty.
                let partition = if (p as usize) < files {
                    p as usize
                } else {
                    partition_hash(&format!("PRODUCT#{}", shop.sku(p as usize)), files)
                };
                ProductCore { name, category, price_cents: cents, partition }
            })
            .collect();
        shop.products = products;
        Ok(shop)
    }

    fn email(&self, u: u64) -> String {
        format!("user{:0w$}@example.com", u + 1, w = self.user_width)
    }

    fn order_id(&self, seq: u64) -> String {
        format!("ORD-{:0w$}", seq, w = self.order_width)
    }

    fn sku(&self, p: usize) -> String {
        format!("SKU-{:0w$}", p + 1, w = self.sku_width)
    }

    fn user_partition(&self, u: u64, pk: &str) -> usize {
        let pinned = self.products.len() as u64 + u;
        if pinned < self.files as u64 { pinned as usize } else { partition_hash(pk, self.files) }
    }

    fn plan_user(&self, u: u64, next_order: &mut u64, plan: &mut UserPlan) {
        plan.orders.clear();
        plan.lines.clear();
        plan.reviews.clear();
        let mut r = Rng::stream(self.seed, TAG_PLAN, u);
        let n_orders = r.range(1, 6) as usize;
        let mut ts = [0u64; 6];
        for t in ts.iter_mut().take(n_orders) {
            *t = r.range(T_ORDERS_START, T_ORDERS_END - 1);
        }
        let ts = &mut ts[..n_orders];
        ts.sort_unstable();
        for i in 1..ts.len() {
            if ts[i] <= ts[i - 1] {
                ts[i] = ts[i - 1] + 1;
            }
        }
        let n_products = self.products.len() as u64;
        for &order_ts in ts.iter() {
            let seq = *next_order;
            *next_order += 1;
            let first_line = plan.lines.len();
            let n_lines = r.range(1, 4);
            for line_no in 0..n_lines {
                let product = loop {
                    let p = r.below(n_products) as usize;
                    if !plan.lines[first_line..].iter().any(|l| l.product == p) {
                        break p;
                    }
                };
                let qty = match r.below(10) {
                    0..=5 => 1,
                    6 | 7 => 2,
                    8 => 3,
                    _ => r.range(4, 5),
                };
                let n_reviews = match r.below(100) {
                    0..=74 => 0,
                    75..=92 => 1,
                    93..=97 => 2,
                    _ => 3,
                };
                let first_review = plan.reviews.len();
                for k in 0..n_reviews {
                    let mut t = order_ts + (k + 1) * 3600 + r.below(25 * DAY);
                    // (PK, SK) must stay unique: one reviewer, one product, one second.
                    while plan.reviews.iter().any(|rv| rv.product == product && rv.ts == t) {
                        t += 1;
                    }
                    plan.reviews.push(ReviewPlan { product, ts: t, id: seq * 16 + line_no * 4 + k });
                }
                plan.lines.push(LinePlan { product, qty, reviews: first_review..plan.reviews.len() });
            }
            let defect = if r.chance(1) {
                let cents = r.range(1, 9) as i64;
                if r.chance(50) { cents } else { -cents }
            } else {
                0
            };
            plan.orders.push(OrderPlan { seq, ts: order_ts, lines: first_line..plan.lines.len(), defect });
        }
    }

    /// Calls `emit` for every item whose partition is `only` (every item when `None`), in a fixed
    /// order: each user with its orders, order items and reviews, then the catalog.
    fn for_each_item<E>(
        &self,
        only: Option<usize>,
        mut emit: impl FnMut(Kind, &Item) -> Result<(), E>,
    ) -> Result<(), E> {
        let wants = |partition: usize| only.is_none_or(|o| o == partition);
        let mut next_order = 1;
        let mut plan = UserPlan::default();
        let mut pk = String::new();
        for u in 0..self.users {
            self.plan_user(u, &mut next_order, &mut plan);
            let email = self.email(u);
            pk.clear();
            pk.push_str("USER#");
            pk.push_str(&email);
            if wants(self.user_partition(u, &pk)) {
                emit(Kind::User, &self.user_item(u, &email, &pk))?;
                for order in &plan.orders {
                    emit(Kind::Order, &self.order_item(&pk, order, &plan))?;
                }
            }
            for order in &plan.orders {
                let order_id = self.order_id(order.seq);
                let order_pk = format!("ORDER#{order_id}");
                let lines = &plan.lines[order.lines.clone()];
                if wants(partition_hash(&order_pk, self.files)) {
                    for line in lines {
                        emit(Kind::OrderItem, &self.order_line_item(&order_pk, &order_id, line))?;
                    }
                }
                for line in lines {
                    if !wants(self.products[line.product].partition) {
                        continue;
                    }
                    for review in &plan.reviews[line.reviews.clone()] {
                        emit(Kind::Review, &self.review_item(&email, review))?;
                    }
                }
            }
        }
        for (p, core) in self.products.iter().enumerate() {
            if wants(core.partition) {
                emit(Kind::Product, &self.product_item(p))?;
            }
        }
        Ok(())
    }

    fn user_item(&self, u: u64, email: &str, pk: &str) -> Item {
        let mut r = Rng::stream(self.seed, TAG_USER, u);
        let mut it = Item::default();
        let name = format!("{} {}", r.pick(FIRST_NAMES), r.pick(LAST_NAMES));
        let status = match r.below(100) {
            0..=69 => "active",
            70..=89 => "suspended",
            _ => "closed",
        };
        it.put("PK", s(pk))
            .put("SK", s("PROFILE"))
            .put("Type", s("User"))
            .put("email", s(email))
            .put("name", s(name))
            .put("signup_at", n(r.range(T_SIGNUP_START, T_ORDERS_START - 1)))
            .put("status", s(status));
        if status == "active" {
            it.put("StatusIndexPK", s("STATUS#active"));
        }
        if r.chance(70) {
            let k = r.range(1, 3) as usize;
            let tags = r.distinct(USER_TAGS, k);
            it.put("tags", Av::Ss(tags.into_iter().map(String::from).collect()));
        }
        let (city, country, dial) = *r.pick(CITIES);
        let street = format!("{} {}", r.range(1, 250), r.pick(STREETS));
        let zip = r.digits(5);
        it.put(
            "address",
            Av::M(vec![("street", s(street)), ("city", s(city)), ("zip", s(zip)), ("country", s(country))]),
        );
        let avatar_len = r.range(8, 32) as usize;
        it.put("avatar", Av::B(r.bytes(avatar_len)));
        it.put("verified", Av::Bool(r.chance(80)));
        let phone = if r.chance(75) { s(format!("{dial} {} {}", r.digits(3), r.digits(6))) } else { Av::Null };
        it.put("phone", phone);
        it.put("login_count", n(r.below(2000)));
        let points = if r.chance(10) {
            // 25 digits: beyond i64, exercises exact decimals.
            format!("{}{}", r.range(1, 9), r.digits(24))
        } else {
            r.below(100_000).to_string()
        };
        it.put("lifetime_points", Av::N(points));
        it
    }

    fn order_item(&self, user_pk: &str, order: &OrderPlan, plan: &UserPlan) -> Item {
        let mut r = Rng::stream(self.seed, TAG_ORDER, order.seq);
        let order_id = self.order_id(order.seq);
        let lines = &plan.lines[order.lines.clone()];
        let subtotal: u64 = lines.iter().map(|l| l.qty * self.products[l.product].price_cents).sum();
        let total = subtotal.saturating_add_signed(order.defect);
        let gsi = format!("ORDER#{order_id}");
        let status = weighted(&mut r, ORDER_STATUS);
        let (method, cost) = match r.below(10) {
            0..=5 => ("standard", if subtotal >= 5000 { 0 } else { 499 }),
            6..=8 => ("express", 1290),
            _ => ("pickup", 0),
        };
        let (city, country, _) = *r.pick(CITIES);
        let mut it = Item::default();
        it.put("PK", s(user_pk))
            .put("SK", s(format!("ORDER#{}#{order_id}", order.ts)))
            .put("GSI1PK", s(gsi.clone()))
            .put("GSI1SK", s(gsi))
            .put("Type", s("Order"))
            .put("order_id", s(order_id))
            .put("ordered_at", n(order.ts))
            .put("status", s(status))
            .put("currency", s("EUR"))
            .put("total", money(total))
            .put("item_count", n(lines.len()))
            .put(
                "shipping",
                Av::M(vec![
                    ("method", s(method)),
                    ("cost", money(cost)),
                    ("address", Av::M(vec![("city", s(city)), ("country", s(country))])),
                ]),
            );
        if r.chance(20) {
            let k = r.range(1, 2) as usize;
            let codes = r.distinct(COUPONS, k);
            it.put("coupon_codes", Av::Ss(codes.into_iter().map(String::from).collect()));
        }
        let embedded = lines
            .iter()
            .map(|l| {
                Av::M(vec![
                    ("sku", s(self.sku(l.product))),
                    ("qty", n(l.qty)),
                    ("unit_price", money(self.products[l.product].price_cents)),
                ])
            })
            .collect();
        it.put("lines", Av::L(embedded));
        it.put("gift", Av::Bool(r.chance(10)));
        it
    }

    fn order_line_item(&self, order_pk: &str, order_id: &str, line: &LinePlan) -> Item {
        let product = &self.products[line.product];
        let sku = self.sku(line.product);
        let mut it = Item::default();
        it.put("PK", s(order_pk))
            .put("SK", s(format!("ITEM#{sku}")))
            .put("Type", s("OrderItem"))
            .put("order_id", s(order_id))
            .put("sku", s(sku))
            .put("quantity", n(line.qty))
            .put("unit_price", money(product.price_cents))
            .put("product_name", s(product.name.as_str()));
        it
    }

    fn review_item(&self, email: &str, review: &ReviewPlan) -> Item {
        let mut r = Rng::stream(self.seed, TAG_REVIEW, review.id);
        let sku = self.sku(review.product);
        let rating = match r.below(20) {
            0 => 1,
            1 | 2 => 2,
            3..=5 => 3,
            6..=11 => 4,
            _ => 5,
        };
        let title = *r.pick(REVIEW_TITLES);
        let n_sentences = r.range(1, 3) as usize;
        let body = r.distinct(REVIEW_SENTENCES, n_sentences).join(" ");
        let mut it = Item::default();
        it.put("PK", s(format!("PRODUCT#{sku}")))
            .put("SK", s(format!("REVIEW#{}#{email}", review.ts)))
            .put("Type", s("Review"))
            .put("sku", s(sku))
            .put("reviewer_email", s(email))
            .put("rating", n(rating))
            .put("title", s(title))
            .put("body", s(body))
            .put("helpful_votes", n(r.below(50)))
            .put("verified_purchase", Av::Bool(r.chance(90)))
            .put("reviewed_at", n(review.ts));
        it
    }

    fn product_item(&self, p: usize) -> Item {
        let core = &self.products[p];
        let mut r = Rng::stream(self.seed, TAG_PRODUCT, p as u64);
        let sku = self.sku(p);
        let mut it = Item::default();
        it.put("PK", s(format!("PRODUCT#{sku}")))
            .put("SK", s("METADATA"))
            .put("Type", s("Product"))
            .put("sku", s(sku))
            .put("name", s(core.name.as_str()))
            .put("category", s(CATEGORIES[core.category]))
            .put("price", money(core.price_cents))
            .put("stock", n(r.below(500)));
        let mut dim = || Av::N(fixed(r.range(10, 1200), 1));
        let (w, h, d) = (dim(), dim(), dim());
        it.put("dimensions_cm", Av::M(vec![("w", w), ("h", h), ("d", d)]));
        let k = r.range(1, 3) as usize;
        let tags = r.distinct(PRODUCT_TAGS, k);
        it.put("tags", Av::Ss(tags.into_iter().map(String::from).collect()));
        let first_size = match CATEGORIES[core.category] {
            "shoes" => Some(r.range(36, 42)),
            "apparel" if r.chance(50) => Some(r.range(34, 40)),
            _ => None,
        };
        if let Some(first) = first_size {
            let count = r.range(2, 5);
            it.put("sizes", Av::Ns((first..first + count).map(|v| v.to_string()).collect()));
        }
        let thumb_len = r.range(16, 48) as usize;
        it.put("thumbnail", Av::B(r.bytes(thumb_len)));
        let images = (0..r.range(1, 3))
            .map(|i| {
                let len = r.range(12, 40) as usize;
                let mut blob = r.bytes(len);
                blob[0] = i as u8; // keeps the set's members distinct
                blob
            })
            .collect();
        it.put("images", Av::Bs(images));
        let mut attributes = vec![s(*r.pick(MATERIALS))];
        if r.chance(80) {
            attributes.push(n(r.range(1, 10)));
        }
        if r.chance(70) {
            attributes.push(Av::Bool(r.chance(50)));
        }
        if r.chance(15) {
            attributes.push(Av::Null);
        }
        if r.chance(15) {
            attributes.push(Av::M(vec![("origin", s(r.pick(CITIES).1))]));
        }
        it.put("attributes", Av::L(attributes));
        it.put("weight_kg", Av::N(fixed(r.range(50, 25_000), 3)));
        it
    }
}

// ---------------------------------------------------------------------------------------------
// Export files
// ---------------------------------------------------------------------------------------------

/// The 20-byte gzip of nothing that AWS writes for an empty partition: header with mtime 0,
/// XFL 0, OS 255, one empty final fixed-Huffman block, CRC-32 0, size 0.
const EMPTY_GZIP: [u8; 20] = [
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00,
];

const BUCKET: &str = "etl-sample-exports";
const REGION: &str = "eu-west-1";
const ACCOUNT: &str = "111122223333";
const TABLE: &str = "shop";

/// Names and times of the export, all drawn from the seed.
struct ExportNames {
    id: String,
    start_ms: u64,
    end_ms: u64,
    table_id: String,
    file_names: Vec<String>,
    empty_slot: usize,
}

impl ExportNames {
    fn new(seed: u64, files: usize) -> Self {
        let mut r = Rng::stream(seed, TAG_EXPORT, 0);
        let start_ms = T_EXPORT * 1000 + r.below(DAY * 1000);
        let end_ms = start_ms + r.range(5 * 60_000, 15 * 60_000);
        let id = format!("{start_ms:014}-{:08x}", r.below(1 << 32));
        let u = [r.next_u64(), r.next_u64()];
        let table_id = format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            u[0] >> 32,
            (u[0] >> 16) & 0xffff,
            u[0] & 0x0fff,
            0x8000 | ((u[1] >> 48) & 0x3fff),
            u[1] & 0xffff_ffff_ffff,
        );
        const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
        let mut file_names: Vec<String> = Vec::with_capacity(files + 1);
        while file_names.len() < files + 1 {
            let name: String = (0..26).map(|_| char::from(ALPHABET[r.below(32) as usize])).collect();
            if !file_names.contains(&name) {
                file_names.push(name);
            }
        }
        let empty_slot = r.below(files as u64 + 1) as usize;
        ExportNames { id, start_ms, end_ms, table_id, file_names, empty_slot }
    }

    fn summary(&self, items: u64, raw_bytes: u64) -> ManifestSummary {
        let table_arn = format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}");
        ManifestSummary {
            version: "2020-06-30",
            export_arn: format!("{table_arn}/export/{}", self.id),
            start_time: iso_millis(self.start_ms),
            end_time: iso_millis(self.end_ms),
            table_arn,
            table_id: self.table_id.clone(),
            export_time: iso_millis(self.start_ms),
            s3_bucket: BUCKET,
            s3_prefix: None,
            s3_sse_algorithm: "AES256",
            s3_sse_kms_key_id: None,
            manifest_files_s3_key: format!("AWSDynamoDB/{}/manifest-files.json", self.id),
            billed_size_bytes: raw_bytes,
            item_count: items,
            output_format: "DYNAMODB_JSON",
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestSummary {
    version: &'static str,
    export_arn: String,
    start_time: String,
    end_time: String,
    table_arn: String,
    table_id: String,
    export_time: String,
    s3_bucket: &'static str,
    s3_prefix: Option<&'static str>,
    s3_sse_algorithm: &'static str,
    s3_sse_kms_key_id: Option<&'static str>,
    manifest_files_s3_key: String,
    billed_size_bytes: u64,
    item_count: u64,
    output_format: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestFileLine {
    item_count: u64,
    md5_checksum: String,
    etag: String,
    data_file_s3_key: String,
}

/// `2026-01-14T10:18:50.622Z` from epoch milliseconds (proleptic Gregorian, UTC).
fn iso_millis(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / DAY, secs % DAY);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), SampleError> {
    fs::write(path, bytes).map_err(|source| SampleError::Write { path: path.to_owned(), source })
}

#[derive(Debug, Clone)]
struct FileStats {
    counts: [u64; KINDS],
    raw_bytes: u64,
    compressed_bytes: u64,
    md5: [u8; 16],
}

impl FileStats {
    fn items(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Passes bytes through to `inner` while hashing and counting them.
struct Md5Writer<W> {
    inner: W,
    md5: Md5,
    len: u64,
}

impl<W: Write> Write for Md5Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.md5.update(&buf[..written]);
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes partition `i` to `paths[i]` for every `i`, one thread per file and at most
/// `available_parallelism` at a time.
fn write_partitions(shop: &Shop, paths: &[PathBuf]) -> Result<Vec<FileStats>, SampleError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(paths.len());
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<Vec<(usize, FileStats)>, SampleError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= paths.len() || failed.load(Ordering::Relaxed) {
                            return Ok(done);
                        }
                        match write_partition(shop, i, &paths[i]) {
                            Ok(stats) => done.push((i, stats)),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    let mut stats: Vec<Option<FileStats>> = vec![None; paths.len()];
    for result in results {
        for (i, s) in result? {
            stats[i] = Some(s);
        }
    }
    // Every index was claimed by exactly one worker, and no worker failed.
    Ok(stats.into_iter().flatten().collect())
}

fn write_partition(shop: &Shop, partition: usize, path: &Path) -> Result<FileStats, SampleError> {
    const CHUNK: usize = 1 << 20;
    let io_err = |source| SampleError::Write { path: path.to_owned(), source };
    let file = File::create(path).map_err(io_err)?;
    let hashing = Md5Writer { inner: BufWriter::with_capacity(CHUNK, file), md5: Md5::new(), len: 0 };
    let mut gz = GzBuilder::new().write(hashing, Compression::default());
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + 64 * 1024);
    let mut counts = [0u64; KINDS];
    let mut raw_bytes = 0u64;
    shop.for_each_item(Some(partition), |kind, item| {
        serde_json::to_writer(&mut buf, &ExportLine(item))
            .map_err(|source| SampleError::Encode { path: path.to_owned(), source })?;
        buf.push(b'\n');
        counts[kind as usize] += 1;
        if buf.len() >= CHUNK {
            raw_bytes += buf.len() as u64;
            gz.write_all(&buf).map_err(io_err)?;
            buf.clear();
        }
        Ok(())
    })?;
    raw_bytes += buf.len() as u64;
    gz.write_all(&buf).map_err(io_err)?;
    let hashing = gz.finish().map_err(io_err)?;
    let Md5Writer { inner, md5, len } = hashing;
    inner.into_inner().map_err(|e| io_err(e.into_error()))?.sync_all().map_err(io_err)?;
    Ok(FileStats { counts, raw_bytes, compressed_bytes: len, md5: md5.finalize().into() })
}

/// Writes every item as the AWS CLI v1 prints a merged `scan`: indent 4, non-ASCII kept raw.
fn write_scan_json(shop: &Shop, path: &Path) -> Result<(), SampleError> {
    let io_err = |source| SampleError::Write { path: path.to_owned(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|source| SampleError::CreateDir { path: parent.to_owned(), source })?;
    }
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_err)?);
    out.write_all(b"{\n    \"Items\": [").map_err(io_err)?;
    let mut count = 0u64;
    let mut pretty = Vec::new();
    shop.for_each_item(None, |_, item| {
        pretty.clear();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut pretty, formatter);
        item.serialize(&mut ser).map_err(|source| SampleError::Encode { path: path.to_owned(), source })?;
        out.write_all(if count == 0 { b"\n" } else { b",\n" }).map_err(io_err)?;
        // Each item sits two levels deep; JSON strings never hold a raw newline, so indenting
        // after every newline is safe.
        for (i, line) in pretty.split(|&b| b == b'\n').enumerate() {
            if i > 0 {
                out.write_all(b"\n").map_err(io_err)?;
            }
            out.write_all(b"        ").map_err(io_err)?;
            out.write_all(line).map_err(io_err)?;
        }
        count += 1;
        Ok(())
    })?;
    let tail = format!(
        "\n    ],\n    \"Count\": {count},\n    \"ScannedCount\": {count},\n    \"ConsumedCapacity\": null\n}}\n"
    );
    out.write_all(tail.as_bytes()).map_err(io_err)?;
    out.into_inner().map_err(|e| io_err(e.into_error()))?.sync_all().map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read};

    use flate2::read::MultiGzDecoder;
    use serde_json::Value;

    fn options(out: &Path, users: u64, files: usize, scan: bool) -> SampleOptions {
        SampleOptions { out: out.to_owned(), users, files, seed: 42, scan_json: scan.then(|| out.join("scan.json")) }
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
        let int_ok =
            !int.is_empty() && int.bytes().all(|b| b.is_ascii_digit()) && (int == "0" || !int.starts_with('0'));
        let frac_ok = frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) && !f.ends_with('0'));
        int_ok && frac_ok && v != "-0"
    }

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
            "N" => assert!(is_canonical_number(v.as_str().unwrap()), "{at}: {v}"),
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
    fn gzip_of_nothing_matches_aws_and_decodes_empty() {
        assert_eq!(STANDARD.encode(Md5::digest(EMPTY_GZIP)), "FjvgqIxwymKf1RbbqtrZag==");
        let mut out = Vec::new();
        MultiGzDecoder::new(&EMPTY_GZIP[..]).read_to_end(&mut out).unwrap();
        assert!(out.is_empty());
        // flate2 happens to write the same bytes today; the constant keeps that true tomorrow.
        let flate2_empty = GzBuilder::new().write(Vec::new(), Compression::default()).finish().unwrap();
        assert_eq!(flate2_empty, EMPTY_GZIP);
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
                .map(|l| {
                    l["M"]["qty"]["N"].as_str().unwrap().parse::<i64>().unwrap() * cents(&l["M"]["unit_price"]["N"])
                })
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
        assert!(users.iter().any(|u| u["phone"].get("NULL").is_some()));
        assert!(items.iter().any(|it| it["title"]["S"] == "Très bien ✓"));
        // `expected_items` is a fair estimate.
        let expected = expected_items(400) as f64;
        let ratio = summary.items as f64 / expected;
        assert!((0.9..1.1).contains(&ratio), "{} vs {expected}", summary.items);
    }

    #[test]
    fn numbers_and_times_are_canonical() {
        assert_eq!(fixed(1999, 2), "19.99");
        assert_eq!(fixed(2000, 2), "20");
        assert_eq!(fixed(2050, 2), "20.5");
        assert_eq!(fixed(5, 2), "0.05");
        assert_eq!(fixed(0, 2), "0");
        assert_eq!(fixed(7, 3), "0.007");
        assert_eq!(fixed(1250, 3), "1.25");
        assert_eq!(iso_millis(1_768_385_930_622), "2026-01-14T10:18:50.622Z");
        assert_eq!(iso_millis(T_EXPORT * 1000), "2026-06-01T00:00:00.000Z");
        assert_eq!(iso_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn users_for_items_inverts_the_scale() {
        assert_eq!(users_for_items(0), 1);
        assert_eq!(users_for_items(1), 1);
        let u = users_for_items(2_000_000);
        assert!(expected_items(u) >= 2_000_000 && expected_items(u - 1) < 2_000_000);
        assert!((120_000..123_000).contains(&u), "{u}");
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
}
