//! Workload 7: restart (issue 25). An informer's process restarts over N
//! objects. kinformer with a snapshot (`persist`): (a) inside the server's
//! history window, (b) after 1 % of the objects changed and the history was
//! compacted (its watch from the snapshot gets 410); (c) kinformer without
//! persistence; and kube-runtime's restart, a full relist. Each start is a
//! child process of its own, timed from the process's start.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kinformer_apiserver::ServerHandle;
use serde_json::{Value, json};

use super::child::run_once;
use super::churn::{Paced, paced_run};
use super::writer::Writer;
use super::{CHILD_TIMEOUT, Scale, alternate, seed, seed_churn, server, spec};
use crate::objects::{now_nanos, seed_name};
use crate::proto::{CONFIRM_WAIT, ChildSpec, Job, Kind, SubSpec, Variant};
use crate::report::{Bar, Section, Table, fmt_summary, ratio};
use crate::stats::Summary;

/// One object in this many is changed before a restart after compaction (1 %).
const CHANGE_EVERY: usize = 100;

/// The starts measured, in the order of a repetition's table rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Start {
    /// The first start with persistence: lists and writes the snapshot.
    First,
    /// (a) From the snapshot, inside the history window.
    Resume,
    /// (b) From the snapshot, after 1 % changed and the history was compacted.
    Relist,
    /// (c) kinformer without persistence.
    Cold,
    /// kube-runtime: every restart lists.
    KubeRuntime,
}

impl Start {
    fn label(self) -> &'static str {
        match self {
            Start::First => "kinformer, first start (writes the snapshot)",
            Start::Resume => "(a) kinformer, snapshot, inside the history window",
            Start::Relist => "(b) kinformer, snapshot, 1 % changed, history compacted",
            Start::Cold => "(c) kinformer, no persistence",
            Start::KubeRuntime => "kube-runtime (a full relist)",
        }
    }
}

/// Changes one object in [`CHANGE_EVERY`] (an annotation), then compacts
/// the history; answers how many changed.
fn change_and_compact(
    server: &ServerHandle,
    kind: Kind,
    ns: &str,
    n: usize,
) -> anyhow::Result<u64> {
    let stamp = now_nanos().to_string();
    let mut changed = 0;
    for i in (0..n).step_by(CHANGE_EVERY) {
        let mut obj = server.get("", kind.plural(), Some(ns), &seed_name(i))?;
        obj["metadata"]["annotations"]["kinformer.bench/restart"] = Value::String(stamp.clone());
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        server.update("", kind.plural(), Some(ns), obj)?;
        changed += 1;
    }
    server.faults().compact();
    Ok(changed)
}

/// One start: its child's report, with the list requests the server
/// answered meanwhile.
fn start(server: &ServerHandle, s: &ChildSpec) -> anyhow::Result<Value> {
    let mark = server.requests().mark();
    let mut report = run_once(s, CHILD_TIMEOUT)?;
    let lists = server
        .requests()
        .since(mark)
        .iter()
        .filter(|r| r.verb == "list")
        .count();
    report["list_requests"] = json!(lists);
    Ok(report)
}

/// Runs the workload.
pub fn run(scale: &Scale) -> anyhow::Result<Section> {
    let server = server()?;
    let url = server.url();
    let mut results: BTreeMap<(Kind, usize, Start), Vec<Value>> = BTreeMap::new();
    let mut changed_by: BTreeMap<(Kind, usize), u64> = BTreeMap::new();
    for &(kind, n) in &scale.restart_sizes {
        let ns = format!("restart-{}-{n}", kind.plural());
        seed(&server, kind, &ns, n)?;
        let dir: PathBuf = std::env::temp_dir().join(format!(
            "kinformer-bench-restart-{}-{ns}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let kin = |persist: bool| ChildSpec {
            persist: persist.then(|| dir.display().to_string()),
            ..spec(
                Job::Sync,
                Variant::KINFORMER,
                kind,
                &url,
                &ns,
                n,
                vec![SubSpec::default()],
            )
        };
        let krt = spec(
            Job::Sync,
            Variant::KUBE_RUNTIME,
            kind,
            &url,
            &ns,
            n,
            Vec::new(),
        );
        let first = start(&server, &kin(true))?;
        results
            .entry((kind, n, Start::First))
            .or_default()
            .push(first);
        for rep in 0..scale.reps {
            let resumed = start(&server, &kin(true))?;
            results
                .entry((kind, n, Start::Resume))
                .or_default()
                .push(resumed);
            let changed = change_and_compact(&server, kind, &ns, n)?;
            changed_by.insert((kind, n), changed);
            let mut relisted = start(&server, &kin(true))?;
            relisted["changed"] = json!(changed);
            results
                .entry((kind, n, Start::Relist))
                .or_default()
                .push(relisted);
            for (which, s) in alternate(
                &[(Start::Cold, kin(false)), (Start::KubeRuntime, krt.clone())],
                rep,
            ) {
                let r = start(&server, &s)?;
                tracing::info!(?kind, n, ?which, ms = %r["start_to_synced_ms"], "restarted");
                results.entry((kind, n, which)).or_default().push(r);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    let steady = steady_churn(&server, scale)?;
    Ok(section(scale, &results, &changed_by, &steady))
}

/// The namespace of the steady churn with persistence.
const STEADY_NS: &str = "restart-steady";

/// Steady state: a persisting kinformer (one subscriber) while the churn
/// ConfigMaps are updated round-robin at the scale's rate: its writer's
/// counters over the writing, one report per repetition.
fn steady_churn(server: &ServerHandle, scale: &Scale) -> anyhow::Result<Vec<Value>> {
    let templates = seed_churn(server, STEADY_NS, scale.churn_objects)?;
    let mut writer = Writer::new(server.clone(), STEADY_NS, templates);
    let dir = std::env::temp_dir().join(format!(
        "kinformer-bench-restart-{}-{STEADY_NS}",
        std::process::id()
    ));
    let mut runs = Vec::new();
    for _ in 0..scale.reps {
        let _ = std::fs::remove_dir_all(&dir);
        let r = paced_run(
            server,
            STEADY_NS,
            &mut writer,
            Paced {
                variant: Variant::KINFORMER,
                subscribers: vec![SubSpec::default()],
                objects: scale.churn_objects,
                rate: scale.rate,
                duration: std::time::Duration::from_secs_f64(scale.churn_secs),
                drain_timeout: std::time::Duration::from_secs(120),
                control_watch: false,
                persist: Some(dir.display().to_string()),
            },
        )?;
        runs.push(r);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(runs)
}

fn section(
    scale: &Scale,
    results: &BTreeMap<(Kind, usize, Start), Vec<Value>>,
    changed_by: &BTreeMap<(Kind, usize), u64>,
    steady: &[Value],
) -> Section {
    let mut tables = Vec::new();
    let mut bars = Vec::new();
    for &(kind, n) in &scale.restart_sizes {
        let runs = |which: Start| results.get(&(kind, n, which)).cloned().unwrap_or_default();
        let s = |rs: &[Value], path: &[&str]| {
            Summary::of(rs.iter().map(|r| {
                path.iter()
                    .fold(r, |v, p| &v[*p])
                    .as_f64()
                    .unwrap_or(f64::NAN)
            }))
        };
        let krt_ms = s(&runs(Start::KubeRuntime), &["start_to_synced_ms"]).median;
        let mut table = Table::new(
            &format!("{n} {kind:?}s: each start a process of its own, timed from its start."),
            &[
                "Start",
                "Path",
                "Start to synced (ms)",
                "vs kube-runtime",
                "Start to confirmed (ms)",
                "List requests",
                "Notified beyond the initial adds",
                "Snapshot on disk (bytes per object)",
                "Writer: bytes stored per object written",
                "Writer: µs per object written",
            ],
        );
        for which in [
            Start::First,
            Start::Resume,
            Start::Relist,
            Start::Cold,
            Start::KubeRuntime,
        ] {
            let rs = runs(which);
            if rs.is_empty() {
                continue;
            }
            let synced = s(&rs, &["start_to_synced_ms"]);
            let warm = |k: &str| s(&rs, &["warm", k]);
            let persisted = !rs[0]["warm"].is_null();
            let path = rs
                .iter()
                .map(|r| r["warm"]["warm_start"].as_str().unwrap_or("—").to_owned())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ");
            let per_object = |total: f64, objects: f64| {
                if objects > 0.0 {
                    format!("{:.0}", total / objects)
                } else {
                    "—".into()
                }
            };
            let notified = warm("notified_relisted").median
                + warm("notified_watch").median
                + warm("notified_deleted").median;
            table.row(vec![
                which.label().into(),
                path,
                fmt_summary(&synced, 0),
                ratio(synced.median, krt_ms),
                match (persisted, warm("confirmed_ms").n) {
                    (false, _) => fmt_summary(&synced, 0),
                    (true, 0) => format!("not within {CONFIRM_WAIT:?}"),
                    (true, _) => fmt_summary(&warm("confirmed_ms"), 0),
                },
                fmt_summary(&s(&rs, &["list_requests"]), 0),
                if persisted {
                    format!("{notified:.0}")
                } else {
                    "—".into()
                },
                if persisted {
                    per_object(warm("file_bytes").median, n as f64)
                } else {
                    "—".into()
                },
                if persisted && warm("objects_written").median > 0.0 {
                    let objects = warm("objects_written").median;
                    format!(
                        "{} ({} of JSON)",
                        per_object(warm("bytes_written").median, objects),
                        per_object(warm("json_bytes_written").median, objects)
                    )
                } else {
                    "—".into()
                },
                if persisted {
                    per_object(warm("write_micros").median, warm("objects_written").median)
                } else {
                    "—".into()
                },
            ]);
        }
        tables.push(table);
        let resume = runs(Start::Resume);
        let resume_ms = s(&resume, &["start_to_synced_ms"]).median;
        bars.push(Bar {
            bar: format!(
                "(a) {n} {kind:?}s: synced ≤ 0.3× kube-runtime's restart, no list request"
            ),
            met: Some(
                resume_ms <= 0.3 * krt_ms && resume.iter().all(|r| r["list_requests"] == json!(0)),
            ),
            detail: format!(
                "{resume_ms:.0} ms against {krt_ms:.0} ms = {}; list requests {}",
                ratio(resume_ms, krt_ms),
                fmt_summary(&s(&resume, &["list_requests"]), 0)
            ),
        });
        let relist = runs(Start::Relist);
        let changed = changed_by.get(&(kind, n)).copied().unwrap_or(0) as f64;
        let notified: Vec<f64> = relist
            .iter()
            .map(|r| {
                ["notified_relisted", "notified_watch", "notified_deleted"]
                    .iter()
                    .map(|k| r["warm"][k].as_f64().unwrap_or(f64::NAN))
                    .sum()
            })
            .collect();
        bars.push(Bar {
            bar: format!("(b) {n} {kind:?}s: only the real changes notified after a 410"),
            met: Some(!notified.is_empty() && notified.iter().all(|x| *x == changed)),
            detail: format!("notified {notified:?} per run, {changed:.0} changed"),
        });
    }
    tables.push(steady_table(scale, steady));
    Section {
        workload: "restart".into(),
        title: "Workload 7: restart".into(),
        issue: 25,
        method: vec![
            "Each start is a child process against the embedded API server (in the parent) over loopback HTTP, paginated lists \
             (page size 500); kinformer has one subscriber. Start to synced: from the child's start until the informer and its \
             subscribers are synced (kinformer: `wait_for_sync` and the subscription's; from a snapshot that is once the \
             restored objects are cached and delivered, before the server confirmed them), kube-runtime: \
             `Store::wait_until_ready`. Start to confirmed: until the server confirmed the restored cache (the watch from the \
             snapshot's resourceVersion delivered an event or bookmark: resumed; or answered 410 and the relist's differences \
             were delivered: relisted) and the subscriber handled everything. The first start with persistence lists and \
             writes the snapshot; (a) starts again at once (the server's history still holds the snapshot's resourceVersion); \
             (b) starts after one object in 100 changed and the history was compacted; (c) and kube-runtime list. List requests: \
             counted by the server. Writer: bytes handed to the database (each object's JSON, compressed) and the JSON they \
             hold, and the writer's wall time, per object written, over the child's life. The children exit without closing \
             the file (as a crash would), so each start after the first opens a file left open (the writer's commits \
             keep redb's quick-repair state, so no page is checked). Steady state: a persisting kinformer \
             while the churn ConfigMaps are updated at the scale's rate; per write: the writer's commits and objects written (it \
             coalesces), the bytes it handed to the database, the bytes the process had written to storage (`write_bytes` of /proc/self/io), the writer thread's CPU (/proc/self/task), from \
             the start of the writing until the snapshot caught up after it."
                .into(),
            "Cells are medians with [min–max] over the repetitions; the order of (c) and kube-runtime alternates.".into(),
        ],
        tables,
        bars,
        raw: results
            .iter()
            .map(|((k, n, w), r)| json!({"kind": format!("{k:?}"), "objects": n, "start": format!("{w:?}"), "runs": r}))
            .collect(),
    }
}

/// The steady churn's writer figures: per write event (an update the server
/// made), what the writer did between the start and the end of the writing.
fn steady_table(scale: &Scale, steady: &[Value]) -> Table {
    let mut table = Table::new(
        &format!(
            "Steady state: {} ConfigMaps updated round-robin at {}/s for {} s, one persisting kinformer.",
            scale.churn_objects, scale.rate, scale.churn_secs
        ),
        &[
            "Writes",
            "Commits",
            "Objects written per write",
            "Bytes to the database per write",
            "Bytes to storage per write",
            "Write amplification (storage / objects' JSON)",
            "Writer CPU per write (µs)",
            "Writer CPU (% of a core)",
        ],
    );
    let delta = |r: &Value, k: &str| {
        r["persist_end"][k].as_f64().unwrap_or(f64::NAN)
            - r["persist_begin"][k].as_f64().unwrap_or(f64::NAN)
    };
    let per_write = |k: &str| {
        Summary::of(
            steady
                .iter()
                .map(|r| delta(r, k) / r["written"].as_f64().unwrap_or(f64::NAN)),
        )
    };
    // Storage bytes over the JSON of the objects written.
    let amplification = Summary::of(
        steady
            .iter()
            .map(|r| delta(r, "disk_write_bytes") / delta(r, "json_bytes_written")),
    );
    let busy =
        Summary::of(steady.iter().map(|r| {
            delta(r, "writer_cpu_ms") / r["elapsed_ms"].as_f64().unwrap_or(f64::NAN) * 100.0
        }));
    let cpu_per_write =
        Summary::of(steady.iter().map(|r| {
            delta(r, "writer_cpu_ms") * 1000.0 / r["written"].as_f64().unwrap_or(f64::NAN)
        }));
    table.row(vec![
        fmt_summary(
            &Summary::of(
                steady
                    .iter()
                    .map(|r| r["written"].as_f64().unwrap_or(f64::NAN)),
            ),
            0,
        ),
        fmt_summary(&Summary::of(steady.iter().map(|r| delta(r, "commits"))), 0),
        fmt_summary(&per_write("objects_written"), 2),
        fmt_summary(&per_write("bytes_written"), 0),
        fmt_summary(&per_write("disk_write_bytes"), 0),
        fmt_summary(&amplification, 1),
        fmt_summary(&cpu_per_write, 1),
        fmt_summary(&busy, 1),
    ]);
    table
}
