//! Every rank's result at rank 0, where a backend whose ranks are separate processes (MPI)
//! reports and writes the output: tables travel with their own names and types (a rank's
//! aggregate column may have widened to float64 where another's did not), runs with their
//! measured bytes. Called after the measured work, so its bytes are in no figure.

use crate::coll;
use crate::{Column, DataType, JoinError, RankJoin, Table};
use deinsum_exec::{Communicator, Traffic};

fn type_code(t: DataType) -> u8 {
    match t {
        DataType::Null => 0,
        DataType::Int64 => 1,
        DataType::Float64 => 2,
        DataType::Utf8 => 3,
        DataType::Bool => 4,
    }
}

fn type_of_code(c: u8) -> Result<DataType, JoinError> {
    Ok(match c {
        0 => DataType::Null,
        1 => DataType::Int64,
        2 => DataType::Float64,
        3 => DataType::Utf8,
        4 => DataType::Bool,
        _ => return Err(JoinError::Invalid(format!("unknown column type code {c}"))),
    })
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], JoinError> {
    if b.len() < n {
        return Err(JoinError::Invalid("a gathered message ends early".into()));
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn take_u64(b: &mut &[u8]) -> Result<u64, JoinError> {
    Ok(u64::from_le_bytes(take(b, 8)?.try_into().expect("8")))
}

/// Appends `t` with its names and types (self-describing) to `out`.
pub fn encode_table(t: &Table, out: &mut Vec<u8>) {
    out.extend_from_slice(&(t.names().len() as u64).to_le_bytes());
    for (n, c) in t.names().iter().zip(t.columns()) {
        out.extend_from_slice(&(n.len() as u64).to_le_bytes());
        out.extend_from_slice(n.as_bytes());
        out.push(type_code(c.dtype()));
    }
    out.extend_from_slice(&(t.rows() as u64).to_le_bytes());
    let all: Vec<usize> = (0..t.names().len()).collect();
    for i in 0..t.rows() {
        t.encode_row(i, &all, out);
    }
}

/// The table [`encode_table`] wrote at the front of `b` (which then points past it).
pub fn decode_table(b: &mut &[u8]) -> Result<Table, JoinError> {
    let ncols = take_u64(b)? as usize;
    let mut names = Vec::with_capacity(ncols);
    let mut cols = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let n = take_u64(b)? as usize;
        let name = String::from_utf8(take(b, n)?.to_vec())
            .map_err(|e| JoinError::Invalid(e.to_string()))?;
        names.push(name);
        cols.push(Column::empty(type_of_code(take(b, 1)?[0])?));
    }
    let rows = take_u64(b)?;
    for _ in 0..rows {
        for c in &mut cols {
            c.decode_push(b).map_err(JoinError::Invalid)?;
        }
    }
    Table::new(names, cols).map_err(JoinError::Invalid)
}

/// Every rank's `mine` at rank 0 in rank order (collective); `None` on the other ranks.
pub fn gather_bytes<C: Communicator>(
    comm: &C,
    mine: Vec<u8>,
) -> Result<Option<Vec<Vec<u8>>>, JoinError> {
    let p = comm.size();
    let mut msgs = vec![Vec::new(); p];
    msgs[0] = mine;
    let got = coll::all_to_all(comm, msgs)?;
    Ok((comm.rank() == 0).then_some(got))
}

/// Every rank's table and bytes moved at rank 0 (collective); `None` on the other ranks.
pub fn gather_tables<C: Communicator>(
    comm: &C,
    t: &Table,
    traffic: Traffic,
) -> Result<Option<Vec<(Table, Traffic)>>, JoinError> {
    let mut mine = Vec::new();
    mine.extend_from_slice(&traffic.sent.to_le_bytes());
    mine.extend_from_slice(&traffic.received.to_le_bytes());
    encode_table(t, &mut mine);
    let Some(all) = gather_bytes(comm, mine)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(all.len());
    for part in &all {
        let mut b = &part[..];
        let sent = take_u64(&mut b)?;
        let received = take_u64(&mut b)?;
        out.push((decode_table(&mut b)?, Traffic { sent, received }));
    }
    Ok(Some(out))
}

/// Every rank's run at rank 0 (collective); `None` on the other ranks. The inspection and
/// strategy are the same on every rank, so rank 0's stand for all.
pub fn gather_runs<C: Communicator>(
    comm: &C,
    run: RankJoin,
) -> Result<Option<Vec<RankJoin>>, JoinError> {
    let mut mine = Vec::new();
    for x in [
        run.measured.sent,
        run.measured.received,
        run.inspector.sent,
        run.inspector.received,
        run.seconds.to_bits(),
    ] {
        mine.extend_from_slice(&x.to_le_bytes());
    }
    encode_table(&run.table, &mut mine);
    drop(run.table);
    let Some(all) = gather_bytes(comm, mine)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(all.len());
    for part in &all {
        let mut b = &part[..];
        let mut f = [0u64; 5];
        for x in &mut f {
            *x = take_u64(&mut b)?;
        }
        out.push(RankJoin {
            table: decode_table(&mut b)?,
            inspection: run.inspection.clone(),
            strategy: run.strategy,
            measured: Traffic {
                sent: f[0],
                received: f[1],
            },
            inspector: Traffic {
                sent: f[2],
                received: f[3],
            },
            seconds: f64::from_bits(f[4]),
        });
    }
    Ok(Some(out))
}
