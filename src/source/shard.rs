//! Shards: a deterministic subset of a [`Plan`]'s data files, for runs split over a job array
//! (`etl unwind … --shard I/N`).
//!
//! Shard `I` of `N` is a contiguous run of the plan's files, cut so that each shard holds about
//! `1/N` of the compressed bytes. Contiguous, so that the shards' rows laid end to end in shard
//! order are the rows of one run in the same order (file order, then line order). The cut
//! depends only on the plan (file order and sizes), so every machine computes the same subset.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::Plan;

/// At most this many shards.
pub const MAX_SHARDS: u32 = 100_000;

/// Shard `index` of `count` (0-based, as `AWS_BATCH_JOB_ARRAY_INDEX` and `JOB_COMPLETION_INDEX`
/// are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// A `--shard` value that is not `I/N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardParseError {
    #[error("`--shard {given}` is not `I/N` (for example `0/4`)")]
    Syntax { given: String },
    #[error("`--shard {given}`: the shard index must be below the shard count (indexes start at 0)")]
    IndexTooLarge { given: String },
    #[error("`--shard {given}`: the shard count must be between 1 and {MAX_SHARDS}")]
    BadCount { given: String },
}

impl ShardParseError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ShardParseError::IndexTooLarge { .. } => {
                Some("job arrays count from 0: `--shard $AWS_BATCH_JOB_ARRAY_INDEX/N` runs shards 0 to N-1")
            }
            _ => None,
        }
    }
}

impl FromStr for Shard {
    type Err = ShardParseError;

    fn from_str(s: &str) -> Result<Shard, ShardParseError> {
        let syntax = || ShardParseError::Syntax { given: s.to_owned() };
        let (i, n) = s.split_once('/').ok_or_else(syntax)?;
        let digits = |t: &str| !t.is_empty() && t.len() <= 9 && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(i.trim()) || !digits(n.trim()) {
            return Err(syntax());
        }
        let (index, count): (u32, u32) =
            (i.trim().parse().map_err(|_| syntax())?, n.trim().parse().map_err(|_| syntax())?);
        if count == 0 || count > MAX_SHARDS {
            return Err(ShardParseError::BadCount { given: s.to_owned() });
        }
        if index >= count {
            return Err(ShardParseError::IndexTooLarge { given: s.to_owned() });
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The plan files this shard reads.
    pub fn files(&self, plan: &Plan) -> Range<usize> {
        let sizes: Vec<u64> = plan.files.iter().map(|f| f.size).collect();
        let cuts = cuts(&sizes, self.count);
        cuts[self.index as usize]..cuts[self.index as usize + 1]
    }
}

/// `n + 1` cut points over files of `sizes`: shard `k` is `cuts[k]..cuts[k + 1]`. Cut `k` is the
/// file boundary whose byte offset is nearest to `k/n` of the total (the earlier one on a tie),
/// never before the previous cut. With fewer files than shards, some shards are empty.
pub fn cuts(sizes: &[u64], n: u32) -> Vec<usize> {
    let n = u128::from(n.max(1));
    let total: u128 = sizes.iter().map(|&s| u128::from(s)).sum();
    // prefix[i] = bytes before file i.
    let mut prefix = Vec::with_capacity(sizes.len() + 1);
    let mut acc = 0u128;
    prefix.push(0u128);
    for &s in sizes {
        acc += u128::from(s);
        prefix.push(acc);
    }
    let mut out = Vec::with_capacity(n as usize + 1);
    out.push(0usize);
    let mut at = 0usize;
    for k in 1..n {
        // Compare offsets scaled by n, so that no division rounds.
        let goal = total * k;
        // An empty file ends where it starts: the cut passes over it rather than stop on the tie
        // (an empty first file once held every cut at 0, the whole export in the last shard).
        while at < sizes.len()
            && (prefix[at + 1] == prefix[at] || (prefix[at + 1] * n).abs_diff(goal) < (prefix[at] * n).abs_diff(goal))
        {
            at += 1;
        }
        out.push(at);
    }
    out.push(sizes.len());
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_i_of_n() {
        assert_eq!("0/4".parse::<Shard>(), Ok(Shard { index: 0, count: 4 }));
        assert_eq!("3/4".parse::<Shard>().unwrap().to_string(), "3/4");
        assert!(matches!("4/4".parse::<Shard>(), Err(ShardParseError::IndexTooLarge { .. })));
        assert!(matches!("0/0".parse::<Shard>(), Err(ShardParseError::BadCount { .. })));
        for bad in ["", "1", "a/2", "1/", "/2", "-1/2", "1/2/3", "+1/2"] {
            assert!(matches!(bad.parse::<Shard>(), Err(ShardParseError::Syntax { .. })), "{bad}");
        }
    }

    #[test]
    fn cuts_balance_bytes() {
        assert_eq!(cuts(&[10, 10, 10, 10], 2), vec![0, 2, 4]);
        assert_eq!(cuts(&[10, 10, 10, 10], 4), vec![0, 1, 2, 3, 4]);
        assert_eq!(cuts(&[30, 10, 10, 10], 2), vec![0, 1, 4]);
        // More shards than files: the extra shards are empty.
        assert_eq!(cuts(&[5, 5], 4), vec![0, 0, 1, 1, 2]);
        assert_eq!(cuts(&[], 3), vec![0, 0, 0, 0]);
        assert_eq!(cuts(&[1, 2, 3], 1), vec![0, 3]);
        // A cut passes over empty files (AWS writes some), so they never stop it. An empty
        // first file used to hold every cut at 0: the whole export in the last shard
        // (`shards_partition_the_files` found it in CI).
        assert_eq!(cuts(&[0, 10, 10], 2), vec![0, 2, 3]);
        assert_eq!(cuts(&[10, 0, 10], 2), vec![0, 2, 3]);
        assert_eq!(
            cuts(&[0, 284_260, 69_112, 250_682], 17),
            vec![0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4]
        );
    }

    proptest! {
        /// Every file is in exactly one shard, in order, and no shard holds more than its share
        /// plus one file's bytes.
        #[test]
        fn shards_partition_the_files(sizes in prop::collection::vec(0u64..1_000_000, 0..60), n in 1u32..20) {
            let c = cuts(&sizes, n);
            prop_assert_eq!(c.len(), n as usize + 1);
            prop_assert_eq!(c[0], 0);
            prop_assert_eq!(*c.last().unwrap(), sizes.len());
            prop_assert!(c.windows(2).all(|w| w[0] <= w[1]));
            let total: u64 = sizes.iter().sum();
            let largest = sizes.iter().copied().max().unwrap_or(0);
            for w in c.windows(2) {
                let bytes: u64 = sizes[w[0]..w[1]].iter().sum();
                prop_assert!(bytes <= total / u64::from(n) + 2 * largest + 1, "{bytes} of {total} in {n} shards");
            }
        }
    }
}
