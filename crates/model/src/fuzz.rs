//! Fuzzing: the experiment file's entry point, and the seeded mutator that runs entry points in
//! ordinary tests.
//!
//! Each parser tailguard owns has one entry point taking arbitrary bytes: it runs the parser the
//! way the command line does and panics only if the parser broke a promise (a panic inside it, an
//! error that does not name the file). `fuzz/` runs them under libFuzzer (`bench/fuzz.sh`,
//! millions of inputs); the crates' `tests/fuzz.rs` run them on the seed corpus and
//! [`mutants`] of it, so `make test` covers them in seconds.

use crate::Experiment;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::path::Path;

/// The experiment loader on `data`: [`Experiment::parse`], then [`Experiment::resolve`] of up to
/// 16 scenario × variant pairs, with and without the `quick` overrides. Errors must name the file.
/// Whether the file was accepted.
pub fn experiment(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    // A directory that does not exist: a data file named by a relative path is not found at once.
    let origin = Path::new("/nonexistent/fuzz.yaml");
    let named = |e: &crate::ModelError| {
        assert!(e.file == origin && !e.message.is_empty(), "an error without its file or message: {e:?}");
    };
    let experiment = match Experiment::parse(text, origin) {
        Ok(experiment) => experiment,
        Err(e) => {
            named(&e);
            return false;
        }
    };
    let (scenarios, variants) = experiment.select(&[], &[]).expect("the file's own names");
    for scenario in scenarios.iter().take(4) {
        for variant in variants.iter().take(4) {
            for quick in [false, true] {
                if let Err(e) = experiment.resolve(scenario, variant, quick) {
                    named(&e);
                }
            }
        }
    }
    true
}

/// What [`run`] saw: how many inputs the entry point accepted and refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub accepted: usize,
    pub refused: usize,
}

/// Runs `entry` (which says whether it accepted its input) on every input of `corpus`, then on
/// `count` [`mutants`] of it drawn with `seed`. A panic is caught and raised again naming the
/// input (its index, and its bytes as text), to be replayed or added to the corpus.
pub fn run(corpus: &[Vec<u8>], count: usize, seed: u64, entry: fn(&[u8]) -> bool) -> Tally {
    let inputs = corpus.iter().cloned().chain(mutants(corpus, count, seed));
    let mut tally = Tally::default();
    for (i, input) in inputs.enumerate() {
        match std::panic::catch_unwind(|| entry(&input)) {
            Ok(true) => tally.accepted += 1,
            Ok(false) => tally.refused += 1,
            Err(_) => {
                let which = match i.checked_sub(corpus.len()) {
                    None => format!("corpus entry {i}"),
                    Some(m) => format!("mutant {m} of seed {seed}"),
                };
                panic!("{which} failed: {:?}", String::from_utf8_lossy(&input));
            }
        }
    }
    tally
}

/// Bytes a mutation inserts: YAML's punctuation, numbers at the edges of their types, durations.
#[rustfmt::skip]
const TOKENS: &[&[u8]] = &[
    b":", b": ", b"\n", b"\n  ", b"- ", b"{", b"}", b"[", b"]", b",", b"&a ", b"*a", b"<<: *a", b"~", b"!!str ",
    b"\"", b"'", b"\t", b"\r\n", b"\0", b"#", b"0", b"-1", b"1e400", b"-0.0", b".nan", b".inf", b"4294967296",
    b"18446744073709551616", b"9223372036854775807", b"0ms", b"1ns", b"584542y", b"999999999h", b"true", b"null",
    b"\xff", b"\xc3\xa9",
];

/// `count` inputs made from `corpus` by a generator seeded with `seed`: each is an entry changed
/// in 1 to 4 places (a byte replaced, a token inserted, a range deleted, repeated or spliced in
/// from another entry, a line deleted or repeated, a number replaced by one at its type's edge).
/// The same arguments give the same inputs, so a failure names its seed and index and is
/// replayed exactly.
pub fn mutants(corpus: &[Vec<u8>], count: usize, seed: u64) -> impl Iterator<Item = Vec<u8>> + '_ {
    assert!(!corpus.is_empty(), "an empty corpus has nothing to mutate");
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    (0..count).map(move |_| {
        let mut input = corpus.choose(&mut rng).expect("not empty").clone();
        for _ in 0..rng.gen_range(1..=4) {
            mutate(&mut input, corpus, &mut rng);
        }
        input
    })
}

/// One change to `input`, at a place drawn from `rng`.
fn mutate(input: &mut Vec<u8>, corpus: &[Vec<u8>], rng: &mut impl Rng) {
    let at = rng.gen_range(0..=input.len());
    let end = rng.gen_range(at..=input.len().min(at + 64));
    match rng.gen_range(0..8) {
        0 if at < input.len() => input[at] = rng.gen(),
        1 => {
            let token = TOKENS.choose(rng).expect("not empty");
            input.splice(at..at, token.iter().copied());
        }
        2 => {
            input.drain(at..end);
        }
        3 => {
            let piece = input[at..end].to_vec();
            let to = rng.gen_range(0..=input.len());
            input.splice(to..to, piece);
        }
        4 => {
            let other = corpus.choose(rng).expect("not empty");
            let from = rng.gen_range(0..=other.len());
            let to = rng.gen_range(from..=other.len().min(from + 256));
            input.splice(at..end, other[from..to].iter().copied());
        }
        5 | 6 => {
            // A whole line deleted or repeated: a field lost, or given twice.
            let start = input[..at].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let end = input[at..].iter().position(|b| *b == b'\n').map_or(input.len(), |i| at + i + 1);
            let line = input[start..end].to_vec();
            input.splice(start..end, if rng.gen() { line.repeat(2) } else { Vec::new() });
        }
        _ => {
            // The next number in the input, if any, becomes an extreme one.
            let Some(start) = input[at..].iter().position(u8::is_ascii_digit).map(|i| at + i) else { return };
            let len = input[start..].iter().take_while(|b| b.is_ascii_digit()).count();
            let token = *[&b"0"[..], b"4294967296", b"18446744073709551616", b"1e400"].choose(rng).expect("not empty");
            input.splice(start..start + len, token.iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_repeat_for_a_seed_and_differ_from_their_corpus() {
        let corpus = vec![b"services: {a: {replicas: 3}}\n".to_vec(), b"seed: 42\n".to_vec()];
        let one: Vec<_> = mutants(&corpus, 100, 7).collect();
        assert_eq!(one, mutants(&corpus, 100, 7).collect::<Vec<_>>());
        assert_ne!(one, mutants(&corpus, 100, 8).collect::<Vec<_>>());
        let changed = one.iter().filter(|m| !corpus.contains(m)).count();
        assert!(changed >= 90, "only {changed} of 100 mutants differ from the corpus");
    }
}
