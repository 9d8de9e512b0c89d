//! Tables as Arrow IPC streams, the form in which Python hands over pyarrow Tables and pandas
//! DataFrames (through pyarrow) and gets the join back: no file, no unsafe FFI.

use super::parquet::{dtype_of, from_arrow, to_batch};
use crate::{Column, JoinError, Table};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;

fn ipc_err(what: &str, e: impl std::fmt::Display) -> JoinError {
    JoinError::Io {
        file: what.to_string(),
        message: e.to_string(),
    }
}

/// The table of an Arrow IPC stream (`what` names it in errors): every batch's rows.
pub fn read(what: &str, bytes: &[u8]) -> Result<Table, JoinError> {
    let reader = StreamReader::try_new(bytes, None).map_err(|e| ipc_err(what, e))?;
    let schema = reader.schema();
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let mut columns = schema
        .fields()
        .iter()
        .map(|f| {
            dtype_of(f.data_type())
                .map(Column::empty)
                .ok_or_else(|| JoinError::Unsupported {
                    file: what.to_string(),
                    column: f.name().clone(),
                    ty: f.data_type().to_string(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    for batch in reader {
        let batch = batch.map_err(|e| ipc_err(what, e))?;
        for (c, col) in columns.iter_mut().enumerate() {
            col.append(&from_arrow(batch.column(c).as_ref()))
                .map_err(JoinError::Invalid)?;
        }
    }
    Table::new(names, columns).map_err(JoinError::Invalid)
}

/// `table` as an Arrow IPC stream of one batch.
pub fn write(table: &Table) -> Result<Vec<u8>, JoinError> {
    let (schema, batch) = to_batch(table).map_err(|e| ipc_err("the output", e))?;
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new(&mut out, &schema).map_err(|e| ipc_err("the output", e))?;
    w.write(&batch).map_err(|e| ipc_err("the output", e))?;
    w.finish().map_err(|e| ipc_err("the output", e))?;
    drop(w);
    Ok(out)
}
