//! Workload 1: initial sync of N objects, and decode-only throughput of the same pages.

use std::collections::BTreeMap;

use serde_json::Value;

use super::child::run_once;
use super::{CHILD_TIMEOUT, Scale, alternate, seed, server, spec};
use crate::proto::{Job, Kind, Strip, SubSpec, Variant};
use crate::report::{Bar, Section, Table, fmt_summary, mib, ratio};
use crate::stats::Summary;

fn variants(kind: Kind) -> Vec<Variant> {
    let mut v = vec![
        Variant::KINFORMER,
        Variant::KUBE_RUNTIME,
        Variant::KINFORMER.streaming(),
        Variant::KUBE_RUNTIME.streaming(),
        // Issue 26's compact cache, and the decoded cache with the same index
        // and read probe.
        Variant::KINFORMER.indexed(),
        Variant::KINFORMER.compact(),
        // A streaming list into a compact cache: its pages reach the cache
        // as they stream, so it is never held decoded.
        Variant::KINFORMER.streaming().compact(),
        // Issue 24: list pages decoded on the Reflector's own thread while
        // the informer's thread caches and delivers the previous ones.
        Variant::KINFORMER.reflector_thread(),
        Variant::KINFORMER.streaming().reflector_thread(),
        // Issue 24: list pages and a streaming list's events decoded on the
        // informer's thread (the default before list decoding threads).
        Variant::KINFORMER.list_decoders(0),
        Variant::KINFORMER.streaming().list_decoders(0),
    ];
    if kind == Kind::Pod {
        v.push(Variant::KINFORMER.strip(Strip::AfterDecode));
        v.push(Variant::KUBE_RUNTIME.strip(Strip::AfterDecode));
        v.push(Variant::KINFORMER.strip(Strip::AtDecode));
        v.extend(METADATA_VARIANTS);
    }
    v
}

/// Issue 26's metadata-only informers: kinformer's `Informer::metadata`,
/// kube-runtime's `watcher()` over an `Api<PartialObjectMeta<K>>` (what its
/// deprecated `metadata_watcher()` does), each with and without
/// managedFields.
/// The last: metadata only in a compact cache, managedFields kept.
const METADATA_VARIANTS: [Variant; 5] = [
    Variant::KINFORMER.metadata(),
    Variant::KUBE_RUNTIME.metadata(),
    Variant::KINFORMER.metadata().strip(Strip::AtDecode),
    Variant::KUBE_RUNTIME.metadata().strip(Strip::AfterDecode),
    Variant::KINFORMER.metadata().compact(),
];

/// kinformer's metadata-only variants, each with the kube-runtime
/// metadata-only variant that caches the same content (the compact one is
/// only in the ratio table: the bars judge the metadata informers).
const METADATA_PAIRS: [(Variant, Variant); 2] = [
    (METADATA_VARIANTS[0], METADATA_VARIANTS[1]),
    (METADATA_VARIANTS[2], METADATA_VARIANTS[3]),
];

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64().unwrap_or(f64::NAN)
}

/// Runs the workload.
pub fn run(scale: &Scale) -> anyhow::Result<Section> {
    let server = server()?;
    let url = server.url();
    let mut section = Section {
        workload: "sync".into(),
        title: "Workload 1: initial sync".into(),
        issue: 6,
        method: vec![
            "Each informer runs alone in a child process against the embedded API server (in the parent) over loopback HTTP; \
             lists are paginated (page size 500) unless marked streaming. kinformer has one subscriber (it receives every \
             initial add, on the informer's one actix thread); kube-runtime is `watcher()` + `reflector()` with its stream \
             drained, on a 2-worker tokio runtime, without subscribers (its shared store would dispatch only after ready). Time to synced: kinformer's \
             `wait_for_sync`, kube-runtime's `Store::wait_until_ready`. Peak heap: live heap (counting allocator) sampled every \
             1 ms from start to synced, minus the baseline before the informer started. Steady bytes per object: live heap 0.5 s \
             after the subscriber synced, minus the baseline, divided by the objects. CPU to synced: process CPU \
             (CLOCK_PROCESS_CPUTIME_ID) until the subscriber synced. Peak RSS: VmHWM (reset at start). Decode-only: the same \
             pages fetched as text, then only decoded with `serde_json::from_str::<ObjectList<K>>` (kube-client's path), best of \
             two passes, in a child of its own; sync / decode-only compares the informer's objects per second with it. \
             Fetch-only: that child's sequential fetch loop (kube-client's `request_text`, each page kept, only its `metadata` \
             decoded for its continue token, the items skipped unallocated): the client's fetch path with the server's, not \
             the server alone."
                .into(),
            "Cells are medians with [min–max] over the repetitions; the order of the informers alternates between repetitions."
                .into(),
        ],
        ..Section::default()
    };
    let mut results: BTreeMap<(usize, String, String), Vec<Value>> = BTreeMap::new();
    let mut decode: BTreeMap<(usize, String), Vec<Value>> = BTreeMap::new();
    for &n in &scale.sync_sizes {
        for &kind in &scale.sync_kinds {
            let ns = format!("{}-{n}", kind.plural());
            seed(&server, kind, &ns, n)?;
            let vs = variants(kind);
            for rep in 0..scale.reps {
                for v in alternate(&vs, rep).into_iter().filter(|v| scale.runs(v)) {
                    let subs = if v.lib == crate::proto::Lib::Kinformer {
                        vec![SubSpec::default()]
                    } else {
                        Vec::new()
                    };
                    let s = spec(Job::Sync, v, kind, &url, &ns, n, subs);
                    let report = run_once(&s, CHILD_TIMEOUT)?;
                    tracing::info!(n, ?kind, variant = %v.label(), sync_ms = %report["sync_ms"], "synced");
                    results
                        .entry((n, format!("{kind:?}"), v.label()))
                        .or_default()
                        .push(report);
                }
                let s = spec(
                    Job::Decode,
                    Variant::KUBE_RUNTIME,
                    kind,
                    &url,
                    &ns,
                    n,
                    Vec::new(),
                );
                let report = run_once(&s, CHILD_TIMEOUT)?;
                decode
                    .entry((n, format!("{kind:?}")))
                    .or_default()
                    .push(report);
            }
        }
    }
    // A variant not run (`--only`) has no figures: NaN, so no bar judges it.
    let summary = |key: &(usize, String, String), path: &[&str]| {
        let s = Summary::of(results.get(key).into_iter().flatten().map(|r| num(r, path)));
        if s.n == 0 {
            Summary {
                median: f64::NAN,
                ..s
            }
        } else {
            s
        }
    };
    let mut table = Table::new(
        "",
        &[
            "Objects",
            "Kind",
            "Informer",
            "Time to synced (ms)",
            "Sync objects/s",
            "Sync / decode-only",
            "Peak heap (MiB)",
            "Steady bytes/object",
            "Peak RSS (MiB)",
            "CPU to synced (ms)",
        ],
    );
    let mut ratios = Table::new(
        "Ratios kinformer / kube-runtime (medians; bars: time ≤ 0.7×, peak heap ≤ 0.8×, steady bytes/object ≤ 0.8×):",
        &[
            "Objects",
            "Kind",
            "kinformer vs",
            "Time to synced",
            "Peak heap",
            "Steady bytes/object",
        ],
    );
    let mut decode_table = Table::new(
        "Decode-only throughput of the same pages:",
        &[
            "Objects",
            "Kind",
            "Bytes",
            "Decode-only objects/s",
            "MB/s",
            "Fetch-only objects/s (kube-client sequential fetch, items not decoded)",
        ],
    );
    let (mut time_ok, mut peak_ok, mut steady_ok, mut tput_ok) = (true, true, true, true);
    let (mut time_d, mut peak_d, mut steady_d, mut tput_d) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &n in &scale.sync_sizes {
        for &kind in &scale.sync_kinds {
            let k = format!("{kind:?}");
            let dec = decode.get(&(n, k.clone())).cloned().unwrap_or_default();
            let dec_rate = Summary::of(dec.iter().map(|r| num(r, &["objects_per_s"])));
            decode_table.row(vec![
                n.to_string(),
                k.clone(),
                dec.first()
                    .map_or(String::new(), |r| r["bytes"].to_string()),
                fmt_summary(&dec_rate, 0),
                fmt_summary(&Summary::of(dec.iter().map(|r| num(r, &["mb_per_s"]))), 1),
                fmt_summary(
                    &Summary::of(dec.iter().map(|r| num(r, &["fetch_objects_per_s"]))),
                    0,
                ),
            ]);
            for v in variants(kind) {
                let key = (n, k.clone(), v.label());
                if !results.contains_key(&key) {
                    continue;
                }
                let time = summary(&key, &["sync_ms"]);
                let tput = Summary::of(
                    results
                        .get(&key)
                        .into_iter()
                        .flatten()
                        .map(|r| n as f64 / (num(r, &["sync_ms"]) / 1000.0)),
                );
                let peak = summary(&key, &["peak_heap"]);
                let steady = summary(&key, &["steady_bytes_per_object"]);
                let hwm = summary(&key, &["rss", "hwm"]);
                let cpu = summary(&key, &["sync_cpu_ms"]);
                let vs_decode = tput.median / dec_rate.median;
                table.row(vec![
                    n.to_string(),
                    k.clone(),
                    v.label(),
                    fmt_summary(&time, 0),
                    fmt_summary(&tput, 0),
                    format!("{vs_decode:.2}"),
                    fmt_summary(
                        &Summary {
                            median: mib(peak.median),
                            min: mib(peak.min),
                            max: mib(peak.max),
                            n: peak.n,
                        },
                        1,
                    ),
                    fmt_summary(&steady, 0),
                    format!("{:.1}", mib(hwm.median)),
                    fmt_summary(&cpu, 0),
                ]);
                if v == Variant::KINFORMER {
                    tput_ok &= vs_decode >= 0.7;
                    tput_d.push(format!("{n} {k}: {vs_decode:.2}"));
                }
            }
            let pairs = [
                (Variant::KINFORMER, Variant::KUBE_RUNTIME, true),
                (
                    Variant::KINFORMER.streaming(),
                    Variant::KUBE_RUNTIME.streaming(),
                    true,
                ),
                (
                    Variant::KINFORMER.strip(Strip::AfterDecode),
                    Variant::KUBE_RUNTIME.strip(Strip::AfterDecode),
                    true,
                ),
                // The opt-in the issue asks for: no managedFields in either store,
                // kinformer never allocating them, kube-runtime dropping them after decode.
                (
                    Variant::KINFORMER.strip(Strip::AtDecode),
                    Variant::KUBE_RUNTIME.strip(Strip::AfterDecode),
                    true,
                ),
                // Issue 26 (its own bars, below): metadata only against the same
                // content in kube-runtime, and against its full-object reflector.
                (METADATA_PAIRS[0].0, METADATA_PAIRS[0].1, false),
                (METADATA_PAIRS[1].0, METADATA_PAIRS[1].1, false),
                (METADATA_VARIANTS[4], METADATA_VARIANTS[1], false),
                (METADATA_PAIRS[0].0, Variant::KUBE_RUNTIME, false),
                (METADATA_PAIRS[1].0, Variant::KUBE_RUNTIME, false),
                (METADATA_VARIANTS[4], Variant::KUBE_RUNTIME, false),
            ];
            for (a, b, for_bar) in pairs {
                let (ka, kb) = ((n, k.clone(), a.label()), (n, k.clone(), b.label()));
                if !results.contains_key(&ka) || !results.contains_key(&kb) {
                    continue;
                }
                let t = (
                    summary(&ka, &["sync_ms"]).median,
                    summary(&kb, &["sync_ms"]).median,
                );
                let p = (
                    summary(&ka, &["peak_heap"]).median,
                    summary(&kb, &["peak_heap"]).median,
                );
                let s = (
                    summary(&ka, &["steady_bytes_per_object"]).median,
                    summary(&kb, &["steady_bytes_per_object"]).median,
                );
                ratios.row(vec![
                    n.to_string(),
                    k.clone(),
                    format!("{} vs {}", a.label(), b.label()),
                    ratio(t.0, t.1),
                    ratio(p.0, p.1),
                    ratio(s.0, s.1),
                ]);
                if for_bar {
                    time_ok &= t.0 <= 0.7 * t.1;
                    peak_ok &= p.0 <= 0.8 * p.1;
                    steady_ok &= s.0 <= 0.8 * s.1;
                    let tag = format!(
                        "{n} {k}{}{}",
                        if a.streaming { " streaming" } else { "" },
                        match a.strip {
                            Strip::None => "",
                            Strip::AfterDecode => " (drop managedFields)",
                            Strip::AtDecode => " (skip managedFields at decode)",
                        }
                    );
                    time_d.push(format!("{tag}: {}", ratio(t.0, t.1)));
                    peak_d.push(format!("{tag}: {}", ratio(p.0, p.1)));
                    steady_d.push(format!("{tag}: {}", ratio(s.0, s.1)));
                }
            }
        }
    }
    let mut metadata_bars = Metadata::default();
    for &n in &scale.sync_sizes {
        for &kind in &scale.sync_kinds {
            metadata_bars.judge(n, kind, |key, path| {
                summary(&(key.0, format!("{kind:?}"), key.1.label()), path).median
            });
        }
    }
    let mut compact_bars = Compact::default();
    let mut reads = Table::new(
        "Compact cache (issue 26): reads after the sync, and what the cache holds (medians over the repetitions):",
        &[
            "Objects",
            "Kind",
            "Informer",
            "get p50 (µs)",
            "get p99 (µs)",
            "by_index of 1000 (ms)",
            "Compact bytes/object",
            "Sync objects/s vs indexed decoded",
        ],
    );
    for &n in &scale.sync_sizes {
        for &kind in &scale.sync_kinds {
            let k = format!("{kind:?}");
            let median =
                |v: Variant, path: &[&str]| summary(&(n, k.clone(), v.label()), path).median;
            compact_bars.judge(n, kind, median);
            for v in [Variant::KINFORMER.indexed(), Variant::KINFORMER.compact()] {
                let m = |path: &[&str]| median(v, path);
                if m(&["sync_ms"]).is_nan() {
                    continue;
                }
                let vs = median(Variant::KINFORMER.indexed(), &["sync_ms"]) / m(&["sync_ms"]);
                reads.row(vec![
                    n.to_string(),
                    k.clone(),
                    v.label(),
                    format!("{:.1}", m(&["reads", "get_us_p50"])),
                    format!("{:.1}", m(&["reads", "get_us_p99"])),
                    format!("{:.2}", m(&["reads", "by_index_ms_p50"])),
                    format!("{:.0}", m(&["reads", "compact", "bytes"]) / n as f64),
                    format!("{vs:.2}"),
                ]);
            }
        }
    }
    section.tables = vec![table, ratios, reads, decode_table];
    section.bars = vec![
        Bar::compared("time to synced ≤ 0.7× kube-runtime", time_ok, &time_d),
        Bar::compared("peak heap ≤ 0.8× kube-runtime", peak_ok, &peak_d),
        Bar::compared(
            "steady bytes per cached object ≤ 0.8× kube-runtime",
            steady_ok,
            &steady_d,
        ),
        Bar::compared(
            "sync throughput ≥ 0.7 × decode-only throughput",
            tput_ok,
            &tput_d,
        ),
    ];
    section.bars.extend(metadata_bars.bars());
    section.bars.extend(compact_bars.bars());
    section.raw = results
        .into_iter()
        .map(|((n, k, v), r)| serde_json::json!({"objects": n, "kind": k, "variant": v, "runs": r}))
        .chain(
            decode
                .into_iter()
                .map(|((n, k), r)| serde_json::json!({"objects": n, "kind": k, "decode": r})),
        )
        .collect();
    server.shutdown();
    Ok(section)
}

/// Issue 26's bars on the compact cache: against kube-runtime's
/// full-object reflector (steady heap ≤ 0.1×, peak ≤ 0.2×, time ≤ 1.0×),
/// and its sync rate against the decoded cache with the same index (≥ 1/1.2).
#[derive(Default)]
struct Compact {
    steady: (bool, Vec<String>),
    peak: (bool, Vec<String>),
    time: (bool, Vec<String>),
    rate: (bool, Vec<String>),
}

impl Compact {
    fn judge(&mut self, n: usize, kind: Kind, median: impl Fn(Variant, &[&str]) -> f64) {
        let (c, krt, dec) = (
            Variant::KINFORMER.compact(),
            Variant::KUBE_RUNTIME,
            Variant::KINFORMER.indexed(),
        );
        let tag = format!("{n} {kind:?}");
        let record = |bar: &mut (bool, Vec<String>), path: &[&str], vs: Variant, limit: f64| {
            let (a, b) = (median(c, path), median(vs, path));
            if a.is_nan() || b.is_nan() {
                return;
            }
            bar.1
                .push(format!("{tag} vs {}: {}", vs.label(), ratio(a, b)));
            bar.0 |= a > limit * b;
        };
        record(&mut self.steady, &["steady_bytes_per_object"], krt, 0.1);
        record(&mut self.peak, &["peak_heap"], krt, 0.2);
        record(&mut self.time, &["sync_ms"], krt, 1.0);
        record(&mut self.rate, &["sync_ms"], dec, 1.2);
    }

    fn bars(self) -> Vec<Bar> {
        let bar = |name: &str, (missed, details): (bool, Vec<String>)| {
            Bar::compared(name, !missed, &details)
        };
        vec![
            bar(
                "compact cache (issue 26): steady heap ≤ 0.1× kube-runtime's",
                self.steady,
            ),
            bar(
                "compact cache (issue 26): peak heap during sync ≤ 0.2× kube-runtime's",
                self.peak,
            ),
            bar(
                "compact cache (issue 26): time to synced ≤ 1.0× kube-runtime's",
                self.time,
            ),
            bar(
                "compact cache (issue 26): sync time within 1.2× of the decoded cache's (same index)",
                self.rate,
            ),
        ]
    }
}

/// Issue 26's bars on the metadata-only variants: for each, whether a
/// comparison missed it, and the figures.
#[derive(Default)]
struct Metadata {
    vs_full: (bool, Vec<String>),
    vs_meta: (bool, Vec<String>),
    time: (bool, Vec<String>),
}

impl Metadata {
    /// Judges the metadata-only pairs of one size and kind; `median(key,
    /// path)` is a figure's median (NaN when not measured).
    fn judge(&mut self, n: usize, kind: Kind, median: impl Fn((usize, Variant), &[&str]) -> f64) {
        const STEADY: &[&str] = &["steady_bytes_per_object"];
        const TIME: &[&str] = &["sync_ms"];
        let full = median((n, Variant::KUBE_RUNTIME), STEADY);
        for (kin, krt) in METADATA_PAIRS {
            let (steady, krt_steady) = (median((n, kin), STEADY), median((n, krt), STEADY));
            let (t, krt_t) = (median((n, kin), TIME), median((n, krt), TIME));
            if steady.is_nan() || krt_steady.is_nan() {
                continue;
            }
            let tag = format!("{n} {kind:?} {}", kin.label());
            let record = |bar: &mut (bool, Vec<String>), a: f64, b: f64, limit: f64, vs: &str| {
                bar.1.push(format!("{tag} vs {vs}: {}", ratio(a, b)));
                bar.0 |= a > limit * b;
            };
            if !full.is_nan() {
                record(
                    &mut self.vs_full,
                    steady,
                    full,
                    0.15,
                    &Variant::KUBE_RUNTIME.label(),
                );
            }
            record(&mut self.vs_meta, steady, krt_steady, 1.0, &krt.label());
            record(&mut self.time, t, krt_t, 0.7, &krt.label());
        }
    }

    fn bars(self) -> Vec<Bar> {
        let bar = |name: &str, (missed, details): (bool, Vec<String>)| {
            Bar::compared(name, !missed, &details)
        };
        vec![
            bar(
                "metadata only (issue 26): steady bytes per object ≤ 0.15× kube-runtime's full-object reflector",
                self.vs_full,
            ),
            bar(
                "metadata only (issue 26): steady bytes per object ≤ 1.0× kube-runtime's metadata watcher, same content",
                self.vs_meta,
            ),
            bar(
                "metadata only (issue 26): time to synced ≤ 0.7× kube-runtime's metadata watcher",
                self.time,
            ),
        ]
    }
}
