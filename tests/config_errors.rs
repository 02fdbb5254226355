//! Every malformed config in `tests/configs/invalid/` yields its precise
//! error (file:line:col, component, field, message) and exit code 78.
//! Each file states what it expects in `# expect:` lines.

mod common;

use common::eddy;

#[test]
fn every_invalid_config_yields_its_error_and_exit_78() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/configs/invalid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "the corpus went missing");
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let expects: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .collect();
        assert!(
            !expects.is_empty(),
            "{} has no `# expect:` line",
            file.display()
        );
        let out = eddy().arg("validate").arg(file).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(78) {
            failures.push(format!(
                "{}: exit {:?}, expected 78\n{stderr}",
                file.display(),
                out.status.code()
            ));
            continue;
        }
        for e in expects {
            // A leading line:col is checked together with the file name.
            let want = if e.starts_with(|c: char| c.is_ascii_digit()) {
                format!("{}:{e}", file.display())
            } else {
                e.to_string()
            };
            if !stderr.contains(&want) {
                failures.push(format!(
                    "{}: missing\n  {want}\nin\n{stderr}",
                    file.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} configs wrong:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn the_example_configs_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = eddy().arg("validate").arg(&path).output().unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let summary = String::from_utf8_lossy(&out.stdout);
            assert!(
                summary.contains(": ok: ") && summary.lines().count() == 1,
                "one-line summary expected, got {summary:?}"
            );
            n += 1;
        }
    }
    assert!(n >= 1);
}

/// A full `[migration]` table validates; a setting its strategy ignores is
/// a warning, not an error.
#[test]
fn a_migration_table_validates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.toml");
    std::fs::write(
        &path,
        "[migration]\nstrategy = \"all_at_once\"\ngap = \"2s\"\ndrain_timeout = \"45s\"\n\n\
         [sources.g]\ntype = \"generator\"\n\n[sinks.b]\ntype = \"blackhole\"\ninputs = [\"g\"]\n",
    )
    .unwrap();
    let out = eddy().arg("validate").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("m.toml:3:7: warning: migration: field `gap`: only the `fluid` strategy"),
        "{stderr}"
    );
}
