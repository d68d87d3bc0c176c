//! A plain sequential walk over every item of a plan, for commands that look at the data
//! without writing tables (`etl mapping infer`, `etl mapping check`).

use std::io::{BufReader, Read as _};

use flate2::read::MultiGzDecoder;

use super::UnwindError;
use crate::decode::json::{decode_export_line, decode_item_object};
use crate::decode::scan::parse_scan_output;
use crate::decode::{DecodeError, Item};
use crate::source::lines::{Line, LineReader};
use crate::source::{self, DataFile, Layout, Plan};

/// Where an item was read.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    pub file: &'a str,
    pub line: u64,
}

/// Calls `f` with every item (or its decode error) of every file, in plan order.
pub fn each_item(
    plan: &Plan,
    max_line_bytes: usize,
    mut f: impl FnMut(At<'_>, Result<&Item<'_>, &DecodeError>),
) -> Result<(), UnwindError> {
    for file in &plan.files {
        let io = |source| UnwindError::Io { action: "read", path: file.display.clone(), source };
        match file.layout {
            Layout::ExportLines => {
                let raw = source::open(file).map_err(io)?;
                let reader: Box<dyn std::io::BufRead> = if file.gzip {
                    Box::new(BufReader::with_capacity(256 * 1024, MultiGzDecoder::new(raw)))
                } else {
                    Box::new(BufReader::with_capacity(256 * 1024, raw))
                };
                let mut lines = LineReader::new(reader, max_line_bytes);
                while let Some(line) = lines.next_line().map_err(io)? {
                    let Line::Complete { bytes, number, .. } = line else { continue };
                    if bytes.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    let at = At { file: &file.display, line: number };
                    match std::str::from_utf8(bytes) {
                        Ok(text) => match decode_export_line(text) {
                            Ok(item) => f(at, Ok(&item)),
                            Err(e) => f(at, Err(&e)),
                        },
                        Err(_) => {
                            let e = DecodeError::new(crate::decode::RejectReason::InvalidUtf8, "", 0, "invalid UTF-8");
                            f(at, Err(&e));
                        }
                    }
                }
            }
            Layout::ScanOutput => scan_file(file, &mut f)?,
        }
    }
    Ok(())
}

fn scan_file(file: &DataFile, f: &mut impl FnMut(At<'_>, Result<&Item<'_>, &DecodeError>)) -> Result<(), UnwindError> {
    let mut bytes = Vec::new();
    source::open(file).and_then(|mut r| r.read_to_end(&mut bytes)).map_err(|source| UnwindError::Io {
        action: "read",
        path: file.display.clone(),
        source,
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|e| UnwindError::ScanUtf8 {
        file: file.display.clone(),
        line: 1 + memchr::memchr_iter(b'\n', &bytes[..e.valid_up_to()]).count() as u64,
    })?;
    let scan = parse_scan_output(text).map_err(|source| UnwindError::Scan { file: file.display.clone(), source })?;
    for it in &scan.items {
        let at = At { file: &file.display, line: it.line };
        match decode_item_object(it.text) {
            Ok(item) => f(at, Ok(&item)),
            Err(e) => f(at, Err(&e)),
        }
    }
    Ok(())
}
