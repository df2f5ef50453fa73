//! Streaming text out of generated tokens.
//!
//! [`TextStream`] turns tokens into text as they arrive without ever emitting half a
//! character: a byte-level token may hold the first bytes of a multi-byte UTF-8 character
//! whose rest comes with the next token, and decoding it alone gives U+FFFD. The stream
//! decodes a window of recent tokens twice (without and with the new ones) and emits the
//! difference only when it does not end in U+FFFD; [`TextStream::finish`] emits whatever is
//! held at the end (a replacement character included, if the model really produced invalid
//! bytes). The concatenated pieces equal the decode of all the tokens at once for decoders
//! whose output for a sequence only grows at the end (byte-level BPE, Metaspace).
//!
//! [`StopStrings`] cuts the text at the first occurrence of any stop string, holding back a
//! tail that could still become one, so that nothing past a stop string is ever emitted.

use crate::error::Result;
use crate::tokenizer::TextTokenizer;

const REPLACEMENT: char = '\u{FFFD}';

/// Incremental decoder over one sequence of generated tokens (special tokens skipped).
#[derive(Debug, Default, Clone)]
pub struct TextStream {
    ids: Vec<u32>,
    /// Start of the decode window: a token at which the text so far ended cleanly.
    prefix: usize,
    /// Tokens before this one have been emitted.
    read: usize,
}

impl TextStream {
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// Adds a token; returns the text it completes (often empty).
    pub fn push(&mut self, tok: &TextTokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tok.decode(&self.ids[self.prefix..self.read], true)?;
        let now = tok.decode(&self.ids[self.prefix..], true)?;
        if now.len() > before.len() && !now.ends_with(REPLACEMENT) {
            let piece = new_suffix(&before, &now);
            self.prefix = self.read;
            self.read = self.ids.len();
            return Ok(piece);
        }
        Ok(String::new())
    }

    /// The text still held back (an incomplete character at the very end, say).
    pub fn finish(&mut self, tok: &TextTokenizer) -> Result<String> {
        let before = tok.decode(&self.ids[self.prefix..self.read], true)?;
        let now = tok.decode(&self.ids[self.prefix..], true)?;
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(if now.len() > before.len() {
            new_suffix(&before, &now)
        } else {
            String::new()
        })
    }
}

/// `now` minus its prefix `before`. Should a decoder rewrite earlier text (which byte-level
/// and Metaspace decoders never do), what follows the common prefix.
fn new_suffix(before: &str, now: &str) -> String {
    if let Some(rest) = now.strip_prefix(before) {
        return rest.to_string();
    }
    let common = before
        .char_indices()
        .zip(now.chars())
        .find(|((_, a), b)| a != b)
        .map_or(before.len().min(now.len()), |((i, _), _)| i);
    now[common..].to_string()
}

/// Cuts generated text at the first stop string.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopStrings {
    /// `stops` must not contain the empty string (the caller validates options).
    pub fn new(stops: Vec<String>) -> StopStrings {
        StopStrings {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds generated text; returns what can be emitted now. After a stop string was seen,
    /// returns the text before it, and nothing ever after.
    pub fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        // Hold the longest tail that is the start of some stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let out = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        out
    }

    /// The held tail at the end of generation (no stop string completed).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut s = StopStrings::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            out += &s.push(p);
            if s.stopped() {
                break;
            }
        }
        out += &s.finish();
        (out, s.stopped())
    }

    #[test]
    fn stop_strings_are_cut_even_across_pieces() {
        assert_eq!(
            run(&["\n\n"], &["Hello", "\n", "\nworld"]),
            ("Hello".into(), true)
        );
        assert_eq!(run(&["END"], &["aE", "N", "x"]), ("aENx".into(), false));
        assert_eq!(run(&["END"], &["aE", "ND more"]), ("a".into(), true));
        // The earliest of several, wherever it sits in a piece.
        assert_eq!(run(&["xyz", "b"], &["a", "bcxyz"]), ("a".into(), true));
        // Multi-byte characters in stops and text.
        assert_eq!(
            run(&["世界"], &["你好", "世", "界!"]),
            ("你好".into(), true)
        );
        assert_eq!(run(&["世界"], &["你好", "世"]), ("你好世".into(), false));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn held_text_is_only_what_could_start_a_stop() {
        let mut s = StopStrings::new(vec!["<end>".into()]);
        assert_eq!(s.push("abc<e"), "abc");
        assert_eq!(s.push("x"), "<ex");
        assert_eq!(s.push("<"), "");
        assert_eq!(s.finish(), "<");
    }

    #[test]
    fn suffix_after_a_rewrite_is_what_follows_the_common_prefix() {
        assert_eq!(new_suffix("ab", "abc"), "c");
        assert_eq!(new_suffix("a b", "a.c"), ".c");
        assert_eq!(new_suffix("é", "éa"), "a");
    }
}
