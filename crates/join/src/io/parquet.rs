//! Parquet through arrow-rs: each rank reads the rows `[N·r/P, N·(r+1)/P)`, from the row
//! groups that hold them and only those rows of them (a row selection).

use super::common::{io_err, share};
use crate::table::Cells;
use crate::{Column, DataType, JoinError, Table};
use arrow_array::cast::AsArray;
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt64Type, UInt8Type,
};
use arrow_array::PrimitiveArray;
use arrow_array::{Array, ArrayRef, BooleanArray, NullArray, RecordBatch, StringArray};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{DataType as ArrowType, Field, Schema as ArrowSchema};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Rank `rank` of `procs`'s rows of the Parquet file `path`.
pub fn read_part(rank: usize, procs: usize, path: &Path) -> Result<Table, JoinError> {
    read_slice(Some((rank, procs)), path)
}

/// Share `i` of `n` of the Parquet file `path` (`None`: no rows, the columns alone).
pub fn read_slice(slice: Option<(usize, usize)>, path: &Path) -> Result<Table, JoinError> {
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| JoinError::NotParquet {
            file: path.display().to_string(),
            message: e.to_string(),
        })?;
    let fields: Vec<(String, ArrowType)> = builder
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    let types = fields
        .iter()
        .map(|(n, t)| {
            dtype_of(t).ok_or_else(|| JoinError::Unsupported {
                file: path.display().to_string(),
                column: n.clone(),
                ty: t.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let meta = builder.metadata().clone();
    let total: u64 = meta.row_groups().iter().map(|g| g.num_rows() as u64).sum();
    let (lo, hi) = slice.map_or((0, 0), |(i, n)| share(total, i, n));
    let mut groups = Vec::new();
    let mut selectors = Vec::new();
    let mut at = 0u64;
    for (g, rg) in meta.row_groups().iter().enumerate() {
        let (g0, g1) = (at, at + rg.num_rows() as u64);
        at = g1;
        if g1 <= lo || g0 >= hi || g0 == g1 {
            continue;
        }
        let (a, b) = (lo.max(g0), hi.min(g1));
        groups.push(g);
        for (n, select) in [(a - g0, false), (b - a, true), (g1 - b, false)] {
            if n > 0 {
                selectors.push(if select {
                    RowSelector::select(n as usize)
                } else {
                    RowSelector::skip(n as usize)
                });
            }
        }
    }
    let names: Vec<String> = fields.iter().map(|(n, _)| n.clone()).collect();
    let mut columns: Vec<Column> = types.iter().map(|&t| Column::empty(t)).collect();
    if groups.is_empty() {
        return Table::new(names, columns).map_err(JoinError::Invalid);
    }
    let reader = builder
        .with_row_groups(groups)
        .with_row_selection(RowSelection::from(selectors))
        .build()
        .map_err(|e| io_err(path, e))?;
    // Room for every selected row at once, not a doubling (and a copy) batch after batch.
    for col in &mut columns {
        col.reserve((hi - lo) as usize);
    }
    for batch in reader {
        let batch = batch.map_err(|e| io_err(path, e))?;
        for (c, col) in columns.iter_mut().enumerate() {
            let part = from_arrow(batch.column(c).as_ref());
            col.append(&part).map_err(JoinError::Invalid)?;
        }
    }
    Table::new(names, columns).map_err(JoinError::Invalid)
}

/// The column type an Arrow type reads as.
pub(crate) fn dtype_of(t: &ArrowType) -> Option<DataType> {
    Some(match t {
        ArrowType::Null => DataType::Null,
        ArrowType::Int8
        | ArrowType::Int16
        | ArrowType::Int32
        | ArrowType::Int64
        | ArrowType::UInt8
        | ArrowType::UInt16
        | ArrowType::UInt32
        | ArrowType::UInt64 => DataType::Int64,
        ArrowType::Float32 | ArrowType::Float64 => DataType::Float64,
        ArrowType::Utf8 | ArrowType::LargeUtf8 | ArrowType::Utf8View => DataType::Utf8,
        ArrowType::Boolean => DataType::Bool,
        _ => return None,
    })
}

/// A primitive array's cells converted by `f`: its values in one pass when none is NULL.
fn cells<T: ArrowPrimitiveType, U: Copy + Default>(
    a: &dyn Array,
    f: impl Fn(T::Native) -> U,
) -> Cells<U> {
    let p = a.as_primitive::<T>();
    if p.null_count() == 0 {
        Cells::from_values(p.values().iter().map(|&x| f(x)).collect())
    } else {
        p.iter().map(|v| v.map(&f)).collect()
    }
}

/// An Arrow array (of a type [`dtype_of`] takes) as a column.
pub(crate) fn from_arrow(a: &dyn Array) -> Column {
    macro_rules! ints {
        ($t:ty) => {
            Column::Int64(cells::<$t, i64>(a, |x| x as i64))
        };
    }
    match a.data_type() {
        ArrowType::Int8 => ints!(Int8Type),
        ArrowType::Int16 => ints!(Int16Type),
        ArrowType::Int32 => ints!(Int32Type),
        ArrowType::Int64 => ints!(Int64Type),
        ArrowType::UInt8 => ints!(UInt8Type),
        ArrowType::UInt16 => ints!(UInt16Type),
        ArrowType::UInt32 => ints!(UInt32Type),
        ArrowType::UInt64 => ints!(UInt64Type),
        ArrowType::Float32 => Column::Float64(cells::<Float32Type, f64>(a, f64::from)),
        ArrowType::Float64 => Column::Float64(cells::<Float64Type, f64>(a, |x| x)),
        ArrowType::Utf8 => Column::Utf8(
            a.as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect(),
        ),
        ArrowType::LargeUtf8 => Column::Utf8(
            a.as_string::<i64>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect(),
        ),
        ArrowType::Utf8View => Column::Utf8(
            a.as_string_view()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect(),
        ),
        ArrowType::Boolean => Column::Bool(a.as_boolean().iter().collect()),
        _ => Column::Null(a.len()),
    }
}

/// Fixed-width cells as an Arrow array: the values copied once, the NULL flags as its validity.
fn primitive<T: ArrowPrimitiveType>(c: &Cells<T::Native>) -> PrimitiveArray<T>
where
    T::Native: Default,
{
    let nulls = c
        .has_nulls()
        .then(|| NullBuffer::from_iter((0..c.len()).map(|i| !c.is_null(i))));
    PrimitiveArray::new(ScalarBuffer::from(c.values().to_vec()), nulls)
}

/// A column as an Arrow array.
pub(crate) fn to_arrow(c: &Column) -> (ArrowType, ArrayRef) {
    match c {
        Column::Null(n) => (ArrowType::Null, Arc::new(NullArray::new(*n))),
        Column::Int64(v) => (ArrowType::Int64, Arc::new(primitive::<Int64Type>(v))),
        Column::Float64(v) => (ArrowType::Float64, Arc::new(primitive::<Float64Type>(v))),
        Column::Utf8(v) => (
            ArrowType::Utf8,
            Arc::new(v.iter().map(|s| s.as_deref()).collect::<StringArray>()),
        ),
        Column::Bool(v) => (ArrowType::Boolean, Arc::new(BooleanArray::from(v.clone()))),
    }
}

/// Fixed-width cells as an Arrow array, the values moved (not copied) into its buffer.
fn primitive_owned<T: ArrowPrimitiveType>(c: Cells<T::Native>) -> PrimitiveArray<T>
where
    T::Native: Default,
{
    let (values, nulls) = c.into_parts();
    let nulls = nulls
        .filter(|f| f.contains(&true))
        .map(|f| NullBuffer::from_iter(f.iter().map(|&n| !n)));
    PrimitiveArray::new(ScalarBuffer::from(values), nulls)
}

/// The record batch of `arrays` under `fields`, and its schema (no columns: an empty batch).
fn batch_of(
    fields: Vec<Field>,
    arrays: Vec<ArrayRef>,
) -> Result<(Arc<ArrowSchema>, RecordBatch), arrow_schema::ArrowError> {
    let schema = Arc::new(ArrowSchema::new(fields));
    let batch = if arrays.is_empty() {
        RecordBatch::new_empty(schema.clone())
    } else {
        RecordBatch::try_new(schema.clone(), arrays)?
    };
    Ok((schema, batch))
}

/// `table` as one Arrow record batch and its schema, as [`to_batch`] but taking the table:
/// the int64 and float64 columns' values become the arrays' buffers as they are.
pub(crate) fn into_batch(
    table: Table,
) -> Result<(Arc<ArrowSchema>, RecordBatch), arrow_schema::ArrowError> {
    let (names, columns) = table.into_parts();
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = names
        .iter()
        .zip(columns)
        .map(|(n, c)| {
            let (t, a): (ArrowType, ArrayRef) = match c {
                Column::Int64(v) => (ArrowType::Int64, Arc::new(primitive_owned::<Int64Type>(v))),
                Column::Float64(v) => (
                    ArrowType::Float64,
                    Arc::new(primitive_owned::<Float64Type>(v)),
                ),
                c => to_arrow(&c),
            };
            (Field::new(n, t, true), a)
        })
        .unzip();
    batch_of(fields, arrays)
}

/// `table` as one Arrow record batch and its schema (every field nullable).
pub(crate) fn to_batch(
    table: &Table,
) -> Result<(Arc<ArrowSchema>, RecordBatch), arrow_schema::ArrowError> {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = table
        .names()
        .iter()
        .zip(table.columns())
        .map(|(n, c)| {
            let (t, a) = to_arrow(c);
            (Field::new(n, t, true), a)
        })
        .unzip();
    batch_of(fields, arrays)
}

/// Writes `table` as Parquet (Snappy-compressed, row groups of the writer's default rows).
pub fn write(path: &Path, table: &Table) -> Result<(), JoinError> {
    write_parts(path, vec![table.clone()])
}

/// A column chunk to encode: its writer and the pieces of the parts it holds.
type Chunk = (ArrowColumnWriter, Vec<ArrowLeafColumn>);

/// Writes the rows of `parts` (tables of one schema), back to back, as one Parquet file
/// (Snappy-compressed, row groups of the writer's default rows, across the parts' bounds),
/// without first copying them into one table. The column chunks of all row groups are
/// encoded on as many threads as the machine has cores (the writer alone encodes one chunk
/// after another on one), then appended in order.
pub fn write_parts(path: &Path, parts: Vec<Table>) -> Result<(), JoinError> {
    let err = |e: parquet::errors::ParquetError| io_err(path, e);
    let types = parts.first().map(Table::dtypes);
    let parts = if parts.iter().any(|t| Some(t.dtypes()) != types) {
        // A part's NULL column takes the others' type when the parts are joined first.
        vec![Table::concat_owned(parts).map_err(JoinError::Invalid)?]
    } else if parts.is_empty() {
        return Err(JoinError::Invalid("no table to write".into()));
    } else {
        parts
    };
    let mut batches = Vec::with_capacity(parts.len());
    let mut schema = None;
    for t in parts {
        let (s, b) = into_batch(t).map_err(|e| io_err(path, e))?;
        schema.get_or_insert(s);
        batches.push(b);
    }
    let schema = schema.expect("a part");
    let file = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let group_rows = props.max_row_group_row_count().unwrap_or(1 << 20).max(1);
    let w = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(err)?;
    let (mut file_writer, factory) = w.into_serialized_writer().map_err(err)?;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    // Every (row group, leaf column) chunk to encode, with its writer and its pieces (the
    // slices of the parts the row group covers).
    let mut tasks: Vec<Chunk> = Vec::new();
    let mut groups = 0;
    for (g, at) in (0..rows).step_by(group_rows).enumerate() {
        let end = rows.min(at + group_rows);
        let first = tasks.len();
        tasks.extend(
            factory
                .create_column_writers(g)
                .map_err(err)?
                .into_iter()
                .map(|w| (w, Vec::new())),
        );
        let mut start = 0;
        for b in &batches {
            let (lo, hi) = (at.max(start), end.min(start + b.num_rows()));
            if lo < hi {
                let mut leaves = Vec::new();
                for (field, array) in schema.fields().iter().zip(b.columns()) {
                    leaves.extend(
                        compute_leaves(field, &array.slice(lo - start, hi - lo)).map_err(err)?,
                    );
                }
                for (t, leaf) in tasks[first..].iter_mut().zip(leaves) {
                    t.1.push(leaf);
                }
            }
            start += b.num_rows();
        }
        groups += 1;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(tasks.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let per_group = tasks.len() / groups.max(1);
    let slots: Vec<Mutex<Option<Chunk>>> = tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let encoded: Vec<Mutex<Option<ArrowColumnChunk>>> =
        (0..slots.len()).map(|_| Mutex::new(None)).collect();
    let failed = std::thread::scope(|s| {
        let work = || -> Result<(), parquet::errors::ParquetError> {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = slots.get(i) else {
                    return Ok(());
                };
                let (mut w, leaves) = slot.lock().expect("unpoisoned").take().expect("once");
                for leaf in &leaves {
                    w.write(leaf)?;
                }
                *encoded[i].lock().expect("unpoisoned") = Some(w.close()?);
            }
        };
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mine = work();
        handles
            .into_iter()
            .map(|h| h.join().expect("an encoding thread panicked"))
            .chain([mine])
            .find_map(Result::err)
    });
    if let Some(e) = failed {
        return Err(err(e));
    }
    drop(batches);
    let mut chunks = encoded
        .into_iter()
        .map(|c| c.into_inner().expect("unpoisoned").expect("encoded"));
    for _ in 0..groups {
        let mut rg = file_writer.next_row_group().map_err(err)?;
        for chunk in chunks.by_ref().take(per_group) {
            chunk.append_to_row_group(&mut rg).map_err(err)?;
        }
        rg.close().map_err(err)?;
    }
    file_writer.close().map_err(err)?;
    Ok(())
}
