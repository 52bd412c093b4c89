//! The configuration's parsing and checks.
use super::*;

const MIN: &str = "[detector]\nmodules = 8\n[acquisition]\nframes = 100\n";

fn bad(extra: &str) -> String {
    Config::parse(&format!("{MIN}{extra}"))
        .unwrap_err()
        .to_string()
}

#[test]
fn a_minimal_file_gets_the_defaults() {
    let c = Config::parse(MIN).unwrap();
    assert_eq!(c.receivers.len(), 1);
    assert_eq!(c.transport.kind, TransportKind::Udp);
    assert_eq!(c.roi_of(0), Roi::FULL);
    assert_eq!(c.frames_of(0), 100);
}

#[test]
fn every_bad_value_names_its_key() {
    for (extra, key) in [
        ("[transport]\nmtu = 1000\n", "transport.mtu"),
        ("[transport]\nloss = 1.5\n", "transport.loss"),
        (
            "[transport]\nprogress = \"sometimes\"\n",
            "transport.progress",
        ),
        ("[pipeline]\nengine = \"cuda-magic\"\n", "pipeline.engine"),
        ("[pipeline]\nunit = \"furlongs\"\n", "pipeline.unit"),
        ("[pipeline]\nbins = 0\n", "pipeline.bins"),
        (
            "[emulator]\nroi = { x = 1000, y = 0, width = 100, height = 1 }\n",
            "emulator.roi",
        ),
        (
            "[[receivers]]\nlisten = \"nowhere\"\n",
            "receivers[0].listen",
        ),
        ("[source]\nkind = \"npy\"\n", "source.path"),
        ("[output]\nqueue = 0\n", "output.queue"),
    ] {
        let e = bad(extra);
        assert!(e.contains(key), "{extra:?} gave {e:?}");
    }
    let e = Config::parse("[detector]\nmodules = 0\n[acquisition]\nframes = 1\n").unwrap_err();
    assert!(e.to_string().contains("detector.modules"), "{e}");
    let e = Config::parse("[detector]\nmodules = 1\n[acquisition]\nframes = 0\n").unwrap_err();
    assert!(e.to_string().contains("acquisition.frames"), "{e}");
}

#[test]
fn unknown_keys_and_wrong_types_are_refused_with_the_key() {
    let e = bad("[acquisition2]\nx = 1\n");
    assert!(e.contains("acquisition2"), "{e}");
    let e = Config::parse("[detector]\nmodules = \"eight\"\n[acquisition]\nframes = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("modules"), "{e}");
    let e = Config::parse("[detector]\nmodules = 8\n[acquisition]\nfames = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("fames"), "{e}");
}

#[test]
fn time_fanout_deals_frames_round_robin() {
    let c = Config::parse(&format!(
        "{MIN}[[receivers]]\n[[receivers]]\n[[receivers]]\n"
    ))
    .unwrap();
    assert_eq!(
        (c.frames_of(0), c.frames_of(1), c.frames_of(2)),
        (34, 33, 33)
    );
    assert_eq!(c.global_frame(2, 5), 17);
    let f = Config::parse(&format!(
        "{MIN}[output]\nfile = \"x/run.h5\"\n[[receivers]]\n[[receivers]]\n"
    ))
    .unwrap();
    assert_eq!(f.output_of(1).unwrap(), PathBuf::from("x/run_r1.h5"));
}
