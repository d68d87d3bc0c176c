//! The entity model of the `shop` table: users, orders, order items, products and reviews, their
//! counts for a scale, their keys, the data file (partition) each item lands in, and every
//! attribute, each drawn from its entity's own random stream. Writes nothing: the writers call
//! [`Shop::for_each_item`].

use std::ops::Range;

use super::SampleError;
use super::item::{Av, Item, fixed, money, n, s};
use super::rng::{Rng, TAG_ORDER, TAG_PLAN, TAG_PRODUCT, TAG_PRODUCT_CORE, TAG_REVIEW, TAG_USER, mix};
use super::words::*;

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
pub(super) fn expected_items(users: u64) -> u64 {
    let per_user_milli = 16_225u128;
    let items = u128::from(users) * per_user_milli / 1000 + u128::from(catalog_size(users));
    u64::try_from(items).unwrap_or(u64::MAX)
}

fn catalog_size(users: u64) -> u64 {
    (users / 4).max(20)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    User = 0,
    Order = 1,
    OrderItem = 2,
    Product = 3,
    Review = 4,
}

pub(super) const KINDS: usize = 5;

impl Kind {
    pub(super) const ALL: [Kind; KINDS] = [Kind::User, Kind::Order, Kind::OrderItem, Kind::Product, Kind::Review];

    pub(super) fn name(self) -> &'static str {
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
pub(super) const T_EXPORT: u64 = 1_780_272_000; // 2026-06-01T00:00:00Z
pub(super) const DAY: u64 = 86_400;

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
    /// The product the plan stream drew; [`Shop::orderable`] makes it `product`.
    drawn: usize,
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

pub(super) struct Shop {
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
    pub(super) fn new(seed: u64, users: u64, files: usize) -> Result<Self, SampleError> {
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

    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    /// Non-empty data files (partitions).
    pub(super) fn files(&self) -> usize {
        self.files
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

    /// The catalog's last product is never ordered (so "products never ordered" has an answer).
    /// A draw of it, or of a product an earlier line took that way, becomes the next product not
    /// on the order, found without drawing again: every random stream, and so every count, stays
    /// what it was before this rule.
    fn orderable(&self, drawn: usize, on_order: &[LinePlan]) -> usize {
        let len = self.products.len();
        let never = len - 1;
        let free = |p: usize| p != never && on_order.iter().all(|l| l.product != p);
        if free(drawn) {
            return drawn;
        }
        // An order has at most 3 lines and the catalog at least 20 products: one is free.
        (1..len).map(|i| (drawn + i) % len).find(|&p| free(p)).unwrap_or(0)
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
                let drawn = loop {
                    let p = r.below(n_products) as usize;
                    if !plan.lines[first_line..].iter().any(|l| l.drawn == p) {
                        break p;
                    }
                };
                let product = self.orderable(drawn, &plan.lines[first_line..]);
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
                plan.lines.push(LinePlan { drawn, product, qty, reviews: first_review..plan.reviews.len() });
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
    pub(super) fn for_each_item<E>(
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
        // Store credit in euros; negative (owed) for about a third of users.
        let credit = r.range(0, 15_000) as i64 - 5_000;
        let sign = if credit < 0 { "-" } else { "" };
        it.put("credit_balance", Av::N(format!("{sign}{}", fixed(credit.unsigned_abs(), 2))));
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
        // Written with trailing zeros, as some writers do (`0.190`): etl keeps the value, 0.19.
        it.put("tax_rate", Av::N((*r.pick(TAX_RATES)).to_owned()));
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
        // Millimetres, written in centimetres.
        let mut dim = || r.range(10, 1200);
        let (w, h, d) = (dim(), dim(), dim());
        let cm = |mm: u64| Av::N(fixed(mm, 1));
        it.put("dimensions_cm", Av::M(vec![("w", cm(w)), ("h", cm(h)), ("d", cm(d))]));
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
        // Cubic metres in exponent form (`123456000E-9`), as some writers spell numbers.
        it.put("volume_m3", Av::N(format!("{}E-9", w * h * d)));
        it
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_for_items_inverts_the_scale() {
        assert_eq!(users_for_items(0), 1);
        assert_eq!(users_for_items(1), 1);
        let u = users_for_items(2_000_000);
        assert!(expected_items(u) >= 2_000_000 && expected_items(u - 1) < 2_000_000);
        assert!((120_000..123_000).contains(&u), "{u}");
    }
}
