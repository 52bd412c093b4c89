//! Runs binary-protocol requests and writes their responses.

use super::exec::{self, Exec, Via};
use super::*;

pub(super) fn put_bin_error(out: &mut Out, h: &binary::Header, st: u16) {
    binary::put_response(
        out,
        h.opcode,
        st,
        h.opaque,
        0,
        &[],
        &[],
        binary::status_text(st),
    );
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Runs one binary request; returns true to close.
pub(super) fn run_binary(
    eng: &Cache,
    s: &mut Session,
    req: &binary::Request<'_>,
    now: u32,
    out: &mut Out,
) -> bool {
    let b = Bin {
        x: Exec {
            eng,
            c: &s.counters,
            now,
            cfd: s.cfd(),
            via: Via::Binary,
        },
        h: &req.header,
        req,
    };
    let h = b.h;
    match h.opcode {
        op::GET | op::GETQ | op::GETK | op::GETKQ | op::GAT | op::GATQ | op::GATK | op::GATKQ => {
            b.get(out)
        }
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => b.store(out),
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => b.concat(out),
        op::DELETE | op::DELETEQ => b.delete(out),
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => b.arith(out),
        op::QUIT | op::QUITQ => {
            if h.opcode == op::QUIT {
                b.resp(out, status::OK, 0, &[], &[], &[]);
            }
            true
        }
        op::FLUSH | op::FLUSHQ => b.flush(out),
        op::NOOP => {
            b.resp(out, status::OK, 0, &[], &[], &[]);
            false
        }
        op::VERSION => {
            b.resp(out, status::OK, 0, &[], &[], VERSION.as_bytes());
            false
        }
        // memcached 1.6 answers binary verbosity as an unknown command; so do we.
        op::TOUCH => b.touch(out),
        op::STAT => b.stat(out),
        _ => {
            put_bin_error(out, h, status::UNKNOWN_COMMAND);
            false
        }
    }
}

/// One binary request being run: the executor, the request's header and the request. Each
/// family's method writes the response and returns true to close.
struct Bin<'a, 'r> {
    x: Exec<'a>,
    h: &'r binary::Header,
    req: &'r binary::Request<'r>,
}

impl Bin<'_, '_> {
    /// The lengths of the extras, key and value.
    fn lens(&self) -> (usize, usize, usize) {
        let req = self.req;
        (req.extras.len(), req.key.len(), req.value.len())
    }

    /// memcached answers invalid arguments and then closes the connection.
    fn inval(&self, out: &mut Out) -> bool {
        put_bin_error(out, self.h, status::EINVAL);
        true
    }

    /// A response to this request.
    fn resp(&self, out: &mut Out, st: u16, cas: u64, extras: &[u8], key: &[u8], val: &[u8]) {
        let h = self.h;
        binary::put_response(out, h.opcode, st, h.opaque, cas, extras, key, val)
    }

    /// GET, GETK, GAT, GATK and their quiet forms.
    fn get(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, vl) = self.lens();
        let touch = matches!(h.opcode, op::GAT | op::GATQ | op::GATK | op::GATKQ);
        let want_extras = if touch { 4 } else { 0 };
        if el != want_extras || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
            return self.inval(out);
        }
        let quiet = matches!(h.opcode, op::GETQ | op::GETKQ | op::GATQ | op::GATKQ);
        let with_key = matches!(h.opcode, op::GETK | op::GETKQ | op::GATK | op::GATKQ);
        let exptime = if touch { be32(req.extras) as i64 } else { 0 };
        let opts = ReadOpts {
            touch: touch.then_some(exptime),
            ..ReadOpts::default()
        };
        let hit = x.get(req.key, opts, |it| {
            let k: &[u8] = if with_key { it.key } else { &[] };
            let flags = it.flags.to_be_bytes();
            let (op, st) = (h.opcode, status::OK);
            let v = it.value.len();
            binary::put_response_head(out, op, st, h.opaque, it.cas, &flags, k, v);
            out.value(it.value, it.shared, it.key.len());
        });
        if !hit && !quiet {
            if with_key {
                self.resp(out, status::KEY_ENOENT, 0, &[], req.key, &[]);
            } else {
                put_bin_error(out, h, status::KEY_ENOENT);
            }
        }
        false
    }

    /// SET, ADD, REPLACE and their quiet forms.
    fn store(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, _) = self.lens();
        if el != 8 || kl == 0 || kl > crate::protocol::KEY_MAX {
            return self.inval(out);
        }
        let flags = be32(&req.extras[0..4]);
        // Binary exptimes are unsigned (memcached reads them as a uint32_t): all ones is a
        // time far ahead, not -1.
        let exptime = be32(&req.extras[4..8]) as i64;
        let base = match h.opcode {
            op::SET | op::SETQ => StoreMode::Set,
            op::ADD | op::ADDQ => StoreMode::Add,
            _ => StoreMode::Replace,
        };
        // A CAS makes any of them a compare-and-swap, an add included (memcached).
        let mode = if h.cas != 0 {
            StoreMode::Cas(h.cas)
        } else {
            base
        };
        let quiet = matches!(h.opcode, op::SETQ | op::ADDQ | op::REPLACEQ);
        let r = x.store(exec::StoreReq {
            mode,
            key: req.key,
            flags,
            exptime,
            data: req.value,
        });
        bin_store_reply(out, h, base, r, quiet);
        false
    }

    /// APPEND, PREPEND and their quiet forms.
    fn concat(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, _) = self.lens();
        if el != 0 || kl == 0 || kl > crate::protocol::KEY_MAX {
            return self.inval(out);
        }
        // memcached checks a CAS given with an append or prepend.
        let cas = (h.cas != 0).then_some(h.cas);
        let mode = if matches!(h.opcode, op::APPEND | op::APPENDQ) {
            StoreMode::Append(cas)
        } else {
            StoreMode::Prepend(cas)
        };
        let quiet = matches!(h.opcode, op::APPENDQ | op::PREPENDQ);
        let r = x.store(exec::StoreReq {
            mode,
            key: req.key,
            flags: 0,
            exptime: 0,
            data: req.value,
        });
        bin_store_reply(out, h, mode, r, quiet);
        false
    }

    /// DELETE and DELETEQ.
    fn delete(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, vl) = self.lens();
        if el != 0 || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
            return self.inval(out);
        }
        let quiet = h.opcode == op::DELETEQ;
        let cas = (h.cas != 0).then_some(h.cas);
        match x.delete(req.key, cas, None) {
            DeleteOutcome::Deleted => {
                if !quiet {
                    self.resp(out, status::OK, 0, &[], &[], &[]);
                }
            }
            DeleteOutcome::NotFound => put_bin_error(out, h, status::KEY_ENOENT),
            DeleteOutcome::Exists => put_bin_error(out, h, status::KEY_EEXISTS),
        }
        false
    }

    /// INCREMENT, DECREMENT and their quiet forms.
    fn arith(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, vl) = self.lens();
        if el != 20 || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
            return self.inval(out);
        }
        let incr = matches!(h.opcode, op::INCREMENT | op::INCREMENTQ);
        let quiet = matches!(h.opcode, op::INCREMENTQ | op::DECREMENTQ);
        let delta = be64(&req.extras[0..8]);
        let initial = be64(&req.extras[8..16]);
        let exptime = be32(&req.extras[16..20]);
        let cas = (h.cas != 0).then_some(h.cas);
        // An exptime of all ones: no counter is created on a miss.
        let vivify = (exptime != u32::MAX).then_some((initial, exptime as i64));
        match x.arith(req.key, incr, delta, cas, vivify) {
            exec::Arith::Value { value, cas, .. } => {
                if !quiet {
                    self.resp(out, status::OK, cas, &[], &[], &value.to_be_bytes());
                }
            }
            exec::Arith::NotFound => put_bin_error(out, h, status::KEY_ENOENT),
            exec::Arith::Exists | exec::Arith::NotCreated => {
                put_bin_error(out, h, status::KEY_EEXISTS)
            }
            exec::Arith::NonNumeric => put_bin_error(out, h, status::DELTA_BADVAL),
        }
        false
    }

    /// FLUSH and FLUSHQ.
    fn flush(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, vl) = self.lens();
        if (el != 0 && el != 4) || kl != 0 || vl != 0 {
            return self.inval(out);
        }
        let delay = if el == 4 { be32(req.extras) as i64 } else { 0 };
        if !x.flush(delay) {
            put_bin_error(out, h, status::EINVAL);
            return false;
        }
        if h.opcode == op::FLUSH {
            self.resp(out, status::OK, 0, &[], &[], &[]);
        }
        false
    }

    /// TOUCH.
    fn touch(&self, out: &mut Out) -> bool {
        let (x, h, req) = (&self.x, self.h, self.req);
        let (el, kl, vl) = self.lens();
        if el != 4 || kl == 0 || vl != 0 || kl > crate::protocol::KEY_MAX {
            return self.inval(out);
        }
        let exptime = be32(req.extras) as i64;
        let hit = x.touch(req.key, exptime, |it| {
            self.resp(out, status::OK, it.cas, &it.flags.to_be_bytes(), &[], &[]);
        });
        if !hit {
            put_bin_error(out, h, status::KEY_ENOENT);
        }
        false
    }

    /// STAT: a group's lines, then an empty one; `reset`, `settings` and `detail`.
    fn stat(&self, out: &mut Out) -> bool {
        let (eng, h, req) = (self.x.eng, self.h, self.req);
        let (_, kl, _) = self.lens();
        // memcached matches `reset`, `settings` and `detail` by prefix (`strncmp`), and
        // `detail` takes its mode after a space in the same key: `detail on`.
        let key = req.key;
        let group = if key.starts_with(b"reset") {
            eng.reset_stats();
            self.resp(out, status::OK, 0, &[], &[], &[]);
            return false;
        } else if key.starts_with(b"settings") {
            Some(&b"settings"[..])
        } else if let Some(mode) = key.strip_prefix(b"detail") {
            if mode.starts_with(b" dump") {
                let mut dump = Vec::new();
                eng.prefixes.dump(&mut dump);
                self.resp(out, status::OK, 0, &[], b"detailed", &dump);
            } else if mode.starts_with(b" on") || mode.starts_with(b" off") {
                eng.prefixes.set_enabled(mode.starts_with(b" on"));
            } else {
                put_bin_error(out, h, status::KEY_ENOENT);
                return false;
            }
            self.resp(out, status::OK, 0, &[], &[], &[]);
            return false;
        } else {
            (kl > 0).then_some(key)
        };
        match eng.stats(group) {
            Some(lines) => {
                for (k, v) in lines {
                    self.resp(out, status::OK, 0, &[], k.as_bytes(), v.as_bytes());
                }
                self.resp(out, status::OK, 0, &[], &[], &[]);
            }
            None => put_bin_error(out, h, status::KEY_ENOENT),
        }
        false
    }
}

fn bin_store_reply(
    out: &mut Out,
    h: &binary::Header,
    base: StoreMode,
    r: StoreOutcome,
    quiet: bool,
) {
    match r {
        StoreOutcome::Stored(cas) => {
            if !quiet {
                binary::put_response(out, h.opcode, status::OK, h.opaque, cas, &[], &[], &[]);
            }
        }
        StoreOutcome::NotStored => {
            let st = match base {
                StoreMode::Add => status::KEY_EEXISTS,
                StoreMode::Replace => status::KEY_ENOENT,
                _ => status::NOT_STORED,
            };
            put_bin_error(out, h, st);
        }
        StoreOutcome::Exists => put_bin_error(out, h, status::KEY_EEXISTS),
        StoreOutcome::NotFound => put_bin_error(out, h, status::KEY_ENOENT),
        StoreOutcome::TooLarge => put_bin_error(out, h, status::E2BIG),
        StoreOutcome::NoMemory => put_bin_error(out, h, status::ENOMEM),
    }
}
