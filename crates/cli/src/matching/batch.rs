//! Many pairs: `--pairs LIST` (text or MicMac XML) and `--all DIR`, written in MicMac's layout
//! `OUTDIR/Pastis<image1>/<image2>.result`.
//!
//! Pairs run one after another, each on all threads (the matcher is parallel inside). Each
//! keypoint file is read once and dropped after the last pair that uses it, so memory holds
//! only the files still needed. A failing pair is reported and the batch goes on; the command
//! fails at the end when any pair failed.
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context};

use super::input::{self, image_name, is_keypoint_file, Loaded};
use super::output::{self, OutKind};
use super::pair::{check_pair, match_loaded, Settings};
use super::MatchOpts;

/// One pair to match: `query`'s points searched among `train`'s (image 1 = train).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Image 1's keypoints.
    pub train: PathBuf,
    /// Image 2's keypoints.
    pub query: PathBuf,
}

/// Reads a pair list: MicMac's XML (`<Cple>a b</Cple>` elements) or text (two paths a line,
/// blank lines and `#` comments skipped). Paths are relative to the list's folder.
pub fn read_list(list: &Path) -> anyhow::Result<Vec<Job>> {
    let text = std::fs::read_to_string(list)
        .with_context(|| format!("reading pair list {}", list.display()))?;
    let dir = list.parent().unwrap_or(Path::new(""));
    let names = if text.trim_start().starts_with('<') {
        parse_xml(&text)
    } else {
        parse_text(&text)
    }
    .map_err(|e| anyhow!("pair list {}: {e}", list.display()))?;
    Ok(names
        .into_iter()
        .map(|(a, b)| Job {
            train: resolve(dir, &a),
            query: resolve(dir, &b),
        })
        .collect())
}

fn parse_text(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_whitespace().collect::<Vec<_>>()[..] {
            [a, b] => out.push((a.to_string(), b.to_string())),
            _ => return Err(format!("line {}: two keypoint paths expected", i + 1)),
        }
    }
    Ok(out)
}

/// MicMac's `SauvegardeNamedRel`: `<Cple>a b</Cple>` elements.
fn parse_xml(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("<Cple>") {
        rest = &rest[at + "<Cple>".len()..];
        let end = rest
            .find("</Cple>")
            .ok_or_else(|| "a <Cple> element is not closed".to_string())?;
        let names: Vec<&str> = rest[..end].split_whitespace().collect();
        match names[..] {
            [a, b] => out.push((a.to_string(), b.to_string())),
            _ => return Err(format!("<Cple>{}</Cple>: two names expected", &rest[..end])),
        }
        rest = &rest[end..];
    }
    if out.is_empty() {
        return Err("XML without <Cple> elements (MicMac's SauvegardeNamedRel expected)".into());
    }
    Ok(out)
}

/// A name from a list: a keypoint file relative to `dir`; an image name (MicMac's XML lists
/// images) is looked for as MicMac's `Pastis/LBPp<name>.dat`, then `LBPp<name>.dat`.
fn resolve(dir: &Path, name: &str) -> PathBuf {
    let direct = dir.join(name);
    if is_keypoint_file(&direct) {
        return direct;
    }
    [
        dir.join("Pastis").join(format!("LBPp{name}.dat")),
        dir.join(format!("LBPp{name}.dat")),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or(direct)
}

/// Every pair of keypoint files in `dir`, sorted by name, in both directions (A→B and B→A, as
/// Tapioca does: the ratio test depends on which image holds the queries).
pub fn all_pairs(dir: &Path) -> anyhow::Result<Vec<Job>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_keypoint_file(p))
        .collect();
    files.sort();
    if files.len() < 2 {
        bail!(
            "{}: {} keypoint file(s) (.dat, .key, .npy); at least 2 are needed",
            dir.display(),
            files.len()
        );
    }
    let mut jobs = Vec::new();
    for (i, a) in files.iter().enumerate() {
        for b in &files[i + 1..] {
            for (train, query) in [(a, b), (b, a)] {
                jobs.push(Job {
                    train: train.clone(),
                    query: query.clone(),
                });
            }
        }
    }
    Ok(jobs)
}

/// Keypoint files read once and kept until the last job that needs them.
struct Cache {
    last_use: HashMap<PathBuf, usize>,
    files: HashMap<PathBuf, Result<Arc<Loaded>, String>>,
    format: Option<remora_match::formats::Format>,
}

impl Cache {
    fn new(jobs: &[Job], format: Option<remora_match::formats::Format>) -> Cache {
        let mut last_use = HashMap::new();
        for (i, j) in jobs.iter().enumerate() {
            last_use.insert(j.train.clone(), i);
            last_use.insert(j.query.clone(), i);
        }
        Cache {
            last_use,
            files: HashMap::new(),
            format,
        }
    }

    fn get(&mut self, path: &Path) -> anyhow::Result<Arc<Loaded>> {
        let format = self.format;
        let entry = self.files.entry(path.to_path_buf()).or_insert_with(|| {
            input::load(path, format)
                .map(Arc::new)
                .map_err(|e| crate::report(&e))
        });
        entry.clone().map_err(|e| anyhow!(e))
    }

    /// Drops the files no job after `done` uses.
    fn release(&mut self, done: usize) {
        let last = &self.last_use;
        self.files
            .retain(|p, _| last.get(p).is_some_and(|&l| l > done));
    }
}

/// Runs the jobs, writing `out_dir/Pastis<image1>/<image2>.<ext>`.
pub fn run(jobs: &[Job], out_dir: &Path, o: &MatchOpts, s: &Settings) -> anyhow::Result<()> {
    let kind = match OutKind::choose(None, o.output_format, o.binary) {
        // No output path: MicMac's text .result unless asked otherwise.
        OutKind::Text if o.output_format.is_none() && o.binary => OutKind::ResultV1,
        OutKind::Text if o.output_format.is_none() => OutKind::ResultV0,
        OutKind::Text => bail!("--output-format text is for one pair; a batch writes files"),
        k => k,
    };
    let ext = if kind == OutKind::Npy {
        "npy"
    } else {
        "result"
    };
    let t0 = Instant::now();
    let mut cache = Cache::new(jobs, o.format.map(Into::into));
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(jobs.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} pairs {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b
    });
    let say = |line: String| match &bar {
        Some(b) => b.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    };
    let (mut failed, mut matches) = (0usize, 0usize);
    for (i, job) in jobs.iter().enumerate() {
        let (n1, n2) = (image_name(&job.train), image_name(&job.query));
        if let Some(b) = &bar {
            b.set_message(format!("{n1} {n2}"));
        }
        let dest = out_dir
            .join(format!("Pastis{n1}"))
            .join(format!("{n2}.{ext}"));
        match one(&mut cache, job, kind, &dest, s) {
            Ok((n, line)) => {
                matches += n;
                if o.stats {
                    say(line);
                }
            }
            Err(e) => {
                failed += 1;
                say(format!(
                    "remora match: pair {} {}: {}",
                    job.train.display(),
                    job.query.display(),
                    crate::report(&e)
                ));
            }
        }
        cache.release(i);
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    println!(
        "{} pairs done, {failed} failed, {matches} matches, {:.2} s; wrote {}",
        jobs.len() - failed,
        t0.elapsed().as_secs_f64(),
        out_dir.display()
    );
    if failed > 0 {
        bail!("{failed} of {} pairs failed", jobs.len());
    }
    Ok(())
}

/// One job: returns its match count and a `--stats` line.
fn one(
    cache: &mut Cache,
    job: &Job,
    kind: OutKind,
    dest: &Path,
    s: &Settings,
) -> anyhow::Result<(usize, String)> {
    let train = cache.get(&job.train)?;
    let query = cache.get(&job.query)?;
    check_pair(&train, &query, s)?;
    kind.check_inputs(&train, &query)?;
    let r = match_loaded(&train, &query, s)?;
    if let Some(d) = dest.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    output::write(kind, Some(dest), &r.matches, &train, &query)?;
    let line = format!(
        "{}: {} x {} points, {} matches, {} {:.3} s",
        dest.display(),
        train.kp.len(),
        query.kp.len(),
        r.matches.len(),
        r.kernel,
        r.search_s
    );
    Ok((r.matches.len(), line))
}

#[cfg(test)]
mod tests {
    use super::{parse_text, parse_xml};

    #[test]
    fn text_lists_skip_blanks_and_comments() {
        let l = parse_text("# pairs\n\na.dat b.dat\n  c.key\td.key  \n").unwrap();
        assert_eq!(
            l,
            [
                ("a.dat".into(), "b.dat".into()),
                ("c.key".into(), "d.key".into())
            ]
        );
        assert!(parse_text("a b c\n").unwrap_err().contains("line 1"));
    }

    #[test]
    fn micmac_xml_lists_give_their_couples() {
        let x = "<?xml version=\"1.0\" ?>\n<SauvegardeNamedRel>\n  <Cple>A.JPG B.JPG</Cple>\n\
                 <Cple>B.JPG C.JPG</Cple>\n</SauvegardeNamedRel>\n";
        let l = parse_xml(x).unwrap();
        assert_eq!(
            l,
            [
                ("A.JPG".into(), "B.JPG".into()),
                ("B.JPG".into(), "C.JPG".into())
            ]
        );
        assert!(parse_xml("<SauvegardeNamedRel/>").is_err());
        assert!(parse_xml("<Cple>a b").is_err());
    }
}
