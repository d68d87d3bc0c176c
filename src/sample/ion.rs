//! The sample's items as Amazon Ion text export lines, the way DynamoDB's `ExportFormat=ION`
//! writes them: `$ion_1_0 {Item:{…}}`, numbers as Ion decimals (`103.`, `6d2`, `-1.5`), binary
//! as blobs `{{…}}`, sets as lists annotated `$dynamodb_SS` / `$dynamodb_NS` / `$dynamodb_BS`,
//! field names as identifiers or quoted symbols (`'first name'`). Serialization only, written by
//! hand so that the sample stays an independent source of truth: it never uses `ion-rs` or the
//! decoder.

use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::item::{Av, ChangeLine, Item};

/// Appends one data-file line, `$ion_1_0 {Item:{…}}` and a newline.
pub(super) fn write_line(out: &mut String, item: &Item) {
    out.push_str("$ion_1_0 {Item:");
    write_struct(out, item.attrs());
    out.push_str("}\n");
}

/// Appends one change record line of an incremental export,
/// `$ion_1_0 {Metadata:{WriteTimestampMicros:…},Keys:{…},OldImage:{…},NewImage:{…}}` and a newline,
/// the write time an Ion decimal as DynamoDB's `N` is.
pub(super) fn write_change_line(out: &mut String, change: &ChangeLine<'_>) {
    out.push_str("$ion_1_0 {Metadata:{WriteTimestampMicros:");
    write_decimal(out, &change.write_micros.to_string());
    out.push_str("},Keys:");
    write_struct(out, change.keys.attrs());
    if let Some(old) = change.old {
        out.push_str(",OldImage:");
        write_struct(out, old.attrs());
    }
    if let Some(new) = change.new {
        out.push_str(",NewImage:");
        write_struct(out, new.attrs());
    }
    out.push_str("}\n");
}

fn write_struct(out: &mut String, attrs: &[(&'static str, Av)]) {
    out.push('{');
    for (i, (name, value)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_name(out, name);
        out.push(':');
        write_value(out, value);
    }
    out.push('}');
}

fn write_value(out: &mut String, v: &Av) {
    match v {
        Av::S(s) => write_string(out, s),
        Av::N(n) => write_decimal(out, n),
        Av::B(b) => write_blob(out, b),
        Av::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Av::Null => out.push_str("null"),
        Av::Ss(v) => write_list(out, "$dynamodb_SS::", v, |out, s| write_string(out, s)),
        Av::Ns(v) => write_list(out, "$dynamodb_NS::", v, |out, n| write_decimal(out, n)),
        Av::Bs(v) => write_list(out, "$dynamodb_BS::", v, |out, b| write_blob(out, b)),
        Av::L(v) => write_list(out, "", v, write_value),
        Av::M(v) => write_struct(out, v),
    }
}

fn write_list<T>(out: &mut String, annotation: &str, items: &[T], mut each: impl FnMut(&mut String, &T)) {
    out.push_str(annotation);
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        each(out, item);
    }
    out.push(']');
}

fn write_blob(out: &mut String, b: &[u8]) {
    out.push_str("{{");
    STANDARD.encode_string(b, out);
    out.push_str("}}");
}

/// A DynamoDB number as an Ion decimal: exponent forms with Ion's decimal exponent marker
/// (`123456000E-9` is `123456000d-9`; an `E` would make it an Ion float), fractions as they are
/// (`0.190` keeps its digits, as DynamoDB JSON does), integers with a trailing dot (`103.`), or
/// with their trailing zeros as an exponent (`6d2`).
fn write_decimal(out: &mut String, n: &str) {
    if let Some((mantissa, exponent)) = n.split_once(['E', 'e']) {
        let _ = write!(out, "{mantissa}d{exponent}");
        return;
    }
    if n.contains('.') {
        out.push_str(n);
        return;
    }
    let digits = n.trim_start_matches('-');
    let zeros = digits.len() - digits.trim_end_matches('0').len();
    if zeros == 0 || digits == "0" {
        out.push_str(n);
        out.push('.');
    } else {
        out.push_str(&n[..n.len() - zeros]);
        let _ = write!(out, "d{zeros}");
    }
}

/// A field name: a bare identifier when Ion reads it back as the same text, else a quoted
/// symbol.
fn write_name(out: &mut String, name: &str) {
    let bare = name.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !matches!(name, "null" | "true" | "false" | "nan");
    if bare {
        out.push_str(name);
    } else {
        write_quoted(out, name, '\'');
    }
}

fn write_string(out: &mut String, s: &str) {
    write_quoted(out, s, '"');
}

/// Text between `quote`s with Ion escapes for the quote, the backslash and control characters.
fn write_quoted(out: &mut String, s: &str, quote: char) {
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::item::{n, s};

    #[test]
    fn lines_look_like_dynamodb_ion() {
        let mut item = Item::default();
        item.put("PK", s("CUST#7"))
            .put("qty", n(3))
            .put("price", n(2000))
            .put("score", Av::N("-12.5".into()))
            .put("zero", n(0))
            .put("photo", Av::B(vec![0xde, 0xad, 0xbe, 0xef]))
            .put("vip", Av::Bool(true))
            .put("nick", Av::Null)
            .put("tags", Av::Ss(vec!["gold".into(), "it's".into()]))
            .put("lucky", Av::Ns(vec!["7".into(), "-0.5".into()]))
            .put("keys", Av::Bs(vec![vec![1, 2]]))
            .put("first name", Av::L(vec![s("a\"b\\c\n"), Av::M(vec![("null", s("x"))])]));
        let mut line = String::new();
        write_line(&mut line, &item);
        assert_eq!(
            line,
            concat!(
                r#"$ion_1_0 {Item:{PK:"CUST#7",qty:3.,price:2d3,score:-12.5,zero:0.,photo:{{3q2+7w==}},vip:true,"#,
                r#"nick:null,tags:$dynamodb_SS::["gold","it's"],lucky:$dynamodb_NS::[7.,-0.5],keys:$dynamodb_BS::[{{AQI=}}],"#,
                r#"'first name':["a\"b\\c\n",{'null':"x"}]}}"#,
                "\n"
            )
        );
    }

    #[test]
    fn spelled_numbers_stay_ion_decimals() {
        let cases = [("123456000E-9", "123456000d-9"), ("1.5e3", "1.5d3"), ("0.190", "0.190"), ("-20", "-2d1")];
        for (dynamodb, ion) in cases {
            let mut out = String::new();
            write_decimal(&mut out, dynamodb);
            assert_eq!(out, ion, "{dynamodb}");
        }
    }
}
