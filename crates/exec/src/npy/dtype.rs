//! Element types a `.npy` file may hold, and their conversion to the run's dtype as NumPy's
//! `astype` does (integers and bools to floats, either byte order, f8 to f4 and back, real to
//! complex; complex to a real type is refused, as NumPy's safe casting does).

use crate::scalar::Scalar;
use deinsum_plan::DType;

/// The kind of a `.npy` element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `b1`: one byte, zero is False.
    Bool,
    /// `i1`..`i8`.
    Int,
    /// `u1`..`u8`.
    Uint,
    /// `f4`, `f8`.
    Float,
    /// `c8`, `c16`: two floats, real part first.
    Complex,
}

/// A numeric `.npy` element type the reader converts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElemType {
    /// Bool, signed, unsigned or float.
    pub kind: Kind,
    /// Bytes per element.
    pub bytes: usize,
    /// Stored most significant byte first (`>`).
    pub big_endian: bool,
}

impl ElemType {
    /// Parses a NumPy `descr` such as `<f8`, `>i4`, `|b1`, `|u1`, `<c16`; `None` for any
    /// other type (half, long double, strings, structured).
    pub fn parse(descr: &str) -> Option<ElemType> {
        let b = descr.as_bytes();
        if b.len() != 3 && b.len() != 4 {
            return None;
        }
        let big_endian = match b[0] {
            b'<' | b'|' => false,
            b'>' => true,
            // '=' is the machine's order; every target deinsum builds for is little-endian.
            b'=' => cfg!(target_endian = "big"),
            _ => return None,
        };
        let bytes = std::str::from_utf8(&b[2..])
            .ok()
            .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))?
            .parse::<usize>()
            .ok()?;
        let kind = match (b[1], bytes) {
            (b'b', 1) | (b'?', 1) => Kind::Bool,
            (b'i', 1 | 2 | 4 | 8) => Kind::Int,
            (b'u', 1 | 2 | 4 | 8) => Kind::Uint,
            (b'f', 4 | 8) => Kind::Float,
            (b'c', 8 | 16) => Kind::Complex,
            _ => return None,
        };
        Some(ElemType {
            kind,
            bytes,
            big_endian,
        })
    }

    /// NumPy's name of the type: `int64`, `bool`, `float32`, with `big-endian` when it is.
    pub fn name(&self) -> String {
        let base = match self.kind {
            Kind::Bool => "bool".to_string(),
            Kind::Int => format!("int{}", 8 * self.bytes),
            Kind::Uint => format!("uint{}", 8 * self.bytes),
            Kind::Float => format!("float{}", 8 * self.bytes),
            Kind::Complex => format!("complex{}", 8 * self.bytes),
        };
        if self.big_endian && self.bytes > 1 {
            format!("big-endian {base}")
        } else {
            base
        }
    }

    /// The element type deinsum computes in that this is, in either byte order: the one
    /// whose `.npy` descriptor ([`DType::npy_descr`]) names the same kind and size.
    pub fn dtype(&self) -> Option<DType> {
        DType::ALL.into_iter().find(|d| {
            ElemType::parse(d.npy_descr())
                .is_some_and(|e| e.kind == self.kind && e.bytes == self.bytes)
        })
    }

    /// True when the bytes are `dtype`'s own, in this machine's order (no conversion needed).
    pub fn is_dtype(&self, dtype: DType) -> bool {
        self.dtype() == Some(dtype)
            && (self.big_endian == cfg!(target_endian = "big") || self.bytes == 1)
    }

    /// Whether values of this type convert to `dtype` as NumPy's safe casting allows for
    /// numbers: anything to a complex type, anything but complex to a real one (which would
    /// drop the imaginary part).
    pub fn converts_to(&self, dtype: DType) -> bool {
        self.kind != Kind::Complex || dtype.is_complex()
    }

    /// True when the bytes are `T`'s own (no conversion needed).
    pub fn is<T: Scalar>(&self) -> bool {
        self.is_dtype(T::DTYPE)
    }

    /// Appends the elements in `bytes` (a multiple of `self.bytes` long) to `out`, converted to
    /// `T` with one rounding, as `numpy.ndarray.astype` does.
    pub fn convert<T: Scalar>(&self, bytes: &[u8], out: &mut Vec<T>) {
        if self.is::<T>() {
            T::from_bytes(bytes, out);
            return;
        }
        if self.kind == Kind::Complex {
            return self.convert_complex(bytes, out);
        }
        out.reserve(bytes.len() / self.bytes);
        let mut word = [0u8; 8];
        for chunk in bytes.chunks_exact(self.bytes) {
            let w = &mut word[..self.bytes];
            w.copy_from_slice(chunk);
            if self.big_endian {
                w.reverse();
            }
            // Little-endian now; sign-extend signed integers to 8 bytes.
            let raw = u64::from_le_bytes({
                let mut full = [0u8; 8];
                full[..self.bytes].copy_from_slice(w);
                if self.kind == Kind::Int && w[self.bytes - 1] & 0x80 != 0 {
                    full[self.bytes..].fill(0xff);
                }
                full
            });
            out.push(self.value::<T>(raw));
        }
    }

    /// [`ElemType::convert`] of complex elements: each part a float of half the size, in the
    /// file's byte order, real part first.
    fn convert_complex<T: Scalar>(&self, bytes: &[u8], out: &mut Vec<T>) {
        let half = self.bytes / 2;
        let part = |c: &[u8]| -> f64 {
            let mut w = [0u8; 8];
            w[..half].copy_from_slice(c);
            if self.big_endian {
                w[..half].reverse();
            }
            if half == 4 {
                f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            } else {
                f64::from_le_bytes(w)
            }
        };
        out.reserve(bytes.len() / self.bytes);
        for chunk in bytes.chunks_exact(self.bytes) {
            out.push(T::from_parts(part(&chunk[..half]), part(&chunk[half..])));
        }
    }

    /// One element (its little-endian bits, widened) as `T`, rounded once: integers convert
    /// to `T` directly, floats through f64 (which holds an f4 exactly).
    fn value<T: Scalar>(&self, raw: u64) -> T {
        match self.kind {
            Kind::Bool => T::from_u64(u64::from(raw != 0)),
            Kind::Int => T::from_i64(raw as i64),
            Kind::Uint => T::from_u64(raw),
            Kind::Float if self.bytes == 4 => T::from_f64(f64::from(f32::from_bits(raw as u32))),
            Kind::Float => T::from_f64(f64::from_bits(raw)),
            // `convert` reads complex elements by parts, never as one word.
            Kind::Complex => unreachable!("complex elements are converted by convert_complex"),
        }
    }
}
