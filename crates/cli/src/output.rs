//! The files and folders commands write: every output path may name folders that do not exist
//! yet. Each command prepares its outputs before its work, so a path that cannot be written is
//! refused before it costs a run's results.

use anyhow::Context;
use std::path::Path;

/// Prepares `path` (given as `flag`) to be written as a file: creates its missing parent folders
/// and refuses a directory.
pub fn file(flag: &str, path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        anyhow::bail!("{flag} {}: is a directory, expected a file path", path.display());
    }
    match path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        Some(dir) => folder(flag, dir),
        None => Ok(()),
    }
}

/// Creates the folder `dir` (given as `flag`) and its missing parents.
pub fn folder(flag: &str, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{flag}: cannot create the folder {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_folders_are_created_and_a_directory_or_a_file_in_the_way_is_refused() {
        let root = std::env::temp_dir().join(format!("tailguard-output-{}", std::process::id()));
        let nested = root.join("a/b/results.json");
        file("--json", &nested).unwrap();
        assert!(root.join("a/b").is_dir() && !nested.exists());
        file("--json", Path::new("results.json")).unwrap();

        let err = file("--report", &root.join("a")).unwrap_err().to_string();
        assert_eq!(err, format!("--report {}: is a directory, expected a file path", root.join("a").display()));
        std::fs::write(root.join("plain"), "").unwrap();
        let err = format!("{:#}", file("--traces", &root.join("plain/t.json")).unwrap_err());
        assert!(
            err.starts_with(&format!("--traces: cannot create the folder {}", root.join("plain").display())),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
