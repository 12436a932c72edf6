//! Workload 4: relist after a 410, with and without changes during the outage.

use std::collections::BTreeMap;
use std::time::Duration;

use kinformer_apiserver::ServerHandle;
use kinformer_apiserver::load::seed_configmap;
use serde_json::{Value, json};

use super::child::ChildProc;
use super::{CHILD_TIMEOUT, Scale, alternate, server, spec};
use crate::objects::seed_name;
use crate::proto::{Command, Job, Kind, SubSpec, Variant};
use crate::report::{Bar, Section, Table, fmt_summary, mib};
use crate::stats::Summary;

const NS: &str = "relist";

/// The outage: watches stall, objects change, history is compacted, watches close.
/// Returns (modified, deleted).
fn outage(server: &ServerHandle, n: usize, changes: bool) -> anyhow::Result<(u64, u64)> {
    let faults = server.faults();
    faults.stall_watches(true);
    // A write the informer does not watch: the resourceVersion moves on, so
    // after compaction even an informer that saw every change of its own
    // namespace holds a resourceVersion that is gone (a watch from it gets 410).
    let marker = serde_json::json!({"metadata": {"name": format!("outage-{}", crate::objects::now_nanos())}});
    server.create_namespace("elsewhere")?;
    server.create("", "configmaps", Some("elsewhere"), marker)?;
    let (mut modified, mut deleted) = (0, 0);
    // Unique per outage: the server (like Kubernetes) ignores updates that change nothing.
    let stamp = crate::objects::now_nanos();
    if changes {
        for i in (0..n).step_by(10) {
            let mut obj = server.get("", "configmaps", Some(NS), &seed_name(i))?;
            obj["data"]["alpha"] = Value::String(format!("changed during outage {stamp} ({i})"));
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            server.update("", "configmaps", Some(NS), obj)?;
            modified += 1;
        }
        for i in (1..n).step_by(100) {
            server.delete("", "configmaps", Some(NS), &seed_name(i))?;
            deleted += 1;
        }
    }
    faults.compact();
    faults.close_all_watches();
    faults.stall_watches(false);
    Ok((modified, deleted))
}

/// Puts deleted objects back so the next run starts from `n` objects.
fn restore(server: &ServerHandle, n: usize) -> anyhow::Result<()> {
    for i in (1..n).step_by(100) {
        if server
            .get("", "configmaps", Some(NS), &seed_name(i))
            .is_err()
        {
            server.create("", "configmaps", Some(NS), seed_configmap(i))?;
        }
    }
    Ok(())
}

fn one_run(
    server: &ServerHandle,
    variant: Variant,
    n: usize,
    changes: bool,
) -> anyhow::Result<Value> {
    let subs = if variant == Variant::KINFORMER {
        vec![SubSpec::default()]
    } else {
        Vec::new()
    };
    let s = spec(
        Job::Relist,
        variant,
        Kind::ConfigMap,
        &server.url(),
        NS,
        n,
        subs,
    );
    let mut child = ChildProc::spawn(&s)?;
    child.expect("ready", CHILD_TIMEOUT)?;
    child.send(&Command::Begin)?;
    child.expect("begun", Duration::from_secs(30))?;
    let (modified, deleted) = outage(server, n, changes)?;
    child.send(&Command::EndRelist {
        objects: n - deleted as usize,
        modified,
        deleted,
        timeout_ms: 120_000,
    })?;
    let mut report = child.expect("report", Duration::from_secs(200))?;
    child.finish(Duration::from_secs(30))?;
    restore(server, n)?;
    report["modified"] = json!(modified);
    report["deleted_on_server"] = json!(deleted);
    Ok(report)
}

/// Runs the workload.
pub fn run(scale: &Scale) -> anyhow::Result<Section> {
    let server = server()?;
    let n = scale.relist_objects;
    server.seed_configmaps(NS, n)?;
    let variants = [Variant::KINFORMER, Variant::KUBE_RUNTIME];
    let mut results: BTreeMap<(bool, String), Vec<Value>> = BTreeMap::new();
    for changes in [false, true] {
        for rep in 0..scale.reps {
            for v in alternate(&variants, rep) {
                let r = one_run(&server, v, n, changes)?;
                tracing::info!(changes, variant = %v.label(), ms = %r["resynced_ms"], "relisted");
                results.entry((changes, v.label())).or_default().push(r);
            }
        }
    }
    let mut table = Table::new(
        &format!("{n} ConfigMaps; changes: 10% modified and 1% deleted during the outage."),
        &[
            "Changes",
            "Informer",
            "Time to re-synced (ms)",
            "of which before the list began (ms)",
            "Memory spike (MiB)",
            "Steady store (MiB)",
            "Spike / steady",
            "Notifications: updates/adds",
            "deletes (tombstones)",
            "Complete",
        ],
    );
    let mut bars = Vec::new();
    for changes in [false, true] {
        for v in variants {
            let rs = results
                .get(&(changes, v.label()))
                .cloned()
                .unwrap_or_default();
            let s = |k: &str| Summary::of(rs.iter().map(|r| r[k].as_f64().unwrap_or(f64::NAN)));
            let spike = s("spike");
            let steady = s("steady_heap");
            let (updates, deletes, tombstones) = if v == Variant::KINFORMER {
                let sub = |k: &str| {
                    Summary::of(
                        rs.iter()
                            .map(|r| r["subscribers"][0][k].as_f64().unwrap_or(f64::NAN)),
                    )
                    .median
                };
                (
                    sub("relisted") + sub("other") + sub("stamped"),
                    sub("deleted"),
                    sub("tombstones"),
                )
            } else {
                let applies = Summary::of(rs.iter().map(|r| {
                    r["list_progress"].as_f64().unwrap_or(0.0)
                        - r["list_progress0"].as_f64().unwrap_or(0.0)
                }));
                (applies.median, 0.0, 0.0)
            };
            let spike_ratio = spike.median / steady.median;
            table.row(vec![
                if changes { "10% / 1%" } else { "none" }.into(),
                v.label(),
                fmt_summary(&s("resynced_ms"), 0),
                if s("list_started_ms").n == 0 {
                    "—".into()
                } else {
                    fmt_summary(&s("list_started_ms"), 0)
                },
                format!("{:.1}", mib(spike.median)),
                format!("{:.1}", mib(steady.median)),
                format!("{spike_ratio:.2}"),
                format!("{updates:.0}"),
                format!("{deletes:.0} ({tombstones:.0})"),
                rs.iter().all(|r| r["complete"] == true).to_string(),
            ]);
            if v == Variant::KINFORMER {
                let expected_updates = rs
                    .first()
                    .and_then(|r| r["modified"].as_f64())
                    .unwrap_or(0.0);
                let expected_deletes = rs
                    .first()
                    .and_then(|r| r["deleted_on_server"].as_f64())
                    .unwrap_or(0.0);
                bars.push(Bar {
                    bar: format!(
                        "relist memory spike ≤ 0.5× the steady store ({} changes)",
                        if changes { "with" } else { "no" }
                    ),
                    met: Some(spike_ratio <= 0.5),
                    detail: format!(
                        "spike {:.1} MiB over a {:.1} MiB store = {spike_ratio:.2}×",
                        mib(spike.median),
                        mib(steady.median)
                    ),
                });
                bars.push(Bar {
                    bar: format!(
                        "only real changes and tombstones are notified ({} changes)",
                        if changes { "with" } else { "no" }
                    ),
                    met: Some(updates == expected_updates && deletes == expected_deletes && tombstones == expected_deletes),
                    detail: format!(
                        "{updates:.0} updates (expected {expected_updates:.0}), {deletes:.0} deletes of which {tombstones:.0} tombstones (expected {expected_deletes:.0})"
                    ),
                });
            }
        }
    }
    Ok(Section {
        workload: "relist".into(),
        title: "Workload 4: relist after 410".into(),
        issue: 6,
        method: vec![
            "After the initial sync the parent stalls every watch, changes objects (or not), compacts the server's history and \
             closes the watches: the informer's next watch gets a 410 (an ERROR event) and relists. Time to re-synced runs from the \
             end of the outage until the cache holds the server's objects and (kinformer) the subscriber has received every \
             change; both libraries wait a jittered backoff (about 0.8 s) before relisting, shown separately. Memory spike: peak \
             live heap during the relist minus the live heap before it; steady store: live heap after the initial sync minus the \
             baseline. Notifications: what the subscriber received (kinformer), or what the reflector stream yielded \
             (kube-runtime: every object is yielded again as `InitApply`; deletes are not yielded)."
                .into(),
        ],
        tables: vec![table],
        bars,
        raw: results
            .into_iter()
            .map(|((c, v), r)| json!({"changes": c, "variant": v, "runs": r}))
            .collect(),
    })
}
