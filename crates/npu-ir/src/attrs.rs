//! Typed access to a node's loose JSON attrs, with ATen defaults and error context.

use crate::json::{NAN, NEG_INF, POS_INF};
use crate::{DType, IrError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

/// A Python scalar as export recorded it; int vs float is preserved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
            Scalar::Bool(b) => f64::from(u8::from(b)),
        }
    }
}

/// Reads a JSON number, or one of the non-finite markers, as f64.
pub(crate) fn json_f64(v: &Json) -> Option<f64> {
    match v {
        Json::Number(n) => n.as_f64(),
        Json::Bool(b) => Some(f64::from(u8::from(*b))),
        Json::String(s) if s == POS_INF => Some(f64::INFINITY),
        Json::String(s) if s == NEG_INF => Some(f64::NEG_INFINITY),
        Json::String(s) if s == NAN => Some(f64::NAN),
        _ => None,
    }
}

pub(crate) fn json_scalar(v: &Json) -> Option<Scalar> {
    match v {
        Json::Bool(b) => Some(Scalar::Bool(*b)),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Some(Scalar::Int(i)),
            None => n.as_f64().map(Scalar::Float),
        },
        other => json_f64(other).map(Scalar::Float),
    }
}

/// The attr npu's exporters add to a node: the names of its optional tensor arguments that
/// were `None` (torch_ir drops them without a trace; see [`Attrs::optional_tensors`]).
pub const ABSENT_TENSORS: &str = "_absent_tensors";

pub(crate) struct Attrs<'a> {
    pub node: &'a str,
    pub op_type: &'a str,
    pub map: &'a Map<String, Json>,
}

impl<'a> Attrs<'a> {
    pub fn err(&self, attr: &str, message: impl Into<String>) -> IrError {
        IrError::BadAttr {
            node: self.node.to_string(),
            op_type: self.op_type.to_string(),
            attr: attr.to_string(),
            message: message.into(),
        }
    }

    fn get(&self, key: &str) -> Option<&'a Json> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn scalar(&self, key: &str) -> Result<Option<Scalar>, IrError> {
        self.get(key)
            .map(|v| {
                json_scalar(v).ok_or_else(|| self.err(key, format!("expected a number, got {v}")))
            })
            .transpose()
    }

    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64, IrError> {
        Ok(self.scalar(key)?.map_or(default, Scalar::as_f64))
    }

    pub fn i64_or(&self, key: &str, default: i64) -> Result<i64, IrError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| self.err(key, format!("expected an integer, got {v}"))),
        }
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, IrError> {
        match self.get(key) {
            None => Ok(default),
            Some(Json::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(key, format!("expected a bool, got {v}"))),
        }
    }

    /// An `int[]` attr; a single int is accepted and repeated `n` times (ATen's `int[2]`).
    pub fn ints_or(&self, key: &str, n: usize, default: &[i64]) -> Result<Vec<i64>, IrError> {
        match self.get(key) {
            None => Ok(default.to_vec()),
            Some(Json::Number(x)) => {
                let x = x
                    .as_i64()
                    .ok_or_else(|| self.err(key, "expected integers"))?;
                Ok(vec![x; n.max(1)])
            }
            Some(Json::Array(items)) => {
                let v = items
                    .iter()
                    .map(|x| x.as_i64())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        self.err(
                            key,
                            format!(
                                "expected a list of integers, got {}",
                                Json::Array(items.clone())
                            ),
                        )
                    })?;
                if v.len() == 1 && n > 1 {
                    Ok(vec![v[0]; n])
                } else {
                    Ok(v)
                }
            }
            Some(v) => Err(self.err(key, format!("expected a list of integers, got {v}"))),
        }
    }

    pub fn ints(&self, key: &str) -> Result<Vec<i64>, IrError> {
        if !self.has(key) {
            return Err(self.err(key, "required attribute is missing"));
        }
        self.ints_or(key, 0, &[])
    }

    pub fn dtype(&self, key: &str) -> Result<Option<DType>, IrError> {
        match self.get(key) {
            None => Ok(None),
            Some(Json::String(s)) => DType::parse(s)
                .map(Some)
                .ok_or_else(|| self.err(key, format!("unknown dtype '{s}'"))),
            // ScalarType enum values as recorded by older exporters.
            Some(v) => Err(self.err(key, format!("expected a dtype string, got {v}"))),
        }
    }

    /// Which of the optional tensor arguments `slots` (schema order) are present, given that
    /// `n` of them are. torch_ir records only present tensors, so one of two optional
    /// tensors does not say which it is; npu's exporters add [`ABSENT_TENSORS`] (the names
    /// of the absent ones), and the graph parser infers it from weight names
    /// (`..bias`/`..weight`) where it can. `None` when neither decides.
    pub fn optional_tensors(&self, slots: &[&str], n: usize) -> Result<Option<Vec<bool>>, IrError> {
        if let Some(v) = self.get(ABSENT_TENSORS) {
            let absent: Vec<&str> = match v {
                Json::Array(items) => items
                    .iter()
                    .map(|x| x.as_str())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| self.err(ABSENT_TENSORS, "expected a list of names"))?,
                _ => return Err(self.err(ABSENT_TENSORS, "expected a list of names")),
            };
            let mask: Vec<bool> = slots.iter().map(|s| !absent.contains(s)).collect();
            let have = mask.iter().filter(|p| **p).count();
            if have != n {
                return Err(self.err(
                    ABSENT_TENSORS,
                    format!("{have} of the optional tensors {slots:?} are present, {n} given"),
                ));
            }
            return Ok(Some(mask));
        }
        if n > slots.len() {
            return Err(self.err(
                "inputs",
                format!("{n} optional tensors given, the schema has {}", slots.len()),
            ));
        }
        Ok((n == 0 || n == slots.len()).then(|| vec![n > 0; slots.len()]))
    }

    pub fn string(&self, key: &str) -> Result<Option<String>, IrError> {
        match self.get(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.err(key, format!("expected a string, got {v}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(text: &str) -> Map<String, Json> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn defaults_and_int_float_distinction() {
        let m = attrs(r#"{"other": 1, "eps": 1e-06, "end": 9223372036854775807, "k": [2]}"#);
        let a = Attrs {
            node: "n",
            op_type: "t",
            map: &m,
        };
        assert_eq!(a.scalar("other").unwrap(), Some(Scalar::Int(1)));
        assert_eq!(a.f64_or("eps", 0.0).unwrap(), 1e-6);
        assert_eq!(a.i64_or("end", 0).unwrap(), i64::MAX);
        assert_eq!(a.ints_or("k", 2, &[]).unwrap(), vec![2, 2]);
        assert_eq!(a.ints_or("missing", 2, &[0, 0]).unwrap(), vec![0, 0]);
        assert!(a
            .bool_or("other", false)
            .unwrap_err()
            .to_string()
            .contains("expected a bool"));
    }

    #[test]
    fn non_finite_markers_read_as_floats() {
        let m = Map::from_iter([("v".to_string(), Json::String(NEG_INF.to_string()))]);
        let a = Attrs {
            node: "n",
            op_type: "t",
            map: &m,
        };
        assert_eq!(a.f64_or("v", 0.0).unwrap(), f64::NEG_INFINITY);
    }
}
