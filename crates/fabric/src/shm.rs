//! Same-host setup of the `shm` transport: after the TCP hello, the two ends meet on a unix
//! socket, which carries the queue pair's frames and the memory each side hands over.
//!
//! Trust model (see `docs/security.md`): a side touches only memory that its owner handed over
//! with `SCM_RIGHTS` (a memfd sealed against shrinking), never a process named by the peer;
//! whatever the peer cannot hand over travels inline in the stream, as over tcp. The accepting
//! side creates a fresh listener under a random abstract name and sends the name and a secret
//! in its TCP hello; the connecting side must present the secret on the unix socket, so a local
//! user who sees the name in `/proc/net/unix` cannot take the connection's place. Each side
//! learns the other's kernel-checked credentials (`SO_PEERCRED`), which name the peer in logs
//! and in [`crate::Qp::peer_credentials`]; they grant nothing.
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::stream::sock::{recv_fds, send_fds};

/// Bytes of the rendezvous in the hello: the listener's name, then the secret.
pub(crate) const TOKEN_LEN: usize = remora_wire::ctrl::setup::RENDEZVOUS_LEN;
/// Descriptors a listener may hand to each peer at setup.
pub const MAX_HANDOVER: usize = 8;

/// Kernel-checked identity of the process at the other end of an `shm` queue pair, taken when
/// it connected (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// Process id.
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

fn credentials(s: &UnixStream) -> Result<Credentials> {
    let c = rustix::net::sockopt::socket_peercred(s)
        .map_err(|e| Error::Setup(format!("reading the shm peer's credentials: {e}")))?;
    Ok(Credentials {
        pid: c.pid.as_raw_nonzero().get(),
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

fn random_token() -> Result<[u8; TOKEN_LEN]> {
    let mut t = [0u8; TOKEN_LEN];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut t))
        .map_err(|e| Error::Setup(format!("reading /dev/urandom: {e}")))?;
    Ok(t)
}

fn address(token: &[u8; TOKEN_LEN]) -> io::Result<SocketAddr> {
    let name: String = token[..8].iter().map(|b| format!("{b:02x}")).collect();
    SocketAddr::from_abstract_name(format!("remora-shm-{name}"))
}

/// The accepting side's listener for one connection.
pub(crate) struct Offer {
    listener: UnixListener,
    token: [u8; TOKEN_LEN],
}

impl Offer {
    /// Binds a fresh abstract listener; its name and secret go into the hello.
    pub(crate) fn new() -> Result<Offer> {
        let token = random_token()?;
        let listener = address(&token)
            .and_then(|a| UnixListener::bind_addr(&a))
            .map_err(|e| Error::Setup(format!("binding the shm rendezvous socket: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::Setup(format!("shm rendezvous socket: {e}")))?;
        Ok(Offer { listener, token })
    }

    pub(crate) fn token(&self) -> [u8; TOKEN_LEN] {
        self.token
    }

    /// Waits (until `deadline`, or until the peer closes its setup connection `control`) for
    /// the peer that presents the secret, then hands it `fds`. Connections without the secret
    /// are dropped; the listener closes when this returns.
    pub(crate) fn accept(
        self,
        control: &std::net::TcpStream,
        deadline: Instant,
        fds: &[OwnedFd],
    ) -> Result<(UnixStream, Credentials)> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Setup(
                    "the shm peer did not reach the rendezvous socket in time".into(),
                ));
            }
            use rustix::event::{PollFd, PollFlags};
            let mut pfd = [
                PollFd::new(&self.listener, PollFlags::IN),
                PollFd::new(control, PollFlags::IN | PollFlags::RDHUP),
            ];
            let ts = rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec {
                tv_sec: 10,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut pfd, Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(Error::Setup(format!("shm rendezvous: {e}"))),
            }
            // A peer that left (or talks on the setup connection after its hello) frees its
            // setup slot now rather than at the deadline.
            if !pfd[1].revents().is_empty() {
                return Err(Error::Setup(
                    "the shm peer left before reaching the rendezvous socket".into(),
                ));
            }
            let s = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(Error::Setup(format!("shm rendezvous accept: {e}"))),
            };
            if let Some(x) = self.admit(s, deadline, fds)? {
                return Ok(x);
            }
        }
    }

    /// Checks one connection's secret; `None` (dropped) if it has the wrong one.
    fn admit(
        &self,
        s: UnixStream,
        deadline: Instant,
        fds: &[OwnedFd],
    ) -> Result<Option<(UnixStream, Credentials)>> {
        let setup = |e: io::Error| Error::Setup(format!("shm rendezvous: {e}"));
        s.set_nonblocking(false).map_err(setup)?;
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(setup)?;
        let mut secret = [0u8; TOKEN_LEN - 8];
        if (&s).read_exact(&mut secret).is_err() || secret != self.token[8..] {
            let who = credentials(&s).map(|c| c.pid).unwrap_or(0);
            tracing::warn!(
                pid = who,
                "shm rendezvous: a connection without the secret dropped"
            );
            return Ok(None);
        }
        s.set_read_timeout(None).map_err(setup)?;
        let cred = credentials(&s)?;
        let n = fds.len().min(MAX_HANDOVER) as u32;
        let borrowed: Vec<_> = fds.iter().take(n as usize).map(|f| f.as_fd()).collect();
        send_fds(&s, &n.to_le_bytes(), &borrowed).map_err(setup)?;
        Ok(Some((s, cred)))
    }
}

/// The connecting side: meets the listener named in the peer's hello, presents the secret and
/// receives the descriptors the listener hands over.
pub(crate) fn join(
    token: &[u8; TOKEN_LEN],
    timeout: Duration,
) -> Result<(UnixStream, Credentials, Vec<OwnedFd>)> {
    let s = address(token)
        .and_then(|a| UnixStream::connect_addr(&a))
        .map_err(|e| {
            Error::Setup(format!(
                "shm needs both ends on the same host and network namespace; \
                 the peer's rendezvous socket is unreachable: {e}"
            ))
        })?;
    let setup = |e: io::Error| Error::Setup(format!("shm rendezvous: {e}"));
    (&s).write_all(&token[8..]).map_err(setup)?;
    s.set_read_timeout(Some(timeout)).map_err(setup)?;
    let mut count = [0u8; 4];
    let mut have = 0;
    let mut fds = Vec::new();
    while have < 4 {
        let (n, got) = recv_fds(&s, &mut count[have..]).map_err(setup)?;
        if n == 0 {
            return Err(Error::Setup(
                "the shm peer closed during the rendezvous".into(),
            ));
        }
        have += n;
        fds.extend(got);
    }
    let n = u32::from_le_bytes(count) as usize;
    if n > MAX_HANDOVER || fds.len() != n {
        return Err(Error::Setup(format!(
            "the shm peer announced {n} descriptors and sent {}",
            fds.len()
        )));
    }
    s.set_read_timeout(None).map_err(setup)?;
    let cred = credentials(&s)?;
    Ok((s, cred, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_without_the_secret_is_dropped_and_the_right_one_admitted() {
        let offer = Offer::new().unwrap();
        let token = offer.token();
        let f: OwnedFd = std::fs::File::open("/proc/self/exe").unwrap().into();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let control = l.accept().unwrap().0;
        let t = std::thread::spawn(move || {
            offer.accept(&control, Instant::now() + Duration::from_secs(5), &[f])
        });
        // A local user who read the name from /proc/net/unix but not the secret.
        let mut wrong = token;
        wrong[8] ^= 1;
        let mut intruder = UnixStream::connect_addr(&address(&wrong).unwrap()).unwrap();
        intruder.write_all(&wrong[8..]).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(
            intruder.read(&mut b).unwrap_or(0),
            0,
            "intruder gets nothing"
        );
        let (_s, cred, fds) = join(&token, Duration::from_secs(5)).unwrap();
        assert_eq!(cred.pid, std::process::id() as i32);
        assert_eq!(fds.len(), 1);
        let (_s2, cred2) = t.join().unwrap().unwrap();
        assert_eq!(cred2.uid, rustix::process::geteuid().as_raw());
    }

    #[test]
    fn a_peer_that_closes_its_setup_connection_frees_the_wait_at_once() {
        let offer = Offer::new().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let control = l.accept().unwrap().0;
        drop(c);
        let t0 = Instant::now();
        let e = offer
            .accept(&control, Instant::now() + Duration::from_secs(10), &[])
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2), "{e}");
        assert!(e.to_string().contains("left"), "{e}");
    }

    #[test]
    fn an_unknown_rendezvous_is_a_clear_error() {
        let e = join(&[7u8; TOKEN_LEN], Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("same host"), "{e}");
    }
}
