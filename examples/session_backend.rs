//! Where the session examples (cp_als, tucker_hooi) run: `--backend local` (P threads of this
//! process) or `--backend mpi` (the MPI world, with `--features mpi` under `mpirun`).

use deinsum::{Session, SessionError};
use std::process::ExitCode;

/// Where an example's session runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// P ranks as threads of this process.
    Local,
    /// The MPI world (MPI initialized by the caller).
    Mpi,
}

/// A session on `backend` (`procs` in-process ranks, or the MPI world).
pub fn session(backend: Backend, procs: usize) -> Result<Session, SessionError> {
    match backend {
        Backend::Local => Session::local(procs),
        #[cfg(feature = "mpi")]
        Backend::Mpi => Session::mpi_world(),
        #[cfg(not(feature = "mpi"))]
        Backend::Mpi => Err(SessionError::Data(
            "--backend mpi needs a build with --features mpi".into(),
        )),
    }
}

/// What keeps MPI initialized while the example runs (finalized when dropped, at the end of
/// `main`).
#[cfg(feature = "mpi")]
pub type MpiGuard = Option<mpi::environment::Universe>;
/// Without the `mpi` feature there is no MPI to keep.
#[cfg(not(feature = "mpi"))]
pub struct MpiGuard;

/// Initializes MPI for `--backend mpi` (a panic on one rank then aborts the job instead of
/// leaving the others in a collective), and checks `--procs` against the world's size.
#[cfg(feature = "mpi")]
pub fn start_mpi(backend: Backend, procs: Option<usize>) -> Result<MpiGuard, ExitCode> {
    use mpi::traits::Communicator as _;
    if backend != Backend::Mpi {
        return Ok(None);
    }
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        mpi::topology::SimpleCommunicator::world().abort(101);
    }));
    let Some(universe) = mpi::initialize() else {
        eprintln!("error: MPI was already initialized");
        return Err(ExitCode::FAILURE);
    };
    let world = universe.world();
    let size = world.size() as usize;
    if let Some(p) = procs.filter(|&p| p != size) {
        if world.rank() == 0 {
            eprintln!("error: --procs {p} but the MPI world has {size} ranks");
        }
        return Err(ExitCode::from(2));
    }
    Ok(Some(universe))
}

/// Without the `mpi` feature, `--backend mpi` is refused.
#[cfg(not(feature = "mpi"))]
pub fn start_mpi(backend: Backend, _procs: Option<usize>) -> Result<MpiGuard, ExitCode> {
    if backend == Backend::Mpi {
        eprintln!("error: --backend mpi needs a build with --features mpi");
        return Err(ExitCode::from(2));
    }
    Ok(MpiGuard)
}
