//! Golden files: compare output with a checked-in file, or rewrite the file when
//! `STACKS_BLESS=1` is set (after a deliberate change; review the diff).

use std::path::Path;

/// Compare bytes with the golden file `dir/name` (rewritten under `STACKS_BLESS=1`); the
/// expected bytes when they differ.
pub fn compare_bytes(dir: &Path, name: &str, actual: &[u8]) -> Option<Vec<u8>> {
    let path = dir.join(name);
    if std::env::var_os("STACKS_BLESS").is_some() {
        std::fs::create_dir_all(dir).expect("create golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return None;
    }
    let expected = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with STACKS_BLESS=1 to create it",
            path.display()
        )
    });
    (expected != actual).then_some(expected)
}

/// Assert text equals the golden file `dir/name` (rewritten under `STACKS_BLESS=1`), showing
/// the first differing line and both texts otherwise.
pub fn check_text(dir: &Path, name: &str, actual: &str) {
    if let Some(expected) = compare_bytes(dir, name, actual.as_bytes()) {
        let expected = String::from_utf8_lossy(&expected);
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {} (STACKS_BLESS=1 rewrites it):\n--- expected\n{}\n--- actual\n{}",
            dir.join(name).display(),
            first + 1,
            expected,
            actual
        );
    }
}
