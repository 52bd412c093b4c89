//! The JUNGFRAU acquisition pipeline: detector model, calibration, conversion, pedestal
//! tracking, veto, sparse compression and azimuthal integration.
#![warn(missing_docs)]
