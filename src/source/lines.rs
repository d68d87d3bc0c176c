//! Reading a data file as lines: MD5 of the compressed bytes, multi-member gzip, a cap on line
//! length that never holds an over-long line in memory.

use std::io::{self, BufRead, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use md5::{Digest, Md5};

/// Passes bytes through while hashing them and counting them for progress.
pub struct HashingReader<R> {
    inner: R,
    hasher: Md5,
    progress: Arc<AtomicU64>,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R, progress: Arc<AtomicU64>) -> Self {
        HashingReader { inner, hasher: Md5::new(), progress }
    }

    /// Reads what is left (so the digest covers the whole file) and returns the base64 MD5.
    pub fn finish(mut self) -> io::Result<String> {
        let mut sink = [0u8; 64 * 1024];
        while self.read(&mut sink)? > 0 {}
        Ok(super::md5_base64_digest(self.hasher.finalize().as_slice()))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.progress.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// One line handed out by [`LineReader`].
#[derive(Debug)]
pub enum Line<'a> {
    /// A whole line without its `\n`.
    Complete { bytes: &'a [u8], number: u64, offset: u64 },
    /// A line longer than the cap: only its first bytes are kept.
    TooLong { prefix: &'a [u8], len: u64, number: u64, offset: u64 },
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
}

/// How much of an over-long line is kept for the rejects table.
pub const TOO_LONG_PREFIX: usize = 1024;

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R, cap: usize) -> Self {
        LineReader { inner, buf: Vec::new(), cap, number: 0, offset: 0, pending: 0 }
    }

    /// The next line, or `None` at the end. A read error (such as a truncated gzip stream)
    /// is returned with the partial line still available from [`LineReader::partial`].
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
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
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                if len == 0 {
                    return Ok(None);
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
                        return Ok(Some(Line::TooLong {
                            prefix: &self.buf,
                            len: line_len,
                            number: self.number,
                            offset: start_offset,
                        }));
                    }
                    if self.buf.is_empty() {
                        // Fast path: the whole line is in the reader's buffer.
                        self.pending = i + 1;
                        let bytes = &self.inner.fill_buf()?[..i];
                        return Ok(Some(Line::Complete { bytes, number: self.number, offset: start_offset }));
                    }
                    self.buf.extend_from_slice(&chunk[..i]);
                    self.inner.consume(i + 1);
                    return Ok(Some(Line::Complete { bytes: &self.buf, number: self.number, offset: start_offset }));
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
            Ok(Some(Line::TooLong { prefix: &self.buf, len, number: self.number, offset: start_offset }))
        } else {
            Ok(Some(Line::Complete { bytes: &self.buf, number: self.number, offset: start_offset }))
        }
    }

    /// Bytes of the line that was being read when an error occurred, and its number.
    pub fn partial(&self) -> (&[u8], u64, u64) {
        (&self.buf, self.number + 1, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8], cap: usize, bufsize: usize) -> Vec<(String, u64, u64, bool)> {
        let mut r = LineReader::new(io::BufReader::with_capacity(bufsize, input), cap);
        let mut out = Vec::new();
        while let Some(line) = r.next_line().unwrap() {
            out.push(match line {
                Line::Complete { bytes, number, offset } => {
                    (String::from_utf8_lossy(bytes).into_owned(), number, offset, false)
                }
                Line::TooLong { prefix, len, number, offset } => {
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
}
