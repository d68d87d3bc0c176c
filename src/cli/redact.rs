//! The log writer: each log line reaches stderr with AWS access key ids masked.
//!
//! With `ETL_LOG=trace`, the AWS SDK logs signed requests, whose `Authorization` header names the
//! access key id (`Credential=AKIA…/20260101/…`); such logs get pasted into tickets. This writer
//! masks, in every line before it is written, each token that looks like an access key id (a
//! key-id prefix such as `AKIA` or `ASIA` followed by 16 or more capitals and digits) and the
//! `AWS_ACCESS_KEY_ID` of the environment, whatever its form. The SDK never logs the secret key
//! or the session token, so there is nothing else to mask. Like the printer, it drops a write
//! that fails: a log line nobody can read must not crash a run.

use std::borrow::Cow;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Prefixes of AWS access key ids: long-term (`AKIA`), temporary (`ASIA`), and the bearer and
/// context-specific credentials some services issue (`ABIA`, `ACCA`).
const KEY_ID_PREFIXES: [&str; 4] = ["AKIA", "ASIA", "ABIA", "ACCA"];

/// Characters that follow the prefix in a key id; IAM ids are at least 16 characters.
const KEY_ID_MIN_TAIL: usize = 16;

/// Masks access key ids in text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Key ids known from the configuration, masked wherever they stand as a whole token.
    known: Vec<String>,
}

impl Redactor {
    /// A redactor that also masks `AWS_ACCESS_KEY_ID` from the environment, when set.
    pub fn from_env() -> Redactor {
        let known = std::env::var("AWS_ACCESS_KEY_ID").ok().filter(|id| id.trim().len() >= 3);
        Redactor { known: known.into_iter().map(|id| id.trim().to_owned()).collect() }
    }

    /// `text` with every access key id masked: a key-id prefix is kept (it says which kind of
    /// key was used), everything after it becomes `*`; a configured id becomes `*` whole.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut spans: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, characters kept)
        let bytes = text.as_bytes();
        let word = |b: u8| b.is_ascii_alphanumeric();
        for prefix in KEY_ID_PREFIXES {
            for (start, _) in text.match_indices(prefix) {
                if start > 0 && word(bytes[start - 1]) {
                    continue;
                }
                let tail = bytes[start + prefix.len()..]
                    .iter()
                    .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
                    .count();
                if tail >= KEY_ID_MIN_TAIL {
                    spans.push((start, start + prefix.len() + tail, prefix.len()));
                }
            }
        }
        for id in &self.known {
            for (start, _) in text.match_indices(id.as_str()) {
                let end = start + id.len();
                let bounded = (start == 0 || !word(bytes[start - 1])) && (end == bytes.len() || !word(bytes[end]));
                if bounded {
                    spans.push((start, end, 0));
                }
            }
        }
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        // Leftmost first; of two spans from the same place, the longer, then the one that keeps
        // a prefix (an id both configured and key-shaped keeps its `AKIA`).
        spans.sort_unstable_by_key(|&(start, end, keep)| (start, std::cmp::Reverse(end), std::cmp::Reverse(keep)));
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, keep) in spans {
            if end <= at {
                continue;
            }
            // A span that starts inside one already masked keeps nothing of its own.
            let keep = if start < at { 0 } else { keep };
            let start = start.max(at);
            out.push_str(&text[at..start]);
            let masked = &text[start..end];
            let keep = keep.min(masked.len());
            out.push_str(&masked[..keep]);
            out.extend(std::iter::repeat_n('*', masked[keep..].chars().count()));
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }
}

/// Makes one [`RedactedLine`] per log event for `tracing_subscriber`.
#[derive(Debug, Clone)]
pub struct RedactingStderr {
    redactor: Redactor,
}

impl RedactingStderr {
    pub fn new(redactor: Redactor) -> RedactingStderr {
        RedactingStderr { redactor }
    }
}

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactedLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactedLine { buf: Vec::new(), redactor: &self.redactor }
    }
}

/// One formatted log event, collected whole, masked and written to stderr when dropped (the
/// formatter drops each writer after its event, so a key id cannot be split across writes).
pub struct RedactedLine<'a> {
    buf: Vec<u8>,
    redactor: &'a Redactor,
}

impl Write for RedactedLine<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.buf);
        let masked = self.redactor.redact(&text);
        let mut err = io::stderr().lock();
        let _ = err.write_all(masked.as_bytes()).and_then(|()| err.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_key_ids_by_shape() {
        let r = Redactor::default();
        let line = "authorization: AWS4-HMAC-SHA256 Credential=AKIAFAKEFAKEFAKE1234/20260101/eu-west-1/s3/aws4_request";
        let masked = r.redact(line);
        assert!(!masked.contains("AKIAFAKEFAKEFAKE1234"), "{masked}");
        assert!(masked.contains("Credential=AKIA****************/20260101"), "{masked}");
        // Temporary keys, and ids longer than 20 characters.
        assert_eq!(r.redact("key ASIAQWERTYUIOPASDFGH1 x"), "key ASIA***************** x");
    }

    #[test]
    fn leaves_lookalikes_alone() {
        let r = Redactor::default();
        for text in [
            "AKIA is a prefix",
            "AKIASHORT123",              // too short for a key id
            "XAKIAFAKEFAKEFAKE1234",     // inside a longer word
            "akiafakefakefake1234",      // key ids are capitals
            "table AKIA_FAKE_FAKE_FAKE", // underscores are not key characters
        ] {
            assert_eq!(r.redact(text), text);
        }
        assert!(matches!(r.redact("nothing to hide"), Cow::Borrowed(_)));
    }

    #[test]
    fn masks_the_configured_id_whatever_its_form() {
        let r = Redactor { known: vec!["minio-key-42".into()] };
        assert_eq!(r.redact("Credential=minio-key-42/2026"), "Credential=************/2026");
        // Only as a whole token.
        assert_eq!(r.redact("xminio-key-42"), "xminio-key-42");
        // A configured id that also has the key-id shape is masked once, keeping its prefix.
        let r = Redactor { known: vec!["AKIAFAKEFAKEFAKE1234".into()] };
        assert_eq!(r.redact("id=AKIAFAKEFAKEFAKE1234;"), "id=AKIA****************;");
    }
}
