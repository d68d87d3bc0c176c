//! Exact DynamoDB numbers: validation and the canonical decimal text.
//!
//! A number is kept as canonical decimal text (no exponent, no leading or trailing zeros, `-0`
//! is `0`) until a column type is chosen, so nothing is rounded on the way. This module never
//! converts to a binary float.

use std::borrow::Cow;

/// Most significant digits DynamoDB stores.
pub const MAX_DIGITS: usize = 38;
/// Exponent of the leading digit of the largest magnitude, 9.99...E+125.
pub const MAX_LEAD_EXP: i64 = 125;
/// Exponent of the leading digit of the smallest magnitude, 1E-130.
pub const MIN_LEAD_EXP: i64 = -130;

/// Why a number string is not a DynamoDB number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumberError {
    /// Not decimal number syntax at all.
    Syntax,
    /// More than 38 significant digits.
    TooPrecise { digits: usize },
    /// Magnitude above 9.99...E+125 or below 1E-130.
    OutOfRange,
}

/// A validated number in canonical decimal text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Number<'a> {
    text: Cow<'a, str>,
}

/// What schema inference needs to know about one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberStats {
    /// Digits before the decimal point (at least 1; `0.5` has 1).
    pub int_digits: u32,
    /// Digits after the decimal point.
    pub scale: u32,
    /// Integral and within `i64`.
    pub fits_i64: bool,
}

impl<'a> Number<'a> {
    /// Validates `raw` and brings it into canonical form, borrowing when it already is.
    pub fn parse(raw: &'a str) -> Result<Self, NumberError> {
        if let Some((sig, lead)) = canonical_facts(raw) {
            if sig > MAX_DIGITS {
                return Err(NumberError::TooPrecise { digits: sig });
            }
            // `0` has lead 0, within range.
            if !(MIN_LEAD_EXP..=MAX_LEAD_EXP).contains(&lead) {
                return Err(NumberError::OutOfRange);
            }
            return Ok(Number { text: Cow::Borrowed(raw) });
        }
        canonicalize(raw).map(|text| Number { text: Cow::Owned(text) })
    }

    /// Wraps text that is known to be canonical (it came out of [`Number::parse`]).
    pub fn from_canonical(text: &'a str) -> Self {
        debug_assert!(is_canonical(text), "not canonical: {text}");
        Number { text: Cow::Borrowed(text) }
    }

    /// Owns text that is known to be canonical (an integer's `to_string()`), without the copy
    /// `from_canonical(..).into_owned()` makes.
    pub fn from_canonical_owned(text: String) -> Number<'static> {
        debug_assert!(is_canonical(&text), "not canonical: {text}");
        Number { text: Cow::Owned(text) }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the text is borrowed (from the line it was read from), not owned.
    #[inline(always)]
    pub fn is_borrowed(&self) -> bool {
        matches!(self.text, Cow::Borrowed(_))
    }

    pub fn into_owned(self) -> Number<'static> {
        Number { text: Cow::Owned(self.text.into_owned()) }
    }

    pub fn is_negative(&self) -> bool {
        self.text.starts_with('-')
    }

    /// Exponent of the leading significant digit (`123.4` is 2, `0.05` is -2, `0` is 0).
    #[cfg(test)]
    fn lead_exp(&self) -> i64 {
        let t = self.text.trim_start_matches('-');
        match t.find('.') {
            None => t.len() as i64 - 1,
            Some(dot) if &t[..dot] != "0" => dot as i64 - 1,
            Some(dot) => {
                let frac = &t[dot + 1..];
                let zeros = frac.bytes().take_while(|&b| b == b'0').count();
                -(zeros as i64) - 1
            }
        }
    }

    pub fn stats(&self) -> NumberStats {
        let t = self.unsigned();
        match dot_at(t) {
            None => NumberStats {
                int_digits: t.len() as u32,
                scale: 0,
                // Eighteen digits always fit; nineteen may.
                fits_i64: t.len() <= 18 || (t.len() == 19 && self.text.parse::<i64>().is_ok()),
            },
            Some(dot) => NumberStats {
                // `0.5` has no integer digits: Decimal128(38, 38) holds it.
                int_digits: if is_zero(&t[..dot]) { 0 } else { dot as u32 },
                scale: (t.len() - dot - 1) as u32,
                fits_i64: false,
            },
        }
    }

    /// The value as `i64`, when it is integral and fits.
    pub fn to_i64(&self) -> Option<i64> {
        if dot_at(&self.text).is_some() { None } else { self.text.parse().ok() }
    }

    /// The text without its sign (canonical text has at most one `-`).
    fn unsigned(&self) -> &str {
        self.text.strip_prefix('-').unwrap_or(&self.text)
    }

    /// The value scaled by `10^scale` as `i128`, when that is exact and fits 38 digits.
    pub fn to_i128_scaled(&self, scale: u32) -> Option<i128> {
        let neg = self.is_negative();
        let t = self.unsigned();
        let (int, frac) = match dot_at(t) {
            None => (t, ""),
            Some(dot) => (&t[..dot], &t[dot + 1..]),
        };
        if frac.len() > scale as usize {
            return None;
        }
        let digits = int.len() + scale as usize;
        if digits > 38 + usize::from(is_zero(int)) {
            return None;
        }
        let mut v: i128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            v = v.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
        }
        for _ in frac.len()..scale as usize {
            v = v.checked_mul(10)?;
        }
        if v >= 10i128.pow(38) {
            return None;
        }
        Some(if neg { -v } else { v })
    }

    /// Significant digits, for DynamoDB's item-size rule.
    pub fn significant_digits(&self) -> usize {
        significant_digits_of_canonical(&self.text)
    }
}

/// Where the decimal point is: a byte loop, cheaper than a `char` search on short numbers.
fn dot_at(t: &str) -> Option<usize> {
    t.bytes().position(|c| c == b'.')
}

/// `t == "0"` without a call to `memcmp`.
fn is_zero(t: &str) -> bool {
    matches!(t.as_bytes(), [b'0'])
}

/// For canonical text (see [`is_canonical`]): its significant digits and the exponent of its
/// leading digit, found in one pass; `None` for any other text. The same answers as
/// [`is_canonical`], [`significant_digits_of_canonical`] and the leading exponent taken one by
/// one (`canonical_facts_match_the_separate_checks` compares them).
fn canonical_facts(s: &str) -> Option<(usize, i64)> {
    let b = s.as_bytes();
    let (neg, body) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    let int_len = body.iter().position(|c| !c.is_ascii_digit()).unwrap_or(body.len());
    let (&first, _) = body.split_first()?;
    if int_len == 0 || (int_len > 1 && first == b'0') {
        return None;
    }
    let int_zero = first == b'0';
    let lead_of_int = int_len as i64 - 1;
    let Some((&point, frac)) = body[int_len..].split_first() else {
        // An integer: `-0` is not canonical; trailing zeros are not significant.
        if neg && int_zero {
            return None;
        }
        let trailing = body.iter().rev().take_while(|&&c| c == b'0').count();
        return Some((if int_zero { 1 } else { int_len - trailing }, lead_of_int));
    };
    if point != b'.' || !frac.iter().all(u8::is_ascii_digit) || matches!(frac.last(), None | Some(b'0')) {
        return None;
    }
    if int_zero {
        let zeros = frac.iter().take_while(|&&c| c == b'0').count();
        Some((frac.len() - zeros, -(zeros as i64) - 1))
    } else {
        Some((int_len + frac.len(), lead_of_int))
    }
}

/// `-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?`, not `-0`, and not `0.x` with a zero integer part only
/// when that part is exactly `0`.
fn is_canonical(s: &str) -> bool {
    let b = s.as_bytes();
    let body = if let Some(rest) = b.strip_prefix(b"-") { rest } else { b };
    if body.is_empty() {
        return false;
    }
    let int_end = body.iter().position(|&c| c == b'.').unwrap_or(body.len());
    let int = &body[..int_end];
    if int.is_empty() || !int.iter().all(u8::is_ascii_digit) || (int.len() > 1 && int[0] == b'0') {
        return false;
    }
    if int_end < body.len() {
        let frac = &body[int_end + 1..];
        if frac.is_empty() || !frac.iter().all(u8::is_ascii_digit) || frac.last() == Some(&b'0') {
            return false;
        }
    }
    // `-0` is not canonical; `-0.5` is.
    !(b.len() != body.len() && body == b"0")
}

fn significant_digits_of_canonical(s: &str) -> usize {
    let t = s.trim_start_matches('-');
    if t == "0" {
        return 1;
    }
    let digits = t.bytes().filter(u8::is_ascii_digit);
    let total = t.bytes().filter(|b| b.is_ascii_digit()).count();
    let leading = digits.take_while(|&d| d == b'0').count();
    let trailing = if t.contains('.') { 0 } else { t.bytes().rev().take_while(|&d| d == b'0').count() };
    total - leading - trailing
}

fn canonicalize(raw: &str) -> Result<String, NumberError> {
    let b = raw.as_bytes();
    let mut i = 0;
    let mut neg = false;
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        neg = b[i] == b'-';
        i += 1;
    }
    let mut digits: Vec<u8> = Vec::with_capacity(b.len());
    let mut frac_len: i64 = 0;
    let mut any_digit = false;
    while i < b.len() && b[i].is_ascii_digit() {
        digits.push(b[i]);
        any_digit = true;
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            digits.push(b[i]);
            frac_len += 1;
            any_digit = true;
            i += 1;
        }
    }
    if !any_digit {
        return Err(NumberError::Syntax);
    }
    let mut exp: i64 = 0;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        let mut exp_neg = false;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            exp_neg = b[i] == b'-';
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            // Saturate: anything this large is out of range anyway.
            exp = (exp * 10 + i64::from(b[i] - b'0')).min(1_000_000_000);
            i += 1;
        }
        if i == start {
            return Err(NumberError::Syntax);
        }
        if exp_neg {
            exp = -exp;
        }
    }
    if i != b.len() {
        return Err(NumberError::Syntax);
    }
    let first = digits.iter().position(|&d| d != b'0');
    let Some(first) = first else { return Ok("0".to_owned()) };
    let last = digits.iter().rposition(|&d| d != b'0').unwrap_or(first);
    let sig = &digits[first..=last];
    // value = sig * 10^e
    let e = exp - frac_len + (digits.len() - 1 - last) as i64;
    if sig.len() > MAX_DIGITS {
        return Err(NumberError::TooPrecise { digits: sig.len() });
    }
    let lead = sig.len() as i64 - 1 + e;
    if !(MIN_LEAD_EXP..=MAX_LEAD_EXP).contains(&lead) {
        return Err(NumberError::OutOfRange);
    }
    let mut out = String::with_capacity(sig.len() + 140);
    if neg {
        out.push('-');
    }
    let sig = std::str::from_utf8(sig).map_err(|_| NumberError::Syntax)?;
    if e >= 0 {
        out.push_str(sig);
        out.extend(std::iter::repeat_n('0', e as usize));
    } else {
        let point = sig.len() as i64 + e;
        if point > 0 {
            out.push_str(&sig[..point as usize]);
            out.push('.');
            out.push_str(&sig[point as usize..]);
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point) as usize));
            out.push_str(sig);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        #[test]
        fn canonical_facts_match_the_separate_checks(
            s in "-?[0-9]{0,6}(\\.[0-9]{0,6})?|-?0\\.0{0,140}[1-9]|[-+.0-9eE]{0,8}|\\PC{0,6}"
        ) {
            let separate = is_canonical(&s)
                .then(|| (significant_digits_of_canonical(&s), Number { text: Cow::Borrowed(s.as_str()) }.lead_exp()));
            prop_assert_eq!(canonical_facts(&s), separate);
        }

        #[test]
        fn scaled_is_the_digits_padded_to_the_scale(
            s in "-?[0-9]{1,24}(\\.[0-9]{1,24})?|-?[0-9]{30,40}",
            // Every scale a `decimal(38, s)` column can have.
            scale in 0u32..=38,
        ) {
            let Ok(n) = Number::parse(&s) else { return Ok(()) };
            let t = n.as_str().trim_start_matches('-');
            let (int, frac) = t.split_once('.').unwrap_or((t, ""));
            // The reference: the digits with `scale - frac` zeros, parsed by `i128`'s own parser.
            let want = (frac.len() <= scale as usize)
                .then(|| format!("{int}{frac}{}", "0".repeat(scale as usize - frac.len())))
                .and_then(|d| d.parse::<i128>().ok())
                .filter(|v| *v < 10i128.pow(38))
                .map(|v| if n.is_negative() { -v } else { v });
            prop_assert_eq!(n.to_i128_scaled(scale), want, "{} at scale {}", s, scale);
        }

        #[test]
        fn fits_i64_is_what_i64_parses(n in any::<i128>(), shift in 0u32..64) {
            let text = (n >> shift).to_string();
            if let Ok(num) = Number::parse(&text) {
                prop_assert_eq!(num.stats().fits_i64, text.parse::<i64>().is_ok(), "{}", text);
                prop_assert_eq!(num.to_i64(), text.parse::<i64>().ok(), "{}", text);
            }
        }
    }

    fn canon(s: &str) -> Result<String, NumberError> {
        Number::parse(s).map(|n| n.as_str().to_owned())
    }

    #[test]
    fn canonical_forms() {
        for (input, want) in [
            ("0", "0"),
            ("-0", "0"),
            ("-0.000", "0"),
            ("01.0", "1"),
            ("1.50", "1.5"),
            ("-1E+5", "-100000"),
            ("1e3", "1000"),
            ("12.5e-1", "1.25"),
            ("+7", "7"),
            (".5", "0.5"),
            ("5.", "5"),
            ("100", "100"),
            ("-0.05", "-0.05"),
            ("123.456", "123.456"),
            ("0.0001200", "0.00012"),
        ] {
            assert_eq!(canon(input).as_deref(), Ok(want), "input {input}");
        }
    }

    #[test]
    fn extremes_are_exact() {
        let small = canon("1E-130").unwrap();
        assert_eq!(small.len(), 2 + 130);
        assert!(small.starts_with("0.000") && small.ends_with("0001"));
        let big = canon("9.9999999999999999999999999999999999999E+125").unwrap();
        assert_eq!(big.len(), 126);
        assert!(big.starts_with("99999999999999999999999999999999999999000"));
        let d38 = "12345678901234567890123456789012345678";
        assert_eq!(canon(d38).as_deref(), Ok(d38));
        assert_eq!(
            canon("-1234567890123456789012345678.9012345678").as_deref(),
            Ok("-1234567890123456789012345678.9012345678")
        );
    }

    #[test]
    fn rejects_what_dynamodb_never_stores() {
        assert_eq!(canon("123456789012345678901234567890123456789"), Err(NumberError::TooPrecise { digits: 39 }));
        assert_eq!(canon("1E+126"), Err(NumberError::OutOfRange));
        assert_eq!(canon("1E-131"), Err(NumberError::OutOfRange));
        assert_eq!(canon("1e999999999999999999999"), Err(NumberError::OutOfRange));
        for bad in ["", "-", "abc", "1.2.3", "1e", "1e+", " 1", "1 ", "0x10", "NaN", "Infinity", "--1", "1,5"] {
            assert_eq!(canon(bad), Err(NumberError::Syntax), "input {bad:?}");
        }
        // Trailing zeros do not count as significant digits.
        assert!(canon("1234567890123456789012345678901234567800000").is_ok());
    }

    #[test]
    fn stats_and_conversions() {
        let n = Number::parse("-12.50").unwrap();
        assert_eq!(n.stats(), NumberStats { int_digits: 2, scale: 1, fits_i64: false });
        assert_eq!(n.to_i128_scaled(2), Some(-1250));
        assert_eq!(n.to_i128_scaled(0), None);
        let big = Number::parse("9223372036854775808").unwrap();
        assert!(!big.stats().fits_i64);
        assert_eq!(Number::parse("9223372036854775807").unwrap().to_i64(), Some(i64::MAX));
        assert_eq!(Number::parse("-9223372036854775808").unwrap().to_i64(), Some(i64::MIN));
        assert_eq!(Number::parse("0.5").unwrap().stats(), NumberStats { int_digits: 0, scale: 1, fits_i64: false });
        let d38 = Number::parse("99999999999999999999999999999999999999").unwrap();
        assert_eq!(d38.to_i128_scaled(0), Some(99_999_999_999_999_999_999_999_999_999_999_999_999));
        assert_eq!(d38.to_i128_scaled(1), None);
        assert_eq!(Number::parse("0.0000001").unwrap().to_i128_scaled(7), Some(1));
        assert_eq!(Number::parse("1200").unwrap().significant_digits(), 2);
        assert_eq!(Number::parse("0.012").unwrap().significant_digits(), 2);
        assert_eq!(Number::parse("10.01").unwrap().significant_digits(), 4);
    }
}
