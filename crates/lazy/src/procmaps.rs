//! `/proc/PID/maps` parsing: the address ranges a live-process page server may serve.

/// One mapping line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Readable (`r` in the permissions).
    pub readable: bool,
    /// Writable (`w`).
    pub writable: bool,
    /// The path or pseudo-name (`[heap]`, `[stack]`), empty for anonymous mappings.
    pub name: String,
}

/// Parses one line; `None` if it is malformed.
pub fn parse_line(line: &str) -> Option<MapEntry> {
    let mut it = line.split_ascii_whitespace();
    let range = it.next()?;
    let perms = it.next()?;
    let _offset = it.next()?;
    let _dev = it.next()?;
    let _inode = it.next()?;
    let name = it.collect::<Vec<_>>().join(" ");
    let (a, b) = range.split_once('-')?;
    let start = u64::from_str_radix(a, 16).ok()?;
    let end = u64::from_str_radix(b, 16).ok()?;
    if end < start || perms.len() < 4 {
        return None;
    }
    let p = perms.as_bytes();
    Some(MapEntry {
        start,
        end,
        readable: p[0] == b'r',
        writable: p[1] == b'w',
        name,
    })
}

/// Parses a whole maps file, skipping malformed lines.
pub fn parse(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_line).collect()
}

/// Reads and parses `/proc/PID/maps`.
pub fn read(pid: i32) -> std::io::Result<Vec<MapEntry>> {
    Ok(parse(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

/// The ranges a whole-process server serves by default: readable, writable, private memory
/// (heap, stack, anonymous and data mappings), not `[vvar]`/`[vsyscall]`/`[vdso]`.
pub fn default_ranges(entries: &[MapEntry]) -> Vec<(u64, u64)> {
    entries
        .iter()
        .filter(|e| e.readable && e.writable)
        .filter(|e| {
            !matches!(
                e.name.as_str(),
                "[vvar]" | "[vsyscall]" | "[vdso]" | "[vvar_vclock]"
            )
        })
        .map(|e| (e.start, e.end - e.start))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_real_lines() {
        let t = "55d4c7a00000-55d4c7a21000 rw-p 00000000 00:00 0                          [heap]\n\
                 7f00aa000000-7f00aa001000 r--p 00000000 08:01 1234   /usr/lib/x y.so\n\
                 garbage\n\
                 ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]\n";
        let e = parse(t);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].start, 0x55d4c7a00000);
        assert_eq!(e[0].end, 0x55d4c7a21000);
        assert!(e[0].readable && e[0].writable);
        assert_eq!(e[0].name, "[heap]");
        assert_eq!(e[1].name, "/usr/lib/x y.so");
        assert_eq!(default_ranges(&e), vec![(0x55d4c7a00000, 0x21000)]);
    }

    #[test]
    fn own_maps_contain_the_heap_or_stack() {
        let e = read(std::process::id() as i32).unwrap();
        assert!(e.iter().any(|e| e.name == "[stack]"));
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,200}") {
            let _ = parse(&s);
        }
        #[test]
        fn roundtrips(start in 0u64..u64::MAX / 2, len in 0u64..1 << 40, r: bool, w: bool) {
            let line = format!("{:x}-{:x} {}{}-p 00000000 00:00 0   [x]", start, start + len,
                if r { 'r' } else { '-' }, if w { 'w' } else { '-' });
            let e = parse_line(&line).unwrap();
            prop_assert_eq!((e.start, e.end, e.readable, e.writable), (start, start + len, r, w));
        }
    }
}
