//! The repository's conventions, checked on the source tree (README's test
//! command runs them, so CI does):
//!
//! - every rule id cited in a `.rs` file resolves in `docs/semantics.md`;
//! - no import cycle between the files of `actors/src`, `src` and
//!   `apiserver/src`;
//! - no glob re-export (`pub use actor::*`);
//! - every `actors/src/*/actor.rs` is a thin shell (at most
//!   [`ACTOR_SHELL_MAX_LINES`] lines outside its tests).
//!
//! The checks read Rust as text with a small lexer (comments, strings and
//! `#[cfg(test)]` items are blanked out where code is meant): a full parser
//! (syn) would be a dependency for four checks. Failures name the file, the
//! line and what to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Most lines an `actor.rs` may have outside its `#[cfg(test)]` items.
const ACTOR_SHELL_MAX_LINES: usize = 300;

/// Rule-id prefixes of the client-go specification and of kinformer's own
/// rules (docs/semantics.md, part 3).
const RULE_PREFIXES: &[&str] = &[
    "KEY", "IDX", "DF", "RF", "FF", "R", "WL", "C", "SI", "HS", "WQ", "DQ", "RL", "CTL", "PQ",
    "LE", "SH",
];
/// Prefixes used only by scenario ids (`S-T1`, `RT-T1`, ...).
const SCENARIO_ONLY_PREFIXES: &[&str] = &["S", "I", "T", "RT", "W", "L"];

/// The crates whose files must not import each other in a cycle: their
/// roots, relative to the workspace.
const CRATE_ROOTS: &[&str] = &[
    "actors/src/lib.rs",
    "src/lib.rs",
    "src/main.rs",
    "apiserver/src/lib.rs",
    "apiserver/src/main.rs",
];

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn relative(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.rs` file of the workspace (no `target`, no hidden directories), sorted.
fn rust_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&workspace(), &mut files);
    files.sort();
    files
}

// ---- lexing -------------------------------------------------------------

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// Blanks `bytes[from..to]` (newlines kept). Every delimiter the lexer looks
/// for is ASCII, so working on bytes keeps offsets and lines exact, and the
/// result valid UTF-8 (a blanked multi-byte char becomes several spaces).
fn blank(bytes: &mut [u8], from: usize, to: usize) {
    let to = to.min(bytes.len());
    for b in &mut bytes[from.min(to)..to] {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

/// The source with comments and string/char literals replaced by spaces,
/// byte for byte.
fn blank_comments_and_strings(src: &str) -> String {
    let s = src.as_bytes();
    let mut out = s.to_vec();
    let mut i = 0;
    while i < s.len() {
        let prev_ident = i > 0 && is_ident_byte(s[i - 1]);
        match s[i] {
            b'/' if s.get(i + 1) == Some(&b'/') => {
                let end = (i..s.len()).find(|&j| s[j] == b'\n').unwrap_or(s.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if s.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < s.len() && depth > 0 {
                    if s[j] == b'/' && s.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if s[j] == b'*' && s.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' | b'b' if !prev_ident && raw_string_start(s, i).is_some() => {
                let (hashes, quote) = raw_string_start(s, i).unwrap_or((0, i));
                let mut j = quote + 1;
                while j < s.len()
                    && !(s[j] == b'"' && (1..=hashes).all(|h| s.get(j + h) == Some(&b'#')))
                {
                    j += 1;
                }
                let end = j + 1 + hashes;
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < s.len() && s[j] != b'"' {
                    j += if s[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i, j + 1);
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{1F600}'), or a lifetime ('a).
                let end = if s.get(i + 1) == Some(&b'\\') {
                    (i + 2..s.len()).find(|&j| s[j] == b'\'')
                } else if s.get(i + 2) == Some(&b'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match end {
                    Some(end) => {
                        blank(&mut out, i, end + 1);
                        i = end + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced, by spaces")
}

/// `r"`, `r#"`, `br"`, `br##"` ... at `i`: the number of hashes and where the quote is.
fn raw_string_start(s: &[u8], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if s.get(j) == Some(&b'b') {
        j += 1;
    }
    if s.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = (j..s.len()).take_while(|&k| s[k] == b'#').count();
    (s.get(j + hashes) == Some(&b'"')).then_some((hashes, j + hashes))
}

/// The byte ranges of the `#[cfg(test)]` items of `code` (already blanked),
/// the attribute included.
fn test_items(code: &str) -> Vec<(usize, usize)> {
    const ATTRIBUTE: &str = "#[cfg(test)]";
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(ATTRIBUTE) {
        let start = from + found;
        let end = item_end(code.as_bytes(), start + ATTRIBUTE.len());
        ranges.push((start, end));
        from = end.max(start + 1);
    }
    ranges
}

/// `code` (already blanked) with every `#[cfg(test)]` item blanked too.
fn blank_test_items(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    for (start, end) in test_items(code) {
        blank(&mut out, start, end);
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced, by spaces")
}

/// The end (exclusive) of the item that starts after an attribute at `i`:
/// other attributes, then up to a `;` at depth 0, or the `}` that closes
/// its body (a `use`, `const`, `static` or `type` goes on to its `;`).
fn item_end(s: &[u8], mut i: usize) -> usize {
    loop {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if s.get(i) != Some(&b'#') {
            break;
        }
        let mut depth = 0;
        while i < s.len() {
            match s[i] {
                b'[' => depth += 1,
                b']' => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    let head = String::from_utf8_lossy(&s[i..s.len().min(i + 40)]).into_owned();
    let ends_at_semicolon = head
        .split_whitespace()
        .take(2)
        .any(|w| matches!(w, "use" | "const" | "static" | "type"));
    let mut depth = 0i32;
    while i < s.len() {
        match s[i] {
            b'{' | b'(' | b'[' => depth += 1,
            b'}' | b')' | b']' => {
                depth -= 1;
                if depth == 0 && s[i] == b'}' && !ends_at_semicolon {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    s.len()
}

/// Code only: no comments, strings or test items.
fn code_of(src: &str) -> String {
    blank_test_items(&blank_comments_and_strings(src))
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte].matches('\n').count() + 1
}

// ---- (a) rule ids ---------------------------------------------------------

/// Rule ids in `text` (e.g. `DF-9`, `R-T13`, `WL-T4a`), with their byte offsets.
fn rule_ids(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if !boundary || !b[i].is_ascii_uppercase() {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i;
        while j < b.len() && b[j].is_ascii_uppercase() {
            j += 1;
        }
        let prefix = &text[start..j];
        if j < b.len() && b[j] == b'-' {
            let mut k = j + 1;
            let letter = b
                .get(k)
                .copied()
                .filter(|c| matches!(c, b'T' | b'H' | b'B'));
            if letter.is_some() {
                k += 1;
            }
            let digits = (k..b.len()).take_while(|&d| b[d].is_ascii_digit()).count();
            k += digits;
            // A sub-case letter only follows a scenario number (`WL-T4a`).
            if letter == Some(b'T') && digits > 0 && k < b.len() && b[k].is_ascii_lowercase() {
                let after = b.get(k + 1).copied();
                if !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    k += 1;
                }
            }
            let ends = !b
                .get(k)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
            let known = RULE_PREFIXES.contains(&prefix)
                || (letter == Some(b'T') && SCENARIO_ONLY_PREFIXES.contains(&prefix));
            let bare_letter = digits == 0 && matches!(letter, Some(b'H' | b'B'));
            if known && ends && (digits > 0 || bare_letter) {
                out.push((start, text[start..k].to_owned()));
            }
            i = k.max(j + 1);
        } else {
            i = j;
        }
    }
    out
}

/// The rule id a test or module name cites (`wq_t3_len` → `WQ-T3`,
/// `df_t3a_…` → `DF-T3a`, `r_19_…` → `R-19`), if any.
fn rule_id_of_name(name: &str) -> Option<String> {
    let (prefix, rest) = name.split_once('_')?;
    let upper = prefix.to_ascii_uppercase();
    let scenario = rest.starts_with('t') && rest[1..].starts_with(|c: char| c.is_ascii_digit());
    let known = RULE_PREFIXES.contains(&upper.as_str())
        || (scenario && SCENARIO_ONLY_PREFIXES.contains(&upper.as_str()));
    if !known || prefix.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let body = if scenario { &rest[1..] } else { rest };
    let digits: String = body.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let tail = &body[digits.len()..];
    let (letter, tail) = match tail.chars().next() {
        Some(c) if c.is_ascii_lowercase() && (tail.len() == 1 || tail[1..].starts_with('_')) => {
            (Some(c), &tail[1..])
        }
        _ => (None, tail),
    };
    if !(tail.is_empty() || tail.starts_with('_')) {
        return None;
    }
    Some(format!(
        "{upper}-{}{digits}{}",
        if scenario { "T" } else { "" },
        letter.map(String::from).unwrap_or_default()
    ))
}

/// Names declared with `fn` or `mod` in `code`, with byte offsets.
fn declared_names(code: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for keyword in ["fn ", "mod "] {
        let mut from = 0;
        while let Some(found) = code[from..].find(keyword) {
            let at = from + found;
            from = at + keyword.len();
            if at > 0 && code[..at].ends_with(is_ident) {
                continue;
            }
            let rest = &code[from..];
            let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
            if len > 0 {
                out.push((from, &rest[..len]));
            }
        }
    }
    out
}

/// The ids defined in docs/semantics.md: each written in bold, `**DF-9**`.
fn defined_rule_ids(doc: &str) -> BTreeMap<String, usize> {
    let mut defined = BTreeMap::new();
    for (at, id) in rule_ids(doc) {
        let bold = doc[..at].ends_with("**") && doc[at + id.len()..].starts_with("**");
        if bold {
            *defined.entry(id).or_insert(0) += 1;
        }
    }
    defined
}

#[test]
fn every_rule_id_cited_in_code_resolves_in_docs_semantics_md() {
    let doc_path = workspace().join("docs/semantics.md");
    let doc = read(&doc_path);
    let defined = defined_rule_ids(&doc);
    let mut problems = Vec::new();
    for (id, count) in &defined {
        if *count > 1 {
            problems.push(format!(
                "docs/semantics.md: {id} is defined {count} times; keep one entry"
            ));
        }
    }
    for file in rust_files() {
        let src = read(&file);
        // Offsets into the source: the blanked code keeps them byte for byte.
        let mut cited: Vec<(usize, String)> = rule_ids(&src);
        let code = code_of(&src);
        cited.extend(
            declared_names(&code)
                .into_iter()
                .filter_map(|(at, name)| rule_id_of_name(name).map(|id| (at, id))),
        );
        for (at, id) in cited {
            if !defined.contains_key(&id) {
                problems.push(format!(
                    "{}:{}: rule id {id} is not defined in docs/semantics.md (add an entry `**{id}**`, or fix the citation)",
                    relative(&file),
                    line_of(&src, at)
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

// ---- (b) import cycles ------------------------------------------------------

/// One module of a crate: its file, and the names it re-exports.
#[derive(Debug, Default)]
struct Module {
    file: PathBuf,
    /// `pub use` names (or aliases) → the absolute path they stand for.
    reexports: BTreeMap<String, Vec<String>>,
}

/// A crate's modules by absolute path (`crate::a::b`, joined with `::`).
#[derive(Debug, Default)]
struct Crate {
    modules: BTreeMap<String, Module>,
}

/// A parsed `use` tree leaf: the path, its alias, and whether it is a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UseLeaf {
    path: Vec<String>,
    alias: Option<String>,
    glob: bool,
}

fn use_tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if is_ident(c) || (c == 'r' && chars.get(i + 1) == Some(&'#')) {
            let start = i;
            i += 1;
            while i < chars.len() && (is_ident(chars[i]) || chars[i] == '#') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect::<String>().replace("r#", ""));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// The leaves of a use tree (`a::{b, c::d as e, f::*}`).
fn parse_use_tree(text: &str) -> Vec<UseLeaf> {
    fn tree(t: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
        let mut path = prefix.to_vec();
        loop {
            match t.get(*i).map(String::as_str) {
                Some("{") => {
                    *i += 1;
                    while t.get(*i).is_some_and(|x| x != "}") {
                        tree(t, i, &path, out);
                        if t.get(*i).is_some_and(|x| x == ",") {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                Some("*") => {
                    *i += 1;
                    out.push(UseLeaf {
                        path,
                        alias: None,
                        glob: true,
                    });
                    return;
                }
                Some("::") => *i += 1,
                Some(seg) if seg.chars().all(is_ident) => {
                    path.push(seg.to_owned());
                    *i += 1;
                    if t.get(*i).is_some_and(|x| x == "::") {
                        continue;
                    }
                    let alias = if t.get(*i).is_some_and(|x| x == "as") {
                        *i += 2;
                        t.get(*i - 1).cloned()
                    } else {
                        None
                    };
                    out.push(UseLeaf {
                        path,
                        alias,
                        glob: false,
                    });
                    return;
                }
                _ => {
                    *i += 1;
                    return;
                }
            }
        }
    }
    let tokens = use_tokens(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        tree(&tokens, &mut i, &[], &mut out);
    }
    out
}

/// Every `use` declaration of `code`: byte offset, whether it is `pub`
/// (in any form), its text after `use` up to the `;`, and its end.
fn use_declarations(code: &str) -> Vec<(usize, bool, &str, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("use ") {
        let at = from + found;
        from = at + 4;
        let before = code[..at].trim_end();
        let starts_statement = before.is_empty()
            || before.ends_with([';', '{', '}', ']'])
            || before.ends_with("pub")
            || (before.ends_with(')')
                && before.rfind("pub").is_some_and(|p| {
                    let vis = &before[p..];
                    vis.starts_with("pub(") && !vis.contains(';')
                }));
        if !starts_statement || (at > 0 && code[..at].ends_with(is_ident)) {
            continue;
        }
        let public = before.ends_with("pub") || before.ends_with(')');
        let Some(len) = code[from..].find(';') else {
            break;
        };
        out.push((at, public, &code[from..from + len], from + len));
    }
    out
}

/// The inline `mod name { … }` blocks of `code`: (start, end, name).
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for (at, name) in declared_names(code) {
        if !code[..at].trim_end().ends_with("mod") {
            continue;
        }
        let after = code[at + name.len()..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        let mut end = bytes.len();
        for (k, b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((at, end, name.to_owned()));
    }
    out
}

/// The module path at byte `at` of a file whose module is `file_module`.
fn module_at(file_module: &[String], inline: &[(usize, usize, String)], at: usize) -> Vec<String> {
    let mut path = file_module.to_vec();
    let mut enclosing: Vec<&(usize, usize, String)> = inline
        .iter()
        .filter(|(s, e, _)| *s < at && at < *e)
        .collect();
    enclosing.sort_by_key(|(s, _, _)| *s);
    path.extend(enclosing.into_iter().map(|(_, _, n)| n.clone()));
    path
}

/// Builds a crate's module tree from its root, following `mod name;`.
fn load_crate(root: &Path) -> Crate {
    let mut krate = Crate::default();
    let mut todo = vec![(vec!["crate".to_owned()], root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let code = code_of(&read(&file));
        let is_dir_owner = file
            .file_name()
            .is_some_and(|n| n == "lib.rs" || n == "main.rs" || n == "mod.rs");
        let dir = if is_dir_owner {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            file.with_extension("")
        };
        let inline = inline_modules(&code);
        for (s, _, name) in &inline {
            let module = module_at(&path, &inline, *s + 1);
            let mut full = module.clone();
            if full.last() != Some(name) {
                full.push(name.clone());
            }
            krate.modules.insert(
                full.join("::"),
                Module {
                    file: file.clone(),
                    ..Module::default()
                },
            );
        }
        for (at, name) in declared_names(&code) {
            if !code[..at].trim_end().ends_with("mod") {
                continue;
            }
            if !code[at + name.len()..].trim_start().starts_with(';') {
                continue;
            }
            let candidates = [
                dir.join(format!("{name}.rs")),
                dir.join(name).join("mod.rs"),
            ];
            if let Some(child) = candidates.into_iter().find(|c| c.exists()) {
                let mut child_path = module_at(&path, &inline, at);
                child_path.push(name.to_owned());
                todo.push((child_path, child));
            }
        }
        krate.modules.insert(
            path.join("::"),
            Module {
                file,
                ..Module::default()
            },
        );
    }
    // Re-exports, once every module is known.
    let files: BTreeSet<PathBuf> = krate.modules.values().map(|m| m.file.clone()).collect();
    for file in &files {
        let file_module = file_module_path(&krate, file);
        let code = code_of(&read(file));
        let inline = inline_modules(&code);
        for (at, public, text, _) in use_declarations(&code) {
            if !public {
                continue;
            }
            let module = module_at(&file_module, &inline, at);
            for leaf in parse_use_tree(text) {
                if leaf.glob {
                    continue;
                }
                let Some(target) = absolute(&krate, &module, &leaf.path) else {
                    continue;
                };
                let name = leaf.alias.clone().or_else(|| leaf.path.last().cloned());
                if let (Some(name), Some(m)) = (name, krate.modules.get_mut(&module.join("::"))) {
                    m.reexports.insert(name, target);
                }
            }
        }
    }
    krate
}

/// The module path of `file` (its top module, not an inline one).
fn file_module_path(krate: &Crate, file: &Path) -> Vec<String> {
    krate
        .modules
        .iter()
        .filter(|(_, m)| m.file == file)
        .map(|(p, _)| p.split("::").map(String::from).collect::<Vec<_>>())
        .min_by_key(Vec::len)
        .unwrap_or_default()
}

/// `path` as seen from `module`, made absolute (`crate::…`); `None` for a
/// path into another crate.
fn absolute(krate: &Crate, module: &[String], path: &[String]) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => vec!["crate".into()],
        "self" => module.to_vec(),
        "super" => module.to_vec(),
        _ => {
            let mut child = module.to_vec();
            child.push(first.clone());
            if !krate.modules.contains_key(&child.join("::")) {
                return None;
            }
            module.to_vec()
        }
    };
    let mut rest = path;
    if first == "crate" || first == "self" {
        rest = &path[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    if base.last().is_some_and(|s| s == "self") {
        base.pop();
    }
    Some(base)
}

/// The file that defines what the absolute `path` names: through modules,
/// then through the re-exports of the module that holds the name.
fn resolve(krate: &Crate, path: &[String], depth: usize) -> Option<PathBuf> {
    let mut module: Vec<String> = Vec::new();
    for (i, seg) in path.iter().enumerate() {
        let mut next = module.clone();
        next.push(seg.clone());
        if krate.modules.contains_key(&next.join("::")) {
            module = next;
            continue;
        }
        let holder = krate.modules.get(&module.join("::"))?;
        if let Some(target) = holder.reexports.get(seg)
            && depth < 16
            && target.as_slice() != &path[..=i]
        {
            let mut target = target.clone();
            target.extend(path[i + 1..].iter().cloned());
            return resolve(krate, &target, depth + 1).or(Some(holder.file.clone()));
        }
        return Some(holder.file.clone());
    }
    krate
        .modules
        .get(&module.join("::"))
        .map(|m| m.file.clone())
}

/// Paths written in code (not in `use`): `crate::a::b` and `super::a`.
fn code_paths(code: &str, uses: &[(usize, bool, &str, usize)]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for start_word in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(start_word) {
            let at = from + found;
            from = at + start_word.len();
            let inside_use = uses.iter().any(|(s, _, _, e)| *s <= at && at < *e);
            let prev = code[..at].chars().next_back();
            let visibility =
                code[..at].trim_end().ends_with(" in") || code[..at].trim_end().ends_with("(in");
            if inside_use || prev.is_some_and(|c| is_ident(c) || c == '$' || c == ':') || visibility
            {
                continue;
            }
            let rest = &code[at..];
            let len = rest
                .find(|c: char| !(is_ident(c) || c == ':'))
                .unwrap_or(rest.len());
            let path: Vec<String> = rest[..len]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            out.push((at, path));
        }
    }
    out
}

/// One import between two files: where it is written.
#[derive(Debug, Clone)]
struct Edge {
    line: usize,
    text: String,
}

/// The file graph of a crate: file → file → the first import that links them.
fn import_graph(krate: &Crate) -> BTreeMap<PathBuf, BTreeMap<PathBuf, Edge>> {
    let mut graph: BTreeMap<PathBuf, BTreeMap<PathBuf, Edge>> = BTreeMap::new();
    let files: BTreeSet<PathBuf> = krate.modules.values().map(|m| m.file.clone()).collect();
    for file in files {
        let file_module = file_module_path(krate, &file);
        let code = code_of(&read(&file));
        let inline = inline_modules(&code);
        let uses = use_declarations(&code);
        let mut refs: Vec<(usize, Vec<String>, String)> = Vec::new();
        for (at, _, text, _) in &uses {
            let module = module_at(&file_module, &inline, *at);
            for leaf in parse_use_tree(text) {
                if let Some(path) = absolute(krate, &module, &leaf.path) {
                    refs.push((
                        *at,
                        path,
                        format!(
                            "use {}",
                            text.split_whitespace().collect::<Vec<_>>().join(" ")
                        ),
                    ));
                }
            }
        }
        for (at, path) in code_paths(&code, &uses) {
            let module = module_at(&file_module, &inline, at);
            if let Some(abs) = absolute(krate, &module, &path) {
                refs.push((at, abs, path.join("::")));
            }
        }
        let out = graph.entry(file.clone()).or_default();
        for (at, path, text) in refs {
            let Some(target) = resolve(krate, &path, 0) else {
                continue;
            };
            if target != file {
                out.entry(target).or_insert(Edge {
                    line: line_of(&code, at),
                    text,
                });
            }
        }
    }
    graph
}

/// The cycles of `graph`: one path per strongly connected component of
/// more than one file (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<PathBuf, BTreeMap<PathBuf, Edge>>) -> Vec<Vec<PathBuf>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeMap<PathBuf, Edge>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        components: Vec<Vec<&'a PathBuf>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flat_map(|e| e.keys()) {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.components.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    // One concrete cycle per component: from its first file, the shortest
    // way back to it inside the component.
    t.components
        .iter()
        .map(|component| {
            let members: BTreeSet<&PathBuf> = component.iter().copied().collect();
            let start = *members.iter().next().expect("non-empty");
            let mut parent: BTreeMap<&PathBuf, &PathBuf> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut found = None;
            while let Some(v) = queue.pop_front() {
                for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
                    if !members.contains(w) {
                        continue;
                    }
                    if w == start {
                        found = Some(v);
                        break;
                    }
                    if !parent.contains_key(w) {
                        parent.insert(w, v);
                        queue.push_back(w);
                    }
                }
                if found.is_some() {
                    break;
                }
            }
            let mut path = vec![start.clone()];
            let mut v = found.expect("a strongly connected component has a cycle");
            let mut back = Vec::new();
            while v != start {
                back.push(v.clone());
                v = parent[v];
            }
            path.extend(back.into_iter().rev());
            path.push(start.clone());
            path
        })
        .collect()
}

#[test]
fn no_import_cycle_between_files() {
    let mut problems = Vec::new();
    for root in CRATE_ROOTS {
        let root = workspace().join(root);
        if !root.exists() {
            continue;
        }
        let krate = load_crate(&root);
        let graph = import_graph(&krate);
        for cycle in cycles(&graph) {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let edge = &graph[&w[0]][&w[1]];
                    format!(
                        "  {}:{} → {} ({})",
                        relative(&w[0]),
                        edge.line,
                        relative(&w[1]),
                        edge.text
                    )
                })
                .collect();
            problems.push(format!(
                "import cycle in the crate of {}:\n{}",
                relative(&root),
                steps.join("\n")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "\n{}\n(move what both sides need into a module of its own)\n",
        problems.join("\n")
    );
}

// ---- (c) glob re-exports ---------------------------------------------------

#[test]
fn no_glob_reexports() {
    let mut problems = Vec::new();
    for file in rust_files() {
        let code = code_of(&read(&file));
        for (at, public, text, _) in use_declarations(&code) {
            if !public {
                continue;
            }
            for leaf in parse_use_tree(text) {
                // A prelude exists to be glob-imported; re-exporting one is fine.
                let prelude = leaf.path.last().is_some_and(|s| s == "prelude");
                if leaf.glob && !prelude {
                    problems.push(format!(
                        "{}:{}: `pub use {}::*` re-exports a module's items by glob; name them",
                        relative(&file),
                        line_of(&code, at),
                        leaf.path.join("::")
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

// ---- (d) thin actor shells ---------------------------------------------------

/// Lines of `src` outside its `#[cfg(test)]` items (comments and blank
/// lines included, as the issue measured them).
fn non_test_lines(src: &str) -> usize {
    let code = blank_comments_and_strings(src);
    let mut test_lines = BTreeSet::new();
    for (start, end) in test_items(&code) {
        test_lines.extend(line_of(&code, start)..=line_of(&code, end.saturating_sub(1)));
    }
    let total = src.lines().count();
    total - test_lines.iter().filter(|&&l| l <= total).count()
}

#[test]
fn every_actor_shell_is_thin() {
    let mut problems = Vec::new();
    let Ok(entries) = fs::read_dir(workspace().join("actors/src")) else {
        panic!("actors/src is missing");
    };
    let mut shells: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path().join("actor.rs"))
        .filter(|p| p.exists())
        .collect();
    shells.sort();
    for shell in shells {
        let lines = non_test_lines(&read(&shell));
        if lines > ACTOR_SHELL_MAX_LINES {
            problems.push(format!(
                "{}: {lines} lines outside its tests (at most {ACTOR_SHELL_MAX_LINES}): move rules into the actor's pure state machine",
                relative(&shell)
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

// ---- the checks' own helpers ------------------------------------------------

#[test]
fn rule_ids_are_found_in_text_and_test_names() {
    // The negative examples are split so that repository-wide greps for
    // cited rule ids (the stop hook's) do not take them for citations.
    let found: Vec<String> = rule_ids(concat!(
        "DF-9, R-T13 and WL-T4a; not SHA-256, X-DF-",
        "1x, R-",
        "2s or "
    ))
    .into_iter()
    .map(|(_, id)| id)
    .collect();
    assert_eq!(found, ["DF-9", "R-T13", "WL-T4a"]);
    assert_eq!(rule_id_of_name("wq_t3_len").as_deref(), Some("WQ-T3"));
    assert_eq!(rule_id_of_name("df_t3a_replace").as_deref(), Some("DF-T3a"));
    assert_eq!(rule_id_of_name("r_19_clean_close").as_deref(), Some("R-19"));
    assert_eq!(rule_id_of_name("df_t1").as_deref(), Some("DF-T1"));
    assert_eq!(rule_id_of_name("s_t1_cache").as_deref(), Some("S-T1"));
    assert_eq!(
        rule_id_of_name("s_1_cache"),
        None,
        "S only has scenario ids"
    );
    assert_eq!(rule_id_of_name("read_timeout"), None);
    assert_eq!(rule_id_of_name("c_style"), None);
}

#[test]
fn comments_strings_and_test_items_are_blanked() {
    let src = "use a::b; // use c::d;\nconst S: &str = \"use e::f;\";\n#[cfg(test)]\nmod tests {\n    use g::h;\n}\nfn x<'a>(c: char) -> bool { c == '{' }\n";
    let code = code_of(src);
    assert!(code.contains("use a::b;"));
    for gone in ["c::d", "e::f", "g::h", "mod tests"] {
        assert!(!code.contains(gone), "{gone} in {code:?}");
    }
    assert!(
        code.contains("fn x<'a>"),
        "a lifetime is not a char literal"
    );
    assert_eq!(code.lines().count(), src.lines().count());
    let cfg_use = "#[cfg(test)]\nuse a::{b, c};\nfn kept() {}\n";
    assert!(code_of(cfg_use).contains("fn kept"));
}

#[test]
fn use_trees_expand_to_their_leaves() {
    let leaves = parse_use_tree("crate::a::{self, b::C as D, e::*}");
    let shown: Vec<(String, Option<String>, bool)> = leaves
        .into_iter()
        .map(|l| (l.path.join("::"), l.alias, l.glob))
        .collect();
    assert_eq!(
        shown,
        [
            ("crate::a::self".to_owned(), None, false), // `absolute` drops the `self`
            ("crate::a::b::C".to_owned(), Some("D".to_owned()), false),
            ("crate::a::e".to_owned(), None, true),
        ]
    );
}

#[test]
fn a_cycle_is_reported_with_its_files() {
    let edge = || Edge {
        line: 1,
        text: String::new(),
    };
    let mut graph: BTreeMap<PathBuf, BTreeMap<PathBuf, Edge>> = BTreeMap::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(PathBuf::from(from))
            .or_default()
            .insert(PathBuf::from(to), edge());
    }
    let found = cycles(&graph);
    assert_eq!(found.len(), 1);
    let names: Vec<String> = found[0].iter().map(|p| p.display().to_string()).collect();
    assert_eq!(names, ["a", "b", "c", "a"]);
}
