//! `rolter::config::parse` on any UTF-8 text, with a fixed environment.
//!
//! Validation must never panic, must return at least one error when it
//! refuses a file, and every error and warning must name the file, say
//! something, and point at a line the file has. Secrets read from the
//! environment must never show up in an error, a warning, or the validated
//! configuration's `Debug` form (which is what gets logged).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rolter::config::{parse, ConfigError};

const SOURCE: &str = "fuzz/rolter.toml";

/// The value of every environment variable the file names, except the
/// special names below.
const SECRET: &str = "fuzz-secret-value";

/// A fixed environment: a variable whose name contains `UNSET` is not set,
/// `EMPTY` is empty, `NEWLINE` ends in a newline; every other one holds
/// [`SECRET`].
fn env(name: &str) -> Option<String> {
    if name.contains("UNSET") {
        None
    } else if name.contains("EMPTY") {
        Some(String::new())
    } else if name.contains("NEWLINE") {
        Some(format!("{SECRET}\n"))
    } else {
        Some(SECRET.to_owned())
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = 1 + text.bytes().filter(|b| *b == b'\n').count();
    // The secret can only be shown if the file spells it, perhaps escaped.
    let secret_may_show = text.contains("fuzz-secret") || text.contains('\\');
    let check = |error: &ConfigError| {
        assert_eq!(error.file, SOURCE, "error names another file: {error}");
        assert!(!error.message.is_empty(), "error says nothing: {error:?}");
        if let Some(line) = error.line {
            assert!(
                (1..=lines).contains(&line),
                "line {line} of a {lines}-line file: {error}"
            );
        }
        let shown = error.to_string();
        assert!(
            secret_may_show || !shown.contains(SECRET),
            "secret in a message: {shown}"
        );
    };
    match parse(SOURCE, text, &env) {
        Ok(config) => {
            config.warnings.iter().for_each(check);
            let shown = format!("{config:?}");
            assert!(
                secret_may_show || !shown.contains(SECRET),
                "secret in the configuration's Debug form: {shown}"
            );
        }
        Err(errors) => {
            assert!(errors.iter().next().is_some(), "refused with no error");
            errors.iter().for_each(check);
        }
    }
});
