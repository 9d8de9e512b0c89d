//! `deinsum calibrate`: measures this machine (GEMM rates with deinsum's own kernels, real and
//! complex, a stream copy, point-to-point latency and bandwidth, one collective per kind) and writes the machine
//! file the planner predicts seconds with (docs/machine.md).

use super::InputError;
use deinsum_exec::Communicator as _;
use deinsum_plan::machine::{GemmRate, Link, Machine, Memory, RateClass};
use deinsum_plan::Objective;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `deinsum calibrate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to write the machine file.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "machine.json"
    )]
    pub output: PathBuf,
    /// Fewer and smaller measurements (under 10 s).
    #[arg(long)]
    pub quick: bool,
    /// Ranks per node to record [default: the cores of this node].
    #[arg(long, value_name = "N")]
    pub ranks_per_node: Option<usize>,
}

/// The machine of `--machine FILE`, or the built-in default; a bad file is the user's (exit 2).
pub fn load_machine(path: Option<&Path>) -> anyhow::Result<Machine> {
    let Some(path) = path else {
        return Ok(Machine::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError(format!("cannot read machine file {}: {e}", path.display())))?;
    Machine::from_json(&text).map_err(|e| InputError(format!("{}: {e}", path.display())).into())
}

/// The objective of `--objective NAME`.
pub fn objective(name: &str) -> anyhow::Result<Objective> {
    Objective::from_name(name).ok_or_else(|| {
        InputError(format!(
            "--objective must be one of {}, got `{name}`",
            Objective::NAMES.join(", ")
        ))
        .into()
    })
}

/// Median of a few timings of `f` (seconds), after one untimed call.
fn median_time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Waits for the previous measurement's thread pools to wind down: their workers, still
/// spinning, shared the cores with the next one's (a 2-thread product then ran at one core's
/// speed in about a third of the calibrations).
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

/// Seconds of the compute step of `expr` at extent `n` on one rank with `threads` threads,
/// run through the planner and executor in `T` as `deinsum run` runs it (median of `reps`).
fn compute_seconds<T: deinsum_exec::Scalar>(
    expr: &str,
    sizes: &str,
    threads: usize,
    reps: usize,
) -> anyhow::Result<f64> {
    let spec = deinsum_expr::ExtentSpec::from_flags(Some(sizes), None, None)?;
    let e = crate::Einsum::compile(expr, &spec, &crate::Options::procs(1))?;
    let opts = deinsum_exec::ExecOptions {
        repeat: reps,
        warmup: 1,
        threads,
        ..deinsum_exec::ExecOptions::default()
    };
    let world = deinsum_exec::InProcess::new(1)?;
    let plan = e.plan().clone();
    let out = world
        .run(|comm| {
            let (_, rep) = deinsum_exec::execute_measured::<T, _>(
                &plan,
                comm,
                &deinsum_exec::Inputs::Seeded { seed: 1 },
                &opts,
            )?;
            Ok::<_, deinsum_exec::ExecError>(rep)
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rep = out.into_iter().next().context_none()?;
    let mut per_run: Vec<f64> = Vec::new();
    for m in rep.steps.iter().filter(|m| {
        matches!(
            m.kind,
            deinsum_exec::StepKind::Compute | deinsum_exec::StepKind::ComputePhase
        )
    }) {
        per_run.resize(per_run.len().max(m.samples.len()), 0.0);
        for (a, b) in per_run.iter_mut().zip(&m.samples) {
            *a += b;
        }
    }
    per_run.sort_by(f64::total_cmp);
    Ok(per_run.get(per_run.len() / 2).copied().unwrap_or(0.0))
}

/// `Option` to a plain error.
trait ContextNone<T> {
    fn context_none(self) -> anyhow::Result<T>;
}
impl<T> ContextNone<T> for Option<T> {
    fn context_none(self) -> anyhow::Result<T> {
        self.ok_or_else(|| anyhow::anyhow!("the calibration run returned no report"))
    }
}

/// The contraction measured for each class, its extents and multiply-adds. `--quick` measures
/// the same products (fewer times): a rate taken at a smaller size is not the rate plans run at
/// (256³ ran at 60 GFLOP/s a thread where 512³ and larger run at 75-106).
fn class_kernel(class: RateClass) -> (&'static str, String, f64) {
    let big = 512;
    match class {
        RateClass::Large => (
            "ij,jk->ik",
            format!("i={big},j={big},k={big}"),
            (big as f64).powi(3),
        ),
        // One side of 16 (a Tucker rank, a small bond dimension) beside long ones: the medium
        // steps of TTMc and tensor-network chains. (A batch of 48^3 products, measured here
        // before, swung between 0.4 and 0.75 of the large rate from one minute to the next on a
        // shared VM, and ran no kernel's steps.)
        RateClass::Medium => {
            let m = 16384;
            (
                "ij,jk->ik",
                format!("i={m},j=128,k=16"),
                (m * 128 * 16) as f64,
            )
        }
        // A narrow product as MTTKRP's and the chain's rank-32 steps run it: rows of 256, a
        // long summed index, 32 columns.
        RateClass::Narrow => (
            "ij,jk->ik",
            "i=256,j=32768,k=32".to_string(),
            (256 * 32768 * 32) as f64,
        ),
        // A Khatri-Rao step: no summed index.
        RateClass::Small => {
            let n = 256;
            (
                "ja,ka->jka",
                format!("j={n},k={n},a=32"),
                (n * n * 32) as f64,
            )
        }
    }
}

/// GEMM rates of every class at one thread and at all cores.
fn gemm_rates(cores: usize, quick: bool) -> anyhow::Result<Vec<(RateClass, Vec<GemmRate>)>> {
    let mut threads = vec![1];
    if cores > 1 {
        threads.push(cores);
    }
    // Medians of 25: a 2-thread product of a few ms varied 52-62 (once 31) GFLOP/s per thread
    // between calibrations taken as medians of 7 on a quiet 2-core host.
    let reps = if quick { 7 } else { 25 };
    // Every class and thread count is measured in each of `rounds` sweeps and the median sweep
    // kept: one sweep's 2-thread medium product ran at half its speed now and then (20-24
    // against 35-45 GFLOP/s per thread, depending on what ran just before it in the process).
    let rounds = if quick { 1 } else { 3 };
    let kernels: Vec<_> = RateClass::MEASURED
        .iter()
        .map(|&c| (c, class_kernel(c)))
        .collect();
    let mut seconds = vec![vec![Vec::with_capacity(rounds); threads.len()]; kernels.len()];
    for _ in 0..rounds {
        for (ci, (class, (expr, sizes, madds))) in kernels.iter().enumerate() {
            for (ti, &t) in threads.iter().enumerate() {
                settle();
                let s = compute_seconds::<f64>(expr, sizes, t, reps)?.max(1e-9);
                eprintln!(
                    "gemm {:<6} {expr} {sizes}, {t} thread(s): {:.3} ms, {:.2} GFLOP/s per thread",
                    class.key(),
                    s * 1e3,
                    2.0 * madds / s / t as f64 / 1e9
                );
                seconds[ci][ti].push(s);
            }
        }
    }
    Ok(kernels
        .iter()
        .zip(seconds)
        .map(|((class, (_, _, madds)), per_thread)| {
            let rates = threads
                .iter()
                .zip(per_thread)
                .map(|(&t, mut v)| {
                    v.sort_by(f64::total_cmp);
                    GemmRate {
                        threads: t,
                        flops_per_thread: 2.0 * madds / v[v.len() / 2] / t as f64,
                    }
                })
                .collect();
            (*class, rates)
        })
        .collect())
}

/// The large class's GEMM in c128 and c64 at one thread and at all cores, as real flop/s per
/// thread (8 per complex multiply-add) and as a fraction of the f64 rate `gemm` measured: the
/// time model prices a complex multiply-add as 8 real flops at the real rates, and these
/// figures show how far that holds on this machine (printed; the machine file is unchanged).
fn complex_rates(
    cores: usize,
    quick: bool,
    gemm: &[(RateClass, Vec<GemmRate>)],
) -> anyhow::Result<()> {
    let (expr, sizes, madds) = class_kernel(RateClass::Large);
    let reps = if quick { 3 } else { 9 };
    let mut threads = vec![1];
    if cores > 1 {
        threads.push(cores);
    }
    for t in threads {
        let real = gemm
            .iter()
            .find(|(c, _)| *c == RateClass::Large)
            .and_then(|(_, r)| r.iter().find(|g| g.threads == t))
            .map_or(f64::NAN, |g| g.flops_per_thread);
        for (name, s) in [
            ("c128", {
                settle();
                compute_seconds::<deinsum_exec::scalar::Complex64>(expr, &sizes, t, reps)?
            }),
            ("c64", {
                settle();
                compute_seconds::<deinsum_exec::scalar::Complex32>(expr, &sizes, t, reps)?
            }),
        ] {
            let rate = 8.0 * madds / s.max(1e-9) / t as f64;
            eprintln!(
                "gemm large  {expr} {sizes} {name}, {t} thread(s): {:.3} ms, {:.2} GFLOP/s per \
                 thread, {:.2} of the f64 rate",
                s * 1e3,
                rate / 1e9,
                rate / real
            );
        }
    }
    Ok(())
}

/// Per class, the node's throughput with two 1-thread ranks per core computing side by side
/// over its throughput with one per core: each rank its own product on its own thread, all
/// started together (the median of `rounds` sweeps); and the flop/s per thread of the one-per-
/// core runs, from the slowest rank's median product (the machine's `side_by_side`; the median
/// over sweeps). `gemm` sizes the runs: each rank
/// computes for about `window` seconds, so that compiling, loading and waking the threads
/// stay small beside it (with three runs of a quarter-millisecond product, `--quick` gave
/// shares anywhere between 0.001 and 268).
fn oversubscription(
    cores: usize,
    quick: bool,
    gemm: &[(RateClass, Vec<GemmRate>)],
) -> anyhow::Result<Rates> {
    let window = if quick { 0.1 } else { 0.15 };
    let rounds = if quick { 1 } else { 3 };
    // The node's flop/s with `n` ranks side by side: their flops over the wall time from
    // their common start to the last one's end (a rank's own step times miss the time it
    // waits descheduled between steps, and gave shares above 1); and the slowest rank's median
    // product seconds.
    let side_by_side = |expr: &str,
                        sizes: &str,
                        madds: f64,
                        n: usize,
                        reps: usize|
     -> anyhow::Result<(f64, f64)> {
        settle();
        let start = std::sync::Barrier::new(n + 1);
        let (results, wall) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        compute_seconds::<f64>(expr, sizes, 1, reps)
                    })
                })
                .collect();
            start.wait();
            let t0 = Instant::now();
            let results: Vec<anyhow::Result<f64>> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a calibration thread panicked")))
                })
                .collect();
            (results, t0.elapsed().as_secs_f64())
        });
        let mut slowest = 0.0f64;
        for r in results {
            slowest = slowest.max(r?);
        }
        // Each rank runs its product reps + 1 times (one warm-up).
        Ok((
            n as f64 * (reps + 1) as f64 * 2.0 * madds / wall.max(1e-9),
            slowest,
        ))
    };
    let mut out = Rates::default();
    for class in RateClass::MEASURED {
        let (expr, sizes, madds) = class_kernel(class);
        let one = gemm
            .iter()
            .find(|(c, _)| *c == class)
            .and_then(|(_, r)| r.iter().find(|g| g.threads == 1))
            .map_or(1e9, |g| g.flops_per_thread);
        // Each rank's product at two ranks per core takes about twice its time alone.
        let reps = ((window * one / (2.0 * madds)).ceil() as usize).clamp(3, 5000);
        let mut shares = Vec::with_capacity(rounds);
        let mut sides = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let (full, slowest) = side_by_side(expr, &sizes, madds, cores, reps)?;
            let (over, _) = side_by_side(expr, &sizes, madds, 2 * cores, reps)?;
            shares.push(over / full);
            sides.push(2.0 * madds / slowest.max(1e-9));
        }
        shares.sort_by(f64::total_cmp);
        sides.sort_by(f64::total_cmp);
        let share = shares[shares.len() / 2];
        let side = sides[sides.len() / 2];
        eprintln!(
            "gemm {:<6} {expr} {sizes}, {cores} 1-thread ranks side by side: {:.2} GFLOP/s per \
             thread; {} against {cores}, {reps} runs each: {share:.2} of the throughput",
            class.key(),
            side / 1e9,
            2 * cores,
        );
        out.oversubscribed.push((class, share));
        out.side_by_side.push((class, side));
    }
    Ok(out)
}

/// What [`oversubscription`] measures: per class, the machine's `oversubscribed` shares and
/// `side_by_side` rates.
#[derive(Default)]
struct Rates {
    oversubscribed: Vec<(RateClass, f64)>,
    side_by_side: Vec<(RateClass, f64)>,
}

/// Stream-copy bandwidth (bytes read plus written per second) of one thread and of `cores`
/// threads each copying its own buffer.
fn stream_copy(cores: usize, quick: bool) -> Memory {
    // 128 MB a buffer in both modes: a smaller copy stays in a large last-level cache.
    let words = 1 << 24;
    let reps = if quick { 3 } else { 7 };
    let one = {
        let src = vec![1.0f64; words];
        let mut dst = vec![0.0f64; words];
        let s = median_time(reps, || dst.copy_from_slice(std::hint::black_box(&src)));
        std::hint::black_box(&dst);
        (16 * words) as f64 / s.max(1e-9)
    };
    eprintln!("stream copy, 1 thread: {:.2} GB/s", one / 1e9);
    let per = words / cores.max(1);
    let mut bufs: Vec<(Vec<f64>, Vec<f64>)> = (0..cores)
        .map(|_| (vec![1.0; per], vec![0.0; per]))
        .collect();
    let s = median_time(reps, || {
        std::thread::scope(|sc| {
            for (src, dst) in bufs.iter_mut() {
                sc.spawn(move || dst.copy_from_slice(std::hint::black_box(src)));
            }
        })
    });
    let node = ((16 * per * cores) as f64 / s.max(1e-9)).max(one);
    eprintln!(
        "stream copy, {cores} thread{}: {:.2} GB/s",
        if cores == 1 { "" } else { "s" },
        node / 1e9
    );
    Memory {
        per_thread: one,
        per_node: node,
    }
}

/// Ping-pong between ranks 0 and 1 of `comm` with `words` f64 each way: seconds per one-way
/// message (median of `reps` round trips).
fn ping_pong<C: deinsum_exec::Communicator>(
    comm: &C,
    words: usize,
    reps: usize,
) -> Result<f64, deinsum_exec::CommError> {
    let me = comm.rank();
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps + 1 {
        // Round trip: 0 -> 1, then 1 -> 0; ranks beyond 1 take part with nothing. The messages
        // are made before the clock starts: filling fresh pages is the model's packing, not β
        // (timed here it made β 50 times too large on a VM with slow first touches).
        let (s1, f1): (Vec<(usize, Vec<f64>)>, Vec<usize>) = match me {
            0 => (vec![(1, vec![1.0; words])], vec![]),
            1 => (vec![], vec![0]),
            _ => (vec![], vec![]),
        };
        let (s2, f2): (Vec<(usize, Vec<f64>)>, Vec<usize>) = match me {
            0 => (vec![], vec![1]),
            1 => (vec![(0, vec![1.0; words])], vec![]),
            _ => (vec![], vec![]),
        };
        comm.barrier()?;
        let t = Instant::now();
        let got1 = comm.exchange(s1, &f1)?;
        let got2 = comm.exchange(s2, &f2)?;
        times.push(t.elapsed().as_secs_f64() / 2.0);
        drop((got1, got2));
    }
    times.remove(0);
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// α and β from ping-pongs at a small and a large size on `comm` (2 ranks or more).
fn link_of<C: deinsum_exec::Communicator>(
    comm: &C,
    quick: bool,
) -> Result<Link, deinsum_exec::CommError> {
    let reps = if quick { 20 } else { 100 };
    let small = ping_pong(comm, 1, reps)?;
    let big_words = 1 << 20;
    let big = ping_pong(comm, big_words, reps / 4 + 3)?;
    let alpha = small.max(1e-9);
    let beta = ((big - alpha) / (8 * big_words) as f64).max(1e-13);
    Ok(Link { alpha, beta })
}

/// One collective per kind on `comm`, printed beside its network term (α and β alone: the
/// plan's time model adds the copies into and out of the messages and the reduction's
/// arithmetic at the stream-copy bandwidth, measured later by rank 0 alone).
fn collectives<C: deinsum_exec::Communicator>(
    comm: &C,
    link: &Link,
    words: usize,
) -> Result<(), deinsum_exec::CommError> {
    let p = comm.size();
    let reps = 5;
    let mut buf = vec![1.0f64; words];
    let ar = median_time(reps, || {
        let _ = comm.all_reduce_sum(&mut buf);
    });
    let counts = vec![words / p; p];
    let send = vec![1.0f64; counts.iter().sum()];
    let rs = median_time(reps, || {
        let _ = comm.reduce_scatter_v(&send, &counts);
    });
    let mut bytes = vec![0u8; 8 * words];
    let bc = median_time(reps, || {
        let _ = comm.broadcast(&mut bytes, 0);
    });
    let per = vec![8 * words / p; p];
    let a2a_buf = vec![0u8; per.iter().sum()];
    let a2a = median_time(reps, || {
        let _ = comm.all_to_all_v(&a2a_buf, &per);
    });
    if comm.rank() == 0 {
        let n = 8.0 * words as f64;
        let q = p as f64;
        let ring = 2.0 * (q - 1.0) * link.alpha + 2.0 * (q - 1.0) / q * n * link.beta;
        let lg = q.log2().ceil();
        for (name, t, model) in [
            ("allreduce (ring)", ar, ring),
            (
                "reduce-scatter (ring)",
                rs,
                (q - 1.0) * link.alpha + (q - 1.0) / q * n * link.beta,
            ),
            (
                "broadcast (binomial)",
                bc,
                lg * (link.alpha + n * link.beta),
            ),
            (
                "all-to-all (pairwise)",
                a2a,
                (q - 1.0) * (link.alpha + n / q * link.beta),
            ),
        ] {
            eprintln!(
                "collective {name}, {p} ranks, {words} words: {:.3} ms measured, {:.3} ms by α and β alone (a plan adds packing and reduction at the copy bandwidth)",
                t * 1e3,
                model * 1e3
            );
        }
    }
    Ok(())
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.ranks_per_node == Some(0) {
        return Err(InputError("--ranks-per-node must be at least 1".into()).into());
    }
    let start = Instant::now();
    let cores = super::node_cores();
    // An MPI launcher binds each rank to its cores: threads beyond them cannot be measured.
    let usable = deinsum_runtime::cores().min(cores);
    let (link, backend) = measure_network(args.quick)?;
    let Some(link) = link else {
        // Ranks other than 0 of an MPI calibration write nothing.
        return Ok(ExitCode::SUCCESS);
    };
    if usable < cores {
        eprintln!(
            "note: this process may use {usable} of the node's {cores} cores (the launcher binds \
             it): compute rates measured for up to {usable} thread(s); `mpirun --bind-to none` \
             measures them all"
        );
    }
    let gemm = gemm_rates(usable, args.quick)?;
    complex_rates(usable, args.quick, &gemm)?;
    let sharing = if usable > 1 {
        oversubscription(usable, args.quick, &gemm)?
    } else {
        Rates::default()
    };
    let memory = stream_copy(usable, args.quick);
    // Under MPI the ranks the launcher placed on this node, else one per core.
    let ranks_per_node = args.ranks_per_node.unwrap_or_else(|| {
        (backend == "MPI")
            .then(|| deinsum_exec::preflight::mpi_ranks_on_node().or_else(super::launch_size))
            .flatten()
            .unwrap_or(cores)
    });
    let m = Machine {
        name: format!(
            "calibrated by deinsum calibrate{} ({backend}, {cores} cores)",
            if args.quick { " --quick" } else { "" }
        ),
        cores_per_node: cores,
        ranks_per_node,
        word_bytes: 8,
        gemm,
        memory,
        // One node was measured: between nodes the same figures stand until measured.
        inter_node: link.clone(),
        intra_node: link,
        oversubscribed: sharing.oversubscribed,
        side_by_side: sharing.side_by_side,
    };
    std::fs::write(&args.output, m.to_json())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", args.output.display()))?;
    eprintln!(
        "wrote {} in {:.1} s",
        args.output.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// The network link: under an MPI launcher (with the `mpi` feature) measured between MPI
/// ranks, else between two in-process ranks; `None` on MPI ranks other than 0.
fn measure_network(quick: bool) -> anyhow::Result<(Option<Link>, &'static str)> {
    #[cfg(feature = "mpi")]
    if super::launch_size().is_some() {
        let universe =
            mpi::initialize().ok_or_else(|| anyhow::anyhow!("MPI initialization failed"))?;
        let comm = deinsum_exec::mpi::MpiComm::world(&universe);
        if comm.size() < 2 {
            return Err(
                InputError("calibrate under mpirun needs at least 2 ranks (-n 2)".into()).into(),
            );
        }
        let link = link_of(&comm, quick)?;
        if comm.rank() == 0 {
            eprintln!(
                "ping-pong (MPI, {} ranks): alpha {:.2} us, beta {:.3} ns/byte",
                comm.size(),
                link.alpha * 1e6,
                link.beta * 1e9
            );
        }
        collectives(&comm, &link, if quick { 1 << 16 } else { 1 << 20 })?;
        return Ok(((comm.rank() == 0).then_some(link), "MPI"));
    }
    let world = deinsum_exec::InProcess::new(2)?;
    let out = world
        .run(|comm| {
            let link = link_of(comm, quick)?;
            if comm.rank() == 0 {
                eprintln!(
                    "ping-pong (in-process, 2 ranks): alpha {:.2} us, beta {:.3} ns/byte",
                    link.alpha * 1e6,
                    link.beta * 1e9
                );
            }
            collectives(comm, &link, if quick { 1 << 16 } else { 1 << 20 })?;
            Ok::<_, deinsum_exec::CommError>(link)
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((out.into_iter().next(), "in-process"))
}
