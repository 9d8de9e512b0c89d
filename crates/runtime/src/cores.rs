//! Core counts: the cores this process may use, and the cores of its node.

use std::sync::OnceLock;

/// The cores this process may use (as the system reports them: affinity and cgroup quota), at
/// least 1. Read once: the query reads cgroup files, 2% of a 5-operand chain's run from
/// Python at 64 ranks when it was asked per run.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The cores of this node: the online CPUs (`/sys/devices/system/cpu/online`, which a
/// launcher's core binding does not shrink), else the cores this process may use ([`cores`]).
pub fn node_cores() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| cpu_list_len(s.trim()))
        .filter(|&n| n > 0)
        .unwrap_or_else(cores)
}

/// The number of CPUs in a Linux CPU list such as `0-3,6,8-9` (`None` when malformed).
fn cpu_list_len(list: &str) -> Option<usize> {
    list.split(',').try_fold(0usize, |n, part| {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let a = part.trim().parse::<usize>().ok()?;
                (a, a)
            }
        };
        (b >= a).then(|| n + b - a + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_counts_are_at_least_one() {
        assert!(cores() >= 1);
        assert_eq!(cores(), cores());
        assert!(node_cores() >= 1);
    }

    #[test]
    fn cpu_lists_count_their_cpus() {
        assert_eq!(cpu_list_len("0-1"), Some(2));
        assert_eq!(cpu_list_len("0-3,6,8-9"), Some(7));
        assert_eq!(cpu_list_len("5"), Some(1));
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len("x"), None);
    }
}
