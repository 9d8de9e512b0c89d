//! The strategies and their predicted cost: bytes each rank sends and receives (exact, from
//! the inspector) and seconds on a machine model (`deinsum_plan::Machine`: α per message, β
//! per byte, the rank's memory bandwidth for packing and for the local join).

use crate::JoinError;
use serde::Serialize;

/// How rows meet their matches across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Both tables redistributed by a hash of the key (two all-to-alls), joined locally.
    Shuffle,
    /// The smaller table replicated on every rank; the other stays. A kept (outer) broadcast
    /// side ORs its match flags back to the rows' holders.
    Broadcast,
    /// Each rank's distinct left keys to every rank; the right rows with those keys come back.
    Semi,
    /// Keys and row numbers to the owners, which build the join index; the right rows'
    /// non-key columns move last, only for matched pairs (late materialization).
    Index,
    /// The semi-join with a Bloom filter of each rank's distinct left keys in place of the
    /// key list: the right rows whose key passes come back, and the false positives among
    /// them match nothing (a kept right side gets its match flags back, one bit a row).
    Bloom,
}

impl Strategy {
    /// Every strategy, in the order of [`crate::Inspection::predictions`].
    pub const ALL: [Strategy; 5] = [
        Strategy::Shuffle,
        Strategy::Broadcast,
        Strategy::Semi,
        Strategy::Index,
        Strategy::Bloom,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Shuffle => "shuffle",
            Strategy::Broadcast => "broadcast",
            Strategy::Semi => "semi",
            Strategy::Index => "index",
            Strategy::Bloom => "bloom",
        }
    }

    /// The strategy of a name; `Ok(None)` for `auto`.
    pub fn from_name(s: &str) -> Result<Option<Strategy>, JoinError> {
        Ok(Some(match s.to_ascii_lowercase().as_str() {
            "auto" => return Ok(None),
            "shuffle" | "hash" => Strategy::Shuffle,
            "broadcast" => Strategy::Broadcast,
            "semi" | "semi-join" | "semijoin" => Strategy::Semi,
            "index" | "join-index" => Strategy::Index,
            "bloom" | "semi-bloom" => Strategy::Bloom,
            _ => {
                return Err(JoinError::Invalid(format!(
                "--strategy must be one of auto, shuffle, broadcast, semi, index, bloom, got `{s}`"
            )))
            }
        }))
    }
}

/// A row read or written by the local hash join costs as much as copying this many bytes, and
/// a byte a rank sends or receives as much as copying [`PACK_TOUCH_BYTES`] (it is encoded row by
/// row, copied through the all-to-all and decoded into columns). Calibrated by
/// `crates/join/benches/grid.sh` (GRID_FIT=1: least squares of the measured seconds of every
/// strategy, less each case's mean, on the busiest rank's bytes and rows over its core share;
/// 10⁴ and 10⁵ rows, P = 2, 4, 8): 6.2e-7 s a row and 5.6e-8 s a byte, at a load average of 14
/// on 2 cores, i.e. about 7x slower than a quiet machine, so both are taken at a seventh at
/// 1e10 B/s (a row costs 11 moved bytes; the fit's per-call cost was nil).
const ROW_TOUCH_BYTES: f64 = 880.0;
/// See [`ROW_TOUCH_BYTES`].
const PACK_TOUCH_BYTES: f64 = 80.0;

/// One strategy's predicted figures.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// The strategy.
    pub strategy: Strategy,
    /// Bytes each rank sends to other ranks.
    pub sent: Vec<u64>,
    /// Bytes each rank receives from other ranks.
    pub received: Vec<u64>,
    /// Rows each rank's local work reads: the local join's, and the semi-joins' distinct-key
    /// passes, key-list inserts and filter tests.
    pub rows_in: Vec<u64>,
    /// Output rows each rank produces.
    pub rows_out: Vec<u64>,
    /// All-to-all calls.
    pub calls: usize,
    /// Predicted seconds of the busiest rank.
    pub seconds: f64,
    /// Whether `sent` and `received` are exact (else estimated by the sketch inspector).
    pub bytes_exact: bool,
    /// Whether `rows_in` and `rows_out` are exact (else estimated); `seconds` is exact on
    /// the model when both are.
    pub rows_exact: bool,
}

impl Prediction {
    /// The prediction of `strategy` from its figures, timed on `m` for `procs` ranks: per
    /// call (P-1)·α, the busiest rank's bytes at β, packing and unpacking them at the rank's
    /// memory bandwidth, and the local join's rows.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        strategy: Strategy,
        sent: Vec<u64>,
        received: Vec<u64>,
        rows_in: Vec<u64>,
        rows_out: Vec<u64>,
        calls: usize,
        m: &deinsum_plan::Machine,
        procs: usize,
    ) -> Prediction {
        let link = if procs > m.ranks_per_node.max(1) {
            &m.inter_node
        } else {
            &m.intra_node
        };
        let bw = m.rank_bandwidth(procs).max(1.0);
        let busiest = |f: &dyn Fn(usize) -> f64| (0..procs).map(f).fold(0.0f64, f64::max);
        let net = if procs > 1 {
            calls as f64 * (procs as f64 - 1.0) * link.alpha
                + busiest(&|r| sent[r].max(received[r]) as f64) * link.beta
        } else {
            0.0
        };
        let pack = busiest(&|r| (sent[r] + received[r]) as f64) * PACK_TOUCH_BYTES / bw;
        let local = busiest(&|r| (rows_in[r] + rows_out[r]) as f64) * ROW_TOUCH_BYTES / bw;
        Prediction {
            strategy,
            sent,
            received,
            rows_in,
            rows_out,
            calls,
            seconds: net + pack + local,
            bytes_exact: true,
            rows_exact: true,
        }
    }
}
