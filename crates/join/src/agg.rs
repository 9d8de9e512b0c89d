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
    let missing = |c: &str| JoinError::MissingColumn {
        file: format!("{} or {}", files.0, files.1),
        column: c.to_string(),
        available: l
            .names()
            .iter()
            .chain(r.names())
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    };
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
    // The summed column: on A (x_in_a) or B, and whether it is float.
    let sum = match &gb.aggregate {
        Aggregate::Count => None,
        Aggregate::Sum(x) => {
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
            Some((in_a, c, col.dtype() == DataType::Float64))
        }
    };
    let float = sum.is_some_and(|s| s.2);
    let value = |t: &Table, c: usize, i: usize| -> Option<Acc> {
        match &t.columns()[c] {
            Column::Int64(v) => v[i].map(|x| Acc::Int(x as i128)),
            Column::Float64(v) => v[i].map(Acc::Float),
            _ => None,
        }
    };
    let t0 = comm.traffic();
    // A per (k, g) and B per k, summarized locally, sent to the key's owner.
    let mut amap: KeyMap<KeyMap<Partial>> = KeyMap::default();
    let gc = &at.columns()[gcol];
    // Each row's group value, encoded as a cell (NULL is a group of its own, as in SQL).
    let gcells: Vec<Vec<u8>> = (0..at.rows())
        .map(|i| {
            let mut cell = Vec::new();
            gc.encode_cell(i, &mut cell);
            cell
        })
        .collect();
    for (i, cell) in gcells.iter().enumerate() {
        let Some(k) = ak.get(i) else { continue };
        let e = amap
            .entry(k)
            .or_default()
            .entry(cell)
            .or_insert((0, Acc::zero(float), 0));
        e.0 += 1;
        if let Some((true, c, _)) = sum {
            if let Some(x) = value(at, c, i) {
                e.1.add(x);
                e.2 += 1;
            }
        }
    }
    let mut bmap: KeyMap<Partial> = KeyMap::default();
    for j in 0..bt.rows() {
        let Some(k) = bk.get(j) else { continue };
        let e = bmap.entry(k).or_insert((0, Acc::zero(float), 0));
        e.0 += 1;
        if let Some((false, c, _)) = sum {
            if let Some(x) = value(bt, c, j) {
                e.1.add(x);
                e.2 += 1;
            }
        }
    }
    let put_key = |m: &mut Vec<u8>, k: &[u8]| {
        m.extend_from_slice(&(k.len() as u32).to_le_bytes());
        m.extend_from_slice(k);
    };
    let mut amsgs = vec![Vec::new(); p];
    for (k, groups) in &amap {
        for (g, &(n, s, nn)) in groups {
            let m = &mut amsgs[owner(k, p)];
            put_key(m, k);
            put_key(m, g);
            m.extend_from_slice(&n.to_le_bytes());
            s.put(m);
            m.extend_from_slice(&nn.to_le_bytes());
        }
    }
    let mut bmsgs = vec![Vec::new(); p];
    for (k, &(n, s, nn)) in &bmap {
        let m = &mut bmsgs[owner(k, p)];
        put_key(m, k);
        m.extend_from_slice(&n.to_le_bytes());
        s.put(m);
        m.extend_from_slice(&nn.to_le_bytes());
    }
    drop((amap, bmap));
    let agot = coll::all_to_all(comm, amsgs)?.concat();
    let bgot = coll::all_to_all(comm, bmsgs)?.concat();
    // r[k] at the owner.
    let mut rk: KeyMap<Partial> = KeyMap::default();
    let mut b = &bgot[..];
    while !b.is_empty() {
        let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
        let k = &b[4..4 + n];
        let e = rk.entry(k).or_insert((0, Acc::zero(float), 0));
        e.0 += u64_at(b, 4 + n);
        e.1.add(Acc::get(&b[12 + n..], float));
        e.2 += u64_at(b, 28 + n);
        b = &b[36 + n..];
    }
    // gk,k->g: each (g, k) of A meets r[k].
    let x_in_a = sum.is_some_and(|s| s.0);
    let mut groups: KeyMap<Partial> = KeyMap::default();
    let mut b = &agot[..];
    while !b.is_empty() {
        let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
        let k = &b[4..4 + n];
        let gn = u32::from_le_bytes(b[4 + n..8 + n].try_into().expect("4")) as usize;
        let g = &b[8 + n..8 + n + gn];
        let o = 8 + n + gn;
        let (na, sa, nna) = (
            u64_at(b, o),
            Acc::get(&b[o + 8..], float),
            u64_at(b, o + 24),
        );
        b = &b[o + 32..];
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
    // Partial groups to the groups' owners.
    let mut msgs = vec![Vec::new(); p];
    for (g, &(n, s, nn)) in &groups {
        let m = &mut msgs[owner(g, p)];
        put_key(m, g);
        m.extend_from_slice(&n.to_le_bytes());
        s.put(m);
        m.extend_from_slice(&nn.to_le_bytes());
    }
    drop(groups);
    let got = coll::all_to_all(comm, msgs)?.concat();
    let mut fin: KeyMap<Partial> = KeyMap::default();
    let mut order: Vec<&[u8]> = Vec::new();
    let mut b = &got[..];
    while !b.is_empty() {
        let n = u32::from_le_bytes(b[..4].try_into().expect("4")) as usize;
        let g = &b[4..4 + n];
        let e = fin.entry(g).or_insert_with(|| {
            order.push(g);
            (0, Acc::zero(float), 0)
        });
        e.0 += u64_at(b, 4 + n);
        e.1.add(Acc::get(&b[12 + n..], float));
        e.2 += u64_at(b, 28 + n);
        b = &b[36 + n..];
    }
    let t1 = comm.traffic();
    let mut gout = Column::empty(gc.dtype());
    for g in &order {
        let mut c = *g;
        gout.decode_push(&mut c).map_err(JoinError::Invalid)?;
    }
    let agg = match (&gb.aggregate, sum) {
        (Aggregate::Count, _) => {
            Column::Int64(order.iter().map(|g| Some(fin[g].0 as i64)).collect())
        }
        (Aggregate::Sum(_), s) => {
            let vals = order.iter().map(|g| {
                let (_, acc, nn) = fin[g];
                (nn > 0).then_some(acc)
            });
            if s.is_some_and(|s| s.2) {
                Column::Float64(
                    vals.map(|v| {
                        v.map(|a| match a {
                            Acc::Float(x) => x,
                            Acc::Int(x) => x as f64,
                        })
                    })
                    .collect(),
                )
            } else {
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
        }
    };
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
