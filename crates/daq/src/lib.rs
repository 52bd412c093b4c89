//! The JUNGFRAU acquisition (RASHPA): detector model, processing pipeline, emulator, receiver
//! with its scheduler, manager and NeXus/HDF5 writer.
//!
//! The processing core: [`model`] and [`geometry`] describe a detector of N JUNGFRAU modules and
//! how raw module frames assemble into an image; [`calib`] loads and generates gain and pedestal
//! maps; [`azint`] turns a pyFAI PONI geometry into one CSR matrix (pixel → radial bin). All of
//! those produce plain data that an [`engine::Engine`] consumes: conversion, pedestal tracking,
//! veto counting, assembly, sparse compression and integration run behind that one trait, a
//! [`engine::Registry`] picks the engine with a fallback, and results say which engine ran.
//! [`pipeline`] chains the stages per frame, [`synth`] generates realistic raw frames with their
//! ground truth.
//!
//! The acquisition: [`config`] reads one TOML file; [`dataset`] loads the frames an
//! [`emulator`] streams with one-sided WRITEs over the fabric into a [`receiver`]'s [`ring`]
//! (the thesis' Listing 3.1 addresses); the receiver's [`scheduler`] (sans-IO) turns per-module
//! events into one event per stack, detects overruns and deadlines; [`setup`] builds the
//! processing unit; [`writer`] stores the results as NeXus/HDF5 (bitshuffle/LZ4); [`manager`]
//! runs it all and sums up.
//!
//! Control: [`control`] drives acquisitions as a long-running service (state machine, start,
//! stop, dark runs, status, previews); with the `http` feature it serves them as a REST API
//! with its OpenAPI document and a live view page.
//!
//! What a run may touch on the host: [`access`] (the files it may open and how, the memory its
//! configuration may imply), set by whoever loads the configuration.
//!
//! What it does not: no GPU engine yet (the trait is shaped so one can slot in).
#![warn(missing_docs)]

pub mod access;
pub mod azint;
pub mod calib;
pub mod config;
pub mod control;
pub mod dataset;
pub mod emulator;
pub mod engine;
mod error;
pub mod flow;
pub mod geometry;
pub mod link;
pub mod manager;
pub mod model;
pub mod native;
pub mod output;
pub mod pedestal;
pub mod pipeline;
pub mod poni;
pub mod receiver;
pub mod ring;
pub mod scheduler;
pub mod setup;
pub mod sparse;
pub mod synth;
mod sys;
pub mod tap;
mod timestamp;
pub mod writer;

pub use error::{DaqError, Result};
