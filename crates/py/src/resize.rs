//! `remora.resize`: the JPEG/PNG resize engine ([`remora_resize`]) for Python.
//!
//! Encoded images come in as `bytes` (borrowed without a copy) or any other byte buffer
//! (`bytearray`, `memoryview`, ...: copied once, as another thread could change them while the
//! GIL is released) and go out as `bytes`. Decoded pixels come in as C-contiguous `uint8` numpy
//! arrays `(H, W)` gray or `(H, W, C)` with C = 1 to 4, borrowed without a copy, and go out as
//! arrays of the same layout (the Rust vector handed to numpy without a copy). The GIL is
//! released while decoding, resampling and encoding. Wrong types and dtypes are `TypeError`s;
//! wrong layouts (not C-contiguous) and shapes, bad geometry, options, corrupt images and limits
//! `ValueError`s (as in numpy and the other remora modules), with the engine's message.
use numpy::prelude::*;
use numpy::{PyArray1, PyArrayDyn, PyUntypedArray};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};
use remora_resize::pixels::{image_info, resize_pixels};
use remora_resize::{Error, Filter, Format, Geometry, Job, Sampling};

fn err(e: Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

fn format(name: &str) -> PyResult<Format> {
    match name.to_ascii_lowercase().as_str() {
        "jpeg" | "jpg" => Ok(Format::Jpeg),
        "png" => Ok(Format::Png),
        _ => Err(PyValueError::new_err(format!(
            "unknown format {name:?}: one of \"jpeg\", \"png\""
        ))),
    }
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::Jpeg => "jpeg",
        Format::Png => "png",
    }
}

/// Encoded input: borrowed from `bytes`, else copied from a byte buffer.
enum Encoded<'py> {
    Bytes(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl Encoded<'_> {
    fn as_slice(&self) -> &[u8] {
        match self {
            Encoded::Bytes(b) => b.as_bytes(),
            Encoded::Owned(v) => v,
        }
    }
}

fn not_image(obj: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "data must be an encoded image (bytes, bytearray or memoryview) or a numpy uint8 \
         array (H, W) or (H, W, C), not {}",
        type_name(obj)
    ))
}

/// Encoded bytes from `bytes` or a buffer of bytes (not a numpy array: callers check first).
fn encoded<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Encoded<'py>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Encoded::Bytes(b.clone()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Encoded::Owned(b.to_vec()));
    }
    // Any other object with the buffer protocol, through memoryview: the limited API of the
    // abi3 wheel (CPython 3.9) has no buffer calls of its own.
    let py = obj.py();
    let view = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((obj,))
        .map_err(|_| not_image(obj))?;
    if view.getattr("itemsize")?.extract::<usize>()? != 1 {
        return Err(not_image(obj));
    }
    let bytes = view.call_method0("tobytes")?;
    Ok(Encoded::Bytes(bytes.cast_into::<PyBytes>()?))
}

/// A job from the keyword arguments.
#[allow(clippy::too_many_arguments)]
fn job(
    geometry: &str,
    quality: Option<i64>,
    filter: Option<&str>,
    sampling: Option<&str>,
    strip: bool,
    auto_orient: bool,
    format: Option<&str>,
    thumbnail: bool,
    progressive: bool,
    engine: Option<&str>,
) -> PyResult<Job> {
    let mut job = Job::parse(geometry).map_err(err)?;
    if let Some(e) = engine {
        job.engine = e.parse().map_err(err)?;
    }
    if let Some(q) = quality {
        if !(1..=100).contains(&q) {
            return Err(PyValueError::new_err(format!(
                "quality {q} is not in 1..=100 (None: the input's, as ImageMagick)"
            )));
        }
        job.quality = Some(q as u8);
    }
    job.filter = filter.map(str::parse::<Filter>).transpose().map_err(err)?;
    job.sampling = sampling
        .map(str::parse::<Sampling>)
        .transpose()
        .map_err(err)?;
    job.strip = strip;
    job.auto_orient = auto_orient;
    job.format = format.map(self::format).transpose()?;
    job.thumbnail = thumbnail;
    job.progressive = progressive;
    Ok(job)
}

/// Resizes decoded pixels: a C-contiguous uint8 array (H, W) or (H, W, C), C = 1 to 4.
fn resize_array<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    arr: &Bound<'py, PyUntypedArray>,
    job: &Job,
) -> PyResult<Bound<'py, PyAny>> {
    let dt = arr.dtype();
    if !dt.is_equiv_to(&numpy::dtype::<u8>(py)) {
        return Err(PyTypeError::new_err(format!(
            "the array has dtype {dt}; pixels must be uint8: convert with \
             np.ascontiguousarray(np.clip(a, 0, 255), dtype=np.uint8)"
        )));
    }
    let shape = arr.shape().to_vec();
    let channels = match shape.as_slice() {
        [_, _] => 1,
        [_, _, c @ 1..=4] => *c,
        _ => {
            return Err(PyValueError::new_err(format!(
                "the array has shape {shape:?}: pixels must be (H, W) gray or (H, W, C) with \
                 C = 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA); encoded images go in as bytes"
            )))
        }
    };
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "the array is not C-contiguous (a slice, a transposed view or Fortran order): \
             pass np.ascontiguousarray(a)",
        ));
    }
    let side = |v: usize| {
        u32::try_from(v).map_err(|_| PyValueError::new_err(format!("array side {v} is too large")))
    };
    let (h, w) = (side(shape[0])?, side(shape[1])?);
    let a = obj
        .cast::<PyArrayDyn<u8>>()
        .map_err(|e| PyTypeError::new_err(e.to_string()))?
        .try_readonly()
        .map_err(|e| PyValueError::new_err(format!("the array is being written elsewhere: {e}")))?;
    let src: &[u8] = if a.len() == 0 {
        &[]
    } else {
        a.as_slice()
            .map_err(|e| PyValueError::new_err(e.to_string()))?
    };
    let out = py
        .detach(|| resize_pixels(src, w, h, channels as u8, job))
        .map_err(err)?;
    let (oh, ow) = (out.height as usize, out.width as usize);
    let flat = PyArray1::from_vec(py, out.data);
    Ok(if shape.len() == 2 {
        flat.reshape([oh, ow])?.into_any()
    } else {
        flat.reshape([oh, ow, channels])?.into_any()
    })
}

/// Resizes an image to an ImageMagick `geometry` (`W`, `xH`, `WxH`, `WxH^`, `WxH!`, `WxH>`,
/// `WxH<`, `S%`, `SX%xSY%`, `A@`, `W:H`), with ImageMagick's output sizes and defaults.
///
/// `data`: an encoded JPEG or PNG (`bytes`, `bytearray`, `memoryview`) → `bytes` of the encoded
/// output (JPEG, or PNG for PNG input or `format="png"`); or a C-contiguous uint8 numpy array
/// (H, W) gray or (H, W, C) with C = 1 to 4 → a uint8 array of the resized pixels in the same
/// layout (no encoding: `quality`, `format`, `sampling`, `progressive` and `auto_orient` are a
/// `ValueError` there). `engine` resamples on "cpu" (the default), "gpu" (the device
/// `REMORA_GPU` allows; a `ValueError` when there is none) or "auto" (a real GPU when present).
/// The GIL is released while working.
#[pyfunction]
#[pyo3(signature = (data, geometry, quality=None, filter=None, sampling=None, strip=false, auto_orient=false, format=None, thumbnail=false, progressive=false, engine=None))]
#[allow(clippy::too_many_arguments)]
fn resize<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    geometry: &str,
    quality: Option<i64>,
    filter: Option<&str>,
    sampling: Option<&str>,
    strip: bool,
    auto_orient: bool,
    format: Option<&str>,
    thumbnail: bool,
    progressive: bool,
    engine: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let job = job(
        geometry,
        quality,
        filter,
        sampling,
        strip,
        auto_orient,
        format,
        thumbnail,
        progressive,
        engine,
    )?;
    if let Ok(arr) = data.cast::<PyUntypedArray>() {
        let encoding = [
            ("quality", quality.is_some()),
            ("format", format.is_some()),
            ("sampling", sampling.is_some()),
            ("progressive", progressive),
            ("auto_orient", auto_orient),
        ];
        if let Some((name, _)) = encoding.iter().find(|(_, set)| *set) {
            return Err(PyValueError::new_err(format!(
                "{name} does not apply to a pixel array (the result is pixels, not an encoded \
                 image, and arrays carry no EXIF orientation): leave it unset, or pass encoded \
                 bytes"
            )));
        }
        return resize_array(py, data, arr, &job);
    }
    let input = encoded(data)?;
    let bytes = input.as_slice();
    let out = py
        .detach(|| remora_resize::resize(bytes, &job))
        .map_err(err)?;
    Ok(PyBytes::new(py, &out.data).into_any())
}

/// The headers of a JPEG or PNG, without decoding: a dict with `width`, `height` (as stored,
/// before any EXIF orientation), `format` ("jpeg" or "png"), `channels`, `quality` (JPEG: the
/// quality ImageMagick reports and reuses, `identify -format %Q`; None for PNG), `orientation`
/// (EXIF, 1–8; 1 when none) and `sampling` (JPEG chroma subsampling such as "4:2:0"; None for
/// gray JPEG and PNG).
#[pyfunction]
fn info<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    if data.cast::<PyUntypedArray>().is_ok() {
        return Err(not_image(data));
    }
    let input = encoded(data)?;
    let i = image_info(input.as_slice()).map_err(err)?;
    let d = PyDict::new(py);
    d.set_item("width", i.width)?;
    d.set_item("height", i.height)?;
    d.set_item("format", format_name(i.format))?;
    d.set_item("channels", i.channels)?;
    d.set_item("quality", i.quality)?;
    d.set_item("orientation", i.orientation)?;
    d.set_item("sampling", i.sampling.map(|s| s.to_string()))?;
    Ok(d)
}

/// The output size `(width, height)` ImageMagick gives a `width`×`height` image for `geometry`.
#[pyfunction]
fn geometry(geometry: &str, width: u32, height: u32) -> PyResult<(u32, u32)> {
    if width == 0 || height == 0 {
        return Err(PyValueError::new_err(format!(
            "image size {width}x{height}: both sides must be at least 1"
        )));
    }
    Ok(Geometry::parse(geometry)
        .map_err(|e| err(e.into()))?
        .apply(width, height))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(resize, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add_function(wrap_pyfunction!(geometry, m)?)?;
    Ok(())
}
