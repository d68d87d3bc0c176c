//! Command-line arguments resolved into typed settings, once, by pure functions: every field of
//! the arguments is destructured (a new flag cannot be forgotten), nothing is read from or
//! written to the file system, and every error names the flag.

use std::sync::Arc;

use super::UnwindArgs;
use crate::mapping::Mapping;
use crate::pipeline::UnwindSettings;
use crate::pipeline::shard::{ShardPhase, ShardRun};
use crate::schema::diff::OnDrift;
use crate::sink::{Format, RowGroups};
use crate::source::live::ScanSettings;
use crate::store::{Location, LocationError, Target};

/// Arguments that do not make valid settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("{0}")]
    Location(#[from] LocationError),
    #[error("`--type-attribute {given}` differs from the mapping's `type_attribute = \"{mapping}\"`")]
    TypeAttributeConflict { given: String, mapping: String },
    #[error("`--max-rcu-per-second {0}` must be a positive number")]
    BadRcu(f64),
    #[error("`--deletion-vectors` is a property of Delta tables, and this run writes Parquet")]
    DeletionVectorsWithoutDelta,
    #[error("`--in-place` is for Parquet outputs, and this run writes Delta tables")]
    InPlaceWithDelta,
}

impl SettingsError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            SettingsError::Location(e) => e.hint(),
            SettingsError::TypeAttributeConflict { .. } => {
                Some("drop `--type-attribute`, or change `[settings] type_attribute` in the mapping")
            }
            SettingsError::BadRcu(_) => None,
            SettingsError::DeletionVectorsWithoutDelta => Some("add `--format delta`, or drop `--deletion-vectors`"),
            SettingsError::InPlaceWithDelta => {
                Some("an apply onto a Delta output is made in place without it (the full export is not read again)")
            }
        }
    }
}

/// `etl unwind`'s settings. `mapping` is the already-loaded `--mapping` (files are read at the
/// edge), `cpus` the default thread count.
pub fn unwind(args: UnwindArgs, mapping: Option<Mapping>, cpus: usize) -> Result<UnwindSettings, SettingsError> {
    let UnwindArgs {
        sources,
        out,
        type_attribute,
        mapping: _mapping_paths,
        threads,
        strict,
        allow_mismatch,
        max_rejects,
        overwrite,
        max_line_bytes,
        row_group_rows,
        target_file_bytes,
        segments,
        consistent_read,
        max_rcu_per_second,
        allow_gap,
        on_drift,
        format,
        deletion_vectors,
        in_place,
        shard,
        phase,
        aws,
    } = args;
    let sources = sources.iter().map(|s| Location::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let target = Target::parse(&out)?;
    if let Some(r) = max_rcu_per_second
        && !(r.is_finite() && r > 0.0)
    {
        return Err(SettingsError::BadRcu(r));
    }
    let type_attribute = match (&mapping, type_attribute) {
        (Some(m), Some(t)) if t != m.type_attribute => {
            return Err(SettingsError::TypeAttributeConflict { given: t, mapping: m.type_attribute.clone() });
        }
        (Some(m), _) => m.type_attribute.clone(),
        (None, Some(t)) => t,
        (None, None) => "Type".to_owned(),
    };
    let mut s = UnwindSettings::new(sources, target);
    s.type_attribute = type_attribute;
    s.threads = threads.map_or(cpus.max(1), usize::from);
    s.strict = strict;
    s.allow_mismatch = allow_mismatch;
    s.max_rejects = max_rejects;
    s.overwrite = overwrite;
    s.max_line_bytes = max_line_bytes.max(1);
    s.row_groups = RowGroups { rows: row_group_rows.max(1), bytes: s.row_groups.bytes };
    s.target_file_bytes = target_file_bytes.max(1);
    s.aws = aws.options();
    s.mapping = mapping.map(Arc::new);
    s.scan = ScanSettings { segments, consistent_read, max_rcu_per_second };
    s.allow_gap = allow_gap;
    s.on_drift = match on_drift {
        super::OnDriftArg::Allow => OnDrift::Allow,
        super::OnDriftArg::Fail => OnDrift::Fail,
    };
    s.format = match format {
        super::FormatArg::Parquet => Format::Parquet,
        super::FormatArg::Delta => Format::Delta,
    };
    if deletion_vectors && s.format != Format::Delta {
        return Err(SettingsError::DeletionVectorsWithoutDelta);
    }
    s.deletion_vectors = deletion_vectors;
    if in_place && s.format != Format::Parquet {
        return Err(SettingsError::InPlaceWithDelta);
    }
    s.in_place = in_place;
    s.shard = shard.map(|shard| ShardRun {
        shard,
        phase: match phase {
            super::PhaseArg::Infer => ShardPhase::Infer,
            super::PhaseArg::Write => ShardPhase::Write,
        },
    });
    Ok(s)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn args(line: &[&str]) -> UnwindArgs {
        let mut argv = vec!["etl", "unwind"];
        argv.extend_from_slice(line);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Unwind(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_and_locations() {
        let s = unwind(args(&["export/", "s3://b/x", "-", "dynamodb://T", "--out", "out"]), None, 8).unwrap();
        assert_eq!(s.sources.len(), 4);
        assert!(matches!(s.sources[1], Location::Object(_)));
        assert_eq!(s.sources[2], Location::Stdin);
        assert_eq!(s.target, Target::Path("out".into()));
        assert_eq!((s.threads, s.type_attribute.as_str(), s.strict), (8, "Type", false));
        assert_eq!(s.on_drift, OnDrift::Allow);
        assert_eq!(unwind(args(&["e", "--out", "o", "--on-drift", "fail"]), None, 8).unwrap().on_drift, OnDrift::Fail);
        assert_eq!(s.format, Format::Parquet);
        assert_eq!(unwind(args(&["e", "--out", "o", "--format", "delta"]), None, 8).unwrap().format, Format::Delta);
        let dv = unwind(args(&["e", "--out", "o", "--format", "delta", "--deletion-vectors"]), None, 8).unwrap();
        assert!(dv.deletion_vectors);
        assert!(!unwind(args(&["e", "--out", "o", "--format", "delta"]), None, 8).unwrap().deletion_vectors);
        assert_eq!(
            unwind(args(&["e", "--out", "o", "--deletion-vectors"]), None, 8).unwrap_err(),
            SettingsError::DeletionVectorsWithoutDelta
        );
        assert!(unwind(args(&["e", "--out", "o", "--in-place"]), None, 8).unwrap().in_place);
        assert_eq!(
            unwind(args(&["e", "--out", "o", "--format", "delta", "--in-place"]), None, 8).unwrap_err(),
            SettingsError::InPlaceWithDelta
        );
        let s = unwind(args(&["e", "--out", "s3://lake/shop", "--threads", "3", "--strict"]), None, 8).unwrap();
        assert!(matches!(s.target, Target::Object(_)));
        assert_eq!((s.threads, s.strict), (3, true));
        assert_eq!(s.shard, None);
        let s = unwind(args(&["e", "--out", "o", "--shard", "2/4", "--phase", "infer"]), None, 1).unwrap();
        let shard = crate::source::shard::Shard { index: 2, count: 4 };
        assert_eq!(s.shard, Some(ShardRun { shard, phase: ShardPhase::Infer }));
        let s = unwind(args(&["e", "--out", "o", "--shard", "2/4"]), None, 1).unwrap();
        assert_eq!(s.shard, Some(ShardRun { shard, phase: ShardPhase::Write }));
    }

    #[test]
    fn refusals_name_the_flag() {
        assert!(matches!(unwind(args(&["e", "--out", "-"]), None, 1), Err(SettingsError::Location(_))));
        assert!(matches!(unwind(args(&["gs://x", "--out", "o"]), None, 1), Err(SettingsError::Location(_))));
        assert_eq!(
            unwind(args(&["e", "--out", "o", "--max-rcu-per-second=-1"]), None, 1).unwrap_err(),
            SettingsError::BadRcu(-1.0)
        );
        let m = crate::mapping::parse_str(
            std::path::Path::new("m.toml"),
            "[settings]\ntype_attribute = \"_et\"\n[entity.U]\ntable = \"u\"\n",
        )
        .unwrap();
        let e = unwind(args(&["e", "--out", "o", "--type-attribute", "Type"]), Some(m.clone()), 1).unwrap_err();
        assert!(matches!(e, SettingsError::TypeAttributeConflict { .. }));
        assert_eq!(unwind(args(&["e", "--out", "o"]), Some(m), 1).unwrap().type_attribute, "_et");
    }
}
