//! The native ingest end to end: the emulator streams the detector's own UDP packets to a
//! receiver that reassembles them; every result must equal the pipeline run directly on the
//! emulator's frames, with exactly the rows of lost packets masked.
mod acq_common;

use acq_common::*;

#[test]
fn native_udp_frames_reassemble_bit_for_bit() {
    let _one = one_at_a_time();
    // A detector sends at its frame rate; 50 Hz lets the debug-built receiver keep up.
    let cfg = with(
        "[acquisition]\nframes = 16\nbunch = 8\nrate_hz = 50\n[transport]\nkind = \"native\"\n",
    );
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        (s.frames_complete, s.frames_lost, s.overruns),
        (16, 0, 0),
        "{s:?}"
    );
    assert_same_as_direct(&cfg, 0, &frames);
}

#[test]
fn native_udp_lost_packets_mask_their_rows_and_nothing_else() {
    let _one = one_at_a_time();
    // 16 frames fit the 16 slots: no overrun whatever the speed; 1% of 4096 packets lost.
    let cfg = with(
        "[acquisition]\nframes = 16\nbunch = 8\nrate_hz = 50\ndeadline_ms = 2000\n\
         [transport]\nkind = \"native\"\nloss = 0.01\nloss_seed = 3\n",
    );
    let (s, frames) = acquire(&cfg);
    let r = &s.receiver_reports[0];
    let st = r.native.expect("native counters");
    assert!(st.missing_packets > 0, "{st:?}");
    assert_eq!(
        st.missing_packets,
        4096 - st.placed,
        "every packet not placed is masked"
    );
    assert!(frames.iter().any(|(_, f)| !f.missing_packets.is_empty()));
    assert_eq!(s.frames_complete + s.frames_partial, 16, "{s:?}");
    assert_same_as_direct(&cfg, 0, &frames);
}

#[test]
fn an_unpaced_emulated_detector_under_backpressure_loses_nothing() {
    let _one = one_at_a_time();
    // 8 frame slots, a pipeline held 20 ms per frame, a source as fast as it can: only the
    // receiver's grants keep the source from overrunning the slots or the sockets.
    let run = |policy: &str| {
        let mut cfg = with(&format!(
            "[acquisition]\nframes = 40\nbunch = 4\nrate_hz = 0\n[transport]\nkind = \"native\"\n\
             [receiver]\nbuffer = \"16MiB\"\noverrun = \"{policy}\"\n"
        ));
        cfg.pipeline.slow_ms = 20;
        let (s, frames) = acquire(&cfg);
        (cfg, s, frames)
    };
    let (cfg, s, frames) = run("backpressure");
    let r = &s.receiver_reports[0];
    assert_eq!(
        (
            s.frames_complete,
            s.frames_partial,
            s.frames_lost,
            s.overruns
        ),
        (40, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(r.overrun_policy, "backpressure");
    assert!(r.buffer_high_water_frames <= 8, "{r:?}");
    assert!(
        s.emulator.credit_wait_seconds > 0.0,
        "the source waited: {s:?}"
    );
    assert_same_as_direct(&cfg, 0, &frames);
    // The same source without grants overruns the slots: the test above can fail.
    let (_, s, _) = run("mask");
    assert!(s.overruns > 0 && s.frames_complete < 40, "{s:?}");
}

#[test]
fn pause_is_refused_for_the_native_stream_with_the_policies_that_apply() {
    let e = remora_daq::config::Config::parse(
        "[detector]\nmodules = 1\n[acquisition]\nframes = 4\n[transport]\nkind = \"native\"\n\
         [receiver]\noverrun = \"pause\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("backpressure") && e.contains("mask"), "{e}");
}
