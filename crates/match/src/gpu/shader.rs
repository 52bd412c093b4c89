//! The WGSL source of the matching shaders: `top2.wgsl` with its `// @name` lines expanded into
//! straight-line code.
//!
//! Why generate: the 8 × 8 register block of each invocation (64 accumulators, a top-2 for
//! each of its 8 queries) must stay in registers. Written as WGSL arrays indexed in loops it
//! depends on the driver unrolling those loops, which naga's loop bounding (a counter added to
//! every loop) and bounds checks on the indices can prevent; named scalars and vectors in
//! unrolled code leave the driver nothing to decide.
use std::fmt::Write;
use std::sync::OnceLock;

/// The template.
const TEMPLATE: &str = include_str!("top2.wgsl");
/// Words of each descriptor staged at a time (`KC` in the template); rows are padded to it.
pub(super) const KC: usize = 8;
/// Queries per `search` workgroup (and train points per tile).
pub(super) const BLOCK: u32 = 128;
/// Queries per `merge` workgroup.
pub(super) const MERGE_GROUP: u32 = 256;
/// Queries, and train points per tile, of one invocation.
const R: usize = 8;
const LANE: [&str; 4] = ["x", "y", "z", "w"];

/// The expanded source, built once.
pub(super) fn source() -> &'static str {
    static SRC: OnceLock<String> = OnceLock::new();
    SRC.get_or_init(|| expand(TEMPLATE))
}

/// The vector holding query `r`'s word in a stage (`qa`: queries 4ty..4ty+3, `qb`: 64 + those)
/// and its lane.
fn query_word(r: usize) -> (&'static str, &'static str) {
    (if r < 4 { "qa" } else { "qb" }, LANE[r % 4])
}

fn expand(template: &str) -> String {
    let mut out = String::with_capacity(template.len() * 4);
    for line in template.lines() {
        let t = line.trim_start();
        let indent = &line[..line.len() - t.len()];
        let Some(cmd) = t.strip_prefix("// @") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let mut code = Vec::new();
        let mut words = cmd.split_whitespace();
        match (words.next(), words.next()) {
            (Some("declare"), None) => {
                for r in 0..R {
                    code.push(format!("var k1_{r} = KEY_MAX;"));
                    code.push(format!("var i1_{r} = NONE;"));
                    code.push(format!("var k2_{r} = KEY_MAX;"));
                    code.push(format!("var i2_{r} = NONE;"));
                }
            }
            (Some("zero"), None) => {
                // a{r}0: query r against the tile's points 4tx..4tx+3; a{r}1: 64 + those.
                for r in 0..R {
                    code.push(format!("var a{r}0 = vec4<u32>(0u);"));
                    code.push(format!("var a{r}1 = vec4<u32>(0u);"));
                }
            }
            (Some("stage"), None) => {
                for k in 0..KC {
                    code.push("{".into());
                    code.push(format!("    let qa = shq[{k}u * P + ty];"));
                    code.push(format!("    let qb = shq[{k}u * P + 16u + ty];"));
                    code.push(format!("    let ta = sht[{k}u * P + tx];"));
                    code.push(format!("    let tb = sht[{k}u * P + 16u + tx];"));
                    for r in 0..R {
                        let (v, lane) = query_word(r);
                        code.push(format!(
                            "    a{r}0 += d4({v}.{lane}, ta);\n{indent}    a{r}1 += d4({v}.{lane}, tb);"
                        ));
                    }
                    code.push("}".into());
                }
            }
            (Some("update"), None) => {
                // Points in increasing index order per query: 4tx + c, then 64 + 4tx + c.
                for r in 0..R {
                    for (h, norms) in ["na", "nb"].iter().enumerate() {
                        for (c, lane) in LANE.iter().enumerate() {
                            let j = h * 64 + c;
                            let mut s = String::new();
                            let _ = write!(
                                s,
                                "{{\n{indent}    let key = i32({norms}.{lane}) - 2 * i32(a{r}{h}.{lane});\n\
                                 {indent}    if (key < k2_{r}) {{\n\
                                 {indent}        if (key < k1_{r}) {{\n\
                                 {indent}            k2_{r} = k1_{r};\n\
                                 {indent}            i2_{r} = i1_{r};\n\
                                 {indent}            k1_{r} = key;\n\
                                 {indent}            i1_{r} = j0 + {j}u;\n\
                                 {indent}        }} else {{\n\
                                 {indent}            k2_{r} = key;\n\
                                 {indent}            i2_{r} = j0 + {j}u;\n\
                                 {indent}        }}\n\
                                 {indent}    }}\n\
                                 {indent}}}"
                            );
                            code.push(s);
                        }
                    }
                }
            }
            (Some("spill"), Some(array)) => {
                for r in 0..R {
                    let slot = if r < 4 {
                        format!("4u * ty + {r}u")
                    } else {
                        format!("64u + 4u * ty + {}u", r - 4)
                    };
                    code.push(format!(
                        "{array}[{slot}] = vec4<u32>(bitcast<u32>(k1_{r}), i1_{r}, bitcast<u32>(k2_{r}), i2_{r});"
                    ));
                }
            }
            _ => panic!("top2.wgsl: unknown template line {t:?}"),
        }
        for c in code {
            out.push_str(indent);
            out.push_str(&c);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_line_is_expanded_and_the_constants_agree() {
        let s = source();
        let left = s.lines().find(|l| l.trim_start().starts_with("// @"));
        assert_eq!(left, None, "an unexpanded template line");
        assert!(s.contains(&format!("const KC: u32 = {KC}u;")));
        // 8 words per stage x 8 queries x 2 vectors of 4 points.
        assert_eq!(s.matches("+= d4(").count(), KC * R * 2);
        assert_eq!(s.matches("let key = ").count(), R * 8);
    }
}
