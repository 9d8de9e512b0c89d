//! `deinsum parse`: the canonical einsum, whether its output was implicit, and its indices.

use deinsum_expr::{Dim, Index, ParsedEinsum};
use serde::Serialize;
use std::process::ExitCode;

/// Arguments of `deinsum parse`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The einsum, such as "ijk,ja,ka,al->il".
    pub expr: String,
    #[command(flatten)]
    pub extents: super::ExtentArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = super::Format::Text)]
    pub format: super::Format,
}

/// Runs the subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let e = super::einsum_from_args(&args.expr, &args.extents)?;
    let report = Report::new(&e);
    match args.format {
        super::Format::Text => print!("{}", report.text()),
        super::Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// What `deinsum parse` prints (the JSON shape; the text form shows the same).
#[derive(Serialize)]
struct Report {
    /// Canonical form (explicit output).
    einsum: String,
    /// Whether the output was implicit in the expression.
    implicit_output: bool,
    /// Labels standing for `...` dimensions, outermost first.
    ellipsis: Vec<String>,
    inputs: Vec<Term>,
    output: Term,
    /// Every index, sorted by code point.
    indices: Vec<IndexRow>,
}

#[derive(Serialize)]
struct Term {
    /// Canonical subscripts (`...` for the ellipsis dims).
    subscripts: String,
    /// Storage dims: an index label, or "1" for a broadcast dim.
    dims: Vec<String>,
    /// Distinct indices in order of first appearance.
    indices: Vec<String>,
    /// Storage shape.
    shape: Vec<usize>,
}

#[derive(Serialize)]
struct IndexRow {
    index: String,
    extent: usize,
    /// "free" if it is in the output, else "summed".
    role: &'static str,
    /// Whether it stands for a `...` dimension.
    ellipsis: bool,
    /// Storage dimensions of each input where it occurs.
    inputs: Vec<Occurrence>,
    /// Extent-1 storage dimensions written with this index that broadcast (NumPy's rule).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    broadcast: Vec<Occurrence>,
    /// Its position in the output, if there.
    output: Option<usize>,
}

#[derive(Serialize)]
struct Occurrence {
    operand: usize,
    dims: Vec<usize>,
}

impl Report {
    fn new(e: &ParsedEinsum) -> Self {
        let inputs = (0..e.num_inputs())
            .map(|k| {
                let op = &e.inputs()[k];
                Term {
                    subscripts: e.input_subscripts(k),
                    dims: op
                        .dims
                        .iter()
                        .map(|d| match d {
                            Dim::Index(c) => c.to_string(),
                            Dim::Broadcast => "1".to_string(),
                        })
                        .collect(),
                    indices: op.indices.iter().map(|c| c.to_string()).collect(),
                    shape: op.shape(e.extents()),
                }
            })
            .collect();
        let output = Term {
            subscripts: e.output_subscripts(),
            dims: e.output().iter().map(|c| c.to_string()).collect(),
            indices: e.output().iter().map(|c| c.to_string()).collect(),
            shape: e.output().iter().map(|&c| e.extent(c)).collect(),
        };
        let indices = e.all_indices().into_iter().map(|c| row(e, c)).collect();
        Report {
            einsum: e.to_string(),
            implicit_output: e.implicit_output(),
            ellipsis: e.ellipsis().iter().map(|c| c.to_string()).collect(),
            inputs,
            output,
            indices,
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!("einsum    {}\n", self.einsum));
        s.push_str(&format!(
            "output    {}\n",
            if self.implicit_output {
                "implicit (no '->': the indices that occur once, sorted)"
            } else {
                "explicit"
            }
        ));
        if !self.ellipsis.is_empty() {
            s.push_str(&format!("ellipsis  {}\n", self.ellipsis.join(" ")));
        }
        s.push('\n');
        let mut terms = vec![vec![
            "operand".to_string(),
            "subscripts".to_string(),
            "shape".to_string(),
        ]];
        for (k, t) in self.inputs.iter().enumerate() {
            terms.push(vec![
                k.to_string(),
                t.subscripts.clone(),
                shape_str(&t.shape),
            ]);
        }
        terms.push(vec![
            "output".to_string(),
            self.output.subscripts.clone(),
            shape_str(&self.output.shape),
        ]);
        s.push_str(&table(&terms));
        s.push('\n');
        let mut rows = vec![vec![
            "index".to_string(),
            "extent".to_string(),
            "role".to_string(),
            "occurs in (operand[dims], out[position])".to_string(),
        ]];
        for r in &self.indices {
            let mut occ: Vec<String> = r
                .inputs
                .iter()
                .map(|o| {
                    let dims: Vec<String> = o.dims.iter().map(|d| d.to_string()).collect();
                    format!("{}[{}]", o.operand, dims.join(","))
                })
                .collect();
            for o in &r.broadcast {
                let dims: Vec<String> = o.dims.iter().map(|d| d.to_string()).collect();
                occ.push(format!("{}[{}]=1 (broadcast)", o.operand, dims.join(",")));
            }
            if let Some(p) = r.output {
                occ.push(format!("out[{p}]"));
            }
            let name = if r.ellipsis {
                format!("{} (...)", r.index)
            } else {
                r.index.clone()
            };
            rows.push(vec![
                name,
                r.extent.to_string(),
                r.role.to_string(),
                occ.join(" "),
            ]);
        }
        s.push_str(&table(&rows));
        s
    }
}

fn row(e: &ParsedEinsum, c: Index) -> IndexRow {
    let inputs = e
        .inputs()
        .iter()
        .enumerate()
        .filter_map(|(k, op)| {
            let dims: Vec<usize> = op
                .dims
                .iter()
                .enumerate()
                .filter(|(_, d)| **d == Dim::Index(c))
                .map(|(i, _)| i)
                .collect();
            (!dims.is_empty()).then_some(Occurrence { operand: k, dims })
        })
        .collect();
    let broadcast = e
        .inputs()
        .iter()
        .enumerate()
        .filter_map(|(k, op)| {
            let dims: Vec<usize> = op
                .named_broadcast
                .iter()
                .filter(|&&(_, l)| l == c)
                .map(|&(d, _)| d)
                .collect();
            (!dims.is_empty()).then_some(Occurrence { operand: k, dims })
        })
        .collect();
    let output = e.output().iter().position(|&o| o == c);
    IndexRow {
        index: c.to_string(),
        extent: e.extent(c),
        role: if output.is_some() { "free" } else { "summed" },
        ellipsis: e.ellipsis().contains(&c),
        inputs,
        broadcast,
        output,
    }
}

fn shape_str(s: &[usize]) -> String {
    if s.is_empty() {
        "scalar".to_string()
    } else {
        s.iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join("x")
    }
}

/// Left-aligned columns, two spaces apart, widths in chars; no trailing spaces.
fn table(rows: &[Vec<String>]) -> String {
    let ncol = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let width: Vec<usize> = (0..ncol)
        .map(|j| {
            rows.iter()
                .filter_map(|r| r.get(j))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    for r in rows {
        let mut line = String::new();
        for (j, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if j + 1 < r.len() {
                let pad = width[j] - cell.chars().count() + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}
