//! Every command of README.md runs: each line of its `sh` blocks is a command, run here as a
//! user would type it (bash, in a scratch folder holding the repository's examples/ and
//! deploy/), with this build's `tailguard` first on PATH. A `yaml` block whose first line is
//! `# FILE` is written to FILE first.
//!
//! - `tailguard proxy` runs until its admin listener answers `/healthz`, then gets SIGTERM; the
//!   file's listeners are moved to free ports on 127.0.0.1 (the machine may run another proxy).
//! - `tailguard lab run` gets `--duration 2s --warmup 0s`: the command, its processes and its
//!   files are what is checked, not its numbers.
//! - `make TARGET` is checked with `make -n` (the recipe exists and expands); `.ci/run` runs
//!   `make test` itself.
//! - `tailguard-tune` lines are run by python/tests/test_readme.py, in the tuner's environment.
//!
//! The generated table's command is run by `scripts/measured.py --check`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The fenced blocks of `text` whose info string is `lang`, in order.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) if info.trim() == lang => current = Some(Vec::new()),
            (Some(_), Some("")) => out.push(current.take().unwrap()),
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    out
}

/// A block's commands: its lines without comments, blank ones dropped.
fn commands<'a>(block: &[&'a str]) -> Vec<&'a str> {
    block
        .iter()
        .map(|l| l.split(" # ").next().unwrap().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// A scratch folder with the repository's examples/ and deploy/ (symlinked), removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("tailguard-readme-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for shared in ["examples", "deploy"] {
            std::os::unix::fs::symlink(repo().join(shared), dir.join(shared)).unwrap();
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `line` in bash in `dir`, this build's `tailguard` first on PATH.
fn bash(dir: &Path, line: &str) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_tailguard")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new("bash");
    command.args(["-c", line]).current_dir(dir).env("PATH", path);
    command
}

/// Runs `line` to its end (at most 5 min) and checks it succeeded.
fn run(dir: &Path, line: &str) {
    let mut child = bash(dir, line).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(300) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("README: `{line}` still running after 5 min");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    assert!(status.success(), "README: `{line}` failed ({status}):\n{err}");
}

/// Runs `line` (a `tailguard proxy`) until its admin listener answers `/healthz`, then stops it
/// with SIGTERM and checks it exits cleanly.
fn run_proxy(dir: &Path, line: &str) {
    let mut child = bash(dir, &format!("exec {line}")).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id().to_string();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || stderr.lines().map_while(Result::ok).for_each(|l| drop(tx.send(l))));
    let admin = loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(10)) else {
            Command::new("kill").arg(&pid).status().unwrap();
            child.wait().unwrap();
            panic!("README: `{line}` did not start in 10 s");
        };
        if let Some(addr) = line.strip_prefix("tailguard proxy: admin listening on ") {
            break addr.to_string();
        }
    };
    let healthy = get_ok(&admin, "/healthz");
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(healthy, "README: `{line}`: GET http://{admin}/healthz failed");
    assert!(status.success(), "README: `{line}` exited with {status} after SIGTERM");
}

/// Whether `GET path` on `addr` answers 200.
fn get_ok(addr: &str, path: &str) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    std::io::Write::write_all(&mut stream, request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

/// The README's proxy file with every listener moved to 127.0.0.1 and a free port.
fn free_ports(yaml: &str) -> String {
    yaml.lines()
        .map(|l| match l.split_once("listen: ") {
            Some((head, tail)) => {
                let rest = tail.trim_start_matches(|c: char| !c.is_whitespace());
                format!("{head}listen: 127.0.0.1:0{rest}")
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_command_in_the_readme_runs() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let scratch = Scratch::new();
    for block in blocks(&readme, "yaml") {
        if let Some(name) = block.first().and_then(|l| l.strip_prefix("# ")) {
            std::fs::write(scratch.0.join(name.trim()), free_ports(&block.join("\n")) + "\n").unwrap();
        }
    }
    let lines: Vec<&str> = blocks(&readme, "sh").iter().flat_map(|b| commands(b)).collect();
    assert!(lines.len() >= 7, "README.md has fewer commands than expected: {lines:?}");
    let mut ran = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words[..] {
            ["make", target, ..] => {
                let dry = Command::new("make").args(["-n", target]).current_dir(repo()).output().unwrap();
                assert!(dry.status.success(), "README: `{line}`: {}", String::from_utf8_lossy(&dry.stderr));
            }
            [tune, ..] if tune.ends_with("tailguard-tune") => continue, // python/tests/test_readme.py
            ["tailguard", "proxy", ..] => run_proxy(&scratch.0, line),
            ["tailguard", "lab", "run", ..] => run(&scratch.0, &format!("{line} --duration 2s --warmup 0s")),
            ["tailguard", ..] => run(&scratch.0, line),
            _ => panic!("README: `{line}`: no test runs this command (crates/cli/tests/readme.rs)"),
        }
        ran.push(line);
    }
    eprintln!("ran {} README commands: {ran:#?}", ran.len());
}

#[test]
fn the_block_parser_reads_commands_and_files() {
    let text =
        "a\n```sh\nmake demo   # the demo\n\n# a comment\ntailguard sim x.yaml\n```\n```yaml\n# f.yaml\nk: 1\n```\n";
    assert_eq!(commands(&blocks(text, "sh")[0]), ["make demo", "tailguard sim x.yaml"]);
    assert_eq!(blocks(text, "yaml"), [vec!["# f.yaml", "k: 1"]]);
    assert_eq!(
        free_ports("admin:\n  listen: 127.0.0.1:9990   # x\n  listen: 0.0.0.0:4143\napp: 127.0.0.1:8080"),
        "admin:\n  listen: 127.0.0.1:0   # x\n  listen: 127.0.0.1:0\napp: 127.0.0.1:8080"
    );
}
