//! A small line editor for the SQL shell: cursor movement, editing keys and history recall
//! with the arrow keys, on a terminal in raw mode (through `termios`; restored on drop).
//!
//! [`Editor`] is the pure state machine (keys in, line out) and is tested on its own; the
//! terminal part only reads bytes, decodes keys and redraws one line on stderr.

use std::io::{Read, Write};

/// One key press.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Backspace,
    Delete,
    Left,
    Right,
    Up,
    Down,
    Home,
    End,
    /// Ctrl-U: delete to the start of the line.
    KillStart,
    /// Ctrl-K: delete to the end of the line.
    KillEnd,
    /// Ctrl-C: drop the line.
    Cancel,
    /// Ctrl-D.
    Eof,
    Ignore,
}

/// What a key did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Continue,
    Line(String),
    Cancelled,
    Eof,
}

/// Line state and history; knows nothing of terminals.
#[derive(Debug, Default)]
pub struct Editor {
    pub buf: Vec<char>,
    pub cursor: usize,
    history: Vec<String>,
    /// Position while browsing history (`history.len()` = the line being edited).
    browse: usize,
    /// The line being edited, kept while browsing.
    draft: Vec<char>,
}

impl Editor {
    pub fn new(history: Vec<String>) -> Editor {
        let browse = history.len();
        Editor { history, browse, ..Default::default() }
    }

    pub fn line(&self) -> String {
        self.buf.iter().collect()
    }

    fn set(&mut self, text: &[char]) {
        self.buf = text.to_vec();
        self.cursor = self.buf.len();
    }

    pub fn key(&mut self, k: Key) -> Outcome {
        match k {
            Key::Char(c) => {
                self.buf.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Enter => {
                let line = self.line();
                if !line.trim().is_empty() && self.history.last() != Some(&line) {
                    self.history.push(line.clone());
                }
                self.reset();
                return Outcome::Line(line);
            }
            Key::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.buf.remove(self.cursor);
            }
            Key::Delete if self.cursor < self.buf.len() => {
                self.buf.remove(self.cursor);
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.buf.len()),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.buf.len(),
            Key::KillStart => {
                self.buf.drain(..self.cursor);
                self.cursor = 0;
            }
            Key::KillEnd => self.buf.truncate(self.cursor),
            Key::Up if self.browse > 0 => {
                if self.browse == self.history.len() {
                    self.draft = self.buf.clone();
                }
                self.browse -= 1;
                let entry: Vec<char> = self.history[self.browse].chars().collect();
                self.set(&entry);
            }
            Key::Down if self.browse < self.history.len() => {
                self.browse += 1;
                let entry: Vec<char> = match self.history.get(self.browse) {
                    Some(h) => h.chars().collect(),
                    None => std::mem::take(&mut self.draft),
                };
                self.set(&entry);
            }
            Key::Cancel => {
                self.reset();
                return Outcome::Cancelled;
            }
            Key::Eof if self.buf.is_empty() => return Outcome::Eof,
            Key::Eof => return self.key(Key::Delete),
            _ => {}
        }
        Outcome::Continue
    }

    fn reset(&mut self) {
        self.buf.clear();
        self.cursor = 0;
        self.browse = self.history.len();
        self.draft.clear();
    }
}

/// Decodes one key from a byte stream (UTF-8 text, control keys, ANSI escape sequences).
pub fn read_key(input: &mut impl Read) -> std::io::Result<Option<Key>> {
    let mut b = [0u8; 1];
    let mut next = |input: &mut dyn Read| -> std::io::Result<Option<u8>> {
        Ok(if input.read(&mut b)? == 0 { None } else { Some(b[0]) })
    };
    let Some(first) = next(input)? else { return Ok(None) };
    Ok(Some(match first {
        b'\r' | b'\n' => Key::Enter,
        0x7f | 0x08 => Key::Backspace,
        0x01 => Key::Home,
        0x05 => Key::End,
        0x02 => Key::Left,
        0x06 => Key::Right,
        0x10 => Key::Up,
        0x0e => Key::Down,
        0x15 => Key::KillStart,
        0x0b => Key::KillEnd,
        0x03 => Key::Cancel,
        0x04 => Key::Eof,
        0x1b => match next(input)? {
            Some(b'[') | Some(b'O') => match next(input)? {
                Some(b'A') => Key::Up,
                Some(b'B') => Key::Down,
                Some(b'C') => Key::Right,
                Some(b'D') => Key::Left,
                Some(b'H') => Key::Home,
                Some(b'F') => Key::End,
                Some(d @ b'0'..=b'9') => {
                    // `ESC [ n ~`: 1/7 home, 4/8 end, 3 delete.
                    let mut n = u32::from(d - b'0');
                    loop {
                        match next(input)? {
                            Some(d @ b'0'..=b'9') => n = n.saturating_mul(10).saturating_add(u32::from(d - b'0')),
                            Some(b'~') | None => break,
                            Some(_) => return Ok(Some(Key::Ignore)),
                        }
                    }
                    match n {
                        1 | 7 => Key::Home,
                        4 | 8 => Key::End,
                        3 => Key::Delete,
                        _ => Key::Ignore,
                    }
                }
                _ => Key::Ignore,
            },
            _ => Key::Ignore,
        },
        c if c < 0x20 => Key::Ignore,
        c => {
            // A UTF-8 sequence: its length from the first byte.
            let len = match c {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf7 => 4,
                _ => 1,
            };
            let mut bytes = vec![c];
            for _ in 1..len {
                match next(input)? {
                    Some(x) => bytes.push(x),
                    None => break,
                }
            }
            match std::str::from_utf8(&bytes).ok().and_then(|s| s.chars().next()) {
                Some(ch) => Key::Char(ch),
                None => Key::Ignore,
            }
        }
    }))
}

/// The terminal without line buffering and echo until dropped.
///
/// The shell holds one for its whole session, so keys typed while a query runs reach the editor
/// as keys (in canonical mode the terminal would edit them itself); [`read_line`] additionally
/// turns signals off while it reads, so that Ctrl-C drops the line instead of interrupting.
/// Output processing stays on: `\n` still starts a new line.
pub struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// `None` when stdin is not a terminal or raw mode is refused.
    pub fn enter() -> Option<RawMode> {
        Self::with(|t| {
            t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::IEXTEN);
            t.c_iflag &= !(libc::IXON | libc::ICRNL);
        })
    }

    /// Also without signals (Ctrl-C, Ctrl-Z arrive as keys).
    fn enter_keys() -> Option<RawMode> {
        Self::with(|t| {
            t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::IEXTEN | libc::ISIG);
            t.c_iflag &= !(libc::IXON | libc::ICRNL);
        })
    }

    fn with(change: impl FnOnce(&mut libc::termios)) -> Option<RawMode> {
        // SAFETY: `tcgetattr`/`tcsetattr` on fd 0 with a zeroed struct they fill in.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return None;
            }
            let saved = t;
            change(&mut t);
            t.c_cc[libc::VMIN] = 1;
            t.c_cc[libc::VTIME] = 0;
            if libc::tcsetattr(0, libc::TCSADRAIN, &t) != 0 {
                return None;
            }
            Some(RawMode { saved })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enter`.
        unsafe {
            libc::tcsetattr(0, libc::TCSADRAIN, &self.saved);
        }
    }
}

/// Reads one line with editing; `None` at end of input (Ctrl-D on an empty line).
pub fn read_line(editor: &mut Editor, prompt: &str, input: &mut impl Read) -> std::io::Result<Option<String>> {
    let Some(_raw) = RawMode::enter_keys() else {
        // Not a terminal after all: plain line reading.
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        loop {
            if input.read(&mut b)? == 0 {
                return Ok((!line.is_empty()).then(|| String::from_utf8_lossy(&line).into_owned()));
            }
            if b[0] == b'\n' {
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            line.push(b[0]);
        }
    };
    let mut err = std::io::stderr();
    redraw(&mut err, prompt, editor)?;
    loop {
        let Some(k) = read_key(input)? else { return Ok(None) };
        match editor.key(k) {
            Outcome::Continue => redraw(&mut err, prompt, editor)?,
            Outcome::Line(l) => {
                write!(err, "\r\n")?;
                return Ok(Some(l));
            }
            Outcome::Cancelled => {
                write!(err, "^C\r\n")?;
                return Ok(Some(String::new()));
            }
            Outcome::Eof => {
                write!(err, "\r\n")?;
                return Ok(None);
            }
        }
    }
}

fn redraw(out: &mut impl Write, prompt: &str, e: &Editor) -> std::io::Result<()> {
    let back = e.buf.len() - e.cursor;
    write!(out, "\r{prompt}{}\x1b[K", e.line())?;
    if back > 0 {
        write!(out, "\x1b[{back}D")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<Key> {
        let mut r = bytes;
        let mut out = Vec::new();
        while let Some(k) = read_key(&mut r).unwrap() {
            out.push(k);
        }
        out
    }

    fn type_in(e: &mut Editor, bytes: &[u8]) -> Vec<Outcome> {
        keys(bytes).into_iter().map(|k| e.key(k)).filter(|o| *o != Outcome::Continue).collect()
    }

    #[test]
    fn decodes_keys() {
        assert_eq!(
            keys(b"a\x1b[A\x1b[B\x1b[C\x1b[D\x1b[3~\x1b[1~\x1b[4~\x7f\r"),
            [
                Key::Char('a'),
                Key::Up,
                Key::Down,
                Key::Right,
                Key::Left,
                Key::Delete,
                Key::Home,
                Key::End,
                Key::Backspace,
                Key::Enter
            ]
        );
        assert_eq!(keys("é€".as_bytes()), [Key::Char('é'), Key::Char('€')]);
        assert_eq!(keys(b"\x1b[99"), [Key::Ignore]);
    }

    #[test]
    fn edits_in_the_middle() {
        let mut e = Editor::new(vec![]);
        // "selct" <- <- "e" End ";" Enter
        assert_eq!(type_in(&mut e, b"selct\x1b[D\x1b[De\x1b[F;\r"), [Outcome::Line("select;".into())]);
        // Ctrl-U and Ctrl-K
        assert_eq!(type_in(&mut e, b"abc\x1b[D\x15x\r"), [Outcome::Line("xc".into())]);
        assert_eq!(type_in(&mut e, b"abc\x01\x0bz\r"), [Outcome::Line("z".into())]);
    }

    #[test]
    fn recalls_history_and_keeps_the_draft() {
        let mut e = Editor::new(vec!["select 1;".into()]);
        assert_eq!(type_in(&mut e, b"select 2;\r"), [Outcome::Line("select 2;".into())]);
        // Up twice reaches the oldest; down returns to the unfinished draft.
        assert_eq!(type_in(&mut e, b"sel\x1b[A\x1b[A\r"), [Outcome::Line("select 1;".into())]);
        assert_eq!(type_in(&mut e, b"draft\x1b[A\x1b[B\r"), [Outcome::Line("draft".into())]);
        assert_eq!(type_in(&mut e, b"x\x03"), [Outcome::Cancelled]);
        assert_eq!(type_in(&mut e, b"\x04"), [Outcome::Eof]);
    }
}
