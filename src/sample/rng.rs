//! The sample's random numbers: splitmix64 streams, one per entity, keyed by the seed, a tag
//! for the entity kind and the entity's number, so any item can be drawn without drawing the
//! others first. Owns nothing else; never shared with the pipeline (the sample is an oracle).

/// splitmix64: tiny, fast, and good enough for fake data.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// An independent stream for entity `id` of kind `tag`; `mix` is a bijection, so distinct
    /// `(tag, id)` pairs (ids below 2^56) start from distinct states.
    pub(super) fn stream(seed: u64, tag: u64, id: u64) -> Self {
        Rng(mix(seed ^ mix((tag << 56) ^ id)))
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift.
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub(super) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    /// `k` distinct elements of `xs` (k <= xs.len()), in random order.
    pub(super) fn distinct<T: Copy>(&mut self, xs: &[T], k: usize) -> Vec<T> {
        let mut idx: Vec<usize> = (0..xs.len()).collect();
        for i in 0..k {
            let j = i + self.below((xs.len() - i) as u64) as usize;
            idx.swap(i, j);
        }
        idx[..k].iter().map(|&i| xs[i]).collect()
    }

    pub(super) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    pub(super) fn digits(&mut self, n: usize) -> String {
        (0..n).map(|_| char::from(b'0' + self.below(10) as u8)).collect()
    }
}

pub(super) const TAG_PLAN: u64 = 1;
pub(super) const TAG_USER: u64 = 2;
pub(super) const TAG_ORDER: u64 = 3;
pub(super) const TAG_PRODUCT_CORE: u64 = 4;
pub(super) const TAG_PRODUCT: u64 = 5;
pub(super) const TAG_REVIEW: u64 = 6;
pub(super) const TAG_EXPORT: u64 = 7;
pub(super) const TAG_WINDOW: u64 = 8;
pub(super) const TAG_CHANGE: u64 = 9;
pub(super) const TAG_INCREMENTAL_EXPORT: u64 = 10;
pub(super) const TAG_FINAL_EXPORT: u64 = 11;
