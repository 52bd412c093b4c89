//! Sources that do not keep their side of the link, against a real receiver: the receiver
//! notices, says what happened and does not let the source's data into later frames.
mod acq_common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use acq_common::*;
use remora_daq::flow::{CreditTarget, CreditWord};
use remora_daq::link::{qp_options, Announce, Hello};
use remora_daq::receiver::Receiver;
use remora_daq::ring::{descriptors, Marker, Roi, MODULE_BYTES};
use remora_fabric::{connect, Completion, Error as FabricError, Qp};
use remora_mem::{Access, Buffer, Mode, Pd};

/// Posts a WRITE, waiting for room in the send queue.
fn post(
    qp: &Qp,
    src: &Arc<remora_mem::Region>,
    a: &Announce,
    dst: usize,
    len: usize,
    imm: Option<u32>,
) {
    let mut done: Vec<Completion> = Vec::new();
    loop {
        match qp.post_write(
            1,
            src,
            0,
            len,
            a.region.addr + dst as u64,
            a.region.rkey,
            imm,
        ) {
            Ok(()) => return,
            Err(FabricError::QueueFull(_)) => {
                qp.poll(&mut done, 64);
                done.clear();
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("the hostile source's WRITE: {e}"),
        }
    }
}

/// Sends stack `s` (frames `s * bunch ..`) of module 0, markers included, without looking at
/// the credit word.
fn send_stack(qp: &Qp, src: &Arc<remora_mem::Region>, a: &Announce, s: u64) {
    let bunch = a.ring.bunch as u64;
    post(qp, src, a, 0, 0, Some(Marker::Start(s).imm()));
    for n in s * bunch..(s + 1) * bunch {
        for d in descriptors(&a.ring, 0, n, 0, &Roi::FULL) {
            let last = n + 1 == (s + 1) * bunch;
            post(qp, src, a, d.dst, d.len, last.then(|| Marker::End(s).imm()));
        }
    }
}

/// A source that asks for ring credits in its hello and then ignores them. Under
/// `backpressure` the receiver uses dark frames where they land (a source that waits never
/// writes into a stack before it is released), so when this one does, during a dark frame, the
/// run must fail and say so rather than go on with a pedestal that took the newer data.
#[test]
fn a_source_that_ignores_its_ring_credits_fails_the_run_by_name() {
    let _one = one_at_a_time();
    // Two stacks of two 1-module frames; frame 1 is dark; a second per frame.
    let cfg = config(
        "[detector]\nmodules = 1\n[acquisition]\nframes = 8\nbunch = 2\ndark_every = 2\n\
         dark_phase = 1\ndeadline_ms = 5000\n[transport]\nkind = \"shm\"\n\
         [receiver]\nbuffer = \"4MiB\"\noverrun = \"backpressure\"\n[pipeline]\nbins = 200\nslow_ms = 1000\n",
    );
    let r = Receiver::bind(&cfg, 0).unwrap();
    let addr = r.local_addr();
    let (committed, frames) = mpsc::channel();
    let (ended, result) = mpsc::channel();
    std::thread::spawn(move || {
        let mut on_frame = |f: &remora_daq::receiver::FrameResult| {
            let _ = committed.send(f.frame);
        };
        let got = r
            .run(Some(&mut on_frame), &|_| {})
            .map(|rep| format!("{rep:?}"))
            .map_err(|e| e.to_string());
        let _ = ended.send(got);
    });

    let pd = Arc::new(Pd::new());
    let src = pd
        .register(
            Buffer::anonymous(MODULE_BYTES).unwrap(),
            Access::LOCAL_WRITE,
            Mode::OnDemand,
        )
        .unwrap();
    src.page_in_range(0, src.len()).unwrap();
    let credit = CreditWord::register(&pd, 2).unwrap();
    let hello = Hello {
        module: 0,
        credit: CreditTarget::decode(&credit.info()),
    }
    .encode();
    let (qp, peer) = connect(addr, pd.clone(), qp_options(&cfg, 0, 0), &hello).unwrap();
    let a = Announce::decode(&peer).unwrap();
    assert_eq!(a.ring.stacks, 2, "{:?}", a.ring);
    send_stack(&qp, &src, &a, 0);
    send_stack(&qp, &src, &a, 1);
    // Frame 0 committed: the processing thread is on frame 1, the dark one, for a second (the
    // pause below leaves room for the thread to be late on a loaded machine).
    assert_eq!(frames.recv_timeout(Duration::from_secs(60)).unwrap(), 0);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(credit.limit(), 2, "stack 0 is not released yet");
    // Stack 2 goes into stack 0's buffer: the credits said wait.
    send_stack(&qp, &src, &a, 2);
    // A receiver that missed the overwrite waits for stacks this source never sends.
    let got = result
        .recv_timeout(Duration::from_secs(60))
        .expect("the receiver neither failed nor finished within 60 s");
    let e = got.expect_err("the run must fail");
    assert!(
        e.contains("broke the credit protocol") && e.contains("stack 0"),
        "{e}"
    );
    assert!(
        frames.try_iter().all(|f| f == 0),
        "nothing after the dark frame was committed"
    );
}
