//! The HDF5 building blocks the writer and the master file share: NeXus groups, string and
//! number datasets with units, NXtransformations translations, and datasets that grow along
//! their first axis in compressed chunks.
use std::path::Path;

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, Group, H5Type, Location, SimpleExtents};

use super::filter;
use crate::DaqError;

pub(super) fn h5err(path: &Path) -> impl Fn(hdf5::Error) -> DaqError + '_ {
    move |e| DaqError::Acquisition(format!("{}: HDF5: {e}", path.display()))
}

pub(super) fn text(s: &str) -> VarLenUnicode {
    // NUL cannot be stored in an HDF5 string; nothing remora writes has one.
    s.replace('\0', " ").parse().expect("no NUL left")
}

pub(super) fn attr(loc: &Location, name: &str, value: &str) -> hdf5::Result<()> {
    loc.new_attr::<VarLenUnicode>()
        .create(name)?
        .write_scalar(&text(value))
}

pub(super) fn group(parent: &Group, name: &str, class: &str) -> hdf5::Result<Group> {
    let g = parent.create_group(name)?;
    attr(&g, "NX_class", class)?;
    Ok(g)
}

pub(super) fn string(g: &Group, name: &str, value: &str) -> hdf5::Result<Dataset> {
    let d = g.new_dataset::<VarLenUnicode>().create(name)?;
    d.write_scalar(&text(value))?;
    Ok(d)
}

pub(super) fn number<T: H5Type>(
    g: &Group,
    name: &str,
    value: T,
    units: Option<&str>,
) -> hdf5::Result<()> {
    let d = g.new_dataset::<T>().create(name)?;
    d.write_scalar(&value)?;
    if let Some(u) = units {
        attr(&d, "units", u)?;
    }
    Ok(())
}

/// An NXtransformations translation of `value` metres along `vector`, from `offset`, after
/// `depends_on` ("." ends the chain).
pub(super) fn translation(
    g: &Group,
    name: &str,
    value: f64,
    vector: [f64; 3],
    offset: [f64; 3],
    depends_on: &str,
) -> hdf5::Result<()> {
    let d = g.new_dataset::<f64>().create(name)?;
    d.write_scalar(&value)?;
    attr(&d, "units", "m")?;
    attr(&d, "transformation_type", "translation")?;
    d.new_attr_builder()
        .with_data(&vector[..])
        .create("vector")?;
    d.new_attr_builder()
        .with_data(&offset[..])
        .create("offset")?;
    attr(&d, "offset_units", "m")?;
    attr(&d, "depends_on", depends_on)
}

/// A dataset that grows along its first axis, in compressed chunks.
pub(super) struct Growing<T: H5Type + Copy> {
    pub(super) ds: Dataset,
    pub(super) row: usize,
    /// Shape of one entry when it is an image (rows, columns).
    image: Option<(usize, usize)>,
    pub(super) rows: usize,
    pending: Vec<T>,
    batch: usize,
}

impl<T: H5Type + Copy> Growing<T> {
    /// `row` elements per entry (1 for a column); `chunk_rows` entries per chunk.
    pub(super) fn new(g: &Group, name: &str, row: usize, chunk_rows: usize) -> hdf5::Result<Self> {
        let mut b = g.new_dataset::<T>();
        let shape = if row == 1 {
            SimpleExtents::resizable([0])
        } else {
            SimpleExtents::new([Extent::resizable(0), Extent::from(row)])
        };
        if row == 1 {
            b = b.chunk([chunk_rows]);
        } else {
            b = b.chunk([chunk_rows, row]);
        }
        let ds = b
            .add_filter(filter::BSLZ4, &filter::params(std::mem::size_of::<T>()))
            .shape(shape)
            .create(name)?;
        Ok(Growing {
            ds,
            row,
            image: None,
            rows: 0,
            pending: Vec::new(),
            batch: chunk_rows.max(1),
        })
    }

    /// A dataset of images (n × ny × nx), one image per chunk.
    pub(super) fn images(g: &Group, name: &str, ny: usize, nx: usize) -> hdf5::Result<Self> {
        let ds = g
            .new_dataset::<T>()
            .chunk([1, ny, nx])
            .add_filter(filter::BSLZ4, &filter::params(std::mem::size_of::<T>()))
            .shape(SimpleExtents::new([
                Extent::resizable(0),
                Extent::from(ny),
                Extent::from(nx),
            ]))
            .create(name)?;
        Ok(Growing {
            ds,
            row: ny * nx,
            image: Some((ny, nx)),
            rows: 0,
            pending: Vec::new(),
            batch: 1,
        })
    }

    pub(super) fn push(&mut self, v: &[T]) -> hdf5::Result<()> {
        debug_assert_eq!(v.len() % self.row, 0);
        self.pending.extend_from_slice(v);
        if self.pending.len() >= self.batch * self.row {
            self.flush()?;
        }
        Ok(())
    }

    pub(super) fn flush(&mut self) -> hdf5::Result<()> {
        let add = self.pending.len() / self.row;
        if add == 0 {
            return Ok(());
        }
        let (from, to) = (self.rows, self.rows + add);
        if let Some((ny, nx)) = self.image {
            self.ds.resize([to, ny, nx])?;
            let a = ndarray::ArrayView3::from_shape((add, ny, nx), &self.pending[..])
                .expect("whole images");
            self.ds.write_slice(a, (from..to, .., ..))?;
        } else if self.row == 1 {
            self.ds.resize([to])?;
            self.ds.write_slice(&self.pending[..], from..to)?;
        } else {
            self.ds.resize([to, self.row])?;
            let a = ndarray::ArrayView2::from_shape((add, self.row), &self.pending[..])
                .expect("whole rows");
            self.ds.write_slice(a, (from..to, ..))?;
        }
        self.rows = to;
        self.pending.clear();
        Ok(())
    }
}
