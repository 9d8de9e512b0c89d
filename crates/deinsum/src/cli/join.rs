//! `deinsum join`: a relational join of two tables (CSV or Parquet) on P ranks, with the
//! strategy chosen by predicted cost or forced; argument mapping and printing only (the work
//! is deinsum-join's).

use super::{Format, InputError};
use anyhow::Context;
use deinsum_exec::{Communicator, InProcess, RankFailure};
use deinsum_join::agg::{group_join, Aggregate, GroupBy};
use deinsum_join::columns::{self, ColumnPart};
use deinsum_join::io::{self, Schema};
use deinsum_join::{
    dist, report, InspectMode, JoinError, JoinKind, JoinOptions, JoinShape, Placement, Strategy,
    Table,
};
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the ranks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// P ranks as threads of this process.
    Local,
    /// The MPI ranks this process is one of (a build with the `mpi` feature, under mpirun).
    Mpi,
}

/// Arguments of `deinsum join`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The left table (.csv, or .parquet/.pq).
    pub left: PathBuf,
    /// The right table.
    pub right: PathBuf,
    /// Key columns, present in both tables.
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        value_name = "KEY[,KEY...]"
    )]
    pub on: Vec<String>,
    /// inner, left, right or full.
    #[arg(long, default_value = "inner")]
    pub how: String,
    /// auto (least predicted time), shuffle, broadcast, semi, index or bloom (the semi-join
    /// with a Bloom filter of the keys).
    #[arg(long, default_value = "auto")]
    pub strategy: String,
    /// How the inspector gathers the statistics the choice needs: exact (every distinct key's
    /// summary to its owner), sketch (fixed-size HyperLogLog and Misra–Gries sketches; the
    /// shuffle's and broadcast's bytes stay exact, matches are estimated) or auto (sketch from
    /// 50,000 rows of both tables, exact below, or with --max-output-bytes).
    #[arg(long, default_value = "auto")]
    pub inspect: String,
    /// Where the tables are: rows (both split by rows over every rank), separate (the left on
    /// the first ⌈P/2⌉ ranks, the right on the others) or columns (key columns on the first
    /// ⌈P/2⌉ ranks, the other columns on the others; joined by the join index).
    #[arg(long, default_value = "rows")]
    pub placement: String,
    /// Number of ranks P (each reads its own row range of both files) [default: 1, or the
    /// MPI world's size under mpirun].
    #[arg(long, value_name = "P")]
    pub procs: Option<usize>,
    /// Write the output here (.csv, or .parquet/.pq); otherwise CSV on standard output (text
    /// format) or nowhere (JSON format).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Group the inner join's rows by this column (with --sum or --count), without
    /// materializing the join.
    #[arg(long, value_name = "COL")]
    pub group_by: Option<String>,
    /// The sum of this column per group.
    #[arg(long, value_name = "COL", requires = "group_by")]
    pub sum: Option<String>,
    /// The number of joined rows per group.
    #[arg(long, requires = "group_by", conflicts_with = "sum")]
    pub count: bool,
    /// Print every strategy's predicted bytes per rank and seconds; run nothing.
    #[arg(long)]
    pub explain: bool,
    /// Format of the report (text on standard error, JSON on standard output).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Column types instead of inferred ones (CSV), such as `k:int64,name:string`.
    #[arg(long, value_name = "NAME:TYPE,...")]
    pub schema: Option<String>,
    /// Machine model file the predicted seconds are for [default: the built-in model].
    #[arg(long, value_name = "FILE")]
    pub machine: Option<PathBuf>,
    /// Refuse a join whose output exceeds this many bytes, before any row moves.
    #[arg(long, value_name = "BYTES")]
    pub max_output_bytes: Option<u64>,
    /// Backend [default: local].
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Run the join this many times on the tables read once, each run reusing the last one's
    /// memory (as a database runs a query again); `join_seconds` is the median run's, and the
    /// JSON lists every run's. The output is the last run's.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: usize,
}

/// A join error as the CLI reports it: the user's (exit 2) unless it is a communication one.
fn user(e: JoinError) -> anyhow::Error {
    if e.is_input() {
        InputError(e.to_string()).into()
    } else {
        anyhow::Error::new(e)
    }
}

/// The first failing rank's error.
fn failed(e: RankFailure<JoinError>) -> anyhow::Error {
    match e {
        RankFailure::Error { error, .. } => user(error),
        other => anyhow::anyhow!("{other}"),
    }
}

/// What each rank returns.
enum Done {
    Explain(deinsum_join::Inspection),
    /// The last run, and every run's slowest-rank seconds (empty: one run, timed by its
    /// `seconds`).
    Join(Box<deinsum_join::RankJoin>, Vec<f64>),
    Group(Table, deinsum_exec::Traffic),
}

/// Whether the ranks are MPI's: asked for, or implied by an MPI launch.
fn wants_mpi(args: &Args) -> bool {
    args.backend == Some(Backend::Mpi) || (args.backend.is_none() && super::launch_size().is_some())
}

/// The grouped join asked for by --group-by with --sum or --count, if any.
fn group_by(args: &Args) -> anyhow::Result<Option<GroupBy>> {
    Ok(match (&args.group_by, &args.sum, args.count) {
        (Some(g), Some(x), _) => Some(GroupBy {
            group: g.clone(),
            aggregate: Aggregate::Sum(x.clone()),
        }),
        (Some(g), None, true) => Some(GroupBy {
            group: g.clone(),
            aggregate: Aggregate::Count,
        }),
        (Some(_), None, false) => {
            return Err(InputError("--group-by needs --sum COL or --count".into()).into())
        }
        _ => None,
    })
}

/// Prints the strategies' predictions.
fn print_explain(ins: &deinsum_join::Inspection, json: bool) -> anyhow::Result<()> {
    if json {
        let mut v = serde_json::to_value(ins)?;
        v["inspect"] = ins.mode().name().into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", report::explain_text(ins));
    }
    Ok(())
}

/// Reports a grouped join's ranks and writes its groups.
fn finish_group(args: &Args, outs: Vec<Done>, json: bool) -> anyhow::Result<()> {
    let mut parts = Vec::new();
    let mut bytes = Vec::new();
    for o in outs {
        if let Done::Group(t, tr) = o {
            parts.push(t);
            bytes.push(tr);
        }
    }
    let table = Table::concat(&parts).map_err(|e| anyhow::anyhow!(e))?;
    if json {
        let v = serde_json::json!({
            "groups": table.rows(),
            "sent": bytes.iter().map(|t| t.sent).collect::<Vec<_>>(),
            "received": bytes.iter().map(|t| t.received).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        eprintln!(
            "group-by over the join: {} groups; bytes sent per rank {:?}",
            table.rows(),
            bytes.iter().map(|t| t.sent).collect::<Vec<_>>()
        );
    }
    emit(args, &table, json)
}

/// Reports a join's ranks (`auto`: the strategy was chosen by cost) and writes its rows.
fn finish_join(args: &Args, outs: Vec<Done>, auto: bool, json: bool) -> anyhow::Result<()> {
    // Each run's slowest rank: the lists are the same on every rank after `join_repeated`;
    // a join without them (split by columns) ran once, timed by each rank's own seconds.
    let mut times: Vec<f64> = Vec::new();
    let mut runs: Vec<deinsum_join::RankJoin> = outs
        .into_iter()
        .filter_map(|o| match o {
            Done::Join(r, t) => {
                times.resize(times.len().max(t.len()), 0.0);
                for (a, b) in times.iter_mut().zip(t) {
                    *a = a.max(b);
                }
                Some(*r)
            }
            _ => None,
        })
        .collect();
    if times.is_empty() {
        times.push(runs.iter().map(|r| r.seconds).fold(0.0, f64::max));
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    // The text report counts the ranks' rows, so it is written before they move out.
    let text = (!json).then(|| report::run_text(&runs, auto));
    // The ranks' outputs move out of the runs (a copy of every row, twice, before).
    let parts: Vec<Table> = runs
        .iter_mut()
        .map(|r| {
            let empty = r.table.empty_like();
            std::mem::replace(&mut r.table, empty)
        })
        .collect();
    let output_rows: usize = parts.iter().map(Table::rows).sum();
    if json {
        let v = serde_json::json!({
            "strategy": runs[0].strategy,
            "auto": auto,
            "inspect": runs[0].inspection.mode().name(),
            // Checked when the run started.
            "placement": Placement::from_name(&args.placement).map_or("rows", Placement::name),
            "output_rows": output_rows,
            "measured_sent": runs.iter().map(|r| r.measured.sent).collect::<Vec<_>>(),
            "measured_received": runs.iter().map(|r| r.measured.received).collect::<Vec<_>>(),
            "inspector_sent": runs.iter().map(|r| r.inspector.sent).collect::<Vec<_>>(),
            // The slowest rank's join (tables in memory; reading and writing excluded), the
            // median of --repeat runs.
            "join_seconds": median,
            "join_seconds_runs": times,
            "inspection": runs[0].inspection,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        eprint!("{}", text.unwrap_or_default());
    }
    // A file is written from the ranks' parts as they are (no copy into one table first).
    if let Some(out) = &args.output {
        return io::write_parts(out, parts).map_err(user);
    }
    let table = Table::concat_owned(parts).map_err(|e| anyhow::anyhow!(e))?;
    emit(args, &table, json)
}

/// What every rank needs to run its part: the flags, resolved.
struct Job<'a> {
    args: &'a Args,
    kind: JoinKind,
    placement: Placement,
    schema: Schema,
    group: Option<GroupBy>,
    opts: JoinOptions,
    files: (String, String),
}

impl Job<'_> {
    /// One rank's part (collective): read its rows of both tables, then explain, group or join.
    fn rank<C: Communicator>(&self, comm: &C) -> Result<Done, JoinError> {
        let args = self.args;
        let files = (self.files.0.as_str(), self.files.1.as_str());
        let (me, p) = (comm.rank(), comm.size());
        let pl = self.placement;
        let l = io::read_slice(comm, &args.left, &self.schema, pl.slice(true, me, p))?;
        let r = io::read_slice(comm, &args.right, &self.schema, pl.slice(false, me, p))?;
        // The same on every rank (the tables' names and types agree), so all fail together.
        let shape = JoinShape::new(&l, &r, &args.on, self.kind, files)?;
        if pl == Placement::Columns {
            return self.columns(comm, &shape, &l, &r);
        }
        if args.explain {
            return Ok(Done::Explain(dist::explain(
                comm,
                &shape,
                &l,
                &r,
                &self.opts.machine,
                self.opts.inspect,
            )?));
        }
        if let Some(g) = &self.group {
            let (t, traffic) = group_join(comm, &shape, &l, &r, g, files)?;
            return Ok(Done::Group(t, traffic));
        }
        let (run, runs) = dist::join_repeated(comm, &shape, &l, &r, &self.opts, args.repeat)?;
        Ok(Done::Join(Box::new(run), runs))
    }
}

impl Job<'_> {
    /// One rank's part on tables split by columns: explain or join by the join index.
    fn columns<C: Communicator>(
        &self,
        comm: &C,
        shape: &JoinShape,
        l: &Table,
        r: &Table,
    ) -> Result<Done, JoinError> {
        if self.group.is_some() {
            return Err(JoinError::Invalid(
                "--group-by takes tables split by rows (--placement rows or separate)".into(),
            ));
        }
        let (me, p) = (comm.rank(), comm.size());
        let lp = ColumnPart::split(l, &shape.lkeys, &shape.lrest, me, p);
        let rp = ColumnPart::split(r, &shape.rkeys, &shape.rrest, me, p);
        if self.args.explain {
            columns::exact_only(self.opts.inspect)?;
            let ins = columns::explain_columns(comm, shape, &lp, &rp, &self.opts.machine)?;
            return Ok(Done::Explain(ins));
        }
        let run = columns::join_columns(comm, shape, &lp, &rp, &self.opts)?;
        Ok(Done::Join(Box::new(run), Vec::new()))
    }
}

/// Runs `deinsum join`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.procs == Some(0) {
        return Err(InputError("--procs must be at least 1".into()).into());
    }
    let kind = JoinKind::from_name(&args.how).map_err(user)?;
    let strategy = Strategy::from_name(&args.strategy).map_err(user)?;
    let placement = Placement::from_name(&args.placement).map_err(user)?;
    let inspect = InspectMode::from_name(&args.inspect).map_err(user)?;
    let schema = match &args.schema {
        Some(s) => Schema::parse(s).map_err(user)?,
        None => Schema::default(),
    };
    let group = group_by(&args)?;
    if args.repeat == 0 {
        return Err(InputError("--repeat must be at least 1".into()).into());
    }
    if args.repeat > 1 && (args.explain || group.is_some() || placement == Placement::Columns) {
        return Err(InputError(
            "--repeat times the join of tables split by rows or placed apart; it does not apply \
             to --explain, --group-by or --placement columns"
                .into(),
        )
        .into());
    }
    let mpi = wants_mpi(&args);
    // The machine model is for the ranks that run: under MPI, the launcher's.
    let procs = args
        .procs
        .or_else(|| if mpi { super::launch_size() } else { None })
        .unwrap_or(1);
    let machine = super::calibrate::load_machine(args.machine.as_deref())?
        .on_host(super::node_cores(), procs);
    let job = Job {
        args: &args,
        kind,
        placement,
        schema,
        group,
        opts: JoinOptions {
            strategy,
            machine,
            output_limit: args.max_output_bytes,
            inspect,
        },
        files: (
            args.left.display().to_string(),
            args.right.display().to_string(),
        ),
    };
    let outs = if mpi {
        match run_mpi(&job)? {
            Some(outs) => outs,
            // Rank 0 reports and writes; the others are done.
            None => return Ok(ExitCode::SUCCESS),
        }
    } else {
        InProcess::new(procs)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .run(|comm| job.rank(comm))
            .map_err(failed)?
    };
    let json = args.format == Format::Json;
    match &outs[0] {
        Done::Explain(ins) => print_explain(ins, json)?,
        Done::Group(..) => finish_group(&args, outs, json)?,
        Done::Join(..) => finish_join(&args, outs, strategy.is_none(), json)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The join on the MPI world: every rank runs its part; rank 0 gets every rank's result
/// (`None` on the others). An input error is the same on every rank, so each returns it and
/// rank 0 prints it (exit 2); any other error aborts the job with its rank's message.
#[cfg(feature = "mpi")]
fn run_mpi(job: &Job) -> anyhow::Result<Option<Vec<Done>>> {
    use deinsum_join::gather;
    let universe = mpi::initialize().context("MPI initialization failed")?;
    let comm = deinsum_exec::mpi::MpiComm::world(&universe);
    if let Some(p) = job.args.procs.filter(|&p| p != comm.size()) {
        return Err(InputError(format!(
            "--procs {p} but the MPI world has {} ranks",
            comm.size()
        ))
        .into());
    }
    let done = match job.rank(&comm) {
        Ok(d) => d,
        Err(e) if e.is_input() => return Err(user(e)),
        Err(e) => comm.abort(&e.to_string(), 1),
    };
    let outs = match done {
        Done::Explain(ins) => (comm.rank() == 0).then(|| vec![Done::Explain(ins)]),
        Done::Group(t, traffic) => comm
            .or_abort(gather::gather_tables(&comm, &t, traffic))
            .map(|all| all.into_iter().map(|(t, b)| Done::Group(t, b)).collect()),
        Done::Join(run, times) => comm.or_abort(gather::gather_runs(&comm, *run)).map(|all| {
            all.into_iter()
                .map(|r| Done::Join(Box::new(r), times.clone()))
                .collect()
        }),
    };
    Ok(outs)
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_job: &Job) -> anyhow::Result<Option<Vec<Done>>> {
    Err(InputError(
        "deinsum join --backend mpi needs a build with the `mpi` feature (cargo build --features mpi)"
            .into(),
    )
    .into())
}

/// Writes the output table to --output, or as CSV on standard output in the text format.
fn emit(args: &Args, table: &Table, json: bool) -> anyhow::Result<()> {
    if let Some(out) = &args.output {
        io::write(out, table).map_err(user)?;
    } else if !json {
        let out = std::io::stdout().lock();
        io::csv::write_to(out, table).context("writing the output")?;
    }
    Ok(())
}
