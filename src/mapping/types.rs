//! The column type grammar of mapping files: `int64`, `decimal(p,s)`, `list<T>`, `set<T>`,
//! `struct<name: T, ...>`, `map<string, T>` and the rest, parsed into a [`DeclaredType`].
//!
//! A problem is located in the type text (characters) so the compiler can underline it, with a
//! did-you-mean for misspelt or borrowed names (`integer`, `varchar`). Formats and time zones of
//! timestamps are the compiler's business, not the grammar's. No I/O.

use super::error::MappingErrorKind;
use super::model::{DeclaredType, TimestampFormat, UTC};
use super::suggest::{backticked, closest};
use super::template::TimeUnit;

/// The most deeply nested type accepted (`list<list<...>>`).
const MAX_TYPE_DEPTH: usize = 32;

pub(super) const TYPE_NAMES: &[&str] = &[
    "int64",
    "decimal",
    "float64",
    "string",
    "bool",
    "binary",
    "timestamp",
    "date",
    "json",
    "list",
    "set",
    "struct",
    "map",
];

/// Names people reach for, and the type etl calls that.
const TYPE_ALIASES: &[(&str, &str)] = &[
    ("int", "int64"),
    ("integer", "int64"),
    ("long", "int64"),
    ("bigint", "int64"),
    ("i64", "int64"),
    ("int32", "int64"),
    ("float", "float64"),
    ("double", "float64"),
    ("f64", "float64"),
    ("real", "float64"),
    ("number", "decimal"),
    ("numeric", "decimal"),
    ("str", "string"),
    ("text", "string"),
    ("varchar", "string"),
    ("utf8", "string"),
    ("boolean", "bool"),
    ("bytes", "binary"),
    ("blob", "binary"),
    ("datetime", "timestamp"),
    ("array", "list"),
    ("object", "struct"),
    ("record", "struct"),
    ("dict", "map"),
];

/// Where in the type text a problem is (characters), and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TypeProblem {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) kind: TypeProblemKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TypeProblemKind {
    Unknown { name: String, suggestion: Option<String> },
    Syntax(String),
    Precision(u64),
    Scale { scale: u64, precision: u64 },
    SetElement(String),
    MapKey(String),
}

impl TypeProblem {
    pub(super) fn into_error(self, column: &str, text: &str) -> (MappingErrorKind, Option<String>) {
        let column = column.to_owned();
        let text = text.to_owned();
        match self.kind {
            TypeProblemKind::Unknown { name, suggestion } => {
                let hint = match &suggestion {
                    Some(s) => {
                        // The whole type with the name replaced, when that is a valid type.
                        let chars: Vec<char> = text.chars().collect();
                        let end = (self.start + self.len).min(chars.len());
                        let start = self.start.min(end);
                        let fixed: String = chars[..start]
                            .iter()
                            .chain(s.chars().collect::<Vec<_>>().iter())
                            .chain(&chars[end..])
                            .collect();
                        let shown = if parse_type(&fixed).is_ok() { fixed } else { s.clone() };
                        format!("did you mean `{shown}`?")
                    }
                    None => format!("types are {}", backticked(TYPE_NAMES)),
                };
                (MappingErrorKind::UnknownType { column, name, text }, Some(hint))
            }
            TypeProblemKind::Syntax(message) => (
                MappingErrorKind::TypeSyntax { column, text, message },
                Some("the type grammar is in mappings/README.md".into()),
            ),
            TypeProblemKind::Precision(precision) => (
                MappingErrorKind::DecimalPrecision { column, text, precision },
                Some("precision is 1 to 38; `decimal` without parameters keeps any number exactly, as text".into()),
            ),
            TypeProblemKind::Scale { scale, precision } => (
                MappingErrorKind::DecimalScale { column, text, precision, scale },
                Some("`decimal(p,s)` needs 0 ≤ s ≤ p: `s` digits of the `p` are after the point".into()),
            ),
            TypeProblemKind::SetElement(element) => (
                MappingErrorKind::SetElement { column, element },
                Some(
                    "DynamoDB sets are SS, NS and BS: `set<string>`, `set<int64>`, `set<decimal(p,s)>`, \
                     `set<decimal>` or `set<binary>`"
                        .into(),
                ),
            ),
            TypeProblemKind::MapKey(key) => (
                MappingErrorKind::MapKey { column, key },
                Some("DynamoDB map keys are always strings: `map<string, T>`".into()),
            ),
        }
    }
}

/// Parses the type grammar; timestamps get the placeholder format `iso8601`, UTC, until the
/// column's `format` is applied.
pub(super) fn parse_type(text: &str) -> Result<DeclaredType, TypeProblem> {
    let mut p = TypeParser { chars: text.chars().collect(), pos: 0, depth: 0 };
    let ty = p.ty()?;
    p.ws();
    if let Some(c) = p.peek() {
        return Err(p.syntax(p.pos, 1, format!("unexpected `{c}` after the type")));
    }
    Ok(ty)
}

struct TypeParser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl TypeParser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn syntax(&self, start: usize, len: usize, message: String) -> TypeProblem {
        TypeProblem { start, len, kind: TypeProblemKind::Syntax(message) }
    }

    /// The word or character at the current position, for messages.
    fn found_here(&self) -> String {
        let word: String = self.chars[self.pos.min(self.chars.len())..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        match self.peek() {
            _ if !word.is_empty() => format!("`{word}`"),
            Some(c) => format!("`{c}`"),
            None => "the end".into(),
        }
    }

    /// The length of the word or character at the current position.
    fn here_len(&self) -> usize {
        let rest = &self.chars[self.pos.min(self.chars.len())..];
        rest.iter().take_while(|c| c.is_alphanumeric() || **c == '_').count().max(1)
    }

    fn expect(&mut self, c: char) -> Result<(), TypeProblem> {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.syntax(self.pos, self.here_len(), format!("expected `{c}`, found {}", self.found_here())))
        }
    }

    fn word(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn number(&mut self) -> Result<(u64, usize), TypeProblem> {
        self.ws();
        let start = self.pos;
        let digits = self.word();
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            let len = digits.chars().count().max(1);
            let what = if digits.is_empty() { self.found_here() } else { format!("`{digits}`") };
            return Err(self.syntax(start, len, format!("expected a number, found {what}")));
        }
        // Anything past u64 is out of range anyway.
        Ok((digits.parse().unwrap_or(u64::MAX), start))
    }

    fn ty(&mut self) -> Result<DeclaredType, TypeProblem> {
        self.depth += 1;
        if self.depth > MAX_TYPE_DEPTH {
            return Err(self.syntax(self.pos, 1, format!("types nest deeper than {MAX_TYPE_DEPTH} levels")));
        }
        self.ws();
        let start = self.pos;
        let name = self.word();
        if name.is_empty() {
            return Err(self.syntax(start, 1, format!("expected a type, found {}", self.found_here())));
        }
        let simple = |t: DeclaredType| Some(t);
        let ty = match name.as_str() {
            "int64" => simple(DeclaredType::Int64),
            "float64" => simple(DeclaredType::Float64),
            "string" => simple(DeclaredType::Utf8),
            "bool" => simple(DeclaredType::Bool),
            "binary" => simple(DeclaredType::Binary),
            "json" => simple(DeclaredType::Json),
            "timestamp" => simple(DeclaredType::Timestamp {
                unit: TimeUnit::Microsecond,
                format: TimestampFormat::Iso8601,
                tz: UTC.into(),
            }),
            "date" => simple(DeclaredType::Date { format: None }),
            "decimal" => {
                self.ws();
                if self.peek() == Some('(') {
                    self.pos += 1;
                    let (precision, p_at) = self.number()?;
                    self.ws();
                    let (scale, s_at) = if self.peek() == Some(',') {
                        self.pos += 1;
                        self.number()?
                    } else {
                        (0, p_at)
                    };
                    self.expect(')')?;
                    if !(1..=38).contains(&precision) {
                        let len = self.chars[p_at..].iter().take_while(|c| c.is_ascii_digit()).count();
                        return Err(TypeProblem { start: p_at, len, kind: TypeProblemKind::Precision(precision) });
                    }
                    if scale > precision {
                        let len = self.chars[s_at..].iter().take_while(|c| c.is_ascii_digit()).count();
                        return Err(TypeProblem {
                            start: s_at,
                            len,
                            kind: TypeProblemKind::Scale { scale, precision },
                        });
                    }
                    // Both checked above: precision <= 38, scale <= precision.
                    return self.done(DeclaredType::Decimal { precision: precision as u8, scale: scale as i8 });
                }
                simple(DeclaredType::DecimalText)
            }
            "list" | "set" => {
                self.expect('<')?;
                self.ws();
                let el_at = self.pos;
                let el = self.ty()?;
                let el_len = self.pos - el_at;
                self.expect('>')?;
                if name == "set" {
                    if !matches!(
                        el,
                        DeclaredType::Utf8
                            | DeclaredType::Int64
                            | DeclaredType::Decimal { .. }
                            | DeclaredType::DecimalText
                            | DeclaredType::Binary
                    ) {
                        return Err(TypeProblem {
                            start: el_at,
                            len: el_len,
                            kind: TypeProblemKind::SetElement(el.label()),
                        });
                    }
                    return self.done(DeclaredType::Set(Box::new(el)));
                }
                return self.done(DeclaredType::List(Box::new(el)));
            }
            "map" => {
                self.expect('<')?;
                self.ws();
                let key_at = self.pos;
                let key = self.ty()?;
                let key_len = self.pos - key_at;
                if key != DeclaredType::Utf8 {
                    return Err(TypeProblem {
                        start: key_at,
                        len: key_len,
                        kind: TypeProblemKind::MapKey(key.label()),
                    });
                }
                self.expect(',')?;
                let value = self.ty()?;
                self.expect('>')?;
                return self.done(DeclaredType::Map(Box::new(value)));
            }
            "struct" => {
                self.expect('<')?;
                let mut fields: Vec<(String, DeclaredType)> = Vec::new();
                loop {
                    self.ws();
                    if self.peek() == Some('>') {
                        if fields.is_empty() {
                            return Err(self.syntax(self.pos, 1, "a struct needs at least one field".into()));
                        }
                        break;
                    }
                    let at = self.pos;
                    let field = self.field_name()?;
                    if fields.iter().any(|(f, _)| *f == field) {
                        let len = self.pos - at;
                        return Err(self.syntax(at, len, format!("field `{field}` appears twice")));
                    }
                    self.expect(':')?;
                    let ty = self.ty()?;
                    fields.push((field, ty));
                    self.ws();
                    match self.peek() {
                        Some(',') => self.pos += 1,
                        Some('>') => break,
                        _ => {
                            return Err(self.syntax(
                                self.pos,
                                1,
                                format!("expected `,` or `>`, found {}", self.found_here()),
                            ));
                        }
                    }
                }
                self.expect('>')?;
                return self.done(DeclaredType::Struct(fields));
            }
            _ => None,
        };
        let Some(ty) = ty else {
            let lower = name.to_ascii_lowercase();
            let suggestion = TYPE_ALIASES
                .iter()
                .find(|(a, _)| *a == lower)
                .map(|(_, t)| *t)
                .or_else(|| TYPE_NAMES.iter().copied().find(|t| *t == lower))
                .or_else(|| closest(&name, TYPE_NAMES))
                .map(str::to_owned);
            return Err(TypeProblem {
                start,
                len: self.pos - start,
                kind: TypeProblemKind::Unknown { name, suggestion },
            });
        };
        self.ws();
        if let Some(c @ ('(' | '<')) = self.peek() {
            return Err(self.syntax(self.pos, 1, format!("`{name}` takes no parameters, found `{c}`")));
        }
        self.done(ty)
    }

    fn done(&mut self, ty: DeclaredType) -> Result<DeclaredType, TypeProblem> {
        self.depth -= 1;
        Ok(ty)
    }

    /// A struct field name: a run of characters other than space, `:`, `,`, `<`, `>`, or any
    /// text in backticks.
    fn field_name(&mut self) -> Result<String, TypeProblem> {
        let start = self.pos;
        if self.peek() == Some('`') {
            self.pos += 1;
            let from = self.pos;
            while self.peek().is_some_and(|c| c != '`') {
                self.pos += 1;
            }
            if self.peek() != Some('`') {
                return Err(self.syntax(start, 1, "unclosed `` ` `` in a field name".into()));
            }
            let name: String = self.chars[from..self.pos].iter().collect();
            self.pos += 1;
            if name.is_empty() {
                return Err(self.syntax(start, 2, "empty field name".into()));
            }
            return Ok(name);
        }
        while self.peek().is_some_and(|c| !c.is_whitespace() && !matches!(c, ':' | ',' | '<' | '>' | '`')) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.syntax(start, 1, format!("expected a field name, found {}", self.found_here())));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_labels_round_trip() {
        for (text, label) in [
            ("int64", "int64"),
            ("decimal(12,2)", "decimal(12,2)"),
            ("decimal ( 38 )", "decimal(38,0)"),
            ("decimal", "decimal"),
            ("list< list<string> >", "list<list<string>>"),
            ("set<decimal(5,1)>", "set<decimal(5,1)>"),
            ("map<string,struct<a:int64,b:json>>", "map<string, struct<a: int64, b: json>>"),
            ("struct<`a b`: bool, c-d: binary>", "struct<`a b`: bool, c-d: binary>"),
            ("\tdate\n", "date"),
        ] {
            let ty = parse_type(text).unwrap();
            assert_eq!(ty.label(), label, "{text}");
            assert_eq!(parse_type(&ty.label()).unwrap(), ty, "{text}");
        }
    }

    #[test]
    fn type_depth_is_bounded() {
        let deep = format!("{}string{}", "list<".repeat(40), ">".repeat(40));
        let e = parse_type(&deep).unwrap_err();
        assert!(matches!(e.kind, TypeProblemKind::Syntax(ref m) if m.contains("deeper")), "{e:?}");
        let ok = format!("{}string{}", "list<".repeat(20), ">".repeat(20));
        parse_type(&ok).unwrap();
    }
}
