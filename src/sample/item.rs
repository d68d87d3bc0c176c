//! Attribute values and items as the sample writes them, and their DynamoDB JSON
//! (`{"S":"x"}`, base64 binary, canonical numbers). Serialization only: what the values are is
//! the shop's business, where they go the writers'.

use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

/// One DynamoDB AttributeValue. Numbers are written as given: canonical (from [`n`] and [`fixed`])
/// except where the shop spells one otherwise on purpose (exponent form, trailing zeros).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Av {
    S(String),
    N(String),
    B(Vec<u8>),
    Bool(bool),
    Null,
    Ss(Vec<String>),
    Ns(Vec<String>),
    Bs(Vec<Vec<u8>>),
    L(Vec<Av>),
    M(Vec<(&'static str, Av)>),
}

pub(super) fn s(v: impl Into<String>) -> Av {
    Av::S(v.into())
}

pub(super) fn n(v: impl ToString) -> Av {
    Av::N(v.to_string())
}

/// Attributes in insertion order (a fixed order per entity, deliberately not sorted).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Item(Vec<(&'static str, Av)>);

impl Item {
    /// The attributes in insertion order.
    pub(super) fn attrs(&self) -> &[(&'static str, Av)] {
        &self.0
    }

    pub(super) fn put(&mut self, name: &'static str, value: Av) -> &mut Self {
        self.0.push((name, value));
        self
    }

    pub(super) fn get(&self, name: &str) -> Option<&Av> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Replaces the attribute's value in place, or appends it.
    pub(super) fn set(&mut self, name: &'static str, value: Av) -> &mut Self {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
        self
    }

    /// Removes the attribute; `false` when there was none.
    pub(super) fn remove(&mut self, name: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|(n, _)| *n != name);
        self.0.len() != before
    }
}

struct B64<'a>(&'a [u8]);

impl Serialize for B64<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_str(&Base64Display::new(self.0, &STANDARD))
    }
}

struct Attrs<'a>(&'a [(&'static str, Av)]);

impl Serialize for Attrs<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

struct Blobs<'a>(&'a [Vec<u8>]);

impl Serialize for Blobs<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut seq = ser.serialize_seq(Some(self.0.len()))?;
        for blob in self.0 {
            seq.serialize_element(&B64(blob))?;
        }
        seq.end()
    }
}

impl Serialize for Av {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(1))?;
        match self {
            Av::S(v) => map.serialize_entry("S", v)?,
            Av::N(v) => map.serialize_entry("N", v)?,
            Av::B(v) => map.serialize_entry("B", &B64(v))?,
            Av::Bool(v) => map.serialize_entry("BOOL", v)?,
            Av::Null => map.serialize_entry("NULL", &true)?,
            Av::Ss(v) => map.serialize_entry("SS", v)?,
            Av::Ns(v) => map.serialize_entry("NS", v)?,
            Av::Bs(v) => map.serialize_entry("BS", &Blobs(v))?,
            Av::L(v) => map.serialize_entry("L", v)?,
            Av::M(v) => map.serialize_entry("M", &Attrs(v))?,
        }
        map.end()
    }
}

impl Serialize for Item {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        Attrs(&self.0).serialize(ser)
    }
}

/// An incremental export's change record, `{"Metadata":…,"Keys":…,"OldImage":…,"NewImage":…}`
/// (the images present or not as the view and the change say).
pub(super) struct ChangeLine<'a> {
    pub(super) write_micros: u64,
    pub(super) keys: &'a Item,
    pub(super) old: Option<&'a Item>,
    pub(super) new: Option<&'a Item>,
}

impl Serialize for ChangeLine<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(None)?;
        let micros = Av::N(self.write_micros.to_string());
        map.serialize_entry("Metadata", &Attrs(&[("WriteTimestampMicros", micros)]))?;
        map.serialize_entry("Keys", self.keys)?;
        if let Some(old) = self.old {
            map.serialize_entry("OldImage", old)?;
        }
        if let Some(new) = self.new {
            map.serialize_entry("NewImage", new)?;
        }
        map.end()
    }
}

/// A data-file line: `{"Item":{…}}`.
pub(super) struct ExportLine<'a>(pub(super) &'a Item);

impl Serialize for ExportLine<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(1))?;
        map.serialize_entry("Item", self.0)?;
        map.end()
    }
}

/// `value / 10^scale` in DynamoDB's canonical form: no trailing fractional zeros, no exponent.
pub(super) fn fixed(value: u64, scale: u32) -> String {
    let div = 10u64.pow(scale);
    let (int, mut frac) = (value / div, value % div);
    if frac == 0 {
        return int.to_string();
    }
    let mut digits = scale as usize;
    while frac % 10 == 0 {
        frac /= 10;
        digits -= 1;
    }
    format!("{int}.{frac:0digits$}")
}

pub(super) fn money(cents: u64) -> Av {
    Av::N(fixed(cents, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_canonical() {
        assert_eq!(fixed(1999, 2), "19.99");
        assert_eq!(fixed(2000, 2), "20");
        assert_eq!(fixed(2050, 2), "20.5");
        assert_eq!(fixed(5, 2), "0.05");
        assert_eq!(fixed(0, 2), "0");
        assert_eq!(fixed(7, 3), "0.007");
        assert_eq!(fixed(1250, 3), "1.25");
    }
}
