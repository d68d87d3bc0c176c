//! `etl mapping infer`, `etl mapping check` and `etl mapping import`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::aws_args::AwsArgs;
use super::{ExitStatus, Printer};
use crate::mapping::check::Checker;
use crate::mapping::draft::{DISCRIMINATORS, Discriminators, Drafter};
use crate::mapping::import::ImportFormat;
use crate::normalize::Reject;
use crate::pipeline::{self, walk};
use crate::source;
use crate::store::Location;

#[derive(Debug, Subcommand)]
pub enum MappingCommand {
    /// Draft a mapping file from the data: discriminator, key templates, column types.
    Infer(InferArgs),
    /// Apply a mapping to every item without writing tables; exit 1 when anything fails.
    Check(CheckArgs),
    /// Write a mapping from an entity model: ElectroDB, OneTable, dynamodb-toolbox or NoSQL
    /// Workbench, as JSON.
    ///
    /// The mapping takes the model's discriminator, key templates (built by the library's own
    /// rules), attribute types, required fields and renames, and is checked by the mapping
    /// compiler before it is written. What has no equivalent in a mapping (computed attributes,
    /// hooks, packed attributes) is listed in a comment and printed as a warning. See
    /// `mappings/README.md` for each format and its limits.
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The model's format.
    #[arg(long = "from", value_name = "FORMAT", value_enum)]
    pub from: ModelFormat,
    /// The model, as JSON.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write the mapping here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Entity-model formats `etl mapping import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModelFormat {
    /// ElectroDB: the object given to `new Service({...})`, or one entity schema.
    Electrodb,
    /// OneTable: the schema (`format`, `version`, `indexes`, `models`, `params`).
    Onetable,
    /// dynamodb-toolbox: `entity.build(EntityDTO)` (v2), or `new Entity({...})` options (v0/v1).
    Toolbox,
    /// NoSQL Workbench: the data model export (`DataModel`, `TableFacets`).
    Workbench,
}

impl From<ModelFormat> for ImportFormat {
    fn from(f: ModelFormat) -> Self {
        match f {
            ModelFormat::Electrodb => ImportFormat::ElectroDb,
            ModelFormat::Onetable => ImportFormat::OneTable,
            ModelFormat::Toolbox => ImportFormat::Toolbox,
            ModelFormat::Workbench => ImportFormat::Workbench,
        }
    }
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
        MappingCommand::Import(a) => import(a, printer),
    }
}

/// A scratch folder for live-scan spool files, removed when dropped.
struct Spool(std::path::PathBuf);

impl Spool {
    fn new() -> Spool {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        Spool(std::env::temp_dir().join(format!("etl-mapping-{}-{nanos}", std::process::id())))
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn plan(sources: &[String], aws: &AwsArgs, spool: &Spool, printer: &Printer) -> Option<source::Plan> {
    let locations = match sources.iter().map(|s| Location::parse(s)).collect::<Result<Vec<_>, _>>() {
        Ok(l) => l,
        Err(e) => {
            printer.error(&e.to_string(), e.hint());
            return None;
        }
    };
    match source::resolve(&locations, &aws.options(), &source::live::ScanSettings::default(), &spool.0) {
        Ok(p) => Some(p),
        Err(e) => {
            printer.error_chain(&e, e.hint().as_deref());
            None
        }
    }
}

/// Walks every unit of the plan as `etl unwind` reads it; `false` (after printing the error)
/// when a file cannot be read at all. Warnings about whole files are printed when `warn`.
fn walk(
    plan: &source::Plan,
    printer: &Printer,
    warn: bool,
    f: impl FnMut(walk::At<'_>, Result<&crate::decode::Item<'_>, &Reject>),
) -> bool {
    match walk::each_item(plan, pipeline::DEFAULT_MAX_LINE_BYTES, f) {
        Ok(warnings) => {
            if warn {
                for w in &warnings {
                    printer.warn(w);
                }
            }
            true
        }
        Err(e) => {
            printer.error_chain(&e, e.hint().as_deref());
            false
        }
    }
}

fn infer(args: InferArgs, printer: &Printer) -> ExitStatus {
    let InferArgs { sources, out, type_attribute, aws } = args;
    let spool = Spool::new();
    let Some(plan) = plan(&sources, &aws, &spool, printer) else { return ExitStatus::Error };
    let (attr, note) = match type_attribute {
        Some(t) => {
            let note = format!("discriminator: `{t}` (given with `--type-attribute`)");
            (t, note)
        }
        None => {
            let mut d = Discriminators::default();
            if !walk(&plan, printer, false, |_, item| {
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
    if !walk(&plan, printer, true, |at, item| {
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
    if !walk(&plan, printer, false, |_, item| {
        if let Ok(item) = item {
            draft.verify(item, &templates);
        }
    }) {
        return ExitStatus::Error;
    }
    let source_note = sources.join(", ");
    let text = draft.to_toml(&note, &source_note);
    // The draft must load; a failure here is a bug in the drafter.
    if let Err(e) = crate::mapping::parse_str(std::path::Path::new("<draft>"), &text) {
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
    let mapping = match super::mapping_files::load(&mapping) {
        Ok(m) => m,
        Err(e) => {
            printer.mapping_errors(&e);
            return ExitStatus::Error;
        }
    };
    let spool = Spool::new();
    let Some(plan) = plan(&sources, &aws, &spool, printer) else { return ExitStatus::Error };
    let mut checker = Checker::new(&mapping);
    if !walk(&plan, printer, true, |at, item| checker.observe(at.file, at.line, item)) {
        return ExitStatus::Error;
    }
    if let Err(e) = printer.data(&checker.render()) {
        return super::stdout_failed(printer, &e);
    }
    if checker.failed() { ExitStatus::Failure } else { ExitStatus::Success }
}

fn import(args: ImportArgs, printer: &Printer) -> ExitStatus {
    let ImportArgs { from, file, out } = args;
    let text = match super::mapping_files::read_text(&file) {
        Ok(t) => t,
        Err(kind) => {
            let why = match kind {
                crate::mapping::MappingErrorKind::Io { message } => message,
                other => other.to_string(),
            };
            printer.error(&format!("cannot read the model `{}`: {why}", file.display()), None);
            return ExitStatus::Error;
        }
    };
    let imported = match crate::mapping::import::import(from.into(), &file, &text) {
        Ok(i) => i,
        Err(e) => {
            // Rendered like mapping errors: each with its location and `hint:`.
            printer.mapping_errors(&e);
            return ExitStatus::Error;
        }
    };
    for w in &imported.warnings {
        printer.warn(&format!("not carried over: {w}"));
    }
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, &imported.text) {
                printer.error(&format!("cannot write `{}`: {e}", path.display()), None);
                return ExitStatus::Error;
            }
            printer.info(&format!("wrote `{}` ({} entities)", path.display(), imported.mapping.entities.len()));
        }
        None => {
            if let Err(e) = printer.data(&imported.text) {
                return super::stdout_failed(printer, &e);
            }
        }
    }
    ExitStatus::Success
}
