//! Amazon Ion text export lines (`ExportFormat=ION`) to [`Record`]s: `$ion_1_0 {Item:{…}}` for
//! a full export, `{Metadata:…,Keys:…,OldImage:…,NewImage:…}` for an incremental export's change
//! record, decoded into exactly the values the DynamoDB JSON path gives for the same item.
//!
//! Ion text is parsed by `ion-rs` through its stable `Element` API, one line at a time; this
//! module owns the mapping from Ion types to DynamoDB types (string → `S`, decimal and int →
//! canonical `N`, blob → `B`, bool, `null` → `NULL`, lists annotated `$dynamodb_SS`/`NS`/`BS` →
//! sets, other lists → `L`, structs → `M`) and refuses, as a typed reject, everything DynamoDB
//! could not have exported: floats, timestamps, symbol values, clobs, s-expressions, typed nulls,
//! unknown or misplaced annotations, mixed set members, duplicate fields, nesting over 32 levels
//! and items over 400 KB. Nesting is bounded by a lexical scan before `ion-rs` sees the line, so
//! no input can exhaust the stack. It never panics on any input and knows nothing of files.

use std::borrow::Cow;
use std::fmt::Write as _;

use ion_rs::{Element, IonType, Sequence, Struct, Value as Ion};

use super::{Change, DecodeError, DecodeReason, Item, MAX_DEPTH, MAX_ITEM_SIZE, Number, NumberError, Record, Value};

/// The annotation DynamoDB puts on a list that is a string set.
pub const SS_ANNOTATION: &str = "$dynamodb_SS";
/// The annotation DynamoDB puts on a list that is a number set.
pub const NS_ANNOTATION: &str = "$dynamodb_NS";
/// The annotation DynamoDB puts on a list that is a binary set.
pub const BS_ANNOTATION: &str = "$dynamodb_BS";

/// Deepest container nesting handed to `ion-rs`: the line's struct, `Item`, and 32 levels of
/// attributes, each of which may open one container; deeper lines are refused unparsed.
const LEXICAL_DEPTH_LIMIT: usize = MAX_DEPTH + 3;

/// Decodes one Ion export line; see the module documentation.
pub fn decode_export_line(line: &str) -> Result<Record<'static>, DecodeError> {
    if let Some(at) = too_deep_at(line) {
        return Err(DecodeError::new(
            DecodeReason::TooDeep,
            "",
            at,
            format!("nesting deeper than {MAX_DEPTH} levels (DynamoDB's limit)"),
        ));
    }
    let values = Element::read_all(line.as_bytes()).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("");
        let mut shown: String = first.chars().take(200).collect();
        if shown.len() < first.len() {
            shown.push('…');
        }
        DecodeError::new(DecodeReason::InvalidIon, "", 0, format!("line is not valid Ion text: {shown}"))
    })?;
    let top = match values.len() {
        1 => values.get(0),
        0 => None,
        n => {
            return Err(Decoder::default().fail(
                DecodeReason::NotAnItem,
                format!("line holds {n} Ion values; expected one `{{Item:{{…}}}}` struct"),
            ));
        }
    };
    let Some(top) = top else {
        return Err(Decoder::default().fail(DecodeReason::NotAnItem, "line holds no Ion value"));
    };
    let mut d = Decoder::default();
    let Ion::Struct(record) = top.value() else {
        return Err(d.fail(
            DecodeReason::NotAnItem,
            format!("line is an Ion {}, not a struct; expected `{{Item:{{…}}}}`", type_name(top)),
        ));
    };
    if let Some(a) = first_annotation(top) {
        return Err(d.fail(DecodeReason::BadAnnotation, format!("the line's struct has annotation `{a}`")));
    }
    let mut fields = record.fields();
    let Some((name, first)) = fields.next() else {
        return Err(d.fail(DecodeReason::NotAnItem, "line is an empty struct, expected `{Item:{…}}`"));
    };
    match name.text() {
        Some("Item") => {
            if fields.next().is_some() {
                return Err(d.fail(DecodeReason::NotAnItem, "unexpected field after `Item`"));
            }
            Ok(Record::Put(d.item(first)?))
        }
        Some("Metadata" | "Keys" | "OldImage" | "NewImage") => Ok(Record::Change(d.change(record)?)),
        other => Err(d.fail(
            DecodeReason::NotAnItem,
            format!(
                "expected `Item` (or a change record's `Metadata`, `Keys`, `NewImage`), found `{}`",
                other.unwrap_or("$0")
            ),
        )),
    }
}

/// The byte offset where container nesting first exceeds [`LEXICAL_DEPTH_LIMIT`], skipping
/// strings, quoted symbols, comments and lobs; `None` when it never does.
fn too_deep_at(line: &str) -> Option<usize> {
    let b = line.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    // Moves past a quoted run that ends with `close` (escapes honoured), from just after its
    // opening quote; returns the index after the closing quote, or the end.
    let skip_quoted = |mut i: usize, close: &[u8]| {
        while i < b.len() {
            if b[i] == b'\\' {
                i += 2;
            } else if b[i..].starts_with(close) {
                return i + close.len();
            } else {
                i += 1;
            }
        }
        b.len()
    };
    while i < b.len() {
        match b[i] {
            b'"' => i = skip_quoted(i + 1, b"\""),
            b'\'' if b[i..].starts_with(b"'''") => i = skip_quoted(i + 3, b"'''"),
            b'\'' => i = skip_quoted(i + 1, b"'"),
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n + 1);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = memchr::memmem::find(&b[i + 2..], b"*/").map_or(b.len(), |n| i + 2 + n + 2);
            }
            b'{' if b.get(i + 1) == Some(&b'{') => {
                // A lob: base64 or a quoted clob, then `}}`; it is one value, not two structs.
                depth += 1;
                if depth > LEXICAL_DEPTH_LIMIT {
                    return Some(i);
                }
                i += 2;
                while i < b.len() && !b[i..].starts_with(b"}}") {
                    i = match b[i] {
                        b'"' => skip_quoted(i + 1, b"\""),
                        b'\'' if b[i..].starts_with(b"'''") => skip_quoted(i + 3, b"'''"),
                        _ => i + 1,
                    };
                }
                i += 2;
                depth -= 1;
            }
            b'{' | b'[' | b'(' => {
                depth += 1;
                if depth > LEXICAL_DEPTH_LIMIT {
                    return Some(i);
                }
                i += 1;
            }
            b'}' | b']' | b')' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// The first annotation of `e`, `$0` when it has no text.
fn first_annotation(e: &Element) -> Option<&str> {
    e.annotations().iter().next().map(|a| a.text().unwrap_or("$0"))
}

/// The Ion type of `e` as a message names it (`null.int` for a typed null).
fn type_name(e: &Element) -> String {
    match e.value() {
        Ion::Null(t) => format!("typed null `null.{t}`"),
        v => v.ion_type().to_string(),
    }
}

/// One step of an attribute path, borrowing names from the parsed line.
#[derive(Debug, Clone, Copy)]
enum Seg<'e> {
    Name(&'e str),
    Index(usize),
}

/// The attribute path of the value being read, for messages.
#[derive(Default)]
struct Decoder<'e> {
    path: Vec<Seg<'e>>,
}

impl<'e> Decoder<'e> {
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

    fn fail(&self, reason: DecodeReason, message: impl AsRef<str>) -> DecodeError {
        let attribute = self.path_string();
        let message = if attribute.is_empty() {
            message.as_ref().to_owned()
        } else {
            format!("attribute `{attribute}`: {}", message.as_ref())
        };
        DecodeError::new(reason, attribute, 0, message)
    }

    /// The item under `Item`: a non-empty attribute map within DynamoDB's size limit.
    fn item(&mut self, e: &'e Element) -> Result<Item<'static>, DecodeError> {
        let item = self.image_map(e, "item")?;
        if item.is_empty() {
            return Err(self.fail(DecodeReason::EmptyItem, "item has no attributes"));
        }
        check_size(&item, "item").map_err(|m| self.fail(DecodeReason::ItemTooLarge, m))?;
        Ok(item)
    }

    /// A change record's fields: `Metadata.WriteTimestampMicros`, `Keys`, and the images.
    fn change(&mut self, record: &'e Struct) -> Result<Change<'static>, DecodeError> {
        let mut write_time: Option<i64> = None;
        let mut keys: Option<Item<'static>> = None;
        let mut old: Option<Item<'static>> = None;
        let mut new: Option<Item<'static>> = None;
        let mut seen_metadata = false;
        for (name, value) in record.fields() {
            let name = name.text().unwrap_or("$0");
            match name {
                "Metadata" if !seen_metadata => {
                    seen_metadata = true;
                    write_time = self.metadata(value)?;
                }
                "Keys" if keys.is_none() => keys = Some(self.image(value, "Keys")?),
                "OldImage" if old.is_none() => old = Some(self.image(value, "OldImage")?),
                "NewImage" if new.is_none() => new = Some(self.image(value, "NewImage")?),
                "Metadata" | "Keys" | "OldImage" | "NewImage" => {
                    return Err(self.fail(
                        DecodeReason::DuplicateAttribute,
                        format!("field `{name}` appears twice in the change record"),
                    ));
                }
                other => {
                    return Err(self.fail(
                        DecodeReason::NotAnItem,
                        format!(
                            "unexpected field `{other}` in a change record (it has `Metadata`, `Keys`, `OldImage` and `NewImage`)"
                        ),
                    ));
                }
            }
        }
        super::check_change(keys, old, new, write_time).map_err(|(reason, m)| self.fail(reason, m))
    }

    /// `{WriteTimestampMicros:…}`: the write time, or `None` when absent.
    fn metadata(&mut self, e: &'e Element) -> Result<Option<i64>, DecodeError> {
        self.path.push(Seg::Name("Metadata"));
        let Ion::Struct(s) = e.value() else {
            return Err(self.fail(DecodeReason::WrongValueShape, "expected a struct"));
        };
        let mut out = None;
        for (name, value) in s.fields() {
            if name.text() != Some("WriteTimestampMicros") {
                continue;
            }
            let micros = match value.value() {
                Ion::Int(i) => i.as_i64(),
                Ion::Decimal(_) => match self.number(value) {
                    Ok(n) => n.to_i64(),
                    Err(_) => None,
                },
                _ => None,
            };
            match micros.filter(|m| *m >= 0) {
                Some(m) if value.annotations().is_empty() => out = Some(m),
                _ => {
                    self.path.pop();
                    return Err(self.fail(
                        DecodeReason::BadWriteTime,
                        "`Metadata.WriteTimestampMicros` is not a number of microseconds since the epoch",
                    ));
                }
            }
        }
        self.path.pop();
        Ok(out)
    }

    /// `Keys`, `OldImage` or `NewImage`: an attribute map like an item, named in error paths.
    fn image(&mut self, e: &'e Element, label: &'static str) -> Result<Item<'static>, DecodeError> {
        self.path.push(Seg::Name(label));
        let item = self.image_map(e, label);
        self.path.pop();
        let item = item?;
        if item.is_empty() {
            let reason = if label == "Keys" { DecodeReason::NoKeys } else { DecodeReason::EmptyItem };
            return Err(self.fail(reason, format!("`{label}` has no attributes")));
        }
        check_size(&item, &format!("`{label}`")).map_err(|m| self.fail(DecodeReason::ItemTooLarge, m))?;
        Ok(item)
    }

    /// A struct without annotations read as a top-level attribute map.
    fn image_map(&mut self, e: &'e Element, what: &str) -> Result<Item<'static>, DecodeError> {
        let Ion::Struct(s) = e.value() else {
            return Err(self.fail(
                DecodeReason::WrongValueShape,
                format!("expected the {what} as an Ion struct, found {}", type_name(e)),
            ));
        };
        if let Some(a) = first_annotation(e) {
            return Err(self.fail(DecodeReason::BadAnnotation, format!("the {what} has annotation `{a}`")));
        }
        self.attr_map(s, 1)
    }

    /// The fields of a struct as attributes at nesting level `depth`; refuses duplicate names.
    fn attr_map(&mut self, s: &'e Struct, depth: usize) -> Result<Item<'static>, DecodeError> {
        let mut out: Item<'static> = Vec::with_capacity(s.len());
        for (name, value) in s.fields() {
            let Some(name) = name.text() else {
                return Err(self.fail(DecodeReason::InvalidIon, "a field name is a symbol without text"));
            };
            if out.iter().any(|(k, _)| k == name) {
                return Err(self.fail(DecodeReason::DuplicateAttribute, format!("attribute `{name}` appears twice")));
            }
            self.path.push(Seg::Name(name));
            let v = self.value(value, depth)?;
            self.path.pop();
            out.push((Cow::Owned(name.to_owned()), v));
        }
        Ok(out)
    }

    /// One attribute value at nesting level `depth` (top-level attributes are 1).
    fn value(&mut self, e: &'e Element, depth: usize) -> Result<Value<'static>, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(
                self.fail(DecodeReason::TooDeep, format!("nesting deeper than {MAX_DEPTH} levels (DynamoDB's limit)"))
            );
        }
        let annotations = e.annotations();
        if !annotations.is_empty() {
            return self.annotated(e);
        }
        Ok(match e.value() {
            Ion::String(s) => Value::S(Cow::Owned(s.text().to_owned())),
            Ion::Int(_) | Ion::Decimal(_) => Value::N(self.number(e)?),
            Ion::Blob(b) => Value::B(Cow::Owned(b.as_ref().to_vec())),
            Ion::Bool(b) => Value::Bool(*b),
            Ion::Null(IonType::Null) => Value::Null,
            Ion::List(seq) => {
                let mut out = Vec::with_capacity(seq.len());
                for (i, el) in seq.elements().enumerate() {
                    self.path.push(Seg::Index(i));
                    out.push(self.value(el, depth + 1)?);
                    self.path.pop();
                }
                Value::L(out)
            }
            Ion::Struct(s) => Value::M(self.attr_map(s, depth + 1)?),
            _ => return Err(self.not_exported(e)),
        })
    }

    fn not_exported(&self, e: &Element) -> DecodeError {
        self.fail(
            DecodeReason::UnexportedIonType,
            format!(
                "Ion {} is not a type DynamoDB exports (it writes strings, decimals, ints, blobs, bools, `null`, lists and structs)",
                type_name(e)
            ),
        )
    }

    /// A value with annotations: only a list with exactly one set annotation is DynamoDB's.
    fn annotated(&mut self, e: &'e Element) -> Result<Value<'static>, DecodeError> {
        let names: Vec<&str> = e.annotations().iter().map(|a| a.text().unwrap_or("$0")).collect();
        let set = match names.as_slice() {
            [SS_ANNOTATION] => Some(SetKind::S),
            [NS_ANNOTATION] => Some(SetKind::N),
            [BS_ANNOTATION] => Some(SetKind::B),
            _ => None,
        };
        let (Some(kind), Ion::List(seq)) = (set, e.value()) else {
            let shown = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            let why = if set.is_some() {
                format!("annotation {shown} marks a set, but the value is an Ion {}, not a list", type_name(e))
            } else if names.len() > 1 {
                format!(
                    "value has annotations {shown}; DynamoDB writes at most one, `{SS_ANNOTATION}`, `{NS_ANNOTATION}` or `{BS_ANNOTATION}` on a list"
                )
            } else {
                format!(
                    "unknown annotation {shown}; DynamoDB writes only `{SS_ANNOTATION}`, `{NS_ANNOTATION}` and `{BS_ANNOTATION}`, on lists"
                )
            };
            return Err(self.fail(DecodeReason::BadAnnotation, why));
        };
        self.set(kind, seq)
    }

    fn set(&mut self, kind: SetKind, seq: &'e Sequence) -> Result<Value<'static>, DecodeError> {
        let tag = kind.tag();
        if seq.is_empty() {
            return Err(
                self.fail(DecodeReason::EmptySet, format!("empty `{tag}` set; DynamoDB never stores empty sets"))
            );
        }
        let mut strings: Vec<Cow<'static, str>> = Vec::new();
        let mut numbers: Vec<Number<'static>> = Vec::new();
        let mut blobs: Vec<Cow<'static, [u8]>> = Vec::new();
        for (i, el) in seq.elements().enumerate() {
            self.path.push(Seg::Index(i));
            if let Some(a) = first_annotation(el) {
                return Err(self.fail(
                    DecodeReason::BadAnnotation,
                    format!("`{tag}` member has annotation `{a}`; sets do not nest"),
                ));
            }
            match (kind, el.value()) {
                (SetKind::S, Ion::String(s)) => strings.push(Cow::Owned(s.text().to_owned())),
                (SetKind::N, Ion::Int(_) | Ion::Decimal(_)) => numbers.push(self.number(el)?),
                (SetKind::B, Ion::Blob(b)) => blobs.push(Cow::Owned(b.as_ref().to_vec())),
                _ => {
                    return Err(self.fail(
                        DecodeReason::WrongValueShape,
                        format!("`{tag}` members must be {}, found an Ion {}", kind.members(), type_name(el)),
                    ));
                }
            }
            self.path.pop();
        }
        let dup = match kind {
            SetKind::S => has_duplicate(&strings),
            SetKind::N => has_duplicate(&numbers),
            SetKind::B => has_duplicate(&blobs),
        };
        if dup {
            return Err(self.fail(DecodeReason::DuplicateSetMember, format!("`{tag}` set has a duplicate member")));
        }
        Ok(match kind {
            SetKind::S => Value::SS(strings),
            SetKind::N => Value::NS(numbers),
            SetKind::B => Value::BS(blobs),
        })
    }

    /// An Ion int or decimal as a DynamoDB number in canonical text.
    fn number(&self, e: &Element) -> Result<Number<'static>, DecodeError> {
        let raw = match e.value() {
            Ion::Int(i) => i.to_string(),
            Ion::Decimal(d) => {
                // `coefficient × 10^exponent`; the coefficient prints `-0` for negative zero.
                format!("{}E{}", d.coefficient(), d.exponent())
            }
            _ => return Err(self.not_exported(e)),
        };
        Number::parse(&raw).map(Number::into_owned).map_err(|err| {
            let shown = ion_text(e);
            let (reason, msg) = match err {
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
            self.fail(reason, msg)
        })
    }
}

/// Ion text of a scalar, shortened for a message.
fn ion_text(e: &Element) -> String {
    let text = e.value().to_string();
    let mut shown: String = text.chars().take(60).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

fn check_size(item: &Item<'_>, what: &str) -> Result<(), String> {
    let size = super::item_size(item);
    if size > MAX_ITEM_SIZE {
        return Err(format!(
            "{what} is {size} bytes as DynamoDB counts them, above the 400 KB limit ({MAX_ITEM_SIZE} bytes)"
        ));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum SetKind {
    S,
    N,
    B,
}

impl SetKind {
    fn tag(self) -> &'static str {
        match self {
            SetKind::S => "SS",
            SetKind::N => "NS",
            SetKind::B => "BS",
        }
    }

    fn members(self) -> &'static str {
        match self {
            SetKind::S => "strings",
            SetKind::N => "decimals or ints",
            SetKind::B => "blobs",
        }
    }
}

fn has_duplicate<T: PartialEq + std::hash::Hash + Eq>(items: &[T]) -> bool {
    if items.len() <= 16 {
        items.iter().enumerate().any(|(i, a)| items[..i].contains(a))
    } else {
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        !items.iter().all(|x| seen.insert(x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::json;

    fn put(line: &str) -> Item<'static> {
        match decode_export_line(line) {
            Ok(Record::Put(item)) => item,
            other => panic!("expected an item from {line}: {other:?}"),
        }
    }

    fn reason(line: &str) -> DecodeReason {
        match decode_export_line(line) {
            Err(e) => e.reason,
            Ok(r) => panic!("expected a reject from {line}, got {r:?}"),
        }
    }

    #[test]
    fn the_documented_line_is_the_same_item_as_its_json() {
        let ion = r#"$ion_1_0 {Item:{PK:"CUST#7",SK:"PROFILE",Type:"Customer",score:-125d-1,qty:3.,price:2d3,photo:{{3q2+7w==}},vip:true,nick:null,tags:$dynamodb_SS::["gold","eu"],lucky:$dynamodb_NS::[7.,13.],keys:$dynamodb_BS::[{{AQI=}}],addr:{city:"Oslo",zip:15d1},'first name':["a",[1,{}]]}}"#;
        let json = r#"{"Item":{"PK":{"S":"CUST#7"},"SK":{"S":"PROFILE"},"Type":{"S":"Customer"},"score":{"N":"-12.5"},"qty":{"N":"3"},"price":{"N":"2000"},"photo":{"B":"3q2+7w=="},"vip":{"BOOL":true},"nick":{"NULL":true},"tags":{"SS":["gold","eu"]},"lucky":{"NS":["7","13"]},"keys":{"BS":["AQI="]},"addr":{"M":{"city":{"S":"Oslo"},"zip":{"N":"150"}}},"first name":{"L":[{"S":"a"},{"L":[{"N":"1"},{"M":{}}]}]}}}"#;
        assert_eq!(put(ion), json::put_line(json));
    }

    #[test]
    fn numbers_take_the_json_paths_canonical_text() {
        for (ion, want) in [
            ("103.", "103"),
            ("6d2", "600"),
            ("2d3", "2000"),
            ("-1.5", "-1.5"),
            ("-0.", "0"),
            ("-0d-3", "0"),
            ("0.", "0"),
            ("36", "36"),
            ("-0x10", "-16"),
            ("1_000", "1000"),
            ("1.50", "1.5"),
            ("12345678901234567890.123456789012345678", "12345678901234567890.123456789012345678"),
            ("9.9999999999999999999999999999999999999d125", &format!("{}{}", "9".repeat(38), "0".repeat(88))),
        ] {
            let item = put(&format!("$ion_1_0 {{Item:{{n:{ion}}}}}"));
            assert_eq!(item[0].1, Value::N(Number::parse(want).unwrap()), "{ion}");
        }
        let tiny = put("{Item:{n:1d-130}}");
        assert_eq!(tiny[0].1, Value::N(Number::parse("1E-130").unwrap()));
        for (ion, why) in [
            ("1d-131", DecodeReason::NumberOutOfRange),
            ("1d126", DecodeReason::NumberOutOfRange),
            ("1d-999999", DecodeReason::NumberOutOfRange),
            ("-7d999999", DecodeReason::NumberOutOfRange),
            ("123456789012345678901234567890123456789.", DecodeReason::TooManyDigits),
            ("123456789012345678901234567890123456789", DecodeReason::TooManyDigits),
        ] {
            assert_eq!(reason(&format!("{{Item:{{n:{ion}}}}}")), why, "{ion}");
        }
    }

    #[test]
    fn change_records_decode_like_json_ones() {
        let ion = r#"$ion_1_0 {Metadata:{WriteTimestampMicros:1768386096366933},Keys:{pk:3.,sk:2.},OldImage:{sk:2.,pk:3.,number:7.},NewImage:{pk:3.,sk:2.}}"#;
        let json = r#"{"Metadata":{"WriteTimestampMicros":{"N":"1768386096366933"}},"Keys":{"pk":{"N":"3"},"sk":{"N":"2"}},"OldImage":{"sk":{"N":"2"},"pk":{"N":"3"},"number":{"N":"7"}},"NewImage":{"pk":{"N":"3"},"sk":{"N":"2"}}}"#;
        assert_eq!(decode_export_line(ion).unwrap(), json::decode_export_line(json).unwrap());
        let delete = decode_export_line(r#"{Keys:{pk:"a"},Metadata:{WriteTimestampMicros:5.}}"#).unwrap();
        assert!(matches!(delete, Record::Change(Change { new: None, old: None, write_time_micros: 5, .. })));
        for (line, why) in [
            (r#"{Metadata:{}}"#, DecodeReason::NoKeys),
            (r#"{Keys:{pk:"1"}}"#, DecodeReason::BadWriteTime),
            (r#"{Metadata:{WriteTimestampMicros:"1"},Keys:{pk:"1"}}"#, DecodeReason::BadWriteTime),
            (r#"{Metadata:{WriteTimestampMicros:-1},Keys:{pk:"1"}}"#, DecodeReason::BadWriteTime),
            (r#"{Metadata:{WriteTimestampMicros:1},Keys:{}}"#, DecodeReason::NoKeys),
            (r#"{Metadata:{WriteTimestampMicros:1},Keys:{pk:"1"},NewImage:{pk:"2"}}"#, DecodeReason::KeysMismatch),
            (r#"{Metadata:{WriteTimestampMicros:1},Keys:{pk:"1"},OldImage:{a:"2"}}"#, DecodeReason::KeysMismatch),
            (r#"{Metadata:{WriteTimestampMicros:1},Keys:{pk:"1"},Keys:{pk:"1"}}"#, DecodeReason::DuplicateAttribute),
            (r#"{Metadata:{WriteTimestampMicros:1},Keys:{pk:"1"},Extra:1}"#, DecodeReason::NotAnItem),
            (r#"{Metadata:{WriteTimestampMicros:1},Keys:{pk:1e0}}"#, DecodeReason::UnexportedIonType),
        ] {
            assert_eq!(reason(line), why, "{line}");
        }
    }

    #[test]
    fn what_dynamodb_never_exports_is_a_typed_reject() {
        let deep = {
            let mut v = r#""leaf""#.to_owned();
            for _ in 1..33 {
                v = format!("[{v}]");
            }
            v
        };
        let ok_deep = deep.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap();
        assert_eq!(put(&format!("{{Item:{{d:{ok_deep}}}}}")).len(), 1);
        let err = decode_export_line(&format!("{{Item:{{d:{deep}}}}}")).unwrap_err();
        assert_eq!(err.reason, DecodeReason::TooDeep);
        assert_eq!(err.attribute, format!("d{}", "[0]".repeat(32)));
        assert_eq!(reason(&format!("{{Item:{{d:{}}}}}", "[".repeat(100_000))), DecodeReason::TooDeep);
        assert_eq!(reason(&format!("{{Item:{{d:{}1{}}}}}", "(".repeat(50), ")".repeat(50))), DecodeReason::TooDeep);
        let big = format!("{{Item:{{PK:\"x\",b:\"{}\"}}}}", "x".repeat(410 * 1024));
        use DecodeReason::*;
        for (line, why) in [
            (r#"{Item:{PK:"x",f:1.5e0}}"#, UnexportedIonType),
            (r#"{Item:{PK:"x",t:2026-12-01T00:00:00Z}}"#, UnexportedIonType),
            (r#"{Item:{PK:"x",s:sym}}"#, UnexportedIonType),
            (r#"{Item:{PK:"x",c:{{"clob"}}}}"#, UnexportedIonType),
            (r#"{Item:{PK:"x",n:null.int}}"#, UnexportedIonType),
            (r#"{Item:{PK:"x",e:(a b)}}"#, UnexportedIonType),
            (r#"{Item:{PK:"x",a:$dynamodb_XS::["a"]}}"#, BadAnnotation),
            (r#"{Item:{PK:"x",a:$dynamodb_SS::"a"}}"#, BadAnnotation),
            (r#"{Item:{PK:"x",a:$dynamodb_SS::$dynamodb_NS::["a"]}}"#, BadAnnotation),
            (r#"{Item:{PK:"x",a:$dynamodb_SS::[$dynamodb_SS::["a"]]}}"#, BadAnnotation),
            (r#"{Item:{PK:"x",a:note::"a"}}"#, BadAnnotation),
            (r#"top::{Item:{PK:"x"}}"#, BadAnnotation),
            (r#"{Item:x::{PK:"x"}}"#, BadAnnotation),
            (r#"{Item:{PK:"x",a:$dynamodb_SS::["a",1.]}}"#, WrongValueShape),
            (r#"{Item:{PK:"x",a:$dynamodb_NS::[1.,"a"]}}"#, WrongValueShape),
            (r#"{Item:{PK:"x",a:$dynamodb_BS::["a"]}}"#, WrongValueShape),
            (r#"{Item:{PK:"x",a:$dynamodb_SS::[]}}"#, EmptySet),
            (r#"{Item:{PK:"x",a:$dynamodb_NS::[1.,1.0,10d-1]}}"#, DuplicateSetMember),
            (r#"{Item:{PK:"x",PK:"y"}}"#, DuplicateAttribute),
            (r#"{Item:{PK:"x",m:{a:1,a:2}}}"#, DuplicateAttribute),
            (r#"{Item:{}}"#, EmptyItem),
            (r#"{Item:"x"}"#, WrongValueShape),
            (r#"{Foo:{PK:"x"}}"#, NotAnItem),
            (r#"{}"#, NotAnItem),
            (r#"[1]"#, NotAnItem),
            (r#"{Item:{PK:"x"}} {Item:{PK:"y"}}"#, NotAnItem),
            (r#"{Item:{PK:"x"},More:1}"#, NotAnItem),
            (r#"$ion_1_0"#, NotAnItem),
            (r#"{Item:{PK:"x",n:1"#, InvalidIon),
            (r#"{Item:{PK:"trunc"#, InvalidIon),
            (r#"{Item:{PK:"x",b:{{not base64!}}}}"#, InvalidIon),
            (r#"{Item:{PK:"x",,}}"#, InvalidIon),
            (&big, ItemTooLarge),
        ] {
            assert_eq!(reason(line), why, "{line}");
        }
        let err = decode_export_line(r#"{Item:{PK:"x",m:{inner:$dynamodb_SS::[]}}}"#).unwrap_err();
        assert_eq!(err.attribute, "m.inner");
        assert_eq!(err.message, "attribute `m.inner`: empty `SS` set; DynamoDB never stores empty sets");
    }

    #[test]
    fn bad_utf8_is_refused_by_the_dispatch() {
        let mut line = br#"$ion_1_0 {Item:{PK:"bad "#.to_vec();
        line.extend_from_slice(&[0xff, 0xfe]);
        line.extend_from_slice(br#""}}"#);
        let err = crate::decode::decode(crate::decode::Format::ExportIon, &line).unwrap_err();
        assert_eq!(err.reason, DecodeReason::InvalidUtf8);
        // Binary Ion starts with a byte that is never UTF-8: it cannot reach the text reader.
        let err = crate::decode::decode(crate::decode::Format::ExportIon, &[0xe0, 0x01, 0x00, 0xea]).unwrap_err();
        assert_eq!(err.reason, DecodeReason::InvalidUtf8);
    }

    mod no_panic {
        use proptest::prelude::*;

        const SEED: &str = r#"$ion_1_0 {Item:{PK:"a\"b",'x y':-125d-1,b:{{3q2+7w==}},ss:$dynamodb_SS::["x","y"],ns:$dynamodb_NS::[1.,2d3],l:[{k:true},null],bs:$dynamodb_BS::[{{AA==}}]}}"#;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

            #[test]
            fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
                let _ = super::decode_export_line(&s);
            }

            #[test]
            fn mutated_lines_never_panic(edits in proptest::collection::vec((0usize..SEED.len(), 0usize..4, "[{}\\[\\]()\"':,:\\\\$0-9a-zA-Z.dD_+-]{0,3}"), 1..6)) {
                let line = crate::decode::testutil::mutate(SEED, &edits);
                if let Ok(crate::decode::Record::Put(item)) = super::decode_export_line(&line) {
                    prop_assert!(crate::decode::testutil::reencodes_equal(&item), "{line}");
                }
            }
        }
    }
}
