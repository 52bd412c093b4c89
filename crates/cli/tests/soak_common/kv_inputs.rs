//! What the soak throws at `remora kv serve`: mutated text, meta and binary commands with
//! hostile sizes.
use super::Rng;

pub const KV_TEMPLATES: &[&str] = &[
    "set k 0 0 5\r\nhello\r\n",
    "add a 1 100 3 noreply\r\nabc\r\n",
    "cas k 0 0 5 1\r\nhello\r\n",
    "append k 0 0 2\r\nxy\r\n",
    "get k\r\n",
    "gets k a b c d e f\r\n",
    "gat 10 k a\r\n",
    "incr n 1\r\n",
    "decr n 18446744073709551615\r\n",
    "touch k 10\r\n",
    "delete k\r\n",
    "stats\r\n",
    "stats slabs\r\n",
    "stats items\r\n",
    "version\r\n",
    "verbosity 1\r\n",
    "mg k v f t c s k\r\n",
    "ms k 5 T0 F7 I\r\nhello\r\n",
    "ma n N0 J1 D5 v\r\n",
    "md k q\r\n",
    "mn\r\n",
    "me k\r\n",
];

/// Numbers a hostile client puts where a size, flag, time or delta goes.
pub const HOSTILE_NUMBERS: &[&str] = &[
    "4294967295",
    "4294967296",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "2147483648",
    "0x10",
    "1e9",
    "",
];

/// One kv input: random bytes, a mutated text/meta command, a command with hostile numbers, a
/// huge key or line, or a binary-protocol header with hostile lengths.
pub fn kv_input(rng: &mut Rng) -> (String, Vec<u8>) {
    match rng.below(7) {
        0 => {
            let n = rng.below(300);
            ("random bytes".into(), rng.bytes(n))
        }
        1 | 2 => {
            let mut b = rng.pick(KV_TEMPLATES).as_bytes().to_vec();
            rng.mutate(&mut b);
            ("mutated command".into(), b)
        }
        3 => {
            let t = rng.pick(KV_TEMPLATES);
            let mut words: Vec<String> = t.split(' ').map(str::to_string).collect();
            if words.len() < 2 {
                words.push("\r\n".into());
            }
            let i = 1 + rng.below(words.len() - 1);
            let end = if words[i].ends_with("\r\n") {
                "\r\n"
            } else {
                ""
            };
            words[i] = format!("{}{end}", rng.pick(HOSTILE_NUMBERS));
            ("hostile numbers".into(), words.join(" ").into_bytes())
        }
        4 => {
            let key = "k".repeat(*rng.pick(&[250, 251, 300, 4096, 70_000]));
            let cmd = rng.pick(&["get", "mg", "delete", "set"]);
            let tail = if *cmd == "set" { " 0 0 1\r\nx" } else { "" };
            (
                "huge key".into(),
                format!("{cmd} {key}{tail}\r\n").into_bytes(),
            )
        }
        5 => {
            // A line that never ends, or a value announced far larger than what follows.
            if rng.chance(2) {
                let n = *rng.pick(&[2048, 8192, 65_536, 300_000]);
                ("endless line".into(), vec![b'a'; n])
            } else {
                let size = rng.pick(&["1048577", "2000000000", "4294967295"]);
                let b = format!("set big 0 0 {size}\r\nshort\r\n").into_bytes();
                ("value larger than sent".into(), b)
            }
        }
        _ => {
            // Binary protocol: magic, opcode, key length, extras length, body length.
            let mut h = vec![0u8; 24];
            h[0] = if rng.chance(8) {
                rng.next() as u8
            } else {
                0x80
            };
            h[1] = rng.next() as u8;
            h[2..4].copy_from_slice(&(rng.hostile_u32() as u16).to_be_bytes());
            h[4] = rng.next() as u8;
            h[8..12].copy_from_slice(&rng.hostile_u32().to_be_bytes());
            h[12..16].copy_from_slice(&rng.bytes(4));
            h[16..24].copy_from_slice(&rng.bytes(8));
            let n = rng.below(100);
            h.extend(rng.bytes(n));
            (format!("binary opcode 0x{:02x}", h[1]), h)
        }
    }
}
