//! Live DynamoDB: the client and its retry policy, a parallel `Scan` spooled to local files in
//! the export line format, and the one error type every DynamoDB call in etl maps to.
//!
//! A scan writes segment `N` of the table to `segment-NNNNNN.json` as plain JSON Lines, one
//! `{"Item":{...}}` per item, exactly as an export's data files hold them (numbers as the
//! service's text, binary as padded base64), so the spooled files go through the same decoder
//! as exports. Memory stays bounded: each segment holds one page (at most 1 MB of items) at a
//! time, and at most [`MAX_CONCURRENT_SEGMENTS`] segments run at once.
//!
//! This module must never print or log credentials, requests or `Debug` dumps of SDK errors
//! (they can be huge and hold signed headers): errors keep the service's code and message, or
//! the text of the transport error's cause chain.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::interceptors::InterceptorContext;
use aws_sdk_dynamodb::config::retry::{
    ClassifyRetry, RetryAction, RetryConfig, RetryPartition, TokenBucket as RetryQuota,
};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use base64::Engine as _;
use futures::{StreamExt as _, TryStreamExt as _};
use tokio::io::AsyncWriteExt as _;
use tracing::Instrument as _;

/// Most segments DynamoDB accepts in one parallel scan (`TotalSegments`).
pub const MAX_SEGMENTS: u32 = 1_000_000;
/// Most segments scanned at the same time; the others wait for a free slot. Each running
/// segment holds one open file and one page (up to 1 MB) in memory.
pub const MAX_CONCURRENT_SEGMENTS: usize = 64;
/// Attempts per request (the first one included) before a retryable error is returned.
pub const MAX_ATTEMPTS: u32 = 10;

/// What to scan and how hard.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub table: String,
    /// Parallel scan segments, 1 to [`MAX_SEGMENTS`]; 1 sends no `Segment`/`TotalSegments`.
    pub segments: u32,
    /// Strongly consistent reads (twice the read capacity of eventually consistent ones).
    pub consistent_read: bool,
    /// Read capacity units per second for the whole scan, shared by all segments.
    pub max_rcu_per_second: Option<f64>,
    /// `Limit`: most items per page (the service also cuts pages at 1 MB).
    pub page_size: Option<i32>,
}

/// One segment's spooled file.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanFile {
    pub path: PathBuf,
    pub segment: u32,
    pub items: u64,
    pub pages: u64,
    /// Sum of the pages' `ConsumedCapacity.CapacityUnits` (0 when the service reports none).
    pub consumed_rcu: f64,
}

/// Everything that can go wrong talking to DynamoDB.
#[derive(Debug, thiserror::Error)]
pub enum DynamoError {
    #[error("no AWS region is configured")]
    NoRegion,
    #[error("table `{table}` not found in region `{region}`")]
    TableNotFound { table: String, region: String },
    #[error("export `{arn}` not found")]
    ExportNotFound { arn: String },
    #[error("access denied to `{operation}`: {message}")]
    AccessDenied { operation: &'static str, message: String },
    #[error("the AWS credentials were rejected ({code}): {message}")]
    InvalidCredentials { code: String, message: String },
    #[error("no AWS credentials found: {detail}")]
    NoCredentials { detail: String },
    #[error("cannot connect to {}: {detail}", endpoint_text(.endpoint))]
    Unreachable { endpoint: Option<String>, detail: String },
    #[error("`{operation}` timed out: {detail}")]
    Timeout { operation: &'static str, detail: String },
    #[error("`{operation}` was still throttled after {MAX_ATTEMPTS} attempts ({code}): {message}")]
    Throttled { operation: &'static str, code: String, message: String },
    #[error("point-in-time recovery is not enabled on table `{table}`: {message}")]
    PitrDisabled { table: String, message: String },
    #[error("export `{arn}` failed ({code}): {message}")]
    ExportFailed { arn: String, code: String, message: String },
    #[error("`{operation}` failed (HTTP {status}, {code}): {message}")]
    Service { operation: &'static str, status: u16, code: String, message: String },
    #[error("`{operation}` failed: {detail}")]
    Transport { operation: &'static str, detail: String },
    #[error("unexpected answer to `{operation}`: {detail}")]
    Unexpected { operation: &'static str, detail: String },
    #[error("attribute `{attribute}` of an item in table `{table}` has a type this version of etl does not know")]
    UnknownAttributeType { table: String, attribute: String },
    #[error("invalid scan options: {0}")]
    InvalidOptions(String),
    #[error("cannot write `{}`", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn endpoint_text(endpoint: &Option<String>) -> String {
    match endpoint {
        Some(e) => format!("`{e}`"),
        None => "the DynamoDB endpoint".to_owned(),
    }
}

impl DynamoError {
    /// What the user can do about it, when that is known.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            DynamoError::NoRegion => {
                "pass `--region`, set `AWS_REGION`, or set `region` in the profile's section of `~/.aws/config`".into()
            }
            DynamoError::TableNotFound { .. } => {
                "check the table name, `--region`, and `--endpoint-url` (or `AWS_ENDPOINT_URL`)".into()
            }
            DynamoError::ExportNotFound { .. } => {
                "check the ARN and `--region`; list exports with `etl export list`".into()
            }
            DynamoError::AccessDenied { operation, .. } => format!(
                "the identity in use needs `dynamodb:{operation}`; check `--profile` (or `AWS_PROFILE`) and its policies"
            ),
            DynamoError::InvalidCredentials { .. } => "check `--profile` (or `AWS_PROFILE`) and `AWS_ACCESS_KEY_ID`; \
                for an SSO profile run `aws sso login`, for temporary keys get fresh ones"
                .into(),
            DynamoError::NoCredentials { .. } => {
                "set `AWS_PROFILE` (or pass `--profile`) and run `aws sso login` if it \
                is an SSO profile, or export `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`"
                    .into()
            }
            DynamoError::Unreachable { endpoint: Some(_), .. } => {
                "check `--endpoint-url` (or `AWS_ENDPOINT_URL`) and that the server is running".into()
            }
            DynamoError::Unreachable { endpoint: None, .. } => {
                "check the network, proxy settings and `--region`".into()
            }
            DynamoError::Throttled { .. } => {
                "lower `--segments` or the read-capacity budget, or raise the table's read capacity".into()
            }
            DynamoError::PitrDisabled { table, .. } => format!(
                "enable it with `aws dynamodb update-continuous-backups --table-name {table} \
                 --point-in-time-recovery-specification PointInTimeRecoveryEnabled=true`"
            ),
            DynamoError::ExportFailed { code, .. } => return export_failure_hint(code),
            DynamoError::Service { operation: "ExportTableToPointInTime", status: 500.., .. } => {
                "the service failed; moto answers HTTP 500 when `--prefix` is missing".into()
            }
            DynamoError::Service { status: 500.., .. } => "the service failed; try again later".into(),
            _ => return None,
        })
    }

    /// Whether an export ended `FAILED` (the data-side failure: exit status 1), as opposed to a
    /// usage, configuration or service error.
    pub fn is_export_failure(&self) -> bool {
        matches!(self, DynamoError::ExportFailed { .. })
    }

    /// Names the endpoint in an [`DynamoError::Unreachable`] error (the SDK's error does not
    /// say where it tried to connect); other errors are returned unchanged.
    pub fn with_endpoint(self, endpoint: Option<String>) -> Self {
        match self {
            DynamoError::Unreachable { endpoint: None, detail } => DynamoError::Unreachable { endpoint, detail },
            other => other,
        }
    }
}

fn export_failure_hint(code: &str) -> Option<String> {
    Some(match code {
        "S3NoSuchBucket" => "create the bucket or check `--bucket`".into(),
        "S3AccessDenied" | "AccessDenied" => "the identity that started the export needs `s3:PutObject` on the bucket \
            (and `s3:PutObjectAcl` with `--bucket-owner`); check the bucket policy"
            .into(),
        _ => return None,
    })
}

/// The endpoint requests go to, for error messages: `--endpoint-url` when given, otherwise
/// the public endpoint of the region.
pub fn endpoint_label(sdk: &SdkConfig) -> Option<String> {
    match (sdk.endpoint_url(), sdk.region()) {
        (Some(url), _) => Some(url.to_owned()),
        (None, Some(region)) => Some(format!("https://dynamodb.{region}.amazonaws.com")),
        (None, None) => None,
    }
}

/// A DynamoDB client with etl's retry policy: standard mode (exponential backoff with full
/// jitter, 1 s initial and 20 s longest pause), [`MAX_ATTEMPTS`] attempts, and no client-side
/// retry quota.
///
/// Throttling (`ProvisionedThroughputExceededException`, `ThrottlingException`,
/// `RequestLimitExceeded`), 5xx answers, timeouts and broken connections are retried by the
/// SDK's own classifiers. The quota is lifted because the SDK's default (500 tokens shared by
/// the whole process) runs dry when dozens of scan segments are throttled at once, and then
/// turns throttling into hard errors; a batch job would rather wait. A refused connection is
/// not retried: it means a wrong `--endpoint-url` or a server that is not running, and retrying
/// it ten times only delays the error by a minute.
pub fn client(sdk: &SdkConfig) -> Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
        .retry_partition(RetryPartition::custom("etl-dynamodb").token_bucket(RetryQuota::unlimited()).build())
        .retry_classifier(RefusedConnection)
        .build();
    Client::from_conf(conf)
}

/// Forbids retrying a request whose connection was refused.
#[derive(Debug)]
struct RefusedConnection;

impl ClassifyRetry for RefusedConnection {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        match ctx.output_or_error() {
            Some(Err(e)) if e.as_connector_error().is_some_and(|c| is_refused(c)) => RetryAction::RetryForbidden,
            _ => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "etl: refused connection"
    }
}

fn is_refused(e: &(dyn StdError + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The region of `client`, or [`DynamoError::NoRegion`].
pub(crate) fn region_of(client: &Client) -> Result<String, DynamoError> {
    client.config().region().map(|r| r.to_string()).ok_or(DynamoError::NoRegion)
}

// ---------------------------------------------------------------------------------------------
// Error classification

/// One failed call reduced to the facts the mapping needs: no request, no headers, no `Debug`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// The service answered with an error.
    Service {
        status: u16,
        code: Option<String>,
        message: Option<String>,
    },
    /// No answer: refused, DNS, TLS, or the credentials could not be loaded.
    Dispatch {
        refused: bool,
        io: bool,
        chain: String,
    },
    Timeout {
        chain: String,
    },
    /// An answer that could not be read.
    Response {
        chain: String,
    },
    /// The request could not be built.
    Construction {
        chain: String,
    },
}

impl Failure {
    pub(crate) fn of<E>(err: &SdkError<E, HttpResponse>) -> Failure
    where
        E: ProvideErrorMetadata + StdError + 'static,
    {
        match err {
            SdkError::ServiceError(s) => Failure::Service {
                status: s.raw().status().as_u16(),
                code: s.err().code().map(str::to_owned),
                message: s.err().message().map(str::to_owned),
            },
            SdkError::DispatchFailure(d) => Failure::Dispatch {
                refused: d.as_connector_error().is_some_and(|c| is_refused(c)),
                io: d.is_io(),
                chain: cause_chain(err),
            },
            SdkError::TimeoutError(_) => Failure::Timeout { chain: cause_chain(err) },
            SdkError::ResponseError(_) => Failure::Response { chain: cause_chain(err) },
            _ => Failure::Construction { chain: cause_chain(err) },
        }
    }
}

/// The `Display` texts of `err`'s causes joined by `: `, without the SDK's and hyper's bare
/// wrapper labels ("dispatch failure", "io error", "other", ...) and without repeats.
fn cause_chain(err: &(dyn StdError + 'static)) -> String {
    const LABELS: &[&str] =
        &["dispatch failure", "io error", "other", "timeout", "user error", "client error (Connect)", "service error"];
    let mut parts: Vec<String> = Vec::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        let text = e.to_string();
        if !text.is_empty() && !LABELS.contains(&text.as_str()) && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = e.source();
    }
    if parts.is_empty() { err.to_string() } else { parts.join(": ") }
}

/// Which call failed, for the error's wording.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub operation: &'static str,
    pub table: Option<&'a str>,
    pub export_arn: Option<&'a str>,
    pub region: &'a str,
}

const CREDENTIAL_CODES: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "ExpiredToken",
    "InvalidClientTokenId",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "IncompleteSignatureException",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
];

const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "TooManyRequestsException",
];

pub(crate) fn classify(failure: Failure, call: Call<'_>) -> DynamoError {
    match failure {
        Failure::Service { status, code, message } => {
            let message = message.unwrap_or_default();
            let code = code.unwrap_or_default();
            match code.as_str() {
                "ResourceNotFoundException" | "TableNotFoundException" if call.table.is_some() => {
                    DynamoError::TableNotFound {
                        table: call.table.unwrap_or_default().to_owned(),
                        region: call.region.to_owned(),
                    }
                }
                "ExportNotFoundException" if call.export_arn.is_some() => {
                    DynamoError::ExportNotFound { arn: call.export_arn.unwrap_or_default().to_owned() }
                }
                "AccessDeniedException" | "AccessDenied" => {
                    DynamoError::AccessDenied { operation: call.operation, message }
                }
                "PointInTimeRecoveryUnavailableException" => {
                    DynamoError::PitrDisabled { table: call.table.unwrap_or("?").to_owned(), message }
                }
                c if CREDENTIAL_CODES.contains(&c) => DynamoError::InvalidCredentials { code, message },
                c if THROTTLING_CODES.contains(&c) => {
                    DynamoError::Throttled { operation: call.operation, code, message }
                }
                "" => DynamoError::Service {
                    operation: call.operation,
                    status,
                    code: "no error code".into(),
                    message: if message.is_empty() { "no message".into() } else { message },
                },
                _ => DynamoError::Service { operation: call.operation, status, code, message },
            }
        }
        Failure::Dispatch { refused, io, chain } => {
            if refused || io {
                DynamoError::Unreachable { endpoint: None, detail: chain }
            } else if chain.to_ascii_lowercase().contains("credential") {
                DynamoError::NoCredentials { detail: chain }
            } else {
                DynamoError::Transport { operation: call.operation, detail: chain }
            }
        }
        Failure::Timeout { chain } => DynamoError::Timeout { operation: call.operation, detail: chain },
        Failure::Response { chain } => DynamoError::Unexpected { operation: call.operation, detail: chain },
        Failure::Construction { chain } => {
            if chain.to_ascii_lowercase().contains("region") {
                DynamoError::NoRegion
            } else {
                DynamoError::Transport { operation: call.operation, detail: chain }
            }
        }
    }
}

/// Maps an SDK error of the call described by `call`.
pub(crate) fn map_sdk_error<E>(err: SdkError<E, HttpResponse>, call: Call<'_>) -> DynamoError
where
    E: ProvideErrorMetadata + StdError + 'static,
{
    classify(Failure::of(&err), call)
}

// ---------------------------------------------------------------------------------------------
// Export line encoding

/// An item that cannot be written as DynamoDB JSON.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("attribute `{0}` has a type this SDK does not know")]
    UnknownType(String),
    #[error("cannot encode JSON")]
    Json(#[from] serde_json::Error),
}

/// Appends `{"Item":{...}}\n` for `item` in DynamoDB JSON, as export data files hold it.
///
/// Attributes (and the entries of `M` values) are written sorted by name, byte-wise, because the
/// SDK hands them over in a `HashMap` whose order changes from run to run. Set and list
/// elements keep the service's order. `N` is the service's text verbatim, `B` and `BS` are
/// standard padded base64 of the raw bytes, and strings are escaped by serde_json.
pub fn write_item_line(item: &HashMap<String, AttributeValue>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.extend_from_slice(b"{\"Item\":");
    write_map(item, out)?;
    out.extend_from_slice(b"}\n");
    Ok(())
}

fn write_map(map: &HashMap<String, AttributeValue>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let mut entries: Vec<(&String, &AttributeValue)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    for (i, (name, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(name, out)?;
        out.push(b':');
        write_value(value, out).map_err(|e| match e {
            EncodeError::UnknownType(inner) if inner.is_empty() => EncodeError::UnknownType(name.clone()),
            EncodeError::UnknownType(inner) => EncodeError::UnknownType(format!("{name}.{inner}")),
            other => other,
        })?;
    }
    out.push(b'}');
    Ok(())
}

fn write_str(s: &str, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    serde_json::to_writer(&mut *out, s)?;
    Ok(())
}

fn write_b64(bytes: &[u8], out: &mut Vec<u8>) {
    // Base64 needs no JSON escaping.
    out.push(b'"');
    let mut text = String::new();
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut text);
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

fn write_list<T>(
    items: &[T],
    out: &mut Vec<u8>,
    mut each: impl FnMut(&T, &mut Vec<u8>) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(item, out)?;
    }
    out.push(b']');
    Ok(())
}

/// Writes `{"<T>":<v>}`. An unknown type yields `UnknownType("")`, named by the caller.
fn write_value(value: &AttributeValue, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    match value {
        AttributeValue::S(s) => {
            out.extend_from_slice(b"{\"S\":");
            write_str(s, out)?;
        }
        AttributeValue::N(n) => {
            out.extend_from_slice(b"{\"N\":");
            write_str(n, out)?;
        }
        AttributeValue::B(b) => {
            out.extend_from_slice(b"{\"B\":");
            write_b64(b.as_ref(), out);
        }
        AttributeValue::Bool(b) => out.extend_from_slice(if *b { b"{\"BOOL\":true" } else { b"{\"BOOL\":false" }),
        AttributeValue::Null(b) => out.extend_from_slice(if *b { b"{\"NULL\":true" } else { b"{\"NULL\":false" }),
        AttributeValue::Ss(v) => {
            out.extend_from_slice(b"{\"SS\":");
            write_list(v, out, |s, out| write_str(s, out))?;
        }
        AttributeValue::Ns(v) => {
            out.extend_from_slice(b"{\"NS\":");
            write_list(v, out, |s, out| write_str(s, out))?;
        }
        AttributeValue::Bs(v) => {
            out.extend_from_slice(b"{\"BS\":");
            write_list(v, out, |b, out| {
                write_b64(b.as_ref(), out);
                Ok(())
            })?;
        }
        AttributeValue::L(v) => {
            out.extend_from_slice(b"{\"L\":");
            let mut index = 0usize;
            write_list(v, out, |e, out| {
                let r = write_value(e, out).map_err(|err| match err {
                    EncodeError::UnknownType(inner) if inner.is_empty() => {
                        EncodeError::UnknownType(format!("[{index}]"))
                    }
                    EncodeError::UnknownType(inner) => EncodeError::UnknownType(format!("[{index}].{inner}")),
                    other => other,
                });
                index += 1;
                r
            })?;
        }
        AttributeValue::M(m) => {
            out.extend_from_slice(b"{\"M\":");
            write_map(m, out)?;
        }
        _ => return Err(EncodeError::UnknownType(String::new())),
    }
    out.push(b'}');
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Read-capacity budget

/// A token bucket of read capacity units shared by all segments of a scan.
///
/// The cost of a page is only known from its answer (`ConsumedCapacity.CapacityUnits`), so a
/// segment *reserves* an estimate before each request (its previous page's cost; 1 RCU for the
/// first) and *settles* the difference afterwards. The bucket may go into debt; a segment waits
/// while the balance is negative, until the refill (`rate` per second, at most `burst` saved
/// up, one second's worth) pays it off. Reserving first keeps many segments from all sending
/// at once the moment the balance turns positive. Over any stretch of time the capacity spent
/// stays within `rate × seconds + burst + one page per running segment`.
#[derive(Debug, Clone)]
pub(crate) struct RcuBucket {
    rate: f64,
    burst: f64,
    balance: f64,
    last: Instant,
}

impl RcuBucket {
    pub(crate) fn new(rate: f64, now: Instant) -> Self {
        let burst = rate.max(1.0);
        RcuBucket { rate, burst, balance: burst, last: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.balance = (self.balance + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// Reserves `estimate` units and returns zero, or returns how long to wait before asking
    /// again (nothing is reserved then).
    pub(crate) fn reserve(&mut self, estimate: f64, now: Instant) -> Duration {
        self.refill(now);
        if self.balance >= 0.0 {
            self.balance -= estimate.max(0.0);
            Duration::ZERO
        } else {
            Duration::from_secs_f64((-self.balance / self.rate).min(3600.0))
        }
    }

    /// Books the page's real cost against what was reserved for it.
    pub(crate) fn settle(&mut self, reserved: f64, actual: f64) {
        self.balance -= actual.max(0.0) - reserved.max(0.0);
    }

    #[cfg(test)]
    fn balance(&self) -> f64 {
        self.balance
    }
}

struct Budget(Mutex<RcuBucket>);

impl Budget {
    async fn reserve(&self, estimate: f64) {
        loop {
            let wait = match self.0.lock() {
                Ok(mut b) => b.reserve(estimate, Instant::now()),
                // A poisoned lock means another segment panicked; stop limiting rather than stall.
                Err(_) => Duration::ZERO,
            };
            if wait.is_zero() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }

    fn settle(&self, reserved: f64, actual: f64) {
        if let Ok(mut b) = self.0.lock() {
            b.settle(reserved, actual);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scan

impl ScanOptions {
    fn validate(&self) -> Result<(), DynamoError> {
        if self.table.is_empty() {
            return Err(DynamoError::InvalidOptions("the table name is empty".into()));
        }
        if !(1..=MAX_SEGMENTS).contains(&self.segments) {
            return Err(DynamoError::InvalidOptions(format!(
                "`segments` must be between 1 and {MAX_SEGMENTS}, not {}",
                self.segments
            )));
        }
        if let Some(rate) = self.max_rcu_per_second
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(DynamoError::InvalidOptions(format!(
                "the read-capacity budget must be a positive number of units per second, not {rate}"
            )));
        }
        if let Some(limit) = self.page_size
            && limit < 1
        {
            return Err(DynamoError::InvalidOptions(format!("the page size must be at least 1, not {limit}")));
        }
        Ok(())
    }
}

/// The file segment `segment` is spooled to.
pub fn segment_path(dir: &Path, segment: u32) -> PathBuf {
    dir.join(format!("segment-{segment:06}.json"))
}

/// Scans `opts.table` with `opts.segments` parallel segments (at most
/// [`MAX_CONCURRENT_SEGMENTS`] at a time), each following `LastEvaluatedKey` to its end, and
/// spools segment `N` to `dir/segment-NNNNNN.json` (see [`write_item_line`]).
///
/// `on_items` is called after each page with the number of items it held. Returns one
/// [`ScanFile`] per segment, in segment order. On the first error the other segments are
/// cancelled; files already written stay in `dir` (the caller stages and cleans up).
pub async fn scan_to_files(
    client: &Client,
    opts: &ScanOptions,
    dir: &Path,
    on_items: impl Fn(u64) + Send + Sync,
) -> Result<Vec<ScanFile>, DynamoError> {
    opts.validate()?;
    let region = region_of(client)?;
    let budget = opts.max_rcu_per_second.map(|rate| Budget(Mutex::new(RcuBucket::new(rate, Instant::now()))));
    let ctx = SegmentCtx { client, opts, dir, region: &region, budget: budget.as_ref(), on_items: &on_items };
    let concurrency = MAX_CONCURRENT_SEGMENTS.min(opts.segments as usize);
    let mut files: Vec<ScanFile> = futures::stream::iter(0..opts.segments)
        .map(|segment| ctx.scan_segment(segment))
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    files.sort_by_key(|f| f.segment);
    Ok(files)
}

struct SegmentCtx<'a, F> {
    client: &'a Client,
    opts: &'a ScanOptions,
    dir: &'a Path,
    region: &'a str,
    budget: Option<&'a Budget>,
    on_items: &'a F,
}

impl<F: Fn(u64) + Send + Sync> SegmentCtx<'_, F> {
    async fn scan_segment(&self, segment: u32) -> Result<ScanFile, DynamoError> {
        let span = tracing::info_span!(
            "scan_segment",
            table = %self.opts.table,
            segment,
            items = tracing::field::Empty,
            pages = tracing::field::Empty,
            rcu = tracing::field::Empty,
        );
        let result = self.scan_segment_inner(segment).instrument(span.clone()).await;
        if let Ok(f) = &result {
            span.record("items", f.items);
            span.record("pages", f.pages);
            span.record("rcu", f.consumed_rcu);
            span.in_scope(|| tracing::info!("segment done"));
        }
        result
    }

    async fn scan_segment_inner(&self, segment: u32) -> Result<ScanFile, DynamoError> {
        let opts = self.opts;
        let path = segment_path(self.dir, segment);
        let write_err = |source| DynamoError::Write { path: path.clone(), source };
        let mut file = tokio::fs::File::create(&path).await.map_err(write_err)?;
        let call = Call { operation: "Scan", table: Some(&opts.table), export_arn: None, region: self.region };
        let mut start_key: Option<HashMap<String, AttributeValue>> = None;
        let mut buf: Vec<u8> = Vec::new();
        let (mut items, mut pages, mut consumed) = (0u64, 0u64, 0.0f64);
        let mut estimate = 1.0f64;
        loop {
            if let Some(b) = self.budget {
                b.reserve(estimate).await;
            }
            let mut req = self
                .client
                .scan()
                .table_name(&opts.table)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .consistent_read(opts.consistent_read)
                .set_limit(opts.page_size)
                .set_exclusive_start_key(start_key.take());
            if opts.segments > 1 {
                req = req.segment(segment as i32).total_segments(opts.segments as i32);
            }
            let page = match req.send().await {
                Ok(p) => p,
                Err(e) => {
                    if let Some(b) = self.budget {
                        b.settle(estimate, 0.0);
                    }
                    return Err(map_sdk_error(e, call));
                }
            };
            let cost = page.consumed_capacity().and_then(|c| c.capacity_units());
            if let Some(b) = self.budget {
                b.settle(estimate, cost.unwrap_or(estimate));
            }
            if let Some(c) = cost {
                consumed += c;
                estimate = c;
            }
            buf.clear();
            for item in page.items() {
                write_item_line(item, &mut buf).map_err(|e| match e {
                    EncodeError::UnknownType(attribute) => {
                        DynamoError::UnknownAttributeType { table: opts.table.clone(), attribute }
                    }
                    EncodeError::Json(e) => DynamoError::Unexpected { operation: "Scan", detail: e.to_string() },
                })?;
            }
            file.write_all(&buf).await.map_err(write_err)?;
            let n = page.items().len() as u64;
            items += n;
            pages += 1;
            (self.on_items)(n);
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start_key = Some(key),
                _ => break,
            }
        }
        file.flush().await.map_err(write_err)?;
        file.shutdown().await.map_err(write_err)?;
        Ok(ScanFile { path, segment, items, pages, consumed_rcu: consumed })
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use aws_sdk_dynamodb::error::{ConnectorError, ErrorMetadata};
    use aws_sdk_dynamodb::operation::scan::ScanError;
    use aws_sdk_dynamodb::primitives::Blob;

    use super::*;
    use crate::decode::Value;
    use crate::decode::json::put_line as decode_export_line;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.to_owned())
    }

    fn map(entries: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        entries.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
    }

    fn line(entries: &[(&str, AttributeValue)]) -> String {
        let mut out = Vec::new();
        write_item_line(&map(entries), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_type_in_export_form_sorted_by_name() {
        let got = line(&[
            ("z", AttributeValue::Null(true)),
            ("t", AttributeValue::Bool(true)),
            ("ss", AttributeValue::Ss(vec!["b".into(), "a".into()])),
            ("s", s("x")),
            ("ns", AttributeValue::Ns(vec!["2".into(), "1.5".into()])),
            ("n", n("12345678901234567890123456789.123456789")),
            ("m", AttributeValue::M(map(&[("y", s("é")), ("x", n("-0.5"))]))),
            (
                "l",
                AttributeValue::L(vec![s("a"), n("1"), AttributeValue::L(vec![]), AttributeValue::M(HashMap::new())]),
            ),
            ("f", AttributeValue::Bool(false)),
            ("bs", AttributeValue::Bs(vec![Blob::new(vec![1u8]), Blob::new(vec![0xffu8])])),
            ("b", AttributeValue::B(Blob::new(vec![0xde, 0xad, 0xbe, 0xef]))),
        ]);
        let want = concat!(
            r#"{"Item":{"b":{"B":"3q2+7w=="},"bs":{"BS":["AQ==","/w=="]},"f":{"BOOL":false},"#,
            r#""l":{"L":[{"S":"a"},{"N":"1"},{"L":[]},{"M":{}}]},"m":{"M":{"x":{"N":"-0.5"},"y":{"S":"é"}}},"#,
            r#""n":{"N":"12345678901234567890123456789.123456789"},"ns":{"NS":["2","1.5"]},"s":{"S":"x"},"#,
            r#""ss":{"SS":["b","a"]},"t":{"BOOL":true},"z":{"NULL":true}}}"#,
            "\n"
        );
        assert_eq!(got, want);
        // The decoder that reads exports accepts it.
        let item = decode_export_line(got.trim_end());
        assert_eq!(item.len(), 11);
        assert_eq!(item[0], (Cow::Borrowed("b"), Value::B(Cow::Owned(vec![0xde, 0xad, 0xbe, 0xef]))));
    }

    #[test]
    fn numbers_are_kept_verbatim() {
        for text in [
            "99999999999999999999999999999999999999",
            "-0.00000000000000000000000000000000000001",
            "1E+5",
            "-1.50e-3",
            "1.50",
            "0",
            "9.9999999999999999999999999999999999999E+125",
        ] {
            let got = line(&[("n", n(text)), ("ns", AttributeValue::Ns(vec![text.to_owned()]))]);
            assert_eq!(got, format!("{{\"Item\":{{\"n\":{{\"N\":\"{text}\"}},\"ns\":{{\"NS\":[\"{text}\"]}}}}}}\n"));
            let v: serde_json::Value = serde_json::from_str(&got).unwrap();
            assert_eq!(v["Item"]["n"]["N"].as_str(), Some(text));
        }
        // The export decoder canonicalizes later; spooling never does.
        let text = line(&[("n", n("1.50E+2"))]);
        let item = decode_export_line(text.trim_end());
        assert!(matches!(&item[0].1, Value::N(num) if num.as_str() == "150"));
    }

    #[test]
    fn binary_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        let reversed: Vec<u8> = all.iter().rev().copied().collect();
        for bytes in [all.clone(), vec![0], vec![0, 0], vec![1, 2, 3], reversed] {
            let got = line(&[
                ("b", AttributeValue::B(Blob::new(bytes.clone()))),
                ("bs", AttributeValue::Bs(vec![Blob::new(bytes.clone())])),
            ]);
            let item = decode_export_line(got.trim_end());
            assert_eq!(item[0].1, Value::B(Cow::Owned(bytes.clone())));
            assert_eq!(item[1].1, Value::BS(vec![Cow::Owned(bytes.clone())]));
            let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
            assert!(got.contains(&format!("{{\"B\":\"{b64}\"}}")));
        }
        // Empty binary (allowed outside keys) is an empty string.
        assert_eq!(line(&[("b", AttributeValue::B(Blob::new(Vec::new())))]), "{\"Item\":{\"b\":{\"B\":\"\"}}}\n");
    }

    #[test]
    fn strings_are_escaped_for_json() {
        let nasty: String = (0u32..0x20)
            .filter_map(char::from_u32)
            .chain("\"\\/\u{7f}\u{80}\u{2028}\u{2029}\u{fffd}\u{feff}é中😀\u{10ffff}".chars())
            .collect();
        let name = "na\"me\n\u{0}😀";
        let got = line(&[
            (name, s(&nasty)),
            ("ss", AttributeValue::Ss(vec![nasty.clone()])),
            ("m", AttributeValue::M(map(&[(name, s(&nasty))]))),
        ]);
        assert!(!got.trim_end().contains('\n'), "one line per item");
        assert!(got.bytes().all(|b| b >= 0x20 || b == b'\n'));
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(v["Item"][name]["S"].as_str(), Some(nasty.as_str()));
        assert_eq!(v["Item"]["m"]["M"][name]["S"].as_str(), Some(nasty.as_str()));
        let item = decode_export_line(got.trim_end());
        let (k, val) = item.iter().find(|(k, _)| k == name).unwrap();
        assert_eq!(k, name);
        assert_eq!(val, &Value::S(Cow::Owned(nasty.clone())));
        // An empty item and an empty string.
        assert_eq!(line(&[]), "{\"Item\":{}}\n");
        assert_eq!(line(&[("e", s(""))]), "{\"Item\":{\"e\":{\"S\":\"\"}}}\n");
    }

    #[test]
    fn deep_nesting_is_written() {
        let mut v = s("leaf");
        for i in 0..31 {
            v = if i % 2 == 0 { AttributeValue::L(vec![v]) } else { AttributeValue::M(map(&[("k", v)])) };
        }
        let got = line(&[("deep", v)]);
        let _ = decode_export_line(got.trim_end());
    }

    #[test]
    fn segment_file_names() {
        assert_eq!(segment_path(Path::new("d"), 0), Path::new("d/segment-000000.json"));
        assert_eq!(segment_path(Path::new("d"), 999_999), Path::new("d/segment-999999.json"));
    }

    #[test]
    fn scan_options_are_checked() {
        let ok = ScanOptions {
            table: "T".into(),
            segments: 4,
            consistent_read: false,
            max_rcu_per_second: Some(10.0),
            page_size: Some(100),
        };
        assert!(ok.validate().is_ok());
        for bad in [
            ScanOptions { segments: 0, ..ok.clone() },
            ScanOptions { segments: MAX_SEGMENTS + 1, ..ok.clone() },
            ScanOptions { max_rcu_per_second: Some(0.0), ..ok.clone() },
            ScanOptions { max_rcu_per_second: Some(f64::NAN), ..ok.clone() },
            ScanOptions { max_rcu_per_second: Some(f64::INFINITY), ..ok.clone() },
            ScanOptions { page_size: Some(0), ..ok.clone() },
            ScanOptions { table: String::new(), ..ok.clone() },
        ] {
            assert!(matches!(bad.validate(), Err(DynamoError::InvalidOptions(_))), "{bad:?}");
        }
        assert!(ScanOptions { segments: MAX_SEGMENTS, ..ok }.validate().is_ok());
    }

    #[test]
    fn rcu_bucket_reserves_then_settles() {
        let t0 = Instant::now();
        let mut b = RcuBucket::new(10.0, t0);
        assert_eq!(b.balance(), 10.0, "starts with one second's worth");
        assert_eq!(b.reserve(4.0, t0), Duration::ZERO);
        assert_eq!(b.balance(), 6.0);
        b.settle(4.0, 30.0);
        assert_eq!(b.balance(), -20.0, "in debt by the real cost");
        assert_eq!(b.reserve(30.0, t0), Duration::from_secs(2), "wait until the debt is paid");
        assert_eq!(b.balance(), -20.0, "nothing reserved while waiting");
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(b.reserve(30.0, t2), Duration::ZERO);
        assert_eq!(b.balance(), -30.0);
        b.settle(30.0, 10.0);
        assert_eq!(b.balance(), -10.0, "overestimates are refunded");
        // Idle time saves up at most one second's worth.
        let later = t2 + Duration::from_secs(100);
        assert_eq!(b.reserve(0.0, later), Duration::ZERO);
        assert_eq!(b.balance(), 10.0);
        // Slow rates still allow one unit of burst.
        let mut slow = RcuBucket::new(0.5, t0);
        assert_eq!(slow.balance(), 1.0);
        slow.settle(0.0, 2.0);
        assert_eq!(slow.reserve(1.0, t0), Duration::from_secs(2));
    }

    #[test]
    fn rcu_bucket_holds_the_rate_with_many_segments() {
        // 8 segments sending 64-RCU pages against a 100 RCU/s budget, in simulated time.
        let rate = 100.0;
        let t0 = Instant::now();
        let mut b = RcuBucket::new(rate, t0);
        let mut next = [Duration::ZERO; 8];
        let mut spent = 0.0;
        let horizon = Duration::from_secs(600);
        loop {
            let (seg, at) = next.iter().copied().enumerate().min_by_key(|(_, t)| *t).unwrap();
            if at >= horizon {
                break;
            }
            let wait = b.reserve(64.0, t0 + at);
            if wait.is_zero() {
                b.settle(64.0, 64.0);
                spent += 64.0;
                next[seg] = at + Duration::from_millis(50);
            } else {
                next[seg] = at + wait;
            }
        }
        let allowed = rate * horizon.as_secs_f64();
        assert!(spent <= allowed + rate + 8.0 * 64.0, "spent {spent}, allowed {allowed}");
        assert!(spent >= allowed - rate - 64.0, "spent {spent}, far below {allowed}");
    }

    const CALL: Call<'static> =
        Call { operation: "Scan", table: Some("Orders"), export_arn: None, region: "eu-west-1" };

    fn service(code: &str, message: &str) -> Failure {
        Failure::Service { status: 400, code: Some(code.into()), message: Some(message.into()) }
    }

    #[test]
    fn service_errors_are_classified_with_hints() {
        let e = classify(service("ResourceNotFoundException", "Requested resource not found"), CALL);
        assert_eq!(e.to_string(), "table `Orders` not found in region `eu-west-1`");
        assert!(e.hint().unwrap().contains("--region") && e.hint().unwrap().contains("--endpoint-url"));

        let e = classify(service("AccessDeniedException", "User: arn:x is not authorized"), CALL);
        assert!(matches!(e, DynamoError::AccessDenied { operation: "Scan", .. }));
        assert!(e.to_string().contains("not authorized"));
        assert!(e.hint().unwrap().contains("`dynamodb:Scan`"));

        for code in ["UnrecognizedClientException", "ExpiredTokenException", "InvalidSignatureException"] {
            let e = classify(service(code, "The security token included in the request is invalid."), CALL);
            assert!(matches!(e, DynamoError::InvalidCredentials { .. }), "{code}");
            let hint = e.hint().unwrap();
            assert!(hint.contains("AWS_PROFILE") && hint.contains("aws sso login"));
        }

        for code in ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"] {
            let e = classify(service(code, "slow down"), CALL);
            assert!(matches!(e, DynamoError::Throttled { .. }), "{code}");
            assert!(e.to_string().contains(&format!("after {MAX_ATTEMPTS} attempts")));
        }

        let e = classify(service("PointInTimeRecoveryUnavailableException", "PITR is off"), CALL);
        assert_eq!(e.to_string(), "point-in-time recovery is not enabled on table `Orders`: PITR is off");
        assert!(e.hint().unwrap().contains(
            "aws dynamodb update-continuous-backups --table-name Orders \
             --point-in-time-recovery-specification PointInTimeRecoveryEnabled=true"
        ));

        let e = classify(service("ValidationException", "bad segment"), CALL);
        assert_eq!(e.to_string(), "`Scan` failed (HTTP 400, ValidationException): bad segment");
        assert_eq!(e.hint(), None);

        let e = classify(Failure::Service { status: 500, code: None, message: None }, CALL);
        assert_eq!(e.to_string(), "`Scan` failed (HTTP 500, no error code): no message");
        assert!(e.hint().is_some());
        let export_call = Call { operation: "ExportTableToPointInTime", ..CALL };
        let e = classify(Failure::Service { status: 500, code: None, message: None }, export_call);
        assert!(e.hint().unwrap().contains("--prefix"));

        let arn_call = Call { operation: "DescribeExport", table: None, export_arn: Some("arn:e"), region: "r" };
        let e = classify(service("ExportNotFoundException", "no"), arn_call);
        assert_eq!(e.to_string(), "export `arn:e` not found");
    }

    #[test]
    fn transport_errors_are_classified() {
        let refused =
            Failure::Dispatch { refused: true, io: true, chain: "tcp connect error: Connection refused".into() };
        let e = classify(refused, CALL);
        assert_eq!(e.to_string(), "cannot connect to the DynamoDB endpoint: tcp connect error: Connection refused");
        let e = e.with_endpoint(Some("http://127.0.0.1:9".into()));
        assert_eq!(e.to_string(), "cannot connect to `http://127.0.0.1:9`: tcp connect error: Connection refused");
        assert!(e.hint().unwrap().contains("--endpoint-url"));

        let creds = Failure::Dispatch {
            refused: false,
            io: false,
            chain: "failed to load credentials: the credential provider was not enabled".into(),
        };
        let e = classify(creds, CALL);
        assert!(matches!(e, DynamoError::NoCredentials { .. }));
        assert!(e.hint().unwrap().contains("aws sso login"));

        let e = classify(Failure::Timeout { chain: "read timed out".into() }, CALL);
        assert_eq!(e.to_string(), "`Scan` timed out: read timed out");
        let e = classify(Failure::Construction { chain: "no region was set".into() }, CALL);
        assert!(matches!(e, DynamoError::NoRegion));
        assert!(e.hint().unwrap().contains("--region"));
        // `with_endpoint` leaves other errors alone.
        let e = classify(Failure::Timeout { chain: "x".into() }, CALL).with_endpoint(Some("h".into()));
        assert!(matches!(e, DynamoError::Timeout { .. }));
    }

    #[test]
    fn sdk_errors_reduce_to_facts() {
        let meta = ErrorMetadata::builder().code("ResourceNotFoundException").message("Requested resource not found");
        let err: SdkError<ScanError, HttpResponse> = SdkError::service_error(
            ScanError::generic(meta.build()),
            HttpResponse::new(400u16.try_into().unwrap(), "".into()),
        );
        assert_eq!(
            Failure::of(&err),
            Failure::Service {
                status: 400,
                code: Some("ResourceNotFoundException".into()),
                message: Some("Requested resource not found".into())
            }
        );
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let err: SdkError<ScanError, HttpResponse> = SdkError::dispatch_failure(ConnectorError::io(Box::new(io)));
        let Failure::Dispatch { refused, io, chain } = Failure::of(&err) else { panic!("not a dispatch failure") };
        assert!(refused && io);
        assert_eq!(chain, "connection refused", "wrapper labels are dropped");
        assert!(matches!(map_sdk_error(err, CALL), DynamoError::Unreachable { .. }));
    }

    #[test]
    fn messages_follow_the_house_style() {
        let errors = [
            DynamoError::NoRegion,
            classify(service("ResourceNotFoundException", "m"), CALL),
            classify(service("AccessDeniedException", "m"), CALL),
            classify(service("UnrecognizedClientException", "m"), CALL),
            classify(service("ThrottlingException", "m"), CALL),
            DynamoError::ExportFailed { arn: "a".into(), code: "S3NoSuchBucket".into(), message: "m".into() },
            DynamoError::UnknownAttributeType { table: "T".into(), attribute: "a.b".into() },
        ];
        for e in errors {
            let text = e.to_string();
            assert!(text.starts_with(|c: char| !c.is_uppercase()), "{text}");
            assert!(!text.ends_with('.'), "{text}");
        }
    }
}

/// Tests against a running moto server: `ETL_MOTO_ENDPOINT=http://127.0.0.1:PORT cargo test
/// --release --lib aws:: -- --ignored`. They skip (pass) when the variable is unset.
#[cfg(test)]
pub(crate) mod moto_tests {
    use aws_sdk_dynamodb::config::Credentials;
    use aws_sdk_dynamodb::primitives::Blob;
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};

    use super::*;
    use crate::decode::Value;
    use crate::decode::json::put_line as decode_export_line;

    pub(crate) const BIG: &str = "12345678901234567890123456789.123456789";

    /// A client for the moto server in `ETL_MOTO_ENDPOINT`, or `None` to skip.
    /// Whether the test script asked for moto (`ETL_REQUIRE_MOTO=1`): then a missing server or
    /// variable fails the test instead of skipping it.
    pub(crate) fn moto_required() -> bool {
        std::env::var_os("ETL_REQUIRE_MOTO").is_some_and(|v| v == "1")
    }

    /// A client for the moto server in `ETL_MOTO_ENDPOINT`; `None` (skip) when there is none and
    /// it is not required.
    pub(crate) async fn moto_client() -> Option<(Client, String)> {
        let Some(endpoint) = std::env::var("ETL_MOTO_ENDPOINT").ok().filter(|e| !e.is_empty()) else {
            assert!(!moto_required(), "ETL_REQUIRE_MOTO=1 but ETL_MOTO_ENDPOINT is not set");
            return None;
        };
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(&endpoint)
            .credentials_provider(Credentials::new("testing", "testing", None, None, "etl-test"))
            .load()
            .await;
        Some((client(&sdk), endpoint))
    }

    pub(crate) fn unique(name: &str) -> String {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        format!("etl-{name}-{}-{nanos}", std::process::id())
    }

    /// Creates a PK/SK table and loads `extra` plain items plus one item of every type.
    pub(crate) async fn create_table(client: &Client, table: &str, extra: usize) -> usize {
        let def = |n: &str| {
            AttributeDefinition::builder().attribute_name(n).attribute_type(ScalarAttributeType::S).build().unwrap()
        };
        let key = |n: &str, k| KeySchemaElement::builder().attribute_name(n).key_type(k).build().unwrap();
        client
            .create_table()
            .table_name(table)
            .attribute_definitions(def("PK"))
            .attribute_definitions(def("SK"))
            .key_schema(key("PK", KeyType::Hash))
            .key_schema(key("SK", KeyType::Range))
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .unwrap();
        client.put_item().table_name(table).set_item(Some(every_type())).send().await.unwrap();
        for i in 0..extra {
            client
                .put_item()
                .table_name(table)
                .item("PK", AttributeValue::S(format!("ORDER#{i:04}")))
                .item("SK", AttributeValue::S("META".into()))
                .item("Type", AttributeValue::S("Order".into()))
                .item("total", AttributeValue::N(format!("{i}.50")))
                .item("pad", AttributeValue::S("x".repeat(2000)))
                .send()
                .await
                .unwrap();
        }
        extra + 1
    }

    pub(crate) fn every_type() -> HashMap<String, AttributeValue> {
        let all: Vec<u8> = (0..=255u8).collect();
        let mut m = HashMap::new();
        m.insert("PK".into(), AttributeValue::S("EVERY#1".into()));
        m.insert("SK".into(), AttributeValue::S("TYPE".into()));
        m.insert("s".into(), AttributeValue::S("tab\there \"quoted\" \u{1} é 中 😀 \u{2028}".into()));
        m.insert("n".into(), AttributeValue::N(BIG.into()));
        m.insert("exp".into(), AttributeValue::N("-1E+5".into()));
        m.insert("b".into(), AttributeValue::B(Blob::new(all.clone())));
        m.insert("t".into(), AttributeValue::Bool(true));
        m.insert("z".into(), AttributeValue::Null(true));
        m.insert("ss".into(), AttributeValue::Ss(vec!["a".into(), "b".into()]));
        m.insert("ns".into(), AttributeValue::Ns(vec!["1".into(), BIG.into()]));
        m.insert("bs".into(), AttributeValue::Bs(vec![Blob::new(vec![0u8]), Blob::new(vec![0xffu8, 0xfe])]));
        m.insert("l".into(), AttributeValue::L(vec![AttributeValue::S("x".into()), AttributeValue::M(HashMap::new())]));
        m.insert("m".into(), AttributeValue::M([("inner".to_owned(), AttributeValue::B(Blob::new(all)))].into()));
        m
    }

    fn read_lines(files: &[ScanFile]) -> Vec<String> {
        files
            .iter()
            .flat_map(|f| std::fs::read_to_string(&f.path).unwrap().lines().map(str::to_owned).collect::<Vec<_>>())
            .collect()
    }

    /// Against the moto server of `scripts/test` (skips without `ETL_MOTO_ENDPOINT`, fails
    /// without it when `ETL_REQUIRE_MOTO=1`): segments, page sizes, the read-capacity budget,
    /// every value type through the SDK, and the errors.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moto_scan() {
        let Some((client, _)) = moto_client().await else {
            eprintln!("ETL_MOTO_ENDPOINT is not set; skipping");
            return;
        };
        let table = unique("scan");
        let total = create_table(&client, &table, 60).await;
        let base = ScanOptions {
            table: table.clone(),
            segments: 1,
            consistent_read: false,
            max_rcu_per_second: None,
            page_size: None,
        };

        for (segments, page_size) in [(1u32, None), (4, None), (3, Some(7)), (1, Some(1))] {
            let dir = tempfile::tempdir().unwrap();
            let counted = std::sync::atomic::AtomicU64::new(0);
            let opts = ScanOptions { segments, page_size, ..base.clone() };
            let files = scan_to_files(&client, &opts, dir.path(), |n| {
                counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            })
            .await
            .unwrap();
            assert_eq!(files.len(), segments as usize);
            assert_eq!(files.iter().map(|f| f.segment).collect::<Vec<_>>(), (0..segments).collect::<Vec<_>>());
            assert_eq!(files.iter().map(|f| f.items).sum::<u64>(), total as u64, "{segments} segments");
            assert_eq!(counted.into_inner(), total as u64);
            assert!(files.iter().all(|f| f.consumed_rcu > 0.0), "moto reports consumed capacity");
            let lines = read_lines(&files);
            assert_eq!(lines.len(), total);
            let mut keys: Vec<String> = Vec::new();
            for l in &lines {
                let item = decode_export_line(l);
                let Some((_, Value::S(pk))) = item.iter().find(|(k, _)| k == "PK") else { panic!("no PK in {l}") };
                keys.push(pk.to_string());
            }
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), total);
            let every = lines.iter().find(|l| l.contains("EVERY#1")).unwrap();
            assert!(every.contains(&format!("{{\"N\":\"{BIG}\"}}")), "{every}");
            assert!(every.contains("{\"N\":\"-1E+5\"}"), "moto keeps the text as sent: {every}");
            let item = decode_export_line(every);
            let all: Vec<u8> = (0..=255u8).collect();
            assert!(item.iter().any(|(k, v)| k == "b" && *v == Value::B(all.clone().into())));
            if page_size == Some(1) {
                assert!(files[0].pages >= total as u64);
            }
            eprintln!(
                "{segments} segments, page size {page_size:?}: items {:?}, pages {:?}, rcu {:?}",
                files.iter().map(|f| f.items).collect::<Vec<_>>(),
                files.iter().map(|f| f.pages).collect::<Vec<_>>(),
                files.iter().map(|f| f.consumed_rcu).collect::<Vec<_>>()
            );
        }

        // A read-capacity budget slows the scan down to about the rate (moto charges 1 RCU a page).
        let dir = tempfile::tempdir().unwrap();
        let opts = ScanOptions { segments: 2, page_size: Some(2), max_rcu_per_second: Some(10.0), ..base.clone() };
        let started = Instant::now();
        let files = scan_to_files(&client, &opts, dir.path(), |_| {}).await.unwrap();
        let rcu: f64 = files.iter().map(|f| f.consumed_rcu).sum();
        let took = started.elapsed().as_secs_f64();
        eprintln!("budget 10 RCU/s: {rcu} RCU in {took:.2}s");
        assert!(rcu >= 30.0, "{rcu}");
        // The first second's worth (the burst) and one page per segment come free.
        let least = (rcu - 10.0 - 2.0) / 10.0;
        assert!(took >= least * 0.95 && took <= least + 3.0, "{rcu} RCU in {took}s");

        // Errors.
        let missing = ScanOptions { table: unique("missing"), ..base.clone() };
        let e = scan_to_files(&client, &missing, dir.path(), |_| {}).await.unwrap_err();
        assert!(matches!(e, DynamoError::TableNotFound { .. }), "{e}");
        eprintln!("error: {e}\nhint: {}", e.hint().unwrap_or_default());

        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .credentials_provider(Credentials::new("testing", "testing", None, None, "etl-test"))
            .load()
            .await;
        let started = Instant::now();
        let e = scan_to_files(&super::client(&sdk), &base, dir.path(), |_| {}).await.unwrap_err();
        assert!(matches!(e, DynamoError::Unreachable { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "a refused connection is not retried");
        let e = e.with_endpoint(endpoint_label(&sdk));
        eprintln!("error: {e}\nhint: {}", e.hint().unwrap_or_default());
    }

    /// A consistent scan (`--consistent-read`) of a table it creates, with 1 and 4 segments:
    /// the same items, each decoded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn moto_consistent_scan() {
        let Some((client, _)) = moto_client().await else {
            eprintln!("ETL_MOTO_ENDPOINT is not set; skipping");
            return;
        };
        let table = unique("consistent");
        let total = create_table(&client, &table, 40).await;
        let mut keys_by_segments = Vec::new();
        for segments in [1u32, 4] {
            let dir = tempfile::tempdir().unwrap();
            let opts = ScanOptions {
                table: table.clone(),
                segments,
                consistent_read: true,
                max_rcu_per_second: None,
                page_size: Some(9),
            };
            let files = scan_to_files(&client, &opts, dir.path(), |_| {}).await.unwrap();
            assert_eq!(files.iter().map(|f| f.items).sum::<u64>(), total as u64, "{segments} segments");
            let mut keys: Vec<String> = read_lines(&files)
                .iter()
                .map(|l| {
                    let item = decode_export_line(l);
                    match item.iter().find(|(k, _)| k == "PK") {
                        Some((_, Value::S(pk))) => pk.to_string(),
                        _ => panic!("no PK in {l}"),
                    }
                })
                .collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), total, "{segments} segments: every item once");
            keys_by_segments.push(keys);
        }
        assert_eq!(keys_by_segments[0], keys_by_segments[1]);
    }
}
