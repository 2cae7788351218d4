//! The report in a real browser: Debian's chromium, headless, loads the page from a file, dumps
//! the DOM it built and takes a screenshot. Without chromium the test skips, except under CI
//! (env CI set), where `make test` (make deps) installs it and its absence is a failure.

use crate::common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tailguard_report::{by_scenario, plot_count, render_html};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Chromium gets this long per page before it is killed.
const DEADLINE: Duration = Duration::from_secs(90);
const WINDOW: (u32, u32) = (1280, 4000);

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tailguard-report-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs chromium headless on `page` with `args`, stdout to `stdout`; kills it by its PID if it
/// outlives [`DEADLINE`].
fn chromium(page: &Path, args: &[String], stdout: &Path, work: &Path) {
    let profile = work.join(format!("profile-{}", args.len()));
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(File::create(stdout).expect("create the stdout file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            assert!(status.success(), "chromium exited with {status}");
            return;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took more than {DEADLINE:?} on {}", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The DOM's serialization of a text node (what --dump-dom prints for `name`).
fn dom_text(name: &str) -> String {
    name.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The trimmed contents of the `<text>` elements of an SVG's serialization.
fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text").skip(1).filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim())).collect()
}

#[test]
fn chromium_renders_every_plot_and_legend() {
    if !Path::new(CHROMIUM).exists() {
        if std::env::var_os("CI").is_some() {
            panic!("{CHROMIUM} is missing under CI: `make deps` installs it (apt-get install chromium)");
        }
        eprintln!("skipped: {CHROMIUM} is not installed (apt-get install chromium)");
        return;
    }
    let results = common::simulate_quick();
    let work = TempDir::new("browser");
    let page = work.0.join("report.html");
    std::fs::write(&page, render_html(&results)).unwrap();

    // The DOM chromium built: per scenario section, the plots and each variant in both legends.
    let dom_file = work.0.join("dom.html");
    chromium(&page, &["--dump-dom".to_string()], &dom_file, &work.0);
    let dom = std::fs::read_to_string(&dom_file).unwrap();
    let groups = by_scenario(&results.runs);
    let sections: Vec<&str> = dom.split("<section id=\"scenario-").skip(1).collect();
    assert_eq!(sections.len(), groups.len(), "one section per scenario");
    for ((scenario, runs), section) in groups.iter().zip(&sections) {
        let svgs: Vec<&str> = section.split("<svg").skip(1).collect();
        assert_eq!(svgs.len(), plot_count(runs), "plots of scenario {scenario}");
        assert_eq!(svgs.len(), 7, "CDF, CCDF, 3 replica loads, 2 timeouts in {scenario}");
        for latency_plot in &svgs[..2] {
            let labels = texts(latency_plot);
            for run in runs {
                let name = dom_text(&run.variant);
                assert!(labels.contains(&name.as_str()), "{name} missing from a legend of {scenario}: {labels:?}");
            }
        }
    }

    // The screenshot: mostly white paper, but with real ink, and every variant's color drawn.
    let png_file = work.0.join("shot.png");
    chromium(&page, &[format!("--screenshot={}", png_file.display())], &work.0.join("shot.out"), &work.0);
    let decoder = png::Decoder::new(File::open(&png_file).expect("chromium wrote the screenshot"));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), WINDOW);
    let channels = info.color_type.samples();
    let rgb: Vec<[u8; 3]> = pixels[..info.buffer_size()].chunks(channels).map(|p| [p[0], p[1], p[2]]).collect();
    let ink = rgb.iter().filter(|p| p.iter().any(|&c| c < 230)).count();
    let share = ink as f64 / rgb.len() as f64;
    assert!(share > 0.03, "only {:.2} % of the screenshot is not white", 100.0 * share);
    for (color, name) in [([0x1f, 0x77, 0xb4], "blue"), ([0xff, 0x7f, 0x0e], "orange"), ([0x2c, 0xa0, 0x2c], "green")] {
        let near = |p: &&[u8; 3]| p.iter().zip(color).all(|(&a, b): (&u8, u8)| a.abs_diff(b) < 24);
        let n = rgb.iter().filter(near).count();
        assert!(n > 500, "the {name} variant's color covers only {n} pixels");
    }
}
