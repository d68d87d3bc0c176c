//! `etl mapping infer` and `etl mapping check`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::aws_args::AwsArgs;
use super::{ExitStatus, Printer};
use crate::mapping::check::Checker;
use crate::mapping::draft::{DISCRIMINATORS, Discriminators, Drafter};
use crate::pipeline::{self, each::each_item};
use crate::source;

#[derive(Debug, Subcommand)]
pub enum MappingCommand {
    /// Draft a mapping file from the data: discriminator, key templates, column types.
    Infer(InferArgs),
    /// Apply a mapping to every item without writing tables; exit 1 when anything fails.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct InferArgs {
    /// Inputs, as for `etl unwind`.
    #[arg(required = true, value_name = "SOURCE")]
    pub sources: Vec<String>,
    /// Write the draft here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Use this attribute as the entity discriminator instead of looking for the conventions
    /// in use.
    #[arg(long, value_name = "NAME")]
    pub type_attribute: Option<String>,
    #[command(flatten)]
    pub aws: AwsArgs,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Mapping files or folders of them (repeatable).
    #[arg(long, required = true, value_name = "FILE|DIR")]
    pub mapping: Vec<PathBuf>,
    /// Inputs, as for `etl unwind`.
    #[arg(required = true, value_name = "SOURCE")]
    pub sources: Vec<String>,
    #[command(flatten)]
    pub aws: AwsArgs,
}

pub fn run(cmd: MappingCommand, printer: &Printer) -> ExitStatus {
    match cmd {
        MappingCommand::Infer(a) => infer(a, printer),
        MappingCommand::Check(a) => check(a, printer),
    }
}

fn plan(sources: &[String], aws: &AwsArgs, printer: &Printer) -> Option<source::Plan> {
    match source::resolve(sources, &aws.options()) {
        Ok(p) => Some(p),
        Err(e) => {
            printer.error_chain(&e, e.hint().as_deref());
            None
        }
    }
}

fn walk(
    plan: &source::Plan,
    printer: &Printer,
    f: impl FnMut(pipeline::each::At<'_>, Result<&crate::decode::Item<'_>, &crate::decode::DecodeError>),
) -> bool {
    match each_item(plan, pipeline::DEFAULT_MAX_LINE_BYTES, f) {
        Ok(()) => true,
        Err(e) => {
            printer.error_chain(&e, e.hint().as_deref());
            false
        }
    }
}

fn infer(args: InferArgs, printer: &Printer) -> ExitStatus {
    let InferArgs { sources, out, type_attribute, aws } = args;
    let Some(plan) = plan(&sources, &aws, printer) else { return ExitStatus::Error };
    let (attr, note) = match type_attribute {
        Some(t) => {
            let note = format!("discriminator: `{t}` (given with `--type-attribute`)");
            (t, note)
        }
        None => {
            let mut d = Discriminators::default();
            if !walk(&plan, printer, |_, item| {
                if let Ok(item) = item {
                    d.observe(item);
                }
            }) {
                return ExitStatus::Error;
            }
            match d.choose() {
                Some((name, who, n)) => {
                    let pct = 100.0 * n as f64 / d.items.max(1) as f64;
                    let note = format!("discriminator: `{name}` ({who}) on {n} of {} items ({pct:.1}%)", d.items);
                    printer.info(&note);
                    (name.to_owned(), note)
                }
                None => {
                    let looked: Vec<String> = DISCRIMINATORS.iter().map(|(n, _)| format!("`{n}`")).collect();
                    printer.error(
                        &format!("no entity discriminator found: no item has {}", looked.join(", ")),
                        Some("name the attribute that tells entities apart with `--type-attribute`"),
                    );
                    return ExitStatus::Error;
                }
            }
        }
    };
    let mut drafter = Drafter::new(&attr);
    let mut file_index = std::collections::HashMap::new();
    if !walk(&plan, printer, |at, item| {
        let n = file_index.len() as u32;
        let fi = *file_index.entry(at.file.to_owned()).or_insert(n);
        if let Ok(item) = item {
            drafter.observe(item, fi, at.line);
        }
    }) {
        return ExitStatus::Error;
    }
    let mut draft = drafter.finish();
    let templates = draft.templates();
    if !walk(&plan, printer, |_, item| {
        if let Ok(item) = item {
            draft.verify(item, &templates);
        }
    }) {
        return ExitStatus::Error;
    }
    let source_note = sources.join(", ");
    let text = draft.to_toml(&note, &source_note);
    // The draft must load; a failure here is a bug in the drafter.
    if let Err(e) = crate::mapping::file::parse_str(std::path::Path::new("<draft>"), &text) {
        printer.mapping_errors(&e);
        printer.error("the drafted mapping does not load", Some("this is a bug in etl; please report it"));
        return ExitStatus::Error;
    }
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, &text) {
                printer.error(&format!("cannot write `{}`: {e}", path.display()), None);
                return ExitStatus::Error;
            }
            printer.info(&format!("wrote `{}` ({} entities)", path.display(), draft.entities.len()));
        }
        None => {
            if let Err(e) = printer.data(&text) {
                return super::stdout_failed(printer, &e);
            }
        }
    }
    ExitStatus::Success
}

fn check(args: CheckArgs, printer: &Printer) -> ExitStatus {
    let CheckArgs { mapping, sources, aws } = args;
    let mapping = match crate::mapping::file::load(&mapping) {
        Ok(m) => m,
        Err(e) => {
            printer.mapping_errors(&e);
            return ExitStatus::Error;
        }
    };
    let Some(plan) = plan(&sources, &aws, printer) else { return ExitStatus::Error };
    let mut checker = Checker::new(&mapping);
    if !walk(&plan, printer, |at, item| checker.observe(at.file, at.line, item)) {
        return ExitStatus::Error;
    }
    if let Err(e) = printer.data(&checker.render()) {
        return super::stdout_failed(printer, &e);
    }
    if checker.failed() { ExitStatus::Failure } else { ExitStatus::Success }
}
