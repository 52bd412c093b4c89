//! Random text-protocol sessions against an in-memory model: every reply must be what a
//! HashMap-backed memcached would say.

use std::collections::HashMap;

use proptest::prelude::*;
use remora_kv::handler::{process, Cache, Session, Settings};

#[derive(Debug, Clone)]
enum Op {
    Set(u8, u32, Vec<u8>),
    Add(u8, Vec<u8>),
    Replace(u8, Vec<u8>),
    Append(u8, Vec<u8>),
    Prepend(u8, Vec<u8>),
    Get(Vec<u8>),
    Delete(u8),
    Incr(u8, u64),
    Decr(u8, u64),
    Touch(u8),
    Cas(u8, bool, Vec<u8>),
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(b'a'..=b'z', 0..12),
        (0u64..100_000).prop_map(|n| n.to_string().into_bytes()),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..6;
    prop_oneof![
        (k.clone(), any::<u32>(), value()).prop_map(|(k, f, v)| Op::Set(k, f, v)),
        (k.clone(), value()).prop_map(|(k, v)| Op::Add(k, v)),
        (k.clone(), value()).prop_map(|(k, v)| Op::Replace(k, v)),
        (k.clone(), value()).prop_map(|(k, v)| Op::Append(k, v)),
        (k.clone(), value()).prop_map(|(k, v)| Op::Prepend(k, v)),
        proptest::collection::vec(k.clone(), 1..5).prop_map(Op::Get),
        k.clone().prop_map(Op::Delete),
        (k.clone(), 0u64..1000).prop_map(|(k, d)| Op::Incr(k, d)),
        (k.clone(), 0u64..1000).prop_map(|(k, d)| Op::Decr(k, d)),
        k.clone().prop_map(Op::Touch),
        (k, any::<bool>(), value()).prop_map(|(k, good, v)| Op::Cas(k, good, v)),
    ]
}

struct Model {
    items: HashMap<u8, (u32, Vec<u8>)>,
}

fn counter(v: &[u8]) -> Option<u64> {
    let end = v.iter().position(|&b| b == b' ').unwrap_or(v.len());
    if end == 0 || v[end..].iter().any(|&b| b != b' ') {
        return None;
    }
    std::str::from_utf8(&v[..end]).ok()?.parse().ok()
}

fn run(eng: &Cache, s: &mut Session, req: &[u8]) -> Vec<u8> {
    let mut out = remora_kv::out::Out::new();
    let o = process(eng, s, req, &mut out, 1 << 20);
    assert_eq!(o.consumed, req.len());
    out.to_vec()
}

fn gets_cas(eng: &Cache, s: &mut Session, k: u8) -> Option<u64> {
    let r = run(eng, s, format!("gets k{k}\r\n").as_bytes());
    let line = r.split(|&b| b == b'\r').next()?;
    let text = std::str::from_utf8(line).ok()?;
    text.split(' ').nth(4)?.parse().ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn replies_match_model(ops in proptest::collection::vec(op(), 1..60)) {
        let eng = Cache::new(Settings::default());
        let mut s = Session::new(eng.register_worker());
        let mut m = Model { items: HashMap::new() };
        for op in ops {
            let (req, want): (Vec<u8>, Vec<u8>) = match op.clone() {
                Op::Set(k, f, v) => {
                    m.items.insert(k, (f, v.clone()));
                    (store("set", k, f, &v), b"STORED\r\n".to_vec())
                }
                Op::Add(k, v) => {
                    let want = match m.items.entry(k) {
                        std::collections::hash_map::Entry::Occupied(_) => "NOT_STORED",
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert((0, v.clone()));
                            "STORED"
                        }
                    };
                    (store("add", k, 0, &v), format!("{want}\r\n").into_bytes())
                }
                Op::Replace(k, v) => {
                    let want = if let Some(e) = m.items.get_mut(&k) { *e = (0, v.clone()); "STORED" } else { "NOT_STORED" };
                    (store("replace", k, 0, &v), format!("{want}\r\n").into_bytes())
                }
                Op::Append(k, v) | Op::Prepend(k, v) => {
                    let append = matches!(op, Op::Append(..));
                    let want = if let Some(e) = m.items.get_mut(&k) {
                        if append { e.1.extend_from_slice(&v) } else { let mut n = v.clone(); n.extend_from_slice(&e.1); e.1 = n; }
                        "STORED"
                    } else { "NOT_STORED" };
                    (store(if append { "append" } else { "prepend" }, k, 0, &v), format!("{want}\r\n").into_bytes())
                }
                Op::Get(keys) => {
                    let mut req = b"get".to_vec();
                    let mut want = Vec::new();
                    for k in keys {
                        req.extend_from_slice(format!(" k{k}").as_bytes());
                        if let Some((f, v)) = m.items.get(&k) {
                            want.extend_from_slice(format!("VALUE k{k} {f} {}\r\n", v.len()).as_bytes());
                            want.extend_from_slice(v);
                            want.extend_from_slice(b"\r\n");
                        }
                    }
                    req.extend_from_slice(b"\r\n");
                    want.extend_from_slice(b"END\r\n");
                    (req, want)
                }
                Op::Delete(k) => {
                    let want = if m.items.remove(&k).is_some() { "DELETED" } else { "NOT_FOUND" };
                    (format!("delete k{k}\r\n").into_bytes(), format!("{want}\r\n").into_bytes())
                }
                Op::Incr(k, d) | Op::Decr(k, d) => {
                    let incr = matches!(op, Op::Incr(..));
                    let want = match m.items.get_mut(&k) {
                        None => "NOT_FOUND".to_string(),
                        Some(e) => match counter(&e.1) {
                            None => "CLIENT_ERROR cannot increment or decrement non-numeric value".to_string(),
                            Some(n) => {
                                let r = if incr { n.wrapping_add(d) } else { n.saturating_sub(d) };
                                let mut t = r.to_string().into_bytes();
                                if t.len() < e.1.len() { t.resize(e.1.len(), b' '); }
                                e.1 = t;
                                r.to_string()
                            }
                        },
                    };
                    (format!("{} k{k} {d}\r\n", if incr { "incr" } else { "decr" }).into_bytes(), format!("{want}\r\n").into_bytes())
                }
                Op::Touch(k) => {
                    let want = if m.items.contains_key(&k) { "TOUCHED" } else { "NOT_FOUND" };
                    (format!("touch k{k} 1000\r\n").into_bytes(), format!("{want}\r\n").into_bytes())
                }
                Op::Cas(k, good, v) => {
                    let cas = gets_cas(&eng, &mut s, k);
                    let (token, want) = match (cas, good) {
                        (None, _) => (1, "NOT_FOUND"),
                        (Some(c), true) => { m.items.insert(k, (0, v.clone())); (c, "STORED") }
                        (Some(c), false) => (c + 1_000_000, "EXISTS"),
                    };
                    let mut req = format!("cas k{k} 0 0 {} {token}\r\n", v.len()).into_bytes();
                    req.extend_from_slice(&v);
                    req.extend_from_slice(b"\r\n");
                    (req, format!("{want}\r\n").into_bytes())
                }
            };
            let got = run(&eng, &mut s, &req);
            prop_assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want), "request {:?}", String::from_utf8_lossy(&req));
        }
    }
}

fn store(verb: &str, k: u8, flags: u32, v: &[u8]) -> Vec<u8> {
    let mut r = format!("{verb} k{k} {flags} 0 {}\r\n", v.len()).into_bytes();
    r.extend_from_slice(v);
    r.extend_from_slice(b"\r\n");
    r
}
