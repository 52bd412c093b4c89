//! Post-copy live migration of `remora kv serve`: a source started with `-A` is armed
//! (`migrate to HOST:PORT` or `remora kv migrate`), a target started with `--migrate-from`
//! maps the source's arena lazily, takes its clients over and pulls the rest; the failures
//! (the source killed mid-copy, the target killed after or leaving before taking over) end
//! on one consistent side. Every process started here is killed and reaped on drop.

mod kv_common;
mod migrate_common;

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_common::{free_port, is_root};

use migrate_common::workload::*;
use migrate_common::*;

#[test]
fn a_client_workload_runs_through_the_switch_over_and_reads_its_last_acknowledged_writes() {
    const N: usize = 5000;
    const BASE: usize = 250;
    let d = dir("workload");
    let (mut src, src_addr) = source(&d, "127.0.0.1", &[], None);
    load(&src_addr, N, BASE);
    let (stop, moved) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let worker = {
        let (a, s, m) = (src_addr.clone(), stop.clone(), moved.clone());
        std::thread::spawn(move || client(a, N, BASE, s, m))
    };
    // The client is at work on the source before the migration starts.
    std::thread::sleep(Duration::from_millis(300));
    let (mut tgt, tgt_addr) = target(
        &d,
        "127.0.0.1",
        &src_addr,
        &["--migrate-push-rate", "2m"],
        None,
    );
    let mut op = operator(&d, &src_addr, &tgt_addr);
    let switched = wait_flag(&moved, Duration::from_secs(90));
    // Right after the switch the copy is still under way (the push is held to 2 MB/s).
    let at_switch = stats(&tgt_addr);
    if switched {
        std::thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, Ordering::Relaxed);
    let run = worker.join().unwrap();
    eprintln!(
        "client: {} requests on the source, {} on the target ({} refused as not serving yet); \
         target at the switch: {at_switch:?}",
        run.on_source, run.on_target, run.not_yet
    );
    assert!(
        switched,
        "the client never reached the target; source: {}\ntarget: {}\nmigrate: {}",
        src.log(),
        tgt.log(),
        op.log()
    );
    assert!(
        run.mismatches.is_empty(),
        "{} values differ from the last acknowledged writes, first: {:?}",
        run.mismatches.len(),
        &run.mismatches[..run.mismatches.len().min(10)]
    );
    assert!(run.errors.is_empty(), "client errors: {:?}", run.errors);
    assert_eq!(
        run.sent_to.as_deref(),
        Some(tgt_addr.as_str()),
        "redirect target"
    );
    assert!(
        run.on_source > 0 && run.on_target > 0,
        "{} on the source, {} on the target",
        run.on_source,
        run.on_target
    );
    let at_switch = at_switch.expect("the target answers stats migration");
    assert!(
        matches!(
            stat(&at_switch, "migrate_state"),
            "handing_over" | "pulling"
        ) && stat_n(&at_switch, "migrate_units_present")
            < stat_n(&at_switch, "migrate_units_total"),
        "the copy was still under way when the client moved: {at_switch:?}"
    );
    let st = op.wait_exit(Duration::from_secs(180));
    assert!(
        st.is_some_and(|s| s.success()),
        "remora kv migrate: {st:?}\n{}\n{}",
        op.log(),
        op.stdout()
    );
    assert!(op.stdout().contains("migrated "), "{}", op.stdout());
    let st = src.wait_exit(Duration::from_secs(60));
    assert!(
        st.is_some_and(|s| s.success()),
        "the source did not stop by itself: {st:?}\n{}",
        src.log()
    );
    assert!(src.log().contains("[migrate] the copy to"), "{}", src.log());
    let m = stats(&tgt_addr).expect("target stats");
    eprintln!("target at the end: {m:?}");
    assert_eq!(stat(&m, "migrate_role"), "target", "{m:?}");
    assert_eq!(stat(&m, "migrate_state"), "complete", "{m:?}");
    assert_eq!(
        stat_n(&m, "migrate_units_present"),
        stat_n(&m, "migrate_units_total"),
        "{m:?}"
    );
    assert!(stat_n(&m, "migrate_units_total") > 0, "{m:?}");
    assert!(
        stat_n(&m, "migrate_faults") > 0,
        "the client's reads faulted pages in: {m:?}"
    );
    assert!(tgt.log().contains("is complete"), "{}", tgt.log());
    // Every item, as last acknowledged, is on the target once the copy is complete.
    let bad = check_all(&tgt_addr, &run.model, BASE);
    assert!(
        bad.is_empty(),
        "{} items wrong on the target: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    assert!(tgt.running(), "the target serves on: {}", tgt.log());
    drop(tgt);
    let _ = std::fs::remove_dir_all(&d);
}

// ---------------------------------------------------------------------------------------
// two network namespaces

/// A network namespace joined to this one by a veth pair: `host` on this side, `inner`
/// inside; removed (with the pair) on drop.
#[test]
fn between_two_network_namespaces() {
    const N: usize = 3000;
    const BASE: usize = 400;
    if !is_root() {
        eprintln!("SKIP: network namespaces need root");
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("SKIP: ip netns / veth pairs are unavailable here");
        return;
    };
    let d = dir("netns");
    // The source on this side of the pair, the target inside the namespace: the page
    // server, the control channel and the clients all cross the veth pair.
    let (mut src, src_addr) = source(&d, &ns.host, &[], None);
    load(&src_addr, N, BASE);
    let mut model = initial_model(N);
    let (mut tgt, tgt_addr) = target(
        &d,
        &ns.inner,
        &src_addr,
        &["--migrate-push-rate", "500k"],
        Some(&ns.name),
    );
    let mut op = operator(&d, &src_addr, &tgt_addr);
    let m = wait_state(&tgt_addr, &["pulling", "complete"], Duration::from_secs(90));
    assert_eq!(
        stat(&m, "migrate_state"),
        "pulling",
        "the copy is under way (the push is held to 500 kB/s): {m:?}"
    );
    wait_serving(&tgt_addr, Duration::from_secs(30));
    // During the copy: the source sends clients on, the target serves reads and writes.
    match ask(&src_addr, "get key:1") {
        Reply::Redirect(to) => assert_eq!(to, tgt_addr),
        // The copy completed meanwhile and the source is gone.
        Reply::Closed => assert!(!src.running(), "the source closed without a redirect"),
        r => panic!("the source answered {r:?}"),
    }
    let mut c = Conn::open(&tgt_addr, Duration::from_secs(30)).unwrap();
    for i in (0..N).step_by(N / 20) {
        let k = key(i);
        match c.get(&[&k]) {
            Reply::Values(h) => assert_eq!(h, vec![(k.clone(), value(&k, 0, BASE))], "{k}"),
            r => panic!("get {k} from the target during the copy: {r:?}"),
        }
        let v = value(&k, 1, BASE);
        assert_eq!(c.set(&k, &v), Reply::Stored, "set {k} on the target");
        model.insert(k.clone(), 1);
        assert_eq!(c.get(&[&k]), Reply::Values(vec![(k.clone(), v)]), "{k}");
    }
    for i in N..N + 10 {
        let k = key(i);
        assert_eq!(c.set(&k, &value(&k, 0, BASE)), Reply::Stored, "set {k}");
        model.insert(k, 0);
    }
    drop(c);
    let st = op.wait_exit(Duration::from_secs(180));
    assert!(
        st.is_some_and(|s| s.success()),
        "remora kv migrate: {st:?}\n{}",
        op.log()
    );
    let st = src.wait_exit(Duration::from_secs(60));
    assert!(
        st.is_some_and(|s| s.success()),
        "the source did not stop by itself: {st:?}\n{}",
        src.log()
    );
    let m = stats(&tgt_addr).expect("target stats");
    assert_eq!(stat(&m, "migrate_state"), "complete", "{m:?}");
    assert_copied(&m, &tgt_addr, &model, BASE, "target");
    assert!(tgt.running(), "the target serves on: {}", tgt.log());
    drop(tgt);
    drop(ns);
    let _ = std::fs::remove_dir_all(&d);
}

// ---------------------------------------------------------------------------------------
// failures

/// A source with `n` items of about `base` bytes, armed for `target`, and a target pulling
/// from it at 100 kB/s (a copy of many seconds), once it took over.
fn slow_migration(d: &Path, n: usize, base: usize) -> (Proc, String, Proc, String) {
    let (src, src_addr) = source(d, "127.0.0.1", &[], None);
    load(&src_addr, n, base);
    let (tgt, tgt_addr) = target(
        d,
        "127.0.0.1",
        &src_addr,
        &["--migrate-push-rate", "100k"],
        None,
    );
    arm(&src_addr, &tgt_addr);
    let m = wait_state(&tgt_addr, &["pulling", "complete"], Duration::from_secs(90));
    assert_eq!(stat(&m, "migrate_state"), "pulling", "{m:?}");
    wait_serving(&tgt_addr, Duration::from_secs(30));
    (src, src_addr, tgt, tgt_addr)
}

/// A read from the target while its source may be gone: the right value, a `SERVER_ERROR`,
/// or no answer are all fine; `Err` describes anything else.
fn read_or_refuse(addr: &str, k: &str, base: usize) -> Result<&'static str, String> {
    let Ok(mut c) = Conn::open(addr, Duration::from_secs(60)) else {
        return Ok("refused");
    };
    match c.get(&[k]) {
        Reply::Values(h) if h == vec![(k.to_string(), value(k, 0, base))] => Ok("value"),
        Reply::Values(h) if h.is_empty() => Err(format!("{k}: a miss")),
        Reply::Values(h) => Err(format!(
            "{k}: a wrong value: {:?}",
            h.iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(&v[..v.len().min(40)])))
                .collect::<Vec<_>>()
        )),
        Reply::Line(l) if l.starts_with("SERVER_ERROR") => Ok("server_error"),
        Reply::Closed => Ok("closed"),
        r => Err(format!("{k}: {r:?}")),
    }
}

#[test]
fn a_source_killed_mid_copy_leaves_the_target_with_a_clear_error_and_no_wrong_values() {
    const N: usize = 3000;
    const BASE: usize = 1000;
    let d = dir("source-killed");
    let (mut src, _src_addr, mut tgt, tgt_addr) = slow_migration(&d, N, BASE);
    // With the source alive, reads fault their pages in (a few: most of the items stay
    // behind on the source).
    for i in (0..N).step_by(N / 4) {
        let k = key(i);
        assert_eq!(read_or_refuse(&tgt_addr, &k, BASE), Ok("value"), "{k}");
    }
    src.kill();
    // From here a read may fail, never return another value.
    let t0 = Instant::now();
    let mut seen: HashMap<&'static str, usize> = HashMap::new();
    let mut wrong = Vec::new();
    let mut i = 1;
    let status = loop {
        if let Ok(Some(st)) = tgt.child.try_wait() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            break None;
        }
        match read_or_refuse(&tgt_addr, &key(i % N), BASE) {
            Ok(what) => *seen.entry(what).or_default() += 1,
            Err(e) => wrong.push(e),
        }
        // About one 64 KiB unit of items further on each time.
        i += 53;
    };
    eprintln!("reads after the kill: {seen:?}");
    assert!(wrong.is_empty(), "reads after the source died: {wrong:?}");
    let log = tgt.log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(75),
        "the target exits with EX_TEMPFAIL: {log}"
    );
    assert!(log.contains("lost the source"), "{log}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_target_killed_after_taking_over_leaves_the_source_serving() {
    const N: usize = 3000;
    const BASE: usize = 1000;
    let d = dir("target-killed");
    let (mut src, src_addr, mut tgt, tgt_addr) = slow_migration(&d, N, BASE);
    assert_eq!(
        ask(&src_addr, "get key:1"),
        Reply::Redirect(tgt_addr.clone()),
        "the source sends its clients on"
    );
    // A write the target acknowledged: gone with it.
    assert_eq!(
        Conn::open(&tgt_addr, Duration::from_secs(30))
            .unwrap()
            .set("key:2", b"written on the target"),
        Reply::Stored
    );
    tgt.kill();
    let m = wait_state(&src_addr, &["failed"], Duration::from_secs(60));
    assert_eq!(stat(&m, "migrate_role"), "source", "{m:?}");
    assert_eq!(stat_n(&m, "migrate_failures"), 1, "{m:?}");
    assert_eq!(stat_n(&m, "migrate_aborts"), 0, "{m:?}");
    assert!(src.running(), "the source serves on: {}", src.log());
    assert!(
        src.log().contains("left after taking over"),
        "{}",
        src.log()
    );
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    // Flushed: older than the writes the target acknowledged, so never served.
    assert_eq!(c.get(&["key:1"]), Reply::Values(vec![]), "an old item");
    assert_eq!(
        c.get(&["key:2"]),
        Reply::Values(vec![]),
        "the item written on the target"
    );
    assert_eq!(c.set("fresh", b"after the failure"), Reply::Stored);
    assert_eq!(
        c.get(&["fresh"]),
        Reply::Values(vec![("fresh".into(), b"after the failure".to_vec())])
    );
    assert_eq!(c.set("key:1", b"again"), Reply::Stored);
    assert_eq!(
        c.get(&["key:1"]),
        Reply::Values(vec![("key:1".into(), b"again".to_vec())])
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_target_that_leaves_before_taking_over_leaves_every_item_on_the_source() {
    const N: usize = 2000;
    const BASE: usize = 300;
    let d = dir("target-left");
    let (mut src, src_addr) = source(&d, "127.0.0.1", &[], None);
    load(&src_addr, N, BASE);
    let model = initial_model(N);
    let first_to = format!("127.0.0.1:{}", free_port());
    arm(&src_addr, &first_to);
    // A target that asks, reads the offer, and leaves.
    {
        let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
        c.send(format!("migrate begin {SECRET}\r\n").as_bytes())
            .unwrap();
        let first = c.line().expect("the offer");
        assert!(first.starts_with("MIGRATE "), "{first}");
        assert!(
            first.ends_with(&first_to),
            "the offer names where clients go: {first}"
        );
        // The state lines of the offer end with a bare LF, its head and `END` with CRLF.
        let mut l = String::new();
        while l.trim_end() != "END" {
            l.clear();
            let n = c.r.read_line(&mut l).expect("the offer");
            assert!(n > 0, "the offer ended without END");
        }
    }
    let m = wait_state(&src_addr, &["aborted"], Duration::from_secs(60));
    assert_eq!(stat_n(&m, "migrate_aborts"), 1, "{m:?}");
    assert_eq!(stat_n(&m, "migrate_failures"), 0, "{m:?}");
    assert!(
        src.log().contains("left before it took over"),
        "{}",
        src.log()
    );
    let bad = check_all(&src_addr, &model, BASE);
    assert!(
        bad.is_empty(),
        "{} items lost or changed on the source: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    assert_eq!(c.set("fresh", b"1"), Reply::Stored);
    assert_eq!(
        c.get(&["fresh"]),
        Reply::Values(vec![("fresh".into(), b"1".to_vec())])
    );
    drop(c);
    // Armed again, it hands every item to a real target.
    let (mut tgt, tgt_addr) = target(&d, "127.0.0.1", &src_addr, &[], None);
    arm(&src_addr, &tgt_addr);
    let m = wait_state(&tgt_addr, &["complete"], Duration::from_secs(120));
    assert_copied(&m, &tgt_addr, &model, BASE, "second target");
    let mut c = Conn::open(&tgt_addr, Duration::from_secs(30)).unwrap();
    assert_eq!(
        c.get(&["fresh"]),
        Reply::Values(vec![("fresh".into(), b"1".to_vec())])
    );
    let st = src.wait_exit(Duration::from_secs(60));
    assert!(st.is_some_and(|s| s.success()), "{st:?}: {}", src.log());
    assert!(tgt.running(), "{}", tgt.log());
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 27, finding 8: any client could take an armed source's hand-over with `migrate
/// begin`, then end the source with `migrate serving` and `migrate done`, its cache gone. Now
/// a `migrate begin` without the armed secret, or with another, is refused and counted; the
/// source keeps every item, stays armed, and hands them to the target that shows it.
#[test]
fn an_armed_source_hands_its_cache_only_to_a_target_with_the_secret() {
    const N: usize = 1000;
    const BASE: usize = 200;
    let d = dir("hijack");
    let (mut src, src_addr) = source(&d, "127.0.0.1", &[], None);
    load(&src_addr, N, BASE);
    let model = initial_model(N);
    arm(&src_addr, &format!("127.0.0.1:{}", free_port()));
    let refused = "SERVER_ERROR migrate begin: missing or wrong secret";
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    answers_then_serves(&mut c, "migrate begin", refused, true);
    let wrong = format!("migrate begin {}", SECRET.replace('0', "1"));
    answers_then_serves(&mut c, &wrong, refused, true);
    let bad = "CLIENT_ERROR bad command line format";
    answers_then_serves(&mut c, "migrate serving", bad, false);
    answers_then_serves(&mut c, "migrate done", bad, false);
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_state"), "armed", "{m:?}");
    assert_eq!(stat_n(&m, "migrate_begins_refused"), 2, "{m:?}");
    assert!(src.running(), "{}", src.log());
    let lost = check_all(&src_addr, &model, BASE);
    assert!(
        lost.is_empty(),
        "{} items lost: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    // The real target, armed for anew, gets every item.
    answers_then_serves(&mut c, "migrate cancel", "OK", false);
    drop(c);
    let (mut tgt, tgt_addr) = target(&d, "127.0.0.1", &src_addr, &[], None);
    arm(&src_addr, &tgt_addr);
    let m = wait_state(&tgt_addr, &["complete"], Duration::from_secs(120));
    assert_copied(&m, &tgt_addr, &model, BASE, "the target with the secret");
    assert!(tgt.running(), "{}", tgt.log());
    let _ = std::fs::remove_dir_all(&d);
}

/// The same connection still serves a set and a get after `req` answered `want`.
fn answers_then_serves(c: &mut Conn, req: &str, want: &str, prefix: bool) {
    match c.ask(req) {
        Reply::Line(l) if l == want || (prefix && l.starts_with(want)) => {}
        r => panic!("`{req}` answered {r:?}, expected {want}"),
    }
    let k = format!("after:{}", req.replace(' ', "_"));
    assert_eq!(c.set(&k, b"v"), Reply::Stored, "after `{req}`");
    assert_eq!(
        c.get(&[&k]),
        Reply::Values(vec![(k.clone(), b"v".to_vec())]),
        "after `{req}`"
    );
}

#[test]
fn migrate_commands_need_dash_a_and_an_armed_source() {
    let d = dir("commands");
    // Without -A.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut plain = Proc::spawn(
        serve_cmd("127.0.0.1", port, &[], None),
        d.join("plain.log"),
        "a server without -A",
    );
    wait_listening(&mut plain, &addr, Duration::from_secs(30));
    let mut c = Conn::open(&addr, Duration::from_secs(30)).unwrap();
    let no_a = "ERROR: migrate not enabled (start with -A)";
    answers_then_serves(&mut c, "migrate to 127.0.0.1:1", no_a, false);
    answers_then_serves(&mut c, "migrate cancel", no_a, false);
    answers_then_serves(
        &mut c,
        "migrate begin",
        "SERVER_ERROR migration not armed",
        true,
    );
    let m = stats(&addr).unwrap();
    assert_eq!(stat(&m, "migrate_role"), "none", "{m:?}");
    assert_eq!(stat(&m, "migrate_state"), "idle", "{m:?}");
    // With -A.
    let (_src, src_addr) = source(&d, "127.0.0.1", &[], None);
    let mut c = Conn::open(&src_addr, Duration::from_secs(30)).unwrap();
    answers_then_serves(
        &mut c,
        "migrate begin",
        "SERVER_ERROR migration not armed",
        true,
    );
    answers_then_serves(
        &mut c,
        "migrate cancel",
        "SERVER_ERROR no armed migration to cancel",
        false,
    );
    answers_then_serves(
        &mut c,
        "migrate bogus",
        "CLIENT_ERROR bad command line format",
        false,
    );
    answers_then_serves(
        &mut c,
        "migrate",
        "CLIENT_ERROR bad command line format",
        false,
    );
    answers_then_serves(
        &mut c,
        "migrate to nowhere",
        "CLIENT_ERROR bad command line format",
        false,
    );
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_state"), "idle", "{m:?}");
    // Armed, then cancelled: a target asking then is refused.
    // Without the operator's secret the source makes one up and answers it.
    answers_then_serves(&mut c, "migrate to 127.0.0.1:1", "SECRET ", true);
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_role"), "source", "{m:?}");
    assert_eq!(stat(&m, "migrate_state"), "armed", "{m:?}");
    assert_eq!(stat(&m, "migrate_peer"), "127.0.0.1:1", "{m:?}");
    answers_then_serves(&mut c, "migrate cancel", "OK", false);
    answers_then_serves(
        &mut c,
        "migrate begin",
        "SERVER_ERROR migration not armed",
        true,
    );
    let m = stats(&src_addr).unwrap();
    assert_eq!(stat(&m, "migrate_state"), "idle", "{m:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Regression: the target built its arena settings without the source's `-I` and `-C` (the
/// item size limit and CAS), so the header check refused a source started with either.
#[test]
fn a_source_started_with_dash_i_or_dash_c_migrates_too() {
    for flags in [&["-I", "2m"][..], &["-C"][..]] {
        let d = dir(&format!("flags{}", flags.join("")));
        let (mut src, src_addr) = source(&d, "127.0.0.1", flags, None);
        load(&src_addr, 200, 100);
        let (mut tgt, tgt_addr) = target(&d, "127.0.0.1", &src_addr, flags, None);
        arm(&src_addr, &tgt_addr);
        wait_listening(&mut tgt, &tgt_addr, Duration::from_secs(60));
        wait_state(&tgt_addr, &["complete"], Duration::from_secs(120));
        let bad = check_all(&tgt_addr, &initial_model(200), 100);
        assert!(bad.is_empty(), "{flags:?}: {bad:?}");
        assert!(
            src.wait_exit(Duration::from_secs(60))
                .is_some_and(|s| s.success()),
            "{flags:?}: {}",
            src.log()
        );
        drop(tgt);
        let _ = std::fs::remove_dir_all(&d);
    }
}
