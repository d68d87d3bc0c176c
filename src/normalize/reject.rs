//! The one table of reject reasons, the reject row, and the `_rejects` table built from rows.
//!
//! Every input unit that does not become a row of an entity table becomes exactly one reject
//! row: the source file, line and byte offset, a stable reason code, the attribute at fault,
//! a message naming it, and the raw input. Reasons come from three stages: framing (a line too
//! long, a file that cannot be read on), decoding ([`DecodeReason`]) and normalizing (mapping
//! failures, routing policies).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{BooleanBuilder, Int64Builder, RecordBatch, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;

use crate::decode::DecodeReason;

/// Why an input line or item was rejected: a stable code for the rejects table and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum RejectReason {
    // Decoding: not something DynamoDB could have exported.
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
    /// A change record without `Keys`.
    NoKeys,
    /// A change record whose image disagrees with its `Keys`.
    KeysMismatch,
    /// A change record without a valid `Metadata.WriteTimestampMicros`.
    BadWriteTime,
    /// An Ion export line that is not Ion text.
    InvalidIon,
    /// An Ion value of a type DynamoDB never exports (float, timestamp, symbol, clob, ...).
    UnexportedIonType,
    /// An Ion annotation DynamoDB never writes.
    BadAnnotation,
    // Framing.
    /// A line longer than `--max-line-bytes`, never read into memory.
    LineTooLong,
    /// The file could not be read past this point (truncated or damaged gzip, a failed read).
    CorruptFile,
    // Normalizing.
    /// An incremental export's change record where items were expected.
    IncrementalRecord,
    /// A key does not match its mapping template.
    KeyTemplate,
    /// Two keys, or a key and an attribute, disagree on one column.
    KeyConflict,
    /// A value does not fit its declared column type.
    Coercion,
    /// A required column has no value.
    Required,
    /// An attribute the mapping does not name, under `unmapped = "reject"`.
    UnmappedAttribute,
    /// A type value no mapping entity matches, under `unmatched = "reject"`.
    UnmatchedEntity,
}

impl RejectReason {
    /// Every reason, in declaration order (`ALL[r as usize] == r`).
    pub const ALL: [RejectReason; 32] = [
        RejectReason::InvalidUtf8,
        RejectReason::InvalidJson,
        RejectReason::NotAnItem,
        RejectReason::NoTypeKey,
        RejectReason::TwoTypeKeys,
        RejectReason::UnknownTypeKey,
        RejectReason::WrongValueShape,
        RejectReason::InvalidNumber,
        RejectReason::TooManyDigits,
        RejectReason::NumberOutOfRange,
        RejectReason::InvalidBase64,
        RejectReason::EmptySet,
        RejectReason::DuplicateSetMember,
        RejectReason::DuplicateAttribute,
        RejectReason::TooDeep,
        RejectReason::EmptyItem,
        RejectReason::ItemTooLarge,
        RejectReason::NoKeys,
        RejectReason::KeysMismatch,
        RejectReason::BadWriteTime,
        RejectReason::InvalidIon,
        RejectReason::UnexportedIonType,
        RejectReason::BadAnnotation,
        RejectReason::LineTooLong,
        RejectReason::CorruptFile,
        RejectReason::IncrementalRecord,
        RejectReason::KeyTemplate,
        RejectReason::KeyConflict,
        RejectReason::Coercion,
        RejectReason::Required,
        RejectReason::UnmappedAttribute,
        RejectReason::UnmatchedEntity,
    ];

    /// The reason by its index in [`RejectReason::ALL`].
    pub fn from_index(i: u8) -> Option<RejectReason> {
        RejectReason::ALL.get(usize::from(i)).copied()
    }

    pub fn code(self) -> &'static str {
        match self {
            RejectReason::InvalidUtf8 => "invalid_utf8",
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::NotAnItem => "not_an_item",
            RejectReason::NoTypeKey => "no_type_key",
            RejectReason::TwoTypeKeys => "two_type_keys",
            RejectReason::UnknownTypeKey => "unknown_type_key",
            RejectReason::WrongValueShape => "wrong_value_shape",
            RejectReason::InvalidNumber => "invalid_number",
            RejectReason::TooManyDigits => "too_many_digits",
            RejectReason::NumberOutOfRange => "number_out_of_range",
            RejectReason::InvalidBase64 => "invalid_base64",
            RejectReason::EmptySet => "empty_set",
            RejectReason::DuplicateSetMember => "duplicate_set_member",
            RejectReason::DuplicateAttribute => "duplicate_attribute",
            RejectReason::TooDeep => "too_deep",
            RejectReason::EmptyItem => "empty_item",
            RejectReason::ItemTooLarge => "item_too_large",
            RejectReason::NoKeys => "no_keys",
            RejectReason::KeysMismatch => "keys_mismatch",
            RejectReason::BadWriteTime => "bad_write_time",
            RejectReason::InvalidIon => "invalid_ion",
            RejectReason::UnexportedIonType => "unexported_ion_type",
            RejectReason::BadAnnotation => "bad_annotation",
            RejectReason::LineTooLong => "line_too_long",
            RejectReason::CorruptFile => "corrupt_file",
            RejectReason::IncrementalRecord => "incremental_record",
            RejectReason::KeyTemplate => "key_template",
            RejectReason::KeyConflict => "key_conflict",
            RejectReason::Coercion => "coercion",
            RejectReason::Required => "required",
            RejectReason::UnmappedAttribute => "unmapped_attribute",
            RejectReason::UnmatchedEntity => "unmatched_entity",
        }
    }
}

impl From<DecodeReason> for RejectReason {
    fn from(r: DecodeReason) -> Self {
        match r {
            DecodeReason::InvalidUtf8 => RejectReason::InvalidUtf8,
            DecodeReason::InvalidJson => RejectReason::InvalidJson,
            DecodeReason::NotAnItem => RejectReason::NotAnItem,
            DecodeReason::NoTypeKey => RejectReason::NoTypeKey,
            DecodeReason::TwoTypeKeys => RejectReason::TwoTypeKeys,
            DecodeReason::UnknownTypeKey => RejectReason::UnknownTypeKey,
            DecodeReason::WrongValueShape => RejectReason::WrongValueShape,
            DecodeReason::InvalidNumber => RejectReason::InvalidNumber,
            DecodeReason::TooManyDigits => RejectReason::TooManyDigits,
            DecodeReason::NumberOutOfRange => RejectReason::NumberOutOfRange,
            DecodeReason::InvalidBase64 => RejectReason::InvalidBase64,
            DecodeReason::EmptySet => RejectReason::EmptySet,
            DecodeReason::DuplicateSetMember => RejectReason::DuplicateSetMember,
            DecodeReason::DuplicateAttribute => RejectReason::DuplicateAttribute,
            DecodeReason::TooDeep => RejectReason::TooDeep,
            DecodeReason::EmptyItem => RejectReason::EmptyItem,
            DecodeReason::ItemTooLarge => RejectReason::ItemTooLarge,
            DecodeReason::NoKeys => RejectReason::NoKeys,
            DecodeReason::KeysMismatch => RejectReason::KeysMismatch,
            DecodeReason::BadWriteTime => RejectReason::BadWriteTime,
            DecodeReason::InvalidIon => RejectReason::InvalidIon,
            DecodeReason::UnexportedIonType => RejectReason::UnexportedIonType,
            DecodeReason::BadAnnotation => RejectReason::BadAnnotation,
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One rejected line or item, as stored for the `_rejects` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectRow<'a> {
    /// Index of the input file in the run's plan.
    pub file: u32,
    pub line: u64,
    /// Byte offset of the problem in the (decompressed) file.
    pub offset: u64,
    pub reason: RejectReason,
    /// Attribute path at fault, empty when the whole line is.
    pub attribute: &'a str,
    pub message: &'a str,
    pub raw: &'a [u8],
    /// `raw` is only the start of the line.
    pub truncated: bool,
}

/// The `_rejects` table's schema.
pub fn rejects_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("source_file", DataType::Utf8, false),
        Field::new("line", DataType::Int64, false),
        Field::new("byte_offset", DataType::Int64, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("attribute", DataType::Utf8, true),
        Field::new("message", DataType::Utf8, false),
        Field::new("raw", DataType::Utf8, false),
        Field::new("raw_truncated", DataType::Boolean, false),
    ]))
}

/// Builds `_rejects` batches.
#[derive(Default)]
pub struct RejectsBuilder {
    file: StringBuilder,
    line: Int64Builder,
    offset: Int64Builder,
    reason: StringBuilder,
    attribute: StringBuilder,
    message: StringBuilder,
    raw: StringBuilder,
    truncated: BooleanBuilder,
    rows: usize,
}

impl RejectsBuilder {
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends a row; `file` is the display name of the row's input file.
    pub fn append(&mut self, file: &str, r: &RejectRow<'_>) {
        self.file.append_value(file);
        self.line.append_value(i64::try_from(r.line).unwrap_or(i64::MAX));
        self.offset.append_value(i64::try_from(r.offset).unwrap_or(i64::MAX));
        self.reason.append_value(r.reason.code());
        if r.attribute.is_empty() {
            self.attribute.append_null();
        } else {
            self.attribute.append_value(r.attribute);
        }
        self.message.append_value(r.message);
        self.raw.append_value(String::from_utf8_lossy(r.raw));
        self.truncated.append_value(r.truncated);
        self.rows += 1;
    }

    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        self.rows = 0;
        RecordBatch::try_new(
            rejects_schema(),
            vec![
                Arc::new(self.file.finish()),
                Arc::new(self.line.finish()),
                Arc::new(self.offset.finish()),
                Arc::new(self.reason.finish()),
                Arc::new(self.attribute.finish()),
                Arc::new(self.message.finish()),
                Arc::new(self.raw.finish()),
                Arc::new(self.truncated.finish()),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::RejectReason;

    #[test]
    fn all_lists_every_reason_in_order_with_unique_codes() {
        for (i, r) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
            assert_eq!(RejectReason::from_index(i as u8), Some(*r));
        }
        assert_eq!(
            RejectReason::UnmatchedEntity as usize,
            RejectReason::ALL.len() - 1,
            "a new reason must be added to `ALL`"
        );
        let codes: std::collections::BTreeSet<&str> = RejectReason::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), RejectReason::ALL.len());
    }
}
