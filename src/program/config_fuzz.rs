//! Property tests of the configuration loader: any file content, any
//! `KINFORMER__` variable and any value in place of one of `config.toml`'s
//! give settings or a typed `ConfigError` naming a key, never a panic.
//!
//! `PROPTEST_CASES=20000 cargo test --bin kinformer config_fuzz` runs longer.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;

use super::config::{ConfigError, DEFAULT_CONFIG_FILE, FlagOverrides, Loaded, load};

/// Loads `text` as the config file, with `env`; the file is removed after.
fn load_bytes(text: &[u8], env: Vec<(String, String)>) -> Result<Loaded, ConfigError> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "kinformer-config-fuzz-{}-{}.toml",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text).unwrap();
    let result = load(Some(&path), env, FlagOverrides::default());
    let _ = std::fs::remove_file(&path);
    result
}

/// The repository's `config.toml`, one `key = value` line per entry.
fn repository_lines() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CONFIG_FILE);
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

const VALUES: &[&str] = &[
    "-1",
    "0",
    "1e309",
    "99999999999999999999999",
    "-9223372036854775809",
    "\"\"",
    "\"0s\"",
    "\"1ns\"",
    "\"-5s\"",
    "\"18446744073709551616s\"",
    "\"99999999999999h\"",
    "\"1 fortnight\"",
    "\"\\u0000\"",
    "true",
    "[]",
    "[1, \"a\"]",
    "{}",
    "{ a = 1 }",
    "nan",
    "inf",
    "\"block\"",
    "\"coalesce\"",
    "\"http://[::1\"",
    "\"0.0.0.0:99999\"",
    "1979-05-27T07:32:00Z",
];

proptest! {
    #[test]
    fn arbitrary_bytes_as_the_file(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = load_bytes(&bytes, Vec::new());
    }

    #[test]
    fn any_value_in_place_of_one_of_config_toml(line in 0usize..64, value in 0..VALUES.len(), drop_line in any::<bool>()) {
        let mut lines = repository_lines();
        let i = line % lines.len();
        if drop_line {
            lines.remove(i);
        } else if let Some((key, _)) = lines[i].split_once(" = ") {
            lines[i] = format!("{key} = {}", VALUES[value]);
        } else {
            lines[i] = format!("{} = {}", lines[i].trim_matches(|c| c == '[' || c == ']'), VALUES[value]);
        }
        match load_bytes(lines.join("\n").as_bytes(), Vec::new()) {
            Ok(_) => {}
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn any_environment_variable(key in "[A-Z_]{1,40}", value in "\\PC{0,30}") {
        let env = vec![(format!("KINFORMER__{key}"), value)];
        let _ = load_bytes(b"", env);
    }

    #[test]
    fn toml_shaped_files(text in r#"(\[{1,2}(engine|engine\.backoff|engine\.fifo|cluster|embedded|observability|informers|informers\.subscribers)\]{1,2}\n([a-z_]{1,20} = ("[a-z0-9:./ -]{0,16}"|-?[0-9]{1,22}(\.[0-9]{1,3})?|true|false|\[\]|\{\})\n){0,5}){0,4}"#) {
        let _ = load_bytes(text.as_bytes(), Vec::new());
    }
}
