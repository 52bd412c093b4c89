//! `--plot FILE.svg` of the acquisition and PART benches: line charts written with `plotters`'
//! SVG backend (no font files: the text is SVG `<text>` the viewer lays out), so a run leaves
//! its picture beside its numbers without Python. `bench/plot.py` draws the docs' charts from
//! saved JSON the same way.
use std::path::Path;

use anyhow::{bail, Context, Result};
use plotters::prelude::*;

/// One named line of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// What a chart shows besides its series.
#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Both axes logarithmic (sizes and latencies spanning decades); linear otherwise.
    pub log: bool,
    /// The x axis counts bytes: ticks read 4K, 1M.
    pub x_bytes: bool,
    /// Horizontal reference lines (e.g. the pipeline alone), drawn dashed.
    pub marks: Vec<(String, f64)>,
    /// A small line under the chart: the command or the host.
    pub caption: String,
}

const SIZE: (u32, u32) = (900, 540);

/// A tick: whole numbers without a fraction, others to three decimals at most.
fn number(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A byte tick: 512, 4K, 1M, 1G.
fn bytes(v: f64) -> String {
    const K: f64 = 1024.0;
    match v.abs() {
        a if a >= K * K * K => format!("{}G", number(v / (K * K * K))),
        a if a >= K * K => format!("{}M", number(v / (K * K))),
        a if a >= K => format!("{}K", number(v / K)),
        _ => number(v),
    }
}

fn palette(i: usize) -> RGBColor {
    // Distinguishable for the common colour-vision deficiencies (Okabe–Ito).
    const C: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 0, 0),
        RGBColor(240, 228, 66),
    ];
    C[i % C.len()]
}

/// The extent of every point and mark, padded; positive on log axes.
fn extent(c: &Chart, series: &[Series]) -> Result<((f64, f64), (f64, f64))> {
    let pts = series.iter().flat_map(|s| s.points.iter().copied());
    let ok = |v: f64| v.is_finite() && (!c.log || v > 0.0);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts.filter(|&(x, y)| ok(x) && ok(y)) {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    for &(_, y) in c.marks.iter().filter(|(_, y)| ok(*y)) {
        (y0, y1) = (y0.min(y), y1.max(y));
    }
    if x0 > x1 || y0 > y1 {
        bail!("nothing to plot: no finite point");
    }
    if c.log {
        Ok(((x0 / 1.5, x1 * 1.5), (y0 / 1.5, y1 * 1.5)))
    } else {
        let pad = |a: f64, b: f64| ((b - a) * 0.05).max(b.abs() * 0.05).max(1e-9);
        let (px, py) = (pad(x0, x1), pad(y0, y1));
        Ok(((x0.min(0.0), x1 + px), (y0.min(0.0), y1 + py)))
    }
}

/// Writes `series` as an SVG line chart to `path`.
pub fn lines(path: &Path, c: &Chart, series: &[Series]) -> Result<()> {
    let ((x0, x1), (y0, y1)) = extent(c, series)?;
    let x_tick = |v: &f64| if c.x_bytes { bytes(*v) } else { number(*v) };
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (body, foot) = root.split_vertically(SIZE.1 - 24);
        foot.draw(&Text::new(
            c.caption.clone(),
            (10, 4),
            ("sans-serif", 12).into_font().color(&RGBColor(90, 90, 90)),
        ))?;
        let mut b = ChartBuilder::on(&body);
        b.caption(&c.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70);
        if c.log {
            let xs = (x0..x1)
                .log_scale()
                .base(if c.x_bytes { 2.0 } else { 10.0 });
            let mut ch = b.build_cartesian_2d(xs, (y0..y1).log_scale())?;
            ch.configure_mesh()
                .x_desc(&c.x_label)
                .y_desc(&c.y_label)
                .x_label_formatter(&x_tick)
                .y_label_formatter(&|v| number(*v))
                .light_line_style(RGBColor(238, 238, 238))
                .draw()?;
            draw_all(&mut ch, c, series, (x0, x1))?;
        } else {
            let mut ch = b.build_cartesian_2d(x0..x1, y0..y1)?;
            ch.configure_mesh()
                .x_desc(&c.x_label)
                .y_desc(&c.y_label)
                .x_label_formatter(&x_tick)
                .y_label_formatter(&|v| number(*v))
                .light_line_style(RGBColor(238, 238, 238))
                .draw()?;
            draw_all(&mut ch, c, series, (x0, x1))?;
        }
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("writing the chart {}", path.display()))
}

fn draw_all<'a, X, Y>(
    ch: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    c: &Chart,
    series: &[Series],
    (x0, x1): (f64, f64),
) -> std::result::Result<(), Box<dyn std::error::Error + 'a>>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, s) in series.iter().enumerate() {
        let color = palette(i);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!c.log || (*x > 0.0 && *y > 0.0)))
            .collect();
        ch.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        ch.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    for (i, (name, y)) in c.marks.iter().enumerate() {
        let color = palette(series.len() + i);
        let dashed = DashedLineSeries::new(vec![(x0, *y), (x1, *y)], 8, 5, color.stroke_width(1));
        ch.draw_series(dashed)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(log: bool) -> Chart {
        Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log,
            x_bytes: log,
            marks: vec![("alone".into(), 30.0)],
            caption: "cmd".into(),
        }
    }

    #[test]
    fn a_chart_names_its_series_and_marks() {
        let dir = std::env::temp_dir().join(format!("remora-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for log in [false, true] {
            let p = dir.join(format!("c{log}.svg"));
            let s = [
                Series::new("pia", vec![(4096.0, 10.0), (65536.0, 80.0)]),
                Series::new("pio", vec![(4096.0, 20.0), (65536.0, 900.0)]),
            ];
            lines(&p, &chart(log), &s).unwrap();
            let svg = std::fs::read_to_string(&p).unwrap();
            assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
            let texts: Vec<&str> = svg
                .split("<text")
                .skip(1)
                .filter_map(|t| Some(t.split_once('>')?.1.split_once('<')?.0.trim()))
                .collect();
            for word in ["pia", "pio", "alone", "cmd", "t", "x", "y"] {
                assert!(texts.contains(&word), "{word} missing from {texts:?}");
            }
            // Ticks read as numbers a person writes (bytes on the log chart's x axis).
            let tick = if log { "64K" } else { "100" };
            assert!(texts.contains(&tick), "{tick} missing from {texts:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ticks_read_as_written() {
        assert_eq!(number(100.0), "100");
        assert_eq!(number(0.125), "0.125");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(bytes(4096.0), "4K");
        assert_eq!(bytes(1_572_864.0), "1.5M");
        assert_eq!(bytes(100.0), "100");
    }

    #[test]
    fn nothing_finite_is_an_error_not_an_empty_picture() {
        let p = std::env::temp_dir().join("remora-plot-never.svg");
        let s = [Series::new("x", vec![(f64::NAN, 1.0)])];
        let e = lines(&p, &chart(false), &s).unwrap_err().to_string();
        assert!(e.contains("nothing to plot"), "{e}");
        // A log chart cannot show zeros.
        let s = [Series::new("x", vec![(0.0, 1.0)])];
        assert!(lines(&p, &chart(true), &s).is_err());
    }
}
