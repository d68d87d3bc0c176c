//! The compact binary form items take between the two passes.
//!
//! Pass one decodes JSON once, infers schemas and writes items here; pass two reads them back
//! (borrowing strings and bytes from the chunk) to build Arrow columns. The format is private
//! to one run and never leaves the staging folder.
//!
//! An item is its attribute count, then each attribute's key and value. A key is a varint:
//! `2 * slot + 1` names the attribute by its slot (see [`encode_item_slots`]): in an inferred
//! table, its slot in the table's shape in the worker that wrote it; in a declared table, its
//! column's index. `2 * len` is followed by the name's `len` bytes (names a shape does not track,
//! or a declared table lacks). Slots spare pass one the copy of every name and pass two the
//! search for every column.
//!
//! # Logical size
//! Chunks, part files and row groups are cut by the size items would take with every name
//! written out ([`encode_item`]'s return), not by the bytes written: slots depend on the files
//! a worker read before, and cuts must not, so that the output stays the same whatever
//! `--threads` is.

use std::borrow::Cow;

use crate::decode::{Item, Number, TypeTag, Value, same_name};
use crate::normalize::{BatchBuilder, NormalizeError, RejectReason, RejectRow, Slot};

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

/// The bytes [`put_varint`] writes for `v`.
fn varint_len(v: u64) -> u64 {
    u64::from((64 - (v | 1).leading_zeros()).div_ceil(7))
}

/// Writes `item` with its attribute names, and returns its [logical size](self#logical-size).
pub fn encode_item(item: &Item<'_>, out: &mut Vec<u8>) -> u64 {
    encode_with(item, |_| NAMED, out)
}

/// Writes `item` with each attribute named by its slot (`slots[i]` for the `i`th attribute: in
/// an inferred table, from [`crate::mapping::infer::EntityShape::observe_slots`]; in a declared
/// one, from [`column_slots`]), or by its name when it has none; returns its
/// [logical size](self#logical-size).
pub fn encode_item_slots(item: &Item<'_>, slots: &[u32], out: &mut Vec<u8>) -> u64 {
    encode_with(item, |i| slots.get(i).copied().unwrap_or(NAMED), out)
}

/// Sets `slots`, for [`encode_item_slots`], to the index in `names` (a declared table's
/// columns) of each of `row`'s attributes; a name `names` lacks is written out. A declared row
/// lists its attributes in column order, so each is looked for after the last one found first.
///
/// Given the mapping's own strings ([`crate::normalize::apply::row_names`]), which are the ones
/// a mapped row names its values with, a row's name is mostly the very string at the next
/// column: the same address and length, found without comparing a byte (the comparisons were
/// 1.8% of a mapped unwind's CPU). Any other string with the same text finds the same column.
pub fn column_slots(names: &[&str], row: &Item<'_>, slots: &mut Vec<u32>) {
    slots.clear();
    let mut next = 0;
    for (name, _) in row {
        if let Some(n) = names.get(next)
            && std::ptr::eq(n.as_ptr(), name.as_ptr())
            && n.len() == name.len()
        {
            slots.push(next as u32);
            next += 1;
            continue;
        }
        let at = |from: usize| names.get(from..)?.iter().position(|n| same_name(n, name)).map(|i| from + i);
        match at(next).or_else(|| at(0)) {
            Some(i) => {
                slots.push(i as u32);
                next = i + 1;
            }
            None => slots.push(NAMED),
        }
    }
}

/// The [logical size](self#logical-size) of one attribute named `name` whose value took
/// `value_bytes`: what its name written out costs, and its value.
fn attribute_size(name: &str, value_bytes: usize) -> u64 {
    varint_len(name.len() as u64) + name.len() as u64 + value_bytes as u64
}

/// A slot that stands for "written by name".
const NAMED: u32 = crate::mapping::infer::UNTRACKED;

fn encode_with(item: &Item<'_>, slot: impl Fn(usize) -> u32, out: &mut Vec<u8>) -> u64 {
    let n = item.len() as u64;
    put_varint(out, n);
    let mut logical = varint_len(n);
    for (i, (k, v)) in item.iter().enumerate() {
        match slot(i) {
            NAMED => {
                put_varint(out, 2 * k.len() as u64);
                out.extend_from_slice(k.as_bytes());
            }
            s => put_varint(out, 2 * u64::from(s) + 1),
        }
        let at = out.len();
        encode_value(v, out);
        logical += attribute_size(k, out.len() - at);
    }
    logical
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

/// Why a spilled item could not be appended as a row ([`Reader::append_row`]).
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    #[error(transparent)]
    Spill(#[from] SpillError),
    #[error(transparent)]
    Normalize(#[from] NormalizeError),
}

/// The spill bytes were not written by [`encode_item`]: a bug or a damaged staging folder.
#[derive(Debug, thiserror::Error)]
#[error("spill data is damaged at byte {0}")]
pub struct SpillError(pub usize);

/// How an attribute of a spilled item is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// Its slot in the shape of the table, in the worker that wrote it.
    Slot(u32),
    Name(&'a str),
}

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

    #[inline]
    fn bytes(&mut self) -> Result<&'a [u8], SpillError> {
        let n = self.varint()? as usize;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len()).ok_or(SpillError(self.pos))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    #[inline]
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

    /// Appends the next item to `b` as one row, reading each value straight into its column:
    /// an attribute written by its slot goes to `places[slot]` (its name is `names[slot]`), one
    /// written by name to [`BatchBuilder::slot_at`]. Returns the item's
    /// [logical size](self#logical-size). Scalars are never moved once built: a row of values
    /// returned and copied cost a store-forwarding stall per value (most of pass two's reading,
    /// in `perf`).
    pub fn append_row(&mut self, names: &[Box<str>], places: &[Slot], b: &mut BatchBuilder) -> Result<usize, RowError> {
        let start = self.pos;
        let n = self.count()?;
        let mut logical = self.pos - start;
        b.begin_row();
        for pos in 0..n {
            let at = self.pos;
            let (name, place) = match self.key()? {
                Key::Slot(s) => {
                    let s = s as usize;
                    let name = names.get(s).ok_or(SpillError(at))?;
                    (name.as_ref(), places.get(s).copied().unwrap_or(Slot::Unknown))
                }
                Key::Name(name) => (name, b.slot_at(pos, name)),
            };
            let value_at = self.pos;
            let tag = self.tag()?;
            // Each scalar is built where `put` reads it: no `Result<Value>` to copy it out of.
            // (`value` reads the same scalars; routing it through a closure here cost 2% of
            // the unwind's CPU.)
            match tag {
                TypeTag::S => {
                    let s = self.str()?;
                    b.put(place, name, &Value::S(Cow::Borrowed(s)))?;
                }
                TypeTag::N => {
                    let s = self.str()?;
                    b.put(place, name, &Value::N(Number::from_canonical(s)))?;
                }
                TypeTag::B => {
                    let x = self.bytes()?;
                    b.put(place, name, &Value::B(Cow::Borrowed(x)))?;
                }
                TypeTag::Bool => {
                    let x = self.byte()?;
                    b.put(place, name, &Value::Bool(x != 0))?;
                }
                TypeTag::Null => b.put(place, name, &Value::Null)?,
                _ => {
                    let v = self.nested(tag)?;
                    b.put(place, name, &v)?;
                }
            }
            logical += attribute_size(name, self.pos - value_at) as usize;
        }
        b.end_row()?;
        Ok(logical)
    }

    /// An item written by [`encode_item`] (every attribute by name).
    pub fn item(&mut self) -> Result<Item<'a>, SpillError> {
        let n = self.count()?;
        let mut item = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let at = self.pos;
            let Key::Name(k) = self.key()? else { return Err(SpillError(at)) };
            item.push((Cow::Borrowed(k), self.value()?));
        }
        Ok(item)
    }

    /// The number of attributes of the next item; each follows as a [`Reader::key`] then a
    /// [`Reader::value`].
    pub fn count(&mut self) -> Result<usize, SpillError> {
        Ok(self.varint()? as usize)
    }

    /// How the next attribute is named.
    #[inline(always)]
    pub fn key(&mut self) -> Result<Key<'a>, SpillError> {
        let at = self.pos;
        let k = self.varint()?;
        if k & 1 == 1 {
            return u32::try_from(k >> 1).map(Key::Slot).map_err(|_| SpillError(at));
        }
        let end = self.pos.checked_add((k >> 1) as usize).filter(|&e| e <= self.b.len()).ok_or(SpillError(self.pos))?;
        let b = &self.b[self.pos..end];
        self.pos = end;
        if b.is_ascii() {
            // SAFETY: every byte is below 0x80, and a sequence of ASCII bytes is valid UTF-8.
            return Ok(Key::Name(unsafe { std::str::from_utf8_unchecked(b) }));
        }
        std::str::from_utf8(b).map(Key::Name).map_err(|_| SpillError(at))
    }

    /// The next value.
    #[inline]
    pub fn value(&mut self) -> Result<Value<'a>, SpillError> {
        let tag = self.tag()?;
        Ok(match tag {
            TypeTag::S => Value::S(Cow::Borrowed(self.str()?)),
            TypeTag::N => Value::N(Number::from_canonical(self.str()?)),
            TypeTag::B => Value::B(Cow::Borrowed(self.bytes()?)),
            TypeTag::Bool => Value::Bool(self.byte()? != 0),
            TypeTag::Null => Value::Null,
            _ => return self.nested(tag),
        })
    }

    /// The next value's type tag.
    #[inline(always)]
    fn tag(&mut self) -> Result<TypeTag, SpillError> {
        let at = self.pos;
        let tag = *TypeTag::ALL.get(*self.b.get(at).ok_or(SpillError(at))? as usize).ok_or(SpillError(at))?;
        self.pos += 1;
        Ok(tag)
    }

    /// The next byte (a `BOOL`'s value).
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, SpillError> {
        let b = *self.b.get(self.pos).ok_or(SpillError(self.pos))?;
        self.pos += 1;
        Ok(b)
    }

    /// A set, list or map, whose tag was read.
    #[inline(never)]
    fn nested(&mut self, tag: TypeTag) -> Result<Value<'a>, SpillError> {
        Ok(match tag {
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
            // [`Reader::value`] and [`Reader::append_row`] read scalars themselves.
            TypeTag::S | TypeTag::N | TypeTag::B | TypeTag::Bool | TypeTag::Null => {
                return Err(SpillError(self.pos - 1));
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

    /// Reads an item back whatever names its attributes, with `names` for the slots.
    fn read_slotted<'a>(r: &mut Reader<'a>, names: &'a [&'a str]) -> Item<'a> {
        let n = r.count().unwrap();
        (0..n)
            .map(|_| {
                let name = match r.key().unwrap() {
                    Key::Slot(s) => names[s as usize],
                    Key::Name(n) => n,
                };
                (Cow::Borrowed(name), r.value().unwrap())
            })
            .collect()
    }

    #[test]
    fn slots_read_back_as_their_names_and_sizes_are_logical() {
        let long = format!(
            "{{\"Item\":{{\"{}\":{{\"S\":\"x\"}},\"PK\":{{\"S\":\"a\"}},\"n\":{{\"N\":\"2\"}}}}}}",
            "k".repeat(70)
        );
        let item = decode_export_line(&long);
        let mut named = Vec::new();
        let logical = encode_item(&item, &mut named);
        // A name of 70 bytes takes a 2-byte key (2 * 70 > 127) where its length alone took one.
        assert_eq!(logical + 1, named.len() as u64);
        // `PK` and `n` by slot, the long name by name.
        let mut slotted = Vec::new();
        let slots = [crate::mapping::infer::UNTRACKED, 1, 0];
        assert_eq!(encode_item_slots(&item, &slots, &mut slotted), logical);
        assert!(slotted.len() < named.len());
        let names = ["n", "PK"];
        assert_eq!(read_slotted(&mut Reader::new(&slotted), &names), item);
        assert_eq!(read_slotted(&mut Reader::new(&named), &names), item);
        // `item()` reads names only: a slot is refused, not guessed.
        assert!(Reader::new(&slotted).item().is_err());
        // A slot past `u32` is damage.
        let mut big = Vec::new();
        put_varint(&mut big, (u64::from(u32::MAX) + 1) * 2 + 1);
        assert!(Reader::new(&big).key().is_err());
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(0), 1);
    }

    #[test]
    fn declared_rows_take_their_columns_index_as_slot() {
        let owned: Vec<String> = ["a", "b", "c", "_extra"].into_iter().map(String::from).collect();
        let names: Vec<&str> = owned.iter().map(String::as_str).collect();
        let row = |keys: &[&str]| -> Item<'static> {
            keys.iter().map(|k| (Cow::Owned(k.to_string()), Value::Null)).collect()
        };
        let mut slots = Vec::new();
        // In column order, with columns skipped (a row has no null columns).
        column_slots(&names, &row(&["a", "c", "_extra"]), &mut slots);
        assert_eq!(slots, [0, 2, 3]);
        // Out of order still finds each column; a name with no column is written out.
        column_slots(&names, &row(&["c", "a", "zz", "b"]), &mut slots);
        assert_eq!(slots, [2, 0, NAMED, 1]);
        // Read back through the names, the row is the row written.
        let item = decode_export_line(r#"{"Item":{"c":{"N":"1"},"a":{"S":"x"},"zz":{"BOOL":true}}}"#);
        column_slots(&names, &item, &mut slots);
        let (mut named, mut slotted) = (Vec::new(), Vec::new());
        assert_eq!(encode_item_slots(&item, &slots, &mut slotted), encode_item(&item, &mut named));
        assert_eq!(read_slotted(&mut Reader::new(&slotted), &names), item);
    }

    #[test]
    fn a_row_named_by_the_columns_own_strings_takes_the_same_slots() {
        let owned: Vec<String> = ["ab", "ac", "b", "ad"].into_iter().map(String::from).collect();
        let names: Vec<&str> = owned.iter().map(String::as_str).collect();
        let borrowed =
            |at: &[usize]| -> Item<'_> { at.iter().map(|&i| (Cow::Borrowed(names[i]), Value::Null)).collect() };
        let copied = |at: &[usize]| -> Item<'static> {
            at.iter().map(|&i| (Cow::Owned(names[i].to_owned()), Value::Null)).collect()
        };
        let (mut by_address, mut by_text) = (Vec::new(), Vec::new());
        for at in [&[0, 1, 2, 3][..], &[1, 3], &[3, 0, 2], &[2, 2]] {
            column_slots(&names, &borrowed(at), &mut by_address);
            column_slots(&names, &copied(at), &mut by_text);
            assert_eq!(by_address, by_text, "{at:?}");
            assert_eq!(by_address, at.iter().map(|&i| i as u32).collect::<Vec<_>>());
        }
        // A string at the next column's address but shorter (a prefix of it) is another name.
        let prefix: Item<'_> = vec![(Cow::Borrowed(&names[0][..1]), Value::Null)];
        column_slots(&names, &prefix, &mut by_address);
        assert_eq!(by_address, [NAMED]);
    }

    #[test]
    fn non_ascii_text_round_trips_and_damaged_text_is_refused() {
        let item = decode_export_line(r#"{"Item":{"név":{"S":"é✓\u00e9"},"a":{"SS":["x","✓"]}}}"#);
        let mut buf = Vec::new();
        encode_item(&item, &mut buf);
        assert_eq!(Reader::new(&buf).item().unwrap(), item);
        // One attribute `k` holding an `S` of two bytes that are not UTF-8.
        let damaged = [1, 2, b'k', TypeTag::S as u8, 2, 0xff, 0xfe];
        assert!(Reader::new(&damaged).item().is_err());
        let ascii = [1, 2, b'k', TypeTag::S as u8, 2, b'o', b'k'];
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

    mod slots {
        //! Pass two reading slots gives the batch pass two built from names before: items of
        //! random shapes, spilled by two "workers" whose slots differ, read back into one table.

        use proptest::prelude::*;

        use super::super::*;
        use crate::decode::json::put_line;
        use crate::mapping::infer::EntityShape;

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z]{0,3}".prop_map(|s| format!(r#"{{"S":"{s}"}}"#)),
                "-?[0-9]{1,4}(\\.[0-9]{1,2})?".prop_map(|n| format!(r#"{{"N":"{n}"}}"#)),
                any::<bool>().prop_map(|b| format!(r#"{{"BOOL":{b}}}"#)),
                Just(r#"{"NULL":true}"#.to_owned()),
                "[a-z]{1,2}".prop_map(|s| format!(r#"{{"L":[{{"S":"{s}"}},{{"N":"1"}}]}}"#)),
                "[0-9]{1,2}".prop_map(|n| format!(r#"{{"M":{{"k":{{"N":"{n}"}}}}}}"#)),
            ]
        }

        fn line() -> impl Strategy<Value = String> {
            // A name of 70 bytes takes a two-byte key when written by name.
            let name = prop_oneof![4 => "[a-e]", 1 => Just("n".repeat(70))];
            proptest::collection::btree_map(name, value(), 1..6).prop_map(|m| {
                let attrs: Vec<String> = m.iter().map(|(k, v)| format!(r#""{k}":{v}"#)).collect();
                format!(r#"{{"Item":{{{}}}}}"#, attrs.join(","))
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

            #[test]
            fn slotted_rows_build_the_batch_named_rows_built(lines in proptest::collection::vec(line(), 1..40)) {
                let items: Vec<Item<'_>> = lines.iter().map(|l| put_line(l)).collect();
                let half = items.len() / 2;
                // Two workers: each observes its half in its own shape, so slots differ.
                let mut spilled = Vec::new();
                let mut merged = EntityShape::default();
                for part in [&items[..half], &items[half..]] {
                    let (mut shape, mut bytes, mut logical) = (EntityShape::default(), Vec::new(), 0);
                    let mut named = Vec::new();
                    for item in part {
                        let mut slots = Vec::new();
                        shape.observe_slots(item, 0, 0, |s| slots.push(s));
                        logical += encode_item_slots(item, &slots, &mut bytes);
                        let before = named.len();
                        let l = encode_item(item, &mut named);
                        // Logical sizes are what names cost, whichever key was written.
                        let long = item.iter().filter(|(k, _)| k.len() >= 64).count() as u64;
                        prop_assert_eq!(l + long, (named.len() - before) as u64);
                    }
                    prop_assert_eq!(logical, named.len() as u64 - part.iter().map(|i| i.iter().filter(|(k, _)| k.len() >= 64).count() as u64).sum::<u64>());
                    merged.merge(&shape);
                    spilled.push((shape.names(), bytes, named));
                }
                let table = merged.schema("t", Some("T"), &mut Vec::new()).schema;
                let mut reference = BatchBuilder::new(&table);
                for item in &items {
                    reference.append(item).unwrap();
                }
                let (mut by_slot, mut by_name) = (BatchBuilder::new(&table), BatchBuilder::new(&table));
                for (names, bytes, named) in &spilled {
                    let places: Vec<Slot> = names.iter().map(|n| by_slot.slot_of(n)).collect();
                    let mut r = Reader::new(bytes);
                    while !r.at_end() {
                        r.append_row(names, &places, &mut by_slot).unwrap();
                    }
                    let mut r = Reader::new(named);
                    while !r.at_end() {
                        r.append_row(&[], &[], &mut by_name).unwrap();
                    }
                }
                let reference = reference.finish().unwrap();
                prop_assert_eq!(&by_slot.finish().unwrap(), &reference);
                prop_assert_eq!(&by_name.finish().unwrap(), &reference);
            }
        }
    }
}
