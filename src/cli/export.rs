//! `etl export`: start a DynamoDB Export to S3 (and wait for it), full or incremental (the next
//! window after what an etl output holds, from its `_etl/state.json`), list a table's exports,
//! and the AWS flags shared by every command that talks to AWS.
//!
//! stdout carries only what a script consumes: the export ARN, or with `--wait` the manifest
//! location (so a job can run `etl unwind "$(etl export start ... --wait)"`), or the list.
//! Status lines, the spinner, warnings and errors go to stderr.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

pub use super::aws_args::AwsArgs;
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::table::{Align, Table};
use super::{ExitStatus, Printer};
use crate::aws::dynamodb::{self, DynamoError};
use crate::aws::export::{
    self, ExportFormat, ExportInfo, ExportSummaryInfo, ExportView, IncrementalWindow, StartExport,
};
use crate::state::{RunState, STATE_FILE, StateError};
use crate::store::{Location, LocationError, StoreError};

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Start a full export of a table to S3, or with `--incremental --since DIR` the next
    /// incremental export after what DIR holds (the table needs point-in-time recovery).
    Start(StartArgs),
    /// List a table's exports: ARN, status, type and start time.
    List(ListArgs),
}

/// Data format of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum FormatArg {
    /// DynamoDB JSON lines (`.json.gz`).
    #[default]
    DynamodbJson,
    /// Amazon Ion text lines (`.ion.gz`); `etl unwind` reads both to the same tables.
    Ion,
}

/// How `etl export list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ListFormat {
    /// Aligned columns.
    #[default]
    Table,
    /// A JSON array of objects.
    Json,
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// Table to export.
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// S3 bucket to export into; it must already exist.
    #[arg(long, value_name = "BUCKET")]
    pub bucket: String,
    /// Key prefix in the bucket; the export is written under `<PREFIX>/AWSDynamoDB/<ExportId>/`.
    #[arg(long, value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// Data format of the exported files.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = FormatArg::DynamodbJson)]
    pub format: FormatArg,
    /// Wait for the export to finish and print its manifest location on stdout instead of its ARN.
    #[arg(long)]
    pub wait: bool,
    /// How often `--wait` checks the export's status (for example `30s`, `2m`).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, requires = "wait")]
    pub poll_interval: Duration,
    /// Account ID that owns the bucket, when it is not the caller's account.
    #[arg(long, value_name = "ACCOUNT_ID", hide_short_help = true)]
    pub bucket_owner: Option<String>,
    /// Idempotency token: the same token within 8 hours returns that export instead of starting another.
    #[arg(long, value_name = "TOKEN", hide_short_help = true)]
    pub client_token: Option<String>,
    /// Start an incremental export: the changes from the end of what `--since` holds to now
    /// (15 minutes to 24 hours; a longer time is cut at 24 hours, a shorter one refused).
    #[arg(long, requires = "since")]
    pub incremental: bool,
    /// An etl output (local or `s3://`): the window starts where the exports its committed
    /// `_etl/run.json` records end.
    #[arg(long, value_name = "DIR", requires = "incremental")]
    pub since: Option<String>,
    /// What an incremental export's change records carry.
    #[arg(long, value_enum, default_value_t, requires = "incremental")]
    pub view: ViewArg,
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// The `ExportViewType` of an incremental export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ViewArg {
    /// `NEW_AND_OLD_IMAGES`: updates and deletes also carry the old image.
    #[default]
    NewAndOldImages,
    /// `NEW_IMAGE`: deletes carry only the key.
    NewImage,
}

/// Why `--since` gives no window to export.
#[derive(Debug, thiserror::Error)]
pub enum SinceError {
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Manifest(#[from] crate::sink::ManifestError),
    #[error("`{dir}` has no `{STATE_FILE}`, so it says nothing of what it holds")]
    NoState { dir: String },
    #[error("`{dir}` holds no export with a valid end time (`exportToTime` or `exportTime`)")]
    NoTime { dir: String },
    #[error("`{dir}` holds table `{held}`, not `{table}`")]
    OtherTable { dir: String, held: String, table: String },
    #[error(transparent)]
    TooSoon(#[from] export::TooSoon),
}

impl SinceError {
    fn hint(&self) -> Option<String> {
        match self {
            SinceError::Location(e) => e.hint().map(str::to_owned),
            SinceError::Store(e) => Some(e.hint().to_owned()),
            SinceError::State(e) => e.hint(),
            SinceError::Manifest(_) => None,
            SinceError::NoState { .. } | SinceError::NoTime { .. } => Some(
                "unwind a full export into it first (`etl export start --wait`, then `etl unwind`), or name the output a scheduled job writes".into(),
            ),
            SinceError::OtherTable { .. } => Some("name the table the output was made from, or another `--since`".into()),
            SinceError::TooSoon(e) => {
                Some(format!("run again at or after {}; nothing was started", e.ready))
            }
        }
    }

    /// Too soon is the data's answer (exit 1); anything else is usage or configuration (exit 2).
    fn status(&self) -> ExitStatus {
        if matches!(self, SinceError::TooSoon(_)) { ExitStatus::Failure } else { ExitStatus::Error }
    }
}

/// What the output at `since` holds, local or in an object store: the state its committed
/// `_etl/run.json` records (or, for an output made from a full export alone, the state of the
/// exports it lists). The commit record, not `_etl/state.json`, which is a copy written after it
/// and can be ahead of it when a run was killed in between; an output without `run.json` is read
/// from its `state.json`.
async fn read_state(since: &str, aws: &AwsArgs) -> Result<RunState, SinceError> {
    let no_state = || SinceError::NoState { dir: since.to_owned() };
    let of_manifest = |m: crate::sink::RunManifest| {
        m.state.or_else(|| (!m.exports.is_empty()).then(|| crate::state::of_exports(&m.exports, &[], None)))
    };
    match Location::parse(since)? {
        Location::Object(url) => {
            let store = crate::store::open(&url, &aws.options()).await?;
            let get = async |file: &str| -> Result<Option<(String, Vec<u8>)>, SinceError> {
                let key = format!("{}{file}", url.dir_prefix());
                let at = url.url_of(&key);
                let got = match object_store::ObjectStoreExt::get(&store, &object_store::path::Path::from(key.as_str()))
                    .await
                {
                    Ok(got) => got,
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(StoreError::object("read", &at, &e).into()),
                };
                let bytes = got.bytes().await.map_err(|e| StoreError::object("read", &at, &e))?;
                Ok(Some((at, bytes.to_vec())))
            };
            if let Some((at, bytes)) = get(crate::sink::local::RUN_REPORT).await? {
                return of_manifest(crate::sink::RunManifest::parse(&at, &bytes)?).ok_or_else(no_state);
            }
            let (at, bytes) = get(STATE_FILE).await?.ok_or_else(no_state)?;
            serde_json::from_slice(&bytes).map_err(|e| StateError::Invalid { path: at, message: e.to_string() }.into())
        }
        Location::Path(dir) => {
            if dir.join(crate::sink::local::RUN_REPORT).is_file() {
                return of_manifest(crate::sink::RunManifest::read(&dir)?).ok_or_else(no_state);
            }
            crate::state::read_local(&dir)?.ok_or_else(no_state)
        }
        Location::Stdin | Location::DynamoDb { .. } => Err(LocationError::WrongRole {
            given: since.to_owned(),
            role: "an etl output (a folder or an `s3://` prefix)",
        }
        .into()),
    }
}

/// The next window after what `state` holds (the latest end of its exports), at `now`.
fn window_after(
    state: &RunState,
    since: &str,
    table: &str,
    now: chrono::DateTime<chrono::Utc>,
    view: ExportView,
) -> Result<IncrementalWindow, SinceError> {
    if let Some(held) = &state.table_arn {
        let same = if table.contains(":table/") { held == table } else { held.rsplit("table/").next() == Some(table) };
        if !same {
            return Err(SinceError::OtherTable { dir: since.to_owned(), held: held.clone(), table: table.to_owned() });
        }
    }
    let last = state
        .applied
        .iter()
        .filter_map(|a| a.to_time.as_deref().or(a.export_time.as_deref()))
        .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .max()
        .ok_or_else(|| SinceError::NoTime { dir: since.to_owned() })?;
    Ok(export::next_window(last, now, view)?)
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Table whose exports to list.
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// Output format.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = ListFormat::Table)]
    pub format: ListFormat,
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// `--poll-interval`: a duration ([`super::sql::parse_duration`]) of more than 0 and at most a day.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = super::sql::parse_duration(s)?;
    if d.is_zero() || d > Duration::from_secs(86_400) {
        return Err(format!("`{}` must be more than 0 and at most a day", s.trim()));
    }
    Ok(d)
}

/// Runs an `etl export` command on a current-thread runtime.
pub fn run(cmd: ExportCommand, printer: &Printer) -> ExitStatus {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            printer.error(&format!("cannot start the async runtime: {e}"), None);
            return ExitStatus::Error;
        }
    };
    match cmd {
        ExportCommand::Start(args) => runtime.block_on(start(args, printer)),
        ExportCommand::List(args) => runtime.block_on(list(args, printer)),
    }
}

async fn start(args: StartArgs, printer: &Printer) -> ExitStatus {
    // Destructure every field so a new flag cannot be forgotten here.
    let StartArgs {
        table,
        bucket,
        prefix,
        format,
        wait,
        poll_interval,
        bucket_owner,
        client_token,
        incremental,
        since,
        view,
        aws,
    } = args;
    let window = match (incremental, since) {
        (true, Some(since)) => {
            let view = match view {
                ViewArg::NewAndOldImages => ExportView::NewAndOldImages,
                ViewArg::NewImage => ExportView::NewImage,
            };
            let found = match read_state(&since, &aws).await {
                Ok(state) => window_after(&state, &since, &table, chrono::Utc::now(), view),
                Err(e) => Err(e),
            };
            match found {
                Ok(w) => Some(w),
                Err(e) => {
                    printer.error_chain(&e, e.hint().as_deref());
                    return e.status();
                }
            }
        }
        _ => None,
    };
    let sdk = aws.options().sdk_config().await;
    let endpoint = dynamodb::endpoint_label(&sdk);
    let client = dynamodb::client(&sdk);
    let req = StartExport {
        table: table.clone(),
        bucket,
        prefix,
        format: match format {
            FormatArg::DynamodbJson => ExportFormat::DynamodbJson,
            FormatArg::Ion => ExportFormat::Ion,
        },
        bucket_owner,
        client_token,
        incremental: window,
    };
    let info = match export::start_export(&client, &req).await {
        Ok(info) => info,
        Err(e) => return fail(printer, e, endpoint),
    };
    match &window {
        Some(w) => printer.info(&format!(
            "started incremental export `{}` of table `{table}` ({} to {}, {}): {}",
            info.arn,
            export::iso(&w.from),
            export::iso(&w.to),
            w.view.as_str(),
            info.status
        )),
        None => printer.info(&format!("started export `{}` of table `{table}`: {}", info.arn, info.status)),
    }
    if !wait {
        return print_stdout(printer, &info.arn);
    }

    let started = Instant::now();
    let spinner = spinner(printer);
    let result = export::wait_export(&client, &info.arn, poll_interval, |i| {
        spinner.set_message(format!("export of `{table}`: {}", i.status));
    })
    .await;
    spinner.finish_and_clear();
    let done = match result {
        Ok(done) => done,
        Err(e) => return fail(printer, e, endpoint),
    };
    printer.info(&completed_line(&done, started.elapsed()));
    let Some(url) = export::manifest_url(&done) else {
        printer.error(&format!("export `{}` completed but its description names no bucket", done.arn), None);
        return ExitStatus::Error;
    };
    if !export::manifest_is_exact(&done) {
        printer.warn(&format!(
            "the service did not report the export's manifest (`ExportManifest`; moto never does); \
             printing the export's prefix `{url}`, which holds `AWSDynamoDB/<ExportId>/`"
        ));
    }
    print_stdout(printer, &url)
}

fn completed_line(info: &ExportInfo, elapsed: Duration) -> String {
    let items = match info.item_count {
        Some(n) => format!("{} items", super::printer::group(n.max(0) as u64)),
        None => "item count not reported".to_owned(),
    };
    format!("export `{}` completed after {}s: {items}", info.arn, elapsed.as_secs())
}

async fn list(args: ListArgs, printer: &Printer) -> ExitStatus {
    let ListArgs { table, format, aws } = args;
    let sdk = aws.options().sdk_config().await;
    let endpoint = dynamodb::endpoint_label(&sdk);
    let client = dynamodb::client(&sdk);
    let exports = match export::list_exports(&client, &table).await {
        Ok(e) => e,
        Err(e) => return fail(printer, e, endpoint),
    };
    match format {
        ListFormat::Json => match serde_json::to_string_pretty(&exports) {
            Ok(text) => print_stdout(printer, &text),
            Err(e) => {
                printer.error(&format!("cannot encode the export list as JSON: {e}"), None);
                ExitStatus::Error
            }
        },
        ListFormat::Table if exports.is_empty() => {
            printer.info(&format!("table `{table}` has no exports"));
            ExitStatus::Success
        }
        ListFormat::Table => print_stdout(printer, render_table(&exports).trim_end()),
    }
}

/// The list as aligned columns with a header and a dashed rule, `-` for unknown values.
fn render_table(exports: &[ExportSummaryInfo]) -> String {
    let mut table = Table::new(&[
        ("export", Align::Left),
        ("status", Align::Left),
        ("type", Align::Left),
        ("started", Align::Left),
    ]);
    for e in exports {
        table.row([
            e.arn.clone(),
            e.status.clone(),
            e.export_type.clone().unwrap_or_else(|| "-".into()),
            e.start_time.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table.render()
}

/// A spinner on stderr, hidden when stderr is not a terminal or with `--quiet`.
fn spinner(printer: &Printer) -> ProgressBar {
    if printer.quiet() || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message("waiting for the export");
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Writes `text` and a newline to stdout; a closed pipe is not an error.
fn print_stdout(printer: &Printer, text: &str) -> ExitStatus {
    match printer.data(&format!("{text}\n")) {
        Ok(()) => ExitStatus::Success,
        Err(e) => super::stdout_failed(printer, &e),
    }
}

/// Prints the error with its hint; an export that ended `FAILED` exits 1, anything else 2.
fn fail(printer: &Printer, e: DynamoError, endpoint: Option<String>) -> ExitStatus {
    let e = e.with_endpoint(endpoint);
    printer.error_chain(&e, e.hint().as_deref());
    if e.is_export_failure() { ExitStatus::Failure } else { ExitStatus::Error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(subcommand)]
        cmd: ExportCommand,
    }

    fn parse(args: &[&str]) -> Result<ExportCommand, clap::Error> {
        TestCli::try_parse_from(std::iter::once("export").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["0s", "-1s", "abc", "1d", "NaNs", "infs", "25h"] {
            assert!(parse_duration(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn start_arguments() {
        let cmd = parse(&[
            "start",
            "--table",
            "T",
            "--bucket",
            "B",
            "--prefix",
            "p/q",
            "--format",
            "ion",
            "--wait",
            "--poll-interval",
            "2s",
            "--region",
            "eu-west-1",
            "--endpoint-url",
            "http://127.0.0.1:1",
        ])
        .unwrap();
        let ExportCommand::Start(a) = cmd else { panic!("not start") };
        assert_eq!((a.table.as_str(), a.bucket.as_str(), a.prefix.as_deref()), ("T", "B", Some("p/q")));
        assert_eq!(a.format, FormatArg::Ion);
        assert!(a.wait);
        assert_eq!(a.poll_interval, Duration::from_secs(2));
        let o = a.aws.options();
        assert_eq!(o.region.as_deref(), Some("eu-west-1"));
        assert_eq!(o.endpoint_url.as_deref(), Some("http://127.0.0.1:1"));

        let ExportCommand::Start(a) = parse(&["start", "--table", "T", "--bucket", "B"]).unwrap() else {
            panic!("not start")
        };
        assert_eq!(a.format, FormatArg::DynamodbJson);
        assert!(!a.wait);
        assert_eq!(a.poll_interval, Duration::from_secs(10));

        assert!(parse(&["start", "--table", "T", "--bucket", "B", "--poll-interval", "5s"]).is_err());
        assert!(parse(&["start", "--table", "T"]).is_err());
        assert!(parse(&["start", "--table", "T", "--bucket", "B", "--format", "csv"]).is_err());
    }

    #[test]
    fn list_arguments() {
        let ExportCommand::List(a) = parse(&["list", "--table", "T", "--format", "json"]).unwrap() else {
            panic!("not list")
        };
        assert_eq!(a.format, ListFormat::Json);
        let ExportCommand::List(a) = parse(&["list", "--table", "T"]).unwrap() else { panic!("not list") };
        assert_eq!(a.format, ListFormat::Table);
    }

    #[test]
    fn table_rendering() {
        let rows = vec![
            ExportSummaryInfo {
                arn: "arn:aws:dynamodb:us-east-1:1:table/T/export/01".into(),
                status: "COMPLETED".into(),
                export_type: Some("FULL_EXPORT".into()),
                start_time: Some("2026-01-14T10:00:00Z".into()),
                ..Default::default()
            },
            ExportSummaryInfo { arn: "arn:x".into(), status: "IN_PROGRESS".into(), ..Default::default() },
        ];
        let text = render_table(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("export "));
        assert!(lines[1].starts_with("------"));
        assert!(lines[2].contains("COMPLETED") && lines[2].contains("FULL_EXPORT") && lines[2].ends_with('Z'));
        assert!(lines[3].contains("IN_PROGRESS") && lines[3].ends_with('-'));
        // Columns line up.
        assert_eq!(lines[2].find("COMPLETED"), lines[3].find("IN_PROGRESS"));
    }

    #[test]
    fn completed_message() {
        let info = ExportInfo { arn: "a".into(), item_count: Some(1234), ..Default::default() };
        assert_eq!(completed_line(&info, Duration::from_secs(3)), "export `a` completed after 3s: 1,234 items");
        let info = ExportInfo { arn: "a".into(), ..Default::default() };
        assert!(completed_line(&info, Duration::ZERO).ends_with("item count not reported"));
    }
}
