//! CSV: a header row, then one record a line. Each rank reads the byte range
//! `[size·r/P, size·(r+1)/P)` of the data cut at line ends (a line belongs to the rank whose
//! range holds its first byte), so a quoted field must not hold a line break. An empty field
//! is NULL. Types are inferred per column (int64, float64, bool, else string; a column with no
//! value is of the NULL type) and agreed by all ranks, or given by a [`Schema`].

use super::common::{io_err, share, Schema};
use crate::coll;
use crate::{Column, DataType, JoinError, Table};
use deinsum_exec::Communicator;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::Path;

/// Seen-value bits of a column, agreed over ranks by OR.
const SEEN_BOOL: u64 = 1;
const SEEN_INT: u64 = 2;
const SEEN_FLOAT: u64 = 4;
const SEEN_STRING: u64 = 8;

/// The bits a value sets.
fn seen(v: &str) -> u64 {
    if v.parse::<i64>().is_ok() {
        SEEN_INT
    } else if v.parse::<f64>().is_ok() {
        SEEN_FLOAT
    } else if parse_bool(v).is_some() {
        SEEN_BOOL
    } else {
        SEEN_STRING
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// The type of a column whose values set `bits` on some rank.
fn resolve(bits: u64) -> DataType {
    if bits == 0 {
        DataType::Null
    } else if bits & SEEN_STRING != 0 || (bits & SEEN_BOOL != 0 && bits != SEEN_BOOL) {
        DataType::Utf8
    } else if bits & SEEN_FLOAT != 0 {
        DataType::Float64
    } else if bits & SEEN_INT != 0 {
        DataType::Int64
    } else {
        DataType::Bool
    }
}

/// Whether `v` reads as a value of `t`.
fn fits(v: &str, t: DataType) -> bool {
    match t {
        DataType::Null | DataType::Utf8 => true,
        DataType::Int64 => v.parse::<i64>().is_ok(),
        DataType::Float64 => v.parse::<f64>().is_ok(),
        DataType::Bool => parse_bool(v).is_some(),
    }
}

/// The header's names and the byte offset where the data starts.
fn header(path: &Path, file: &std::fs::File) -> Result<(Vec<String>, u64), JoinError> {
    let mut r = std::io::BufReader::new(file);
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)
        .map_err(|e| io_err(path, e))?;
    if line.is_empty() {
        return Err(JoinError::Csv {
            file: path.display().to_string(),
            line: 1,
            message: "no header row".into(),
        });
    }
    let start = line.len() as u64;
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(&line[..]);
    let rec = rd
        .records()
        .next()
        .transpose()
        .map_err(|e| JoinError::Csv {
            file: path.display().to_string(),
            line: 1,
            message: e.to_string(),
        })?
        .unwrap_or_default();
    Ok((rec.iter().map(|s| s.trim().to_string()).collect(), start))
}

/// The first line start at or after `pos` (a line starts after a `\n`), given that `start`
/// is one.
fn line_start(file: &mut std::fs::File, start: u64, pos: u64, size: u64) -> std::io::Result<u64> {
    if pos <= start {
        return Ok(start);
    }
    if pos >= size {
        return Ok(size);
    }
    file.seek(SeekFrom::Start(pos - 1))?;
    let mut r = std::io::BufReader::new(file);
    let mut skipped = Vec::new();
    let n = r.read_until(b'\n', &mut skipped)?;
    Ok((pos - 1 + n as u64).min(size))
}

/// The values of this rank's lines, per column (`None` for an empty field), or the error
/// of its first bad line.
struct Part {
    names: Vec<String>,
    cells: Vec<Vec<Option<String>>>,
    bits: Vec<u64>,
}

fn read_local(
    path: &Path,
    slice: Option<(usize, usize)>,
    schema: &Schema,
) -> Result<Part, JoinError> {
    let mut file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let size = file.metadata().map_err(|e| io_err(path, e))?.len();
    let (names, start) = header(path, &file)?;
    let (lo, hi) = slice.map_or((0, 0), |(i, n)| share(size - start, i, n));
    let begin = line_start(&mut file, start, start + lo, size).map_err(|e| io_err(path, e))?;
    let end = line_start(&mut file, start, start + hi, size).map_err(|e| io_err(path, e))?;
    let mut bytes = vec![0u8; (end.saturating_sub(begin)) as usize];
    file.seek(SeekFrom::Start(begin))
        .and_then(|_| file.read_exact(&mut bytes))
        .map_err(|e| io_err(path, e))?;
    let types: Vec<Option<DataType>> = names.iter().map(|n| schema.get(n)).collect();
    let mut cells: Vec<Vec<Option<String>>> = vec![Vec::new(); names.len()];
    let mut bits = vec![0u64; names.len()];
    let mut rd = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(&bytes[..]);
    // The absolute line of a line in this range, counted only when an error needs it.
    let line_of = |local: u64| -> u64 {
        let before = std::fs::read(path)
            .map(|all| {
                all[start as usize..begin as usize]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
            })
            .unwrap_or(0);
        1 + before as u64 + local
    };
    let bad = |local: u64, message: String| JoinError::Csv {
        file: path.display().to_string(),
        line: line_of(local),
        message,
    };
    let mut rec = csv::StringRecord::new();
    loop {
        match rd.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let local = e.position().map_or(1, |p| p.line());
                return Err(bad(local, e.to_string()));
            }
        }
        let local = rec.position().map_or(1, |p| p.line());
        if rec.len() == 1 && rec[0].is_empty() && names.len() != 1 {
            continue; // a blank line
        }
        if rec.len() != names.len() {
            return Err(bad(
                local,
                format!("{} fields, the header has {}", rec.len(), names.len()),
            ));
        }
        for (c, v) in rec.iter().enumerate() {
            if v.is_empty() {
                cells[c].push(None);
                continue;
            }
            match types[c] {
                Some(t) if !fits(v, t) => {
                    return Err(bad(
                        local,
                        format!("`{v}` in column `{}` is not {}", names[c], t.name()),
                    ))
                }
                Some(_) => {}
                None => bits[c] |= seen(v),
            }
            cells[c].push(Some(v.to_string()));
        }
    }
    Ok(Part { names, cells, bits })
}

/// This rank's rows of the CSV file `path` (collective: the ranks agree on failure and on
/// the inferred types).
pub fn read_part<C: Communicator>(
    comm: &C,
    path: &Path,
    schema: &Schema,
) -> Result<Table, JoinError> {
    read_slice(comm, path, schema, Some((comm.rank(), comm.size())))
}

/// Share `i` of `n` of the CSV file `path` (`None`: no rows, the columns alone), as this rank
/// reads it (collective, as [`read_part`]).
pub fn read_slice<C: Communicator>(
    comm: &C,
    path: &Path,
    schema: &Schema,
    slice: Option<(usize, usize)>,
) -> Result<Table, JoinError> {
    let local = read_local(path, slice, schema);
    // Every rank learns the first failing rank's error, so all report the same one.
    let local = coll::agree(comm, local);
    let Part {
        names,
        cells,
        mut bits,
    } = local?;
    // OR of the seen bits over ranks: a sum of one-hot words per bit keeps them apart.
    let mut counts: Vec<u64> = bits
        .iter()
        .flat_map(|&b| (0..4).map(move |k| (b >> k) & 1))
        .collect();
    coll::all_sum(comm, &mut counts)?;
    for (c, b) in bits.iter_mut().enumerate() {
        *b = (0..4).fold(0, |a, k| a | (((counts[c * 4 + k] > 0) as u64) << k));
    }
    let mut columns = Vec::with_capacity(names.len());
    for (c, vals) in cells.into_iter().enumerate() {
        let t = schema.get(&names[c]).unwrap_or_else(|| resolve(bits[c]));
        columns.push(convert(vals, t));
    }
    Table::new(names, columns).map_err(JoinError::Invalid)
}

/// Cells as a column of `t` (every value fits: checked or inferred).
fn convert(vals: Vec<Option<String>>, t: DataType) -> Column {
    match t {
        DataType::Null => Column::Null(vals.len()),
        DataType::Utf8 => Column::Utf8(vals),
        DataType::Int64 => Column::Int64(
            vals.iter()
                .map(|v| v.as_deref().and_then(|s| s.parse().ok()))
                .collect(),
        ),
        DataType::Float64 => Column::Float64(
            vals.iter()
                .map(|v| v.as_deref().and_then(|s| s.parse().ok()))
                .collect(),
        ),
        DataType::Bool => Column::Bool(
            vals.iter()
                .map(|v| v.as_deref().and_then(parse_bool))
                .collect(),
        ),
    }
}

/// A float as CSV text that reads back as a float (`1.0`, not `1`).
fn float_text(x: f64) -> String {
    let s = x.to_string();
    if x.is_finite() && !s.contains(['.', 'e', 'E']) {
        format!("{s}.0")
    } else {
        s
    }
}

/// Writes `table` as CSV with a header row (NULL as an empty field) to the file `path`.
pub fn write(path: &Path, table: &Table) -> Result<(), JoinError> {
    let file = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    write_to(std::io::BufWriter::new(file), table).map_err(|e| io_err(path, e))
}

/// Writes `table` as CSV with a header row (NULL as an empty field) to `w`.
pub fn write_to<W: std::io::Write>(w: W, table: &Table) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(w);
    w.write_record(table.names())?;
    let mut rec: Vec<String> = Vec::with_capacity(table.columns().len());
    for i in 0..table.rows() {
        rec.clear();
        for c in table.columns() {
            rec.push(match c {
                Column::Float64(v) => v.get(i).map(float_text).unwrap_or_default(),
                c => c.text(i),
            });
        }
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}
