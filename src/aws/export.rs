//! DynamoDB Export to S3: start a full or incremental export, describe, wait for and list
//! exports, and say where an export's `manifest-summary.json` is; the next incremental window
//! after the last one an output holds ([`next_window`]).
//!
//! Owns the facts of the export API (statuses, failure codes, `ExportManifest`) and the quirks
//! of the local stand-in, moto 5.2.5: an `ExportArn` that embeds the whole table ARN, no
//! `ExportManifest`, times or `ClientToken` in descriptions, `DYNAMO_JSON` as the format name,
//! and HTTP 500 when `S3Prefix` is missing; it accepts `INCREMENTAL_EXPORT` but ignores
//! `IncrementalExportSpecification` and writes a full dump. It never reads the exported data.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::primitives::{DateTime, DateTimeFormat};
use aws_sdk_dynamodb::types::{
    ExportDescription, ExportSummary, ExportType, ExportViewType, IncrementalExportSpecification,
};
use chrono::{DateTime as Utc3339, SecondsFormat, Utc};
use futures::StreamExt as _;

use super::dynamodb::{Call, DynamoError, map_sdk_error, region_of};

/// The data format of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportFormat {
    #[default]
    DynamodbJson,
    Ion,
}

impl ExportFormat {
    fn sdk(self) -> aws_sdk_dynamodb::types::ExportFormat {
        match self {
            ExportFormat::DynamodbJson => aws_sdk_dynamodb::types::ExportFormat::DynamodbJson,
            ExportFormat::Ion => aws_sdk_dynamodb::types::ExportFormat::Ion,
        }
    }
}

/// The `ExportViewType` of an incremental export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExportView {
    #[default]
    NewAndOldImages,
    NewImage,
}

impl ExportView {
    fn sdk(self) -> ExportViewType {
        match self {
            ExportView::NewAndOldImages => ExportViewType::NewAndOldImages,
            ExportView::NewImage => ExportViewType::NewImage,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ExportView::NewAndOldImages => "NEW_AND_OLD_IMAGES",
            ExportView::NewImage => "NEW_IMAGE",
        }
    }
}

/// An incremental export's window, `from` inclusive, `to` exclusive, and its view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncrementalWindow {
    pub from: Utc3339<Utc>,
    pub to: Utc3339<Utc>,
    pub view: ExportView,
}

/// The shortest window DynamoDB exports.
pub const MIN_WINDOW_SECONDS: i64 = 15 * 60;
/// The longest window DynamoDB exports.
pub const MAX_WINDOW_SECONDS: i64 = 24 * 3600;

/// Why no incremental export can start yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the output holds the table up to {last}, {} ago; DynamoDB exports windows of at least 15 minutes, so the next one can start at {ready}", minutes(.elapsed_seconds)
)]
pub struct TooSoon {
    pub last: String,
    pub ready: String,
    pub elapsed_seconds: i64,
}

fn minutes(seconds: &i64) -> String {
    if *seconds < 0 { "in the future".to_owned() } else { format!("{}m{:02}s", seconds / 60, seconds % 60) }
}

/// `2026-01-14T10:35:00.000Z`, as export manifests write times.
pub fn iso(t: &Utc3339<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The window after `last_to` (the end of what an output holds) at `now`, whole seconds: from
/// `last_to` to `now`, clamped to 24 hours (the rest is for the next run). Less than 15 minutes
/// after `last_to` is [`TooSoon`]: a shorter window is refused by DynamoDB, and a window that
/// starts earlier would only export changes the output already holds.
pub fn next_window(last_to: Utc3339<Utc>, now: Utc3339<Utc>, view: ExportView) -> Result<IncrementalWindow, TooSoon> {
    let now = Utc3339::<Utc>::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    let elapsed = (now - last_to).num_seconds();
    if elapsed < MIN_WINDOW_SECONDS {
        return Err(TooSoon {
            last: iso(&last_to),
            ready: iso(&(last_to + chrono::Duration::seconds(MIN_WINDOW_SECONDS))),
            elapsed_seconds: elapsed,
        });
    }
    let to = now.min(last_to + chrono::Duration::seconds(MAX_WINDOW_SECONDS));
    Ok(IncrementalWindow { from: last_to, to, view })
}

/// An export to start: a full export, or with `incremental` the changes of a window.
#[derive(Debug, Clone, Default)]
pub struct StartExport {
    pub table: String,
    pub bucket: String,
    /// Key prefix in the bucket; `None` exports to the bucket's root as AWS allows (moto
    /// answers HTTP 500 without one).
    pub prefix: Option<String>,
    pub format: ExportFormat,
    /// Account ID owning the bucket, for a bucket in another account.
    pub bucket_owner: Option<String>,
    /// Idempotency token: the same token (within 8 hours, with the same parameters) returns
    /// the export it started instead of starting another. `None` makes a fresh one, so every
    /// call starts a new export; the SDK reuses it across its own retries.
    pub client_token: Option<String>,
    /// An incremental export of this window instead of a full export.
    pub incremental: Option<IncrementalWindow>,
}

/// What DynamoDB says about one export. Times are RFC 3339.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExportInfo {
    pub arn: String,
    /// `IN_PROGRESS`, `COMPLETED` or `FAILED`.
    pub status: String,
    pub table_arn: Option<String>,
    pub bucket: Option<String>,
    pub prefix: Option<String>,
    /// S3 key of the export's `manifest-summary.json` (absent until it completes, and always
    /// absent with moto).
    pub manifest: Option<String>,
    pub item_count: Option<i64>,
    pub billed_size_bytes: Option<i64>,
    /// `(FailureCode, FailureMessage)` of a failed export.
    pub failure: Option<(String, String)>,
    pub format: Option<String>,
    pub export_type: Option<String>,
    pub start_time: Option<String>,
    pub end_time: Option<String>,
    pub export_time: Option<String>,
}

/// One export of a table, as `etl export list` shows it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExportSummaryInfo {
    pub arn: String,
    pub status: String,
    /// `FULL_EXPORT` or `INCREMENTAL_EXPORT`; AWS omits it for exports started without one.
    pub export_type: Option<String>,
    /// From `DescribeExport`; `None` when the service does not say (moto) or describing failed.
    pub start_time: Option<String>,
    pub end_time: Option<String>,
    /// `s3://` location of the manifest summary, for completed exports whose description names
    /// it (never the prefix fallback of [`manifest_url`]).
    pub manifest_url: Option<String>,
}

pub const STATUS_COMPLETED: &str = "COMPLETED";
pub const STATUS_FAILED: &str = "FAILED";
pub const STATUS_IN_PROGRESS: &str = "IN_PROGRESS";

/// Exports described at once by [`list_exports`].
const DESCRIBE_CONCURRENCY: usize = 8;
/// Consecutive failed polls [`wait_export`] tolerates when the error may pass.
const MAX_POLL_FAILURES: u32 = 5;

fn rfc3339(t: Option<&DateTime>) -> Option<String> {
    t.and_then(|t| t.fmt(DateTimeFormat::DateTime).ok())
}

impl From<&ExportDescription> for ExportInfo {
    fn from(d: &ExportDescription) -> Self {
        let failure = match (d.failure_code(), d.failure_message()) {
            (None, None) => None,
            (code, message) => Some((code.unwrap_or("Unknown").to_owned(), message.unwrap_or("no message").to_owned())),
        };
        ExportInfo {
            arn: d.export_arn().unwrap_or_default().to_owned(),
            status: d.export_status().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            table_arn: d.table_arn().map(str::to_owned),
            bucket: d.s3_bucket().map(str::to_owned),
            prefix: d.s3_prefix().map(str::to_owned),
            manifest: d.export_manifest().map(str::to_owned),
            item_count: d.item_count(),
            billed_size_bytes: d.billed_size_bytes(),
            failure,
            format: d.export_format().map(|f| f.as_str().to_owned()),
            export_type: d.export_type().map(|t| t.as_str().to_owned()),
            start_time: rfc3339(d.start_time()),
            end_time: rfc3339(d.end_time()),
            export_time: rfc3339(d.export_time()),
        }
    }
}

impl From<&ExportSummary> for ExportSummaryInfo {
    fn from(s: &ExportSummary) -> Self {
        ExportSummaryInfo {
            arn: s.export_arn().unwrap_or_default().to_owned(),
            status: s.export_status().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            export_type: s.export_type().map(|t| t.as_str().to_owned()),
            ..Default::default()
        }
    }
}

impl ExportInfo {
    pub fn is_completed(&self) -> bool {
        self.status == STATUS_COMPLETED
    }

    pub fn is_failed(&self) -> bool {
        self.status == STATUS_FAILED
    }

    /// The error for a `FAILED` export.
    fn failure_error(&self) -> DynamoError {
        let (code, message) = self.failure.clone().unwrap_or_else(|| ("Unknown".into(), "no failure message".into()));
        DynamoError::ExportFailed { arn: self.arn.clone(), code, message }
    }
}

/// Where the export's `manifest-summary.json` is: `s3://bucket/<ExportManifest>`.
///
/// When the service gives no `ExportManifest` (moto never does; AWS always does once an export
/// has completed), the best that can be said is the export's prefix, `s3://bucket/<prefix>/`,
/// under which the export wrote `AWSDynamoDB/<id>/`; callers should say so. `None` without a
/// bucket.
pub fn manifest_url(info: &ExportInfo) -> Option<String> {
    let bucket = info.bucket.as_deref().filter(|b| !b.is_empty())?;
    if let Some(key) = info.manifest.as_deref().filter(|k| !k.is_empty()) {
        return Some(format!("s3://{bucket}/{}", key.trim_start_matches('/')));
    }
    match info.prefix.as_deref().map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()) {
        Some(prefix) => Some(format!("s3://{bucket}/{prefix}/")),
        None => Some(format!("s3://{bucket}/")),
    }
}

/// Whether [`manifest_url`] names the manifest itself rather than the fallback prefix.
pub fn manifest_is_exact(info: &ExportInfo) -> bool {
    info.manifest.as_deref().is_some_and(|k| !k.is_empty())
}

/// The table's ARN, from `DescribeTable`.
pub async fn table_arn(client: &Client, table: &str) -> Result<String, DynamoError> {
    let region = region_of(client)?;
    let call = Call { operation: "DescribeTable", table: Some(table), export_arn: None, region: &region };
    let out = client.describe_table().table_name(table).send().await.map_err(|e| map_sdk_error(e, call))?;
    out.table().and_then(|t| t.table_arn()).map(str::to_owned).ok_or_else(|| DynamoError::Unexpected {
        operation: "DescribeTable",
        detail: "no `TableArn` in the answer".into(),
    })
}

/// Starts an export of `req.table` (point-in-time recovery must be enabled): looks up the
/// table's ARN, then calls `ExportTableToPointInTime` with `FULL_EXPORT`, or `INCREMENTAL_EXPORT`
/// and the window, and a client token.
pub async fn start_export(client: &Client, req: &StartExport) -> Result<ExportInfo, DynamoError> {
    let span =
        tracing::info_span!("start_export", table = %req.table, bucket = %req.bucket, arn = tracing::field::Empty);
    let region = region_of(client)?;
    let arn = table_arn(client, &req.table).await?;
    let token = req.client_token.clone().unwrap_or_else(new_client_token);
    let call =
        Call { operation: "ExportTableToPointInTime", table: Some(&req.table), export_arn: None, region: &region };
    // No prefix means the bucket's root, as on AWS; moto 5.2.5 answers that with HTTP 500 (a
    // KeyError on `S3Prefix`), which the error's hint mentions.
    let out = client
        .export_table_to_point_in_time()
        .table_arn(arn)
        .s3_bucket(&req.bucket)
        .set_s3_prefix(req.prefix.clone().filter(|p| !p.is_empty()))
        .set_s3_bucket_owner(req.bucket_owner.clone())
        .export_format(req.format.sdk())
        .export_type(if req.incremental.is_some() { ExportType::IncrementalExport } else { ExportType::FullExport })
        .set_incremental_export_specification(req.incremental.map(|w| {
            IncrementalExportSpecification::builder()
                .export_from_time(DateTime::from_millis(w.from.timestamp_millis()))
                .export_to_time(DateTime::from_millis(w.to.timestamp_millis()))
                .export_view_type(w.view.sdk())
                .build()
        }))
        .client_token(token)
        .send()
        .await
        .map_err(|e| map_sdk_error(e, call))?;
    let info = out.export_description().map(ExportInfo::from).ok_or_else(|| DynamoError::Unexpected {
        operation: "ExportTableToPointInTime",
        detail: "no `ExportDescription` in the answer".into(),
    })?;
    if info.arn.is_empty() {
        return Err(DynamoError::Unexpected {
            operation: "ExportTableToPointInTime",
            detail: "no `ExportArn` in the answer".into(),
        });
    }
    span.record("arn", info.arn.as_str());
    span.in_scope(|| tracing::info!(status = %info.status, "export started"));
    Ok(info)
}

/// A client token unique to this call: time, process and a per-process random key.
fn new_client_token() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut parts = [0u64; 2];
    for (i, part) in parts.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_usize(i);
        *part = h.finish();
    }
    format!("etl-{:016x}{:016x}", parts[0], parts[1])
}

/// `DescribeExport`.
pub async fn describe_export(client: &Client, arn: &str) -> Result<ExportInfo, DynamoError> {
    let region = region_of(client)?;
    let call = Call { operation: "DescribeExport", table: None, export_arn: Some(arn), region: &region };
    let out = client.describe_export().export_arn(arn).send().await.map_err(|e| map_sdk_error(e, call))?;
    out.export_description().map(ExportInfo::from).ok_or_else(|| DynamoError::Unexpected {
        operation: "DescribeExport",
        detail: "no `ExportDescription` in the answer".into(),
    })
}

/// Polls `DescribeExport` every `poll` until the export is `COMPLETED` (returned) or `FAILED`
/// ([`DynamoError::ExportFailed`] with the service's `FailureCode` and `FailureMessage`).
/// `on_poll` sees every description. Up to five consecutive polls may fail with throttling,
/// timeouts, connection or 5xx errors (after the SDK's own retries) before the error is
/// returned; there is no overall time limit.
pub async fn wait_export(
    client: &Client,
    arn: &str,
    poll: Duration,
    mut on_poll: impl FnMut(&ExportInfo),
) -> Result<ExportInfo, DynamoError> {
    let span = tracing::info_span!("wait_export", arn);
    let started = Instant::now();
    let mut failures = 0u32;
    loop {
        match describe_export(client, arn).await {
            Ok(info) => {
                failures = 0;
                on_poll(&info);
                if info.is_completed() {
                    span.in_scope(|| tracing::info!(seconds = started.elapsed().as_secs(), "export completed"));
                    return Ok(info);
                }
                if info.is_failed() {
                    return Err(info.failure_error());
                }
            }
            Err(e) if is_passing(&e) && failures + 1 < MAX_POLL_FAILURES => {
                failures += 1;
                span.in_scope(|| tracing::warn!(error = %e, failures, "polling the export failed; trying again"));
            }
            Err(e) => return Err(e),
        }
        tokio::time::sleep(poll).await;
    }
}

/// Errors worth another poll.
fn is_passing(e: &DynamoError) -> bool {
    matches!(
        e,
        DynamoError::Throttled { .. }
            | DynamoError::Timeout { .. }
            | DynamoError::Unexpected { .. }
            | DynamoError::Service { status: 500.., .. }
    )
}

/// The table's exports in the service's order, following `NextToken`, each described (eight at
/// a time) for its times and manifest; a failed description leaves those fields empty.
pub async fn list_exports(client: &Client, table: &str) -> Result<Vec<ExportSummaryInfo>, DynamoError> {
    let region = region_of(client)?;
    let arn = table_arn(client, table).await?;
    let call = Call { operation: "ListExports", table: Some(table), export_arn: None, region: &region };
    let mut summaries = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let out = client
            .list_exports()
            .table_arn(&arn)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| map_sdk_error(e, call))?;
        summaries.extend(out.export_summaries().iter().map(ExportSummaryInfo::from));
        match out.next_token() {
            Some(t) if !t.is_empty() => next = Some(t.to_owned()),
            _ => break,
        }
    }
    let described: Vec<(usize, Option<ExportInfo>)> = futures::stream::iter(summaries.iter().enumerate())
        .map(|(i, s)| async move { (i, describe_export(client, &s.arn).await.ok()) })
        .buffer_unordered(DESCRIBE_CONCURRENCY)
        .collect()
        .await;
    for (i, info) in described {
        if let (Some(info), Some(summary)) = (info, summaries.get_mut(i)) {
            summary.start_time = info.start_time.clone();
            summary.end_time = info.end_time.clone();
            // Only a real `ExportManifest`: a listing should not pass off the prefix as one.
            if info.is_completed() && manifest_is_exact(&info) {
                summary.manifest_url = manifest_url(&info);
            }
            if summary.export_type.is_none() {
                summary.export_type = info.export_type.clone();
            }
        }
    }
    Ok(summaries)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::ExportStatus;

    use super::*;

    fn info(bucket: Option<&str>, prefix: Option<&str>, manifest: Option<&str>) -> ExportInfo {
        ExportInfo {
            arn: "arn:aws:dynamodb:eu-west-1:123456789012:table/T/export/01700000000000-abcd1234".into(),
            status: STATUS_COMPLETED.into(),
            bucket: bucket.map(str::to_owned),
            prefix: prefix.map(str::to_owned),
            manifest: manifest.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn manifest_locations() {
        let key = "exports/AWSDynamoDB/01700000000000-abcd1234/manifest-summary.json";
        let i = info(Some("B"), Some("exports"), Some(key));
        assert_eq!(
            manifest_url(&i).as_deref(),
            Some("s3://B/exports/AWSDynamoDB/01700000000000-abcd1234/manifest-summary.json")
        );
        assert!(manifest_is_exact(&i));
        // No prefix: the key starts at the bucket's root.
        let i = info(Some("B"), None, Some("AWSDynamoDB/01/manifest-summary.json"));
        assert_eq!(manifest_url(&i).as_deref(), Some("s3://B/AWSDynamoDB/01/manifest-summary.json"));
        // moto: no `ExportManifest`, so the prefix.
        for (prefix, want) in
            [(Some("pre"), "s3://B/pre/"), (Some("/pre/x/"), "s3://B/pre/x/"), (Some(""), "s3://B/"), (None, "s3://B/")]
        {
            let i = info(Some("B"), prefix, None);
            assert_eq!(manifest_url(&i).as_deref(), Some(want), "{prefix:?}");
            assert!(!manifest_is_exact(&i));
        }
        assert_eq!(manifest_url(&info(Some("B"), Some("p"), Some(""))).as_deref(), Some("s3://B/p/"));
        assert_eq!(manifest_url(&info(None, Some("p"), Some(key))), None);
        assert_eq!(manifest_url(&info(Some(""), Some("p"), Some(key))), None);
    }

    #[test]
    fn descriptions_become_infos() {
        let d = ExportDescription::builder()
            .export_arn("arn:e")
            .export_status(ExportStatus::Failed)
            .table_arn("arn:t")
            .s3_bucket("B")
            .s3_prefix("p")
            .failure_code("S3NoSuchBucket")
            .failure_message("The specified bucket does not exist")
            .export_format(aws_sdk_dynamodb::types::ExportFormat::from("DYNAMO_JSON"))
            .start_time(DateTime::from_secs(1_790_000_000))
            .item_count(3)
            .build();
        let i = ExportInfo::from(&d);
        assert_eq!(i.arn, "arn:e");
        assert_eq!(i.status, "FAILED");
        assert!(i.is_failed() && !i.is_completed());
        assert_eq!(i.format.as_deref(), Some("DYNAMO_JSON"), "moto's spelling is kept");
        assert_eq!(i.start_time.as_deref(), Some("2026-09-21T14:13:20Z"));
        assert_eq!(i.end_time, None);
        assert_eq!(i.manifest, None);
        assert_eq!(i.item_count, Some(3));
        assert_eq!(i.failure, Some(("S3NoSuchBucket".into(), "The specified bucket does not exist".into())));
        let e = i.failure_error();
        assert!(e.is_export_failure());
        assert_eq!(e.to_string(), "export `arn:e` failed (S3NoSuchBucket): The specified bucket does not exist");
        assert_eq!(e.hint().as_deref(), Some("create the bucket or check `--bucket`"));

        let done = ExportDescription::builder()
            .export_arn("arn:e")
            .export_status(ExportStatus::Completed)
            .export_manifest("p/AWSDynamoDB/01/manifest-summary.json")
            .build();
        let i = ExportInfo::from(&done);
        assert_eq!(i.failure, None);
        assert!(i.is_completed());
        let failed_without_reason = ExportInfo { status: STATUS_FAILED.into(), ..i };
        assert!(failed_without_reason.failure_error().to_string().contains("Unknown"));

        let s = ExportSummary::builder()
            .export_arn("arn:s")
            .export_status(ExportStatus::InProgress)
            .export_type(ExportType::FullExport)
            .build();
        let s = ExportSummaryInfo::from(&s);
        assert_eq!((s.arn.as_str(), s.status.as_str()), ("arn:s", STATUS_IN_PROGRESS));
        assert_eq!(s.export_type.as_deref(), Some("FULL_EXPORT"));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["status"], "IN_PROGRESS");
        assert_eq!(json["start_time"], serde_json::Value::Null);
    }

    #[test]
    fn the_next_window_starts_where_the_last_ended_and_lasts_15_minutes_to_a_day() {
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let last = t("2026-01-14T10:35:00Z");
        let w = next_window(last, t("2026-01-14T11:00:30.750Z"), ExportView::NewImage).unwrap();
        assert_eq!((iso(&w.from), iso(&w.to)), ("2026-01-14T10:35:00.000Z".into(), "2026-01-14T11:00:30.000Z".into()));
        assert_eq!(w.view, ExportView::NewImage);
        // Exactly 15 minutes is enough; a second less is too soon, and says when to come back.
        assert!(next_window(last, t("2026-01-14T10:50:00Z"), ExportView::NewImage).is_ok());
        let e = next_window(last, t("2026-01-14T10:49:59Z"), ExportView::NewImage).unwrap_err();
        assert_eq!(e.ready, "2026-01-14T10:50:00.000Z");
        assert_eq!(e.elapsed_seconds, 899);
        assert!(e.to_string().contains("14m59s ago"), "{e}");
        assert!(
            next_window(last, t("2026-01-14T10:00:00Z"), ExportView::NewImage)
                .unwrap_err()
                .to_string()
                .contains("in the future")
        );
        // More than a day: clamped to a day.
        let w = next_window(last, t("2026-01-16T00:00:00Z"), ExportView::NewAndOldImages).unwrap();
        assert_eq!(iso(&w.to), "2026-01-15T10:35:00.000Z");
    }

    #[test]
    fn client_tokens_are_fresh() {
        let a = new_client_token();
        let b = new_client_token();
        assert_ne!(a, b);
        assert!(a.starts_with("etl-") && a.len() == 36, "{a}");
        assert!(!a.contains('$'));
    }

    #[test]
    fn passing_errors() {
        assert!(is_passing(&DynamoError::Timeout { operation: "DescribeExport", detail: "t".into() }));
        assert!(is_passing(&DynamoError::Service {
            operation: "DescribeExport",
            status: 503,
            code: "x".into(),
            message: "m".into()
        }));
        assert!(!is_passing(&DynamoError::ExportNotFound { arn: "a".into() }));
        assert!(!is_passing(&DynamoError::InvalidCredentials { code: "c".into(), message: "m".into() }));
    }
}

/// Against moto: `scripts/test` starts the server and makes the bucket (`ETL_MOTO_ENDPOINT`,
/// `ETL_MOTO_BUCKET`). Skips without the variables, fails without them when `ETL_REQUIRE_MOTO=1`.
#[cfg(test)]
mod moto_tests {
    use aws_sdk_dynamodb::types::PointInTimeRecoverySpecification;

    use super::*;
    use crate::aws::dynamodb::moto_tests::{create_table, moto_client, moto_required, unique};

    async fn enable_pitr(client: &Client, table: &str) {
        let spec = PointInTimeRecoverySpecification::builder().point_in_time_recovery_enabled(true).build().unwrap();
        client
            .update_continuous_backups()
            .table_name(table)
            .point_in_time_recovery_specification(spec)
            .send()
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moto_exports() {
        let (Some((client, _)), Ok(bucket)) = (moto_client().await, std::env::var("ETL_MOTO_BUCKET")) else {
            assert!(!moto_required(), "ETL_REQUIRE_MOTO=1 but ETL_MOTO_BUCKET is not set");
            eprintln!("ETL_MOTO_ENDPOINT or ETL_MOTO_BUCKET is not set; skipping");
            return;
        };
        let table = unique("export");
        let items = create_table(&client, &table, 5).await;

        // PITR off.
        let req = StartExport {
            table: table.clone(),
            bucket: bucket.clone(),
            prefix: Some("etl-test".into()),
            ..Default::default()
        };
        let e = start_export(&client, &req).await.unwrap_err();
        assert!(matches!(e, DynamoError::PitrDisabled { .. }), "{e}");
        eprintln!("error: {e}\nhint: {}", e.hint().unwrap_or_default());

        enable_pitr(&client, &table).await;
        let started = start_export(&client, &req).await.unwrap();
        eprintln!("started: {started:?}");
        assert!(!started.arn.is_empty());
        let mut polls = 0;
        let done = wait_export(&client, &started.arn, Duration::from_millis(200), |_| polls += 1).await.unwrap();
        eprintln!("done after {polls} polls: {done:?}");
        assert!(done.is_completed());
        assert_eq!(done.item_count, Some(items as i64));
        assert_eq!(manifest_url(&done), Some(format!("s3://{bucket}/etl-test/")), "moto gives no ExportManifest");

        let listed = list_exports(&client, &table).await.unwrap();
        eprintln!("listed: {listed:?}");
        assert!(listed.iter().any(|s| s.arn == started.arn && s.status == STATUS_COMPLETED));

        // A missing bucket is accepted, then the export fails.
        let missing = StartExport { bucket: unique("no-such-bucket"), ..req.clone() };
        let started = start_export(&client, &missing).await.unwrap();
        let e = wait_export(&client, &started.arn, Duration::from_millis(200), |_| {}).await.unwrap_err();
        assert!(e.is_export_failure(), "{e}");
        assert!(matches!(&e, DynamoError::ExportFailed { code, .. } if code == "S3NoSuchBucket"), "{e}");
        eprintln!("error: {e}\nhint: {}", e.hint().unwrap_or_default());

        // Unknown table. (moto answers `DescribeExport` of an unknown ARN with HTTP 500, retried for a minute.)
        let e = start_export(&client, &StartExport { table: unique("missing"), ..req.clone() }).await.unwrap_err();
        assert!(matches!(e, DynamoError::TableNotFound { .. }), "{e}");
        let e = list_exports(&client, &unique("missing")).await.unwrap_err();
        assert!(matches!(e, DynamoError::TableNotFound { .. }), "{e}");
    }
}
