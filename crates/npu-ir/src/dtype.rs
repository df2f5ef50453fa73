use serde::{Deserialize, Serialize};
use std::fmt;

/// Element types of the IR. `name()` is the torch_ir spelling (`bfloat16`), which is also
/// what [`DType::parse`] accepts, with or without a `torch.` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I16,
    I32,
    I64,
    U8,
    Bool,
}

impl DType {
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Accepts `float32`, `torch.float32` and torch's aliases (`float`, `half`, `long`, ...).
    pub fn parse(s: &str) -> Option<DType> {
        let s = s.strip_prefix("torch.").unwrap_or(s);
        let dt = match s {
            "float32" | "float" => DType::F32,
            "float64" | "double" => DType::F64,
            "float16" | "half" => DType::F16,
            "bfloat16" => DType::BF16,
            "int8" => DType::I8,
            "int16" | "short" => DType::I16,
            "int32" | "int" => DType::I32,
            "int64" | "long" => DType::I64,
            "uint8" => DType::U8,
            "bool" => DType::Bool,
            _ => return None,
        };
        Some(dt)
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prefixed_and_plain_names() {
        for dt in DType::ALL {
            assert_eq!(DType::parse(dt.name()), Some(dt));
            assert_eq!(DType::parse(&format!("torch.{}", dt.name())), Some(dt));
        }
        assert_eq!(DType::parse("complex64"), None);
        assert_eq!(DType::parse("torch.half"), Some(DType::F16));
    }
}
