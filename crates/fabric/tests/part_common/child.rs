//! The child: a responder with a never-touched region, serving the parent's commands, and the
//! handle the parent starts it with.
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use remora_fabric::{
    Completion, FaultMode, Listener, PageInPolicy, PartConfig, Progress, Qp, QpOptions, RegionInfo,
    Status, WcOpcode,
};
use remora_mem::{Pd, Region};

use super::*;

// ---------------------------------------------------------------------------------------------
// The child: a responder with a never-touched region.

/// Serves when this process is a child a parent test started (the environment variable says
/// how); a no-op otherwise.
pub fn serve_if_child() {
    let Ok(spec) = std::env::var(ENV) else {
        return;
    };
    let mut words = spec.split_whitespace();
    let policy: PageInPolicy = words.next().unwrap().parse().unwrap();
    let conns: usize = words.next().unwrap().parse().unwrap();
    let progress: Progress = words.next().unwrap().parse().unwrap();
    let reorder: u32 = words.next().unwrap().parse().unwrap();
    // Never outlive a parent that died.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(240));
        eprintln!("part child: no end after 240 s; exiting");
        std::process::exit(3);
    });
    let pd = Arc::new(Pd::new());
    let mem = anonymous(&pd, REMOTE_LEN);
    let ctrl = anonymous(&pd, CTRL_LEN);
    let opts = QpOptions {
        part: PartConfig {
            mode: FaultMode::Part,
            policy,
            reorder,
            ..PartConfig::default()
        },
        progress,
        ..QpOptions::default()
    };
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), pd, opts).unwrap();
    let mut private = RegionInfo::of(&mem).encode().to_vec();
    private.extend_from_slice(&RegionInfo::of(&ctrl).encode());
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{ADDR_TAG}{}", listener.local_addr()).unwrap();
        out.flush().unwrap();
    }
    for _ in 0..conns {
        let (qp, _) = listener.accept(&private).unwrap();
        serve(&qp, &mem, &ctrl);
    }
}

fn child_wait(qp: &Qp) -> Completion {
    let c = qp
        .wait(WAIT)
        .unwrap()
        .unwrap_or_else(|| panic!("part child: no completion; stats {:?}", qp.stats()));
    assert_eq!(c.status, Status::Success, "part child: {c:?}");
    c
}

/// Answers commands until BYE.
fn serve(qp: &Qp, mem: &Arc<Region>, ctrl: &Arc<Region>) {
    // Receive buffers have odd ids, replies even ones.
    let mut recv_id = 1u64;
    let mut send_id = 0u64;
    qp.post_recv(recv_id, ctrl, 0, 64).unwrap();
    loop {
        let c = child_wait(qp);
        if c.opcode != WcOpcode::Recv {
            // A reply went out.
            assert_eq!(c.opcode, WcOpcode::Send);
            continue;
        }
        assert_eq!((c.wr_id, c.byte_len), (recv_id, 8), "part child: {c:?}");
        let head = bytes(ctrl, 0, 8);
        let cmd = u32::from_le_bytes(head[..4].try_into().unwrap());
        match cmd {
            EVICT => {
                mem.evict(0, mem.len()).unwrap();
                assert_eq!(mem.residency().resident_count(), 0, "part child: evicted");
            }
            STATS | BYE => {}
            other => panic!("part child: unknown command {other}"),
        }
        if cmd != BYE {
            recv_id += 2;
            qp.post_recv(recv_id, ctrl, 0, 64).unwrap();
        }
        // The command and its sequence number, echoed: a reply can only answer its command.
        let mut reply = head;
        for v in stats_fields(&qp.stats().engine) {
            reply.extend_from_slice(&v.to_le_bytes());
        }
        ctrl.write_at(CMD_AT, &reply).unwrap();
        send_id += 2;
        qp.post_send(send_id, ctrl, CMD_AT, reply.len(), None)
            .unwrap();
        if cmd == BYE {
            // The parent closes first, once it holds this reply and the acknowledgement of its
            // command (which this side may not have sent yet: leaving now could lose it). This
            // reply's own completion may then come back flushed, which is fine.
            qp.wait_disconnect(Some(WAIT))
                .expect("part child: the parent did not close");
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: the child process, and the requester side of one connection.

/// A child process; killed if the test fails before it ends.
pub struct ChildProc {
    pub child: Option<Child>,
    pub lines: mpsc::Receiver<String>,
    pub addr: SocketAddr,
}

impl ChildProc {
    pub fn spawn(
        policy: PageInPolicy,
        conns: usize,
        progress: Progress,
        reorder: u32,
    ) -> ChildProc {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(ENV, format!("{policy} {conns} {progress} {reorder}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut me = ChildProc {
            child: Some(child),
            lines,
            addr: "0.0.0.0:0".parse().unwrap(),
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = me
                .lines
                .recv_timeout(left)
                .expect("the child did not report its address");
            assert!(
                !line.starts_with("running 0 tests"),
                "the child runs no test named {CHILD_TEST}"
            );
            // libtest prints "test part_child_serves ... " on the same line.
            if let Some((_, a)) = line.split_once(ADDR_TAG) {
                me.addr = a.trim().parse().unwrap();
                return me;
            }
        }
    }

    /// Waits for the child to exit and checks that its test passed.
    pub fn finish(mut self) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Everything the child printed, up to the end of its output.
        let mut out = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            out.push(line);
        }
        assert!(status.success(), "child failed ({status}): {out:#?}");
        assert!(
            out.iter().any(|l| l.contains("test result: ok. 1 passed")),
            "child output: {out:#?}"
        );
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
