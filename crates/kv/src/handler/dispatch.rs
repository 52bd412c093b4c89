//! The request loop of a connection: the migration gate, `-R`'s yield, ASCII authentication,
//! the protocol chosen by the first byte, then each whole request parsed and handed to its
//! protocol's module, with `-vv`'s echo; a moved cache's requests are redirected instead.

use super::*;

/// Processes as many whole requests from `input` as there are, appending replies to `out`.
/// Stops once `out` holds `out_limit` unsent bytes (back-pressure on slow readers): between
/// requests, and inside a text multiget, which leaves its line unconsumed and resumes with the
/// next key when called again on the same input.
pub fn process(
    eng: &Cache,
    s: &mut Session,
    input: &[u8],
    out: &mut Out,
    out_limit: usize,
) -> Outcome {
    run(eng, s, input, out, out_limit, false)
}

/// Runs the first request of `input` (after any bytes left to swallow) with no output limit:
/// a UDP reply must be whole before its datagrams can be numbered.
pub fn process_one(eng: &Cache, s: &mut Session, input: &[u8], out: &mut Out) -> Outcome {
    run(eng, s, input, out, usize::MAX, true)
}

fn run(
    eng: &Cache,
    s: &mut Session,
    input: &[u8],
    out: &mut Out,
    out_limit: usize,
    one: bool,
) -> Outcome {
    // A migration's freeze waits for this call to end; a moved cache runs nothing.
    let _gate = match eng.migration.enter() {
        crate::migrate::gate::Entry::Go(g) => g,
        crate::migrate::gate::Entry::Redirect(line) => return redirect(eng, s, input, out, &line),
    };
    let lim = eng.limits();
    let now = eng.now();
    let mut pos = 0;
    let mut close = false;
    let mut yielded = false;
    let mut reqs = 0usize;
    if let Some(e) = &s.conn {
        e.busy(now);
    }
    // Response objects are freed once their replies were sent.
    if out.is_empty() {
        s.resps.set(0);
    }
    s.batch = Some(out.mark());
    let vv = eng.settings.verbose >= 2;
    while pos < input.len() && out.len() < out_limit {
        if one && reqs > 0 {
            break;
        }
        if reqs >= s.max_reqs {
            // memcached's -R: yield with input left so one pipelining client cannot hog the
            // worker thread.
            yielded = true;
            inc(&s.counters.conn_yields);
            break;
        }
        if s.swallow > 0 {
            let n = s.swallow.min(input.len() - pos);
            s.swallow -= n;
            pos += n;
            continue;
        }
        if let Some((_, file)) = eng.settings.auth.as_ref().filter(|_| !s.authenticated) {
            match auth::step(file, &input[pos..], out) {
                auth::Step::Incomplete => break,
                auth::Step::Answered {
                    consumed,
                    verdict,
                    swallow,
                } => {
                    pos += consumed;
                    reqs += 1;
                    s.swallow = swallow;
                    if let Some(ok) = verdict {
                        inc(&s.counters.auth_cmds);
                        if !ok {
                            inc(&s.counters.auth_errors);
                        }
                        s.authenticated = ok;
                    }
                    continue;
                }
            }
        }
        if s.proto == Proto::Unknown {
            s.proto = if input[pos] == binary::MAGIC_REQ {
                Proto::Binary
            } else {
                Proto::Text
            };
            if vv {
                let name = if s.proto == Proto::Binary {
                    "binary"
                } else {
                    "ascii"
                };
                eprintln!("{}: Client using the {name} protocol", s.id);
            }
            // -B ascii / -B binary: a client speaking the other protocol is dropped.
            let bound = eng.settings.binding_protocol.as_str();
            if (bound == "ascii" && s.proto == Proto::Binary)
                || (bound == "binary" && s.proto == Proto::Text)
            {
                close = true;
                break;
            }
        }
        let buf = &input[pos..];
        if s.proto == Proto::Binary {
            match binary::parse(buf, &lim) {
                binary::Parse::Incomplete => break,
                binary::Parse::Close => {
                    s.close_reason = Some(CloseReason::Error);
                    close = true;
                    break;
                }
                binary::Parse::TooLarge(h, body) => {
                    inc(&s.counters.store_too_large);
                    put_bin_error(out, &h, status::E2BIG);
                    reqs += 1;
                    pos += binary::HEADER_LEN;
                    s.swallow = body;
                }
                binary::Parse::Done(req, n) => {
                    if !s.take_resp() {
                        // memcached closes a connection it cannot give a response object,
                        // unsent replies and all.
                        s.drop_batch(out);
                        close = true;
                        break;
                    }
                    pos += n;
                    reqs += 1;
                    if run_binary(eng, s, &req, now, out) {
                        close = true;
                        break;
                    }
                }
            }
        } else {
            match text::parse(buf, &lim) {
                text::Parse::Incomplete => break,
                text::Parse::Close => {
                    // memcached closes without a reply.
                    s.close_reason = Some(CloseReason::Error);
                    close = true;
                    break;
                }
                text::Parse::Done(cmd, n) => {
                    // A resumed multiget holds its response objects already.
                    if s.get_done == 0 && !s.take_resp() {
                        s.drop_batch(out);
                        close = true;
                        break;
                    }
                    // A resumed multiget was echoed when it started.
                    if vv && s.get_done == 0 {
                        let l = text::line(buf).map_or(&buf[..0], |(l, _)| l);
                        eprintln!("<{} {}", s.id, String::from_utf8_lossy(l));
                    }
                    let echo = vv && echoes_reply(&cmd);
                    // memcached sends what is queued at an `mn`, which frees its responses.
                    let flushes = matches!(cmd, Command::Meta(MetaCommand::Noop));
                    let mark = out.mark();
                    match run_text(eng, s, cmd, now, out, out_limit) {
                        Next::Later => break,
                        Next::Close => {
                            pos += n;
                            close = true;
                            break;
                        }
                        Next::Go => {
                            pos += n;
                            reqs += 1;
                            if flushes {
                                s.resps.set(0);
                                s.batch = Some(out.mark());
                            }
                        }
                    }
                    if echo {
                        echo_reply(s.id, out, mark);
                    }
                }
            }
        }
    }
    crate::stats::add(&s.counters.bytes_read, pos as u64);
    if let Some(e) = &s.conn {
        e.idle();
    }
    Outcome {
        consumed: pos,
        close,
        yielded,
    }
}

/// The cache moved away (or a migration target lost its source): ASCII clients are told
/// where it went with a `SERVER_ERROR` line, binary ones are closed; nothing is run, so no
/// request that waited through the switch-over was acknowledged here.
fn redirect(eng: &Cache, s: &mut Session, input: &[u8], out: &mut Out, line: &str) -> Outcome {
    // `stats migration` still answers: the operator follows the migration through it.
    const ASK: &[u8] = b"stats migration\r\n";
    if input.starts_with(ASK) && s.proto != Proto::Binary {
        for (k, v) in eng.migration.stats() {
            out.extend_from_slice(format!("STAT {k} {v}\r\n").as_bytes());
        }
        out.extend_from_slice(b"END\r\n");
        return Outcome {
            consumed: ASK.len(),
            close: false,
            yielded: false,
        };
    }
    let binary = s.proto == Proto::Binary
        || (s.proto == Proto::Unknown && input.first() == Some(&binary::MAGIC_REQ));
    if !binary && !input.is_empty() {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    Outcome {
        consumed: input.len(),
        close: true,
        yielded: false,
    }
}

/// Whether `-vv` prints a command's reply line as memcached does (`>fd STORED`): gets print
/// their own lines, meta commands other than `mn` print none.
fn echoes_reply(cmd: &Command<'_>) -> bool {
    match cmd {
        Command::Get { .. } | Command::Hangup => false,
        Command::Meta(m) => matches!(m, MetaCommand::Noop),
        _ => true,
    }
}

/// `-vv`: prints a reply that is one line (multi-line ones, such as `stats`, memcached does
/// not print either).
fn echo_reply(id: u64, out: &Out, mark: crate::out::Mark) {
    let Some(t) = out.text_since(mark) else {
        return;
    };
    if let Some(line) = t.strip_suffix(b"\r\n") {
        if !line.contains(&b'\n') {
            eprintln!(">{id} {}", String::from_utf8_lossy(line));
        }
    }
}
