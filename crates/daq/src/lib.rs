//! The JUNGFRAU processing core: detector model, calibration, conversion, pedestal tracking,
//! veto, sparse compression, azimuthal integration and a synthetic data generator.
//!
//! What it does: [`model`] and [`geometry`] describe a detector of N JUNGFRAU modules and how raw
//! module frames assemble into an image; [`calib`] loads and generates gain and pedestal maps;
//! [`azint`] turns a pyFAI PONI geometry into one CSR matrix (pixel → radial bin). All of those
//! produce plain data (maps, index tables, a sparse matrix) that an [`engine::Engine`] consumes:
//! conversion, pedestal tracking, veto counting, assembly, sparse compression and integration run
//! behind that one trait, a [`engine::Registry`] picks the engine with a fallback, and results say
//! which engine ran. [`pipeline`] chains the stages per frame, [`synth`] generates realistic raw
//! frames with their ground truth.
//!
//! What it does not: no network, emulator, receiver or file writer (a later issue calls this
//! core), and no GPU engine yet (the trait is shaped so one can slot in).
#![warn(missing_docs)]

pub mod azint;
pub mod bench;
pub mod calib;
pub mod engine;
mod error;
pub mod geometry;
pub mod model;
pub mod pedestal;
pub mod pipeline;
pub mod poni;
pub mod sparse;
pub mod synth;

pub use error::{DaqError, Result};
