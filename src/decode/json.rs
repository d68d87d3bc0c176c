//! A strict, allocation-light parser for DynamoDB JSON.
//!
//! Hand-written rather than serde-based so that it can borrow strings from the line, keep exact
//! byte offsets and attribute paths for every error, refuse duplicate names, and stop at the
//! first problem without ever recursing into unbounded input (nesting is checked before each
//! descent). Input is `&str`: callers validate UTF-8 once per line.

use std::borrow::Cow;
use std::fmt::Write as _;

use base64::Engine as _;

use super::{
    Change, DecodeError, DecodeReason, Item, MAX_DEPTH, MAX_ITEM_SIZE, Number, NumberError, Record, TypeTag, Value,
    item_size,
};

/// The parser's error, boxed: a [`DecodeError`] (a reason, an offset and two `String`s) is 64
/// bytes, and unboxed it made every `Result` the hot functions return 72 bytes, copied at each
/// `?`. Errors are rare; boxing them took the decode of the sample export from 2.57 ms to 1.62
/// ms (`benches/hot_path.rs`, `decode_only`; bench/README.md, "Parser errors boxed"). The public
/// functions unbox it.
pub(crate) type PError = Box<DecodeError>;

/// Decodes one export line: `{"Item":{...}}` (a full export) or a change record
/// `{"Metadata":{"WriteTimestampMicros":{"N":"…"}},"Keys":{…},"OldImage":{…},"NewImage":{…}}`
/// (an incremental export; fields in any order, `OldImage` and `NewImage` optional).
pub fn decode_export_line(line: &str) -> Result<Record<'_>, DecodeError> {
    export_line(line).map_err(|e| *e)
}

fn export_line(line: &str) -> Result<Record<'_>, PError> {
    let mut p = Parser::new(line);
    p.ws();
    if p.peek() != Some(b'{') {
        return Err(not_an_object(line));
    }
    p.pos += 1;
    p.ws();
    if p.peek() == Some(b'}') {
        return Err(p.fail(DecodeReason::NotAnItem, "line is an empty object, expected `{\"Item\":{...}}`"));
    }
    let key_at = p.pos;
    let key = p.string()?;
    let record = match &*key {
        "Item" => {
            p.ws();
            p.expect(b':')?;
            p.ws();
            let item = p.item()?;
            p.ws();
            if p.peek() == Some(b',') {
                return Err(p.fail(DecodeReason::NotAnItem, "unexpected field after `Item`"));
            }
            Record::Put(item)
        }
        "Metadata" | "Keys" | "OldImage" | "NewImage" => {
            p.pos = key_at;
            Record::Change(p.change_fields()?)
        }
        _ => {
            p.pos = key_at;
            return Err(p.fail(
                DecodeReason::NotAnItem,
                format!("expected `Item` (or a change record's `Metadata`, `Keys`, `NewImage`), found `{key}`"),
            ));
        }
    };
    p.expect(b'}')?;
    p.ws();
    if p.pos != p.b.len() {
        return Err(p.fail(DecodeReason::InvalidJson, "unexpected text after the JSON object"));
    }
    Ok(record)
}

/// Why a line that does not start with `{` is refused: valid JSON of another kind (an array, a
/// string, ...) is valid JSON but not an export line; anything else is a syntax error.
fn not_an_object(line: &str) -> PError {
    let mut p = Parser::new(line);
    p.ws();
    let start = p.pos;
    let kind = match p.peek() {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "`null`",
        _ => "a number",
    };
    if let Err(e) = p.skip_value(NESTING_LIMIT) {
        return e;
    }
    p.ws();
    if !p.at_end() {
        return p.fail(DecodeReason::InvalidJson, "unexpected text after the JSON value");
    }
    p.pos = start;
    p.fail(DecodeReason::NotAnItem, format!("line is {kind}, not an object; expected `{{\"Item\":{{...}}}}`"))
}

/// Deepest JSON nesting read when skipping values that are not items.
const NESTING_LIMIT: usize = 256;

/// Decodes a bare attribute map `{"PK":{"S":"..."},...}` (the items of scan output).
pub fn decode_item_object(text: &str) -> Result<Item<'_>, DecodeError> {
    item_object(text).map_err(|e| *e)
}

fn item_object(text: &str) -> Result<Item<'_>, PError> {
    let mut p = Parser::new(text);
    p.ws();
    let item = p.item()?;
    p.ws();
    if p.pos != p.b.len() {
        return Err(p.fail(DecodeReason::InvalidJson, "unexpected text after the item"));
    }
    Ok(item)
}

/// Appends `s` as a JSON string literal.
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Name(&'a str),
    Index(usize),
}

/// Cursor over one JSON text with the attribute path of the value being read.
pub(crate) struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    pub(crate) pos: usize,
    path: Vec<Seg<'a>>,
}

// Bytes that end the fast path of a string: quote, backslash, control characters.
static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The index of the first byte at or after `i` that ends a string's fast path (see
/// [`STRING_STOP`]), or `b.len()`. Reads eight bytes at a time: for each word, the classic
/// "has a zero byte" and "has a byte below n" bit tricks flag the quote, the backslash and the
/// control characters. Both tricks are exact for the lowest flagged byte (a false flag can only
/// sit above a true one, where a borrow ran into it), so the first stop byte is found exactly;
/// `string_run_end_matches_the_table` checks it against the byte-at-a-time loop.
#[inline]
fn string_run_end(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const QUOTE: u64 = ONES * b'"' as u64;
    const BACKSLASH: u64 = ONES * b'\\' as u64;
    while let Some(word) = b.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let w = u64::from_le_bytes(*word);
        let q = w ^ QUOTE;
        let s = w ^ BACKSLASH;
        let hit =
            ((q.wrapping_sub(ONES) & !q) | (s.wrapping_sub(ONES) & !s) | (w.wrapping_sub(ONES * 0x20) & !w)) & HIGH;
        if hit != 0 {
            return i + (hit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !STRING_STOP[b[i] as usize] {
        i += 1;
    }
    i
}

/// A type key written without escapes (`"S"`, `"NS"`, `"BOOL"`, ...) at the start of `b`: its
/// tag and its length with the quotes. Anything else, an escaped or unknown key included, is
/// `None` and takes [`Parser::string`]'s general path, which reads these same bytes to the same
/// key (`plain_type_key_agrees_with_string` checks it).
#[inline]
fn plain_type_key(b: &[u8]) -> Option<(TypeTag, usize)> {
    Some(match b {
        [b'"', c, b'"', ..] => {
            let tag = match c {
                b'S' => TypeTag::S,
                b'N' => TypeTag::N,
                b'M' => TypeTag::M,
                b'L' => TypeTag::L,
                b'B' => TypeTag::B,
                _ => return None,
            };
            (tag, 3)
        }
        [b'"', c, b'S', b'"', ..] => {
            let tag = match c {
                b'S' => TypeTag::SS,
                b'N' => TypeTag::NS,
                b'B' => TypeTag::BS,
                _ => return None,
            };
            (tag, 4)
        }
        [b'"', b'B', b'O', b'O', b'L', b'"', ..] => (TypeTag::Bool, 6),
        [b'"', b'N', b'U', b'L', b'L', b'"', ..] => (TypeTag::Null, 6),
        _ => return None,
    })
}

impl<'a> Parser<'a> {
    pub(crate) fn new(src: &'a str) -> Self {
        Parser { src, b: src.as_bytes(), pos: 0, path: Vec::new() }
    }

    #[inline]
    pub(crate) fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.b.len()
    }

    #[inline]
    pub(crate) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    fn path_string(&self) -> String {
        let mut s = String::new();
        for seg in &self.path {
            match seg {
                Seg::Name(n) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(n);
                }
                Seg::Index(i) => {
                    let _ = write!(s, "[{i}]");
                }
            }
        }
        s
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn fail(&self, reason: DecodeReason, message: impl AsRef<str>) -> PError {
        let attribute = self.path_string();
        let message = if attribute.is_empty() {
            message.as_ref().to_owned()
        } else {
            format!("attribute `{attribute}`: {}", message.as_ref())
        };
        Box::new(DecodeError::new(reason, attribute, self.pos, message))
    }

    #[cold]
    #[inline(never)]
    fn syntax(&self, what: &str) -> PError {
        if self.at_end() {
            self.fail(DecodeReason::InvalidJson, format!("unexpected end of input, expected {what}"))
        } else {
            let found = self.src[self.pos..].chars().next().unwrap_or('?');
            self.fail(DecodeReason::InvalidJson, format!("expected {what}, found `{found}` at byte {}", self.pos))
        }
    }

    #[inline]
    pub(crate) fn expect(&mut self, c: u8) -> Result<(), PError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.syntax(&format!("`{}`", c as char)))
        }
    }

    #[inline]
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, PError> {
        if self.peek() != Some(b'"') {
            return Err(self.syntax("a string"));
        }
        self.pos += 1;
        let start = self.pos;
        let i = string_run_end(self.b, start);
        if self.b.get(i) == Some(&b'"') {
            self.pos = i + 1;
            return Ok(Cow::Borrowed(&self.src[start..i]));
        }
        self.escaped_string(start, i)
    }

    /// The rest of a string whose first stop byte, at `i`, is not its closing quote: escapes
    /// are decoded into an owned copy; a control character or the end of input is an error.
    #[inline(never)]
    fn escaped_string(&mut self, start: usize, i: usize) -> Result<Cow<'a, str>, PError> {
        let b = self.b;
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(&self.src[start..i]);
        self.pos = i;
        loop {
            let Some(c) = self.peek() else {
                return Err(self.fail(DecodeReason::InvalidJson, "unterminated string"));
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => {
                    self.pos += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.fail(DecodeReason::InvalidJson, "unterminated string"));
                    };
                    self.pos += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let ch = self.unicode_escape()?;
                            out.push(ch);
                        }
                        _ => {
                            self.pos -= 1;
                            return Err(self.fail(DecodeReason::InvalidJson, "invalid escape in string"));
                        }
                    }
                }
                0..=0x1f => return Err(self.fail(DecodeReason::InvalidJson, "control character in string")),
                _ => {
                    let run_start = self.pos;
                    self.pos = string_run_end(b, run_start);
                    out.push_str(&self.src[run_start..self.pos]);
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, PError> {
        let Some(h) = self.b.get(self.pos..self.pos + 4) else {
            return Err(self.fail(DecodeReason::InvalidJson, "truncated `\\u` escape"));
        };
        let mut v = 0u32;
        for &c in h {
            let d =
                (c as char).to_digit(16).ok_or_else(|| self.fail(DecodeReason::InvalidJson, "invalid `\\u` escape"))?;
            v = v * 16 + d;
        }
        self.pos += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, PError> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.b.get(self.pos..self.pos + 2) != Some(b"\\u") {
                return Err(self.fail(DecodeReason::InvalidJson, "lone surrogate in `\\u` escape"));
            }
            self.pos += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.fail(DecodeReason::InvalidJson, "lone surrogate in `\\u` escape"));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.fail(DecodeReason::InvalidJson, "lone surrogate in `\\u` escape"))
    }

    fn literal(&mut self, word: &[u8]) -> bool {
        if self.b[self.pos..].starts_with(word) {
            self.pos += word.len();
            true
        } else {
            false
        }
    }

    /// The fields of a change record, from its first field name to just before its closing `}`.
    fn change_fields(&mut self) -> Result<Change<'a>, PError> {
        let record_at = self.pos;
        let mut write_time: Option<i64> = None;
        let mut keys: Option<Item<'a>> = None;
        let mut old: Option<Item<'a>> = None;
        let mut new: Option<Item<'a>> = None;
        let mut seen_metadata = false;
        loop {
            self.ws();
            let name_at = self.pos;
            let name = self.string()?;
            self.ws();
            self.expect(b':')?;
            self.ws();
            match &*name {
                "Metadata" if !seen_metadata => {
                    seen_metadata = true;
                    write_time = self.metadata()?;
                }
                "Keys" if keys.is_none() => keys = Some(self.image("Keys")?),
                "OldImage" if old.is_none() => old = Some(self.image("OldImage")?),
                "NewImage" if new.is_none() => new = Some(self.image("NewImage")?),
                "Metadata" | "Keys" | "OldImage" | "NewImage" => {
                    self.pos = name_at;
                    return Err(self.fail(
                        DecodeReason::DuplicateAttribute,
                        format!("field `{name}` appears twice in the change record"),
                    ));
                }
                other => {
                    self.pos = name_at;
                    return Err(self.fail(
                        DecodeReason::NotAnItem,
                        format!(
                            "unexpected field `{other}` in a change record (it has `Metadata`, `Keys`, `OldImage` and `NewImage`)"
                        ),
                    ));
                }
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => break,
                _ => return Err(self.syntax("`,` or `}`")),
            }
        }
        let end = self.pos;
        self.pos = record_at;
        let change = super::check_change(keys, old, new, write_time).map_err(|(reason, m)| self.fail(reason, m))?;
        self.pos = end;
        Ok(change)
    }

    /// `{"WriteTimestampMicros":{"N":"…"}}`: the write time, or `None` when absent.
    fn metadata(&mut self) -> Result<Option<i64>, PError> {
        self.path.push(Seg::Name("Metadata"));
        let start = self.pos;
        let fields = self.attr_map(1)?;
        self.path.pop();
        let mut out = None;
        for (name, value) in fields {
            if name != "WriteTimestampMicros" {
                continue;
            }
            let micros = match &value {
                Value::N(n) => n.to_i64().filter(|m| *m >= 0),
                _ => None,
            };
            match micros {
                Some(m) => out = Some(m),
                None => {
                    self.pos = start;
                    return Err(self.fail(
                        DecodeReason::BadWriteTime,
                        "`Metadata.WriteTimestampMicros` is not a number of microseconds since the epoch",
                    ));
                }
            }
        }
        Ok(out)
    }

    /// `Keys`, `OldImage` or `NewImage`: an attribute map like an item, named in error paths.
    fn image(&mut self, label: &'static str) -> Result<Item<'a>, PError> {
        self.path.push(Seg::Name(label));
        let start = self.pos;
        let item = self.attr_map(1);
        let item = match item {
            Ok(i) => i,
            Err(e) => {
                self.path.pop();
                return Err(e);
            }
        };
        self.path.pop();
        if item.is_empty() {
            self.pos = start;
            let reason = if label == "Keys" { DecodeReason::NoKeys } else { DecodeReason::EmptyItem };
            return Err(self.fail(reason, format!("`{label}` has no attributes")));
        }
        let size = size_beyond_text(&item, self.pos - start);
        if size > MAX_ITEM_SIZE {
            self.pos = start;
            return Err(self.fail(
                DecodeReason::ItemTooLarge,
                format!(
                    "`{label}` is {size} bytes as DynamoDB counts them, above the 400 KB limit ({MAX_ITEM_SIZE} bytes)"
                ),
            ));
        }
        Ok(item)
    }

    /// An attribute map: the item itself or the payload of `M`.
    pub(crate) fn item(&mut self) -> Result<Item<'a>, PError> {
        let start = self.pos;
        let item = self.attr_map(1)?;
        if item.is_empty() {
            self.pos = start;
            return Err(self.fail(DecodeReason::EmptyItem, "item has no attributes"));
        }
        let size = size_beyond_text(&item, self.pos - start);
        if size > MAX_ITEM_SIZE {
            self.pos = start;
            return Err(self.fail(
                DecodeReason::ItemTooLarge,
                format!("item is {size} bytes as DynamoDB counts them, above the 400 KB limit ({MAX_ITEM_SIZE} bytes)"),
            ));
        }
        Ok(item)
    }

    fn attr_map(&mut self, depth: usize) -> Result<Vec<(Cow<'a, str>, Value<'a>)>, PError> {
        if self.peek() != Some(b'{') {
            return Err(self.fail(DecodeReason::WrongValueShape, "expected a map of attributes (a JSON object)"));
        }
        self.pos += 1;
        let mut out: Vec<(Cow<'a, str>, Value<'a>)> = Vec::with_capacity(if depth == 1 { 16 } else { 4 });
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(out);
        }
        // Duplicate names are rare: a 64-bit filter of (length, last byte) skips most comparisons.
        let mut seen: u64 = 0;
        loop {
            self.ws();
            let name_at = self.pos;
            let name = self.string()?;
            let bit = 1u64 << ((name.len() as u64 * 7 + u64::from(name.as_bytes().last().copied().unwrap_or(0))) & 63);
            if seen & bit != 0 && out.iter().any(|(k, _)| *k == name) {
                self.pos = name_at;
                return Err(self.fail(DecodeReason::DuplicateAttribute, format!("attribute `{name}` appears twice")));
            }
            seen |= bit;
            self.ws();
            self.expect(b':')?;
            self.ws();
            // Borrowed names go on the path as-is; escaped ones are rare, so copy for the path.
            let seg_name: &'a str = match &name {
                Cow::Borrowed(s) => s,
                Cow::Owned(_) => "<escaped name>",
            };
            self.path.push(Seg::Name(seg_name));
            let value = self.attr_value(depth)?;
            self.path.pop();
            out.push((name, value));
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(out);
                }
                _ => return Err(self.syntax("`,` or `}`")),
            }
        }
    }

    /// One `{"T": payload}` object at nesting level `depth` (top-level attributes are 1).
    fn attr_value(&mut self, depth: usize) -> Result<Value<'a>, PError> {
        if depth > MAX_DEPTH {
            return Err(
                self.fail(DecodeReason::TooDeep, format!("nesting deeper than {MAX_DEPTH} levels (DynamoDB's limit)"))
            );
        }
        if self.peek() != Some(b'{') {
            return Err(
                self.fail(DecodeReason::WrongValueShape, "expected an attribute value such as `{\"S\":\"...\"}`")
            );
        }
        self.pos += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            return Err(self.fail(DecodeReason::NoTypeKey, "attribute value `{}` has no type key"));
        }
        let key_at = self.pos;
        let tag = match plain_type_key(&self.b[key_at..]) {
            Some((tag, len)) => {
                self.pos += len;
                tag
            }
            None => {
                let key = self.string()?;
                let Some(tag) = TypeTag::from_key(&key) else {
                    self.pos = key_at;
                    return Err(self.fail(
                        DecodeReason::UnknownTypeKey,
                        format!("unknown type key `{key}`; expected one of S, N, B, BOOL, NULL, SS, NS, BS, L, M"),
                    ));
                };
                tag
            }
        };
        self.ws();
        self.expect(b':')?;
        self.ws();
        let value = self.payload(tag, depth)?;
        self.ws();
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                Ok(value)
            }
            Some(b',') => {
                self.pos += 1;
                self.ws();
                let second = self.string().map(|s| s.into_owned()).unwrap_or_else(|_| "?".to_owned());
                Err(self.fail(
                    DecodeReason::TwoTypeKeys,
                    format!("attribute value has two type keys, `{tag}` and `{second}`"),
                ))
            }
            _ => Err(self.syntax("`}`")),
        }
    }

    fn number(&mut self, raw: Cow<'a, str>, at: usize) -> Result<Number<'a>, PError> {
        let parsed = match &raw {
            Cow::Borrowed(s) => Number::parse(s),
            Cow::Owned(s) => Number::parse(s).map(Number::into_owned),
        };
        parsed.map_err(|e| {
            let mut shown: String = raw.chars().take(60).collect();
            if shown.len() < raw.len() {
                shown.push('…');
            }
            let (reason, msg) = match e {
                NumberError::Syntax => (DecodeReason::InvalidNumber, format!("`{shown}` is not a decimal number")),
                NumberError::TooPrecise { digits } => (
                    DecodeReason::TooManyDigits,
                    format!("number `{shown}` has {digits} significant digits; DynamoDB keeps at most 38"),
                ),
                NumberError::OutOfRange => (
                    DecodeReason::NumberOutOfRange,
                    format!("number `{shown}` is outside DynamoDB's range (1E-130 to 9.99…E+125 in magnitude)"),
                ),
            };
            let mut err = self.fail(reason, msg);
            err.offset = at;
            err
        })
    }

    fn binary(&mut self, at: usize) -> Result<Cow<'a, [u8]>, PError> {
        let s = self.string()?;
        base64::engine::general_purpose::STANDARD.decode(s.as_bytes()).map(Cow::Owned).map_err(|e| {
            let mut err =
                self.fail(DecodeReason::InvalidBase64, format!("binary value is not padded standard base64 ({e})"));
            err.offset = at;
            err
        })
    }

    fn payload(&mut self, tag: TypeTag, depth: usize) -> Result<Value<'a>, PError> {
        let at = self.pos;
        let want =
            |p: &Self, what: &str| p.fail(DecodeReason::WrongValueShape, format!("`{tag}` value must be {what}"));
        match tag {
            TypeTag::S => {
                if self.peek() != Some(b'"') {
                    return Err(want(self, "a string"));
                }
                Ok(Value::S(self.string()?))
            }
            TypeTag::N => {
                if self.peek() != Some(b'"') {
                    return Err(want(self, "a string holding a number"));
                }
                let raw = self.string()?;
                Ok(Value::N(self.number(raw, at)?))
            }
            TypeTag::B => {
                if self.peek() != Some(b'"') {
                    return Err(want(self, "a base64 string"));
                }
                Ok(Value::B(self.binary(at)?))
            }
            TypeTag::Bool => {
                if self.literal(b"true") {
                    Ok(Value::Bool(true))
                } else if self.literal(b"false") {
                    Ok(Value::Bool(false))
                } else {
                    Err(want(self, "`true` or `false`"))
                }
            }
            TypeTag::Null => {
                if self.literal(b"true") {
                    Ok(Value::Null)
                } else {
                    Err(want(self, "`true`"))
                }
            }
            TypeTag::SS | TypeTag::NS | TypeTag::BS => self.set(tag),
            TypeTag::L => {
                if self.peek() != Some(b'[') {
                    return Err(want(self, "a JSON array"));
                }
                self.pos += 1;
                let mut out = Vec::new();
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(Value::L(out));
                }
                loop {
                    self.ws();
                    self.path.push(Seg::Index(out.len()));
                    let v = self.attr_value(depth + 1)?;
                    self.path.pop();
                    out.push(v);
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Value::L(out));
                        }
                        _ => return Err(self.syntax("`,` or `]`")),
                    }
                }
            }
            TypeTag::M => {
                if self.peek() != Some(b'{') {
                    return Err(want(self, "a JSON object"));
                }
                Ok(Value::M(self.attr_map(depth + 1)?))
            }
        }
    }

    fn set(&mut self, tag: TypeTag) -> Result<Value<'a>, PError> {
        let at = self.pos;
        if self.peek() != Some(b'[') {
            return Err(self.fail(DecodeReason::WrongValueShape, format!("`{tag}` value must be a JSON array")));
        }
        self.pos += 1;
        let mut strings: Vec<Cow<'a, str>> = Vec::new();
        let mut numbers: Vec<Number<'a>> = Vec::new();
        let mut blobs: Vec<Cow<'a, [u8]>> = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.pos = at;
            return Err(
                self.fail(DecodeReason::EmptySet, format!("empty `{tag}` set; DynamoDB never stores empty sets"))
            );
        }
        loop {
            self.ws();
            let el_at = self.pos;
            if self.peek() != Some(b'"') {
                return Err(self.fail(DecodeReason::WrongValueShape, format!("`{tag}` members must be strings")));
            }
            match tag {
                TypeTag::SS => strings.push(self.string()?),
                TypeTag::NS => {
                    let raw = self.string()?;
                    numbers.push(self.number(raw, el_at)?);
                }
                _ => blobs.push(self.binary(el_at)?),
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.syntax("`,` or `]`")),
            }
        }
        let dup = match tag {
            TypeTag::SS => has_duplicate(&strings),
            TypeTag::NS => has_duplicate(&numbers),
            _ => has_duplicate(&blobs),
        };
        if dup {
            self.pos = at;
            return Err(self.fail(DecodeReason::DuplicateSetMember, format!("`{tag}` set has a duplicate member")));
        }
        Ok(match tag {
            TypeTag::SS => Value::SS(strings),
            TypeTag::NS => Value::NS(numbers),
            _ => Value::BS(blobs),
        })
    }

    /// Skips any JSON value (for the parts of scan output that are not items), refusing nesting
    /// deeper than `limit` so hostile input cannot exhaust the stack.
    pub(crate) fn skip_value(&mut self, limit: usize) -> Result<(), PError> {
        if limit == 0 {
            return Err(self.fail(DecodeReason::InvalidJson, "JSON nested too deeply"));
        }
        self.ws();
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'{') => {
                self.pos += 1;
                self.ws();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    self.ws();
                    self.string()?;
                    self.ws();
                    self.expect(b':')?;
                    self.skip_value(limit - 1)?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(());
                        }
                        _ => return Err(self.syntax("`,` or `}`")),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    self.skip_value(limit - 1)?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(());
                        }
                        _ => return Err(self.syntax("`,` or `]`")),
                    }
                }
            }
            Some(b't') if self.literal(b"true") => Ok(()),
            Some(b'f') if self.literal(b"false") => Ok(()),
            Some(b'n') if self.literal(b"null") => Ok(()),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                if !self.json_number() {
                    self.pos = start;
                    return Err(self.syntax("a JSON number"));
                }
                Ok(())
            }
            _ => Err(self.syntax("a JSON value")),
        }
    }

    /// Moves past a number of JSON's grammar, `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    /// (no leading zeros, no bare `.` or exponent); false when there is none.
    fn json_number(&mut self) -> bool {
        let digits = |p: &mut Self| {
            let start = p.pos;
            while let Some(b'0'..=b'9') = p.peek() {
                p.pos += 1;
            }
            p.pos - start
        };
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return false,
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return false;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return false;
            }
        }
        true
    }

    /// Reads a JSON number as text (for `Count` and similar fields).
    pub(crate) fn plain_number(&mut self) -> Result<&'a str, PError> {
        self.ws();
        let start = self.pos;
        self.skip_value(1)?;
        let text = &self.src[start..self.pos];
        if text.parse::<f64>().is_err() {
            self.pos = start;
            return Err(self.syntax("a JSON number"));
        }
        Ok(text)
    }

    pub(crate) fn slice(&self, start: usize, end: usize) -> &'a str {
        &self.src[start..end]
    }
}

/// The item's size as DynamoDB counts it when that could exceed [`MAX_ITEM_SIZE`], else 0.
///
/// The size is never more than the length of the item's JSON text, so text within the limit
/// needs no walk over the item: every string, name and binary value is no longer than its quoted
/// or base64 text, a number has no more significant digits than its text has digits (and counts
/// half of them plus one), a `BOOL` or `NULL` value counts 1 for its four or five letters, and
/// a list or map counts 3 plus 1 per element where its text has at least `{"L":[]}` plus a comma
/// or a name per element.
/// `item_size_never_exceeds_the_text` checks the bound on generated items.
fn size_beyond_text(item: &Item<'_>, text_len: usize) -> usize {
    if text_len <= MAX_ITEM_SIZE { 0 } else { item_size(item) }
}

fn has_duplicate<T: PartialEq + std::hash::Hash + Eq>(items: &[T]) -> bool {
    if items.len() <= 16 {
        items.iter().enumerate().any(|(i, a)| items[..i].contains(a))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        !items.iter().all(|x| seen.insert(x))
    }
}

/// Decodes a full-export line known to hold an item, for tests across the crate.
#[cfg(test)]
pub(crate) fn put_line(line: &str) -> Item<'_> {
    match decode_export_line(line) {
        Ok(Record::Put(item)) => item,
        other => panic!("expected an item from {line}: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(line: &str) -> Item<'_> {
        put_line(line)
    }

    fn reason(line: &str) -> DecodeReason {
        match decode_export_line(line) {
            Ok(item) => panic!("expected a reject, decoded {item:?}"),
            Err(e) => e.reason,
        }
    }

    #[test]
    fn decodes_every_type() {
        let line = r#"{"Item":{"PK":{"S":"CUST#7"},"SK":{"S":"PROFILE"},"Type":{"S":"Customer"},"score":{"N":"-12.50"},"big":{"N":"12345678901234567890123456789012345678"},"photo":{"B":"3q2+7w=="},"vip":{"BOOL":true},"nick":{"NULL":true},"tags":{"SS":["gold","eu"]},"lucky":{"NS":["7","13"]},"keys":{"BS":["AQI=","AwQ="]},"history":{"L":[{"S":"x"},{"N":"1"},{"M":{}}]},"addr":{"M":{"city":{"S":"Oslo"},"zip":{"N":"150"}}}}}"#;
        let item = put(line);
        assert_eq!(item.len(), 13);
        let get = |name: &str| &item.iter().find(|(k, _)| k == name).unwrap().1;
        assert_eq!(get("score"), &Value::N(Number::parse("-12.5").unwrap()));
        assert_eq!(get("photo"), &Value::B(Cow::Owned(vec![0xde, 0xad, 0xbe, 0xef])));
        assert_eq!(get("vip"), &Value::Bool(true));
        assert_eq!(get("nick"), &Value::Null);
        assert!(matches!(get("tags"), Value::SS(v) if v.len() == 2));
        assert!(matches!(get("keys"), Value::BS(v) if v[1].as_ref() == [3, 4]));
        assert!(matches!(get("history"), Value::L(v) if v.len() == 3 && v[2] == Value::M(vec![])));
        assert!(matches!(get("addr"), Value::M(v) if v[1].1 == Value::N(Number::parse("150").unwrap())));
    }

    #[test]
    fn change_records() {
        let line = r#"{"Metadata":{"WriteTimestampMicros":{"N":"1768386096366933"}},"Keys":{"pk":{"N":"3"},"sk":{"N":"2"}},"OldImage":{"sk":{"N":"2"},"pk":{"N":"3"},"number":{"N":"7"}},"NewImage":{"pk":{"N":"3"},"sk":{"N":"2"}}}"#;
        let Record::Change(c) = decode_export_line(line).unwrap() else { panic!("not a change") };
        assert_eq!(c.write_time_micros, 1_768_386_096_366_933);
        assert_eq!(c.keys.len(), 2);
        assert_eq!(c.old.as_ref().map(Vec::len), Some(3));
        assert_eq!(c.new.as_ref().map(Vec::len), Some(2));
        // A delete in a NEW_IMAGE export carries only keys; fields may come in any order.
        let delete = r#"{"Keys":{"pk":{"S":"a"}},"Metadata":{"WriteTimestampMicros":{"N":"5"}}}"#;
        let Record::Change(d) = decode_export_line(delete).unwrap() else { panic!("not a change") };
        assert!(d.old.is_none() && d.new.is_none());
        assert_eq!(d.write_time_micros, 5);
        let err = decode_export_line(r#"{"Keys":{"pk":{"S":"a"},"sk":{"N":"x"}}}"#).unwrap_err();
        assert_eq!(err.attribute, "Keys.sk");
    }

    #[test]
    fn escapes_and_whitespace() {
        let line = "  { \"Item\" : { \"a\\\"b\" : { \"S\" : \"x\\n\\u00e9\\ud83d\\ude00\\/\" } } }  ";
        let item = put(line);
        assert_eq!(item[0].0, "a\"b");
        assert_eq!(item[0].1, Value::S(Cow::Owned("x\né😀/".into())));
        let b = put(r#"{"Item":{"b":{"B":"3q2\/7w=="}}}"#);
        assert_eq!(b[0].1, Value::B(Cow::Owned(vec![0xde, 0xad, 0xbf, 0xef])));
    }

    #[test]
    fn rejects_with_reasons() {
        use DecodeReason::*;
        for (line, want) in [
            (r#"{"Item":{"a":{"S":"x","N":"1"}}}"#, TwoTypeKeys),
            (r#"{"Item":{"a":{"Q":"x"}}}"#, UnknownTypeKey),
            (r#"{"Item":{"a":{}}}"#, NoTypeKey),
            (r#"{"Item":{"a":{"N":"1.2.3"}}}"#, InvalidNumber),
            (r#"{"Item":{"a":{"N":1}}}"#, WrongValueShape),
            (r#"{"Item":{"a":{"N":"123456789012345678901234567890123456789"}}}"#, TooManyDigits),
            (r#"{"Item":{"a":{"N":"1E+126"}}}"#, NumberOutOfRange),
            (r#"{"Item":{"a":{"B":"3q2+7w="}}}"#, InvalidBase64),
            (r#"{"Item":{"a":{"B":"3q2+7w"}}}"#, InvalidBase64),
            (r#"{"Item":{"a":{"SS":[]}}}"#, EmptySet),
            (r#"{"Item":{"a":{"NS":["1","1.0"]}}}"#, DuplicateSetMember),
            (r#"{"Item":{"a":{"S":"x"},"a":{"S":"y"}}}"#, DuplicateAttribute),
            (r#"{"Item":{}}"#, EmptyItem),
            (r#"{"Item":{"a":{"S":"x"}}"#, InvalidJson),
            (r#"{"Item":{"a":{"S":"x"}}} x"#, InvalidJson),
            (r#"{"Item":{"a":{"S":"x"}},"b":1}"#, NotAnItem),
            (r#"{"Metadata":{}}"#, NoKeys),
            (r#"{"Keys":{"pk":{"S":"1"}}}"#, BadWriteTime),
            (r#"{"Metadata":{"WriteTimestampMicros":{"S":"1"}},"Keys":{"pk":{"S":"1"}}}"#, BadWriteTime),
            (r#"{"Metadata":{"WriteTimestampMicros":{"N":"-1"}},"Keys":{"pk":{"S":"1"}}}"#, BadWriteTime),
            (r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{}}"#, NoKeys),
            (
                r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"pk":{"S":"1"}},"NewImage":{"pk":{"S":"2"}}}"#,
                KeysMismatch,
            ),
            (
                r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"pk":{"S":"1"}},"OldImage":{"a":{"S":"2"}}}"#,
                KeysMismatch,
            ),
            (
                r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"pk":{"S":"1"}},"Keys":{"pk":{"S":"1"}}}"#,
                DuplicateAttribute,
            ),
            (r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"pk":{"S":"1"}},"Extra":1}"#, NotAnItem),
            (
                r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"pk":{"S":"1"}},"NewImage":{"pk":{"Q":"1"}}}"#,
                UnknownTypeKey,
            ),
            (r#"[1]"#, NotAnItem),
            (r#" "x" "#, NotAnItem),
            (r#"[1"#, InvalidJson),
            (r#"[01]"#, InvalidJson),
            (r#"[1.]"#, InvalidJson),
            (r#"[1] x"#, InvalidJson),
            (r#"{"Item":{"a":{"NULL":false}}}"#, WrongValueShape),
            (r#"{"Item":{"a":{"BOOL":"true"}}}"#, WrongValueShape),
            (r#"{"Item":{"a":{"S":"bad \u12"}}}"#, InvalidJson),
            ("{\"Item\":{\"a\":{\"S\":\"tab\tin string\"}}}", InvalidJson),
            ("", InvalidJson),
        ] {
            assert_eq!(reason(line), want, "line {line}");
        }
    }

    fn nested(levels: usize) -> String {
        let mut v = r#"{"S":"leaf"}"#.to_owned();
        for _ in 1..levels {
            v = format!(r#"{{"L":[{v}]}}"#);
        }
        format!(r#"{{"Item":{{"deep":{v}}}}}"#)
    }

    #[test]
    fn nesting_limit_is_32_levels() {
        assert!(decode_export_line(&nested(32)).is_ok());
        let err = decode_export_line(&nested(33)).unwrap_err();
        assert_eq!(err.reason, DecodeReason::TooDeep);
        assert!(err.attribute.starts_with("deep[0]"), "{}", err.attribute);
        // Hostile depth never overflows the stack.
        let hostile = format!(r#"{{"Item":{{"a":{}}}}}"#, r#"{"L":["#.repeat(100_000));
        assert_eq!(reason(&hostile), DecodeReason::TooDeep);
    }

    #[test]
    fn item_size_is_measured_like_dynamodb() {
        // 300 KB of binary is 400 KB of base64 text: the item is under the limit.
        let raw = vec![7u8; 300 * 1024];
        let b64 = base64::engine::general_purpose::STANDARD.encode(&raw);
        let line = format!(r#"{{"Item":{{"b":{{"B":"{b64}"}}}}}}"#);
        assert!(line.len() > MAX_ITEM_SIZE);
        assert!(decode_export_line(&line).is_ok());
        let big = "x".repeat(MAX_ITEM_SIZE);
        let err = decode_export_line(&format!(r#"{{"Item":{{"s":{{"S":"{big}"}}}}}}"#)).unwrap_err();
        assert_eq!(err.reason, DecodeReason::ItemTooLarge);
    }

    #[test]
    fn errors_name_the_attribute_path() {
        let err = decode_export_line(r#"{"Item":{"lines":{"L":[{"M":{"qty":{"N":"x"}}}]}}}"#).unwrap_err();
        assert_eq!(err.attribute, "lines[0].qty");
        assert_eq!(err.message, "attribute `lines[0].qty`: `x` is not a decimal number");
    }

    #[test]
    fn plain_type_keys_are_the_ten_keys() {
        for tag in TypeTag::ALL {
            let text = format!("\"{}\":", tag.key());
            assert_eq!(plain_type_key(text.as_bytes()), Some((tag, tag.key().len() + 2)), "{text}");
        }
        for text in [r#""s":"#, r#""\u0053":"#, r#""SN":"#, r#""BOOLS":"#, r#""S"#, r#""""#, ""] {
            assert_eq!(plain_type_key(text.as_bytes()), None, "{text}");
        }
        // An escaped type key still decodes, by the general path.
        let item = put(r#"{"Item":{"a":{"\u0053":"x"}}}"#);
        assert_eq!(item[0].1, Value::S(Cow::Borrowed("x")));
    }

    #[test]
    fn json_string_escaping_round_trips() {
        let s = "a\"b\\c\nd\u{1}é";
        let mut out = String::new();
        write_json_string(&mut out, s);
        let mut p = Parser::new(&out);
        assert_eq!(p.string().unwrap(), s);
    }
}

#[cfg(test)]
mod no_panic {
    //! Fuzz-style properties: no input makes the decoders panic (cargo-fuzz needs a nightly
    //! toolchain, which this project's machines do not have).
    use proptest::prelude::*;

    const SEED: &str = r#"{"Item":{"PK":{"S":"a\"b"},"n":{"N":"-1.5E3"},"b":{"B":"3q2+7w=="},"ss":{"SS":["x","y"]},"ns":{"NS":["1","2"]},"l":{"L":[{"M":{"k":{"BOOL":true}}},{"NULL":true}]},"bs":{"BS":["AA=="]}}}"#;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
            let _ = super::decode_export_line(&s);
            let _ = super::decode_item_object(&s);
            let _ = crate::decode::scan::parse_scan_output(&s);
        }

        #[test]
        fn mutated_lines_never_panic(edits in proptest::collection::vec((0usize..SEED.len(), 0usize..4, "[{}\\[\\]\":,\\\\0-9a-zA-Z.eE+-]{0,3}"), 1..6)) {
            let line = crate::decode::testutil::mutate(SEED, &edits);
            if let Ok(crate::decode::Record::Put(item)) = super::decode_export_line(&line) {
                prop_assert!(crate::decode::testutil::reencodes_equal(&item), "{line}");
                // The bound that lets the parser skip measuring items.
                prop_assert!(crate::decode::item_size(&item) <= line.len(), "{line}");
            }
            let _ = crate::decode::scan::parse_scan_output(&format!("{{\"Items\":[{line}]}}"));
        }
    }
}

#[cfg(test)]
mod fast_paths {
    //! Each fast path of the parser gives what the general code it short-cuts gives.
    use std::borrow::Cow;

    use proptest::prelude::*;

    use super::{Parser, STRING_STOP, decode_item_object, plain_type_key, string_run_end, write_json_string};
    use crate::decode::{TypeTag, item_size};

    /// Bytes rich in the ones that stop a string: quotes, backslashes, control characters,
    /// bytes of multi-byte characters.
    fn stringy_bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                4 => b'a'..=b'z',
                1 => Just(b'"'),
                1 => Just(b'\\'),
                1 => 0u8..0x20,
                1 => 0x20u8..=0x7f,
                1 => 0x80u8..=0xff,
            ],
            0..40,
        )
    }

    /// DynamoDB JSON of one attribute value, nested up to three levels, with escapes, exponents
    /// and binary; some are invalid (out-of-range numbers, duplicate set members) and are skipped.
    fn value_text() -> impl Strategy<Value = String> {
        let string = r#"[a-z"\\\n\x01é✓😀 ]{0,10}"#.prop_map(|s| {
            let mut out = String::new();
            write_json_string(&mut out, &s);
            out
        });
        let scalar = prop_oneof![
            string.clone().prop_map(|s| format!(r#"{{"S":{s}}}"#)),
            Just(r#"{"S":"\u00e9\ud83d\ude00\/"}"#.to_owned()),
            "-?[0-9]{1,6}(\\.[0-9]{1,6})?([eE][-+]?[0-9]{1,2})?".prop_map(|n| format!(r#"{{"N":"{n}"}}"#)),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(|b| {
                use base64::Engine as _;
                format!(r#"{{"B":"{}"}}"#, base64::engine::general_purpose::STANDARD.encode(b))
            }),
            any::<bool>().prop_map(|b| format!(r#"{{"BOOL":{b}}}"#)),
            Just(r#"{"NULL":true}"#.to_owned()),
            proptest::collection::vec(string, 1..4).prop_map(|v| format!(r#"{{"SS":[{}]}}"#, v.join(","))),
            proptest::collection::vec("[0-9]{1,3}", 1..4).prop_map(|v| format!(
                r#"{{"NS":[{}]}}"#,
                v.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(",")
            )),
        ];
        scalar.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|v| format!(r#"{{"L":[{}]}}"#, v.join(","))),
                proptest::collection::btree_map("[a-c]", inner, 0..3).prop_map(|m| {
                    let fields: Vec<String> = m.iter().map(|(k, v)| format!(r#""{k}":{v}"#)).collect();
                    format!(r#"{{"M":{{{}}}}}"#, fields.join(","))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn string_run_end_matches_the_table(b in stringy_bytes(), start in 0usize..48) {
            let start = start.min(b.len());
            let mut slow = start;
            while slow < b.len() && !STRING_STOP[b[slow] as usize] {
                slow += 1;
            }
            prop_assert_eq!(string_run_end(&b, start), slow);
        }

        #[test]
        fn plain_type_key_agrees_with_string(key in r#"[SNBMLOU"\\]{0,5}"#, rest in r#"[:"a]{0,2}"#) {
            let text = format!("\"{key}{rest}");
            if let Some((tag, len)) = plain_type_key(text.as_bytes()) {
                let mut p = Parser::new(&text);
                let read = p.string();
                prop_assert!(matches!(read, Ok(Cow::Borrowed(_))), "{text}");
                let read = read.map(|k| TypeTag::from_key(&k)).ok().flatten();
                prop_assert_eq!(read, Some(tag), "{}", text);
                prop_assert_eq!(p.pos, len, "{}", text);
            }
        }

        #[test]
        fn item_size_never_exceeds_the_text(attrs in proptest::collection::btree_map("[a-z\"é]{1,4}", value_text(), 1..6)) {
            let fields: Vec<String> = attrs
                .iter()
                .map(|(k, v)| {
                    let mut name = String::new();
                    write_json_string(&mut name, k);
                    format!("{name}:{v}")
                })
                .collect();
            let text = format!("{{{}}}", fields.join(","));
            if let Ok(item) = decode_item_object(&text) {
                let size = item_size(&item);
                prop_assert!(size <= text.len(), "{text} counts {size}");
            }
        }
    }
}
