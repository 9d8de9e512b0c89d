//! Checks made before a run allocates anything: does the plan's predicted memory fit this
//! node, and can this backend start that many ranks.
//!
//! The plan predicts every rank's peak (tensor data plus message buffers) exactly, so a run that
//! cannot fit is refused up front with the figures, instead of dying in the allocator halfway.

use deinsum_plan::{DType, Plan};

/// At most this many in-process ranks: each is a thread of this process.
pub(crate) const MAX_IN_PROCESS_RANKS: usize = 65_536;

/// Why a run is refused before it starts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PreflightError {
    /// The ranks on this node would need more memory than the node has available.
    #[error(
        "the run needs {} on this node ({ranks_on_node} rank(s) x up to {} each, \
         data and message buffers{}), but only {} is available{}",
        human(*needed_bytes),
        human(*per_rank_bytes),
        if *extra_bytes > 0 { format!(", plus {} for the serial check", human(*extra_bytes)) } else { String::new() },
        human(*available_bytes as u128),
        advice
    )]
    NotEnoughMemory {
        /// Bytes the ranks of this node need in all.
        needed_bytes: u128,
        /// Predicted peak of the busiest rank, in bytes.
        per_rank_bytes: u128,
        /// Ranks of the run on this node.
        ranks_on_node: usize,
        /// Bytes needed besides the ranks (the serial reference of `--check`).
        extra_bytes: u128,
        /// `MemAvailable` of this node, in bytes.
        available_bytes: u64,
        /// What would fit (a budget, more nodes), as a sentence.
        advice: String,
        /// A per-rank budget (words) whose ranks would fit this node, when one can.
        fit_mem: Option<u64>,
    },
    /// More in-process ranks than this process can start as threads.
    #[error(
        "{procs} in-process ranks requested, at most {max} can run as threads of one process; \
         run under MPI (--backend mpi) for more"
    )]
    TooManyRanks {
        /// Ranks asked for.
        procs: usize,
        /// The limit.
        max: usize,
    },
}

/// Bytes as a short human figure (powers of 1024).
pub(crate) fn human(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = bytes as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{x:.1} {}", UNITS[u])
    }
}

/// `MemAvailable` of this machine in bytes (Linux `/proc/meminfo`); `None` where unknown.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

/// The `MemAvailable:` line of a `/proc/meminfo` text, in bytes.
pub(crate) fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut parts = line.split_whitespace().skip(1);
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// The ranks of this MPI job that share this node, from the launcher's environment
/// (Open MPI's `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH/Hydra's `MPI_LOCALNRANKS`).
pub fn mpi_ranks_on_node() -> Option<usize> {
    ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
}

/// Refuses more in-process ranks than one process can run as threads.
pub fn check_in_process_ranks(procs: usize) -> Result<(), PreflightError> {
    if procs > MAX_IN_PROCESS_RANKS {
        return Err(PreflightError::TooManyRanks {
            procs,
            max: MAX_IN_PROCESS_RANKS,
        });
    }
    Ok(())
}

/// What a run needs on one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeDemand {
    /// The element type the run computes in: a word is [`DType::bytes`] bytes (a plan run as
    /// planned passes its [`Plan::dtype`](deinsum_plan::Plan::dtype)).
    pub dtype: DType,
    /// Ranks of the run on this node (all P for in-process runs).
    pub ranks_on_node: usize,
    /// Words needed besides the ranks' own (the serial check's whole tensors), in elements.
    pub extra_words: u128,
}

/// Below this many bytes a run is not checked against the node's memory before it starts
/// ([`needed_bytes`]): reading `/proc/meminfo` took 18 µs, half of a small einsum's call from
/// Python, and a node short of this much fails the run's own allocations with a typed error.
pub const UNCHECKED_BYTES: u128 = 64 << 20;

/// The bytes a run of `plan` needs on one node: the predicted peak per rank (with message
/// buffers) times the ranks on this node that hold data, plus `extra_words`.
pub fn needed_bytes(plan: &Plan, demand: NodeDemand) -> u128 {
    let wb = demand.dtype.bytes() as u128;
    let per_rank_words = plan.prediction.max_peak_memory_with_buffers as u128;
    // Ranks outside every grid hold nothing: at most `ranks_used` ranks carry data.
    let holders = demand.ranks_on_node.min(plan.ranks_used.max(1)) as u128;
    per_rank_words * wb * holders + demand.extra_words * wb
}

/// Compares the plan's predicted peak per rank (with message buffers) times the ranks on this
/// node, plus `extra_words`, against `available_bytes`.
pub fn check_memory(
    plan: &Plan,
    demand: NodeDemand,
    available_bytes: u64,
) -> Result<(), PreflightError> {
    let wb = demand.dtype.bytes() as u128;
    let per_rank_bytes = plan.prediction.max_peak_memory_with_buffers as u128 * wb;
    let extra_bytes = demand.extra_words * wb;
    let needed_bytes = needed_bytes(plan, demand);
    if needed_bytes <= available_bytes as u128 {
        return Ok(());
    }
    Err(PreflightError::NotEnoughMemory {
        needed_bytes,
        per_rank_bytes,
        ranks_on_node: demand.ranks_on_node,
        extra_bytes,
        available_bytes,
        advice: advice(plan, demand, available_bytes),
        fit_mem: fit_mem(plan, demand, available_bytes),
    })
}

/// The largest per-rank budget whose ranks fit `available_bytes`, when the tensors themselves
/// do (a budget cannot go below a rank's share of them).
fn fit_mem(plan: &Plan, demand: NodeDemand, available_bytes: u64) -> Option<u64> {
    let wb = demand.dtype.bytes() as u128;
    let avail = (available_bytes as u128).checked_sub(demand.extra_words * wb)?;
    let ranks = demand.ranks_on_node.min(plan.ranks_used.max(1)).max(1) as u128;
    let node_share = data_words(plan) * wb * ranks / (plan.procs.max(1) as u128);
    (node_share < avail).then(|| u64::try_from(avail / ranks / wb).unwrap_or(u64::MAX))
}

/// Words of the inputs and the output (what every plan holds somewhere).
fn data_words(plan: &Plan) -> u128 {
    plan.tensors
        .iter()
        .filter(|t| !matches!(t.kind, deinsum_plan::TensorKind::Intermediate))
        .map(|t| t.shape.iter().map(|&n| n as u128).product::<u128>())
        .sum()
}

/// What would fit: a smaller budget when the tensors themselves fit this node, otherwise the
/// number of such nodes the data needs.
fn advice(plan: &Plan, demand: NodeDemand, available_bytes: u64) -> String {
    let wb = demand.dtype.bytes() as u128;
    let extra = demand.extra_words * wb;
    let avail = (available_bytes as u128).saturating_sub(extra);
    let ranks = demand.ranks_on_node.min(plan.ranks_used.max(1)).max(1) as u128;
    let data_bytes = data_words(plan) * wb;
    let mut parts = Vec::new();
    if extra > 0 {
        parts.push("leave out --check (the serial reference holds whole tensors)".to_string());
    }
    if let Some(w) = fit_mem(plan, demand, available_bytes) {
        parts.push(format!(
            "a per-rank budget of at most --mem {w} words would fit this node"
        ));
    } else if avail > 0 {
        let nodes = data_bytes.div_ceil(avail);
        parts.push(format!(
            "the inputs and output alone take {}: spread them over at least {nodes} nodes like \
             this one (under MPI, --procs {} or more with {} rank(s) per node)",
            human(data_bytes),
            nodes.saturating_mul(ranks),
            ranks
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_in_kib() {
        let text = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
    }

    #[test]
    fn human_figures() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(40_000_000_000), "37.3 GiB");
    }

    #[test]
    fn in_process_limit() {
        assert!(check_in_process_ranks(MAX_IN_PROCESS_RANKS).is_ok());
        let e = check_in_process_ranks(usize::MAX).unwrap_err();
        assert!(e.to_string().contains("at most 65536"), "{e}");
    }
}
