//! Which library runs the executor's GEMMs: faer (always built) or a system CBLAS (cargo
//! feature `blas`, or `blas-external` with the library on the link line), chosen per run by
//! [`crate::ExecOptions::gemm`] and per thread by [`enter`].
//!
//! The choice is a thread-local: the executor sets it on the rank's thread and on every worker
//! of the rank's pool at the start of a run, so that kernels (which take no options) read it
//! where they run.

use std::cell::Cell;
use std::fmt;
use std::str::FromStr;

/// The library that runs GEMMs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Gemm {
    /// faer's GEMM, built in.
    #[default]
    Faer,
    /// The system CBLAS (`cblas_sgemm`, `dgemm`, `cgemm`, `zgemm`): only in a build with the
    /// cargo feature `blas` (OpenBLAS) or `blas-external` (any CBLAS on the link line).
    Blas,
}

impl Gemm {
    /// Every library, in the order `--gemm` lists them.
    pub const ALL: [Gemm; 2] = [Gemm::Faer, Gemm::Blas];

    /// The name `--gemm` takes.
    pub fn name(self) -> &'static str {
        match self {
            Gemm::Faer => "faer",
            Gemm::Blas => "blas",
        }
    }

    /// Whether this build can run it (BLAS needs a cargo feature).
    pub fn available(self) -> bool {
        match self {
            Gemm::Faer => true,
            Gemm::Blas => cfg!(feature = "blas-external"),
        }
    }

    /// `Ok(self)` when [`Gemm::available`], else the error saying which feature is missing.
    pub fn check(self) -> Result<Gemm, GemmUnavailable> {
        if self.available() {
            Ok(self)
        } else {
            Err(GemmUnavailable(self))
        }
    }
}

impl fmt::Display for Gemm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A GEMM library name that is neither `faer` nor `blas`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown GEMM library `{0}` (expected faer or blas)")]
pub struct UnknownGemm(pub String);

impl FromStr for Gemm {
    type Err = UnknownGemm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Gemm::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| UnknownGemm(s.to_string()))
    }
}

/// A GEMM library this build does not contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "GEMM library `{0}` is not in this build: it was built without the cargo feature `blas` \
     (rebuild with `--features blas`, see docs/cluster.md)"
)]
pub struct GemmUnavailable(pub Gemm);

thread_local! {
    static CURRENT: Cell<Gemm> = const { Cell::new(Gemm::Faer) };
}

/// The library GEMMs called on this thread use (faer unless set by [`enter`]).
pub fn current() -> Gemm {
    CURRENT.get()
}

/// Makes `gemm` the calling thread's GEMM library until the guard drops (the previous one is
/// restored then); refused for a library this build does not contain.
pub fn enter(gemm: Gemm) -> Result<GemmGuard, GemmUnavailable> {
    let gemm = gemm.check()?;
    Ok(GemmGuard {
        prev: CURRENT.replace(gemm),
    })
}

/// Sets the GEMM library of the calling thread (a pool worker at the start of a run: every run
/// sets its own, so nothing needs restoring there).
pub(crate) fn set(gemm: Gemm) {
    CURRENT.set(gemm);
}

/// Products run through the system CBLAS in this process so far (one per `cblas_?gemm`
/// call): what shows that [`Gemm::Blas`] reached the kernels (always 0 without the feature).
pub fn blas_calls() -> u64 {
    BLAS_CALLS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The count behind [`blas_calls`] (a relaxed add per call: nothing orders on it).
pub(crate) static BLAS_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Restores the calling thread's previous GEMM library when dropped ([`enter`]).
#[derive(Debug)]
#[must_use = "the library is restored when the guard drops"]
pub struct GemmGuard {
    prev: Gemm,
}

impl Drop for GemmGuard {
    fn drop(&mut self) {
        CURRENT.set(self.prev);
    }
}

/// The element types a CBLAS multiplies. Without a BLAS feature it has no methods (the
/// dispatch never reaches it: [`enter`] refuses [`Gemm::Blas`]).
pub(crate) trait BlasGemm: Sized {
    /// `c (+)= a b` through `cblas_?gemm` on the views as they are stored; `false` (and `c`
    /// untouched) for a storage CBLAS cannot take (neither stride 1, or extents past `i32`).
    #[cfg(feature = "blas-external")]
    fn blas_gemm(
        c: faer::MatMut<'_, Self>,
        acc: faer::Accum,
        a: faer::MatRef<'_, Self>,
        b: faer::MatRef<'_, Self>,
    ) -> bool;
}

#[cfg(not(feature = "blas-external"))]
impl<T> BlasGemm for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_availability_follows_the_feature() {
        for g in Gemm::ALL {
            assert_eq!(g.name().parse::<Gemm>(), Ok(g));
            assert_eq!(g.to_string(), g.name());
        }
        assert_eq!("mkl".parse::<Gemm>(), Err(UnknownGemm("mkl".into())));
        assert!(Gemm::Faer.available());
        assert_eq!(Gemm::Blas.available(), cfg!(feature = "blas-external"));
        assert_eq!(current(), Gemm::Faer);
        match enter(Gemm::Blas) {
            Ok(guard) => {
                assert_eq!(current(), Gemm::Blas);
                drop(guard);
            }
            Err(e) => {
                assert!(e.to_string().contains("without the cargo feature `blas`"));
            }
        }
        assert_eq!(current(), Gemm::Faer);
    }
}
