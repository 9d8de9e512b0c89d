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
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;

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
    let schema = Arc::new(ArrowSchema::new(fields));
    let batch = if arrays.is_empty() {
        RecordBatch::new_empty(schema.clone())
    } else {
        RecordBatch::try_new(schema.clone(), arrays)?
    };
    Ok((schema, batch))
}

/// Writes `table` as Parquet (Snappy-compressed, the writer's row groups).
pub fn write(path: &Path, table: &Table) -> Result<(), JoinError> {
    let (schema, batch) = to_batch(table).map_err(|e| io_err(path, e))?;
    let file = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut w = ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| io_err(path, e))?;
    w.write(&batch).map_err(|e| io_err(path, e))?;
    w.close().map_err(|e| io_err(path, e))?;
    Ok(())
}
