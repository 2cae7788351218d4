//! The proxy's fuzz entry points (fuzz/fuzz_targets/) on their seed corpora (fuzz/seeds/) and
//! 20,000 seeded mutants each: never a panic, and every promise each entry point checks holds
//! (errors name the file, a file reads back equal, no hop-by-hop or internal header forwarded,
//! deadlines clamped). `bench/fuzz.sh` runs the same entry points for millions of inputs.

use std::path::{Path, PathBuf};
use tailguard_model::fuzz::run;
use tailguard_proxy::{fuzz, Config};

/// The files of fuzz/seeds/`target`, sorted by name.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    files.sort();
    files.into_iter().map(|path| std::fs::read(path).unwrap()).collect()
}

#[test]
fn the_proxy_file_parser_survives_its_corpus_and_20000_mutants() {
    let corpus = seeds("proxy_config");
    // Every seed is a valid file, so mutants reach past the YAML syntax into validation.
    for seed in &corpus {
        Config::parse(std::str::from_utf8(seed).unwrap(), Path::new("seed.yaml")).unwrap();
    }
    let tally = run(&corpus, 20_000, 1, fuzz::config);
    assert!(tally.accepted > 1000 && tally.refused > 1000, "{tally:?}");
}

#[test]
fn the_header_rules_survive_their_corpus_and_20000_mutants() {
    let corpus = seeds("request_head");
    assert!(corpus.len() >= 6);
    let tally = run(&corpus, 20_000, 2, fuzz::request_head);
    assert!(tally.accepted > 1000 && tally.refused > 1000, "{tally:?}");
}

#[test]
fn the_deadline_header_parser_survives_its_corpus_and_20000_mutants() {
    let corpus = seeds("deadline_header");
    let tally = run(&corpus, 20_000, 3, fuzz::deadline_header);
    assert!(tally.accepted > 1000 && tally.refused > 1000, "{tally:?}");
}
