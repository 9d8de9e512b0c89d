//! The in-memory table: named, typed, nullable columns, and the byte encoding rows travel in.
//!
//! A cell is encoded as a tag byte (0: NULL, 1: a value) followed by the value: 8 bytes for
//! int64 and float64 (little endian), 1 for bool, a u32 length and the UTF-8 bytes for a
//! string. Every figure the planner predicts is a sum of these sizes, so the encoding is
//! fixed here and nowhere else.

use serde::Serialize;

/// The row number that stands for "no row" in a join index ([`crate::kernel::Pairs`]: the
/// NULL side of an outer pair); defined here, below the kernel, as the gathers read it.
pub const NO_ROW: u32 = u32::MAX;

/// A column's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    /// Only NULLs and no type of its own (an empty CSV column, or one of an empty file): it
    /// takes the other table's type where it meets one.
    Null,
    /// 64-bit signed integers.
    Int64,
    /// 64-bit floats.
    Float64,
    /// UTF-8 strings.
    Utf8,
    /// Booleans.
    Bool,
}

impl DataType {
    /// The name `--schema` and reports use.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Null => "null",
            DataType::Int64 => "int64",
            DataType::Float64 => "float64",
            DataType::Utf8 => "string",
            DataType::Bool => "bool",
        }
    }

    /// The type of a `--schema` name (`int`, `float`, `str` and `boolean` accepted too).
    pub fn from_name(s: &str) -> Option<DataType> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "int64" | "int" | "bigint" | "integer" => DataType::Int64,
            "float64" | "float" | "double" => DataType::Float64,
            "string" | "str" | "utf8" | "varchar" => DataType::Utf8,
            "bool" | "boolean" => DataType::Bool,
            _ => return None,
        })
    }
}

/// A fixed-width column's cells as Arrow keeps them: the values back to back (a NULL's slot
/// holds the type's default) and, only when some cell is NULL, a flag a cell. Half the bytes of
/// a `Vec<Option<i64>>`, and a gather of rows without NULLs is a plain copy of words.
#[derive(Clone, Debug, Default)]
pub struct Cells<T> {
    values: Vec<T>,
    /// `nulls[i]`: cell `i` is NULL (`None`: no cell is).
    nulls: Option<Vec<bool>>,
}

impl<T: Copy + Default> Cells<T> {
    /// No cells, room for `n`.
    pub fn with_capacity(n: usize) -> Cells<T> {
        Cells {
            values: Vec::with_capacity(n),
            nulls: None,
        }
    }

    /// The cells `values`, none NULL.
    pub fn from_values(values: Vec<T>) -> Cells<T> {
        Cells {
            values,
            nulls: None,
        }
    }

    /// `n` NULLs.
    pub fn nulls(n: usize) -> Cells<T> {
        Cells {
            values: vec![T::default(); n],
            nulls: Some(vec![true; n]),
        }
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are no cells.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values and the NULL flags (`None`: no cell is NULL), moved out.
    pub fn into_parts(self) -> (Vec<T>, Option<Vec<bool>>) {
        (self.values, self.nulls)
    }

    /// The values (a NULL's slot holds the default).
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// Whether some cell is NULL (else every value is one).
    pub fn has_nulls(&self) -> bool {
        self.nulls.as_ref().is_some_and(|n| n.contains(&true))
    }

    /// Whether cell `i` is NULL.
    #[inline]
    pub fn is_null(&self, i: usize) -> bool {
        self.nulls.as_ref().is_some_and(|n| n[i])
    }

    /// Cell `i`, `None` when NULL.
    #[inline]
    pub fn get(&self, i: usize) -> Option<T> {
        (!self.is_null(i)).then(|| self.values[i])
    }

    /// The cells in order.
    pub fn iter(&self) -> impl Iterator<Item = Option<T>> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Room for `n` more cells.
    pub fn reserve(&mut self, n: usize) {
        self.values.reserve(n);
        if let Some(f) = &mut self.nulls {
            f.reserve(n);
        }
    }

    /// Appends a value.
    #[inline]
    pub fn push_value(&mut self, x: T) {
        self.values.push(x);
        if let Some(f) = &mut self.nulls {
            f.push(false);
        }
    }

    /// Appends a cell.
    #[inline]
    pub fn push(&mut self, x: Option<T>) {
        match x {
            Some(x) => self.push_value(x),
            None => {
                let n = self.values.len();
                self.nulls.get_or_insert_with(|| vec![false; n]).push(true);
                self.values.push(T::default());
            }
        }
    }

    /// Appends `other`'s cells.
    pub fn extend(&mut self, other: &Cells<T>) {
        let n = self.values.len();
        match (&mut self.nulls, &other.nulls) {
            (Some(a), Some(b)) => a.extend_from_slice(b),
            (Some(a), None) => a.resize(n + other.len(), false),
            (None, Some(b)) => {
                let mut a = vec![false; n];
                a.extend_from_slice(b);
                self.nulls = Some(a);
            }
            (None, None) => {}
        }
        self.values.extend_from_slice(&other.values);
    }

    /// The cells at `rows` (all present), in that order: a gather of the values.
    pub fn take(&self, rows: &[usize]) -> Cells<T> {
        Cells {
            values: rows.iter().map(|&i| self.values[i]).collect(),
            nulls: self
                .nulls
                .as_ref()
                .map(|f| rows.iter().map(|&i| f[i]).collect()),
        }
    }

    /// `n` cells, the `x`-th the cell at `row(x)`, NULL where that is `None`.
    pub fn take_by(&self, n: usize, row: impl Fn(usize) -> Option<usize>) -> Cells<T> {
        let mut values = Vec::with_capacity(n);
        let mut nulls: Option<Vec<bool>> = None;
        for x in 0..n {
            match row(x) {
                Some(i) if !self.is_null(i) => {
                    values.push(self.values[i]);
                    if let Some(f) = &mut nulls {
                        f.push(false);
                    }
                }
                _ => {
                    nulls.get_or_insert_with(|| vec![false; x]).push(true);
                    values.push(T::default());
                }
            }
        }
        Cells { values, nulls }
    }

    /// The cells at `rows` ([`Pairs`](crate::kernel::Pairs) row numbers), NULL where a row
    /// is [`NO_ROW`]: a plain gather of the values when neither kind of NULL occurs (the
    /// common case of an inner join's output), one pass with flags otherwise.
    pub fn gather(&self, rows: &[u32]) -> Cells<T> {
        let absent = rows.contains(&NO_ROW);
        match (&self.nulls, absent) {
            (None, false) => Cells {
                values: rows.iter().map(|&i| self.values[i as usize]).collect(),
                nulls: None,
            },
            _ => {
                let mut values = Vec::with_capacity(rows.len());
                let mut nulls = Vec::with_capacity(rows.len());
                for &i in rows {
                    if i == NO_ROW || self.is_null(i as usize) {
                        values.push(T::default());
                        nulls.push(true);
                    } else {
                        values.push(self.values[i as usize]);
                        nulls.push(false);
                    }
                }
                Cells {
                    values,
                    nulls: Some(nulls),
                }
            }
        }
    }

    /// Cell by cell, this cell where it has a value, else `other`'s (SQL COALESCE).
    pub fn coalesce(&self, other: &Cells<T>) -> Cells<T> {
        if self.nulls.is_none() {
            return self.clone();
        }
        self.iter()
            .zip(other.iter())
            .map(|(a, b)| a.or(b))
            .collect()
    }
}

impl<T: Copy + Default + PartialEq> PartialEq for Cells<T> {
    /// Cells equal cell by cell (a NULL slot's value does not count).
    fn eq(&self, other: &Cells<T>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<T: Copy + Default> FromIterator<Option<T>> for Cells<T> {
    fn from_iter<I: IntoIterator<Item = Option<T>>>(it: I) -> Cells<T> {
        let it = it.into_iter();
        let mut c = Cells::with_capacity(it.size_hint().0);
        for x in it {
            c.push(x);
        }
        c
    }
}

impl<T: Copy + Default> From<Vec<Option<T>>> for Cells<T> {
    fn from(v: Vec<Option<T>>) -> Cells<T> {
        v.into_iter().collect()
    }
}

/// One column's cells.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// `n` NULLs of no type.
    Null(usize),
    /// int64 cells.
    Int64(Cells<i64>),
    /// float64 cells.
    Float64(Cells<f64>),
    /// string cells.
    Utf8(Vec<Option<String>>),
    /// bool cells.
    Bool(Vec<Option<bool>>),
}

/// Bytes of an encoded NULL cell.
pub const NULL_CELL: usize = 1;
/// Bytes of an encoded int64 or float64 cell (its tag and 8 bytes).
const NUMBER_CELL: usize = 9;

impl Column {
    /// An empty column of type `t`.
    pub fn empty(t: DataType) -> Column {
        Column::nulls(t, 0)
    }

    /// `n` NULLs of type `t`.
    pub fn nulls(t: DataType, n: usize) -> Column {
        match t {
            DataType::Null => Column::Null(n),
            DataType::Int64 => Column::Int64(Cells::nulls(n)),
            DataType::Float64 => Column::Float64(Cells::nulls(n)),
            DataType::Utf8 => Column::Utf8(vec![None; n]),
            DataType::Bool => Column::Bool(vec![None; n]),
        }
    }

    /// Its type.
    pub fn dtype(&self) -> DataType {
        match self {
            Column::Null(_) => DataType::Null,
            Column::Int64(_) => DataType::Int64,
            Column::Float64(_) => DataType::Float64,
            Column::Utf8(_) => DataType::Utf8,
            Column::Bool(_) => DataType::Bool,
        }
    }

    /// Number of cells.
    pub fn len(&self) -> usize {
        match self {
            Column::Null(n) => *n,
            Column::Int64(v) => v.len(),
            Column::Float64(v) => v.len(),
            Column::Utf8(v) => v.len(),
            Column::Bool(v) => v.len(),
        }
    }

    /// Whether it has no cells.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for `n` more cells.
    pub fn reserve(&mut self, n: usize) {
        match self {
            Column::Null(_) => {}
            Column::Int64(v) => v.reserve(n),
            Column::Float64(v) => v.reserve(n),
            Column::Utf8(v) => v.reserve(n),
            Column::Bool(v) => v.reserve(n),
        }
    }

    /// Whether cell `i` is NULL.
    pub fn is_null(&self, i: usize) -> bool {
        match self {
            Column::Null(_) => true,
            Column::Int64(v) => v.is_null(i),
            Column::Float64(v) => v.is_null(i),
            Column::Utf8(v) => v[i].is_none(),
            Column::Bool(v) => v[i].is_none(),
        }
    }

    /// Encoded bytes of cell `i`.
    pub fn cell_bytes(&self, i: usize) -> usize {
        match self {
            Column::Null(_) => NULL_CELL,
            Column::Int64(v) => v.get(i).map_or(NULL_CELL, |_| NUMBER_CELL),
            Column::Float64(v) => v.get(i).map_or(NULL_CELL, |_| NUMBER_CELL),
            Column::Bool(v) => v[i].map_or(NULL_CELL, |_| 2),
            Column::Utf8(v) => v[i].as_ref().map_or(NULL_CELL, |s| 5 + s.len()),
        }
    }

    /// Appends the encoding of cell `i` to `out`.
    pub fn encode_cell(&self, i: usize, out: &mut Vec<u8>) {
        match self {
            Column::Null(_) => out.push(0),
            Column::Int64(v) => put(out, v.get(i).map(i64::to_le_bytes).as_ref().map(|b| &b[..])),
            Column::Float64(v) => put(out, v.get(i).map(f64::to_le_bytes).as_ref().map(|b| &b[..])),
            Column::Bool(v) => put(out, v[i].map(|b| [b as u8]).as_ref().map(|b| &b[..])),
            Column::Utf8(v) => match &v[i] {
                None => out.push(0),
                Some(s) => {
                    out.push(1);
                    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
            },
        }
    }

    /// Appends the value of cell `i` without its tag (strings with their length) to `out`,
    /// as a key is made of; `false` (nothing written) for a NULL. Floats are normalized so
    /// that equal numbers give equal bytes (-0 as 0, every NaN as one).
    pub fn key_value(&self, i: usize, out: &mut Vec<u8>) -> bool {
        match self {
            Column::Null(_) => false,
            Column::Int64(v) => v.get(i).is_some_and(|x| {
                out.extend_from_slice(&x.to_le_bytes());
                true
            }),
            Column::Float64(v) => v.get(i).is_some_and(|x| {
                let x = if x == 0.0 {
                    0.0
                } else if x.is_nan() {
                    f64::NAN
                } else {
                    x
                };
                out.extend_from_slice(&x.to_bits().to_le_bytes());
                true
            }),
            Column::Bool(v) => v[i].is_some_and(|x| {
                out.push(x as u8);
                true
            }),
            Column::Utf8(v) => v[i].as_ref().is_some_and(|s| {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
                true
            }),
        }
    }

    /// Decodes one cell from the front of `buf` and appends it.
    pub fn decode_push(&mut self, buf: &mut &[u8]) -> Result<(), String> {
        let tag = take(buf, 1)?[0];
        let null = tag == 0;
        match self {
            Column::Null(n) => {
                if !null {
                    return Err("a value in a NULL column".into());
                }
                *n += 1;
            }
            Column::Int64(v) => v.push(if null {
                None
            } else {
                Some(i64::from_le_bytes(take(buf, 8)?.try_into().expect("8")))
            }),
            Column::Float64(v) => v.push(if null {
                None
            } else {
                Some(f64::from_le_bytes(take(buf, 8)?.try_into().expect("8")))
            }),
            Column::Bool(v) => v.push(if null {
                None
            } else {
                Some(take(buf, 1)?[0] != 0)
            }),
            Column::Utf8(v) => v.push(if null {
                None
            } else {
                let n = u32::from_le_bytes(take(buf, 4)?.try_into().expect("4")) as usize;
                let s = take(buf, n)?;
                Some(String::from_utf8(s.to_vec()).map_err(|e| e.to_string())?)
            }),
        }
        Ok(())
    }

    /// The cells at `rows` in that order, NULL where the row is `None`.
    pub fn take(&self, rows: &[Option<usize>]) -> Column {
        fn pick<T: Clone>(v: &[Option<T>], rows: &[Option<usize>]) -> Vec<Option<T>> {
            rows.iter().map(|r| r.and_then(|i| v[i].clone())).collect()
        }
        match self {
            Column::Null(_) => Column::Null(rows.len()),
            Column::Int64(v) => Column::Int64(v.take_by(rows.len(), |x| rows[x])),
            Column::Float64(v) => Column::Float64(v.take_by(rows.len(), |x| rows[x])),
            Column::Utf8(v) => Column::Utf8(pick(v, rows)),
            Column::Bool(v) => Column::Bool(pick(v, rows)),
        }
    }

    /// `n` cells, the `x`-th the cell at `row(x)`, NULL where that is `None` (a join's output
    /// column straight from its pairs, no row list made first).
    pub fn take_by(&self, n: usize, row: impl Fn(usize) -> Option<usize>) -> Column {
        fn pick<T: Copy>(
            v: &[Option<T>],
            n: usize,
            row: impl Fn(usize) -> Option<usize>,
        ) -> Vec<Option<T>> {
            (0..n).map(|x| row(x).and_then(|i| v[i])).collect()
        }
        match self {
            Column::Null(_) => Column::Null(n),
            Column::Int64(v) => Column::Int64(v.take_by(n, row)),
            Column::Float64(v) => Column::Float64(v.take_by(n, row)),
            Column::Bool(v) => Column::Bool(pick(v, n, row)),
            Column::Utf8(v) => {
                Column::Utf8((0..n).map(|x| row(x).and_then(|i| v[i].clone())).collect())
            }
        }
    }

    /// The cells at `rows` ([`Pairs`](crate::kernel::Pairs) row numbers), NULL where a row
    /// is [`NO_ROW`].
    pub fn gather(&self, rows: &[u32]) -> Column {
        fn pick<T: Clone>(v: &[Option<T>], rows: &[u32]) -> Vec<Option<T>> {
            rows.iter()
                .map(|&i| {
                    if i == NO_ROW {
                        None
                    } else {
                        v[i as usize].clone()
                    }
                })
                .collect()
        }
        match self {
            Column::Null(_) => Column::Null(rows.len()),
            Column::Int64(v) => Column::Int64(v.gather(rows)),
            Column::Float64(v) => Column::Float64(v.gather(rows)),
            Column::Utf8(v) => Column::Utf8(pick(v, rows)),
            Column::Bool(v) => Column::Bool(pick(v, rows)),
        }
    }

    /// The cells at `rows` (all present).
    pub fn take_rows(&self, rows: &[usize]) -> Column {
        match self {
            Column::Int64(v) => Column::Int64(v.take(rows)),
            Column::Float64(v) => Column::Float64(v.take(rows)),
            _ => {
                let r: Vec<Option<usize>> = rows.iter().map(|&i| Some(i)).collect();
                self.take(&r)
            }
        }
    }

    /// This column with `other`'s cells appended (types must agree; a NULL column takes the
    /// other's type).
    pub fn append(&mut self, other: &Column) -> Result<(), String> {
        if self.dtype() == DataType::Null && other.dtype() != DataType::Null {
            *self = Column::nulls(other.dtype(), self.len());
        }
        match (self, other) {
            (Column::Null(a), Column::Null(b)) => *a += b,
            (s, Column::Null(b)) => {
                let extra = Column::nulls(s.dtype(), *b);
                s.append(&extra)?;
            }
            (Column::Int64(a), Column::Int64(b)) => a.extend(b),
            (Column::Float64(a), Column::Float64(b)) => a.extend(b),
            (Column::Utf8(a), Column::Utf8(b)) => a.extend_from_slice(b),
            (Column::Bool(a), Column::Bool(b)) => a.extend_from_slice(b),
            (s, o) => {
                return Err(format!(
                    "cannot append {} cells to a {} column",
                    o.dtype().name(),
                    s.dtype().name()
                ))
            }
        }
        Ok(())
    }

    /// Cell by cell, `self`'s value where it has one, else `other`'s (SQL COALESCE); both of
    /// one length.
    pub fn coalesce(&self, other: &Column) -> Column {
        fn co<T: Clone>(a: &[Option<T>], b: &[Option<T>]) -> Vec<Option<T>> {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.clone().or_else(|| y.clone()))
                .collect()
        }
        match (self, other) {
            (Column::Null(_), o) => o.clone(),
            (s, Column::Null(_)) => s.clone(),
            (Column::Int64(a), Column::Int64(b)) => Column::Int64(a.coalesce(b)),
            (Column::Float64(a), Column::Float64(b)) => Column::Float64(a.coalesce(b)),
            (Column::Utf8(a), Column::Utf8(b)) => Column::Utf8(co(a, b)),
            (Column::Bool(a), Column::Bool(b)) => Column::Bool(co(a, b)),
            (s, _) => s.clone(),
        }
    }

    /// Cell `i` as text (empty for NULL), as CSV writes it.
    pub fn text(&self, i: usize) -> String {
        match self {
            Column::Null(_) => String::new(),
            Column::Int64(v) => v.get(i).map(|x| x.to_string()).unwrap_or_default(),
            Column::Float64(v) => v.get(i).map(|x| x.to_string()).unwrap_or_default(),
            Column::Bool(v) => v[i].map(|x| x.to_string()).unwrap_or_default(),
            Column::Utf8(v) => v[i].clone().unwrap_or_default(),
        }
    }
}

/// The most bytes a cell of fixed-width type `t` takes (strings: their least, a NULL).
fn max_cell(t: DataType) -> usize {
    match t {
        DataType::Int64 | DataType::Float64 => NUMBER_CELL,
        DataType::Bool => 2,
        DataType::Null | DataType::Utf8 => NULL_CELL,
    }
}

/// Appends a tagged cell: NULL for `None`, else the value's bytes.
fn put(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(b);
        }
    }
}

/// The first `n` bytes of `buf`, which then starts after them.
fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], String> {
    if buf.len() < n {
        return Err("truncated row".into());
    }
    let (a, b) = buf.split_at(n);
    *buf = b;
    Ok(a)
}

/// Every row's encoded bytes ([`Table::row_sizes`]).
#[derive(Clone, Debug, PartialEq)]
pub enum RowSizes {
    /// Every row has these.
    Same(u64),
    /// Row by row.
    PerRow(Vec<u64>),
}

impl RowSizes {
    /// Row `i`'s bytes.
    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        match self {
            RowSizes::Same(b) => *b,
            RowSizes::PerRow(v) => v[i],
        }
    }
}

/// A table: named columns of one length.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    names: Vec<String>,
    columns: Vec<Column>,
}

impl Table {
    /// A table of `names` and `columns`; the lengths must agree.
    pub fn new(names: Vec<String>, columns: Vec<Column>) -> Result<Table, String> {
        if names.len() != columns.len() {
            return Err(format!(
                "{} names for {} columns",
                names.len(),
                columns.len()
            ));
        }
        if let Some(c) = columns.iter().find(|c| c.len() != columns[0].len()) {
            return Err(format!(
                "columns of {} and {} rows",
                columns[0].len(),
                c.len()
            ));
        }
        Ok(Table { names, columns })
    }

    /// A table of no rows with the names and types of `self`.
    pub fn empty_like(&self) -> Table {
        Table {
            names: self.names.clone(),
            columns: self
                .columns
                .iter()
                .map(|c| Column::empty(c.dtype()))
                .collect(),
        }
    }

    /// Column names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Columns.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Column types.
    pub fn dtypes(&self) -> Vec<DataType> {
        self.columns.iter().map(Column::dtype).collect()
    }

    /// The column named `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.position(name).map(|i| &self.columns[i])
    }

    /// The position of the column named `name`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, Column::len)
    }

    /// Encoded bytes of row `i` over the columns `cols`.
    pub fn row_bytes(&self, i: usize, cols: &[usize]) -> usize {
        cols.iter().map(|&c| self.columns[c].cell_bytes(i)).sum()
    }

    /// Encoded bytes of every row over the columns `cols` ([`Table::row_bytes`] of each row,
    /// added up column by column: one pass a column instead of a dispatch a cell).
    pub fn rows_bytes(&self, cols: &[usize]) -> Vec<u64> {
        fn add<T>(out: &mut [u64], v: &[Option<T>], size: impl Fn(&T) -> u64) {
            for (b, x) in out.iter_mut().zip(v) {
                *b += x.as_ref().map_or(NULL_CELL as u64, &size);
            }
        }
        fn fixed(out: &mut [u64], nulls: Option<&[bool]>, size: u64) {
            match nulls {
                None => out.iter_mut().for_each(|b| *b += size),
                Some(f) => {
                    for (b, &n) in out.iter_mut().zip(f) {
                        *b += if n { NULL_CELL as u64 } else { size };
                    }
                }
            }
        }
        let mut out = vec![0u64; self.rows()];
        for &c in cols {
            match &self.columns[c] {
                Column::Null(_) => out.iter_mut().for_each(|b| *b += NULL_CELL as u64),
                Column::Int64(v) => fixed(&mut out, v.nulls.as_deref(), NUMBER_CELL as u64),
                Column::Float64(v) => fixed(&mut out, v.nulls.as_deref(), NUMBER_CELL as u64),
                Column::Bool(v) => add(&mut out, v, |_| 2),
                Column::Utf8(v) => add(&mut out, v, |s| 5 + s.len() as u64),
            }
        }
        out
    }

    /// Encoded bytes of every row over the columns `cols`, as [`Table::rows_bytes`] but one
    /// figure for all rows when every row has the same (fixed-width columns without NULLs:
    /// no vector of a word a row made and read on a big table).
    pub fn row_sizes(&self, cols: &[usize]) -> RowSizes {
        let mut same = 0u64;
        for &c in cols {
            same += match &self.columns[c] {
                Column::Null(_) => NULL_CELL as u64,
                Column::Int64(v) if !v.has_nulls() => NUMBER_CELL as u64,
                Column::Float64(v) if !v.has_nulls() => NUMBER_CELL as u64,
                _ => return RowSizes::PerRow(self.rows_bytes(cols)),
            };
        }
        RowSizes::Same(same)
    }

    /// Appends the encoding of row `i` over the columns `cols` to `out`.
    pub fn encode_row(&self, i: usize, cols: &[usize], out: &mut Vec<u8>) {
        for &c in cols {
            self.columns[c].encode_cell(i, out);
        }
    }

    /// The rows of `buf` (encoded over every column of a table of `types`, back to back).
    pub fn decode(names: &[String], types: &[DataType], mut buf: &[u8]) -> Result<Table, String> {
        if !types.is_empty()
            && types
                .iter()
                .all(|t| matches!(t, DataType::Int64 | DataType::Float64))
        {
            return Table::decode_numbers(names, types, buf);
        }
        let mut columns: Vec<Column> = types.iter().map(|&t| Column::empty(t)).collect();
        // At least this many rows (each cell at most 9 bytes but strings): room for them at
        // once, not a doubling a power of two.
        if !types.contains(&DataType::Utf8) {
            let widest: usize = types.iter().map(|&t| max_cell(t)).sum();
            let rows = buf.len() / widest.max(1);
            for c in &mut columns {
                c.reserve(rows);
            }
        }
        while !buf.is_empty() {
            for c in &mut columns {
                c.decode_push(&mut buf)?;
            }
        }
        Table::new(names.to_vec(), columns)
    }

    /// [`Table::decode`] of int64 and float64 columns only: each cell's tag and word read
    /// straight into the column's words, no dispatch a cell (the exchanges' common case).
    fn decode_numbers(names: &[String], types: &[DataType], buf: &[u8]) -> Result<Table, String> {
        let w = types.len();
        let hint = buf.len() / (NUMBER_CELL * w);
        let mut words: Vec<Vec<u64>> = (0..w).map(|_| Vec::with_capacity(hint)).collect();
        let mut nulls: Vec<Option<Vec<bool>>> = vec![None; w];
        let (mut at, mut row) = (0usize, 0usize);
        while at < buf.len() {
            for (c, f) in words.iter_mut().zip(&mut nulls) {
                let tag = *buf.get(at).ok_or("truncated row")?;
                if tag == 0 {
                    c.push(0);
                    f.get_or_insert_with(|| vec![false; row]).push(true);
                    at += 1;
                } else {
                    let b = buf.get(at + 1..at + NUMBER_CELL).ok_or("truncated row")?;
                    c.push(u64::from_le_bytes(b.try_into().expect("8 bytes")));
                    if let Some(f) = f {
                        f.push(false);
                    }
                    at += NUMBER_CELL;
                }
            }
            row += 1;
        }
        let columns = words
            .into_iter()
            .zip(nulls)
            .zip(types)
            .map(|((v, nulls), t)| match t {
                DataType::Int64 => Column::Int64(Cells {
                    values: v.into_iter().map(|x| x as i64).collect(),
                    nulls,
                }),
                _ => Column::Float64(Cells {
                    values: v.into_iter().map(f64::from_bits).collect(),
                    nulls,
                }),
            })
            .collect();
        Table::new(names.to_vec(), columns)
    }

    /// The rows at `rows` in that order.
    pub fn take_rows(&self, rows: &[usize]) -> Table {
        Table {
            names: self.names.clone(),
            columns: self.columns.iter().map(|c| c.take_rows(rows)).collect(),
        }
    }

    /// The tables' rows back to back (names from the first; types must agree, a NULL column
    /// taking the other's type).
    pub fn concat(parts: &[Table]) -> Result<Table, String> {
        let Some(first) = parts.first() else {
            return Err("no tables to concatenate".into());
        };
        let mut out = first.clone();
        for t in &parts[1..] {
            if t.columns.len() != out.columns.len() {
                return Err("tables of different widths".into());
            }
            for (a, b) in out.columns.iter_mut().zip(&t.columns) {
                a.append(b)?;
            }
        }
        Ok(out)
    }

    /// As [`Table::concat`], taking the parts: the first is extended in place instead of
    /// copied (a rank's output is mostly one big part).
    pub fn concat_owned(parts: Vec<Table>) -> Result<Table, String> {
        let mut parts = parts.into_iter();
        let Some(mut out) = parts.next() else {
            return Err("no tables to concatenate".into());
        };
        for t in parts {
            if t.columns.len() != out.columns.len() {
                return Err("tables of different widths".into());
            }
            for (a, b) in out.columns.iter_mut().zip(&t.columns) {
                a.append(b)?;
            }
        }
        Ok(out)
    }

    /// The columns at `cols` (in that order), with their names.
    pub fn select(&self, cols: &[usize]) -> Table {
        Table {
            names: cols.iter().map(|&c| self.names[c].clone()).collect(),
            columns: cols.iter().map(|&c| self.columns[c].clone()).collect(),
        }
    }

    /// The table with column `i` replaced (same length).
    pub fn with_column(mut self, i: usize, c: Column) -> Table {
        self.columns[i] = c;
        self
    }

    /// Its parts.
    pub fn into_parts(self) -> (Vec<String>, Vec<Column>) {
        (self.names, self.columns)
    }
}

#[cfg(test)]
mod tests {
    use super::Cells;

    #[test]
    fn cells_keep_nulls_through_push_extend_take_and_coalesce() {
        let mut a: Cells<i64> = Cells::from_values(vec![1, 2]);
        assert!(!a.has_nulls());
        a.push(None);
        a.push(Some(4));
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            [Some(1), Some(2), None, Some(4)]
        );
        let mut b: Cells<i64> = Cells::from_values(vec![7]);
        b.extend(&a);
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            [Some(7), Some(1), Some(2), None, Some(4)]
        );
        assert_eq!(b.take(&[3, 0]).iter().collect::<Vec<_>>(), [None, Some(7)]);
        let rows = [Some(4), None, Some(3), Some(0)];
        let t = b.take_by(rows.len(), |x| rows[x]);
        assert_eq!(t.iter().collect::<Vec<_>>(), [Some(4), None, None, Some(7)]);
        let other: Cells<i64> = vec![Some(9), Some(8), None, Some(6)].into();
        assert_eq!(
            t.coalesce(&other).iter().collect::<Vec<_>>(),
            [Some(4), Some(8), None, Some(7)]
        );
        // Equal cell by cell: a flag vector of no NULLs equals none at all.
        let flagged: Cells<i64> = vec![Some(1), None].into_iter().take(1).collect();
        let mut with_flags = Cells::nulls(1);
        with_flags.extend(&flagged);
        assert_eq!(with_flags.take(&[1]), Cells::from_values(vec![1]));
    }
}
