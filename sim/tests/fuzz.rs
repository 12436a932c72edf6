//! The fuzz targets on stable Rust: every target over the checked-in corpus
//! (`fuzz/corpus/<target>/`, what cargo-fuzz found worth keeping) and over
//! proptest-generated inputs: valid watch lines and list pages cut short,
//! with huge numbers, deep nesting, invalid UTF-8, duplicated keys, nulls
//! and values of the wrong type; selectors and query strings from their
//! grammar's alphabet. No input may panic.
//!
//! ```text
//! cargo test -p kinformer-sim --test fuzz                       # CI: 256 cases per property
//! PROPTEST_CASES=100000 cargo test --release -p kinformer-sim --test fuzz
//! ```

use std::path::Path;

use kinformer_sim::fuzz;
use proptest::prelude::*;

/// A fuzz target's body: takes any bytes, must not panic.
type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 5] = [
    ("watch_line", fuzz::watch_line),
    ("list_page", fuzz::list_page),
    ("label_selector", fuzz::label_selector),
    ("field_selector", fuzz::field_selector),
    ("query", fuzz::query),
];

#[test]
fn every_target_takes_its_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut n = 0;
    for (name, target) in TARGETS {
        let dir = std::fs::read_dir(root.join(name))
            .unwrap_or_else(|e| panic!("no corpus for {name} under {}: {e}", root.display()));
        for entry in dir.flatten() {
            let data = std::fs::read(entry.path()).unwrap();
            target(&data);
            n += 1;
        }
    }
    assert!(n > 0, "no corpus under {}", root.display());
}

/// Valid inputs the mutations start from.
const LINES: &[&str] = &[
    r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"default","resourceVersion":"12","labels":{"app":"web"},"managedFields":[{"manager":"kubectl","operation":"Update","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"}}}"#,
    r#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","resourceVersion":"13"},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}]}]},"status":{"phase":"Running"}}}"#,
    r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"14","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
    r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#,
    r#"{"object":{"metadata":{"name":"late","resourceVersion":"15"}},"type":"DELETED"}"#,
    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":500}"#,
];

const PAGES: &[&str] = &[
    r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20","continue":"abc","remainingItemCount":3},"items":[{"metadata":{"name":"a","namespace":"n","resourceVersion":"19"},"data":{"x":"y"}},{"metadata":{"name":"b","namespace":"n","resourceVersion":"18","managedFields":[{"manager":"m"}]}}]}"#,
    r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"p","namespace":"n","resourceVersion":"6"},"spec":{"containers":[{"name":"c","image":"i","env":[{"name":"A","value":"1"}]}]}}]}"#,
    r#"{"items":[],"metadata":{"resourceVersion":"1"}}"#,
];

/// Replacements that break a document in the ways servers and proxies do.
const PIECES: &[&str] = &[
    "null",
    "1e999",
    "-1e999",
    "18446744073709551616",
    "-9223372036854775809",
    "0.0000000000000000000000000000001e-400",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "[]",
    "{}",
    "true",
    "\"x\"",
    "12",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "\"metadata\":{},\"metadata\":{}",
    "\"items\":[],\"items\":[{}]",
];

fn nested(depth: usize, open: &str, close: &str) -> String {
    format!("{}1{}", open.repeat(depth), close.repeat(depth))
}

/// A valid document, then one mutation at a position: cut, a piece spliced
/// in (or over a value), bytes of invalid UTF-8, or deep nesting.
fn mutated(seeds: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    (
        0..seeds.len(),
        0usize..10_000,
        0usize..10_000,
        0..PIECES.len(),
        0u8..6,
        1usize..3_000,
    )
        .prop_map(move |(s, at, len, piece, how, depth)| {
            let doc = seeds[s].as_bytes();
            let at = at % (doc.len() + 1);
            let end = (at + len % 40).min(doc.len());
            let mut out = doc[..at].to_vec();
            match how {
                0 => return out, // truncated
                1 => out.extend_from_slice(PIECES[piece].as_bytes()),
                2 => {
                    out.extend_from_slice(PIECES[piece].as_bytes());
                    out.extend_from_slice(&doc[end..]);
                    return out;
                }
                3 => out.extend_from_slice(&[0xff, 0xfe, 0xc0, 0x80]),
                4 => out.extend_from_slice(nested(depth, "[", "]").as_bytes()),
                _ => out.extend_from_slice(nested(depth, "{\"a\":", "}").as_bytes()),
            }
            out.extend_from_slice(&doc[at..]);
            out
        })
}

proptest! {
    #[test]
    fn watch_lines_never_panic(data in mutated(LINES)) {
        fuzz::watch_line(&data);
    }

    #[test]
    fn list_pages_never_panic(data in mutated(PAGES)) {
        fuzz::list_page(&data);
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        for (_, target) in TARGETS {
            target(&data);
        }
    }

    #[test]
    fn label_selectors_never_panic(s in r"[a-z0-9./_=!<>(), -]{0,40}|[a-z]{1,3}( (in|notin) \([a-z,]{0,8}\))?") {
        fuzz::label_selector(s.as_bytes());
    }

    #[test]
    fn field_selectors_never_panic(s in r"(metadata\.(name|namespace)|spec(\.[a-z]{1,3}){0,4}|[a-z.]{0,9})(=|==|!=)[a-z0-9,=\\]{0,10}(,[a-z.]{1,9}(=|!=)[a-z]{0,4}){0,3}") {
        fuzz::field_selector(s.as_bytes());
    }

    #[test]
    fn queries_never_panic(s in r"((watch|resourceVersion|resourceVersionMatch|limit|continue|labelSelector|fieldSelector|timeoutSeconds|allowWatchBookmarks|sendInitialEvents|dryRun)=[a-zA-Z0-9%+=._-]{0,24}&?){0,6}") {
        fuzz::query(s.as_bytes());
    }
}
