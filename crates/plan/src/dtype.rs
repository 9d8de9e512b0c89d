//! The element type of a plan's tensors as a value: what a word is ([`DType::bytes`]), how the
//! CLI, `.npy` files and NumPy name it. The executor maps each [`DType`] to its Rust type
//! (`deinsum_exec::with_dtype!`); every other layer asks this type, never a name or a size.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An element type deinsum computes in. `non_exhaustive`: code outside this crate cannot
/// assume these are all (dispatch through `deinsum_exec::with_dtype!` or the methods here,
/// which match every variant).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE single precision.
    F32,
    /// IEEE double precision (the default).
    #[default]
    F64,
    /// Complex of two single-precision parts (NumPy's `complex64`).
    C64,
    /// Complex of two double-precision parts (NumPy's `complex128`).
    C128,
}

impl DType {
    /// Every element type, in the order the CLI lists them.
    pub const ALL: [DType; 4] = [DType::F64, DType::F32, DType::C128, DType::C64];

    /// Bytes of one element (one word of the plan's figures).
    pub const fn bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// The short name the CLI and reports use: `f32`, `f64`, `c64`, `c128`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
        }
    }

    /// A few words on it, as the CLI's help lists the choices.
    pub const fn description(self) -> &'static str {
        match self {
            DType::F32 => "Single precision",
            DType::F64 => "Double precision",
            DType::C64 => "Complex, single-precision parts",
            DType::C128 => "Complex, double-precision parts",
        }
    }

    /// The little-endian `.npy` descriptor: `<f4`, `<f8`, `<c8`, `<c16`.
    pub const fn npy_descr(self) -> &'static str {
        match self {
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::C64 => "<c8",
            DType::C128 => "<c16",
        }
    }

    /// NumPy's name of the type: `float32`, `float64`, `complex64`, `complex128`.
    pub const fn numpy_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
            DType::C128 => "complex128",
        }
    }

    /// The largest relative error a check against a serial reference accepts in this
    /// precision.
    pub const fn tolerance(self) -> f64 {
        match self {
            DType::F32 | DType::C64 => 1e-4,
            DType::F64 | DType::C128 => 1e-10,
        }
    }

    /// True for the complex types ([`DType::C64`], [`DType::C128`]).
    pub const fn is_complex(self) -> bool {
        match self {
            DType::F32 | DType::F64 => false,
            DType::C64 | DType::C128 => true,
        }
    }

    /// The type of one part: itself for a real type, that of the real and imaginary parts
    /// for a complex one.
    pub const fn real(self) -> DType {
        match self {
            DType::F32 | DType::C64 => DType::F32,
            DType::F64 | DType::C128 => DType::F64,
        }
    }

    /// The complex type with parts of this one's precision (itself when complex).
    pub const fn complex(self) -> DType {
        match self {
            DType::F32 | DType::C64 => DType::C64,
            DType::F64 | DType::C128 => DType::C128,
        }
    }

    /// The double-precision type of the same kind (f64 or c128), in which serial references
    /// are computed.
    pub const fn wide(self) -> DType {
        match self {
            DType::F32 | DType::F64 => DType::F64,
            DType::C64 | DType::C128 => DType::C128,
        }
    }

    /// Real floating-point operations of one multiply-add: 2, and 8 for a complex one (four
    /// real products and four sums), which the time model divides by a GEMM rate in flop/s.
    pub const fn flops_per_madd(self) -> f64 {
        match self {
            DType::F32 | DType::F64 => 2.0,
            DType::C64 | DType::C128 => 8.0,
        }
    }

    /// The type NumPy calls `name` (`float32`, `complex128`, ...), if deinsum computes in it.
    pub fn from_numpy_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.numpy_name() == name)
    }

    /// True for [`DType::F64`], the type a plan without a `dtype` field is for (the plan JSON
    /// omits the field then, so f64 plans read and write as before the field existed).
    pub fn is_f64(&self) -> bool {
        *self == DType::F64
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not an element type deinsum computes in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown element type `{0}` (expected one of: f64, f32, c128, c64)")]
pub struct UnknownDType(pub String);

impl FromStr for DType {
    type Err = UnknownDType;

    /// Parses the CLI's spelling, `f64`, `f32`, `c128` or `c64` (case-insensitive).
    fn from_str(s: &str) -> Result<DType, UnknownDType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownDType(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists every variant through an exhaustive match, so a new one fails to compile here
    /// until it is added to [`DType::ALL`] (which the executor's dispatch is tested against).
    fn listed(d: DType) -> bool {
        match d {
            DType::F32 | DType::F64 | DType::C64 | DType::C128 => DType::ALL.contains(&d),
        }
    }

    #[test]
    fn all_lists_every_variant_once() {
        assert!(listed(DType::F32) && listed(DType::F64));
        assert!(listed(DType::C64) && listed(DType::C128));
        for (i, a) in DType::ALL.iter().enumerate() {
            assert!(!DType::ALL[i + 1..].contains(a), "{a} listed twice");
        }
    }

    #[test]
    fn parse_display_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.to_string().parse::<DType>(), Ok(d));
            assert_eq!(d.name().to_uppercase().parse::<DType>(), Ok(d));
        }
        assert_eq!("f16".parse::<DType>(), Err(UnknownDType("f16".to_string())));
        assert_eq!(DType::F64.to_string(), "f64");
        assert_eq!(DType::F32.to_string(), "f32");
    }

    #[test]
    fn sizes_and_numpy_names() {
        assert_eq!(DType::F32.bytes(), 4);
        assert_eq!(DType::F64.bytes(), 8);
        assert_eq!(DType::F32.npy_descr(), "<f4");
        assert_eq!(DType::F64.npy_descr(), "<f8");
        assert_eq!(DType::C64.bytes(), 8);
        assert_eq!(DType::C128.bytes(), 16);
        assert_eq!(DType::C128.npy_descr(), "<c16");
        for d in DType::ALL {
            // The descriptor's digits are the size, and NumPy's name counts the bits.
            assert_eq!(d.npy_descr()[2..].parse::<usize>(), Ok(d.bytes()));
            let kind = if d.is_complex() { "complex" } else { "float" };
            assert_eq!(d.numpy_name(), format!("{kind}{}", 8 * d.bytes()));
            assert_eq!(
                d.real().bytes() * if d.is_complex() { 2 } else { 1 },
                d.bytes()
            );
            assert!(d.complex().is_complex() && d.complex().real() == d.real());
            assert_eq!(DType::from_numpy_name(d.numpy_name()), Some(d));
        }
        assert_eq!(DType::from_numpy_name("int64"), None);
        assert_eq!(DType::default(), DType::F64);
    }

    #[test]
    fn serde_spells_it_as_the_cli() {
        for d in DType::ALL {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(s, format!("\"{}\"", d.name()));
            assert_eq!(serde_json::from_str::<DType>(&s).unwrap(), d);
        }
    }
}
