//! `aws dynamodb scan` output: one JSON document or several concatenated.
//!
//! The CLI prints `{"Items":[...],"Count":n,"ScannedCount":n,"ConsumedCapacity":...}`, plus
//! `NextToken` or `LastEvaluatedKey` when the output is only part of the table. This module finds
//! each item's text and position; items are decoded by [`super::json::decode_item_object`] so
//! that one bad item becomes a reject while its neighbours survive.

use super::json::Parser;

/// Deepest JSON nesting accepted around and inside scan items (32 DynamoDB levels need ~66).
const SKIP_DEPTH: usize = 256;

/// One item's JSON text inside a scan document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanItem<'a> {
    pub text: &'a str,
    /// Byte offset of the item in the whole input.
    pub offset: usize,
    /// 1-based line of the item's first byte.
    pub line: u64,
}

/// What a scan input held.
#[derive(Debug, Default)]
pub struct ScanOutput<'a> {
    pub items: Vec<ScanItem<'a>>,
    pub documents: usize,
    /// Sum of the documents' `Count` fields.
    pub count: u64,
    /// Set when a document carried `NextToken` or `LastEvaluatedKey`: the output is partial.
    pub partial_marker: Option<&'static str>,
}

/// Why a scan input could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("this is not JSON scan output (it starts with `{start}`)")]
    NotJson { start: String },
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Syntax { line: u64, column: u64, message: String },
    #[error(
        "unexpected top-level field `{field}` at line {line}; scan output has `Items`, `Count`, `ScannedCount`, `ConsumedCapacity`, `LastEvaluatedKey` and `NextToken`"
    )]
    UnexpectedField { field: String, line: u64 },
    #[error("scan document at line {line} has no `Items` field")]
    NoItems { line: u64 },
}

impl ScanError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ScanError::NotJson { .. } => Some(
                "run `aws dynamodb scan` with `--output json` (text, table and yaml output cannot be read back exactly), and without `--query`",
            ),
            ScanError::UnexpectedField { .. } | ScanError::NoItems { .. } => Some(
                "pass the unmodified output of `aws dynamodb scan --output json`, without `--query` or `--select COUNT`",
            ),
            ScanError::Syntax { .. } => Some("the file may be truncated; capture the scan output again"),
        }
    }
}

/// 1-based line and column of `offset` in `text`, counting from a known earlier position.
pub struct LineCounter<'a> {
    text: &'a [u8],
    pos: usize,
    line: u64,
    line_start: usize,
}

impl<'a> LineCounter<'a> {
    pub fn new(text: &'a str) -> Self {
        LineCounter { text: text.as_bytes(), pos: 0, line: 1, line_start: 0 }
    }

    /// Line and column of `offset`; offsets must not decrease between calls.
    pub fn at(&mut self, offset: usize) -> (u64, u64) {
        let offset = offset.min(self.text.len());
        if offset >= self.pos {
            for i in memchr::memchr_iter(b'\n', &self.text[self.pos..offset]) {
                self.line += 1;
                self.line_start = self.pos + i + 1;
            }
            self.pos = offset;
        }
        (self.line, (offset - self.line_start) as u64 + 1)
    }
}

/// Finds every item in one or more concatenated scan documents.
pub fn parse_scan_output(text: &str) -> Result<ScanOutput<'_>, ScanError> {
    let mut p = Parser::new(text);
    let mut lines = LineCounter::new(text);
    let mut out = ScanOutput::default();
    let syntax = |p: &Parser<'_>, lines: &mut LineCounter<'_>, message: String| {
        let (line, column) = lines.at(p.pos);
        ScanError::Syntax { line, column, message }
    };
    p.ws();
    if p.peek() != Some(b'{') {
        let start: String = text.trim_start().chars().take(20).collect();
        return Err(ScanError::NotJson { start });
    }
    while !p.at_end() {
        let doc_start = p.pos;
        p.expect(b'{').map_err(|e| syntax(&p, &mut lines, e.message))?;
        out.documents += 1;
        let mut saw_items = false;
        p.ws();
        if p.peek() == Some(b'}') {
            p.pos += 1;
        } else {
            loop {
                p.ws();
                let key_at = p.pos;
                let key = p.string().map_err(|e| syntax(&p, &mut lines, e.message))?;
                p.ws();
                p.expect(b':').map_err(|e| syntax(&p, &mut lines, e.message))?;
                p.ws();
                match &*key {
                    "Items" => {
                        saw_items = true;
                        p.expect(b'[').map_err(|e| syntax(&p, &mut lines, e.message))?;
                        p.ws();
                        if p.peek() == Some(b']') {
                            p.pos += 1;
                        } else {
                            loop {
                                p.ws();
                                let start = p.pos;
                                p.skip_value(SKIP_DEPTH).map_err(|e| syntax(&p, &mut lines, e.message))?;
                                let (line, _) = lines.at(start);
                                out.items.push(ScanItem { text: p.slice(start, p.pos), offset: start, line });
                                p.ws();
                                match p.peek() {
                                    Some(b',') => p.pos += 1,
                                    Some(b']') => {
                                        p.pos += 1;
                                        break;
                                    }
                                    _ => {
                                        return Err(syntax(&p, &mut lines, "expected `,` or `]` after an item".into()));
                                    }
                                }
                            }
                        }
                    }
                    "Count" => {
                        let n = p.plain_number().map_err(|e| syntax(&p, &mut lines, e.message))?;
                        out.count += n.parse::<u64>().unwrap_or(0);
                    }
                    "ScannedCount" | "ConsumedCapacity" => {
                        p.skip_value(SKIP_DEPTH).map_err(|e| syntax(&p, &mut lines, e.message))?;
                    }
                    "LastEvaluatedKey" | "NextToken" => {
                        out.partial_marker = Some(if &*key == "NextToken" { "NextToken" } else { "LastEvaluatedKey" });
                        p.skip_value(SKIP_DEPTH).map_err(|e| syntax(&p, &mut lines, e.message))?;
                    }
                    other => {
                        let (line, _) = lines.at(key_at);
                        return Err(ScanError::UnexpectedField { field: other.to_owned(), line });
                    }
                }
                p.ws();
                match p.peek() {
                    Some(b',') => p.pos += 1,
                    Some(b'}') => {
                        p.pos += 1;
                        break;
                    }
                    _ => return Err(syntax(&p, &mut lines, "expected `,` or `}`".into())),
                }
            }
        }
        if !saw_items {
            let (line, _) = lines.at(doc_start);
            return Err(ScanError::NoItems { line });
        }
        p.ws();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLI: &str = r#"{
    "Items": [
        {
            "PK": {
                "S": "A"
            }
        },
        {
            "PK": {
                "S": "B"
            }
        }
    ],
    "Count": 2,
    "ScannedCount": 2,
    "ConsumedCapacity": null
}
"#;

    #[test]
    fn finds_items_with_lines() {
        let out = parse_scan_output(CLI).unwrap();
        assert_eq!(out.items.len(), 2);
        assert_eq!(out.items[0].line, 3);
        assert_eq!(out.items[1].line, 8);
        assert_eq!(out.count, 2);
        assert!(out.partial_marker.is_none());
        assert!(out.items[1].text.starts_with('{') && out.items[1].text.ends_with('}'));
    }

    #[test]
    fn concatenated_documents_and_partial_markers() {
        let two = r#"{"Items":[{"a":{"S":"x"}}],"Count":1,"ScannedCount":1,"LastEvaluatedKey":{"a":{"S":"x"}}}
{"Items":[],"Count":0,"ScannedCount":0,"ConsumedCapacity":{"TableName":"T","CapacityUnits":0.5},"NextToken":"abc"}"#;
        let out = parse_scan_output(two).unwrap();
        assert_eq!(out.documents, 2);
        assert_eq!(out.items.len(), 1);
        assert_eq!(out.partial_marker, Some("NextToken"));
    }

    #[test]
    fn refuses_other_output_formats() {
        assert!(matches!(parse_scan_output("ITEMS\tx\n"), Err(ScanError::NotJson { .. })));
        assert!(matches!(parse_scan_output("Items:\n- PK:\n"), Err(ScanError::NotJson { .. })));
        assert!(matches!(parse_scan_output("-----------\n|  Scan  |\n"), Err(ScanError::NotJson { .. })));
        assert!(matches!(parse_scan_output("[{\"a\":1}]"), Err(ScanError::NotJson { .. })));
        assert!(matches!(parse_scan_output(r#"{"Count":3}"#), Err(ScanError::NoItems { line: 1 })));
        assert!(matches!(parse_scan_output(r#"{"Items":[],"Foo":1}"#), Err(ScanError::UnexpectedField { .. })));
        assert!(matches!(parse_scan_output("{\"Items\":[{\"a\":"), Err(ScanError::Syntax { line: 1, .. })));
    }
}
