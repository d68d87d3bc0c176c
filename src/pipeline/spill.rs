//! The compact binary form items take between the two passes.
//!
//! Pass one decodes JSON once, infers schemas and writes items here; pass two reads them back
//! (borrowing strings and bytes from the chunk) to build Arrow columns. The format is private
//! to one run and never leaves the staging folder.

use std::borrow::Cow;

use crate::decode::{Item, Number, TypeTag, Value};
use crate::normalize::{RejectReason, RejectRow};

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn encode_item(item: &Item<'_>, out: &mut Vec<u8>) {
    put_varint(out, item.len() as u64);
    for (k, v) in item {
        put_bytes(out, k.as_bytes());
        encode_value(v, out);
    }
}

fn encode_value(v: &Value<'_>, out: &mut Vec<u8>) {
    out.push(v.tag() as u8);
    match v {
        Value::S(s) => put_bytes(out, s.as_bytes()),
        Value::N(n) => put_bytes(out, n.as_str().as_bytes()),
        Value::B(b) => put_bytes(out, b),
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::Null => {}
        Value::SS(v) => {
            put_varint(out, v.len() as u64);
            v.iter().for_each(|s| put_bytes(out, s.as_bytes()));
        }
        Value::NS(v) => {
            put_varint(out, v.len() as u64);
            v.iter().for_each(|n| put_bytes(out, n.as_str().as_bytes()));
        }
        Value::BS(v) => {
            put_varint(out, v.len() as u64);
            v.iter().for_each(|b| put_bytes(out, b));
        }
        Value::L(v) => {
            put_varint(out, v.len() as u64);
            v.iter().for_each(|e| encode_value(e, out));
        }
        Value::M(v) => {
            put_varint(out, v.len() as u64);
            for (k, e) in v {
                put_bytes(out, k.as_bytes());
                encode_value(e, out);
            }
        }
    }
}

/// The spill bytes were not written by [`encode_item`]: a bug or a damaged staging folder.
#[derive(Debug, thiserror::Error)]
#[error("spill data is damaged at byte {0}")]
pub struct SpillError(pub usize);

/// Reads values back, borrowing from the chunk.
pub struct Reader<'a> {
    b: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, SpillError> {
        // Lengths and counts below 128 take one byte: most of them.
        if let Some(&byte) = self.b.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = *self.b.get(self.pos).ok_or(SpillError(self.pos))?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(SpillError(self.pos));
            }
        }
    }

    fn bytes(&mut self) -> Result<&'a [u8], SpillError> {
        let n = self.varint()? as usize;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(SpillError(self.pos))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn str(&mut self) -> Result<&'a str, SpillError> {
        let at = self.pos;
        let b = self.bytes()?;
        // Most names and values are ASCII: an inline word-at-a-time check instead of the full
        // UTF-8 validator's call.
        if b.is_ascii() {
            // SAFETY: every byte is below 0x80, and a sequence of ASCII bytes is valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(b) });
        }
        std::str::from_utf8(b).map_err(|_| SpillError(at))
    }

    pub fn item(&mut self) -> Result<Item<'a>, SpillError> {
        let n = self.varint()? as usize;
        let mut item = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let k = self.str()?;
            item.push((Cow::Borrowed(k), self.value()?));
        }
        Ok(item)
    }

    fn value(&mut self) -> Result<Value<'a>, SpillError> {
        let at = self.pos;
        let tag = *TypeTag::ALL.get(*self.b.get(self.pos).ok_or(SpillError(at))? as usize).ok_or(SpillError(at))?;
        self.pos += 1;
        Ok(match tag {
            TypeTag::S => Value::S(Cow::Borrowed(self.str()?)),
            TypeTag::N => Value::N(Number::from_canonical(self.str()?)),
            TypeTag::B => Value::B(Cow::Borrowed(self.bytes()?)),
            TypeTag::Bool => {
                let b = *self.b.get(self.pos).ok_or(SpillError(self.pos))?;
                self.pos += 1;
                Value::Bool(b != 0)
            }
            TypeTag::Null => Value::Null,
            TypeTag::SS => {
                let n = self.varint()? as usize;
                Value::SS((0..n).map(|_| self.str().map(Cow::Borrowed)).collect::<Result<_, _>>()?)
            }
            TypeTag::NS => {
                let n = self.varint()? as usize;
                Value::NS((0..n).map(|_| self.str().map(Number::from_canonical)).collect::<Result<_, _>>()?)
            }
            TypeTag::BS => {
                let n = self.varint()? as usize;
                Value::BS((0..n).map(|_| self.bytes().map(Cow::Borrowed)).collect::<Result<_, _>>()?)
            }
            TypeTag::L => {
                let n = self.varint()? as usize;
                Value::L((0..n).map(|_| self.value()).collect::<Result<_, _>>()?)
            }
            TypeTag::M => {
                let n = self.varint()? as usize;
                let mut m = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let k = self.str()?;
                    m.push((Cow::Borrowed(k), self.value()?));
                }
                Value::M(m)
            }
        })
    }

    pub fn reject(&mut self) -> Result<RejectRow<'a>, SpillError> {
        let file = self.varint()? as u32;
        let line = self.varint()?;
        let offset = self.varint()?;
        let at = self.pos;
        let reason = RejectReason::from_index(*self.b.get(at).ok_or(SpillError(at))?).ok_or(SpillError(at))?;
        self.pos += 1;
        let attribute = self.str()?;
        let message = self.str()?;
        let raw = self.bytes()?;
        let truncated = *self.b.get(self.pos).ok_or(SpillError(self.pos))? != 0;
        self.pos += 1;
        Ok(RejectRow { file, line, offset, reason, attribute, message, raw, truncated })
    }
}

pub fn encode_reject(r: &RejectRow<'_>, out: &mut Vec<u8>) {
    put_varint(out, u64::from(r.file));
    put_varint(out, r.line);
    put_varint(out, r.offset);
    out.push(r.reason as u8);
    put_bytes(out, r.attribute.as_bytes());
    put_bytes(out, r.message.as_bytes());
    put_bytes(out, r.raw);
    out.push(u8::from(r.truncated));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::json::put_line as decode_export_line;

    #[test]
    fn items_round_trip() {
        let line = r#"{"Item":{"PK":{"S":"a\"b"},"n":{"N":"-1.5"},"b":{"B":"3q2+7w=="},"t":{"BOOL":false},"z":{"NULL":true},"ss":{"SS":["x","y"]},"ns":{"NS":["1","2"]},"bs":{"BS":["AA=="]},"l":{"L":[{"M":{"k":{"L":[]}}}]}}}"#;
        let item = decode_export_line(line);
        let mut buf = Vec::new();
        encode_item(&item, &mut buf);
        encode_item(&item, &mut buf);
        let mut r = Reader::new(&buf);
        assert_eq!(r.item().unwrap(), item);
        assert_eq!(r.item().unwrap(), item);
        assert!(r.at_end());
        // Every strict prefix of one encoded item is refused, never misread.
        let one = buf.len() / 2;
        for cut in 0..one {
            assert!(Reader::new(&buf[..cut]).item().is_err(), "prefix of {cut} bytes decoded");
        }
    }

    #[test]
    fn non_ascii_text_round_trips_and_damaged_text_is_refused() {
        let item = decode_export_line(r#"{"Item":{"név":{"S":"é✓\u00e9"},"a":{"SS":["x","✓"]}}}"#);
        let mut buf = Vec::new();
        encode_item(&item, &mut buf);
        assert_eq!(Reader::new(&buf).item().unwrap(), item);
        // One attribute `k` holding an `S` of two bytes that are not UTF-8.
        let damaged = [1, 1, b'k', TypeTag::S as u8, 2, 0xff, 0xfe];
        assert!(Reader::new(&damaged).item().is_err());
        let ascii = [1, 1, b'k', TypeTag::S as u8, 2, b'o', b'k'];
        assert_eq!(Reader::new(&ascii).item().unwrap()[0].1, Value::S(Cow::Borrowed("ok")));
        // A length that needs two varint bytes.
        let long = "x".repeat(300);
        let item = vec![(Cow::Borrowed("k"), Value::S(Cow::Borrowed(long.as_str())))];
        let mut buf = Vec::new();
        encode_item(&item, &mut buf);
        assert_eq!(Reader::new(&buf).item().unwrap(), item);
    }

    #[test]
    fn every_reason_round_trips() {
        for reason in RejectReason::ALL {
            let row = RejectRow {
                file: 3,
                line: 99,
                offset: 12345,
                reason,
                attribute: "a.b",
                message: "m",
                raw: b"{x",
                truncated: true,
            };
            let mut buf = Vec::new();
            encode_reject(&row, &mut buf);
            assert_eq!(Reader::new(&buf).reject().unwrap(), row);
        }
    }
}
