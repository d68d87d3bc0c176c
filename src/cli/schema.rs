//! `etl schema diff OLD NEW`: the differences between two committed outputs' table schema
//! contracts, per table, on stdout (as text, or with `--format json` as one JSON object for
//! scripts); the exit status says whether there were any, like diff(1).
//!
//! Reads each output's contracts through the sink's reader (what its `_etl/run.json` commits,
//! local or `s3://`) and compares them with [`crate::schema::diff`]; holds no comparison logic.

use clap::{Args, Subcommand, ValueEnum};

use super::{ExitStatus, Printer, aws_args};
use crate::schema::diff;
use crate::sink::manifest::read_contracts;
use crate::store::Target;

#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// Print how the tables' schema contracts (`_etl/schema/<table>.json`) of two outputs differ,
    /// table by table: tables added or gone, columns added or gone, widened, narrowed or
    /// retyped, `dynamodb.type` metadata, the attribute a column reads, nullability. Nothing is
    /// printed when they are the same.
    #[command(
        after_help = "Exit status (as diff(1)): 0 the schemas are the same; 1 they differ; 2 an output cannot be read."
    )]
    Diff(DiffArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The older output: a folder or `s3://bucket/prefix` written by `etl unwind`.
    #[arg(value_name = "OLD")]
    pub old: String,
    /// The newer output.
    #[arg(value_name = "NEW")]
    pub new: String,
    /// How the differences are printed.
    #[arg(long, value_enum, default_value_t)]
    pub format: DiffFormat,
    #[command(flatten)]
    pub aws: aws_args::AwsArgs,
}

/// How `etl schema diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DiffFormat {
    /// Lines per table, as in the `--on-drift` report.
    #[default]
    Text,
    /// One JSON object, `{"tables": [{"table", "changes": [{"change", …}]}]}` (the `drift` of
    /// `_etl/run.json`), also when the schemas are the same (`{"tables": []}`).
    Json,
}

pub fn run(cmd: SchemaCommand, printer: &Printer) -> ExitStatus {
    match cmd {
        SchemaCommand::Diff(args) => schema_diff(args, printer),
    }
}

fn schema_diff(args: DiffArgs, printer: &Printer) -> ExitStatus {
    let DiffArgs { old, new, format, aws } = args;
    let aws = aws.options();
    let mut contracts = Vec::with_capacity(2);
    for given in [&old, &new] {
        let target = match Target::parse(given) {
            Ok(t) => t,
            Err(e) => {
                printer.error(&e.to_string(), e.hint());
                return ExitStatus::Error;
            }
        };
        match read_contracts(&target, &aws) {
            Ok(Some(c)) => contracts.push(c),
            Ok(None) => {
                printer.error(
                    &format!("`{given}` is not an etl output (it has no `_etl/run.json`)"),
                    Some("name folders or `s3://` prefixes that `etl unwind --out` wrote"),
                );
                return ExitStatus::Error;
            }
            Err(e) => {
                printer.error_chain(&e, e.hint());
                return ExitStatus::Error;
            }
        }
    }
    let drift = diff::diff(&contracts[0], &contracts[1]);
    if format == DiffFormat::Json {
        let text = match serde_json::to_string_pretty(&drift) {
            Ok(t) => t + "\n",
            Err(e) => {
                printer.error(&format!("cannot encode the differences as JSON: {e}"), None);
                return ExitStatus::Error;
            }
        };
        if let Err(e) = printer.data(&text) {
            return super::stdout_failed(printer, &e);
        }
    }
    if drift.is_empty() {
        printer.info(&format!("the schemas of `{old}` and `{new}` are the same"));
        return ExitStatus::Success;
    }
    if format == DiffFormat::Text
        && let Err(e) = printer.data(&drift.to_string())
    {
        return super::stdout_failed(printer, &e);
    }
    printer.info(&format!("{} in {} of the tables", drift.counts(), drift.tables.len()));
    ExitStatus::Failure
}
