//! `etl sql`: one query, a file of statements, or an interactive shell.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use super::table::{Align, Table};
use super::{ExitStatus, Printer};
use crate::sql::format::{FormatError, OutputFormat, write_result};
use crate::sql::{Session, SqlError, SqlOptions};

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// The query to run. Without a query and without `-f`, starts an interactive shell.
    #[arg(value_name = "QUERY", conflicts_with = "file")]
    pub query: Option<String>,
    /// A committed etl output (what `etl unwind --out` wrote): a folder or `s3://bucket/prefix`.
    #[arg(long, short, value_name = "DIR|S3_URL")]
    pub data: String,
    /// Run the statements in this file.
    #[arg(long, short, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Fill the named parameter `$NAME` of the query (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Output format [default: table on a terminal, csv otherwise].
    #[arg(long, value_enum)]
    pub format: Option<OutputFormat>,
    /// Write results to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Allow statements that change files, tables or settings (DDL, DML, COPY, SET).
    #[arg(long)]
    pub allow_write: bool,
    /// Stop queries that need more memory than this (for example `512M`, `2G`).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<usize>,
    /// Stop queries that run longer than this (for example `30s`, `5m`, `500ms`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Read a Delta output as an earlier run left it: an output version (0 is the first run,
    /// then one per run) or a time (`2026-12-01T08:00:00Z`, `2026-12-01`: the last run
    /// committed by then).
    #[arg(long, value_name = "VERSION|TIME")]
    pub as_of: Option<crate::sql::AsOf>,
    /// Run the queries on an Apache DataFusion Ballista cluster (its scheduler: `df://HOST:PORT`,
    /// for example one `etl ballista scheduler` started) instead of here. The executors read the
    /// tables' files themselves: the output must be on `s3://` or at the same path on every
    /// machine. Not with `--memory-limit`: memory is the executors' to limit.
    #[arg(long, value_name = "df://HOST:PORT", conflicts_with = "memory_limit")]
    pub ballista: Option<crate::sql::cluster::ClusterUrl>,
    #[command(flatten)]
    pub aws: super::aws_args::AwsArgs,
}

pub(super) fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let mult: usize = match s[i..].to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                other => return Err(format!("unknown unit `{other}`; use K, M, G or T")),
            };
            (&s[..i], mult)
        }
        None => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a size such as `512M`"))?;
    Ok((n * mult as f64) as usize)
}

/// A duration such as `30s`, `500ms`, `2m` or `1h`; a bare number is seconds.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let n: f64 = s[..split].parse().map_err(|_| format!("`{s}` is not a duration such as `30s`"))?;
    let secs = match &s[split..] {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(format!("unknown unit `{other}`; use ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is not a duration of zero or more"))
}

pub fn sql(args: SqlArgs, printer: &Printer) -> ExitStatus {
    let SqlArgs { query, data, file, params, format, output, allow_write, memory_limit, timeout, as_of, ballista, aws } =
        args;
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            printer.error(&format!("cannot start the query runtime: {e}"), None);
            return ExitStatus::Error;
        }
    };
    let data = match crate::store::Target::parse(&data) {
        Ok(t) => t,
        Err(e) => {
            printer.error(&e.to_string(), e.hint());
            return ExitStatus::Error;
        }
    };
    let opts = SqlOptions { data, allow_write, memory_limit, timeout, params, as_of, cluster: ballista };
    runtime.block_on(async move {
        let session = match Session::open(opts, &aws.options()).await {
            Ok(s) => s,
            Err(e) => return fail(printer, &e),
        };
        let text = match (query, file) {
            (Some(q), _) => q,
            (None, Some(f)) => match std::fs::read_to_string(&f) {
                Ok(t) => t,
                Err(e) => {
                    printer.error(&format!("cannot read `{}`: {e}", f.display()), None);
                    return ExitStatus::Error;
                }
            },
            (None, None) => return shell(&session, printer, format).await,
        };
        let to_terminal = output.is_none() && std::io::stdout().is_terminal();
        let format = format.unwrap_or(if to_terminal { OutputFormat::Table } else { OutputFormat::Csv });
        if format == OutputFormat::Parquet && to_terminal {
            printer.error("parquet output to a terminal", Some("pass `--output FILE`, or pipe stdout into a file"));
            return ExitStatus::Error;
        }
        let statements = match session.statements(&text) {
            Ok(s) => s,
            Err(e) => return fail(printer, &e),
        };
        if let Err(e) = session.check_all(&statements).await {
            return fail(printer, &e);
        }
        let ran = match &output {
            Some(path) => {
                let file = match std::fs::File::create(path) {
                    Ok(f) => f,
                    Err(e) => {
                        printer.error(&format!("cannot create `{}`: {e}", path.display()), None);
                        return ExitStatus::Error;
                    }
                };
                let mut out = std::io::BufWriter::new(file);
                match run_all(&session, statements, format, &mut out, printer).await {
                    Ok(()) => out.flush().map_err(|e| Failure::Write(e.into())),
                    Err(e) => Err(e),
                }
            }
            None => {
                let mut out = printer.stdout();
                let ran = run_all(&session, statements, format, &mut out, printer).await;
                out.finish(ran)
            }
        };
        match ran {
            Ok(()) => ExitStatus::Success,
            Err(Failure::Query(e)) => fail(printer, &e),
            Err(Failure::Write(e)) => {
                printer.error(&e.to_string(), None);
                ExitStatus::Error
            }
        }
    })
}

/// Why running statements stopped.
enum Failure {
    Query(SqlError),
    Write(FormatError),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Write(e.into())
    }
}

/// Runs each statement and writes its result to `out`, its row count and time to stderr.
async fn run_all(
    session: &Session,
    statements: Vec<datafusion::sql::parser::Statement>,
    format: OutputFormat,
    out: &mut (dyn std::io::Write + Send),
    printer: &Printer,
) -> Result<(), Failure> {
    for stmt in statements {
        let started = Instant::now();
        let result = session.run_statement(stmt).await.map_err(Failure::Query)?;
        write_result(&result, format, out).map_err(Failure::Write)?;
        // Flushed before the count: a reader that left early stops the run here, and the count
        // is never printed for rows that did not get out.
        out.flush()?;
        printer.info(&format!("{} rows in {:.3}s", result.rows(), started.elapsed().as_secs_f64()));
    }
    Ok(())
}

fn fail(printer: &Printer, e: &SqlError) -> ExitStatus {
    printer.error_chain(e, e.hint().as_deref());
    status_of(e)
}

/// The exit status of a failed query: 1 when its limits stopped it, 2 otherwise.
fn status_of(e: &SqlError) -> ExitStatus {
    match e {
        SqlError::Timeout(_) => ExitStatus::Failure,
        e if e.is_resources_exhausted() => ExitStatus::Failure,
        _ => ExitStatus::Error,
    }
}

const SHELL_HELP: &str = "\\d          list tables with row counts (and Delta versions)\n\\d TABLE    show a table's columns and their DynamoDB origin (and Delta commit)\n\\q          quit\nstatements end with `;` and may span lines; up/down recall earlier statements, Ctrl-R searches them;\nCtrl-C drops the line (or cancels a running query), Ctrl-D quits";

/// The history file, shared by every session of the user.
fn history_path() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".etl_history"))
}

/// Whether `text` is a whole input: empty, a backslash command, or statements ending with `;`.
fn is_complete(text: &str) -> bool {
    let t = text.trim();
    t.is_empty() || t.starts_with('\\') || t.ends_with(';')
}

/// The shell's only editing rule: Enter ends the input once it [`is_complete`], and otherwise
/// starts a new line of the same statement.
struct ShellHelper;

impl rustyline::Helper for ShellHelper {}
impl rustyline::completion::Completer for ShellHelper {
    type Candidate = String;
}
impl rustyline::hint::Hinter for ShellHelper {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for ShellHelper {}
impl rustyline::validate::Validator for ShellHelper {
    fn validate(
        &self,
        ctx: &mut rustyline::validate::ValidationContext<'_>,
    ) -> rustyline::Result<rustyline::validate::ValidationResult> {
        use rustyline::validate::ValidationResult;
        Ok(if is_complete(ctx.input()) { ValidationResult::Valid(None) } else { ValidationResult::Incomplete })
    }
}

type LineEditor = rustyline::Editor<ShellHelper, rustyline::history::FileHistory>;

/// A line editor on the terminal (never on stdout, which carries results), with the history
/// file loaded; `None` when stdin is no terminal or the terminal cannot edit (`TERM=dumb`).
fn line_editor(history: Option<&std::path::Path>) -> Option<rustyline::Result<LineEditor>> {
    let dumb = std::env::var("TERM").is_ok_and(|t| matches!(t.as_str(), "dumb" | "cons25" | "emacs"));
    if !std::io::stdin().is_terminal() || dumb {
        return None;
    }
    let config = rustyline::Config::builder()
        .behavior(rustyline::Behavior::PreferTerm)
        .auto_add_history(false)
        .max_history_size(10_000)
        .map(rustyline::config::Builder::build);
    Some(config.and_then(|config| {
        let mut editor = LineEditor::with_config(config)?;
        editor.set_helper(Some(ShellHelper));
        if let Some(path) = history
            && path.exists()
        {
            editor.load_history(path)?;
        }
        Ok(editor)
    }))
}

/// What the shell does after an input.
enum Next {
    Read,
    Quit,
    /// Stop with exit status 2: results could not be written (not a closed pipe, which is
    /// [`Next::Quit`]).
    Fail,
    /// A statement or command failed (its error shown) with this status; the shell goes on.
    Failed(ExitStatus),
}

async fn shell(session: &Session, printer: &Printer, format: Option<OutputFormat>) -> ExitStatus {
    let format = format.unwrap_or(OutputFormat::Table);
    let history = history_path();
    let editor = match line_editor(history.as_deref()) {
        None => None,
        Some(Ok(e)) => Some(e),
        Some(Err(e)) => {
            printer.error(&format!("cannot start the line editor: {e}"), None);
            return ExitStatus::Error;
        }
    };
    printer.info(&format!("etl sql on `{}`; \\? for help, \\q to quit", session.data_dir()));
    let Some(mut editor) = editor else {
        // Piped input: lines gathered into inputs by the same rule, no editing, no history. A
        // statement that fails does not stop the rest; the shell then exits with the first
        // failure's status, so a script knows.
        use std::io::BufRead as _;
        let mut input = String::new();
        let mut failed = None;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            input.push_str(&line);
            input.push('\n');
            if is_complete(&input) {
                let text = std::mem::take(&mut input);
                match run_input(session, printer, format, &text, false).await {
                    Next::Read => {}
                    Next::Failed(status) => {
                        failed.get_or_insert(status);
                    }
                    Next::Quit => break,
                    Next::Fail => return ExitStatus::Error,
                }
            }
        }
        return failed.unwrap_or(ExitStatus::Success);
    };
    loop {
        // The editor blocks this thread; the runtime's workers are elsewhere, and nothing runs
        // between queries.
        let text = match editor.readline("etl> ") {
            Ok(text) => text,
            // Ctrl-C drops the line; Ctrl-D on an empty line quits.
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => {
                printer.error(&format!("cannot read from the terminal: {e}"), None);
                return ExitStatus::Error;
            }
        };
        let entry = text.trim();
        if !entry.is_empty() {
            // A history file that cannot be written does not stop the shell.
            let _ = editor.add_history_entry(entry);
            if let Some(path) = &history
                && let Err(e) = editor.append_history(path)
            {
                printer.warn(&format!("cannot save the history to `{}`: {e}", path.display()));
            }
        }
        match run_input(session, printer, format, &text, true).await {
            Next::Read | Next::Failed(_) => {}
            Next::Quit => break,
            Next::Fail => return ExitStatus::Error,
        }
    }
    ExitStatus::Success
}

/// Runs one input: a backslash command, or statements whose results go to stdout. On a terminal,
/// Ctrl-C stops a running query, not the shell.
async fn run_input(session: &Session, printer: &Printer, format: OutputFormat, text: &str, interactive: bool) -> Next {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Next::Read;
    }
    if trimmed.starts_with('\\') {
        let mut parts = trimmed.split_whitespace();
        let shown = match (parts.next(), parts.next()) {
            (Some("\\q"), _) => return Next::Quit,
            (Some("\\d"), table) => match describe(session, table) {
                Ok(s) => printer.data(&s),
                Err(e) => {
                    printer.error(&e.to_string(), e.hint().as_deref());
                    return Next::Failed(status_of(&e));
                }
            },
            _ => printer.data(&format!("{SHELL_HELP}\n")),
        };
        return shown_or_quit(printer, shown);
    }
    let started = Instant::now();
    let run = tokio::select! {
        r = session.run(text) => r,
        _ = tokio::signal::ctrl_c(), if interactive => {
            printer.error("query cancelled", None);
            return Next::Read;
        }
    };
    let results = match run {
        Ok(results) => results,
        Err(e) => {
            printer.error_chain(&e, e.hint().as_deref());
            return Next::Failed(status_of(&e));
        }
    };
    for r in &results {
        let mut out = printer.stdout();
        let written = write_result(r, format, &mut out);
        if let Err(e) = out.finish(written) {
            printer.error(&e.to_string(), None);
            return Next::Fail;
        }
        if printer.stdout_closed() {
            return Next::Quit;
        }
        printer.info(&format!("{} rows in {:.3}s", r.rows(), started.elapsed().as_secs_f64()));
    }
    Next::Read
}

/// The shell ends when its output can no longer be written: the reader closed it, or it failed.
fn shown_or_quit(printer: &Printer, shown: std::io::Result<()>) -> Next {
    match shown {
        Ok(()) if !printer.stdout_closed() => Next::Read,
        Ok(()) => Next::Quit,
        Err(e) => {
            printer.error(&format!("cannot write to stdout: {e}"), None);
            Next::Fail
        }
    }
}

/// `\d`: the tables with their row and file counts; `\d TABLE`: a table's columns with their
/// types and DynamoDB origin.
fn describe(session: &Session, table: Option<&str>) -> Result<String, SqlError> {
    match table {
        None => {
            // A Delta output also shows each table's version.
            if session.tables().iter().any(|t| t.delta.is_some()) {
                let mut t = Table::new(&[
                    ("table", Align::Left),
                    ("rows", Align::Right),
                    ("files", Align::Right),
                    ("version", Align::Right),
                ]);
                for info in session.tables() {
                    let version = info.delta.as_ref().map(|d| d.version.to_string()).unwrap_or_default();
                    t.row([info.name.clone(), info.rows.to_string(), info.files.len().to_string(), version]);
                }
                return Ok(t.render());
            }
            let mut t = Table::new(&[("table", Align::Left), ("rows", Align::Right), ("files", Align::Right)]);
            for info in session.tables() {
                t.row([info.name.clone(), info.rows.to_string(), info.files.len().to_string()]);
            }
            Ok(t.render())
        }
        Some(name) => {
            let mut t = Table::new(&[
                ("column", Align::Left),
                ("type", Align::Left),
                ("nullable", Align::Left),
                ("dynamodb", Align::Left),
            ]);
            let info = session.table(name)?;
            for c in info.columns() {
                t.row([c.name, c.type_name, if c.nullable { "yes" } else { "no" }.to_owned(), c.origin]);
            }
            let mut shown = t.render();
            if let Some(d) = &info.delta {
                let commit = match (&d.operation, &d.committed_at) {
                    (Some(op), Some(at)) => format!(", committed {at} by `{op}`"),
                    (None, Some(at)) => format!(", committed {at}"),
                    _ => String::new(),
                };
                shown.push_str(&format!("Delta table at version {}{commit}\n", d.version));
            }
            Ok(shown)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert!(parse_size("12Q").is_err());
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}
