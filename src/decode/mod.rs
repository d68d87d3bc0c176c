//! Wire formats to [`Record`]s: DynamoDB JSON export lines (full-export items and
//! incremental-export change records), Amazon Ion export lines ([`ion`]) and the items of
//! `aws dynamodb scan` documents, through one dispatch by [`Format`] ([`decode`]).
//!
//! Owns the exact attribute model ([`Value`]) and every rule about what DynamoDB could have
//! exported: one type key per value, canonical numbers, strict base64, non-empty sets without
//! duplicates, nesting up to 32 levels and items up to 400 KB as DynamoDB measures them.
//! Anything else becomes a [`DecodeError`] with a decode-level [`DecodeReason`], which
//! `normalize` turns into a reject row. This module knows nothing of entities, Arrow or files; it
//! never panics on any input.

pub mod ion;
pub mod json;
pub mod number;
pub mod scan;

use std::borrow::Cow;
use std::fmt;

pub use number::{Number, NumberError, NumberStats};

/// The wire format of one unit of input text (a line, or an item inside a scan document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// An export data line: `{"Item":{…}}`, or an incremental export's change record
    /// `{"Metadata":…,"Keys":…,"OldImage":…,"NewImage":…}`.
    ExportJson,
    /// An Amazon Ion text export line: `$ion_1_0 {Item:{…}}`, or a change record
    /// `{Metadata:…,Keys:…,OldImage:…,NewImage:…}`.
    ExportIon,
    /// One item of `aws dynamodb scan` output: a bare attribute map `{"PK":{"S":"…"},…}`.
    ScanItemJson,
}

/// What one unit of input says happened to the table.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<'a> {
    /// An item as it is (full exports, scans).
    Put(Item<'a>),
    /// A change record of an incremental export.
    Change(Change<'a>),
}

/// One item's net change within an incremental export's window: `new` present replaces the
/// whole item, absent deletes it by `keys`.
#[derive(Debug, Clone, PartialEq)]
pub struct Change<'a> {
    /// The primary key attributes, never empty.
    pub keys: Item<'a>,
    /// The item at the start of the window (`NEW_AND_OLD_IMAGES` exports only).
    pub old: Option<Item<'a>>,
    /// The item at the end of the window; absent for a delete.
    pub new: Option<Item<'a>>,
    /// `Metadata.WriteTimestampMicros`: when DynamoDB applied the write, in microseconds since
    /// the Unix epoch.
    pub write_time_micros: i64,
}

/// The checks every change record passes, whatever its wire format, once its fields are read:
/// `Keys` present, `Metadata.WriteTimestampMicros` present, and each image holding every key
/// attribute of `Keys` with the same value. The error is the reason and the message; the
/// decoder adds where in the line it is.
pub(crate) fn check_change<'a>(
    keys: Option<Item<'a>>,
    old: Option<Item<'a>>,
    new: Option<Item<'a>>,
    write_time: Option<i64>,
) -> Result<Change<'a>, (DecodeReason, String)> {
    let Some(keys) = keys else {
        return Err((DecodeReason::NoKeys, "change record has no `Keys`".to_owned()));
    };
    let Some(write_time_micros) = write_time else {
        return Err((DecodeReason::BadWriteTime, "change record has no `Metadata.WriteTimestampMicros`".to_owned()));
    };
    for (image, label) in [(&old, "OldImage"), (&new, "NewImage")] {
        let Some(image) = image else { continue };
        for (k, v) in &keys {
            match image.iter().find(|(n, _)| n == k) {
                Some((_, iv)) if iv == v => {}
                Some(_) => {
                    return Err((
                        DecodeReason::KeysMismatch,
                        format!("`{label}` has key attribute `{k}` with another value than `Keys`"),
                    ));
                }
                None => {
                    return Err((
                        DecodeReason::KeysMismatch,
                        format!("`{label}` lacks key attribute `{k}` that `Keys` names"),
                    ));
                }
            }
        }
    }
    Ok(Change { keys, old, new, write_time_micros })
}

/// Decodes one unit of input of `format`. Bytes are validated as UTF-8 first (with SIMD), so an
/// invalid sequence is a reject naming its byte offset.
pub fn decode(format: Format, bytes: &[u8]) -> Result<Record<'_>, DecodeError> {
    let text = match simdutf8::basic::from_utf8(bytes) {
        Ok(t) => t,
        Err(_) => {
            // Only the slow validator says where.
            let at = std::str::from_utf8(bytes).err().map_or(0, |e| e.valid_up_to());
            return Err(DecodeError::new(
                DecodeReason::InvalidUtf8,
                "",
                at,
                format!("invalid UTF-8 at byte {at} of the line"),
            ));
        }
    };
    match format {
        Format::ExportJson => json::decode_export_line(text),
        Format::ExportIon => ion::decode_export_line(text),
        Format::ScanItemJson => json::decode_item_object(text).map(Record::Put),
    }
}

/// Deepest nesting DynamoDB accepts, counting a top-level attribute as level 1.
pub const MAX_DEPTH: usize = 32;
/// Largest item DynamoDB stores: 400 KB.
pub const MAX_ITEM_SIZE: usize = 400 * 1024;

/// One attribute value, exactly as DynamoDB typed it.
///
/// The variant takes a whole word (`repr(u64)`); the value stays 32 bytes, and so does an
/// `Option` of it. No payload shares the tag's word, so values are moved in whole words: decoding
/// took 6% less time (`benches/hot_path.rs`, `decode_only`), and an unmapped unwind of 2M items
/// 0.98 of the CPU (paired as whole processes).
#[derive(Debug, Clone, PartialEq)]
#[repr(u64)]
pub enum Value<'a> {
    S(Cow<'a, str>),
    N(Number<'a>),
    B(Cow<'a, [u8]>),
    Bool(bool),
    Null,
    SS(Vec<Cow<'a, str>>),
    NS(Vec<Number<'a>>),
    BS(Vec<Cow<'a, [u8]>>),
    L(Vec<Value<'a>>),
    M(Vec<(Cow<'a, str>, Value<'a>)>),
}

/// An item: attribute names and values in the order they were read.
pub type Item<'a> = Vec<(Cow<'a, str>, Value<'a>)>;

/// Whether two attribute names are equal. Names searched for in an item mostly differ, and often
/// in length or first byte (`PK` and `SK`), which this decides without the call to `memcmp` that
/// `==` on equal lengths makes (`perf`: `memcmp` was a tenth of `apply_mapped` in
/// `benches/hot_path.rs`).
#[inline]
pub fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.as_bytes().first() == b.as_bytes().first() && a == b
}

/// The ten DynamoDB attribute types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TypeTag {
    S,
    N,
    B,
    Bool,
    Null,
    SS,
    NS,
    BS,
    L,
    M,
}

impl TypeTag {
    pub const ALL: [TypeTag; 10] = [
        TypeTag::S,
        TypeTag::N,
        TypeTag::B,
        TypeTag::Bool,
        TypeTag::Null,
        TypeTag::SS,
        TypeTag::NS,
        TypeTag::BS,
        TypeTag::L,
        TypeTag::M,
    ];

    /// The key DynamoDB JSON uses for this type.
    pub fn key(self) -> &'static str {
        match self {
            TypeTag::S => "S",
            TypeTag::N => "N",
            TypeTag::B => "B",
            TypeTag::Bool => "BOOL",
            TypeTag::Null => "NULL",
            TypeTag::SS => "SS",
            TypeTag::NS => "NS",
            TypeTag::BS => "BS",
            TypeTag::L => "L",
            TypeTag::M => "M",
        }
    }

    pub fn from_key(key: &str) -> Option<TypeTag> {
        Some(match key.as_bytes() {
            b"S" => TypeTag::S,
            b"N" => TypeTag::N,
            b"B" => TypeTag::B,
            b"M" => TypeTag::M,
            b"L" => TypeTag::L,
            b"SS" => TypeTag::SS,
            b"NS" => TypeTag::NS,
            b"BS" => TypeTag::BS,
            b"BOOL" => TypeTag::Bool,
            b"NULL" => TypeTag::Null,
            _ => return None,
        })
    }
}

impl fmt::Display for TypeTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

impl<'a> Value<'a> {
    /// A copy of the value, bit for bit when it owns nothing (text, bytes or a number borrowed
    /// from the line, a boolean, null), else [`Clone::clone`].
    ///
    /// A mapped row takes most of its values unchanged from the item. `clone` builds such a value
    /// field by field, and pushing it into the row then reads those fields back as one wider load
    /// that cannot be forwarded from the narrower stores (a stall `perf annotate` showed on the
    /// row's pushes in `normalize::apply::apply`); a bitwise copy moves whole words.
    #[inline(always)]
    pub fn copied(&self) -> Value<'a> {
        if self.owns_nothing() {
            // SAFETY: every `Cow` in the value is `Borrowed` and no variant matched owns a `Vec`,
            // so the value owns no allocation: a bitwise copy is a valid second value whose drop
            // frees nothing, and the borrows it holds live for `'a` whatever becomes of `self`.
            unsafe { std::ptr::read(self) }
        } else {
            self.clone()
        }
    }

    /// Whether the value owns no allocation.
    #[inline(always)]
    fn owns_nothing(&self) -> bool {
        match self {
            Value::S(s) => matches!(s, Cow::Borrowed(_)),
            Value::N(n) => n.is_borrowed(),
            Value::B(b) => matches!(b, Cow::Borrowed(_)),
            Value::Bool(_) | Value::Null => true,
            Value::SS(_) | Value::NS(_) | Value::BS(_) | Value::L(_) | Value::M(_) => false,
        }
    }
}

impl Value<'_> {
    pub fn tag(&self) -> TypeTag {
        match self {
            Value::S(_) => TypeTag::S,
            Value::N(_) => TypeTag::N,
            Value::B(_) => TypeTag::B,
            Value::Bool(_) => TypeTag::Bool,
            Value::Null => TypeTag::Null,
            Value::SS(_) => TypeTag::SS,
            Value::NS(_) => TypeTag::NS,
            Value::BS(_) => TypeTag::BS,
            Value::L(_) => TypeTag::L,
            Value::M(_) => TypeTag::M,
        }
    }

    /// Size as DynamoDB counts it: strings as UTF-8 bytes, numbers by significant digits,
    /// binary as raw bytes, 3 bytes plus 1 per element for lists and maps.
    pub fn dynamodb_size(&self) -> usize {
        match self {
            Value::S(s) => s.len(),
            Value::N(n) => number_size(n),
            Value::B(b) => b.len(),
            Value::Bool(_) | Value::Null => 1,
            Value::SS(v) => v.iter().map(|s| s.len()).sum(),
            Value::NS(v) => v.iter().map(number_size).sum(),
            Value::BS(v) => v.iter().map(|b| b.len()).sum(),
            Value::L(v) => 3 + v.iter().map(|e| 1 + e.dynamodb_size()).sum::<usize>(),
            Value::M(v) => 3 + v.iter().map(|(k, e)| 1 + k.len() + e.dynamodb_size()).sum::<usize>(),
        }
    }

    /// Writes the value as compact DynamoDB JSON (`{"S":"x"}`), numbers in canonical form and
    /// binary as padded base64: the lossless text form used for `json` columns.
    pub fn write_dynamodb_json(&self, out: &mut String) {
        use base64::Engine as _;
        let b64 = &base64::engine::general_purpose::STANDARD;
        out.push_str("{\"");
        out.push_str(self.tag().key());
        out.push_str("\":");
        match self {
            Value::S(s) => json::write_json_string(out, s),
            Value::N(n) => json::write_json_string(out, n.as_str()),
            Value::B(b) => {
                out.push('"');
                b64.encode_string(b, out);
                out.push('"');
            }
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Null => out.push_str("true"),
            Value::SS(v) => write_list(out, v, |out, s| json::write_json_string(out, s)),
            Value::NS(v) => write_list(out, v, |out, n| json::write_json_string(out, n.as_str())),
            Value::BS(v) => write_list(out, v, |out, b| {
                out.push('"');
                b64.encode_string(b, out);
                out.push('"');
            }),
            Value::L(v) => write_list(out, v, |out, e| e.write_dynamodb_json(out)),
            Value::M(v) => write_item_json(v, out),
        }
        out.push('}');
    }
}

fn write_list<T>(out: &mut String, items: &[T], mut each: impl FnMut(&mut String, &T)) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(out, item);
    }
    out.push(']');
}

fn number_size(n: &Number<'_>) -> usize {
    n.significant_digits().div_ceil(2) + 1
}

/// Size of a whole item as DynamoDB counts it: attribute names plus values.
pub fn item_size(item: &Item<'_>) -> usize {
    item.iter().map(|(k, v)| k.len() + v.dynamodb_size()).sum()
}

/// Writes a whole item (or the payload of an `M`) as compact DynamoDB JSON (`{"a":{"S":"x"},...}`).
pub fn write_item_json(item: &Item<'_>, out: &mut String) {
    out.push('{');
    for (i, (k, v)) in item.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::write_json_string(out, k);
        out.push(':');
        v.write_dynamodb_json(out);
    }
    out.push('}');
}

/// Why a line or item is not something DynamoDB could have exported: the decode-level reject
/// reasons. `normalize::RejectReason` is the one table of every reason code; these are its
/// decode-level part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecodeReason {
    InvalidUtf8,
    InvalidJson,
    NotAnItem,
    NoTypeKey,
    TwoTypeKeys,
    UnknownTypeKey,
    WrongValueShape,
    InvalidNumber,
    TooManyDigits,
    NumberOutOfRange,
    InvalidBase64,
    EmptySet,
    DuplicateSetMember,
    DuplicateAttribute,
    TooDeep,
    EmptyItem,
    ItemTooLarge,
    /// A change record (incremental export line) without `Keys`, or with empty `Keys`.
    NoKeys,
    /// A change record whose image disagrees with its `Keys` on a key attribute.
    KeysMismatch,
    /// A change record whose `Metadata.WriteTimestampMicros` is missing or not a timestamp.
    BadWriteTime,
    /// An Ion line that is not Ion text (a syntax error, a truncated value).
    InvalidIon,
    /// An Ion value of a type DynamoDB never exports: float, timestamp, symbol, clob, s-expression
    /// or a typed null such as `null.int`.
    UnexportedIonType,
    /// An Ion annotation DynamoDB never writes: anything but one `$dynamodb_SS`, `$dynamodb_NS` or
    /// `$dynamodb_BS` on a list, or an annotation on a set member, an item or a line.
    BadAnnotation,
}

/// A line or item that is not something DynamoDB could have exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecodeError {
    pub reason: DecodeReason,
    /// Attribute path such as `address.zip` or `tags[2]`, empty when the whole line is at fault.
    pub attribute: String,
    /// Byte offset of the problem inside the line (or item).
    pub offset: usize,
    /// Lowercase message naming the attribute, with backticks around identifiers.
    pub message: String,
}

impl DecodeError {
    pub fn new(reason: DecodeReason, attribute: impl Into<String>, offset: usize, message: impl Into<String>) -> Self {
        DecodeError { reason, attribute: attribute.into(), offset, message: message.into() }
    }
}

/// What the decoders' property tests share.
#[cfg(test)]
pub(crate) mod testutil {
    /// `seed` with each `(at, delete, insert)` edit applied in turn: `delete` bytes from `at`
    /// (both clamped to the line) replaced by `insert`; an edit that would split a character is
    /// skipped.
    pub(crate) fn mutate(seed: &str, edits: &[(usize, usize, String)]) -> String {
        let mut line = seed.to_owned();
        for (at, del, ins) in edits {
            let at = (*at).min(line.len());
            let end = (at + del).min(line.len());
            if line.is_char_boundary(at) && line.is_char_boundary(end) {
                line.replace_range(at..end, ins);
            }
        }
        line
    }

    /// Whatever a decoder made of a mutated line re-encodes to DynamoDB JSON that decodes to the
    /// same item.
    pub(crate) fn reencodes_equal(item: &super::Item<'_>) -> bool {
        let mut text = String::new();
        super::write_item_json(item, &mut text);
        super::json::decode_item_object(&text).is_ok_and(|back| back == *item)
    }

    #[test]
    fn mutate_applies_edits_in_turn_and_skips_split_characters() {
        let e = |at, del, ins: &str| (at, del, ins.to_owned());
        assert_eq!(mutate("abcdef", &[e(1, 2, "X"), e(0, 0, "[")]), "[aXdef");
        assert_eq!(mutate("ab", &[e(9, 9, "!")]), "ab!");
        // `é` is two bytes: an edit starting inside it is skipped.
        assert_eq!(mutate("é", &[e(1, 1, "x")]), "é");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout `Value`'s documentation promises: one word of tag, three of payload, and an
    /// `Option` that uses a free tag value instead of a word more.
    #[test]
    fn values_are_four_words() {
        assert_eq!(std::mem::size_of::<Value<'_>>(), 32);
        assert_eq!(std::mem::size_of::<Option<Value<'_>>>(), 32);
    }

    /// `copied` equals `clone` for every kind of value, borrowed or owned; the bitwise copy of
    /// a borrowed value still points at the same text, and an owned value is a real clone.
    #[test]
    fn copied_is_clone() {
        let line = String::from("text 12.5 bytes");
        let n = |t: &'static str| Number::parse(t).unwrap_or_else(|e| panic!("{t}: {e:?}"));
        let values = [
            Value::S(Cow::Borrowed(&line[..4])),
            Value::S(Cow::Owned("owned".into())),
            Value::N(Number::from_canonical(&line[5..9])),
            Value::N(n("12.5").into_owned()),
            Value::B(Cow::Borrowed(&line.as_bytes()[10..])),
            Value::B(Cow::Owned(vec![0, 255])),
            Value::Bool(false),
            Value::Null,
            Value::SS(vec![Cow::Borrowed("a")]),
            Value::NS(vec![n("1")]),
            Value::BS(vec![Cow::Borrowed(b"x")]),
            Value::L(vec![Value::Null]),
            Value::M(vec![(Cow::Borrowed("k"), Value::S(Cow::Borrowed("v")))]),
        ];
        for v in &values {
            let c = v.copied();
            assert_eq!(&c, v);
            assert_eq!(c.owns_nothing(), v.owns_nothing());
            match (&c, v) {
                (Value::S(Cow::Borrowed(a)), Value::S(Cow::Borrowed(b))) => assert_eq!(a.as_ptr(), b.as_ptr()),
                (Value::S(Cow::Owned(a)), Value::S(Cow::Owned(b))) => assert_ne!(a.as_ptr(), b.as_ptr()),
                _ => {}
            }
        }
        assert_eq!(values.iter().filter(|v| v.owns_nothing()).count(), 5);
    }

    proptest::proptest! {
        /// Names from a small alphabet, so that equal lengths and equal first bytes are common.
        #[test]
        fn same_name_is_equality(a in "[PSKé_]{0,4}", b in "[PSKé_]{0,4}") {
            proptest::prop_assert_eq!(same_name(&a, &b), a == b);
            proptest::prop_assert!(same_name(&a, &a));
        }
    }

    #[test]
    fn sizes_follow_dynamodb_rules() {
        let item: Item<'_> = vec![
            (Cow::Borrowed("pk"), Value::S(Cow::Borrowed("abc"))),
            (Cow::Borrowed("n"), Value::N(Number::parse("12345").unwrap())),
            (Cow::Borrowed("b"), Value::B(Cow::Owned(vec![0; 10]))),
            (Cow::Borrowed("l"), Value::L(vec![Value::Bool(true), Value::Null])),
            (Cow::Borrowed("m"), Value::M(vec![(Cow::Borrowed("k"), Value::S(Cow::Borrowed("v")))])),
        ];
        // pk: 2 + 3; n: 1 + (3 + 1); b: 1 + 10; l: 1 + 3 + 2*(1+1); m: 1 + 3 + 1 + 1 + 1
        assert_eq!(item_size(&item), 5 + 5 + 11 + 8 + 7);
    }

    #[test]
    fn dynamodb_json_is_lossless_text() {
        let v = Value::M(vec![
            (Cow::Borrowed("a\"b"), Value::BS(vec![Cow::Owned(vec![0xde, 0xad, 0xbe, 0xef])])),
            (Cow::Borrowed("n"), Value::NS(vec![Number::parse("1.50").unwrap()])),
        ]);
        let mut s = String::new();
        v.write_dynamodb_json(&mut s);
        assert_eq!(s, r#"{"M":{"a\"b":{"BS":["3q2+7w=="]},"n":{"NS":["1.5"]}}}"#);
    }

    /// The change-record checks are one function: JSON and Ion lines with the same fault get
    /// the same reason and the same message.
    #[test]
    fn change_checks_are_shared_by_json_and_ion() {
        let s = |v: &'static str| Value::S(Cow::Borrowed(v));
        let keys = || Some(vec![(Cow::Borrowed("pk"), s("1"))]);
        let image = |v: &'static str| Some(vec![(Cow::Borrowed("pk"), s(v)), (Cow::Borrowed("a"), s("x"))]);
        let reason = |r: Result<Change<'_>, (DecodeReason, String)>| r.map(|_| ()).map_err(|(r, _)| r);
        assert_eq!(reason(check_change(None, None, None, Some(1))), Err(DecodeReason::NoKeys));
        assert_eq!(reason(check_change(keys(), None, None, None)), Err(DecodeReason::BadWriteTime));
        assert_eq!(reason(check_change(keys(), image("2"), None, Some(1))), Err(DecodeReason::KeysMismatch));
        let lacks = check_change(keys(), None, Some(vec![(Cow::Borrowed("a"), s("x"))]), Some(1));
        assert_eq!(lacks.map(|_| ()).unwrap_err().1, "`NewImage` lacks key attribute `pk` that `Keys` names");
        let ok = check_change(keys(), image("1"), image("1"), Some(7)).unwrap();
        assert_eq!((ok.write_time_micros, ok.keys.len(), ok.new.map(|n| n.len())), (7, 1, Some(2)));
        for (json, ion) in [
            (
                r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"pk":{"S":"1"}},"NewImage":{"pk":{"S":"2"}}}"#,
                r#"{Metadata:{WriteTimestampMicros:1},Keys:{pk:"1"},NewImage:{pk:"2"}}"#,
            ),
            (r#"{"Keys":{"pk":{"S":"1"}}}"#, r#"{Keys:{pk:"1"}}"#),
            (r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}}}"#, r#"{Metadata:{WriteTimestampMicros:1}}"#),
        ] {
            let j = json::decode_export_line(json).unwrap_err();
            let i = ion::decode_export_line(ion).unwrap_err();
            assert_eq!((j.reason, &j.message), (i.reason, &i.message), "{json}");
        }
    }
}
