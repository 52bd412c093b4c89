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
    let mut w = Walk {
        eng,
        lim: eng.limits(),
        now: eng.now(),
        vv: eng.settings.verbose >= 2,
        out_limit,
        pos: 0,
        reqs: 0,
    };
    let mut close = false;
    let mut yielded = false;
    if let Some(e) = &s.conn {
        e.busy(w.now);
    }
    // Response objects are freed once their replies were sent.
    if out.is_empty() {
        s.resps.set(0);
    }
    s.batch = Some(out.mark());
    while w.pos < input.len() && out.len() < out_limit {
        if one && w.reqs > 0 {
            break;
        }
        if w.reqs >= s.max_reqs {
            // memcached's -R: yield with input left so one pipelining client cannot hog the
            // worker thread.
            yielded = true;
            inc(&s.counters.conn_yields);
            break;
        }
        if s.swallow > 0 {
            let n = s.swallow.min(input.len() - w.pos);
            s.swallow -= n;
            w.pos += n;
            continue;
        }
        let flow = match eng.settings.auth.as_ref().filter(|_| !s.authenticated) {
            Some((_, file)) => w.authenticate(file, s, &input[w.pos..], out),
            None => match w.choose_proto(s, input[w.pos]) {
                Flow::Go if s.proto == Proto::Binary => w.binary(s, &input[w.pos..], out),
                Flow::Go => w.text(s, &input[w.pos..], out),
                stop => stop,
            },
        };
        match flow {
            Flow::Go => {}
            Flow::Stop => break,
            Flow::Close => {
                close = true;
                break;
            }
        }
    }
    crate::stats::add(&s.counters.bytes_read, w.pos as u64);
    if let Some(e) = &s.conn {
        e.idle();
    }
    Outcome {
        consumed: w.pos,
        close,
        yielded,
    }
}

/// One call of [`run`]: what every request reads, and how far the input was taken.
struct Walk<'e> {
    eng: &'e Cache,
    lim: Limits,
    now: u32,
    /// `-vv`: requests and one-line replies are echoed to stderr.
    vv: bool,
    out_limit: usize,
    /// Input bytes consumed.
    pos: usize,
    /// Requests run.
    reqs: usize,
}

/// What the request loop does after a step.
enum Flow {
    /// Goes on with the next request.
    Go,
    /// Stops: the input holds no whole request, or the output is full.
    Stop,
    /// Stops and closes the connection.
    Close,
}

impl Walk<'_> {
    /// `-Y`: the ASCII authentication step a session takes before anything else runs.
    fn authenticate(
        &mut self,
        file: &auth::AuthFile,
        s: &mut Session,
        buf: &[u8],
        out: &mut Out,
    ) -> Flow {
        match auth::step(file, buf, out) {
            auth::Step::Incomplete => Flow::Stop,
            auth::Step::Answered {
                consumed,
                verdict,
                swallow,
            } => {
                self.pos += consumed;
                self.reqs += 1;
                s.swallow = swallow;
                if let Some(ok) = verdict {
                    inc(&s.counters.auth_cmds);
                    if !ok {
                        inc(&s.counters.auth_errors);
                    }
                    s.authenticated = ok;
                }
                Flow::Go
            }
        }
    }

    /// The protocol, chosen by the connection's first byte; a client speaking the other
    /// protocol than `-B` binds is closed.
    fn choose_proto(&self, s: &mut Session, first: u8) -> Flow {
        if s.proto != Proto::Unknown {
            return Flow::Go;
        }
        s.proto = if first == binary::MAGIC_REQ {
            Proto::Binary
        } else {
            Proto::Text
        };
        if self.vv {
            let name = if s.proto == Proto::Binary {
                "binary"
            } else {
                "ascii"
            };
            eprintln!("{}: Client using the {name} protocol", s.id);
        }
        // -B ascii / -B binary: a client speaking the other protocol is dropped.
        let bound = self.eng.settings.binding_protocol.as_str();
        if (bound == "ascii" && s.proto == Proto::Binary)
            || (bound == "binary" && s.proto == Proto::Text)
        {
            return Flow::Close;
        }
        Flow::Go
    }

    /// Parses and runs the binary request at the front of `buf`.
    fn binary(&mut self, s: &mut Session, buf: &[u8], out: &mut Out) -> Flow {
        match binary::parse(buf, &self.lim) {
            binary::Parse::Incomplete => Flow::Stop,
            binary::Parse::Close => {
                s.close_reason = Some(CloseReason::Error);
                Flow::Close
            }
            binary::Parse::TooLarge(h, body) => {
                inc(&s.counters.store_too_large);
                put_bin_error(out, &h, status::E2BIG);
                self.reqs += 1;
                self.pos += binary::HEADER_LEN;
                s.swallow = body;
                Flow::Go
            }
            binary::Parse::Done(req, n) => {
                if !s.take_resp() {
                    // memcached closes a connection it cannot give a response object,
                    // unsent replies and all.
                    s.drop_batch(out);
                    return Flow::Close;
                }
                self.pos += n;
                self.reqs += 1;
                if run_binary(self.eng, s, &req, self.now, out) {
                    return Flow::Close;
                }
                Flow::Go
            }
        }
    }

    /// Parses and runs the text request at the front of `buf`, with `-vv`'s echo.
    fn text(&mut self, s: &mut Session, buf: &[u8], out: &mut Out) -> Flow {
        let vv = self.vv;
        match text::parse(buf, &self.lim) {
            text::Parse::Incomplete => Flow::Stop,
            text::Parse::Close => {
                // memcached closes without a reply.
                s.close_reason = Some(CloseReason::Error);
                Flow::Close
            }
            text::Parse::Done(cmd, n) => {
                // A resumed multiget holds its response objects already.
                if s.get_done == 0 && !s.take_resp() {
                    s.drop_batch(out);
                    return Flow::Close;
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
                match run_text(self.eng, s, cmd, self.now, out, self.out_limit) {
                    Next::Later => return Flow::Stop,
                    Next::Close => {
                        self.pos += n;
                        return Flow::Close;
                    }
                    Next::Go => {
                        self.pos += n;
                        self.reqs += 1;
                        if flushes {
                            s.resps.set(0);
                            s.batch = Some(out.mark());
                        }
                    }
                }
                if echo {
                    echo_reply(s.id, out, mark);
                }
                Flow::Go
            }
        }
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
