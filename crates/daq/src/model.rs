//! The JUNGFRAU detector model: raw pixel words, gain stages, pixel flags, detector sizes.
//!
//! A module frame is 512 rows × 1024 columns of 16-bit words: bits 15–14 the gain stage
//! (`00` G0, `01` G1, `11` G2, `10` invalid), bits 13–0 the ADC value. A detector frame is the
//! module frames one after the other (module-major), as the receiver lays them out.

/// Rows of a raw module frame.
pub const MODULE_ROWS: usize = 512;
/// Columns of a raw module frame.
pub const MODULE_COLS: usize = 1024;
/// Pixels of a raw module frame.
pub const MODULE_PIXELS: usize = MODULE_ROWS * MODULE_COLS;
/// Side of one readout chip in pixels (a module is 2 × 4 chips).
pub const CHIP_SIZE: usize = 256;
/// Raw word of a saturated pixel (gain bits G2, ADC 0).
pub const SATURATION: u16 = 0xc000;
/// Raw word of a pixel with a readout error (all ones).
pub const ERROR_WORD: u16 = 0xffff;
/// Raw word flagged as an error: G1 with ADC 0.
pub const ERROR_G1_ZERO: u16 = 0x4000;
/// Mask of the ADC bits.
pub const ADC_MASK: u16 = 0x3fff;

/// The gain stage of a pixel; the index into per-stage maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GainStage {
    /// Highest gain, dynamic (tracked) pedestal.
    G0 = 0,
    /// Medium gain; the ADC value falls as charge rises.
    G1 = 1,
    /// Low gain; the ADC value falls as charge rises.
    G2 = 2,
}

impl GainStage {
    /// All stages in map order.
    pub const ALL: [GainStage; 3] = [GainStage::G0, GainStage::G1, GainStage::G2];
    /// The gain bits (15–14) this stage uses in a raw word.
    pub fn bits(self) -> u16 {
        match self {
            GainStage::G0 => 0x0000,
            GainStage::G1 => 0x4000,
            GainStage::G2 => 0xc000,
        }
    }
}

/// Why a pixel carries no number. Stored as `u8` in flag arrays (0 means a valid number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Flag {
    /// A converted number.
    Ok = 0,
    /// Masked by the pixel mask.
    Masked = 1,
    /// Gain bits `10`.
    InvalidGain = 2,
    /// Raw `0xc000`.
    Saturated = 3,
    /// Raw `0xffff` or `0x4000`.
    Error = 4,
}

/// One decoded raw word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// A value in a gain stage.
    Value {
        /// Gain stage.
        stage: GainStage,
        /// 14-bit ADC value.
        adc: u16,
    },
    /// Gain bits `10`.
    InvalidGain,
    /// `0xc000`.
    Saturated,
    /// `0xffff` or `0x4000`.
    Error,
}

/// Decodes a raw word, special words first.
pub fn decode(word: u16) -> Word {
    match word {
        SATURATION => Word::Saturated,
        ERROR_WORD | ERROR_G1_ZERO => Word::Error,
        _ => {
            let adc = word & ADC_MASK;
            match word >> 14 {
                0 => Word::Value {
                    stage: GainStage::G0,
                    adc,
                },
                1 => Word::Value {
                    stage: GainStage::G1,
                    adc,
                },
                3 => Word::Value {
                    stage: GainStage::G2,
                    adc,
                },
                _ => Word::InvalidGain,
            }
        }
    }
}

/// Encodes a value in a gain stage (the ADC value is clipped to 14 bits).
pub fn encode(stage: GainStage, adc: u16) -> u16 {
    stage.bits() | (adc & ADC_MASK)
}

/// A JUNGFRAU detector of `modules` modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detector {
    modules: usize,
}

impl Detector {
    /// A detector of `modules` modules (1M = 2, 4M = 8, ...). At least one module.
    pub fn new(modules: usize) -> crate::Result<Self> {
        if modules == 0 || modules > 64 {
            return Err(crate::DaqError::Config(format!(
                "a detector has 1 to 64 modules, not {modules}"
            )));
        }
        Ok(Self { modules })
    }
    /// JUNGFRAU 4M: 8 modules.
    pub fn jungfrau_4m() -> Self {
        Self { modules: 8 }
    }
    /// Number of modules.
    pub fn modules(&self) -> usize {
        self.modules
    }
    /// Pixels of one raw detector frame.
    pub fn pixels(&self) -> usize {
        self.modules * MODULE_PIXELS
    }
    /// Bytes of one raw detector frame.
    pub fn frame_bytes(&self) -> usize {
        self.pixels() * 2
    }
    /// Shape of a raw frame as (rows, columns): the modules stacked vertically.
    pub fn raw_shape(&self) -> (usize, usize) {
        (self.modules * MODULE_ROWS, MODULE_COLS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn special_words() {
        assert_eq!(decode(0xc000), Word::Saturated);
        assert_eq!(decode(0xffff), Word::Error);
        assert_eq!(decode(0x4000), Word::Error);
        assert_eq!(decode(0x8123), Word::InvalidGain);
        assert_eq!(
            decode(0x0005),
            Word::Value {
                stage: GainStage::G0,
                adc: 5
            }
        );
        assert_eq!(
            decode(0xc001),
            Word::Value {
                stage: GainStage::G2,
                adc: 1
            }
        );
    }

    #[test]
    fn detector_sizes() {
        assert!(Detector::new(0).is_err());
        let d = Detector::jungfrau_4m();
        assert_eq!(d.raw_shape(), (4096, 1024));
        assert_eq!(d.frame_bytes(), 8 * 1024 * 1024);
    }

    proptest! {
        #[test]
        fn encode_decode_roundtrip(adc in 1u16..0x3fff, s in 0usize..3) {
            let stage = GainStage::ALL[s];
            let w = encode(stage, adc);
            if w != ERROR_WORD {
                prop_assert_eq!(decode(w), Word::Value { stage, adc });
            }
        }

        #[test]
        fn decode_never_panics_and_keeps_adc(w in any::<u16>()) {
            if let Word::Value { stage, adc } = decode(w) {
                prop_assert_eq!(encode(stage, adc), w);
            }
        }
    }
}
