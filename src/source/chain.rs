//! Chains of exports: one full export of a table and the incremental exports that follow it,
//! put in the order they are applied and checked before any data is read.
//!
//! A chain is valid when every export is of one table (same `tableArn`), exactly one is a full
//! export, and the incremental windows, ordered by `exportFromTime` (then `exportToTime`), cover
//! time without a hole from the full export's `exportTime` on: the first window starts at or
//! before it, and each next one starts at or before the latest end so far. A gap loses changes
//! and is refused unless allowed, and then reported. An overlap (a window starting before the
//! full export was taken, or before an earlier window ended) is applied but reported
//! ([`Overlap`]): it is not harmless, because each export holds every key's net change over its
//! own window, so an item written inside the overlap and deleted later in the later window is
//! held by the earlier export (or the full export) and compacted away by the later one, and the
//! chain keeps an item the table no longer has. This module reads manifests' times only; it
//! knows nothing of items or keys.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ExportInfo, Plan};

/// The order in which a plan's exports are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// Index into [`Plan::exports`] of the full export.
    pub full: usize,
    /// Indexes into [`Plan::exports`] of the incremental exports, in application order.
    pub incrementals: Vec<usize>,
    /// Gaps between windows, allowed by `--allow-gap`.
    pub gaps: Vec<Gap>,
    /// Windows starting before the time already covered, reported as warnings.
    pub overlaps: Vec<Overlap>,
}

/// Time covered twice: a window starting before the full export was taken or before an earlier
/// window ended. An item written inside it and deleted later in the later window is kept by the
/// chain (the earlier export holds the write; the later one compacts write and delete away).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overlap {
    /// The export that covers time up to `ends` (the full export, or an incremental one).
    pub earlier: String,
    pub ends: String,
    /// The incremental export whose window starts at `starts`, before `ends`.
    pub later: String,
    pub starts: String,
    pub seconds: f64,
}

impl Overlap {
    /// The warning a run reports for it.
    pub fn warning(&self) -> String {
        format!(
            "overlapping windows: `{}` starts at {}, {:.3} s before the end of what `{}` covers ({}); an item written inside the overlap and deleted later in `{}`'s window is held by `{}` and compacted away by `{}`, so the chain keeps an item the table no longer has; contiguous windows (`etl export start --incremental --since OUT`) have no such case",
            self.later, self.starts, self.seconds, self.earlier, self.ends, self.later, self.earlier, self.later
        )
    }
}

/// Time no export of the chain covers: changes made then are missing from the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gap {
    /// The export that covers time up to `ends` (the full export, or an incremental one).
    pub after: String,
    pub ends: String,
    /// The incremental export whose window starts at `starts`.
    pub before: String,
    pub starts: String,
    pub seconds: f64,
}

/// Why the exports named cannot be applied as one chain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChainError {
    #[error("incremental exports {exports} have no full export to apply them to")]
    NoFullExport { exports: String },
    #[error("{count} full exports ({list}) were named with incremental exports; a chain has one")]
    SeveralFullExports { count: usize, list: String },
    #[error(
        "`{path}` is not an export; incremental exports are applied to a full export only, not mixed with other inputs"
    )]
    NotAnExport { path: String },
    #[error("export `{export}` is of table `{table}`, but full export `{full}` is of table `{expected}`")]
    OtherTable { export: String, table: String, full: String, expected: String },
    #[error("export `{export}` has no valid `{field}` (`{value}`)")]
    BadTime { export: String, field: &'static str, value: String },
    #[error(
        "gap in the chain: `{}` covers up to {}, but the next export `{}` starts at {} ({:.3} s later); changes made in between would be missing", .0.after, .0.ends, .0.before, .0.starts, .0.seconds
    )]
    Gap(Gap),
    #[error(
        "incremental export `{export}` ends at {to}, not after full export `{full}` was taken ({export_time}); applying it would undo newer changes"
    )]
    EndsBeforeFull { export: String, to: String, full: String, export_time: String },
}

impl ChainError {
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ChainError::NoFullExport { .. } => {
                "name the table's full export too (`etl unwind FULL INC1 INC2 …`), or the folder holding all of them".into()
            }
            ChainError::SeveralFullExports { .. } => {
                "name one full export and the incremental exports taken after it".into()
            }
            ChainError::NotAnExport { .. } => "unwind the other inputs in a run of their own".into(),
            ChainError::OtherTable { .. } => "a chain holds exports of one table; unwind each table's exports in a run of its own".into(),
            ChainError::BadTime { .. } => "this is not a manifest AWS writes; copy the export again".into(),
            ChainError::Gap(_) => "export the missing window (`etl export start --incremental`), or pass `--allow-gap` to apply the chain anyway (the gap is recorded in `_etl/run.json`)".into(),
            ChainError::EndsBeforeFull { .. } => "leave out incremental exports older than the full export".into(),
        })
    }

    /// A gap is the data breaking the continuity policy (exit 1); the others are wrong inputs.
    pub fn is_policy(&self) -> bool {
        matches!(self, ChainError::Gap(_))
    }
}

/// The export's id: the last segment of its ARN, else of its folder.
pub fn export_id(e: &ExportInfo) -> String {
    let from = e.export_arn.as_deref().unwrap_or(&e.export_dir);
    from.trim_end_matches('/').rsplit(['/', '\\']).next().unwrap_or(from).to_owned()
}

/// Whether `a` and `b` are the same export: the same id and the same summary manifest (its MD5).
pub fn same_export(a: &ExportInfo, b: &ExportInfo) -> bool {
    a.summary_md5 == b.summary_md5 && export_id(a) == export_id(b)
}

fn time(e: &ExportInfo, field: &'static str, value: Option<&str>) -> Result<DateTime<Utc>, ChainError> {
    let bad = || ChainError::BadTime {
        export: export_id(e),
        field,
        value: value.unwrap_or("absent").chars().take(64).collect(),
    };
    let v = value.ok_or_else(bad)?;
    DateTime::parse_from_rfc3339(v).map(|t| t.with_timezone(&Utc)).map_err(|_| bad())
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_microseconds().map_or(f64::INFINITY, |us| us as f64 / 1e6)
}

/// The chain a plan's exports form: `None` when it has no incremental export (an ordinary run).
/// With `allow_gap`, gaps are returned in [`Chain::gaps`] instead of refused.
pub fn order(plan: &Plan, allow_gap: bool) -> Result<Option<Chain>, ChainError> {
    let incremental: Vec<usize> = (0..plan.exports.len()).filter(|&i| plan.exports[i].window.is_some()).collect();
    if incremental.is_empty() {
        return Ok(None);
    }
    let full: Vec<usize> = (0..plan.exports.len()).filter(|&i| plan.exports[i].window.is_none()).collect();
    let list =
        |ix: &[usize]| ix.iter().map(|&i| format!("`{}`", export_id(&plan.exports[i]))).collect::<Vec<_>>().join(", ");
    let full = match full.as_slice() {
        [] => return Err(ChainError::NoFullExport { exports: list(&incremental) }),
        [one] => *one,
        many => return Err(ChainError::SeveralFullExports { count: many.len(), list: list(many) }),
    };
    // Every file of the plan belongs to one of its exports.
    let mut owned = vec![false; plan.files.len()];
    for e in &plan.exports {
        for i in e.files.clone() {
            if let Some(o) = owned.get_mut(i) {
                *o = true;
            }
        }
    }
    if let Some(i) = owned.iter().position(|o| !o) {
        return Err(ChainError::NotAnExport { path: plan.files[i].display.clone() });
    }
    let f = &plan.exports[full];
    for &i in &incremental {
        let e = &plan.exports[i];
        if let (Some(t), Some(expected)) = (&e.table_arn, &f.table_arn)
            && t != expected
        {
            return Err(ChainError::OtherTable {
                export: export_id(e),
                table: t.clone(),
                full: export_id(f),
                expected: expected.clone(),
            });
        }
    }
    let export_time = time(f, "exportTime", f.export_time.as_deref())?;
    let mut windows = Vec::with_capacity(incremental.len());
    for &i in &incremental {
        let e = &plan.exports[i];
        let w = e.window.as_ref().map(|w| (w.from_time.as_str(), w.to_time.as_str()));
        let from = time(e, "exportFromTime", w.map(|w| w.0))?;
        let to = time(e, "exportToTime", w.map(|w| w.1))?;
        if to <= from {
            return Err(ChainError::BadTime {
                export: export_id(e),
                field: "exportToTime",
                value: w.map(|w| w.1.to_owned()).unwrap_or_default(),
            });
        }
        windows.push((from, to, i));
    }
    windows.sort_by_key(|&(from, to, i)| (from, to, export_id(&plan.exports[i])));
    let mut gaps = Vec::new();
    let mut overlaps = Vec::new();
    let mut covered = (export_time, export_id(f), f.export_time.clone().unwrap_or_default());
    for &(from, to, i) in &windows {
        let e = &plan.exports[i];
        let w = e.window.as_ref();
        if to <= export_time {
            return Err(ChainError::EndsBeforeFull {
                export: export_id(e),
                to: w.map(|w| w.to_time.clone()).unwrap_or_default(),
                full: export_id(f),
                export_time: f.export_time.clone().unwrap_or_default(),
            });
        }
        if from > covered.0 {
            let gap = Gap {
                after: covered.1.clone(),
                ends: covered.2.clone(),
                before: export_id(e),
                starts: w.map(|w| w.from_time.clone()).unwrap_or_default(),
                seconds: seconds(covered.0, from),
            };
            if !allow_gap {
                return Err(ChainError::Gap(gap));
            }
            gaps.push(gap);
        } else if from < covered.0 {
            overlaps.push(Overlap {
                earlier: covered.1.clone(),
                ends: covered.2.clone(),
                later: export_id(e),
                starts: w.map(|w| w.from_time.clone()).unwrap_or_default(),
                seconds: seconds(from, covered.0),
            });
        }
        if to > covered.0 {
            covered = (to, export_id(e), w.map(|w| w.to_time.clone()).unwrap_or_default());
        }
    }
    Ok(Some(Chain { full, incrementals: windows.into_iter().map(|(_, _, i)| i).collect(), gaps, overlaps }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::manifest::{SideFileCheck, Window};

    fn export(id: &str, table: &str, time: Option<&str>, window: Option<(&str, &str)>, files: usize) -> ExportInfo {
        ExportInfo {
            export_dir: format!("root/AWSDynamoDB/{id}"),
            export_arn: Some(format!("arn:aws:dynamodb:eu-north-1:1:table/{table}/export/{id}")),
            export_time: time.map(str::to_owned),
            output_format: "DYNAMODB_JSON".into(),
            summary_item_count: 0,
            manifest_files_item_count: 0,
            data_files: 0,
            summary_checksum: SideFileCheck::Absent,
            files_checksum: SideFileCheck::Absent,
            window: window.map(|(f, t)| Window {
                from_time: f.into(),
                to_time: t.into(),
                output_view: Some("NEW_AND_OLD_IMAGES".into()),
            }),
            table_arn: Some(format!("arn:aws:dynamodb:eu-north-1:1:table/{table}")),
            summary_md5: String::new(),
            files: files..files,
        }
    }

    fn plan(exports: Vec<ExportInfo>) -> Plan {
        Plan { files: Vec::new(), exports }
    }

    const T0: &str = "2026-01-14T10:18:50.622Z";

    #[test]
    fn orders_by_window_and_checks_continuity() {
        let p = plan(vec![
            export("inc2", "t", None, Some(("2026-01-14T10:35:00.000Z", "2026-01-14T10:50:00.000Z")), 0),
            export("full", "t", Some(T0), None, 0),
            export("inc1", "t", None, Some(("2026-01-14T10:15:00.000Z", "2026-01-14T10:35:00.000Z")), 0),
        ]);
        let c = order(&p, false).unwrap().unwrap();
        assert_eq!((c.full, c.incrementals.clone(), c.gaps.len()), (1, vec![2, 0], 0));
        // Window `inc1` starts 230.622 s before the full export was taken; `inc2` where `inc1` ends.
        assert_eq!(c.overlaps.len(), 1, "{:?}", c.overlaps);
        let o = &c.overlaps[0];
        assert_eq!((o.earlier.as_str(), o.later.as_str()), ("full", "inc1"));
        assert!((o.seconds - 230.622).abs() < 1e-9, "{}", o.seconds);
        let w = o.warning();
        assert!(w.contains("`inc1` starts at 2026-01-14T10:15:00.000Z") && w.contains(T0), "{w}");
        assert_eq!(order(&plan(vec![export("full", "t", Some(T0), None, 0)]), false).unwrap(), None);
    }

    #[test]
    fn the_real_fixture_gap_is_refused_or_reported() {
        let p = plan(vec![
            export("full", "t", Some(T0), None, 0),
            export("inc1", "t", None, Some(("2026-01-14T10:20:00.000Z", "2026-01-14T10:35:00.000Z")), 0),
            export("inc2", "t", None, Some(("2026-01-14T10:35:00.000Z", "2026-01-14T10:50:00.000Z")), 0),
        ]);
        let Err(ChainError::Gap(g)) = order(&p, false) else { panic!("no gap") };
        assert_eq!((g.after.as_str(), g.before.as_str()), ("full", "inc1"));
        assert!((g.seconds - 69.378).abs() < 1e-9, "{}", g.seconds);
        let e = ChainError::Gap(g.clone());
        assert!(e.is_policy() && e.hint().unwrap().contains("--allow-gap"));
        assert!(e.to_string().contains(T0) && e.to_string().contains("2026-01-14T10:20:00.000Z"), "{e}");
        let c = order(&p, true).unwrap().unwrap();
        assert_eq!(c.gaps, vec![g]);
        // A hole between two windows too; an overlap is not one.
        let p = plan(vec![
            export("full", "t", Some(T0), None, 0),
            export("a", "t", None, Some(("2026-01-14T10:00:00Z", "2026-01-14T11:00:00Z")), 0),
            export("b", "t", None, Some(("2026-01-14T10:30:00Z", "2026-01-14T12:00:00Z")), 0),
            export("c", "t", None, Some(("2026-01-14T12:00:01Z", "2026-01-14T13:00:00Z")), 0),
        ]);
        let Err(ChainError::Gap(g)) = order(&p, false) else { panic!("no gap") };
        assert_eq!((g.after.as_str(), g.before.as_str(), g.seconds), ("b", "c", 1.0));
        // Allowed, the chain reports the gap and both overlaps: `a` with the full export (it
        // starts before `exportTime`), `b` with `a` (30 minutes).
        let c = order(&p, true).unwrap().unwrap();
        let got: Vec<(&str, &str, f64)> =
            c.overlaps.iter().map(|o| (o.earlier.as_str(), o.later.as_str(), o.seconds)).collect();
        assert_eq!(got, vec![("full", "a", 1130.622), ("a", "b", 1800.0)]);
    }

    #[test]
    fn refusals() {
        let inc =
            |id: &str, table: &str| export(id, table, None, Some(("2026-01-14T10:00:00Z", "2026-01-14T11:00:00Z")), 0);
        let full = || export("full", "t", Some(T0), None, 0);
        assert!(matches!(order(&plan(vec![inc("a", "t")]), false), Err(ChainError::NoFullExport { .. })));
        assert!(matches!(
            order(&plan(vec![full(), full(), inc("a", "t")]), false),
            Err(ChainError::SeveralFullExports { count: 2, .. })
        ));
        let e = order(&plan(vec![full(), inc("a", "other")]), false).unwrap_err();
        assert!(matches!(e, ChainError::OtherTable { .. }) && !e.is_policy(), "{e}");
        let old = export("old", "t", None, Some(("2026-01-14T09:00:00Z", "2026-01-14T10:00:00Z")), 0);
        assert!(matches!(order(&plan(vec![full(), old]), false), Err(ChainError::EndsBeforeFull { .. })));
        let bad = export("bad", "t", None, Some(("yesterday", "2026-01-14T10:00:00Z")), 0);
        assert!(matches!(order(&plan(vec![full(), bad]), false), Err(ChainError::BadTime { .. })));
        // A data file that no export lists.
        let mut p = plan(vec![full(), inc("a", "t")]);
        p.files.push(crate::source::DataFile {
            input: crate::source::Input::Stdin,
            display: "<stdin>".into(),
            gzip: false,
            layout: crate::source::Layout::ScanOutput,
            size: 0,
            expected: None,
        });
        assert!(matches!(order(&p, false), Err(ChainError::NotAnExport { .. })));
    }
}
