//! The IR JSON exactly as torch_ir writes it, before any resolution or typing.

use crate::IrError;
use serde::Deserialize;
use serde_json::{Map, Value as Json};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Spelling of non-finite floats after [`escape_non_finite`]: Python's `json` writes bare
/// `Infinity`, `-Infinity` and `NaN` tokens, which `serde_json` rejects.
pub(crate) const POS_INF: &str = "\u{0}Infinity";
pub(crate) const NEG_INF: &str = "\u{0}-Infinity";
pub(crate) const NAN: &str = "\u{0}NaN";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIr {
    #[serde(default)]
    pub model_name: String,
    #[serde(default)]
    pub pytorch_version: String,
    pub graph_inputs: Vec<RawTensor>,
    pub graph_outputs: Vec<RawTensor>,
    pub weights: Vec<RawTensor>,
    pub weight_name_mapping: BTreeMap<String, String>,
    pub nodes: Vec<RawNode>,
    #[serde(default)]
    pub constants: BTreeMap<String, RawConstant>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RawTensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub dtype: String,
    #[serde(default)]
    pub producer_node: Option<String>,
    #[serde(default)]
    pub producer_output_idx: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RawNode {
    pub name: String,
    pub op_type: String,
    pub inputs: Vec<RawTensor>,
    pub outputs: Vec<RawTensor>,
    #[serde(default)]
    pub attrs: Map<String, Json>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RawConstant {
    pub data: Json,
    pub dtype: String,
}

/// Parses IR text; malformed JSON and missing fields are reported with line and column.
pub fn parse_raw(text: &str) -> Result<RawIr, IrError> {
    // serde reads a struct from a JSON array too (fields by position), which would turn
    // `[...]` into a confusing "expected a string": the IR is an object, say so.
    let start = text.trim_start();
    if !start.starts_with('{') {
        let at = text.len() - start.len();
        let line = text[..at].matches('\n').count() + 1;
        let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
        let found = match start.chars().next() {
            None => "nothing".to_string(),
            Some('[') => "an array".to_string(),
            Some('"') => "a string".to_string(),
            Some(c) if c.is_ascii_digit() || c == '-' => "a number".to_string(),
            Some(c) => format!("{:?}", c),
        };
        return Err(IrError::Json {
            line,
            column,
            message: format!("expected an object at the top level, found {found}"),
        });
    }
    let text = escape_non_finite(text);
    serde_json::from_str(&text).map_err(|e| IrError::Json {
        line: e.line(),
        column: e.column(),
        message: unescape_markers(e.to_string().split(" at line").next().unwrap_or("")),
    })
}

/// Turns the non-finite markers back into `NaN`/`Infinity` in a serde message (a NaN where
/// a shape dim belongs reads "invalid type: NaN, expected i64", not a marker string).
fn unescape_markers(msg: &str) -> String {
    let mut out = msg.to_string();
    for (marker, token) in [(NEG_INF, "-Infinity"), (POS_INF, "Infinity"), (NAN, "NaN")] {
        let body = &marker[1..];
        for quoted in [
            format!("string {:?}", marker),
            format!("string \"{marker}\""),
            format!("{:?}", marker),
            marker.to_string(),
            format!("\\u{{0}}{body}"),
        ] {
            out = out.replace(&quoted, token);
        }
    }
    out
}

/// Rewrites bare `Infinity`, `-Infinity` and `NaN` tokens (outside strings) into marker
/// strings that [`crate::attrs`] turns back into floats. Text without them is borrowed.
fn escape_non_finite(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        let token = match b {
            b'"' => {
                in_string = true;
                None
            }
            b'I' if bytes[i..].starts_with(b"Infinity") => Some(("Infinity", POS_INF)),
            b'-' if bytes[i..].starts_with(b"-Infinity") => Some(("-Infinity", NEG_INF)),
            b'N' if bytes[i..].starts_with(b"NaN") => Some(("NaN", NAN)),
            _ => None,
        };
        if let Some((tok, marker)) = token {
            let s = out.get_or_insert_with(|| String::with_capacity(text.len() + 16));
            s.push_str(&text[copied..i]);
            s.push('"');
            s.push_str(&marker.replace('\u{0}', "\\u0000"));
            s.push('"');
            i += tok.len();
            copied = i;
            continue;
        }
        i += 1;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut s) => {
            s.push_str(&text[copied..]);
            Cow::Owned(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_tokens_become_markers_but_strings_are_untouched() {
        let t = r#"{"a": Infinity, "b": [-Infinity, NaN], "c": "NaN Infinity"}"#;
        let v: Json = serde_json::from_str(&escape_non_finite(t)).unwrap();
        assert_eq!(v["a"], POS_INF);
        assert_eq!(v["b"][0], NEG_INF);
        assert_eq!(v["b"][1], NAN);
        assert_eq!(v["c"], "NaN Infinity");
    }

    #[test]
    fn malformed_json_reports_position() {
        let err = parse_raw("{\n  \"graph_inputs\": [,]\n}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn top_level_array_and_nan_shapes_read_clearly() {
        let e = parse_raw("  [1, 2]").unwrap_err().to_string();
        assert!(
            e.contains("expected an object at the top level, found an array"),
            "{e}"
        );
        let e = parse_raw(
            r#"{"graph_inputs": [{"name": "x", "shape": [NaN], "dtype": "float32"}],
               "graph_outputs": [], "weights": [], "weight_name_mapping": {}, "nodes": []}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("invalid type: NaN, expected i64"), "{e}");
        assert!(!e.contains('\0') && !e.contains("u{0}"), "{e}");
    }

    #[test]
    fn missing_field_is_named() {
        let err =
            parse_raw(r#"{"graph_inputs": [], "graph_outputs": [], "weights": [], "nodes": []}"#)
                .unwrap_err();
        assert!(
            err.to_string()
                .contains("missing field `weight_name_mapping`"),
            "{err}"
        );
    }
}
