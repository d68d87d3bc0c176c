//! Key templates: `USER#{email}`, `ORDER#{ordered_at:epoch_s}#{order_id}`.
//!
//! A [`KeyTemplate`] is compiled once from its text and then splits overloaded DynamoDB keys into
//! typed values ([`KeyTemplate::captures`]) and builds keys back from values
//! ([`KeyTemplate::render`]). The one promise: a key is accepted only if rendering its captured
//! values gives back exactly the same key, so unwinding a key into columns never alters it. This
//! module does no I/O and never panics on any template text, key or value.
//!
//! # Syntax
//!
//! - Literal text, matched exactly (any Unicode).
//! - Placeholders `{name}` or `{name:type}`. Names are snake_case, `[a-z_][a-z0-9_]*`, each used
//!   once. Types:
//!
//!   | type       | key text                                         | captured as                    |
//!   |------------|--------------------------------------------------|--------------------------------|
//!   | `string`   | any non-empty text (the default)                 | `Str`                          |
//!   | `int`      | `-?[0-9]+`, no leading zeros, fits i64           | `Int`                          |
//!   | `int(N)`   | exactly N digits, zero-padded, N in 1..=19       | `Int` (non-negative)           |
//!   | `decimal`  | `-?[0-9]+(\.[0-9]+)?`, kept as written           | `Decimal`                      |
//!   | `epoch_s`  | non-negative integer, no leading zeros, fits i64 | `Timestamp` in seconds         |
//!   | `epoch_ms` | as `epoch_s`                                     | `Timestamp` in milliseconds    |
//!   | `iso8601`  | `YYYY-MM-DDTHH:MM:SS[.fff\|.ffffff]Z`, canonical | `Timestamp` in microseconds    |
//!   | `iso8601_ms` | `YYYY-MM-DDTHH:MM:SS.fffZ`, always 3 digits    | `Timestamp` in milliseconds    |
//!   | `date`     | `YYYY-MM-DD`, a real calendar date               | `Date` (days since 1970-01-01) |
//!   | `uuid`     | `8-4-4-4-12` hex digits, either case, case kept  | `Str`                          |
//!   | `lower`    | non-empty text with no upper-case letter         | `Folded` (lower)               |
//!   | `upper`    | non-empty text with no lower-case letter         | `Folded` (upper)               |
//!
//!   `iso8601` is canonical when the fraction is absent for whole seconds, three digits for
//!   millisecond precision and six digits otherwise; years are 0000 to 9999. Any other spelling
//!   of the same instant (`+00:00`, `.500000`, nanoseconds) is refused, since it would not round
//!   trip. `iso8601_ms` is what JavaScript's `Date.prototype.toISOString()` writes: milliseconds
//!   always, `.000` included.
//!
//!   `lower` and `upper` hold a case-folded copy of a value (ElectroDB lower-cases whole keys by
//!   default while the attributes keep their case). The key alone cannot give the original case
//!   back, so a mapping pairs such a placeholder with the attribute holding the original; rendering
//!   folds whatever text it is given (Unicode default case mapping, as JavaScript's
//!   `toLowerCase`/`toUpperCase`).
//! - At most one optional part `[...]`, at the very end and not nested, holding at least one
//!   placeholder: `ORDER#{order_id}[#LINE#{line:int}]`. Keys without it capture `None` for its
//!   placeholders.
//! - Escapes: `\{`, `\}`, `\[`, `\]` and `\\` stand for the character itself. A backslash before
//!   anything else is an error, as are unmatched `}` and `]`.
//! - Two placeholders need literal text between them (`{a}{b}` and `{a}[{b}]` are refused: where
//!   one ends would be a guess).
//!
//! # Matching
//!
//! Literals must match exactly. A placeholder's value is non-empty and ends at an occurrence of
//! the literal that follows it; occurrences are tried leftmost (shortest value) first, and a later
//! one is used only when the rest of the key fails to match with the earlier one. So a value may
//! contain its separator when later parts force it: `A#{x}#{y:int}` splits `A#p#q#7` into
//! `x = p#q`, `y = 7`. A placeholder followed by no literal takes the rest of the key. With an
//! optional part, the parse with the part present is tried first; if that fails the key is
//! matched without it, so the last required placeholder may then take the rest.
//!
//! After a split is found, the values are rendered back (into a comparing writer, without
//! allocating) and the key is accepted only if that gives the same text. Matching allocates
//! only the returned values; keys that need backtracking also get a bitset of (placeholder,
//! position) pairs known to fail, which bounds the work to placeholders × positions ×
//! occurrences of a separator, each end checked in constant time: a value longer than its type
//! allows, or holding a letter of the other case, ends the ends tried from its start, and a
//! string or folded placeholder that failed every end from one position fails from every later
//! one. Keys longer than a DynamoDB key can be (2,048 bytes) are not matched.
//!
//! # Errors
//!
//! [`TemplateError`] carries the char offset in the template text and a `hint` where the fix is
//! known (the closest type name for a misspelt one, a snake_case name, an escape).
//! [`MatchError`] names the failing placeholder and its expected form when one value failed
//! (the failure reached farthest into the key is reported), else the template text.

use std::borrow::Cow;
use std::fmt;

/// The most placeholders one template may have.
pub const MAX_PLACEHOLDERS: usize = 64;

/// The type names a template may use, for hints and error messages.
pub const TYPE_NAMES: [&str; 12] = [
    "string",
    "int",
    "int(N)",
    "decimal",
    "epoch_s",
    "epoch_ms",
    "iso8601",
    "iso8601_ms",
    "date",
    "uuid",
    "lower",
    "upper",
];

/// The widest `int(N)`: an i64 has at most 19 digits.
const MAX_INT_WIDTH: usize = 19;

/// Keys longer than this are shortened in error messages.
const MAX_SHOWN_CHARS: usize = 200;

/// The type of a placeholder, written after a colon: `{ordered_at:epoch_s}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaceholderType {
    /// Any non-empty text (the default when no type is written).
    String,
    /// A base-10 integer that fits i64; `width` set for zero-padded forms (`{seq:int(8)}`).
    Int { width: Option<usize> },
    /// Plain decimal text `-?\d+(\.\d+)?`, kept as written.
    Decimal,
    /// Seconds since the Unix epoch (UTC).
    EpochS,
    /// Milliseconds since the Unix epoch (UTC).
    EpochMs,
    /// An ISO 8601 / RFC 3339 UTC timestamp in canonical form.
    Iso8601,
    /// `YYYY-MM-DDTHH:MM:SS.fffZ` with exactly three fraction digits (JavaScript's
    /// `toISOString()`).
    Iso8601Ms,
    /// `YYYY-MM-DD`.
    Date,
    /// `8-4-4-4-12` hex digits.
    Uuid,
    /// Text in one letter case: a case-folded copy of a value.
    Folded(Case),
}

/// The letter case of a [`PlaceholderType::Folded`] placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Lower,
    Upper,
}

impl Case {
    /// `text` in this case (Unicode default case mapping).
    pub fn fold(self, text: &str) -> String {
        match self {
            Case::Lower => text.to_lowercase(),
            Case::Upper => text.to_uppercase(),
        }
    }

    /// Whether folding leaves `text` unchanged.
    pub fn holds(self, text: &str) -> bool {
        match self {
            Case::Lower => !text.chars().any(|c| c.to_lowercase().ne(std::iter::once(c))),
            Case::Upper => !text.chars().any(|c| c.to_uppercase().ne(std::iter::once(c))),
        }
    }
}

/// One named placeholder of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub name: String,
    pub ty: PlaceholderType,
    /// Inside the optional trailing part (`[...]`): absent in keys that lack it.
    pub optional: bool,
}

/// Unit of a [`KeyValue::Timestamp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Second,
    Millisecond,
    Microsecond,
}

/// One value per placeholder of a template, in placeholder order (`None` for an absent optional
/// part): inline for up to four (the bundled mappings' keys have at most two), so matching such
/// a key allocates nothing; more spill to the heap.
pub type Captures<'k> = smallvec::SmallVec<[Option<KeyValue<'k>>; 4]>;

/// The typed value a placeholder captured from a key. Text borrows from the key it was
/// captured from ([`KeyTemplate::captures`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    /// Decimal text exactly as written in the key.
    Decimal(Cow<'a, str>),
    /// Since the Unix epoch, UTC.
    Timestamp {
        unit: TimeUnit,
        value: i64,
    },
    /// Days since 1970-01-01.
    Date(i32),
    /// Text from a `lower` or `upper` placeholder: a case-folded copy of some value.
    Folded {
        case: Case,
        text: Cow<'a, str>,
    },
}

/// One piece of a compiled template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Unescaped, non-empty literal text.
    Literal(String),
    /// Index into `placeholders`.
    Placeholder(usize),
}

/// A compiled key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
    /// The required segments, then the optional part's. Never two placeholders in a row.
    segments: Vec<Segment>,
    /// `segments[..required]` are required; equal to `segments.len()` without an optional part.
    required: usize,
    placeholders: Vec<Placeholder>,
    prefix: String,
}

/// Why a template's text does not compile; `offset` is the char index in the template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub offset: usize,
    pub message: String,
    pub hint: Option<String>,
}

/// Why a key does not match a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchError {
    /// The placeholder that failed, when one did.
    pub placeholder: Option<String>,
    /// The expected form, for reject messages: `ORDER#{ordered_at:epoch_s}#{order_id}`, or
    /// `10-digit epoch seconds` for one placeholder.
    pub expected: String,
    pub message: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at character {})", self.message, self.offset)
    }
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Display for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Prints the type as written in a template: `epoch_s`, `int(8)`.
impl fmt::Display for PlaceholderType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaceholderType::String => f.write_str("string"),
            PlaceholderType::Int { width: None } => f.write_str("int"),
            PlaceholderType::Int { width: Some(n) } => write!(f, "int({n})"),
            PlaceholderType::Decimal => f.write_str("decimal"),
            PlaceholderType::EpochS => f.write_str("epoch_s"),
            PlaceholderType::EpochMs => f.write_str("epoch_ms"),
            PlaceholderType::Iso8601 => f.write_str("iso8601"),
            PlaceholderType::Iso8601Ms => f.write_str("iso8601_ms"),
            PlaceholderType::Date => f.write_str("date"),
            PlaceholderType::Uuid => f.write_str("uuid"),
            PlaceholderType::Folded(Case::Lower) => f.write_str("lower"),
            PlaceholderType::Folded(Case::Upper) => f.write_str("upper"),
        }
    }
}

impl PlaceholderType {
    /// The form a key's text must have, for reject messages: `epoch seconds (digits)`.
    pub fn expected(&self) -> String {
        match self {
            PlaceholderType::String => "non-empty text".into(),
            PlaceholderType::Int { width: None } => "an integer (digits, no leading zeros)".into(),
            PlaceholderType::Int { width: Some(n) } => format!("{n} digits, zero-padded"),
            PlaceholderType::Decimal => "a decimal number (digits, optionally `.` and digits)".into(),
            PlaceholderType::EpochS => "epoch seconds (digits)".into(),
            PlaceholderType::EpochMs => "epoch milliseconds (digits)".into(),
            PlaceholderType::Iso8601 => "YYYY-MM-DDTHH:MM:SS[.fff|.ffffff]Z".into(),
            PlaceholderType::Iso8601Ms => "YYYY-MM-DDTHH:MM:SS.fffZ".into(),
            PlaceholderType::Date => "YYYY-MM-DD".into(),
            PlaceholderType::Uuid => "a uuid (8-4-4-4-12 hex digits)".into(),
            PlaceholderType::Folded(Case::Lower) => "non-empty text without upper-case letters".into(),
            PlaceholderType::Folded(Case::Upper) => "non-empty text without lower-case letters".into(),
        }
    }

    /// What a value is, after "is not": `epoch seconds`.
    fn noun(&self) -> String {
        match self {
            PlaceholderType::String => "text".into(),
            PlaceholderType::Int { width: None } => "an integer".into(),
            PlaceholderType::Int { width: Some(n) } => format!("{n} digits"),
            PlaceholderType::Decimal => "a decimal number".into(),
            PlaceholderType::EpochS => "epoch seconds".into(),
            PlaceholderType::EpochMs => "epoch milliseconds".into(),
            PlaceholderType::Iso8601 => "an ISO 8601 UTC timestamp".into(),
            PlaceholderType::Iso8601Ms => "a `YYYY-MM-DDTHH:MM:SS.fffZ` timestamp".into(),
            PlaceholderType::Date => "a `YYYY-MM-DD` date".into(),
            PlaceholderType::Uuid => "a uuid".into(),
            PlaceholderType::Folded(Case::Lower) => "lower-case text".into(),
            PlaceholderType::Folded(Case::Upper) => "upper-case text".into(),
        }
    }

    /// Whether a key part with this text would be captured by a placeholder of this type (and
    /// render back to the same text).
    pub fn accepts(&self, text: &str) -> bool {
        self.check(text).is_ok()
    }

    /// The typed value of a key part, as [`KeyTemplate::captures`] would capture it.
    pub fn value_of<'k>(&self, text: &'k str) -> Option<KeyValue<'k>> {
        self.check(text).ok().map(|s| s.into_value(self, text))
    }

    /// The most bytes a value of this type can have (`usize::MAX`: no limit).
    fn longest(&self) -> usize {
        match self {
            PlaceholderType::Int { width: None } => 20, // `-9223372036854775808`
            PlaceholderType::Int { width: Some(n) } => *n,
            PlaceholderType::EpochS | PlaceholderType::EpochMs => 19,
            PlaceholderType::Iso8601 => 30, // nine fraction digits, refused as not canonical
            PlaceholderType::Iso8601Ms => 24,
            PlaceholderType::Date => 10,
            PlaceholderType::Uuid => 36,
            PlaceholderType::String | PlaceholderType::Decimal | PlaceholderType::Folded(_) => usize::MAX,
        }
    }

    /// Validates a key part: the cheap, allocation-free half of capturing.
    fn check(&self, text: &str) -> Result<Scalar, Reason> {
        if text.is_empty() {
            return Err(Reason::Empty);
        }
        match self {
            PlaceholderType::String => Ok(Scalar::Text),
            PlaceholderType::Int { width: None } => check_int(text).map(Scalar::Int),
            PlaceholderType::Int { width: Some(n) } => {
                if text.len() != *n || !all_digits(text) {
                    return Err(Reason::Form);
                }
                text.parse::<i64>().map(Scalar::Int).map_err(|_| Reason::Overflow)
            }
            PlaceholderType::Decimal => {
                if is_decimal(text) {
                    Ok(Scalar::Text)
                } else {
                    Err(Reason::Form)
                }
            }
            PlaceholderType::EpochS => check_epoch(text).map(|v| Scalar::Ts(TimeUnit::Second, v)),
            PlaceholderType::EpochMs => check_epoch(text).map(|v| Scalar::Ts(TimeUnit::Millisecond, v)),
            PlaceholderType::Iso8601 => parse_iso8601(text).map(|v| Scalar::Ts(TimeUnit::Microsecond, v)),
            PlaceholderType::Iso8601Ms => parse_iso8601_ms(text).map(|v| Scalar::Ts(TimeUnit::Millisecond, v)),
            PlaceholderType::Date => parse_date(text).map(Scalar::Date),
            PlaceholderType::Folded(case) => {
                if case.holds(text) {
                    Ok(Scalar::Text)
                } else {
                    Err(Reason::Form)
                }
            }
            PlaceholderType::Uuid => {
                if is_uuid(text) {
                    Ok(Scalar::Text)
                } else {
                    Err(Reason::Form)
                }
            }
        }
    }

    /// Writes one value in this type's canonical form.
    fn write_value<W: fmt::Write>(&self, value: &KeyValue<'_>, w: &mut W) -> Result<(), RenderIssue> {
        let bad = |what: String| Err(RenderIssue::Invalid(what));
        match (self, value) {
            (PlaceholderType::String, KeyValue::Str(s)) => {
                if s.is_empty() {
                    return bad("the value is empty".into());
                }
                w.write_str(s)?;
            }
            (PlaceholderType::Uuid, KeyValue::Str(s)) => {
                if !is_uuid(s) {
                    return bad(format!("`{}` is not a uuid", shorten(s)));
                }
                w.write_str(s)?;
            }
            (PlaceholderType::Int { width: None }, KeyValue::Int(v)) => write!(w, "{v}")?,
            (PlaceholderType::Int { width: Some(n) }, KeyValue::Int(v)) => {
                if *v < 0 {
                    return bad(format!("`{v}` is negative; `int({n})` holds zero-padded non-negative numbers"));
                }
                if decimal_digits(v.unsigned_abs()) > *n {
                    return bad(format!("`{v}` has more than {n} digits"));
                }
                write!(w, "{v:0n$}", n = *n)?;
            }
            (PlaceholderType::Decimal, KeyValue::Decimal(s)) => {
                if !is_decimal(s) {
                    return bad(format!("`{}` is not a decimal number", shorten(s)));
                }
                w.write_str(s)?;
            }
            (PlaceholderType::Decimal, KeyValue::Int(v)) => write!(w, "{v}")?,
            (PlaceholderType::EpochS, KeyValue::Timestamp { unit: TimeUnit::Second, value })
            | (PlaceholderType::EpochMs, KeyValue::Timestamp { unit: TimeUnit::Millisecond, value }) => {
                if *value < 0 {
                    return bad(format!("`{value}` is before the epoch; epoch placeholders hold non-negative numbers"));
                }
                write!(w, "{value}")?;
            }
            (PlaceholderType::EpochMs, KeyValue::Timestamp { unit: TimeUnit::Second, value }) => {
                match value.checked_mul(1000) {
                    Some(ms) if ms >= 0 => write!(w, "{ms}")?,
                    _ => return bad(format!("`{value}` seconds is out of range for epoch milliseconds")),
                }
            }
            (PlaceholderType::Iso8601, KeyValue::Timestamp { unit, value }) => {
                let micros = match unit {
                    TimeUnit::Second => value.checked_mul(1_000_000),
                    TimeUnit::Millisecond => value.checked_mul(1_000),
                    TimeUnit::Microsecond => Some(*value),
                };
                match micros {
                    Some(m) if write_iso8601(m, w)? => {}
                    _ => return bad(format!("timestamp `{value}` is outside the years 0000 to 9999")),
                }
            }
            (PlaceholderType::Iso8601Ms, KeyValue::Timestamp { unit, value }) => {
                let ms = match unit {
                    TimeUnit::Second => value.checked_mul(1_000),
                    TimeUnit::Millisecond => Some(*value),
                    TimeUnit::Microsecond if *value % 1_000 == 0 => Some(*value / 1_000),
                    TimeUnit::Microsecond => {
                        return bad(format!("`{value}` microseconds has a part below the millisecond"));
                    }
                };
                match ms.and_then(|m| m.checked_mul(1_000)) {
                    Some(micros) if write_iso8601_ms(micros, w)? => {}
                    _ => return bad(format!("timestamp `{value}` is outside the years 0000 to 9999")),
                }
            }
            (PlaceholderType::Folded(case), KeyValue::Str(s) | KeyValue::Folded { text: s, .. }) => {
                if s.is_empty() {
                    return bad("the value is empty".into());
                }
                w.write_str(&case.fold(s))?;
            }
            (PlaceholderType::Date, KeyValue::Date(days)) => {
                let (y, m, d) = civil_from_days(i64::from(*days));
                if !(0..=9999).contains(&y) {
                    return bad(format!("date `{days}` (days since 1970-01-01) is outside the years 0000 to 9999"));
                }
                write!(w, "{y:04}-{m:02}-{d:02}")?;
            }
            _ => return Err(RenderIssue::Kind),
        }
        Ok(())
    }
}

/// A validated key part before it becomes a [`KeyValue`]; text values are spans of the key, so
/// trying a split allocates nothing.
#[derive(Debug, Clone, Copy)]
enum Scalar {
    Text,
    Int(i64),
    Ts(TimeUnit, i64),
    Date(i32),
}

impl Scalar {
    fn into_value<'k>(self, ty: &PlaceholderType, text: &'k str) -> KeyValue<'k> {
        match self {
            Scalar::Text => match ty {
                PlaceholderType::Decimal => KeyValue::Decimal(Cow::Borrowed(text)),
                PlaceholderType::Folded(case) => KeyValue::Folded { case: *case, text: Cow::Borrowed(text) },
                _ => KeyValue::Str(Cow::Borrowed(text)),
            },
            Scalar::Int(v) => KeyValue::Int(v),
            Scalar::Ts(unit, value) => KeyValue::Timestamp { unit, value },
            Scalar::Date(d) => KeyValue::Date(d),
        }
    }
}

/// Why one key part does not fit its placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Empty,
    Form,
    LeadingZeros,
    Overflow,
    NotCanonical,
    BadDate,
}

/// Why one value cannot be rendered.
enum RenderIssue {
    /// The value's kind does not fit the placeholder type.
    Kind,
    Invalid(String),
    Write,
}

impl From<fmt::Error> for RenderIssue {
    fn from(_: fmt::Error) -> Self {
        RenderIssue::Write
    }
}

impl KeyTemplate {
    /// Compiles a template; see the module docs for the syntax.
    pub fn parse(source: &str) -> Result<KeyTemplate, TemplateError> {
        Parser::new(source).run()
    }

    /// The template text as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Placeholders in order of appearance.
    pub fn placeholders(&self) -> &[Placeholder] {
        &self.placeholders
    }

    /// The literal text before the first placeholder (the whole key for constant templates).
    ///
    /// It stops at the optional part too, so every matching key starts with it. Escapes are
    /// resolved: the prefix of `A\{#{x}` is `A{#`.
    pub fn literal_prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether the template has no placeholders: it matches one key only.
    pub fn is_constant(&self) -> bool {
        self.placeholders.is_empty()
    }

    /// Parses a key into one value per placeholder, in placeholder order (`None` for an absent
    /// optional part). Guarantees `render(captures(key)) == key`; a key that would not round
    /// trip is a [`MatchError`].
    pub fn captures<'k>(&self, key: &'k str) -> Result<Captures<'k>, MatchError> {
        let mut values = Captures::new();
        self.captures_into(key, &mut values)?;
        Ok(values)
    }

    /// [`KeyTemplate::captures`] into `values` (cleared first), which the caller keeps in place:
    /// moving the inline values out of a call costs more than matching a short key.
    pub fn captures_into<'k>(&self, key: &'k str, values: &mut Captures<'k>) -> Result<(), MatchError> {
        values.clear();
        if key.len() > MAX_KEY_BYTES {
            return Err(MatchError {
                placeholder: None,
                expected: self.source.clone(),
                message: format!(
                    "key `{}` is {} bytes, longer than a DynamoDB key can be ({MAX_KEY_BYTES} bytes), so it is not matched with `{}`",
                    shorten(key),
                    key.len(),
                    self.source
                ),
            });
        }
        // Pushed one by one: `resize` is a call per key that took 5% of `apply_mapped`.
        for _ in 0..self.placeholders.len() {
            values.push(None);
        }
        let mut search = Search { tpl: self, key, out: values, failed: None, failed_from: Vec::new(), worst: None };
        if !search.segment(0, 0) {
            let worst = search.worst;
            return Err(self.mismatch(key, worst));
        }
        // The values are canonical by construction; checking costs no allocation and makes the
        // round trip a checked fact rather than an argument.
        let mut expect = Expect { rest: key, ok: true };
        match self.render_into(values, &mut expect) {
            Ok(()) if expect.ok && expect.rest.is_empty() => Ok(()),
            _ => Err(MatchError {
                placeholder: None,
                expected: self.source.clone(),
                message: format!(
                    "key `{}` does not match `{}`: its values would not render back to the same key",
                    shorten(key),
                    self.source
                ),
            }),
        }
    }

    /// Renders a key from one value per placeholder, in placeholder order.
    ///
    /// Each value must fit its placeholder: `Str` for `string` and `uuid`, `Int` for `int` and
    /// `int(N)`, `Decimal` (or `Int`) for `decimal`, `Timestamp` in seconds for `epoch_s`, in
    /// seconds or milliseconds for `epoch_ms`, in any unit for `iso8601`, and `Date` for `date`.
    /// The optional part is rendered when all its values are `Some` and left out when all are
    /// `None`; anything in between is an error, as is `None` for a required placeholder.
    pub fn render(&self, values: &[Option<KeyValue<'_>>]) -> Result<String, MatchError> {
        let mut out = String::with_capacity(self.source.len() + 32);
        self.render_into(values, &mut out)?;
        Ok(out)
    }

    fn render_into<W: fmt::Write>(&self, values: &[Option<KeyValue<'_>>], w: &mut W) -> Result<(), MatchError> {
        if values.len() != self.placeholders.len() {
            return Err(
                self.render_error(None, format!("expected {} values, got {}", self.placeholders.len(), values.len()))
            );
        }
        let mut present = true;
        let optional = self.placeholders.iter().zip(values).filter(|(p, _)| p.optional);
        let missing = optional.clone().find(|(_, v)| v.is_none());
        if let Some((first_missing, _)) = missing {
            if let Some((given, _)) = optional.clone().find(|(_, v)| v.is_some()) {
                return Err(self.render_error(
                    Some(&first_missing.name),
                    format!(
                        "the optional part needs all its values or none: `{}` is set but `{}` is missing",
                        given.name, first_missing.name
                    ),
                ));
            }
            present = false;
        }
        let end = if present { self.segments.len() } else { self.required };
        for segment in self.segments.get(..end).unwrap_or_default() {
            match segment {
                Segment::Literal(text) => w.write_str(text).map_err(|_| self.write_error())?,
                Segment::Placeholder(i) => {
                    let (Some(p), Some(value)) = (self.placeholders.get(*i), values.get(*i)) else {
                        return Err(self.write_error());
                    };
                    let Some(value) = value else {
                        return Err(self.render_error(Some(&p.name), format!("no value for `{}`", p.name)));
                    };
                    match p.ty.write_value(value, w) {
                        Ok(()) => {}
                        Err(RenderIssue::Write) => return Err(self.write_error()),
                        Err(RenderIssue::Kind) => {
                            return Err(self.render_error(
                                Some(&p.name),
                                format!("`{}` is `{}` and cannot hold {}", p.name, p.ty, describe_value(value)),
                            ));
                        }
                        Err(RenderIssue::Invalid(what)) => {
                            return Err(self.render_error(Some(&p.name), format!("`{}`: {what}", p.name)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn render_error(&self, placeholder: Option<&str>, detail: String) -> MatchError {
        let expected = match placeholder.and_then(|n| self.placeholders.iter().find(|p| p.name == n)) {
            Some(p) => p.ty.expected(),
            None => self.source.clone(),
        };
        MatchError {
            placeholder: placeholder.map(str::to_owned),
            expected,
            message: format!("cannot render `{}`: {detail}", self.source),
        }
    }

    fn write_error(&self) -> MatchError {
        self.render_error(None, "the key could not be written".into())
    }

    /// The error for a key no split matched: the failing value reached farthest into the key if
    /// any, else a structural mismatch.
    fn mismatch(&self, key: &str, worst: Option<ValueFailure>) -> MatchError {
        let head = format!("key `{}` does not match `{}`", shorten(key), self.source);
        if let Some(f) = worst
            && let (Some(p), Some(text)) = (self.placeholders.get(f.placeholder), key.get(f.start..f.end))
        {
            let shown = shorten(text);
            let detail = match f.reason {
                Reason::Empty => format!("`{}` is empty", p.name),
                Reason::Form => format!("`{shown}` is not {}", p.ty.noun()),
                Reason::LeadingZeros => {
                    format!("`{shown}` is not {}: leading zeros would be lost", p.ty.noun())
                }
                Reason::Overflow => format!("`{shown}` does not fit a 64-bit integer"),
                Reason::NotCanonical => {
                    format!("`{shown}` is not in canonical form (`{}`)", p.ty.expected())
                }
                Reason::BadDate => format!("`{shown}` is not a valid calendar date or time"),
            };
            return MatchError {
                placeholder: Some(p.name.clone()),
                expected: p.ty.expected(),
                message: format!("{head}: {detail}"),
            };
        }
        let message = if !self.prefix.is_empty() && !key.starts_with(&self.prefix) {
            format!("{head}: it does not start with `{}`", self.prefix)
        } else {
            head
        };
        MatchError { placeholder: None, expected: self.source.clone(), message }
    }
}

/// A value that failed its placeholder's check at `key[start..end]`.
#[derive(Debug, Clone, Copy)]
struct ValueFailure {
    placeholder: usize,
    start: usize,
    end: usize,
    reason: Reason,
}

/// The longest key a template is matched with: DynamoDB's limit for a partition key (a sort
/// key's is 1,024 bytes), table or index. It bounds the work of the backtracking search.
pub const MAX_KEY_BYTES: usize = 2048;

/// One backtracking match of a key into the caller's values. Allocates, on keys that need
/// backtracking only, a bitset of (placeholder, position) pairs known to fail, which bounds the
/// work to placeholders × positions × occurrences.
struct Search<'t, 'k, 'o> {
    tpl: &'t KeyTemplate,
    key: &'k str,
    out: &'o mut Captures<'k>,
    failed: Option<Vec<u64>>,
    /// Per string or folded placeholder, the first position every end was tried from, and
    /// failed (empty until one fails).
    failed_from: Vec<usize>,
    worst: Option<ValueFailure>,
}

impl Search<'_, '_, '_> {
    /// Whether `key[pos..]` matches `segments[seg..]`; fills `out` on success.
    fn segment(&mut self, seg: usize, pos: usize) -> bool {
        let tpl = self.tpl;
        let len = self.key.len();
        if seg == tpl.segments.len() {
            return pos == len;
        }
        if seg == tpl.required && pos == len {
            // The required part ends the key: the optional part is absent.
            return true;
        }
        match tpl.segments.get(seg) {
            None => false,
            Some(Segment::Literal(text)) => {
                let rest = self.key.as_bytes().get(pos..).unwrap_or_default();
                rest.starts_with(text.as_bytes()) && self.segment(seg + 1, pos + text.len())
            }
            Some(Segment::Placeholder(p)) => self.placeholder(seg, *p, pos),
        }
    }

    /// Placeholder `p` at `pos`, then the rest of the template. The values tried end where the
    /// next literal occurs, ever further: a value that can no longer fit (longer than its type
    /// allows, or holding a letter of the other case) ends the search from `pos`, so that each
    /// `(p, pos)` costs time linear in the key, not quadratic.
    fn placeholder(&mut self, seg: usize, p: usize, pos: usize) -> bool {
        if self.known_failure(p, pos) {
            return false;
        }
        let tpl = self.tpl;
        let key = self.key;
        let next = seg + 1;
        let Some(ty) = tpl.placeholders.get(p).map(|ph| &ph.ty) else { return false };
        // Text that fits a string or folded placeholder still fits from a later start: when
        // every end was tried from some `pos` and failed, every end fails from a later one (its
        // ends are among them, followed by the same rest of the template).
        let substrings_fit = matches!(ty, PlaceholderType::String | PlaceholderType::Folded(_));
        if substrings_fit && self.failed_from.get(p).is_some_and(|&from| from <= pos) {
            return false;
        }
        let longest = ty.longest();
        // Folded text: how far from `pos` the key is in the placeholder's case.
        let mut held = pos;
        let mut ended = false;
        if let Some(Segment::Literal(lit)) = tpl.segments.get(next) {
            let step = lit.chars().next().map_or(1, char::len_utf8);
            let mut from = pos;
            while let Some(rel) = key.get(from..).and_then(|rest| rest.find(lit.as_str())) {
                let end = from + rel;
                if end > pos {
                    // The first value that cannot fit is still tried (for the error's detail).
                    let cannot = end - pos > longest || !self.holds_to(ty, &mut held, end);
                    let folded = !cannot && matches!(ty, PlaceholderType::Folded(_));
                    if self.try_value(p, pos, end, next, folded) {
                        return true;
                    }
                    if cannot {
                        ended = true;
                        break;
                    }
                }
                from = end + step;
            }
        }
        // Followed by nothing, or by the optional part (which may be absent): take the rest.
        if !ended && (next == tpl.segments.len() || next == tpl.required) {
            let holds = self.holds_to(ty, &mut held, key.len());
            let folded = holds && matches!(ty, PlaceholderType::Folded(_));
            if self.try_value(p, pos, key.len(), next, folded) {
                return true;
            }
            // The rest not in the case: from a later start it may be.
            ended = !holds;
        }
        if substrings_fit && !ended {
            self.failed_from.resize(tpl.placeholders.len(), usize::MAX);
            if let Some(from) = self.failed_from.get_mut(p) {
                *from = (*from).min(pos);
            }
        }
        self.remember_failure(p, pos);
        false
    }

    /// For a folded placeholder: whether `key[..end]` from `*held` on is in its case, scanning
    /// only what no earlier call scanned (`*held` moves up to `end`). True for other types.
    fn holds_to(&self, ty: &PlaceholderType, held: &mut usize, end: usize) -> bool {
        let PlaceholderType::Folded(case) = ty else { return true };
        if end <= *held {
            return true;
        }
        match self.key.get(*held..end) {
            Some(part) if case.holds(part) => {
                *held = end;
                true
            }
            _ => false,
        }
    }

    /// Tries `key[start..end]` as placeholder `p`, then the rest of the template from `end`;
    /// `folded`: the text is known to be in the folded placeholder's case (not checked again).
    fn try_value(&mut self, p: usize, start: usize, end: usize, next: usize, folded: bool) -> bool {
        let Some(ph) = self.tpl.placeholders.get(p) else { return false };
        let Some(text) = self.key.get(start..end) else { return false };
        let checked = if folded && !text.is_empty() { Ok(Scalar::Text) } else { ph.ty.check(text) };
        match checked {
            Ok(scalar) => {
                if !self.segment(next, end) {
                    return false;
                }
                if let Some(slot) = self.out.get_mut(p) {
                    *slot = Some(scalar.into_value(&ph.ty, text));
                }
                true
            }
            Err(reason) => {
                if self.worst.is_none_or(|w| start > w.start) {
                    self.worst = Some(ValueFailure { placeholder: p, start, end, reason });
                }
                false
            }
        }
    }

    fn bit(&self, p: usize, pos: usize) -> usize {
        p * (self.key.len() + 1) + pos
    }

    fn known_failure(&self, p: usize, pos: usize) -> bool {
        let bit = self.bit(p, pos);
        self.failed.as_ref().and_then(|f| f.get(bit / 64)).is_some_and(|word| word & (1 << (bit % 64)) != 0)
    }

    fn remember_failure(&mut self, p: usize, pos: usize) {
        let bit = self.bit(p, pos);
        let bits = self.tpl.placeholders.len() * (self.key.len() + 1);
        let failed = self.failed.get_or_insert_with(|| vec![0; bits.div_ceil(64)]);
        if let Some(word) = failed.get_mut(bit / 64) {
            *word |= 1 << (bit % 64);
        }
    }
}

/// A `fmt::Write` that compares what is written with a key instead of storing it.
struct Expect<'a> {
    rest: &'a str,
    ok: bool,
}

impl fmt::Write for Expect<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.ok {
            match self.rest.strip_prefix(s) {
                Some(rest) => self.rest = rest,
                None => self.ok = false,
            }
        }
        Ok(())
    }
}

/// Template text compiler; offsets are char indices.
struct Parser<'s> {
    source: &'s str,
    chars: Vec<char>,
    segments: Vec<Segment>,
    placeholders: Vec<Placeholder>,
    literal: String,
    /// Offset of the `[` of the optional part, while inside it.
    open: Option<usize>,
    required: Option<usize>,
    /// Offset of each placeholder's `{`, for error messages.
    starts: Vec<usize>,
}

impl<'s> Parser<'s> {
    fn new(source: &'s str) -> Self {
        Parser {
            source,
            chars: source.chars().collect(),
            segments: Vec::new(),
            placeholders: Vec::new(),
            literal: String::new(),
            open: None,
            required: None,
            starts: Vec::new(),
        }
    }

    fn run(mut self) -> Result<KeyTemplate, TemplateError> {
        if self.chars.is_empty() {
            return Err(error(
                0,
                "empty key template".into(),
                Some("write the key's literal text, like `PROFILE`, or placeholders, like `USER#{email}`".into()),
            ));
        }
        let mut i = 0;
        while let Some(&c) = self.chars.get(i) {
            match c {
                '\\' => {
                    match self.chars.get(i + 1) {
                        Some(&e @ ('{' | '}' | '[' | ']' | '\\')) => self.literal.push(e),
                        Some(&other) => {
                            return Err(error(
                                i,
                                format!("unknown escape `\\{other}`"),
                                Some("only `\\{`, `\\}`, `\\[`, `\\]` and `\\\\` are escapes; write `\\\\` for a backslash".into()),
                            ));
                        }
                        None => {
                            return Err(error(
                                i,
                                "the template ends with a lone `\\`".into(),
                                Some("write `\\\\` for a literal backslash".into()),
                            ));
                        }
                    }
                    i += 2;
                }
                '{' => i = self.placeholder(i)?,
                '}' => {
                    return Err(error(i, "unmatched `}`".into(), Some("write `\\}` for a literal `}`".into())));
                }
                '[' => {
                    if let Some(open) = self.open {
                        return Err(error(
                            i,
                            "nested `[` inside the optional part".into(),
                            Some(format!(
                                "the optional part opened at character {open} cannot nest; write `\\[` for a literal `[`"
                            )),
                        ));
                    }
                    self.flush_literal();
                    self.open = Some(i);
                    self.required = Some(self.segments.len());
                    i += 1;
                }
                ']' => {
                    let Some(open) = self.open else {
                        return Err(error(i, "unmatched `]`".into(), Some("write `\\]` for a literal `]`".into())));
                    };
                    self.flush_literal();
                    let part = self.segments.get(self.required.unwrap_or_default()..).unwrap_or_default();
                    if part.is_empty() {
                        return Err(error(open, "empty optional part `[]`".into(), None));
                    }
                    if !part.iter().any(|s| matches!(s, Segment::Placeholder(_))) {
                        return Err(error(
                            open,
                            "the optional part has no placeholder".into(),
                            Some("an optional part is present exactly when its placeholders have values; for literal brackets write `\\[` and `\\]`".into()),
                        ));
                    }
                    if i + 1 < self.chars.len() {
                        return Err(error(
                            i + 1,
                            "the optional part must end the template".into(),
                            Some("only one optional part `[...]` is allowed, at the very end".into()),
                        ));
                    }
                    self.open = None;
                    i += 1;
                }
                _ => {
                    self.literal.push(c);
                    i += 1;
                }
            }
        }
        if let Some(open) = self.open {
            return Err(error(
                open,
                "unclosed `[`".into(),
                Some("close the optional part with `]`, or write `\\[` for a literal `[`".into()),
            ));
        }
        self.flush_literal();
        let required = self.required.unwrap_or(self.segments.len());
        let mut prefix = String::new();
        for segment in self.segments.iter().take(required) {
            match segment {
                Segment::Literal(text) => prefix.push_str(text),
                Segment::Placeholder(_) => break,
            }
        }
        Ok(KeyTemplate {
            source: self.source.to_owned(),
            segments: self.segments,
            required,
            placeholders: self.placeholders,
            prefix,
        })
    }

    fn flush_literal(&mut self) {
        if !self.literal.is_empty() {
            self.segments.push(Segment::Literal(std::mem::take(&mut self.literal)));
        }
    }

    /// Parses the placeholder whose `{` is at `open`; returns the offset after its `}`.
    fn placeholder(&mut self, open: usize) -> Result<usize, TemplateError> {
        let unclosed = || {
            error(
                open,
                "unclosed `{`".into(),
                Some("placeholders are `{name}` or `{name:type}`; write `\\{` for a literal `{`".into()),
            )
        };
        let mut close = open + 1;
        loop {
            match self.chars.get(close) {
                Some('}') => break,
                Some('{') | None => return Err(unclosed()),
                Some(_) => close += 1,
            }
        }
        let inner = self.chars.get(open + 1..close).unwrap_or_default();
        let colon = inner.iter().position(|&c| c == ':');
        let name: String = inner[..colon.unwrap_or(inner.len())].iter().collect();
        let name_at = open + 1;
        if name.is_empty() {
            return Err(error(
                open,
                "empty placeholder name".into(),
                Some("placeholders are `{name}` or `{name:type}`, like `{order_id}`".into()),
            ));
        }
        if !is_placeholder_name(&name) {
            let hint = match to_placeholder_name(&name) {
                Some(s) => format!("placeholder names are snake_case: did you mean `{s}`?"),
                None => {
                    "placeholder names are snake_case: lowercase letters, digits and `_`, not starting with a digit"
                        .into()
                }
            };
            return Err(error(name_at, format!("invalid placeholder name `{name}`"), Some(hint)));
        }
        let ty = match colon {
            None => PlaceholderType::String,
            Some(c) => {
                let text: String = inner.get(c + 1..).unwrap_or_default().iter().collect();
                parse_type(&text, name_at + c + 1)?
            }
        };
        if self.placeholders.iter().any(|p| p.name == name) {
            return Err(error(
                name_at,
                format!("duplicate placeholder `{name}`"),
                Some("each placeholder name can appear once; rename one of them".into()),
            ));
        }
        if self.placeholders.len() >= MAX_PLACEHOLDERS {
            return Err(error(open, format!("more than {MAX_PLACEHOLDERS} placeholders"), None));
        }
        self.flush_literal();
        if let Some(&Segment::Placeholder(prev)) = self.segments.last() {
            let prev_name = self.placeholders.get(prev).map(|p| p.name.as_str()).unwrap_or_default();
            let prev_at = self.starts.get(prev).copied().unwrap_or_default();
            return Err(error(
                open,
                format!("placeholders `{prev_name}` and `{name}` have no literal text between them"),
                Some(format!(
                    "where `{prev_name}` (at character {prev_at}) ends would be ambiguous; add a separator, like `{{{prev_name}}}#{{{name}}}`"
                )),
            ));
        }
        self.segments.push(Segment::Placeholder(self.placeholders.len()));
        self.placeholders.push(Placeholder { name, ty, optional: self.open.is_some() });
        self.starts.push(open);
        Ok(close + 1)
    }
}

fn error(offset: usize, message: String, hint: Option<String>) -> TemplateError {
    TemplateError { offset, message, hint }
}

/// Parses a type name written after `:`, at char offset `at`.
fn parse_type(text: &str, at: usize) -> Result<PlaceholderType, TemplateError> {
    let ty = match text {
        "string" => PlaceholderType::String,
        "int" => PlaceholderType::Int { width: None },
        "decimal" => PlaceholderType::Decimal,
        "epoch_s" => PlaceholderType::EpochS,
        "epoch_ms" => PlaceholderType::EpochMs,
        "iso8601" => PlaceholderType::Iso8601,
        "iso8601_ms" => PlaceholderType::Iso8601Ms,
        "date" => PlaceholderType::Date,
        "uuid" => PlaceholderType::Uuid,
        "lower" => PlaceholderType::Folded(Case::Lower),
        "upper" => PlaceholderType::Folded(Case::Upper),
        "" => {
            return Err(error(
                at,
                "empty placeholder type".into(),
                Some(format!("leave out the `:` for text, or write one of {}", type_list())),
            ));
        }
        _ if text.starts_with("int(") => {
            let width = text.strip_prefix("int(").and_then(|t| t.strip_suffix(')')).unwrap_or_default();
            let hint = Some(format!("write `int(N)` with N from 1 to {MAX_INT_WIDTH}, like `int(8)`"));
            if width.is_empty() || !all_digits(width) {
                return Err(error(at, format!("invalid width in `{text}`"), hint));
            }
            match width.parse::<usize>() {
                Ok(n @ 1..=MAX_INT_WIDTH) => PlaceholderType::Int { width: Some(n) },
                _ => {
                    return Err(error(
                        at,
                        format!("width in `{text}` must be 1 to {MAX_INT_WIDTH} digits"),
                        hint.map(|h| format!("{h}; an i64 has at most {MAX_INT_WIDTH} digits")),
                    ));
                }
            }
        }
        _ => {
            let hint = match closest_type(text) {
                Some(t) => format!("did you mean `{t}`?"),
                None => format!("valid types: {}", type_list()),
            };
            return Err(error(at, format!("unknown placeholder type `{text}`"), Some(hint)));
        }
    };
    Ok(ty)
}

fn type_list() -> String {
    TYPE_NAMES.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
}

/// The valid type name an unknown one most likely meant.
fn closest_type(text: &str) -> Option<&'static str> {
    const ALIASES: [(&str, &str); 17] = [
        ("toisostring", "iso8601_ms"),
        ("iso_ms", "iso8601_ms"),
        ("lowercase", "lower"),
        ("uppercase", "upper"),
        ("str", "string"),
        ("text", "string"),
        ("integer", "int"),
        ("i64", "int"),
        ("number", "decimal"),
        ("numeric", "decimal"),
        ("timestamp", "iso8601"),
        ("datetime", "iso8601"),
        ("rfc3339", "iso8601"),
        ("iso", "iso8601"),
        ("epoch", "epoch_s"),
        ("epoch_millis", "epoch_ms"),
        ("guid", "uuid"),
    ];
    let lower = text.to_lowercase();
    if let Some((_, t)) = ALIASES.iter().find(|(alias, _)| *alias == lower) {
        return Some(t);
    }
    let len = lower.chars().count();
    TYPE_NAMES
        .iter()
        .filter(|t| **t != "int(N)")
        .map(|t| (super::suggest::distance(&lower, t), *t))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, _)| *d <= 2 || *d * 3 <= len)
        .map(|(_, t)| t)
}

/// Whether `name` is a valid placeholder name, `[a-z_][a-z0-9_]*`.
pub fn is_placeholder_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A snake_case placeholder name for arbitrary text (`orderId` → `order_id`, `Order-Line` →
/// `order_line`); `None` when nothing usable is left (no ASCII letters or digits).
pub fn to_placeholder_name(text: &str) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev = i.checked_sub(1).and_then(|j| chars.get(j));
            let next = chars.get(i + 1);
            let boundary = prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
                || (prev.is_some_and(char::is_ascii_uppercase) && next.is_some_and(char::is_ascii_lowercase));
            if boundary && !out.is_empty() && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        return None;
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    Some(out)
}

/// Template text for a literal: `{`, `}`, `[`, `]` and `\` escaped with a backslash.
pub fn escape_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '{' | '}' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

fn decimal_digits(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

/// `-?[0-9]+` without leading zeros (and not `-0`), fitting i64.
fn check_int(text: &str) -> Result<i64, Reason> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !all_digits(digits) {
        return Err(Reason::Form);
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(Reason::LeadingZeros);
    }
    if digits == "0" && digits.len() != text.len() {
        return Err(Reason::NotCanonical);
    }
    text.parse::<i64>().map_err(|_| Reason::Overflow)
}

/// A non-negative integer without leading zeros, fitting i64.
fn check_epoch(text: &str) -> Result<i64, Reason> {
    if !all_digits(text) {
        return Err(Reason::Form);
    }
    if text.len() > 1 && text.starts_with('0') {
        return Err(Reason::LeadingZeros);
    }
    text.parse::<i64>().map_err(|_| Reason::Overflow)
}

/// `-?[0-9]+(\.[0-9]+)?`
fn is_decimal(text: &str) -> bool {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    match unsigned.split_once('.') {
        Some((int, frac)) => all_digits(int) && all_digits(frac),
        None => all_digits(unsigned),
    }
}

/// `8-4-4-4-12` hex digits, either case.
fn is_uuid(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter()
            .enumerate()
            .all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { *c == b'-' } else { c.is_ascii_hexdigit() })
}

/// The number in `b[range]`, all ASCII digits (at most 9 of them).
fn digits_at(b: &[u8], from: usize, to: usize) -> Option<u32> {
    let part = b.get(from..to)?;
    if part.is_empty() || part.len() > 9 || !part.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(part.iter().fold(0, |acc, d| acc * 10 + u32::from(d - b'0')))
}

/// Days since 1970-01-01 of `YYYY-MM-DD` at the start of `b`.
fn date_prefix(b: &[u8]) -> Result<i64, Reason> {
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return Err(Reason::Form);
    }
    let (Some(y), Some(m), Some(d)) = (digits_at(b, 0, 4), digits_at(b, 5, 7), digits_at(b, 8, 10)) else {
        return Err(Reason::Form);
    };
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(Reason::BadDate);
    }
    Ok(days_from_civil(i64::from(y), m, d))
}

fn parse_date(text: &str) -> Result<i32, Reason> {
    if text.len() != 10 {
        return Err(Reason::Form);
    }
    let days = date_prefix(text.as_bytes())?;
    i32::try_from(days).map_err(|_| Reason::BadDate)
}

/// Microseconds since the epoch of a canonical `YYYY-MM-DDTHH:MM:SS[.fff|.ffffff]Z`.
fn parse_iso8601(text: &str) -> Result<i64, Reason> {
    let b = text.as_bytes();
    if b.len() < 19 || b.get(10) != Some(&b'T') || b.get(13) != Some(&b':') || b.get(16) != Some(&b':') {
        return Err(Reason::Form);
    }
    let days = date_prefix(b)?;
    let (Some(h), Some(mi), Some(s)) = (digits_at(b, 11, 13), digits_at(b, 14, 16), digits_at(b, 17, 19)) else {
        return Err(Reason::Form);
    };
    if h > 23 || mi > 59 || s > 59 {
        return Err(Reason::BadDate);
    }
    // A valid date and time: whatever follows decides only whether the form is canonical.
    let tail = b.get(19..).unwrap_or_default();
    let Some(fraction) = tail.strip_suffix(b"Z") else { return Err(Reason::NotCanonical) };
    let (digits, micros) = match fraction {
        [] => (0, 0),
        [b'.', f @ ..] if (1..=9).contains(&f.len()) && f.iter().all(u8::is_ascii_digit) => {
            let nanos = f.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')) * 10i64.pow(9 - f.len() as u32);
            if nanos % 1000 != 0 {
                return Err(Reason::NotCanonical);
            }
            (f.len(), nanos / 1000)
        }
        _ => return Err(Reason::NotCanonical),
    };
    if digits != canonical_fraction_digits(micros) {
        return Err(Reason::NotCanonical);
    }
    let seconds = days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(s);
    Ok(seconds * 1_000_000 + micros)
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS.fffZ` (exactly three fraction digits).
fn parse_iso8601_ms(text: &str) -> Result<i64, Reason> {
    let b = text.as_bytes();
    if b.len() != 24 || b.get(19) != Some(&b'.') || b.get(23) != Some(&b'Z') {
        // A valid instant in another spelling is not canonical; anything else is the wrong form.
        return Err(if parse_iso8601(text).is_ok() { Reason::NotCanonical } else { Reason::Form });
    }
    let millis = digits_at(b, 20, 23).ok_or(Reason::Form)?;
    let whole = format!("{}Z", text.get(..19).ok_or(Reason::Form)?);
    let micros = parse_iso8601(&whole)?;
    Ok(micros / 1_000 + i64::from(millis))
}

/// How many fraction digits an ISO 8601 timestamp is written with.
#[derive(Clone, Copy)]
enum Fraction {
    /// None, 3 or 6: the fewest that keep the value.
    Canonical,
    /// Always 3 (`micros` is a whole number of milliseconds), as JavaScript's `toISOString()`.
    Millis,
}

/// Writes `micros` as `YYYY-MM-DDTHH:MM:SS[.fff[fff]]Z`; `Ok(false)` (nothing written) outside
/// years 0000-9999.
fn write_iso8601_as<W: fmt::Write>(micros: i64, fraction: Fraction, w: &mut W) -> Result<bool, fmt::Error> {
    const PER_DAY: i64 = 86_400_000_000;
    let (y, m, d) = civil_from_days(micros.div_euclid(PER_DAY));
    if !(0..=9999).contains(&y) {
        return Ok(false);
    }
    let of_day = micros.rem_euclid(PER_DAY);
    let (secs, frac) = (of_day / 1_000_000, of_day % 1_000_000);
    write!(w, "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)?;
    let digits = match fraction {
        Fraction::Canonical => canonical_fraction_digits(frac),
        Fraction::Millis => 3,
    };
    match digits {
        0 => {}
        3 => write!(w, ".{:03}", frac / 1000)?,
        _ => write!(w, ".{frac:06}")?,
    }
    w.write_char('Z')?;
    Ok(true)
}

fn canonical_fraction_digits(micros: i64) -> usize {
    if micros == 0 {
        0
    } else if micros % 1000 == 0 {
        3
    } else {
        6
    }
}

/// Writes the canonical form of `micros`; `Ok(false)` (nothing written) outside years 0000-9999.
fn write_iso8601<W: fmt::Write>(micros: i64, w: &mut W) -> Result<bool, fmt::Error> {
    write_iso8601_as(micros, Fraction::Canonical, w)
}

/// Writes `micros` (a whole number of milliseconds) as `YYYY-MM-DDTHH:MM:SS.fffZ`; `Ok(false)`
/// (nothing written) outside years 0000-9999.
fn write_iso8601_ms<W: fmt::Write>(micros: i64, w: &mut W) -> Result<bool, fmt::Error> {
    write_iso8601_as(micros, Fraction::Millis, w)
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400)) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01; exact for any day a 64-bit
/// microsecond count can reach.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn describe_value(value: &KeyValue<'_>) -> String {
    match value {
        KeyValue::Str(s) => format!("text `{}`", shorten(s)),
        KeyValue::Int(v) => format!("the integer `{v}`"),
        KeyValue::Decimal(s) => format!("the decimal `{}`", shorten(s)),
        KeyValue::Timestamp { unit, value } => {
            let unit = match unit {
                TimeUnit::Second => "seconds",
                TimeUnit::Millisecond => "milliseconds",
                TimeUnit::Microsecond => "microseconds",
            };
            format!("the timestamp `{value}` ({unit} since the epoch)")
        }
        KeyValue::Date(_) => "a date".into(),
        KeyValue::Folded { text, .. } => format!("text `{}`", shorten(text)),
    }
}

/// `text`, cut to [`MAX_SHOWN_CHARS`] chars for messages.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tpl(source: &str) -> KeyTemplate {
        match KeyTemplate::parse(source) {
            Ok(t) => t,
            Err(e) => panic!("`{source}` does not compile: {e}"),
        }
    }

    fn compile_error(source: &str) -> TemplateError {
        match KeyTemplate::parse(source) {
            Ok(_) => panic!("`{source}` compiled"),
            Err(e) => e,
        }
    }

    fn s(text: &str) -> Option<KeyValue<'_>> {
        Some(KeyValue::Str(text.into()))
    }

    fn int(v: i64) -> Option<KeyValue<'static>> {
        Some(KeyValue::Int(v))
    }

    fn ts(unit: TimeUnit, value: i64) -> Option<KeyValue<'static>> {
        Some(KeyValue::Timestamp { unit, value })
    }

    /// Captures and checks the round trip.
    fn caps<'k>(t: &KeyTemplate, key: &'k str) -> Vec<Option<KeyValue<'k>>> {
        let values = t.captures(key).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.render(&values).as_deref(), Ok(key), "round trip of `{key}`");
        values.into_vec()
    }

    fn miss(t: &KeyTemplate, key: &str) -> MatchError {
        match t.captures(key) {
            Ok(v) => panic!("`{key}` matched `{t}`: {v:?}"),
            Err(e) => e,
        }
    }

    /// `v`, owning its text.
    fn owned(v: KeyValue<'_>) -> KeyValue<'static> {
        match v {
            KeyValue::Str(s) => KeyValue::Str(Cow::Owned(s.into_owned())),
            KeyValue::Int(v) => KeyValue::Int(v),
            KeyValue::Decimal(s) => KeyValue::Decimal(Cow::Owned(s.into_owned())),
            KeyValue::Timestamp { unit, value } => KeyValue::Timestamp { unit, value },
            KeyValue::Date(d) => KeyValue::Date(d),
            KeyValue::Folded { case, text } => KeyValue::Folded { case, text: Cow::Owned(text.into_owned()) },
        }
    }

    fn one(ty: &str, key: &str) -> Result<Option<KeyValue<'static>>, MatchError> {
        let t = tpl(&format!("K#{{v:{ty}}}"));
        t.captures(&format!("K#{key}")).map(|mut v| v.remove(0).map(owned))
    }

    fn chrono_days(y: i32, m: u32, d: u32) -> i32 {
        let date = chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap();
        (date - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days() as i32
    }

    #[test]
    fn compiles_placeholders_prefix_and_display() {
        let t = tpl("ORDER#{ordered_at:epoch_s}#{order_id}[#LINE#{line:int(4)}]");
        assert_eq!(
            t.placeholders(),
            &[
                Placeholder { name: "ordered_at".into(), ty: PlaceholderType::EpochS, optional: false },
                Placeholder { name: "order_id".into(), ty: PlaceholderType::String, optional: false },
                Placeholder { name: "line".into(), ty: PlaceholderType::Int { width: Some(4) }, optional: true },
            ]
        );
        assert_eq!(t.literal_prefix(), "ORDER#");
        assert_eq!(t.to_string(), "ORDER#{ordered_at:epoch_s}#{order_id}[#LINE#{line:int(4)}]");
        assert_eq!(t.source(), t.to_string());
        assert!(!t.is_constant());

        let c = tpl("PROFILE");
        assert_eq!(c.literal_prefix(), "PROFILE");
        assert!(c.is_constant());
        assert_eq!(caps(&c, "PROFILE"), vec![]);
        assert!(c.captures("PROFILE2").is_err());
        assert!(c.captures("PROFIL").is_err());
        assert_eq!(c.render(&[]).as_deref(), Ok("PROFILE"));

        assert_eq!(tpl("{x}#A").literal_prefix(), "");
        assert_eq!(tpl("V\\[1\\]#{x}").literal_prefix(), "V[1]#");
        // The optional part is not part of the prefix: keys without it do not start with it.
        assert_eq!(tpl("PROFILE[#V#{v:int}]").literal_prefix(), "PROFILE");
    }

    #[test]
    fn every_type_spelled_and_printed() {
        for (text, ty) in [
            ("string", PlaceholderType::String),
            ("int", PlaceholderType::Int { width: None }),
            ("int(8)", PlaceholderType::Int { width: Some(8) }),
            ("int(19)", PlaceholderType::Int { width: Some(19) }),
            ("decimal", PlaceholderType::Decimal),
            ("epoch_s", PlaceholderType::EpochS),
            ("epoch_ms", PlaceholderType::EpochMs),
            ("iso8601", PlaceholderType::Iso8601),
            ("iso8601_ms", PlaceholderType::Iso8601Ms),
            ("date", PlaceholderType::Date),
            ("uuid", PlaceholderType::Uuid),
            ("lower", PlaceholderType::Folded(Case::Lower)),
            ("upper", PlaceholderType::Folded(Case::Upper)),
        ] {
            let t = tpl(&format!("X#{{v:{text}}}"));
            assert_eq!(t.placeholders()[0].ty, ty);
            assert_eq!(ty.to_string(), text);
        }
        assert_eq!(tpl("{v}").placeholders()[0].ty, PlaceholderType::String);
    }

    #[test]
    fn iso8601_ms_values_as_javascript_writes_them() {
        let ms = |v| Ok(ts(TimeUnit::Millisecond, v));
        assert_eq!(one("iso8601_ms", "2024-03-01T12:00:00.000Z"), ms(1_709_294_400_000));
        assert_eq!(one("iso8601_ms", "2024-03-01T12:00:00.001Z"), ms(1_709_294_400_001));
        assert_eq!(one("iso8601_ms", "1970-01-01T00:00:00.000Z"), ms(0));
        assert_eq!(one("iso8601_ms", "0000-01-01T00:00:00.000Z"), ms(-62_167_219_200_000));
        for bad in [
            "2024-03-01T12:00:00Z",
            "2024-03-01T12:00:00.5Z",
            "2024-03-01T12:00:00.500000Z",
            "2024-03-01T12:00:00.000+00:00",
            "2024-02-30T00:00:00.000Z",
            "2024-03-01T24:00:00.000Z",
            "2024-03-01 12:00:00.000Z",
            "2024-03-01T12:00:00.0a0Z",
            "+02024-03-01T12:00:00.000Z",
            "2024-03-01T12:00:00.00éZ",
        ] {
            assert!(one("iso8601_ms", bad).is_err(), "{bad}");
        }
        let e = miss(&tpl("K#{at:iso8601_ms}"), "K#2024-03-01T12:00:00Z");
        assert!(e.message.contains("canonical form"), "{}", e.message);
        let t = tpl("K#{at:iso8601_ms}");
        let render = |unit, value| t.render(&[Some(KeyValue::Timestamp { unit, value })]);
        assert_eq!(render(TimeUnit::Second, 0).as_deref(), Ok("K#1970-01-01T00:00:00.000Z"));
        assert_eq!(render(TimeUnit::Microsecond, 1_500_000).as_deref(), Ok("K#1970-01-01T00:00:01.500Z"));
        assert!(render(TimeUnit::Microsecond, 1_500).is_err(), "below the millisecond");
        assert!(render(TimeUnit::Millisecond, 253_402_300_800_000).is_err(), "year 10000");
    }

    #[test]
    fn folded_values_are_case_folded_copies() {
        let t = tpl("$shop#userid_{user_id:lower}");
        let folded = |case, text: &'static str| Some(KeyValue::Folded { case, text: text.into() });
        assert_eq!(caps(&t, "$shop#userid_jdoe42"), vec![folded(Case::Lower, "jdoe42")]);
        assert_eq!(caps(&t, "$shop#userid_élodie-ü1"), vec![folded(Case::Lower, "élodie-ü1")]);
        let e = miss(&t, "$shop#userid_JDoe42");
        assert!(e.message.contains("is not lower-case text"), "{}", e.message);
        assert_eq!(t.render(&[s("JDoe42")]).as_deref(), Ok("$shop#userid_jdoe42"), "rendering folds");
        assert_eq!(t.render(&[s("ÉLodie")]).as_deref(), Ok("$shop#userid_élodie"));
        assert!(t.render(&[s("")]).is_err());
        let u = tpl("$TASK_1#STATUS_{status:upper}");
        assert_eq!(caps(&u, "$TASK_1#STATUS_IN-PROGRESS"), vec![folded(Case::Upper, "IN-PROGRESS")]);
        assert!(u.captures("$TASK_1#STATUS_in-progress").is_err());
        assert_eq!(u.render(&[s("in-progress")]).as_deref(), Ok("$TASK_1#STATUS_IN-PROGRESS"));
        // Digits and signs have no case: both accept them.
        assert_eq!(one("lower", "42-#"), Ok(folded(Case::Lower, "42-#")));
        assert_eq!(one("upper", "42-#"), Ok(folded(Case::Upper, "42-#")));
        // As JavaScript folds: `ß` upper-cases to `SS`, a final sigma lower-cases to `ς`.
        assert_eq!(Case::Upper.fold("straße"), "STRASSE");
        assert_eq!(Case::Lower.fold("ΟΔΟΣ"), "οδος");
        assert!(!Case::Upper.holds("STRAßE") && Case::Lower.holds("straße"));
    }

    #[test]
    fn string_values() {
        assert_eq!(one("string", "abc"), Ok(s("abc")));
        assert_eq!(one("string", "a b#c"), Ok(s("a b#c")));
        let e = one("string", "").unwrap_err();
        assert_eq!(e.message, "key `K#` does not match `K#{v:string}`: `v` is empty");
        assert_eq!(e.placeholder.as_deref(), Some("v"));
        assert_eq!(e.expected, "non-empty text");
    }

    #[test]
    fn int_values() {
        assert_eq!(one("int", "0"), Ok(int(0)));
        assert_eq!(one("int", "42"), Ok(int(42)));
        assert_eq!(one("int", "-42"), Ok(int(-42)));
        assert_eq!(one("int", "9223372036854775807"), Ok(int(i64::MAX)));
        assert_eq!(one("int", "-9223372036854775808"), Ok(int(i64::MIN)));
        let e = one("int", "0042").unwrap_err();
        assert_eq!(
            e.message,
            "key `K#0042` does not match `K#{v:int}`: `0042` is not an integer: leading zeros would be lost"
        );
        assert_eq!(e.expected, "an integer (digits, no leading zeros)");
        assert!(one("int", "-007").is_err());
        assert!(one("int", "-0").unwrap_err().message.contains("canonical"));
        assert!(one("int", "+5").is_err());
        assert!(one("int", "5.0").is_err());
        assert!(one("int", "-").is_err());
        assert!(one("int", "１２").is_err(), "full-width digits are not digits");
        let e = one("int", "9223372036854775808").unwrap_err();
        assert!(e.message.ends_with("`9223372036854775808` does not fit a 64-bit integer"), "{e}");
        assert!(one("int", "-9223372036854775809").is_err());
        assert!(one("int", "99999999999999999999999999").is_err());
    }

    #[test]
    fn zero_padded_int_values() {
        assert_eq!(one("int(4)", "0042"), Ok(int(42)));
        assert_eq!(one("int(4)", "0000"), Ok(int(0)));
        assert_eq!(one("int(4)", "9999"), Ok(int(9999)));
        let e = one("int(8)", "042").unwrap_err();
        assert_eq!(e.message, "key `K#042` does not match `K#{v:int(8)}`: `042` is not 8 digits");
        assert_eq!(e.expected, "8 digits, zero-padded");
        assert!(one("int(4)", "00042").is_err());
        assert!(one("int(4)", "-042").is_err());
        assert!(one("int(4)", "0x42").is_err());
        assert_eq!(one("int(19)", "9223372036854775807"), Ok(int(i64::MAX)));
        assert_eq!(one("int(19)", "0000000000000000001"), Ok(int(1)));
        assert!(one("int(19)", "9999999999999999999").unwrap_err().message.contains("does not fit a 64-bit integer"));

        let t = tpl("SEQ#{n:int(3)}");
        assert_eq!(t.render(&[int(7)]).as_deref(), Ok("SEQ#007"));
        assert_eq!(t.render(&[int(999)]).as_deref(), Ok("SEQ#999"));
        assert!(t.render(&[int(1000)]).unwrap_err().message.contains("more than 3 digits"));
        assert!(t.render(&[int(-1)]).unwrap_err().message.contains("negative"));
    }

    #[test]
    fn decimal_values_keep_their_text() {
        for text in ["0", "1.50", "-0.5", "007", "-0", "123456789012345678901234567890.1"] {
            assert_eq!(one("decimal", text), Ok(Some(KeyValue::Decimal(text.into()))), "{text}");
        }
        for text in ["1.", ".5", "1e5", "1,5", "--1", "1.2.3", "+1", "-"] {
            let e = one("decimal", text).unwrap_err();
            assert!(e.message.ends_with(&format!("`{text}` is not a decimal number")), "{e}");
        }
        let t = tpl("P#{price:decimal}");
        assert_eq!(t.render(&[Some(KeyValue::Decimal("1.50".into()))]).as_deref(), Ok("P#1.50"));
        assert_eq!(t.render(&[int(-3)]).as_deref(), Ok("P#-3"));
        assert!(t.render(&[Some(KeyValue::Decimal("1,5".into()))]).is_err());
    }

    #[test]
    fn epoch_values() {
        assert_eq!(one("epoch_s", "1736403705"), Ok(ts(TimeUnit::Second, 1_736_403_705)));
        assert_eq!(one("epoch_s", "0"), Ok(ts(TimeUnit::Second, 0)));
        assert_eq!(one("epoch_s", "5"), Ok(ts(TimeUnit::Second, 5)), "no digit-count restriction");
        assert_eq!(one("epoch_ms", "1736403705123"), Ok(ts(TimeUnit::Millisecond, 1_736_403_705_123)));
        assert_eq!(one("epoch_ms", "9223372036854775807"), Ok(ts(TimeUnit::Millisecond, i64::MAX)));
        let e = one("epoch_s", "abc").unwrap_err();
        assert_eq!(e.message, "key `K#abc` does not match `K#{v:epoch_s}`: `abc` is not epoch seconds");
        assert_eq!(e.expected, "epoch seconds (digits)");
        assert!(one("epoch_s", "-5").is_err());
        assert!(one("epoch_s", "01736403705").unwrap_err().message.contains("leading zeros"));
        assert!(one("epoch_ms", "9223372036854775808").unwrap_err().message.contains("64-bit"));
        assert!(one("epoch_ms", "1.5").is_err());

        let t = tpl("T#{at:epoch_ms}");
        assert_eq!(t.render(&[ts(TimeUnit::Millisecond, 12)]).as_deref(), Ok("T#12"));
        assert_eq!(t.render(&[ts(TimeUnit::Second, 12)]).as_deref(), Ok("T#12000"));
        assert!(t.render(&[ts(TimeUnit::Second, i64::MAX)]).is_err());
        assert!(t.render(&[ts(TimeUnit::Millisecond, -1)]).is_err());
        assert!(t.render(&[ts(TimeUnit::Microsecond, 1)]).is_err());
        let t = tpl("T#{at:epoch_s}");
        assert!(t.render(&[ts(TimeUnit::Millisecond, 12)]).is_err());
        assert!(t.render(&[int(12)]).is_err());
    }

    #[test]
    fn iso8601_values_in_canonical_form() {
        let micros = |text: &str| {
            let t = chrono::DateTime::parse_from_rfc3339(text).unwrap();
            ts(TimeUnit::Microsecond, t.timestamp_micros())
        };
        for text in [
            "2025-01-09T06:21:45Z",
            "2025-01-09T06:21:45.120Z",
            "2025-01-09T06:21:45.123Z",
            "2025-01-09T06:21:45.123456Z",
            "2025-01-09T06:21:45.000001Z",
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999999Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "2024-02-29T12:00:00Z",
        ] {
            assert_eq!(one("iso8601", text), Ok(micros(text)), "{text}");
        }
        for text in [
            "2025-01-09T06:21:45.000Z",
            "2025-01-09T06:21:45.5Z",
            "2025-01-09T06:21:45.50Z",
            "2025-01-09T06:21:45.1200Z",
            "2025-01-09T06:21:45.123000Z",
            "2025-01-09T06:21:45.123456000Z",
            "2025-01-09T06:21:45.123456789Z",
            "2025-01-09T06:21:45+00:00",
            "2025-01-09T06:21:45.123+00:00",
            "2025-01-09T06:21:45z",
            "2025-01-09T06:21:45",
            "2025-01-09T06:21:45.Z",
            "2025-01-09T06:21:45.1234567890Z",
        ] {
            let e = one("iso8601", text).unwrap_err();
            assert!(e.message.contains("is not in canonical form"), "{text}: {e}");
            assert_eq!(e.expected, "YYYY-MM-DDTHH:MM:SS[.fff|.ffffff]Z");
        }
        for text in ["2025-01-09 06:21:45Z", "2025-1-09T06:21:45Z", "20250109T062145Z", "now", "2025-01-09"] {
            assert!(one("iso8601", text).unwrap_err().message.contains("is not an ISO 8601 UTC timestamp"), "{text}");
        }
        for text in ["2023-02-29T00:00:00Z", "2025-13-01T00:00:00Z", "2025-01-09T24:00:00Z", "2025-01-09T23:60:00Z"] {
            assert!(one("iso8601", text).unwrap_err().message.contains("not a valid calendar date"), "{text}");
        }
        let t = tpl("E#{at:iso8601}");
        assert_eq!(t.render(&[ts(TimeUnit::Second, 0)]).as_deref(), Ok("E#1970-01-01T00:00:00Z"));
        assert_eq!(t.render(&[ts(TimeUnit::Millisecond, 1500)]).as_deref(), Ok("E#1970-01-01T00:00:01.500Z"));
        assert_eq!(t.render(&[ts(TimeUnit::Microsecond, -1)]).as_deref(), Ok("E#1969-12-31T23:59:59.999999Z"));
        assert!(t.render(&[ts(TimeUnit::Microsecond, i64::MAX)]).unwrap_err().message.contains("0000 to 9999"));
        assert!(t.render(&[ts(TimeUnit::Second, i64::MIN)]).is_err());
    }

    #[test]
    fn date_values() {
        assert_eq!(one("date", "1970-01-01"), Ok(Some(KeyValue::Date(0))));
        assert_eq!(one("date", "2024-02-29"), Ok(Some(KeyValue::Date(chrono_days(2024, 2, 29)))));
        assert_eq!(one("date", "0000-01-01"), Ok(Some(KeyValue::Date(chrono_days(0, 1, 1)))));
        assert_eq!(one("date", "9999-12-31"), Ok(Some(KeyValue::Date(chrono_days(9999, 12, 31)))));
        assert!(one("date", "2023-02-29").unwrap_err().message.contains("not a valid calendar date"));
        assert!(one("date", "2023-04-31").is_err());
        assert!(one("date", "2023-00-10").is_err());
        let e = one("date", "2023-4-1").unwrap_err();
        assert!(e.message.ends_with("`2023-4-1` is not a `YYYY-MM-DD` date"), "{e}");
        assert_eq!(e.expected, "YYYY-MM-DD");
        assert!(one("date", "2023-04-01T00:00:00Z").is_err());
        let t = tpl("D#{day:date}");
        assert_eq!(t.render(&[Some(KeyValue::Date(-1))]).as_deref(), Ok("D#1969-12-31"));
        assert!(t.render(&[Some(KeyValue::Date(i32::MAX))]).is_err());
    }

    #[test]
    fn uuid_values_keep_case() {
        let lower = "123e4567-e89b-12d3-a456-426614174000";
        let upper = "123E4567-E89B-12D3-A456-426614174000";
        assert_eq!(one("uuid", lower), Ok(s(lower)));
        assert_eq!(one("uuid", upper), Ok(s(upper)));
        for bad in [
            "123e4567e89b12d3a456426614174000",
            "123e4567-e89b-12d3-a456-42661417400g",
            "{123e4567-e89b-12d3-a456-426614174000}",
        ] {
            assert!(one("uuid", bad).unwrap_err().message.contains("is not a uuid"), "{bad}");
        }
        assert!(tpl("U#{id:uuid}").render(&[s("nope")]).is_err());
    }

    #[test]
    fn separators_inside_values() {
        let t = tpl("USER#{email}");
        assert_eq!(caps(&t, "USER#a#b@x.com"), vec![s("a#b@x.com")]);
        let t = tpl("A#{x}#{y:int}");
        assert_eq!(caps(&t, "A#p#q#7"), vec![s("p#q"), int(7)]);
        assert_eq!(caps(&t, "A#p#7"), vec![s("p"), int(7)]);
        // Leftmost-shortest first: the string takes as little as the rest allows.
        let t = tpl("A#{x}#{y}");
        assert_eq!(caps(&t, "A#p#q#r"), vec![s("p"), s("q#r")]);
        let t = tpl("ORDER#{ordered_at:epoch_s}#{order_id}");
        assert_eq!(caps(&t, "ORDER#1736403705#ORD-1#X"), vec![ts(TimeUnit::Second, 1_736_403_705), s("ORD-1#X")]);
        // Overlapping occurrences of a multi-character separator.
        let t = tpl("{a}##{b:int}");
        assert_eq!(caps(&t, "x###5"), vec![s("x#"), int(5)]);
        assert_eq!(caps(&t, "x####5"), vec![s("x##"), int(5)]);
        // A value may be the separator itself.
        let t = tpl("A#{x}#B");
        assert_eq!(caps(&t, "A###B"), vec![s("#")]);
    }

    #[test]
    fn optional_part() {
        let t = tpl("ORDER#{order_id}[#LINE#{line:int}]");
        assert_eq!(caps(&t, "ORDER#O1"), vec![s("O1"), None]);
        assert_eq!(caps(&t, "ORDER#O1#LINE#3"), vec![s("O1"), int(3)]);
        // The part present is preferred; when it cannot match, the last required value takes the rest.
        assert_eq!(caps(&t, "ORDER#O1#LINE#x"), vec![s("O1#LINE#x"), None]);
        assert_eq!(caps(&t, "ORDER#O1#LINE#3#LINE#4"), vec![s("O1#LINE#3"), int(4)]);
        assert_eq!(t.render(&[s("O1"), None]).as_deref(), Ok("ORDER#O1"));
        assert_eq!(t.render(&[s("O1"), int(3)]).as_deref(), Ok("ORDER#O1#LINE#3"));

        let t = tpl("X#[{a}#{b:int}]");
        assert_eq!(caps(&t, "X#"), vec![None, None]);
        assert_eq!(caps(&t, "X#p#1"), vec![s("p"), int(1)]);
        assert!(t.captures("X#p").is_err());
        let e = t.render(&[s("p"), None]).unwrap_err();
        assert_eq!(
            e.message,
            "cannot render `X#[{a}#{b:int}]`: the optional part needs all its values or none: `a` is set but `b` is missing"
        );
        assert_eq!(e.placeholder.as_deref(), Some("b"));

        let t = tpl("{a}#END[#{b}]");
        assert_eq!(caps(&t, "x#END"), vec![s("x"), None]);
        assert_eq!(caps(&t, "x#END#y"), vec![s("x"), s("y")]);
        assert_eq!(caps(&t, "x#END#END"), vec![s("x"), s("END")]);

        let t = tpl("[{only}]");
        assert_eq!(caps(&t, ""), vec![None]);
        assert_eq!(caps(&t, "v"), vec![s("v")]);
    }

    #[test]
    fn escapes() {
        let t = tpl(r"A\{B\}#{x}#\[\]\\");
        assert_eq!(t.literal_prefix(), "A{B}#");
        assert_eq!(caps(&t, r"A{B}#v#[]\"), vec![s("v")]);
        assert!(t.captures("A{B}#v#[]").is_err());
        assert_eq!(escape_literal(r"a{b}[c]\d#é"), r"a\{b\}\[c\]\\d#é");
        let literal = "{}[]\\x";
        assert_eq!(caps(&tpl(&escape_literal(literal)), literal), vec![]);

        let e = compile_error(r"A\nB");
        assert_eq!((e.offset, e.message.as_str()), (1, r"unknown escape `\n`"));
        assert!(e.hint.unwrap().contains(r"`\\`"));
        let e = compile_error(r"AB\");
        assert_eq!((e.offset, e.message.as_str()), (2, r"the template ends with a lone `\`"));
    }

    #[test]
    fn multibyte_keys_and_literals() {
        let t = tpl("ユーザー#{name}→{n:int}");
        assert_eq!(t.literal_prefix(), "ユーザー#");
        assert_eq!(caps(&t, "ユーザー#山田→太郎→7"), vec![s("山田→太郎"), int(7)]);
        assert!(t.captures("ユーザー#山田→").is_err());
        assert!(t.captures("ユーザ").is_err());
        let t = tpl("É#{a}é{b}");
        assert_eq!(caps(&t, "É#ééé"), vec![s("é"), s("é")]);
        let t = tpl("USER#{email}");
        assert_eq!(caps(&t, "USER#zoë@例え.jp"), vec![s("zoë@例え.jp")]);
        let e = miss(&tpl("K#{v:int}"), "K#٣");
        assert!(e.message.contains("`٣` is not an integer"), "{e}");
        // Offsets count chars, not bytes.
        assert_eq!(compile_error("日本#{Bad}").offset, 4);
    }

    #[test]
    fn match_errors_name_what_failed() {
        let t = tpl("ORDER#{ordered_at:epoch_s}#{order_id}");
        let e = miss(&t, "ORDER#abc#ORD-1");
        assert_eq!(
            e.message,
            "key `ORDER#abc#ORD-1` does not match `ORDER#{ordered_at:epoch_s}#{order_id}`: `abc` is not epoch seconds"
        );
        assert_eq!(e.placeholder.as_deref(), Some("ordered_at"));
        assert_eq!(e.expected, "epoch seconds (digits)");
        assert_eq!(e.to_string(), e.message);

        let e = miss(&t, "USER#alice");
        assert_eq!(
            e.message,
            "key `USER#alice` does not match `ORDER#{ordered_at:epoch_s}#{order_id}`: it does not start with `ORDER#`"
        );
        assert_eq!(e.placeholder, None);
        assert_eq!(e.expected, t.source());

        let e = miss(&t, "ORDER#1736403705");
        assert_eq!(e.message, "key `ORDER#1736403705` does not match `ORDER#{ordered_at:epoch_s}#{order_id}`");
        assert_eq!(e.placeholder, None);

        // The failure reached farthest into the key is the one reported.
        let e = miss(&tpl("A#{x}#{y:int}"), "A#p#q#r");
        assert!(e.message.ends_with("`r` is not an integer"), "{e}");
        assert_eq!(e.placeholder.as_deref(), Some("y"));

        let e = miss(&tpl("PROFILE"), "PROFILES");
        assert_eq!(e.message, "key `PROFILES` does not match `PROFILE`");

        let long = "x".repeat(1000);
        let e = miss(&tpl("A#{x}"), &long);
        assert!(e.message.chars().count() < 300, "long keys are shortened in messages");
    }

    #[test]
    fn render_errors() {
        let t = tpl("ORDER#{ordered_at:epoch_s}#{order_id}");
        let e = t.render(&[ts(TimeUnit::Second, 1)]).unwrap_err();
        assert_eq!(e.message, "cannot render `ORDER#{ordered_at:epoch_s}#{order_id}`: expected 2 values, got 1");
        let e = t.render(&[ts(TimeUnit::Second, 1), None]).unwrap_err();
        assert_eq!(e.message, "cannot render `ORDER#{ordered_at:epoch_s}#{order_id}`: no value for `order_id`");
        assert_eq!(e.placeholder.as_deref(), Some("order_id"));
        let e = t.render(&[s("1"), s("x")]).unwrap_err();
        assert_eq!(
            e.message,
            "cannot render `ORDER#{ordered_at:epoch_s}#{order_id}`: `ordered_at` is `epoch_s` and cannot hold text `1`"
        );
        assert_eq!(e.expected, "epoch seconds (digits)");
        let e = t.render(&[ts(TimeUnit::Second, 1), s("")]).unwrap_err();
        assert!(e.message.ends_with("`order_id`: the value is empty"), "{e}");
        assert_eq!(t.render(&[ts(TimeUnit::Second, 1), s("O")]).as_deref(), Ok("ORDER#1#O"));
        assert!(tpl("X#{v:int}").render(&[Some(KeyValue::Decimal("1".into()))]).is_err());
        assert!(tpl("X#{v:date}").render(&[int(1)]).is_err());
    }

    #[test]
    fn compile_errors() {
        let cases: &[(&str, usize, &str, Option<&str>)] = &[
            ("", 0, "empty key template", None),
            ("USER#{email", 5, "unclosed `{`", None),
            ("USER#{a{b}", 5, "unclosed `{`", None),
            ("USER#{}", 5, "empty placeholder name", None),
            ("USER#{:int}", 5, "empty placeholder name", None),
            (
                "USER#{Email}",
                6,
                "invalid placeholder name `Email`",
                Some("placeholder names are snake_case: did you mean `email`?"),
            ),
            (
                "USER#{orderId}",
                6,
                "invalid placeholder name `orderId`",
                Some("placeholder names are snake_case: did you mean `order_id`?"),
            ),
            (
                "X#{1st}",
                3,
                "invalid placeholder name `1st`",
                Some("placeholder names are snake_case: did you mean `_1st`?"),
            ),
            ("X#{a b}", 3, "invalid placeholder name `a b`", None),
            ("X#{é}", 3, "invalid placeholder name `é`", None),
            ("X#{t:epoch_sec}", 5, "unknown placeholder type `epoch_sec`", Some("did you mean `epoch_s`?")),
            ("X#{t:timestamp}", 5, "unknown placeholder type `timestamp`", Some("did you mean `iso8601`?")),
            ("X#{t:INT}", 5, "unknown placeholder type `INT`", Some("did you mean `int`?")),
            ("X#{t:strng}", 5, "unknown placeholder type `strng`", Some("did you mean `string`?")),
            ("X#{t:}", 5, "empty placeholder type", None),
            ("X#{n:int(0)}", 5, "width in `int(0)` must be 1 to 19 digits", None),
            ("X#{n:int(20)}", 5, "width in `int(20)` must be 1 to 19 digits", None),
            (
                "X#{n:int(99999999999999999999999)}",
                5,
                "width in `int(99999999999999999999999)` must be 1 to 19 digits",
                None,
            ),
            ("X#{n:int()}", 5, "invalid width in `int()`", None),
            ("X#{n:int(x)}", 5, "invalid width in `int(x)`", None),
            ("X#{n:int(8}", 5, "invalid width in `int(8`", None),
            ("X#{a}#{a}", 7, "duplicate placeholder `a`", None),
            ("X#{a}{b}", 5, "placeholders `a` and `b` have no literal text between them", None),
            ("X#{a}[{b}]", 6, "placeholders `a` and `b` have no literal text between them", None),
            ("X#{a}]", 5, "unmatched `]`", Some("write `\\]` for a literal `]`")),
            ("X}#{a}", 1, "unmatched `}`", Some("write `\\}` for a literal `}`")),
            ("X#[#{a}", 2, "unclosed `[`", None),
            ("X#[#{a}[#{b}]]", 7, "nested `[` inside the optional part", None),
            ("X[#{a}]#{b}", 7, "the optional part must end the template", None),
            ("X[#{a}][#{b}]", 7, "the optional part must end the template", None),
            ("X#[]", 2, "empty optional part `[]`", None),
            ("X[#V2]", 1, "the optional part has no placeholder", None),
        ];
        for (source, offset, message, hint) in cases {
            let e = compile_error(source);
            assert_eq!((e.offset, e.message.as_str()), (*offset, *message), "{source}");
            if let Some(hint) = hint {
                assert_eq!(e.hint.as_deref(), Some(*hint), "{source}");
            }
            assert!(e.message.chars().next().is_some_and(|c| !c.is_uppercase()), "lowercase: {}", e.message);
        }
        assert!(compile_error("X#{a}{b}").hint.unwrap().contains("add a separator, like `{a}#{b}`"));
        assert!(compile_error("X#{t:bogus}").hint.unwrap().starts_with("valid types: `string`, `int`, `int(N)`"));
        let many: String = (0..=MAX_PLACEHOLDERS).map(|i| format!("{{p{i}}}#")).collect();
        assert_eq!(compile_error(&many).message, "more than 64 placeholders");
        let most: String = (0..MAX_PLACEHOLDERS).map(|i| format!("{{p{i}}}#")).collect();
        assert_eq!(tpl(&most).placeholders().len(), MAX_PLACEHOLDERS);
    }

    #[test]
    fn backtracking_is_bounded() {
        // Without the failure memo this is C(2000, 4) splits.
        let t = tpl("{a}#{b}#{c}#{d}#X");
        let key = "#".repeat(2000);
        assert!(t.captures(&key).is_err());
        let t = tpl("{a}#{b:int}#{c}#{d:int}#{e}");
        let key = format!("{}1#x#2#y", "a#".repeat(500));
        assert_eq!(t.captures(&key).map(|v| v.len()), Ok(5));
    }

    /// Keys whose search was quadratic or worse per placeholder (each value checked again in
    /// full for every end tried): each now matches, or fails, in well under a second on the
    /// longest key there is. The fuzzer's slow input is `tests/fuzz/crashes/template/`.
    #[test]
    fn long_keys_are_matched_in_linear_time_per_placeholder() {
        let timed = |source: &str, key: &str| {
            let t = tpl(source);
            let start = std::time::Instant::now();
            let got = t.captures(key).map(|v| v.len());
            assert!(start.elapsed() < std::time::Duration::from_millis(500), "`{source}`: {:?}", start.elapsed());
            got
        };
        let n = MAX_KEY_BYTES - 2;
        // Folded text, every end in the right case: the case was checked again for each end.
        assert!(timed("{a:upper}A{b:upper}A{c:upper}A{d:upper}AX", &"A".repeat(n)).is_err());
        assert_eq!(timed("{a:upper}A{b:upper}A{c:upper}A{d:upper}AX", &format!("{}X", "A".repeat(n))), Ok(4));
        assert!(timed("{a:lower}a{b:lower}a{c:lower}", &format!("{}B", "a".repeat(n))).is_err());
        // Strings: a failure from one position is a failure from every later one.
        let many: String = (0..10).map(|i| format!("{{s{i}}}#")).collect();
        assert!(timed(&format!("{many}X"), &"x#".repeat(n / 2)).is_err());
        assert_eq!(timed(&format!("{many}X"), &format!("{}X", "x#".repeat(n / 2 - 1))), Ok(10));
        // Digits: a value longer than its type allows ends the search from its start.
        assert!(timed("{a:int}1{b:int}1{c:epoch_s}1{d}", &"1".repeat(n)).is_ok_and(|v| v == 4));
        assert!(timed("{a:int}1{b:int}1{c:epoch_s}1{d}#", &"1".repeat(n)).is_err());
        // The first value too long is still reported.
        let e = tpl("{a:int}#{b}").captures(&format!("{}#x", "1".repeat(30))).unwrap_err();
        assert!(e.message.contains("does not fit a 64-bit integer"), "{}", e.message);
        // A key longer than any DynamoDB key is not matched, and says why.
        let e = tpl("{a}").captures(&"x".repeat(MAX_KEY_BYTES + 1)).unwrap_err();
        assert!(e.message.contains("2049 bytes, longer than a DynamoDB key can be (2048 bytes)"), "{}", e.message);
        assert!(tpl("{a}").captures(&"x".repeat(MAX_KEY_BYTES)).is_ok());
    }

    #[test]
    fn calendar_matches_chrono() {
        let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
        let mut date = chrono::NaiveDate::from_ymd_opt(0, 1, 1).unwrap();
        let end = chrono::NaiveDate::from_ymd_opt(9999, 12, 31).unwrap();
        while date <= end {
            let days = (date - epoch).num_days();
            let (y, m, d) = civil_from_days(days);
            assert_eq!(
                (y, m, d),
                (
                    i64::from(chrono::Datelike::year(&date)),
                    chrono::Datelike::month(&date),
                    chrono::Datelike::day(&date)
                )
            );
            assert_eq!(days_from_civil(y, m, d), days);
            date += chrono::Duration::days(13);
        }
    }

    #[test]
    fn name_helpers() {
        assert!(is_placeholder_name("order_id"));
        assert!(is_placeholder_name("_x1"));
        assert!(!is_placeholder_name("1x"));
        assert!(!is_placeholder_name(""));
        assert!(!is_placeholder_name("orderId"));
        for (text, name) in [
            ("orderId", Some("order_id")),
            ("OrderID", Some("order_id")),
            ("HTTPServer", Some("http_server")),
            ("Order-Line", Some("order_line")),
            ("user.email", Some("user_email")),
            ("__x__", Some("x")),
            ("GSI1PK", Some("gsi1_pk")),
            ("2fa", Some("_2fa")),
            ("注文", None),
            ("", None),
        ] {
            assert_eq!(to_placeholder_name(text).as_deref(), name, "{text}");
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const LITERAL_CHARS: &[char] = &['#', '|', ':', '-', '.', '0', 'A', 'é', '日', '{', ']', '\\'];
        const VALUE_CHARS: &[char] = &['a', 'b', '#', '|', ':', '-', '.', '0', '7', 'é', '日', '{', 'A'];

        fn text(chars: &'static [char], len: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
            prop::collection::vec(prop::sample::select(chars), len).prop_map(|c| c.into_iter().collect())
        }

        fn any_type() -> BoxedStrategy<PlaceholderType> {
            prop_oneof![
                Just(PlaceholderType::String),
                Just(PlaceholderType::Int { width: None }),
                (1..=19usize).prop_map(|n| PlaceholderType::Int { width: Some(n) }),
                Just(PlaceholderType::Decimal),
                Just(PlaceholderType::EpochS),
                Just(PlaceholderType::EpochMs),
                Just(PlaceholderType::Iso8601),
                Just(PlaceholderType::Date),
                Just(PlaceholderType::Uuid),
                Just(PlaceholderType::Iso8601Ms),
                Just(PlaceholderType::Folded(Case::Lower)),
                Just(PlaceholderType::Folded(Case::Upper)),
            ]
            .boxed()
        }

        fn text_or_int() -> BoxedStrategy<PlaceholderType> {
            prop_oneof![Just(PlaceholderType::String), Just(PlaceholderType::Int { width: None })].boxed()
        }

        fn value(ty: &PlaceholderType, chars: &'static [char]) -> BoxedStrategy<KeyValue<'static>> {
            let day0 = days_from_civil(0, 1, 1);
            let day_end = days_from_civil(9999, 12, 31);
            match ty {
                PlaceholderType::String => text(chars, 1..=6).prop_map(|t| KeyValue::Str(t.into())).boxed(),
                PlaceholderType::Int { width: None } => any::<i64>().prop_map(KeyValue::Int).boxed(),
                PlaceholderType::Int { width: Some(n) } => {
                    let max = if *n >= 19 { i64::MAX } else { 10i64.pow(*n as u32) - 1 };
                    prop_oneof![0..=max, Just(0), Just(max)].prop_map(KeyValue::Int).boxed()
                }
                PlaceholderType::Decimal => {
                    "-?[0-9]{1,5}(\\.[0-9]{1,3})?".prop_map(|t| KeyValue::Decimal(t.into())).boxed()
                }
                PlaceholderType::EpochS => {
                    (0..=i64::MAX).prop_map(|value| KeyValue::Timestamp { unit: TimeUnit::Second, value }).boxed()
                }
                PlaceholderType::EpochMs => prop_oneof![0..=i64::MAX, 0..10_000i64]
                    .prop_map(|value| KeyValue::Timestamp { unit: TimeUnit::Millisecond, value })
                    .boxed(),
                PlaceholderType::Iso8601 => {
                    let (lo, hi) = (day0 * 86_400_000_000, (day_end + 1) * 86_400_000_000 - 1);
                    (lo..=hi, 0..3u32)
                        .prop_map(|(v, precision)| {
                            let value = match precision {
                                0 => v - v.rem_euclid(1_000_000),
                                1 => v - v.rem_euclid(1_000),
                                _ => v,
                            };
                            KeyValue::Timestamp { unit: TimeUnit::Microsecond, value }
                        })
                        .boxed()
                }
                PlaceholderType::Date => ((day0 as i32)..=(day_end as i32)).prop_map(KeyValue::Date).boxed(),
                PlaceholderType::Iso8601Ms => (day0 * 86_400_000..=(day_end + 1) * 86_400_000 - 1)
                    .prop_map(|value| KeyValue::Timestamp { unit: TimeUnit::Millisecond, value })
                    .boxed(),
                PlaceholderType::Folded(case) => {
                    let case = *case;
                    text(chars, 1..=6).prop_map(move |t| KeyValue::Folded { case, text: case.fold(&t).into() }).boxed()
                }
                PlaceholderType::Uuid => "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
                    .prop_map(|t| KeyValue::Str(t.into()))
                    .boxed(),
            }
        }

        /// A template: literals (some possibly empty) around placeholders, and how many of the
        /// placeholders form the optional part.
        #[derive(Debug, Clone)]
        struct Shape {
            /// `literals[i]` precedes placeholder `i`; the last one ends the required part.
            literals: Vec<String>,
            types: Vec<PlaceholderType>,
            /// Literal that starts the optional part, its literals between placeholders and its end.
            optional: Option<(Vec<String>, Vec<PlaceholderType>)>,
        }

        impl Shape {
            fn source(&self) -> String {
                let mut out = String::new();
                let mut n = 0;
                let mut push = |out: &mut String, literals: &[String], types: &[PlaceholderType]| {
                    for (i, lit) in literals.iter().enumerate() {
                        out.push_str(&escape_literal(lit));
                        if let Some(t) = types.get(i) {
                            out.push_str(&format!("{{p{n}:{t}}}"));
                            n += 1;
                        }
                    }
                };
                push(&mut out, &self.literals, &self.types);
                if let Some((literals, types)) = &self.optional {
                    out.push('[');
                    push(&mut out, literals, types);
                    out.push(']');
                }
                out
            }
        }

        /// `count` placeholders with `count + 1` literals; inner literals are non-empty, the
        /// first one too when `first_nonempty`.
        fn part(
            chars: &'static [char],
            count: usize,
            first_nonempty: bool,
            types: fn() -> BoxedStrategy<PlaceholderType>,
        ) -> impl Strategy<Value = (Vec<String>, Vec<PlaceholderType>)> {
            let literals = (0..=count)
                .map(|i| {
                    let inner = i > 0 && i < count;
                    let min = if inner || (i == 0 && first_nonempty && count > 0) { 1 } else { 0 };
                    text(chars, min..=3)
                })
                .collect::<Vec<_>>();
            (literals, prop::collection::vec(types(), count))
        }

        fn shape(
            chars: &'static [char],
            types: fn() -> BoxedStrategy<PlaceholderType>,
        ) -> impl Strategy<Value = Shape> {
            (0..=3usize, 0..=2usize)
                .prop_flat_map(move |(required, optional)| {
                    (part(chars, required, false, types), part(chars, optional, true, types))
                })
                .prop_filter_map("template must compile", |((literals, types), (olits, otypes))| {
                    let mut shape = Shape { literals, types, optional: None };
                    if !otypes.is_empty() {
                        // No placeholder right before the optional part's first placeholder.
                        let required_ends_with_placeholder =
                            !shape.types.is_empty() && shape.literals.last().is_some_and(String::is_empty);
                        if required_ends_with_placeholder && olits.first().is_some_and(String::is_empty) {
                            return None;
                        }
                        shape.optional = Some((olits, otypes));
                    }
                    if shape.source().is_empty() {
                        return None;
                    }
                    Some(shape)
                })
        }

        fn case(
            literal_chars: &'static [char],
            value_chars: &'static [char],
            types: fn() -> BoxedStrategy<PlaceholderType>,
        ) -> impl Strategy<Value = (Shape, Vec<KeyValue<'static>>, bool)> {
            shape(literal_chars, types).prop_flat_map(move |shape| {
                let mut types = shape.types.clone();
                if let Some((_, t)) = &shape.optional {
                    types.extend(t.iter().cloned());
                }
                let values: Vec<_> = types.iter().map(|t| value(t, value_chars)).collect();
                (Just(shape), values, any::<bool>())
            })
        }

        /// Whether the leftmost-shortest search must find exactly these values: every value is
        /// followed by the first occurrence of its following literal, and with the optional part
        /// absent, the last required value does not contain the optional part's first literal.
        fn unambiguous(t: &KeyTemplate, values: &[Option<KeyValue>]) -> bool {
            let present = values.iter().zip(t.placeholders()).any(|(v, p)| p.optional && v.is_some());
            let end = if present { t.segments.len() } else { t.required };
            for (i, seg) in t.segments[..end].iter().enumerate() {
                let Segment::Placeholder(p) = seg else { continue };
                let mut text = String::new();
                let Some(Some(v)) = values.get(*p) else { return false };
                if t.placeholders[*p].ty.write_value(v, &mut text).is_err() {
                    return false;
                }
                let clear = match t.segments.get(i + 1) {
                    // The first occurrence of the following literal is right after the value.
                    Some(Segment::Literal(lit)) if i + 1 < end => {
                        format!("{text}{lit}").find(lit.as_str()) == Some(text.len())
                    }
                    // The optional part is absent: its first literal must not occur in the value.
                    Some(Segment::Literal(lit)) => !text.contains(lit.as_str()),
                    _ => true,
                };
                if !clear {
                    return false;
                }
            }
            true
        }

        /// Whether some split of `key` fits `t`: every split tried, each value checked in full
        /// (the reference the pruned search must agree with).
        fn fits_some_split(t: &KeyTemplate, key: &str, seg: usize, pos: usize) -> bool {
            if seg == t.segments.len() || (seg == t.required && pos == key.len()) {
                return pos == key.len();
            }
            match &t.segments[seg] {
                Segment::Literal(lit) => {
                    key[pos..].starts_with(lit.as_str()) && fits_some_split(t, key, seg + 1, pos + lit.len())
                }
                Segment::Placeholder(p) => (pos + 1..=key.len()).filter(|&end| key.is_char_boundary(end)).any(|end| {
                    t.placeholders[*p].ty.check(&key[pos..end]).is_ok() && fits_some_split(t, key, seg + 1, end)
                }),
            }
        }

        /// Rendered keys always match, the captured values render back to the same key, and
        /// when no value hides a copy of its following literal, the values come back exactly.
        fn check_round_trip(shape: Shape, values: Vec<KeyValue>, present: bool) -> Result<(), TestCaseError> {
            let source = shape.source();
            let t = KeyTemplate::parse(&source).map_err(|e| TestCaseError::fail(format!("{source}: {e}")))?;
            let required = shape.types.len();
            let values: Vec<Option<KeyValue>> =
                values.into_iter().enumerate().map(|(i, v)| (i < required || present).then_some(v)).collect();
            let key = t.render(&values).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let captured = t.captures(&key).map_err(|e| TestCaseError::fail(format!("{source} on `{key}`: {e}")))?;
            prop_assert_eq!(t.render(&captured).ok(), Some(key.clone()));
            if unambiguous(&t, &values) {
                prop_assert_eq!(&captured[..], &values[..], "`{}` on `{}`", source, key);
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            #[test]
            fn render_then_capture((shape, values, present) in case(LITERAL_CHARS, VALUE_CHARS, any_type)) {
                check_round_trip(shape, values, present)?;
            }

            /// The same with separators everywhere, so values are mostly ambiguous.
            #[test]
            fn render_then_capture_ambiguous((shape, values, present) in case(&['#', '1'], &['#', 'a', '1'], text_or_int)) {
                check_round_trip(shape, values, present)?;
            }

            /// The search matches exactly the keys some split fits, on keys made of the
            /// literals' and values' characters (mutated renderings among them).
            #[test]
            fn matches_exactly_where_some_split_fits((shape, values, present) in case(&['#', 'a', 'A'], &['#', 'a', 'A', '1', '-'], any_type), at in any::<prop::sample::Index>(), c in prop::sample::select(&['#', 'a', 'A', '1', '-', 'b'][..]), edit in 0..3u8) {
                let t = KeyTemplate::parse(&shape.source()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let required = shape.types.len();
                let values: Vec<Option<KeyValue>> =
                    values.into_iter().enumerate().map(|(i, v)| (i < required || present).then_some(v)).collect();
                let Ok(key) = t.render(&values) else { return Ok(()) };
                let mut chars: Vec<char> = key.chars().collect();
                match edit {
                    0 if !chars.is_empty() => { chars.remove(at.index(chars.len())); }
                    1 => chars.insert(at.index(chars.len() + 1), c),
                    _ => {}
                }
                let key: String = chars.into_iter().collect();
                prop_assert_eq!(t.captures(&key).is_ok(), fits_some_split(&t, &key, 0, 0), "`{}` on `{}`", t.source(), key);
            }

            /// Any key: no panic, and an accepted key round-trips.
            #[test]
            fn captures_arbitrary_keys(shape in shape(LITERAL_CHARS, any_type), key in text(VALUE_CHARS, 0..=24), junk in ".{0,12}") {
                let t = KeyTemplate::parse(&shape.source()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                for key in [key.clone(), format!("{}{key}", t.literal_prefix()), format!("{}{junk}", t.literal_prefix()), junk.clone()] {
                    if let Ok(values) = t.captures(&key) {
                        prop_assert_eq!(values.len(), t.placeholders().len());
                        prop_assert_eq!(t.render(&values).ok(), Some(key.clone()));
                    }
                }
            }

            /// Rendered keys with a char inserted or removed: no panic, and a match round-trips.
            #[test]
            fn captures_mutated_keys((shape, values, _present) in case(LITERAL_CHARS, VALUE_CHARS, any_type), at in any::<prop::sample::Index>(), c in prop::sample::select(VALUE_CHARS), remove in any::<bool>()) {
                let t = KeyTemplate::parse(&shape.source()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let values: Vec<Option<KeyValue>> = values.into_iter().map(Some).collect();
                let key = t.render(&values).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let mut chars: Vec<char> = key.chars().collect();
                if remove && !chars.is_empty() {
                    chars.remove(at.index(chars.len()));
                } else {
                    chars.insert(at.index(chars.len() + 1), c);
                }
                let key: String = chars.into_iter().collect();
                if let Ok(values) = t.captures(&key) {
                    prop_assert_eq!(t.render(&values).ok(), Some(key.clone()));
                }
            }

            /// Any template text: no panic; a compiled template prints its source.
            #[test]
            fn parse_arbitrary_text(source in "[{}\\[\\]\\\\:#a-z_A-Z0-9()é ]{0,16}") {
                if let Ok(t) = KeyTemplate::parse(&source) {
                    prop_assert_eq!(t.to_string(), source);
                    prop_assert!(t.placeholders().iter().all(|p| is_placeholder_name(&p.name)));
                }
            }

            #[test]
            fn iso8601_ms_text_is_javascripts(ms in -62_167_219_200_000i64..=253_402_300_799_999) {
                let mut text = String::new();
                prop_assert_eq!(write_iso8601_ms(ms * 1000, &mut text), Ok(true));
                prop_assert_eq!(parse_iso8601_ms(&text), Ok(ms));
                let chrono = chrono::DateTime::from_timestamp_millis(ms).unwrap();
                prop_assert_eq!(text, chrono.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string());
            }

            #[test]
            fn folding_holds_after_folding(text in "\\PC{0,12}") {
                for case in [Case::Lower, Case::Upper] {
                    let folded = case.fold(&text);
                    prop_assert!(case.holds(&folded), "{:?} {:?}", case, folded);
                    prop_assert_eq!(case.holds(&text), folded == text);
                }
            }

            #[test]
            fn iso8601_text_round_trips(micros in any::<i64>()) {
                let mut text = String::new();
                if write_iso8601(micros, &mut text) == Ok(true) {
                    prop_assert_eq!(parse_iso8601(&text), Ok(micros));
                    let expected = chrono::DateTime::from_timestamp_micros(micros).unwrap();
                    prop_assert_eq!(chrono::DateTime::parse_from_rfc3339(&text).unwrap(), expected);
                }
            }
        }
    }
}
