//! Damaged experiment files are errors, never panics: every example file with lines deleted,
//! duplicated or with a value swapped for another type is either accepted (and resolves) or
//! refused with a message naming the file.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use std::path::{Path, PathBuf};
use tailguard_model::Experiment;

const REPLACEMENTS: [&str; 8] = ["-1", "0", "1e309", "\"x\"", "[]", "{}", "~", "250"];

fn mutate(text: &str, rng: &mut Pcg64Mcg) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let i = rng.gen_range(0..lines.len());
    match rng.gen_range(0..3) {
        0 => {
            lines.remove(i);
        }
        1 => lines.insert(i, lines[i].clone()),
        _ => {
            if let Some((key, _)) = lines[i].split_once(": ") {
                lines[i] = format!("{key}: {}", REPLACEMENTS[rng.gen_range(0..REPLACEMENTS.len())]);
            }
        }
    }
    lines.join("\n")
}

#[test]
fn damaged_examples_are_errors_not_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut rng = Pcg64Mcg::seed_from_u64(2);
    let (mut accepted, mut refused) = (0, 0);
    for name in ["bloc.yaml", "timeouts.yaml", "speculative.yaml", "case-for-timeouts.yaml", "triangle.yaml"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        for _ in 0..200 {
            let damaged = mutate(&text, &mut rng);
            match Experiment::parse(&damaged, &Path::new("examples").join(name)) {
                Ok(experiment) => {
                    accepted += 1;
                    for scenario in experiment.scenario_names() {
                        for variant in experiment.variant_names() {
                            let _ = experiment.resolve(&scenario, &variant, false);
                        }
                    }
                }
                Err(e) => {
                    refused += 1;
                    assert!(e.to_string().starts_with(&format!("examples/{name}")), "{e}");
                }
            }
        }
    }
    assert!(accepted > 100 && refused > 100, "accepted {accepted}, refused {refused}");
}
