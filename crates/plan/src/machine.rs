//! The machine model: what a rank's compute, memory and network cost, read from a JSON file
//! (docs/machine.md) or the built-in default, so that a plan can predict seconds.
//!
//! Every figure is in SI base units: flop/s, bytes/s, seconds, seconds per byte. A file is
//! checked field by field; a missing or bad field is a [`MachineError`] naming it by its path
//! (`network.intra_node.alpha`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Shape classes of a local contraction, each with its own measured GEMM rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateClass {
    /// A product whose rows, columns and summed length are all at least [`LARGE_SIDE`].
    Large,
    /// A product that sums an index and keeps rows and columns, but one side is shorter.
    Medium,
    /// No summed index or a single row or column (outer and Hadamard products, matrix-vector,
    /// Khatri-Rao steps): bound by memory, not arithmetic.
    Small,
    /// A narrow product (see [`NARROW_SIDE`]): never returned by [`RateClass::of`], priced
    /// at its own measured rate when the machine file has one (`gemm.narrow`, optional).
    Narrow,
}

/// Smallest side of a [`RateClass::Large`] product.
pub const LARGE_SIDE: u64 = 128;

/// Smallest side of a narrow product: a [`RateClass::Medium`] one whose sides are all at least
/// this long, in calls of at least [`NARROW_CALL`] multiply-adds. It runs between the two
/// classes (faer on a Zen 4 core: `36864 x 32 x 192` at 0.82 of the `512^3` rate, the fused
/// MTTKRP at rank 32 at 0.8-0.9, where the medium class's `16384 x 16 x 128` ran at 0.6-0.7),
/// so the model takes its own measured rate where the file has one, else the mean of the two
/// classes' rates ([`Machine::gemm_rate_of`]). (On an Intel host the rank-32 MTTKRP and chain
/// steps ran at 0.72-0.78 of that mean.)
pub const NARROW_SIDE: u64 = 32;

/// Fewest multiply-adds in one call of a narrow product.
pub const NARROW_CALL: u64 = 1 << 22;

impl RateClass {
    /// Every class a machine file must have, in file order.
    pub const ALL: [RateClass; 3] = [RateClass::Large, RateClass::Medium, RateClass::Small];
    /// The classes a machine file may have ([`RateClass::ALL`], then the optional narrow one).
    pub const MEASURED: [RateClass; 4] = [
        RateClass::Large,
        RateClass::Medium,
        RateClass::Small,
        RateClass::Narrow,
    ];

    /// The class's key in the machine file.
    pub fn key(self) -> &'static str {
        match self {
            RateClass::Large => "large",
            RateClass::Medium => "medium",
            RateClass::Small => "small",
            RateClass::Narrow => "narrow",
        }
    }

    /// The class of a (batched) product of `m x k` by `k x n` blocks.
    pub fn of(m: u64, n: u64, k: u64) -> RateClass {
        if k <= 1 || m <= 1 || n <= 1 {
            RateClass::Small
        } else if m.min(n).min(k) >= LARGE_SIDE {
            RateClass::Large
        } else {
            RateClass::Medium
        }
    }
}

/// One measured GEMM rate: `flops_per_thread` flop/s per thread when a rank computes with
/// `threads` threads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GemmRate {
    /// Threads of the rank that computed.
    pub threads: usize,
    /// Flop/s (2 per multiply-add) divided by `threads`.
    pub flops_per_thread: f64,
}

/// A network link: a message of `b` bytes costs `alpha + b * beta` seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Latency α, seconds per message.
    pub alpha: f64,
    /// Inverse bandwidth β, seconds per byte.
    pub beta: f64,
}

/// Stream-copy bandwidth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Bytes per second one thread copies (read plus write counted, as STREAM's copy does).
    pub per_thread: f64,
    /// Bytes per second all cores of a node copy together.
    pub per_node: f64,
}

/// A machine: cores and ranks per node, GEMM rates by shape class, memory bandwidth and the
/// network within and between nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// What the figures describe (and where they come from).
    pub name: String,
    /// Cores of one node.
    pub cores_per_node: usize,
    /// Ranks placed on one node (a job of P ranks uses ceil(P / ranks_per_node) nodes).
    pub ranks_per_node: usize,
    /// Bytes per word the figures were measured at (8: `deinsum calibrate` measures f64).
    /// The time model takes a plan's word size from its element type ([`crate::DType`]).
    pub word_bytes: usize,
    /// Measured rates per class, ascending in threads ([`RateClass::MEASURED`] order; the
    /// narrow class only where measured).
    pub gemm: Vec<(RateClass, Vec<GemmRate>)>,
    /// Stream-copy bandwidth.
    pub memory: Memory,
    /// Ranks on one node.
    pub intra_node: Link,
    /// Ranks on different nodes.
    pub inter_node: Link,
    /// Per class, the node's GEMM throughput when its ranks' threads outnumber its cores (each
    /// thread gets a time share of a core), over its throughput when they do not: 1 is no
    /// loss; below 1, time-sliced products evict each other's cached panels. The file's
    /// optional `oversubscribed` object (`{"medium": 0.8}`); a class it omits counts as 1.
    pub oversubscribed: Vec<(RateClass, f64)>,
    /// Per class, flop/s per thread of `cores_per_node` 1-thread ranks each computing its own
    /// product side by side (the file's optional `side_by_side` object): what a job of one
    /// 1-thread rank per core runs, which is not the rate of one product split over the same
    /// threads (independent products share no work and no barriers, but each streams its own
    /// operands through the shared cache: on a 2-core Zen 4 VM the medium product ran at 24.8
    /// GFLOP/s a thread split over two threads and 19.2 as two 1-thread ranks, the large one
    /// at 43.9 and 46.1). A class it omits takes the split rate.
    pub side_by_side: Vec<(RateClass, f64)>,
}

/// A machine file that cannot be used, naming the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MachineError {
    /// The file is not JSON.
    #[error("machine file is not JSON: {0}")]
    Json(String),
    /// A field is absent.
    #[error("machine file: field `{0}` is missing")]
    Missing(String),
    /// A field has the wrong type or value.
    #[error("machine file: field `{field}` {problem}")]
    Bad {
        /// The field's path, such as `network.intra_node.alpha`.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl Default for Machine {
    /// A generic 8-core node on a commodity network (docs/machine.md says where the figures
    /// come from); `deinsum calibrate` measures the real one.
    fn default() -> Self {
        let rate = |f: f64| {
            vec![GemmRate {
                threads: 1,
                flops_per_thread: f,
            }]
        };
        Machine {
            name: "built-in default (generic 8-core node; run `deinsum calibrate`)".into(),
            cores_per_node: 8,
            ranks_per_node: 8,
            word_bytes: 8,
            gemm: vec![
                (RateClass::Large, rate(2.0e10)),
                (RateClass::Medium, rate(8.0e9)),
                (RateClass::Small, rate(1.0e9)),
            ],
            memory: Memory {
                per_thread: 1.0e10,
                per_node: 4.0e10,
            },
            intra_node: Link {
                alpha: 1.0e-6,
                beta: 1.0 / 5.0e9,
            },
            inter_node: Link {
                alpha: 2.0e-6,
                beta: 1.0 / 1.0e10,
            },
            oversubscribed: Vec::new(),
            side_by_side: Vec::new(),
        }
    }
}

/// A positive finite number at `path`.
fn positive(v: &Value, path: &str) -> Result<f64, MachineError> {
    let x = field(v, path)?;
    match x.as_f64() {
        Some(f) if f.is_finite() && f > 0.0 => Ok(f),
        Some(f) => Err(MachineError::Bad {
            field: path.into(),
            problem: format!("must be a positive finite number, got {f}"),
        }),
        None => Err(MachineError::Bad {
            field: path.into(),
            problem: format!("must be a number, got {x}"),
        }),
    }
}

/// A whole number >= 1 at `path`.
fn count(v: &Value, path: &str) -> Result<usize, MachineError> {
    let x = field(v, path)?;
    match x.as_u64() {
        Some(n) if n >= 1 => Ok(n as usize),
        _ => Err(MachineError::Bad {
            field: path.into(),
            problem: format!("must be a whole number >= 1, got {x}"),
        }),
    }
}

/// The value at the dotted `path` below `v` (the last component is looked up in `v`).
fn field<'a>(v: &'a Value, path: &str) -> Result<&'a Value, MachineError> {
    let key = path.rsplit('.').next().unwrap_or(path);
    let key = key.split('[').next().unwrap_or(key);
    v.get(key).ok_or_else(|| MachineError::Missing(path.into()))
}

/// An object at `path`.
fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Value, MachineError> {
    let x = field(v, path)?;
    if x.is_object() {
        Ok(x)
    } else {
        Err(MachineError::Bad {
            field: path.into(),
            problem: format!("must be an object, got {x}"),
        })
    }
}

fn link(v: &Value, path: &str) -> Result<Link, MachineError> {
    let l = object(v, path)?;
    Ok(Link {
        alpha: positive(l, &format!("{path}.alpha"))?,
        beta: positive(l, &format!("{path}.beta"))?,
    })
}

/// The rates of one class: a nonempty list of `{threads, flops_per_thread}`, sorted here.
fn rates(g: &Value, class: RateClass) -> Result<Vec<GemmRate>, MachineError> {
    let path = format!("gemm.{}", class.key());
    let list = field(g, &path)?
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| MachineError::Bad {
            field: path.clone(),
            problem: "must be a nonempty list of {\"threads\", \"flops_per_thread\"}".into(),
        })?;
    let mut out = Vec::with_capacity(list.len());
    for (i, r) in list.iter().enumerate() {
        let p = format!("{path}[{i}]");
        if !r.is_object() {
            return Err(MachineError::Bad {
                field: p,
                problem: format!("must be an object, got {r}"),
            });
        }
        out.push(GemmRate {
            threads: count(r, &format!("{p}.threads"))?,
            flops_per_thread: positive(r, &format!("{p}.flops_per_thread"))?,
        });
    }
    out.sort_by_key(|r| r.threads);
    if out.windows(2).any(|w| w[0].threads == w[1].threads) {
        return Err(MachineError::Bad {
            field: path,
            problem: "lists one thread count twice".into(),
        });
    }
    Ok(out)
}

/// The optional per-class object `key` (`{"medium": 0.8}`): positive numbers, classes left
/// out absent from the list.
fn per_class(v: &Value, key: &str) -> Result<Vec<(RateClass, f64)>, MachineError> {
    let mut out = Vec::new();
    if v.get(key).is_some() {
        let o = object(v, key)?;
        for c in RateClass::MEASURED {
            if o.get(c.key()).is_some() {
                out.push((c, positive(o, &format!("{key}.{}", c.key()))?));
            }
        }
    }
    Ok(out)
}

impl Machine {
    /// Whether a transfer can progress while every rank of a `procs`-rank job computes: a
    /// node keeps a core no rank uses (ranks placed per node below its cores), or the job
    /// spans nodes and the network moves the words. Within a full node a transfer is a copy
    /// some core must make, so overlapping it only time-slices that core (measured here:
    /// `ij,jk->ik` at 2048 on 2 ranks of a 2-core node, 188 ms overlapped against 158 ms not).
    pub fn copies_hide(&self, procs: usize) -> bool {
        let per_node = self.ranks_per_node.max(1);
        procs > per_node || procs.min(per_node) < self.cores_per_node
    }

    /// This machine with `ranks` ranks (at least 1) on each node, the name saying so: a
    /// machine file made to place a run's ranks as its backend places them.
    pub fn with_ranks_per_node(mut self, ranks: usize) -> Machine {
        self.ranks_per_node = ranks.max(1);
        self.name = format!("{}, {} rank(s) per node", self.name, self.ranks_per_node);
        self
    }

    /// This machine as one node of `cores` cores holding all `ranks` ranks of a job (both at
    /// least 1), the name saying so: the built-in default made to describe the host a run is
    /// on.
    pub fn on_host(mut self, cores: usize, ranks: usize) -> Machine {
        self.cores_per_node = cores.max(1);
        self.ranks_per_node = ranks.max(1);
        self.name = format!(
            "{}, as this host: {} core(s), {} rank(s)",
            self.name, self.cores_per_node, self.ranks_per_node
        );
        self
    }

    /// Reads a machine file (docs/machine.md), checking every field.
    pub fn from_json(text: &str) -> Result<Machine, MachineError> {
        let v: Value = serde_json::from_str(text).map_err(|e| MachineError::Json(e.to_string()))?;
        if !v.is_object() {
            return Err(MachineError::Json("the top level must be an object".into()));
        }
        let name = match v.get("name") {
            None => String::from("unnamed machine"),
            Some(Value::String(s)) => s.clone(),
            Some(x) => {
                return Err(MachineError::Bad {
                    field: "name".into(),
                    problem: format!("must be a string, got {x}"),
                })
            }
        };
        let g = object(&v, "gemm")?;
        let mut gemm = RateClass::ALL
            .iter()
            .map(|&c| rates(g, c).map(|r| (c, r)))
            .collect::<Result<Vec<_>, _>>()?;
        if g.get(RateClass::Narrow.key()).is_some() {
            gemm.push((RateClass::Narrow, rates(g, RateClass::Narrow)?));
        }
        let mem = object(&v, "memory")?;
        let net = object(&v, "network")?;
        let oversubscribed = per_class(&v, "oversubscribed")?;
        let side_by_side = per_class(&v, "side_by_side")?;
        Ok(Machine {
            name,
            cores_per_node: count(&v, "cores_per_node")?,
            ranks_per_node: count(&v, "ranks_per_node")?,
            word_bytes: count(&v, "word_bytes")?,
            gemm,
            memory: Memory {
                per_thread: positive(mem, "memory.per_thread")?,
                per_node: positive(mem, "memory.per_node")?,
            },
            intra_node: link(net, "network.intra_node")?,
            inter_node: link(net, "network.inter_node")?,
            oversubscribed,
            side_by_side,
        })
    }

    /// The file's JSON (what [`Machine::from_json`] reads back).
    pub fn to_json(&self) -> String {
        let gemm: serde_json::Map<String, Value> = self
            .gemm
            .iter()
            .map(|(c, r)| {
                (
                    c.key().to_string(),
                    serde_json::to_value(r).unwrap_or(Value::Null),
                )
            })
            .collect();
        let map = |list: &[(RateClass, f64)]| -> serde_json::Map<String, Value> {
            list.iter()
                .map(|(c, f)| (c.key().to_string(), Value::from(*f)))
                .collect()
        };
        let over = map(&self.oversubscribed);
        let side = map(&self.side_by_side);
        let mut v = serde_json::json!({
            "name": self.name,
            "cores_per_node": self.cores_per_node,
            "ranks_per_node": self.ranks_per_node,
            "word_bytes": self.word_bytes,
            "gemm": gemm,
            "memory": self.memory,
            "network": { "intra_node": self.intra_node, "inter_node": self.inter_node },
        });
        if !over.is_empty() {
            v["oversubscribed"] = Value::Object(over);
        }
        if !side.is_empty() {
            v["side_by_side"] = Value::Object(side);
        }
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    }

    /// Flop/s of one rank computing a product of `class` with `threads` threads: the
    /// per-thread rate measured at the largest thread count not above `threads` (the smallest
    /// measured one when all are above), times `threads`.
    pub fn gemm_rate(&self, class: RateClass, threads: usize) -> f64 {
        let t = threads.max(1);
        let list = self
            .gemm
            .iter()
            .find(|(c, _)| *c == class)
            .map(|(_, r)| r.as_slice())
            .unwrap_or(&[]);
        let per = list
            .iter()
            .rev()
            .find(|r| r.threads <= t)
            .or(list.first())
            .map_or(1.0e9, |r| r.flops_per_thread);
        per * t as f64
    }

    /// Flop/s of one rank of a `procs`-rank job computing with `threads` threads while the
    /// node's other ranks compute too, since GEMMs running side by side share caches, memory
    /// bandwidth and clock. 1-thread ranks take the class's [`Machine::side_by_side`] rate
    /// where the file has one (interpolated by the cores busy); otherwise the per-thread rate
    /// measured at the number of threads busy on the node (at most its cores), times
    /// `threads`. Times the class's [`Machine::oversubscribed_share`] when the node's threads
    /// outnumber its cores.
    pub fn gemm_rate_on_node(&self, class: RateClass, threads: usize, procs: usize) -> f64 {
        let t = threads.max(1);
        let want = self.ranks_on_node(procs) * t;
        let cores = self.cores_per_node.max(1);
        let busy = want.min(cores).max(t);
        let side = self.side_by_side.iter().find(|(c, _)| *c == class);
        let rate = match side {
            // 1-thread ranks side by side: between the lone rate and the one measured with
            // every core busy, by the share of the cores busy.
            Some(&(_, all)) if t == 1 && busy > 1 => {
                let lone = self.gemm_rate(class, 1);
                lone + (all - lone) * (busy - 1) as f64 / (cores - 1).max(1) as f64
            }
            _ => self.gemm_rate(class, busy) / busy as f64 * t as f64,
        };
        if want > self.cores_per_node.max(1) {
            rate * self.oversubscribed_share(class)
        } else {
            rate
        }
    }

    /// [`Machine::gemm_rate_on_node`] for a (batched) product of `m x k` by `k x n` blocks: the
    /// rate of its class, or for a narrow product (see [`NARROW_SIDE`]) the narrow rate where
    /// the file has one, else the mean of the large and medium rates.
    pub fn gemm_rate_of(&self, (m, n, k): (u64, u64, u64), threads: usize, procs: usize) -> f64 {
        let class = RateClass::of(m, n, k);
        let rate = self.gemm_rate_on_node(class, threads, procs);
        let side = m.min(n).min(k);
        if class == RateClass::Medium
            && side >= NARROW_SIDE
            && m.saturating_mul(n).saturating_mul(k) >= NARROW_CALL
        {
            if self.gemm.iter().any(|(c, _)| *c == RateClass::Narrow) {
                return self.gemm_rate_on_node(RateClass::Narrow, threads, procs);
            }
            0.5 * (rate + self.gemm_rate_on_node(RateClass::Large, threads, procs))
        } else {
            rate
        }
    }

    /// The throughput kept by `class` when a node's threads outnumber its cores (1 when the
    /// file does not say).
    pub fn oversubscribed_share(&self, class: RateClass) -> f64 {
        self.oversubscribed
            .iter()
            .find(|(c, _)| *c == class)
            .map_or(1.0, |(_, f)| *f)
    }

    /// Ranks of a `procs`-rank job that share a node.
    pub fn ranks_on_node(&self, procs: usize) -> usize {
        procs.clamp(1, self.ranks_per_node.max(1))
    }

    /// Threads a rank computes with when `procs` ranks run (as `deinsum run` picks them: the
    /// node's cores over its ranks, at least one).
    pub fn threads_per_rank(&self, procs: usize) -> usize {
        (self.cores_per_node / self.ranks_on_node(procs)).max(1)
    }

    /// The share of a core each thread gets when the node's ranks' threads outnumber its cores
    /// (1 when they do not).
    pub fn core_share(&self, procs: usize) -> f64 {
        let want = self.ranks_on_node(procs) * self.threads_per_rank(procs);
        (self.cores_per_node as f64 / want as f64).min(1.0)
    }

    /// Stream-copy bytes per second of one rank of a `procs`-rank job.
    pub fn rank_bandwidth(&self, procs: usize) -> f64 {
        let t = self.threads_per_rank(procs) as f64 * self.core_share(procs);
        (self.memory.per_thread * t).min(self.memory.per_node / self.ranks_on_node(procs) as f64)
    }
}
