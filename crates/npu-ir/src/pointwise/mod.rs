//! Pointwise ops, declared once. Each row of the table (`table.rs`) gives an op's short name,
//! the ATen names that parse to it (with its parameters' ATen defaults), its dtype rule, its
//! math once as a generic function over [`Real`] (f32 in compiled kernels and for f32/bf16/f16
//! values in the fallback, as PyTorch computes them; f64 for f64 values), its integer math
//! where PyTorch has one (i64, exact), its CUDA C expression and its WGSL expression. The CPU
//! kernels, the CPU fallback interpreter and the CUDA and WGSL code generators all read these
//! rows; adding an op is one row (plus a parse line when its ATen schema is not generic).
//!
//! NaN and Inf follow PyTorch: relu/maximum/minimum/clamp propagate NaN, fmax/fmin ignore it,
//! comparisons with NaN are false (`ne` true), `sign(NaN)` is 0 as ATen computes it.

mod parse;
pub(crate) mod real;
mod table;

pub use real::{clamp_nan, k, Real};
pub use table::{BinaryOp, TernaryOp, UnaryOp};

pub(crate) use parse::parse;

/// How an op's result dtype follows its operands (PyTorch's type promotion decides the
/// output dtype; the rule says how to compute it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A float result: integer operands are promoted to float (`sin`, `div`).
    Float,
    /// The operands' promoted dtype: integer results compute exactly in i64 (`add`, `floor`).
    Keep,
    /// A bool result, computed in the operands' promoted dtype (`lt`, `isnan`).
    Bool,
}

/// Integer math's result; the error says why PyTorch refuses it (division by zero, ...).
pub type IntResult = Result<i64, &'static str>;

/// A constant as CUDA C source: the exact f32 bits (covers inf and NaN).
pub fn cuda_f32(v: f64) -> String {
    format!("__int_as_float({})", (v as f32).to_bits() as i32)
}

/// A constant as WGSL source: the exact f32 bits (covers inf and NaN).
pub fn wgsl_f32(v: f64) -> String {
    format!("bitcast<f32>({}u)", (v as f32).to_bits())
}

/// `template` with `{name}` replaced by the operand expression of that name and `{param}` by
/// the parameter's literal (as `literal` writes it): the CUDA and WGSL columns' substitution.
pub fn fill(
    template: &str,
    operands: &[(&str, &str)],
    params: &[(&str, f64)],
    literal: fn(f64) -> String,
) -> String {
    let mut s = template.to_string();
    for (n, v) in operands {
        s = s.replace(&format!("{{{n}}}"), v);
    }
    for (n, v) in params {
        s = s.replace(&format!("{{{n}}}"), &literal(*v));
    }
    s
}

/// Declares a pointwise op enum from its rows; see the module docs for the columns.
macro_rules! pointwise_ops {
    (
        $(#[$emeta:meta])*
        $E:ident[$n:literal] {
            $(
                $(#[$doc:meta])*
                $v:ident $({ $($p:ident = $pd:expr),+ })? $name:literal [$($aten:literal),*] $rule:ident
                    |$($a:ident),+| $f:expr ;
                    $(int |$($ia:ident),+| $fi:expr ;)?
                    cuda $cuda:literal ;
                    wgsl $wgsl:literal ;
            )*
        }
    ) => {
        $(#[$emeta])*
        #[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
        pub enum $E {
            $( $(#[$doc])* $v $({ $($p: f64),+ })? ),*
        }

        impl $E {
            /// Number of operands.
            pub const ARITY: usize = $n;

            /// Every op, parameters at their ATen defaults.
            pub fn all() -> Vec<$E> {
                vec![$( $E::$v $({ $($p: $pd),+ })? ),*]
            }

            /// The short name (`relu`, `div_floor`).
            pub fn name(&self) -> &'static str {
                match self { $( $E::$v { .. } => $name ),* }
            }

            /// The ATen op names (no `aten.` prefix, no overload) that parse to this op.
            pub fn aten_names(&self) -> &'static [&'static str] {
                match self { $( $E::$v { .. } => &[$($aten),*] ),* }
            }

            /// The op named `aten` (see [`Self::aten_names`]), parameters at their defaults.
            pub fn from_aten(aten: &str) -> Option<$E> {
                Self::all().into_iter().find(|op| op.aten_names().contains(&aten))
            }

            /// The dtype rule.
            pub fn rule(&self) -> $crate::pointwise::Rule {
                match self { $( $E::$v { .. } => $crate::pointwise::Rule::$rule ),* }
            }

            /// Whether the op carries parameters besides its operands.
            pub fn has_params(&self) -> bool {
                match self { $( $E::$v { .. } => false $( || { $(let _ = stringify!($p);)+ true } )? ),* }
            }

            /// The same op with each parameter `p` replaced by `get(name of p, current value)`.
            pub fn with_params<E>(
                self,
                mut get: impl FnMut(&'static str, f64) -> Result<f64, E>,
            ) -> Result<$E, E> {
                #[allow(unused_variables, unused_mut)]
                let _ = &mut get;
                Ok(match self {
                    $( $E::$v $({ $($p),+ })? => $E::$v $({ $($p: get(stringify!($p), $p)?),+ })? ),*
                })
            }

            /// The math on one element in `F`; a bool result is 0 or 1.
            #[inline(always)]
            pub fn eval<F: $crate::pointwise::Real>(&self, args: [F; $n]) -> F {
                #[allow(unused_imports)]
                use $crate::pointwise::real::*;
                match *self {
                    $( $E::$v $({ $($p),+ })? => {
                        $( $( let $p: F = F::c($p); )+ )?
                        let [$($a),+] = args;
                        $f
                    } ),*
                }
            }

            /// `first[i] = op(first[i], rest[0][i], ..)` over a block; the dispatch is outside
            /// the loop, so simple rows vectorize.
            pub fn eval_block<F: $crate::pointwise::Real>(&self, first: &mut [F], rest: [&[F]; $n - 1]) {
                #[allow(unused_imports)]
                use $crate::pointwise::real::*;
                let len = first.len();
                // Slicing to `len` up front lets the loop drop its bounds checks.
                let rest: [&[F]; $n - 1] = rest.map(|r| &r[..len]);
                match *self {
                    $( $E::$v $({ $($p),+ })? => {
                        $( $( let $p: F = F::c($p); )+ )?
                        for i in 0..len {
                            let args: [F; $n] =
                                std::array::from_fn(|j| if j == 0 { first[i] } else { rest[j - 1][i] });
                            let [$($a),+] = args;
                            first[i] = $f;
                        }
                    } ),*
                }
            }

            /// The integer math (operands and result as i64, a bool result 0 or 1), or `None`
            /// when PyTorch has no integer form of the op.
            #[allow(unreachable_code)]
            pub fn eval_int(&self, args: [i64; $n]) -> Option<$crate::pointwise::IntResult> {
                #[allow(unused_imports)]
                use $crate::pointwise::real::*;
                let _ = args;
                match *self {
                    $( $E::$v $({ $($p),+ })? => {
                        // parameters are f64; integer rows convert them as ATen does
                        $( $( let _ = $p; )+ )?
                        $( let [$($ia),+] = args; return Some($fi); )?
                        None
                    } ),*
                }
            }

            /// Whether integer operands compute exactly (see [`Self::eval_int`]).
            pub fn has_int(&self) -> bool {
                self.eval_int([1; $n]).is_some()
            }

            /// The CUDA C expression (f32) over operand expressions `args` (names or
            /// literals, each evaluated once by the caller).
            pub fn cuda(&self, args: [&str; $n]) -> String {
                self.source(args, |row| row.0, $crate::pointwise::cuda_f32)
            }

            /// The WGSL expression (f32) over operand expressions `args`, as [`Self::cuda`].
            pub fn wgsl(&self, args: [&str; $n]) -> String {
                self.source(args, |row| row.1, $crate::pointwise::wgsl_f32)
            }

            /// One of the source columns, `(cuda, wgsl)`, filled in.
            fn source(
                &self,
                args: [&str; $n],
                column: fn((&'static str, &'static str)) -> &'static str,
                literal: fn(f64) -> String,
            ) -> String {
                match *self {
                    $( $E::$v $({ $($p),+ })? => {
                        let names: [&str; $n] = [$(stringify!($a)),+];
                        let operands: Vec<(&str, &str)> = names.into_iter().zip(args).collect();
                        let params: &[(&str, f64)] = &[$( $( (stringify!($p), $p) ),+ )?];
                        $crate::pointwise::fill(column(($cuda, $wgsl)), &operands, params, literal)
                    } ),*
                }
            }
        }
    };
}
pub(crate) use pointwise_ops;
