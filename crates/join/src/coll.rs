//! The few collectives a join needs, built on [`Communicator::all_to_all_v`] alone so that
//! every byte is counted and one primitive is all a backend must provide.

use crate::JoinError;
use deinsum_exec::{CommError, Communicator};

/// Sends `msgs[r]` to rank r (the message to oneself is handed over, not sent) and returns
/// the message from every rank, in rank order.
pub(crate) fn all_to_all<C: Communicator>(
    comm: &C,
    mut msgs: Vec<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, CommError> {
    let (me, p) = (comm.rank(), comm.size());
    if msgs.len() != p {
        return Err(CommError::Invalid(format!(
            "{} messages for {p} ranks",
            msgs.len()
        )));
    }
    let mut own = Some(std::mem::take(&mut msgs[me]));
    let counts: Vec<usize> = msgs.iter().map(Vec::len).collect();
    let send = msgs.concat();
    drop(msgs);
    let (recv, rc) = comm.all_to_all_v(&send, &counts)?;
    let mut out = Vec::with_capacity(p);
    let mut off = 0;
    for (r, &c) in rc.iter().enumerate() {
        if r == me {
            // Handed over, not copied (a shuffle keeps about 1/P of its rows).
            out.push(own.take().unwrap_or_default());
        } else {
            out.push(recv[off..off + c].to_vec());
        }
        off += c;
    }
    Ok(out)
}

/// Every rank's `mine`, in rank order (this rank's own not sent).
pub(crate) fn all_gather<C: Communicator>(
    comm: &C,
    mine: &[u8],
) -> Result<Vec<Vec<u8>>, CommError> {
    let p = comm.size();
    all_to_all(comm, vec![mine.to_vec(); p])
}

/// Element-wise sum over ranks of `v` (the same length everywhere), in place.
pub(crate) fn all_sum<C: Communicator>(comm: &C, v: &mut [u64]) -> Result<(), CommError> {
    if comm.size() == 1 {
        return Ok(());
    }
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = all_gather(comm, &bytes)?;
    v.fill(0);
    for part in &all {
        if part.len() != bytes.len() {
            return Err(CommError::Invalid("sums of different lengths".into()));
        }
        for (x, c) in v.iter_mut().zip(part.chunks_exact(8)) {
            *x += u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
    }
    Ok(())
}

/// `local`, or on every rank the first failing rank's error (collective), so that all ranks
/// stop together and report the same error.
pub(crate) fn agree<C: Communicator, T>(
    comm: &C,
    local: Result<T, JoinError>,
) -> Result<T, JoinError> {
    let text = match &local {
        // A failure always says something, so an empty message is success.
        Err(e) => format!("{e} "),
        Ok(_) => String::new(),
    };
    let all = all_gather(comm, text.as_bytes())?;
    if let Some(rank) = all.iter().position(|m| !m.is_empty()) {
        return Err(local.err().unwrap_or_else(|| JoinError::PeerInput {
            rank,
            message: String::from_utf8_lossy(&all[rank]).trim_end().to_string(),
        }));
    }
    local
}
