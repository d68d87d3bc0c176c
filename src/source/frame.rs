//! Framing: a data file as a sequence of [`Frame`]s, the units of wire text to decode.
//!
//! One reader for every command (`etl unwind`, `etl mapping infer`, `etl mapping check`), so
//! they all see the same units and the same problems: the MD5 of the stored (compressed) bytes,
//! multi-member gzip, line splitting with a cap on line length that never holds an over-long
//! line in memory, blank lines skipped, and a damaged or truncated file turned into one last
//! [`Frame::Corrupt`] instead of an abort. An object store that fails a read after its retries
//! is not a damaged file: the frames end and [`Framer::finish`] returns the store's error, so
//! the run fails (exit 2; a vanished listed object is an integrity failure, exit 1) instead of
//! publishing what was read with the file counted as corrupt. Scan output (`aws dynamodb scan` documents) is framed
//! into one unit per item, at the item's line.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;
use md5::{Digest, Md5};

use super::{DataFile, Layout, SourceError};
use crate::decode::Format;
use crate::decode::scan::{ScanError, parse_scan_output};

/// Passes bytes through while hashing them and counting them for progress.
pub struct HashingReader<R> {
    inner: R,
    hasher: Md5,
    progress: Arc<AtomicU64>,
    /// Bytes read so far.
    pub bytes: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R, progress: Arc<AtomicU64>) -> Self {
        HashingReader { inner, hasher: Md5::new(), progress, bytes: 0 }
    }

    /// Reads what is left (so the digest covers the whole file) and returns the base64 MD5.
    pub fn finish(self) -> io::Result<String> {
        self.finish_counted().map(|(md5, _)| md5)
    }

    /// Like [`HashingReader::finish`], with the number of bytes read in all.
    pub fn finish_counted(mut self) -> io::Result<(String, u64)> {
        let mut sink = vec![0u8; 64 * 1024];
        loop {
            match self.read(&mut sink) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok((super::md5_base64_digest(self.hasher.finalize().as_slice()), self.bytes))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        self.progress.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// One line handed out by [`LineReader`].
#[derive(Debug)]
pub enum RawLine<'a> {
    /// A whole line without its `\n`.
    Complete { bytes: &'a [u8], number: u64, offset: u64 },
    /// A line longer than the cap: only its first bytes are kept.
    TooLong { prefix: &'a [u8], len: u64, number: u64, offset: u64 },
    /// The stream failed (a truncated gzip stream, a read error): nothing can be read after it.
    /// `partial` is the start of the line being read, `number` its line number.
    Failed { error: io::Error, partial: &'a [u8], number: u64, offset: u64 },
}

/// Splits a byte stream into lines of at most `cap` bytes.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    cap: usize,
    number: u64,
    offset: u64,
    /// Bytes of the reader's buffer to consume before the next read.
    pending: usize,
    /// Lines of only whitespace are counted but not handed out.
    skip_blank: bool,
}

/// How much of an over-long line is kept for the rejects table.
pub const TOO_LONG_PREFIX: usize = 1024;

fn is_blank(b: &[u8]) -> bool {
    b.iter().all(u8::is_ascii_whitespace)
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R, cap: usize) -> Self {
        LineReader { inner, buf: Vec::new(), cap, number: 0, offset: 0, pending: 0, skip_blank: false }
    }

    /// Counts lines of only whitespace without handing them out.
    pub fn skipping_blank_lines(mut self) -> Self {
        self.skip_blank = true;
        self
    }

    /// Lines read so far, blank ones included.
    pub fn lines(&self) -> u64 {
        self.number
    }

    pub fn into_inner(self) -> R {
        self.inner
    }

    /// The next line, or `None` at the end. A read error (such as a truncated gzip stream) is a
    /// [`RawLine::Failed`] holding the start of the line being read.
    pub fn next_line(&mut self) -> Option<RawLine<'_>> {
        'line: loop {
            if self.pending > 0 {
                self.inner.consume(self.pending);
                self.pending = 0;
            }
            self.buf.clear();
            let start_offset = self.offset;
            let mut len: u64 = 0;
            let mut too_long = false;
            loop {
                let chunk = match self.inner.fill_buf() {
                    Ok(c) => c,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(error) => {
                        self.buf.truncate(TOO_LONG_PREFIX);
                        return Some(RawLine::Failed {
                            error,
                            partial: &self.buf,
                            number: self.number + 1,
                            offset: self.offset,
                        });
                    }
                };
                if chunk.is_empty() {
                    if len == 0 {
                        return None;
                    }
                    break; // last line without a newline
                }
                match memchr::memchr(b'\n', chunk) {
                    Some(i) => {
                        let line_len = len + i as u64;
                        self.number += 1;
                        self.offset += i as u64 + 1;
                        if !too_long && line_len as usize > self.cap {
                            too_long = true;
                            let keep = TOO_LONG_PREFIX.saturating_sub(self.buf.len()).min(i);
                            self.buf.extend_from_slice(&chunk[..keep]);
                        }
                        if too_long {
                            self.inner.consume(i + 1);
                            return Some(RawLine::TooLong {
                                prefix: &self.buf,
                                len: line_len,
                                number: self.number,
                                offset: start_offset,
                            });
                        }
                        if self.buf.is_empty() {
                            if self.skip_blank && is_blank(&chunk[..i]) {
                                self.inner.consume(i + 1);
                                continue 'line;
                            }
                            // Fast path: the whole line is in the reader's buffer.
                            self.pending = i + 1;
                            return match self.inner.fill_buf() {
                                Ok(b) => Some(RawLine::Complete {
                                    bytes: &b[..i],
                                    number: self.number,
                                    offset: start_offset,
                                }),
                                Err(error) => Some(RawLine::Failed {
                                    error,
                                    partial: &[],
                                    number: self.number,
                                    offset: start_offset,
                                }),
                            };
                        }
                        self.buf.extend_from_slice(&chunk[..i]);
                        self.inner.consume(i + 1);
                        if self.skip_blank && is_blank(&self.buf) {
                            continue 'line;
                        }
                        return Some(RawLine::Complete { bytes: &self.buf, number: self.number, offset: start_offset });
                    }
                    None => {
                        let n = chunk.len();
                        len += n as u64;
                        self.offset += n as u64;
                        if too_long || len as usize > self.cap {
                            if !too_long {
                                too_long = true;
                                self.buf.truncate(TOO_LONG_PREFIX);
                            }
                            let keep = TOO_LONG_PREFIX.saturating_sub(self.buf.len()).min(n);
                            self.buf.extend_from_slice(&chunk[..keep]);
                        } else {
                            self.buf.extend_from_slice(chunk);
                        }
                        self.inner.consume(n);
                    }
                }
            }
            self.number += 1;
            if too_long {
                return Some(RawLine::TooLong { prefix: &self.buf, len, number: self.number, offset: start_offset });
            }
            if self.skip_blank && is_blank(&self.buf) {
                return None;
            }
            return Some(RawLine::Complete { bytes: &self.buf, number: self.number, offset: start_offset });
        }
    }
}

/// One unit of a data file, in file order.
#[derive(Debug)]
pub enum Frame<'a> {
    /// A unit of wire text to decode: a non-blank line of export data, or one item of a scan
    /// document. `line` is 1-based; `offset` is the unit's byte offset in the decompressed file.
    Line { bytes: &'a [u8], line: u64, offset: u64 },
    /// A line longer than the limit: only its first [`TOO_LONG_PREFIX`] bytes are kept.
    TooLong { prefix: &'a [u8], len: u64, line: u64, offset: u64 },
    /// The file cannot be read past this point (a truncated or damaged gzip stream, a failed
    /// read); the last frame of the file. `partial` holds the start of the unreadable line.
    Corrupt { partial: &'a [u8], line: u64, offset: u64, error: String },
}

/// What framing a file found, once it is read to the end.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileDigest {
    /// Base64 MD5 of the stored bytes (compressed, as manifests list them).
    pub md5_base64: String,
    /// Stored bytes read.
    pub bytes: u64,
    /// Lines read, blank ones included (scan output: lines of the document).
    pub lines: u64,
    /// Frames handed out: the file's items, as manifests count them.
    pub units: u64,
    /// Problems with the file as a whole that are not rejects (a partial scan output).
    pub warnings: Vec<String>,
}

/// Stored bytes, gunzipped when the file is gzip.
enum Decompress {
    Gzip(Box<MultiGzDecoder<HashingReader<Box<dyn Read + Send>>>>),
    Plain(HashingReader<Box<dyn Read + Send>>),
}

impl Decompress {
    fn into_hashing(self) -> HashingReader<Box<dyn Read + Send>> {
        match self {
            Decompress::Gzip(g) => (*g).into_inner(),
            Decompress::Plain(h) => h,
        }
    }
}

impl Read for Decompress {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Decompress::Gzip(g) => g.read(buf),
            Decompress::Plain(h) => h.read(buf),
        }
    }
}

enum Inner {
    Lines(Box<LineReader<BufReader<Decompress>>>),
    /// A scan document read whole: unit spans `(offset, len, line)`.
    Scan {
        text: Vec<u8>,
        units: Vec<(usize, usize, u64)>,
        next: usize,
        digest: FileDigest,
    },
}

/// Frames one data file. Call [`Framer::next_frame`] until `None`, then [`Framer::finish`].
pub struct Framer {
    inner: Inner,
    format: Format,
    units: u64,
    done: bool,
    corrupt: bool,
    /// The object store's error that ended the frames ([`store_failure`]).
    failed: Option<SourceError>,
    /// Whether a manifest lists the file (a vanished object is then an integrity failure).
    listed: bool,
}

/// Reader buffer size: large enough that most lines are handed out without a copy.
const BUFFER: usize = 256 * 1024;

impl Framer {
    /// Opens `file` for framing. `progress` is credited with every stored byte read.
    ///
    /// Scan output is read and split into items here; a file that is not scan output at all is
    /// an error (no unit of it could be read).
    pub fn open(file: &DataFile, max_line_bytes: usize, progress: Arc<AtomicU64>) -> Result<Framer, SourceError> {
        let raw = super::open(file).map_err(|source| {
            // Listed by a manifest and there when the run was planned: the export changed under
            // the run, an integrity failure like a missing file (exit 1), not an I/O error.
            if source.kind() == std::io::ErrorKind::NotFound && file.expected.is_some() {
                SourceError::VanishedDataFile { path: file.display.clone() }
            } else {
                SourceError::Io { path: file.display.clone(), source }
            }
        })?;
        let hashing = HashingReader::new(raw, progress);
        let decompress = if file.gzip {
            Decompress::Gzip(Box::new(MultiGzDecoder::new(hashing)))
        } else {
            Decompress::Plain(hashing)
        };
        let format = file.format();
        let inner = match file.layout {
            Layout::ExportLines | Layout::IonLines => Inner::Lines(Box::new(
                LineReader::new(BufReader::with_capacity(BUFFER, decompress), max_line_bytes).skipping_blank_lines(),
            )),
            Layout::ScanOutput => {
                let mut d = decompress;
                let mut text = Vec::new();
                d.read_to_end(&mut text).map_err(|source| SourceError::Io { path: file.display.clone(), source })?;
                let hashing = d.into_hashing();
                let bytes = hashing.bytes;
                let md5_base64 =
                    hashing.finish().map_err(|source| SourceError::Io { path: file.display.clone(), source })?;
                let scan_err = |source: ScanError| SourceError::Scan { path: file.display.clone(), source };
                let (units, lines, warnings) = {
                    let t = std::str::from_utf8(&text).map_err(|e| SourceError::ScanUtf8 {
                        path: file.display.clone(),
                        line: 1 + memchr::memchr_iter(b'\n', &text[..e.valid_up_to()]).count() as u64,
                    })?;
                    let scan = parse_scan_output(t).map_err(scan_err)?;
                    let units: Vec<(usize, usize, u64)> =
                        scan.items.iter().map(|it| (it.offset, it.text.len(), it.line)).collect();
                    let lines = 1 + memchr::memchr_iter(b'\n', t.trim_end().as_bytes()).count() as u64;
                    let warnings = scan
                        .partial_marker
                        .map(|marker| {
                            format!(
                                "`{}` carries `{marker}`: this scan output is only part of the table (run `aws dynamodb scan` without `--max-items`/`--limit` to get all of it)",
                                file.display
                            )
                        })
                        .into_iter()
                        .collect();
                    (units, lines, warnings)
                };
                let digest = FileDigest { md5_base64, bytes, lines, units: 0, warnings };
                Inner::Scan { text, units, next: 0, digest }
            }
        };
        Ok(Framer {
            inner,
            format,
            units: 0,
            done: false,
            corrupt: false,
            failed: None,
            listed: file.expected.is_some(),
        })
    }

    /// The wire format of this file's units.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The next frame, or `None` at the end of the file (or after a [`Frame::Corrupt`]).
    pub fn next_frame(&mut self) -> Option<Frame<'_>> {
        if self.done {
            return None;
        }
        match &mut self.inner {
            Inner::Scan { text, units, next, .. } => {
                let Some(&(offset, len, line)) = units.get(*next) else {
                    self.done = true;
                    return None;
                };
                *next += 1;
                self.units += 1;
                Some(Frame::Line { bytes: &text[offset..offset + len], line, offset: offset as u64 })
            }
            Inner::Lines(reader) => match reader.next_line() {
                Some(RawLine::Complete { bytes, number, offset }) => {
                    self.units += 1;
                    Some(Frame::Line { bytes, line: number, offset })
                }
                Some(RawLine::TooLong { prefix, len, number, offset }) => {
                    self.units += 1;
                    Some(Frame::TooLong { prefix, len, line: number, offset })
                }
                Some(RawLine::Failed { error, partial, number, offset }) => {
                    self.done = true;
                    let error = match store_failure(error) {
                        Ok(failed) => {
                            self.failed = Some(failed);
                            return None;
                        }
                        Err(error) => error,
                    };
                    self.units += 1;
                    self.corrupt = true;
                    Some(Frame::Corrupt { partial, line: number, offset, error: error.to_string() })
                }
                None => {
                    self.done = true;
                    None
                }
            },
        }
    }

    /// Reads what is left of the file (so the MD5 covers all of it) and says what was read.
    /// Fails with the object store's error when a read failed after the store's retries.
    pub fn finish(self, display: &str) -> Result<FileDigest, SourceError> {
        match self.failed {
            Some(SourceError::NotFound { .. }) if self.listed => {
                return Err(SourceError::VanishedDataFile { path: display.to_owned() });
            }
            Some(e) => return Err(e),
            None => {}
        }
        match self.inner {
            Inner::Scan { mut digest, .. } => {
                digest.units = self.units;
                Ok(digest)
            }
            Inner::Lines(reader) => {
                // After a corrupt frame the line being read counts too.
                let lines = if self.corrupt { reader.lines() + 1 } else { reader.lines() };
                let hashing = reader.into_inner().into_inner().into_hashing();
                let (md5_base64, bytes) =
                    hashing.finish_counted().map_err(|source| SourceError::Io { path: display.to_owned(), source })?;
                Ok(FileDigest { md5_base64, bytes, lines, units: self.units, warnings: Vec::new() })
            }
        }
    }
}

/// The [`SourceError`] an object-store read failed with (carried inside the `io::Error` that
/// [`super::object::ObjectReader`] returns), or the error back when the bytes themselves are bad.
fn store_failure(error: io::Error) -> Result<SourceError, io::Error> {
    if !error.get_ref().is_some_and(|e| e.is::<SourceError>()) {
        return Err(error);
    }
    match error.into_inner().map(|e| e.downcast::<SourceError>()) {
        Some(Ok(e)) => Ok(*e),
        // Unreachable after the check above; keep the error as a corrupt frame then.
        Some(Err(e)) => Err(io::Error::other(e)),
        None => Err(io::Error::other("read failed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8], cap: usize, bufsize: usize) -> Vec<(String, u64, u64, bool)> {
        let mut r = LineReader::new(io::BufReader::with_capacity(bufsize, input), cap);
        let mut out = Vec::new();
        while let Some(line) = r.next_line() {
            out.push(match line {
                RawLine::Complete { bytes, number, offset } => {
                    (String::from_utf8_lossy(bytes).into_owned(), number, offset, false)
                }
                RawLine::Failed { error, .. } => panic!("{error}"),
                RawLine::TooLong { prefix, len, number, offset } => {
                    assert!(prefix.len() <= TOO_LONG_PREFIX);
                    (format!("{}…{len}", String::from_utf8_lossy(&prefix[..prefix.len().min(3)])), number, offset, true)
                }
            });
        }
        out
    }

    #[test]
    fn splits_lines_across_buffer_boundaries() {
        let input = b"abc\n\nlonger line here\nlast";
        for bufsize in [1, 2, 3, 5, 64] {
            let got = collect(input, 100, bufsize);
            assert_eq!(
                got,
                vec![
                    ("abc".into(), 1, 0, false),
                    ("".into(), 2, 4, false),
                    ("longer line here".into(), 3, 5, false),
                    ("last".into(), 4, 22, false)
                ],
                "bufsize {bufsize}"
            );
        }
    }

    #[test]
    fn over_long_lines_are_cut_without_losing_the_next() {
        let mut input = vec![b'x'; 5000];
        input.extend_from_slice(b"\nok\n");
        for bufsize in [7, 64, 8192] {
            let got = collect(&input, 100, bufsize);
            assert_eq!(got, vec![("xxx…5000".into(), 1, 0, true), ("ok".into(), 2, 5001, false)], "bufsize {bufsize}");
        }
    }

    #[test]
    fn a_listed_file_gone_at_open_is_an_integrity_failure_a_bare_one_an_io_error() {
        let tmp = tempfile::tempdir().unwrap();
        let gone = tmp.path().join("gone.json.gz");
        let file = |expected| DataFile {
            input: super::super::Input::Path(gone.clone()),
            display: "gone.json.gz".into(),
            gzip: true,
            layout: Layout::ExportLines,
            size: 10,
            expected,
        };
        let listed = file(Some(super::super::Expected { item_count: 1, md5_base64: "x".into() }));
        let e = Framer::open(&listed, 1024, Arc::default()).err().expect("no file to open");
        assert!(matches!(&e, SourceError::VanishedDataFile { path } if path == "gone.json.gz"), "{e}");
        assert!(e.is_integrity());
        let e = Framer::open(&file(None), 1024, Arc::default()).err().expect("no file to open");
        assert!(matches!(&e, SourceError::Io { .. }) && !e.is_integrity(), "{e}");
    }

    /// Gzip bytes, then a read that fails as an object store's does after its retries.
    struct FailingStore {
        head: Vec<u8>,
        error: Option<SourceError>,
    }

    impl Read for FailingStore {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if !self.head.is_empty() {
                let n = buf.len().min(self.head.len());
                buf[..n].copy_from_slice(&self.head[..n]);
                self.head.drain(..n);
                return Ok(n);
            }
            match self.error.take() {
                Some(e) => Err(io::Error::other(e)),
                None => Ok(0),
            }
        }
    }

    #[test]
    fn a_failed_store_read_is_the_stores_error_not_a_corrupt_file() {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"{\"Item\":{}}\n".repeat(1000).as_slice()).unwrap();
        let bytes = gz.finish().unwrap();
        let failing = |error| FailingStore { head: bytes[..bytes.len() / 2].to_vec(), error: Some(error) };

        // Through gzip and the line reader, the store's error arrives whole and is recognised.
        let store = SourceError::NotFound { path: "s3://b/k.json.gz".into() };
        let mut reader = LineReader::new(BufReader::new(MultiGzDecoder::new(failing(store))), 1024);
        let error = loop {
            match reader.next_line().expect("a failure before the end") {
                RawLine::Failed { error, .. } => break error,
                RawLine::Complete { .. } | RawLine::TooLong { .. } => {}
            }
        };
        assert!(matches!(store_failure(error), Ok(SourceError::NotFound { .. })));

        // Bytes cut short (no store error: the file ends) are a corrupt file, as before.
        let mut reader = LineReader::new(BufReader::new(MultiGzDecoder::new(&bytes[..bytes.len() / 2])), 1024);
        let error = loop {
            match reader.next_line().expect("a failure before the end") {
                RawLine::Failed { error, .. } => break error,
                RawLine::Complete { .. } | RawLine::TooLong { .. } => {}
            }
        };
        assert!(store_failure(error).is_err());
        assert!(store_failure(io::Error::new(io::ErrorKind::InvalidData, "bad gzip")).is_err());
    }
}
