//! The acquisition end to end, in one process: emulator threads push frames over the fabric on
//! loopback into a receiver whose pipeline results are compared with the same pipeline run
//! directly on the emulator's frames.
mod acq_common;

use acq_common::*;
use remora_daq::dataset::Dataset;
use remora_daq::pipeline::Outcome;

#[test]
fn udp_every_frame_arrives_whole_and_equals_the_direct_pipeline() {
    let _one = one_at_a_time();
    // 16 frames in a ring of 2 x 8: the whole run fits, so no overrun whatever the speed.
    let cfg = with("[acquisition]\nframes = 16\nbunch = 8\n[transport]\nkind = \"udp\"\n");
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        (
            s.frames_sent,
            s.frames_complete,
            s.frames_partial,
            s.frames_lost,
            s.overruns
        ),
        (16, 16, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.dark, 8);
    assert!(s.kept > 0, "synthetic frames have spots: {s:?}");
    assert_same_as_direct(&cfg, 0, &frames);
}

/// `transport.progress = "poll"`: the receive loop drives the udp device itself, no receive
/// thread. 50 frames/s, the whole run in the ring: every frame must land whole.
#[test]
fn udp_with_the_receive_loop_driving_progress_loses_nothing() {
    let _one = one_at_a_time();
    let cfg = with(
        "[acquisition]\nframes = 16\nbunch = 8\n[transport]\nkind = \"udp\"\nprogress = \"poll\"\n",
    );
    assert_eq!(
        cfg.transport.progress,
        remora_daq::config::ProgressKind::Poll
    );
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        (s.frames_sent, s.frames_complete, s.frames_lost, s.overruns),
        (16, 16, 0, 0),
        "{s:?}"
    );
    assert_same_as_direct(&cfg, 0, &frames);
}

#[test]
fn shm_every_frame_arrives_whole_and_equals_the_direct_pipeline() {
    let _one = one_at_a_time();
    let cfg = with("[acquisition]\nframes = 12\nbunch = 6\n[transport]\nkind = \"shm\"\n");
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        (s.frames_complete, s.frames_lost, s.overruns),
        (12, 0, 0),
        "{s:?}"
    );
    assert_same_as_direct(&cfg, 0, &frames);
}

/// Regression (issue 32 item 6): an unpaced shm emulator sends a short run in a few
/// milliseconds and drops its queue pairs while the receiver is still reading. The receiver's
/// answer to the emulator's grant request then met a closed socket (EPIPE), and its queue pair
/// was closed with the rest of the stream, end markers included, still unread: every module
/// was masked, whatever the deadline. Several tries, since it was a race (most runs lost it).
#[test]
fn shm_unpaced_short_run_loses_no_marker_when_the_emulator_leaves_at_once() {
    let _one = one_at_a_time();
    for modules in [1, 2] {
        for round in 0..3 {
            let mut cfg = with(
                "[acquisition]\nframes = 4\nbunch = 4\nrate_hz = 0\n[transport]\nkind = \"shm\"\n",
            );
            cfg.detector.modules = modules;
            cfg.pipeline.process = false;
            let (s, _) = acquire(&cfg);
            assert_eq!(
                (
                    s.frames_sent,
                    s.frames_complete,
                    s.frames_partial,
                    s.frames_lost
                ),
                (4, 4, 0, 0),
                "{modules} module(s), round {round}: {s:?}"
            );
        }
    }
}

/// The receiver on the GPU engine (whatever Vulkan device `REMORA_GPU` allows; `make test`
/// allows lavapipe): every frame processed on the device, several in flight, results equal to
/// the same pipeline run directly. The ring holds the whole run, so the device's speed cannot cause overruns.
#[test]
fn shm_acquisition_on_the_gpu_engine_equals_the_direct_pipeline() {
    let _one = one_at_a_time();
    if !gpu_engine_or_skip() {
        return;
    }
    // Frames in flight (3 by default), and one at a time with dark frames and images, whose
    // pixels must belong to the frame collected.
    let mut cfg = with("[acquisition]\nframes = 12\nbunch = 6\n[transport]\nkind = \"shm\"\n");
    cfg.pipeline.engine = Some("gpu-wgpu".into());
    let mut darks = with(
        "[acquisition]\nframes = 12\nbunch = 6\ndark_every = 4\n[transport]\nkind = \"shm\"\n\
         [output]\nimages = true\n",
    );
    darks.pipeline.engine = Some("gpu-wgpu".into());
    darks.pipeline.frames_in_flight = 4;
    let (s, frames) = acquire(&darks);
    assert_eq!((s.frames_complete, s.overruns), (12, 0), "{s:?}");
    assert_same_as_direct(&darks, 0, &frames);
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        (s.frames_complete, s.frames_lost, s.overruns),
        (12, 0, 0),
        "{s:?}"
    );
    assert!(s.kept > 0, "{s:?}");
    let profile_engine = frames.iter().find_map(|(_, f)| match &f.outcome {
        Some(Outcome::Kept {
            profile: Some(p), ..
        }) => Some(p.engine.name),
        _ => None,
    });
    assert_eq!(profile_engine, Some("gpu-wgpu"));
    assert_same_as_direct(&cfg, 0, &frames);
}

#[test]
fn a_roi_sent_line_by_line_lands_at_its_place_and_the_rest_is_masked() {
    let _one = one_at_a_time();
    let cfg = with(
        "[acquisition]\nframes = 8\nbunch = 4\n[emulator]\nroi = { x = 100, y = 50, width = 300, height = 200 }\n",
    );
    let (s, frames) = acquire(&cfg);
    assert_eq!((s.frames_complete, s.frames_lost), (8, 0), "{s:?}");
    assert_same_as_direct(&cfg, 0, &frames);
}

#[test]
fn lost_packets_mask_exactly_the_modules_they_hit() {
    let _one = one_at_a_time();
    // A one-row RoI keeps a module's stack short (1 + 24 packets), so 1% loss leaves some
    // stacks whole and hits others: hit modules are masked and counted, the rest is
    // bit-identical. The ring holds the whole run (2 x 24 frames): no overrun, whatever the
    // speed of the (debug-built) pipeline on a loaded machine.
    let cfg = with(
        "[acquisition]\nframes = 48\nbunch = 24\ndeadline_ms = 2000\n\
         [emulator]\nroi = { x = 0, y = 7, width = 1024, height = 1 }\n\
         [transport]\nloss = 0.01\nloss_seed = 3\n",
    );
    let (s, frames) = acquire(&cfg);
    assert!(
        s.modules_lost > 0,
        "1% loss over ~1000 packets hit nothing: {s:?}"
    );
    assert!(s.frames_complete > 0, "{s:?}");
    // A loaded machine may still overrun the debug build now and then: counted, and no kept
    // frame may differ from the direct run either way.
    assert_eq!(
        s.frames_complete + s.frames_partial + s.frames_lost + s.frames_overrun,
        48
    );
    assert_same_as_direct(&cfg, 0, &frames);
}

#[test]
fn a_slow_pipeline_overruns_and_no_kept_frame_is_corrupted() {
    let _one = one_at_a_time();
    let cfg = config(
        "[detector]\nmodules = 2\n[source]\ndistinct = 4\n[acquisition]\nframes = 40\nbunch = 2\n\
         [receiver]\nbuffer = \"8MiB\"\n[pipeline]\nbins = 200\nslow_ms = 40\n",
    );
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        s.buffer_frames, 4,
        "8 MiB: two stacks of two 2-module frames"
    );
    assert!(
        s.overruns > 0,
        "40 ms per frame cannot keep up with a free-running source: {s:?}"
    );
    assert!(s.frames_overrun > 0, "{s:?}");
    assert_eq!(
        s.frames_complete + s.frames_partial + s.frames_lost + s.frames_overrun,
        40,
        "{s:?}"
    );
    assert_same_as_direct(&cfg, 0, &frames);
}

/// The same slow pipeline and the same two-stack ring under the flow-controlled policies: the
/// source waits for ring credits (`backpressure`) or is paused and resumed (`pause`), so nothing
/// is overrun or lost, every frame equals the direct pipeline's, and the summary says what the
/// waiting cost.
#[test]
fn a_slow_pipeline_loses_nothing_when_the_source_follows_ring_credits() {
    let _one = one_at_a_time();
    for (policy, transport) in [
        ("backpressure", "udp"),
        ("backpressure", "shm"),
        ("pause", "udp"),
    ] {
        let cfg = config(&format!(
            "[detector]\nmodules = 2\n[source]\ndistinct = 4\n[acquisition]\nframes = 24\nbunch = 2\n\
             [transport]\nkind = \"{transport}\"\n\
             [receiver]\nbuffer = \"12MiB\"\noverrun = \"{policy}\"\n[pipeline]\nbins = 200\nslow_ms = 20\n"
        ));
        let (s, frames) = acquire(&cfg);
        let what = format!("{policy} over {transport}: {s:?}");
        assert_eq!(s.buffer_frames, 6, "{what}");
        assert_eq!(
            (
                s.frames_complete,
                s.frames_overrun,
                s.overruns,
                s.frames_lost
            ),
            (24, 0, 0, 0),
            "{what}"
        );
        assert_eq!(s.overrun_policy, policy);
        // 24 frames at 20 ms each against a free-running source: it must have waited.
        assert!(s.credit_wait_seconds > 0.1, "{what}");
        assert!(s.buffer_high_water_frames <= 6, "{what}");
        if policy == "pause" {
            assert!(s.pauses >= 1, "{what}");
        }
        assert_same_as_direct(&cfg, 0, &frames);
    }
}

/// A replay of remora's own output: a run keeps its raw frames (`output.raw`), a second run
/// streams that file (`source.kind = "hdf5"`, `/entry/raw/data`) as fast as it can into a
/// two-stack ring under `backpressure`, with a pipeline slower than the source: nothing is
/// lost, and every frame's result is the first run's.
#[test]
fn a_replay_of_its_own_raw_frames_under_backpressure_loses_nothing() {
    let _one = one_at_a_time();
    let dir = std::env::temp_dir().join(format!("remora-acq-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = dir.join("first.h5");
    let recorded = config(&format!(
        "[detector]\nmodules = 2\n[source]\ndistinct = 4\n[acquisition]\nframes = 16\nbunch = 2\n\
         rate_hz = 100\n[receiver]\noverrun = \"backpressure\"\n[pipeline]\nbins = 200\n\
         [output]\nfile = {:?}\nraw = true\n",
        first.display().to_string()
    ));
    let (s1, f1) = acquire(&recorded);
    assert_eq!(s1.frames_complete, 16, "{s1:?}");
    let replay = config(&format!(
        "[detector]\nmodules = 2\n[source]\nkind = \"hdf5\"\npath = {:?}\ndataset = \"/entry/raw/data\"\n\
         [acquisition]\nframes = 16\nbunch = 2\nrate_hz = 0\n\
         [receiver]\nbuffer = \"8MiB\"\noverrun = \"backpressure\"\n[pipeline]\nbins = 200\nslow_ms = 10\n",
        first.display().to_string()
    ));
    let (s2, f2) = acquire(&replay);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(
        (
            s2.frames_complete,
            s2.frames_lost,
            s2.frames_overrun,
            s2.buffer_frames
        ),
        (16, 0, 0, 4),
        "{s2:?}"
    );
    assert!(
        s2.credit_wait_seconds > 0.0,
        "the source had to wait: {s2:?}"
    );
    assert_eq!(f1.len(), f2.len());
    for ((_, a), (_, b)) in f1.iter().zip(&f2) {
        assert_eq!(a.frame, b.frame);
        let (x, y) = (format!("{:?}", a.outcome), format!("{:?}", b.outcome));
        assert!(x == y, "frame {}: {x:.200} vs {y:.200}", a.frame);
    }
}

#[test]
fn time_fanout_deals_frames_to_two_receivers() {
    let _one = one_at_a_time();
    let cfg = with(
        "[acquisition]\nframes = 16\nbunch = 4\ndark_every = 4\ndark_phase = 0\n[[receivers]]\n[[receivers]]\n",
    );
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        (s.frames_complete, s.frames_lost, s.overruns),
        (16, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.receiver_reports[0].frames_complete, 8);
    for (r, f) in &frames {
        assert_eq!(
            f.frame % 2,
            *r as u64,
            "frame {} went to receiver {r}",
            f.frame
        );
    }
    assert_same_as_direct(&cfg, 0, &frames);
    assert_same_as_direct(&cfg, 1, &frames);
}

#[test]
fn roi_fanout_gives_each_receiver_its_slice() {
    let _one = one_at_a_time();
    let cfg = with(
        "[acquisition]\nframes = 8\nbunch = 4\n[emulator]\nfanout = \"roi\"\n\
         [[receivers]]\nroi = { x = 0, y = 0, width = 1024, height = 256 }\n\
         [[receivers]]\nroi = { x = 0, y = 256, width = 1024, height = 256 }\n",
    );
    let (s, frames) = acquire(&cfg);
    assert_eq!(
        s.frames_complete, 16,
        "8 frames to each of 2 receivers: {s:?}"
    );
    assert_same_as_direct(&cfg, 0, &frames);
    assert_same_as_direct(&cfg, 1, &frames);
}

#[test]
fn a_receiver_nobody_connects_to_says_which_modules_are_missing() {
    let _one = one_at_a_time();
    let cfg = with("[acquisition]\nframes = 4\nconnect_timeout_ms = 300\n");
    let r = remora_daq::receiver::Receiver::bind(&cfg, 0).unwrap();
    let e = r.run(None, &|_| {}).unwrap_err().to_string();
    assert!(e.contains("modules [0, 1] did not connect"), "{e}");
}

#[test]
fn an_emulator_with_no_receiver_is_a_clear_error() {
    let _one = one_at_a_time();
    let cfg = with("[acquisition]\nframes = 4\n");
    let data = Dataset::load(&cfg).unwrap();
    // A port nobody listens on: bind one and let it go.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = remora_daq::emulator::run(&cfg, &data, &[addr], &|_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("connecting to receiver 0"), "{e}");
}

#[test]
fn raw_npy_and_hdf5_sources_and_calibration_files_feed_the_same_frames() {
    let _one = one_at_a_time();
    use remora_daq::synth::Synth;
    let dir = std::env::temp_dir().join(format!("remora-acq-src-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let synthetic = with("[acquisition]\nframes = 4\nbunch = 2\n");
    let truth = Dataset::load(&synthetic).unwrap();
    let words: Vec<u16> = truth
        .bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect();
    std::fs::write(dir.join("frames.raw"), &truth.bytes).unwrap();
    let header = format!(
        "{{'descr': '<u2', 'fortran_order': False, 'shape': ({}, {}, 1024), }}",
        truth.frames,
        2 * 512
    );
    let pad = 64 - (10 + header.len() + 1) % 64;
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&((header.len() + pad + 1) as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend(std::iter::repeat_n(b' ', pad));
    npy.push(b'\n');
    npy.extend_from_slice(&truth.bytes);
    std::fs::write(dir.join("frames.npy"), npy).unwrap();
    let f = hdf5::File::create(dir.join("frames.h5")).unwrap();
    f.new_dataset_builder()
        .with_data(&ndarray::Array3::from_shape_vec((truth.frames, 1024, 1024), words).unwrap())
        .create("data")
        .unwrap();
    drop(f);
    // The generator's calibration, saved as PSI-layout files.
    let s = Synth::new(Dataset::synth_config(&synthetic).unwrap()).unwrap();
    s.calibration().gain.save(&dir.join("gain.bin")).unwrap();
    s.calibration()
        .pedestal
        .save(&dir.join("pedestal.bin"))
        .unwrap();
    for (kind, file, extra) in [
        ("raw", "frames.raw", ""),
        ("npy", "frames.npy", ""),
        ("hdf5", "frames.h5", "dataset = \"/data\"\n"),
    ] {
        let mut cfg = config(&format!(
            "[detector]\nmodules = 2\ngain = \"gain.bin\"\npedestal = \"pedestal.bin\"\n\
             [source]\nkind = \"{kind}\"\npath = \"{file}\"\n{extra}\
             [acquisition]\nframes = 4\nbunch = 2\ndeadline_ms = 10000\nrate_hz = 50\n\
             [pipeline]\nbins = 200\n"
        ));
        cfg.rebase(&dir);
        let d = Dataset::load(&cfg).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(d.bytes, truth.bytes, "{kind}");
        if kind == "npy" {
            let (s, frames) = acquire(&cfg);
            assert_eq!(s.frames_complete, 4, "{s:?}");
            assert_same_as_direct(&cfg, 0, &frames);
            // Files of the generator's calibration give the synthetic run's results.
            let (_, synth_frames) = acquire(&synthetic);
            assert_eq!(frames.len(), synth_frames.len());
            for ((_, a), (_, b)) in frames.iter().zip(&synth_frames) {
                assert_eq!(format!("{:?}", a.outcome), format!("{:?}", b.outcome));
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
