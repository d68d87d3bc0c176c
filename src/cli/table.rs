//! Aligned text tables for people: the unwind summary, `\d` in the SQL shell, `etl export list`.
//!
//! One layout for all of them: a header, a dashed rule, then the rows, columns two spaces apart,
//! trailing spaces trimmed. Widths are terminal columns (`unicode-width`), so `注文` counts two
//! and `é` one, and columns stay aligned whatever the script. Renders text only: where it is
//! written is the printer's business, and query results keep Arrow's own table format.

use unicode_width::UnicodeWidthStr as _;

/// How a column's cells sit in its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table being built: a header, then rows of the same length.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names and alignments.
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            header: columns.iter().map(|(name, _)| (*name).to_owned()).collect(),
            align: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub fn row(&mut self, cells: impl IntoIterator<Item = String>) -> &mut Table {
        let mut row: Vec<String> = cells.into_iter().take(self.header.len()).collect();
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
        self
    }

    /// The table as lines, each ending with `\n`.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.header.len())
            .map(|i| {
                std::iter::once(&self.header[i])
                    .chain(self.rows.iter().map(|r| &r[i]))
                    .map(|c| c.width())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        self.line(&mut out, &self.header, &widths);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        push_trimmed(&mut out, &rule.join("  "));
        for row in &self.rows {
            self.line(&mut out, row, &widths);
        }
        out
    }

    fn line(&self, out: &mut String, cells: &[String], widths: &[usize]) {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let pad = " ".repeat(width.saturating_sub(cell.width()));
            match self.align[i] {
                Align::Left => {
                    text.push_str(cell);
                    text.push_str(&pad);
                }
                Align::Right => {
                    text.push_str(&pad);
                    text.push_str(cell);
                }
            }
        }
        push_trimmed(out, &text);
    }
}

fn push_trimmed(out: &mut String, line: &str) {
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Terminal columns as the test knows them: CJK ideographs and kana take two, the rest one.
    fn columns(s: &str) -> usize {
        s.chars().map(|c| if ('\u{3000}'..='\u{9fff}').contains(&c) { 2 } else { 1 }).sum()
    }

    #[test]
    fn aligns_left_and_right_under_a_rule() {
        let mut t = Table::new(&[("table", Align::Left), ("rows", Align::Right)]);
        t.row(["order_item".to_owned(), "1,715".to_owned()]);
        t.row(["user".to_owned(), "200".to_owned()]);
        assert_eq!(t.render(), "table        rows\n----------  -----\norder_item  1,715\nuser          200\n");
    }

    #[test]
    fn wide_characters_keep_columns_aligned() {
        let mut t = Table::new(&[("name", Align::Left), ("n", Align::Right), ("note", Align::Left)]);
        t.row(["注文".to_owned(), "1".to_owned(), "x".to_owned()]);
        t.row(["Zoë".to_owned(), "22".to_owned(), "完璧です".to_owned()]);
        t.row(["order_item".to_owned(), "333".to_owned(), String::new()]);
        let text = t.render();
        let sp = |n: usize| " ".repeat(n);
        let want = [
            format!("name{}n  note", sp(10)),
            "----------  ---  --------".to_owned(),
            format!("注文{}1  x", sp(10)),
            format!("Zoë{}22  完璧です", sp(10)),
            "order_item  333".to_owned(),
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), want);
        // On every line but the rule, the second column ends at terminal column 15.
        for line in text.lines().filter(|l| !l.starts_with('-')) {
            let upto = line.char_indices().map(|(i, c)| i + c.len_utf8()).find(|&i| columns(&line[..i]) == 15);
            assert!(upto.is_some_and(|i| !line[..i].ends_with(' ')), "column 2 must end at column 15: {line:?}");
        }
    }

    #[test]
    fn short_and_long_rows_are_fitted() {
        let mut t = Table::new(&[("a", Align::Left), ("b", Align::Left)]);
        t.row(["only".to_owned()]);
        t.row(["x".to_owned(), "y".to_owned(), "dropped".to_owned()]);
        assert_eq!(t.render(), "a     b\n----  -\nonly\nx     y\n");
    }
}
