//! From frames to records, the same way for every command: each unit of a data file is decoded
//! into a [`Record`] or becomes a reject with the same reason, message and position whether
//! `etl unwind`, `etl mapping infer` or `etl mapping check` reads it.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::UnwindError;
use crate::decode::{Format, Item, Record, decode};
use crate::normalize::{Reject, RejectReason};
use crate::source::frame::{Frame, Framer, TOO_LONG_PREFIX};
use crate::source::{DataFile, Plan};

/// One unit of a data file, decoded or rejected.
pub enum Unit<'f> {
    Record { record: Record<'f>, line: u64, offset: u64, raw: &'f [u8] },
    Reject { reject: Reject, line: u64, offset: u64, raw: &'f [u8], truncated: bool },
}

/// Decodes one frame. A [`Frame::Corrupt`] is also the file's last frame: the caller warns.
pub fn unit(format: Format, frame: Frame<'_>, max_line_bytes: usize) -> Unit<'_> {
    match frame {
        Frame::Line { bytes, line, offset } => match decode(format, bytes) {
            Ok(record) => Unit::Record { record, line, offset, raw: bytes },
            Err(e) => {
                let reject = Reject::from(&e);
                let at = offset + reject.offset as u64;
                Unit::Reject { reject, line, offset: at, raw: bytes, truncated: false }
            }
        },
        Frame::TooLong { prefix, len, line, offset } => Unit::Reject {
            reject: Reject {
                reason: RejectReason::LineTooLong,
                attribute: String::new(),
                message: format!("line is {len} bytes, longer than the limit of {max_line_bytes} (`--max-line-bytes`)"),
                offset: 0,
            },
            line,
            offset,
            raw: prefix,
            truncated: true,
        },
        Frame::Corrupt { partial, line, offset, error } => Unit::Reject {
            reject: Reject {
                reason: RejectReason::CorruptFile,
                attribute: String::new(),
                message: format!("the file cannot be read past this point: {error}"),
                offset: 0,
            },
            line,
            offset,
            raw: &partial[..partial.len().min(TOO_LONG_PREFIX)],
            truncated: true,
        },
    }
}

/// The warning for a file that could not be read to its end.
pub fn corrupt_warning(file: &str, line: u64, error: &str) -> String {
    format!("`{file}` is corrupt or truncated after line {}: {error}", line.saturating_sub(1))
}

/// Where a unit was read.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    pub file: &'a str,
    pub line: u64,
}

/// Calls `f` with every item of every file, in plan order, or with the reject the unit became
/// (what `etl unwind` would reject, for the same reason). The items of an incremental export's
/// data files are the new images of their change records; deletes are skipped. Returns the
/// warnings about whole files.
pub fn each_item(
    plan: &Plan,
    max_line_bytes: usize,
    mut f: impl FnMut(At<'_>, Result<&Item<'_>, &Reject>),
) -> Result<Vec<String>, UnwindError> {
    let mut warnings = Vec::new();
    let progress = Arc::new(AtomicU64::new(0));
    for (i, file) in plan.files.iter().enumerate() {
        let incremental = plan.exports.iter().any(|e| e.window.is_some() && e.files.contains(&i));
        each_in_file(file, incremental, max_line_bytes, &progress, &mut warnings, &mut f)?;
    }
    Ok(warnings)
}

fn each_in_file(
    file: &DataFile,
    incremental: bool,
    max_line_bytes: usize,
    progress: &Arc<AtomicU64>,
    warnings: &mut Vec<String>,
    f: &mut impl FnMut(At<'_>, Result<&Item<'_>, &Reject>),
) -> Result<(), UnwindError> {
    let mut framer = Framer::open(file, max_line_bytes, progress.clone())?;
    let format = framer.format();
    while let Some(frame) = framer.next_frame() {
        if let Frame::Corrupt { line, error, .. } = &frame {
            warnings.push(corrupt_warning(&file.display, *line, error));
        }
        // As a chain run reads them: in an incremental export, a change's new image is an item
        // the table held and a delete (keys only) is no item, while an `Item` line is rejected;
        // elsewhere a change record is rejected.
        match unit(format, frame, max_line_bytes) {
            Unit::Record { record: Record::Put(_), line, .. } if incremental => {
                f(At { file: &file.display, line }, Err(&super::chain::item_in_incremental()))
            }
            Unit::Record { record: Record::Put(item), line, .. } => f(At { file: &file.display, line }, Ok(&item)),
            Unit::Record { record: Record::Change(c), line, .. } if incremental => {
                if let Some(image) = &c.new {
                    f(At { file: &file.display, line }, Ok(image));
                }
            }
            Unit::Record { record: Record::Change(_), line, .. } => {
                f(At { file: &file.display, line }, Err(&crate::normalize::change_not_applied()))
            }
            Unit::Reject { reject, line, .. } => f(At { file: &file.display, line }, Err(&reject)),
        }
    }
    let digest = framer.finish(&file.display)?;
    warnings.extend(digest.warnings);
    Ok(())
}
