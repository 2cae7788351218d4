//! The experiment file's fuzz entry point (fuzz/fuzz_targets/experiment.rs) on every example
//! file and 5,000 seeded mutants of them (bytes, tokens, ranges and whole lines changed): each is
//! accepted and resolves, or is refused with an error naming the file, never a panic. `bench/fuzz.sh` runs the same entry point for millions
//! of inputs under libFuzzer.

use std::path::PathBuf;
use tailguard_model::fuzz;

/// Every experiment file in examples/ (the fuzz target's seed corpus too).
fn examples() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<PathBuf> = ["", "tune"]
        .iter()
        .flat_map(|sub| std::fs::read_dir(dir.join(sub)).unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files.into_iter().map(|path| std::fs::read(path).unwrap()).collect()
}

#[test]
fn the_experiment_loader_survives_its_corpus_and_5000_mutants() {
    let corpus = examples();
    assert!(corpus.len() >= 9, "examples/ has {} files", corpus.len());
    let tally = fuzz::run(&corpus, 5000, 21, fuzz::experiment);
    assert_eq!(tally.accepted + tally.refused, corpus.len() + 5000);
    // Mutants reach past the YAML syntax: many still load, and many are refused.
    assert!(tally.accepted > 500 && tally.refused > 500, "{tally:?}");
}
