//! The one-time secret that lets exactly one target take an armed source's cache.
//!
//! Arming names where clients go; without a secret, any client that reached the port while
//! the source waited could send `migrate begin`, take the hand-over and drive the source to
//! stop with its cache gone. The operator passes the secret to the target
//! (`--migrate-secret-file`), which sends it with `migrate begin`; the source compares it in
//! constant time and forgets it once a target has it.

/// Bytes of randomness in a secret the source makes up (128 bits, 32 hex digits).
const RANDOM_BYTES: usize = 16;
/// Shortest secret an operator may choose (as many hex digits as a made-up one).
pub const MIN_LEN: usize = 2 * RANDOM_BYTES;
/// Longest secret accepted (it travels as one token on a text-protocol line).
pub const MAX_LEN: usize = 128;

/// A fresh secret: 32 hex digits from the kernel's random source.
pub fn generate() -> std::io::Result<String> {
    let mut b = [0u8; RANDOM_BYTES];
    let mut filled = 0;
    while filled < b.len() {
        filled += rustix::rand::getrandom(&mut b[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Whether `s` may serve as a secret: printable ASCII without spaces, from [`MIN_LEN`] to
/// [`MAX_LEN`] characters. Errors say why not.
pub fn check(s: &str) -> Result<(), &'static str> {
    if s.len() < MIN_LEN {
        return Err(
            "a migration secret needs at least 32 characters (e.g. `openssl rand -hex 16`)",
        );
    }
    if s.len() > MAX_LEN {
        return Err("a migration secret has at most 128 characters");
    }
    if !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("a migration secret is printable ASCII without spaces");
    }
    Ok(())
}

/// Compares without stopping at the first difference, so timing tells nothing of the secret.
pub fn matches(expected: &str, given: &[u8]) -> bool {
    let e = expected.as_bytes();
    let mut diff = (e.len() != given.len()) as u8;
    for (i, &x) in e.iter().enumerate() {
        diff |= x ^ given.get(i).copied().unwrap_or(!x);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_up_secret_is_32_hex_digits_and_fresh_each_time() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        check(&a).unwrap();
    }

    #[test]
    fn only_the_exact_secret_matches() {
        let s = "0123456789abcdef0123456789abcdef";
        assert!(matches(s, s.as_bytes()));
        assert!(!matches(s, b""));
        assert!(!matches(s, &s.as_bytes()[..31]));
        assert!(!matches(s, format!("{s}0").as_bytes()));
        assert!(!matches(s, b"0123456789abcdef0123456789abcdeF"));
    }

    #[test]
    fn short_spaced_or_overlong_secrets_are_refused() {
        assert!(check("").is_err());
        assert!(check("abc").is_err());
        assert!(check(&"a".repeat(129)).is_err());
        assert!(check(&format!("{} x", "a".repeat(40))).is_err());
        assert!(check(&"é".repeat(20)).is_err());
        check(&"a".repeat(128)).unwrap();
    }
}
