//! `SELECT g, SUM(x) | COUNT(*) FROM L JOIN R USING (k) GROUP BY g` without materializing the
//! join: the side without `g` is summed per key first (`r[k]`: its rows and its sum of `x`),
//! and the join becomes the contraction `gk,k->g` — at each key's owner every (g, k) of the
//! group side meets `r[k]` — followed by a sum of the partial groups at each group's owner.

use crate::coll;
use crate::kernel::{owner, JoinKind, JoinShape, KeyMap, Keys};
use crate::{Column, DataType, JoinError, Table};
use deinsum_exec::{Communicator, Traffic};

/// The aggregate of a grouped join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Aggregate {
    /// SUM of a numeric column (NULLs skipped; NULL when a group has no value).
    Sum(String),
    /// COUNT(*): the joined rows of each group.
    Count,
}

/// A grouped join: the group column and the aggregate.
#[derive(Clone, Debug)]
pub struct GroupBy {
    /// The column grouped by (from the left table if it has it, else the right).
    pub group: String,
    /// What each group gets.
    pub aggregate: Aggregate,
}

/// A running sum: integers exactly (i128), floats as f64.
#[derive(Clone, Copy, Debug)]
enum Acc {
    Int(i128),
    Float(f64),
}

impl Acc {
    fn zero(float: bool) -> Acc {
        if float {
            Acc::Float(0.0)
        } else {
            Acc::Int(0)
        }
    }
    fn add(&mut self, o: Acc) {
        match (self, o) {
            (Acc::Int(a), Acc::Int(b)) => *a += b,
            (Acc::Float(a), Acc::Float(b)) => *a += b,
            _ => {}
        }
    }
    fn times(self, n: u64) -> Acc {
        match self {
            Acc::Int(a) => Acc::Int(a * n as i128),
            Acc::Float(a) => Acc::Float(a * n as f64),
        }
    }
    fn put(self, out: &mut Vec<u8>) {
        match self {
            Acc::Int(a) => out.extend_from_slice(&a.to_le_bytes()),
            Acc::Float(a) => {
                out.extend_from_slice(&a.to_le_bytes());
                out.extend_from_slice(&[0u8; 8]);
            }
        }
    }
    fn get(b: &[u8], float: bool) -> Acc {
        if float {
            Acc::Float(f64::from_le_bytes(b[..8].try_into().expect("8")))
        } else {
            Acc::Int(i128::from_le_bytes(b[..16].try_into().expect("16")))
        }
    }
}

/// Per group: rows, sum, rows with a value.
type Partial = (u64, Acc, u64);

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8"))
}

/// The summed column: on the group side A (`true`) or B, its index there, and whether it is
/// float. `None` for COUNT(*).
type SumAt = Option<(bool, usize, bool)>;

/// A column missing from both tables.
fn missing_column(l: &Table, r: &Table, files: (&str, &str), c: &str) -> JoinError {
    JoinError::MissingColumn {
        file: format!("{} or {}", files.0, files.1),
        column: c.to_string(),
        available: l
            .names()
            .iter()
            .chain(r.names())
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Where the summed column of `gb` is (`at` is the group side, `bt` the other), checked to
/// be a number.
fn sum_column(
    at: &Table,
    bt: &Table,
    gb: &GroupBy,
    missing: impl Fn(&str) -> JoinError,
) -> Result<SumAt, JoinError> {
    let x = match &gb.aggregate {
        Aggregate::Count => return Ok(None),
        Aggregate::Sum(x) => x,
    };
    let (in_a, c) = match (at.position(x), bt.position(x)) {
        (Some(c), _) => (true, c),
        (None, Some(c)) => (false, c),
        _ => return Err(missing(x)),
    };
    let col = if in_a {
        &at.columns()[c]
    } else {
        &bt.columns()[c]
    };
    if !matches!(
        col.dtype(),
        DataType::Int64 | DataType::Float64 | DataType::Null
    ) {
        return Err(JoinError::Invalid(format!(
            "--sum {x}: column is {}, not a number",
            col.dtype().name()
        )));
    }
    Ok(Some((in_a, c, col.dtype() == DataType::Float64)))
}

/// The number in column `c`, row `i` of `t` (None for NULL or a non-number).
fn value(t: &Table, c: usize, i: usize) -> Option<Acc> {
    match &t.columns()[c] {
        Column::Int64(v) => v.get(i).map(|x| Acc::Int(x as i128)),
        Column::Float64(v) => v.get(i).map(Acc::Float),
        _ => None,
    }
}

/// Appends a length-prefixed key.
fn put_key(m: &mut Vec<u8>, k: &[u8]) {
    m.extend_from_slice(&(k.len() as u32).to_le_bytes());
    m.extend_from_slice(k);
}

/// Reads a length-prefixed key: the key and the rest.
fn take_key(b: &[u8]) -> (&[u8], &[u8]) {
    let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
    (&b[4..4 + n], &b[4 + n..])
}

/// Appends a partial (32 bytes: rows, sum, rows with a value).
fn put_partial(m: &mut Vec<u8>, &(n, s, nn): &Partial) {
    m.extend_from_slice(&n.to_le_bytes());
    s.put(m);
    m.extend_from_slice(&nn.to_le_bytes());
}

/// Reads a partial: it and the rest.
fn take_partial(b: &[u8], float: bool) -> (Partial, &[u8]) {
    (
        (u64_at(b, 0), Acc::get(&b[8..], float), u64_at(b, 24)),
        &b[32..],
    )
}

/// Adds `(n, s, nn)` into `e`.
fn add_partial(e: &mut Partial, (n, s, nn): Partial) {
    e.0 += n;
    e.1.add(s);
    e.2 += nn;
}

/// Counts a row into `e`, with its summed value if the sum is on this side (`on_this`).
fn count_row(e: &mut Partial, t: &Table, i: usize, sum: SumAt, on_this: bool) {
    e.0 += 1;
    if let Some((in_a, c, _)) = sum {
        if in_a == on_this {
            if let Some(x) = value(t, c, i) {
                e.1.add(x);
                e.2 += 1;
            }
        }
    }
}

/// The group side summarized per (k, g), as messages to each key's owner: key, group, partial.
fn group_side_messages(
    at: &Table,
    ak: &Keys,
    gc: &Column,
    sum: SumAt,
    float: bool,
    p: usize,
) -> Vec<Vec<u8>> {
    // Each row's group value, encoded as a cell (NULL is a group of its own, as in SQL).
    let gcells: Vec<Vec<u8>> = (0..at.rows())
        .map(|i| {
            let mut cell = Vec::new();
            gc.encode_cell(i, &mut cell);
            cell
        })
        .collect();
    let mut amap: KeyMap<KeyMap<Partial>> = KeyMap::default();
    for (i, cell) in gcells.iter().enumerate() {
        let Some(k) = ak.get(i) else { continue };
        let e = amap
            .entry(k)
            .or_default()
            .entry(cell)
            .or_insert((0, Acc::zero(float), 0));
        count_row(e, at, i, sum, true);
    }
    let mut amsgs = vec![Vec::new(); p];
    for (k, groups) in &amap {
        for (g, part) in groups {
            let m = &mut amsgs[owner(k, p)];
            put_key(m, k);
            put_key(m, g);
            put_partial(m, part);
        }
    }
    amsgs
}

/// The other side summarized per key (`r[k]`), as messages to each key's owner: key, partial.
fn other_side_messages(bt: &Table, bk: &Keys, sum: SumAt, float: bool, p: usize) -> Vec<Vec<u8>> {
    let mut bmap: KeyMap<Partial> = KeyMap::default();
    for j in 0..bt.rows() {
        let Some(k) = bk.get(j) else { continue };
        let e = bmap.entry(k).or_insert((0, Acc::zero(float), 0));
        count_row(e, bt, j, sum, false);
    }
    let mut bmsgs = vec![Vec::new(); p];
    for (k, part) in &bmap {
        let m = &mut bmsgs[owner(k, p)];
        put_key(m, k);
        put_partial(m, part);
    }
    bmsgs
}

/// The received key/partial records merged per key, with the keys in first-seen order.
fn merge_partials(mut b: &[u8], float: bool) -> (KeyMap<'_, Partial>, Vec<&[u8]>) {
    let mut map: KeyMap<Partial> = KeyMap::default();
    let mut order: Vec<&[u8]> = Vec::new();
    while !b.is_empty() {
        let (k, rest) = take_key(b);
        let (part, rest) = take_partial(rest, float);
        let e = map.entry(k).or_insert_with(|| {
            order.push(k);
            (0, Acc::zero(float), 0)
        });
        add_partial(e, part);
        b = rest;
    }
    (map, order)
}

/// gk,k->g: each received (k, g) partial of A meets `r[k]`; this owner's partial groups.
fn contract<'a>(
    mut b: &'a [u8],
    rk: &KeyMap<Partial>,
    x_in_a: bool,
    float: bool,
) -> KeyMap<'a, Partial> {
    let mut groups: KeyMap<Partial> = KeyMap::default();
    while !b.is_empty() {
        let (k, rest) = take_key(b);
        let (g, rest) = take_key(rest);
        let ((na, sa, nna), rest) = take_partial(rest, float);
        b = rest;
        let Some(&(nb, sb, nnb)) = rk.get(k) else {
            continue;
        };
        let e = groups.entry(g).or_insert((0, Acc::zero(float), 0));
        e.0 += na * nb;
        if x_in_a {
            e.1.add(sa.times(nb));
            e.2 += nna * nb;
        } else {
            e.1.add(sb.times(na));
            e.2 += na * nnb;
        }
    }
    groups
}

/// The aggregate column of the final groups (in `order`): COUNT(*) as int64; SUM as float64
/// when the summed column is float or an integer sum leaves int64, else int64.
fn aggregate_column(gb: &GroupBy, sum: SumAt, order: &[&[u8]], fin: &KeyMap<Partial>) -> Column {
    if gb.aggregate == Aggregate::Count {
        return Column::Int64(order.iter().map(|g| Some(fin[g].0 as i64)).collect());
    }
    let vals = order.iter().map(|g| {
        let (_, acc, nn) = fin[g];
        (nn > 0).then_some(acc)
    });
    if sum.is_some_and(|s| s.2) {
        return Column::Float64(
            vals.map(|v| {
                v.map(|a| match a {
                    Acc::Float(x) => x,
                    Acc::Int(x) => x as f64,
                })
            })
            .collect(),
        );
    }
    let ints: Vec<Option<i128>> = vals
        .map(|v| {
            v.map(|a| match a {
                Acc::Int(x) => x,
                Acc::Float(x) => x as i128,
            })
        })
        .collect();
    if ints.iter().flatten().any(|&x| i64::try_from(x).is_err()) {
        Column::Float64(ints.iter().map(|v| v.map(|x| x as f64)).collect())
    } else {
        Column::Int64(ints.iter().map(|v| v.map(|x| x as i64)).collect())
    }
}

/// This rank's groups of the inner join of its rows `l`, `r` with the other ranks'
/// (collective), and the bytes it moved.
pub fn group_join<C: Communicator>(
    comm: &C,
    shape: &JoinShape,
    l: &Table,
    r: &Table,
    gb: &GroupBy,
    files: (&str, &str),
) -> Result<(Table, Traffic), JoinError> {
    if shape.kind != JoinKind::Inner {
        return Err(JoinError::Invalid(
            "--group-by aggregates an inner join (--how inner)".into(),
        ));
    }
    let p = comm.size();
    let missing = |c: &str| missing_column(l, r, files, c);
    // The group side A (true: left) and its column.
    let (a_left, gcol) = match (l.position(&gb.group), r.position(&gb.group)) {
        (Some(c), _) => (true, c),
        (None, Some(c)) => (false, c),
        _ => return Err(missing(&gb.group)),
    };
    let (at, ak, bt, bk) = if a_left {
        (l, Keys::of(l, &shape.lkeys), r, Keys::of(r, &shape.rkeys))
    } else {
        (r, Keys::of(r, &shape.rkeys), l, Keys::of(l, &shape.lkeys))
    };
    let sum = sum_column(at, bt, gb, missing)?;
    let float = sum.is_some_and(|s| s.2);
    let t0 = comm.traffic();
    // A per (k, g) and B per k, summarized locally, sent to the key's owner.
    let gc = &at.columns()[gcol];
    let amsgs = group_side_messages(at, &ak, gc, sum, float, p);
    let bmsgs = other_side_messages(bt, &bk, sum, float, p);
    let agot = coll::all_to_all(comm, amsgs)?.concat();
    let bgot = coll::all_to_all(comm, bmsgs)?.concat();
    // r[k] at the owner.
    let (rk, _) = merge_partials(&bgot, float);
    let groups = contract(&agot, &rk, sum.is_some_and(|s| s.0), float);
    // Partial groups to the groups' owners.
    let mut msgs = vec![Vec::new(); p];
    for (g, part) in &groups {
        let m = &mut msgs[owner(g, p)];
        put_key(m, g);
        put_partial(m, part);
    }
    drop(groups);
    let got = coll::all_to_all(comm, msgs)?.concat();
    let (fin, order) = merge_partials(&got, float);
    let t1 = comm.traffic();
    let mut gout = Column::empty(gc.dtype());
    for g in &order {
        let mut c = *g;
        gout.decode_push(&mut c).map_err(JoinError::Invalid)?;
    }
    let agg = aggregate_column(gb, sum, &order, &fin);
    let name = match &gb.aggregate {
        Aggregate::Count => "count_star()".to_string(),
        Aggregate::Sum(x) => format!("sum({x})"),
    };
    let table =
        Table::new(vec![gb.group.clone(), name], vec![gout, agg]).map_err(JoinError::Invalid)?;
    Ok((
        table,
        Traffic {
            sent: t1.sent - t0.sent,
            received: t1.received - t0.received,
        },
    ))
}
