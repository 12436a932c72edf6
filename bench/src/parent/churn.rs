//! Workload 2: steady churn at a fixed rate, and the maximum sustainable rate,
//! with 1, 10 and 100 subscribers.

use std::collections::BTreeMap;
use std::time::Duration;

use kinformer_apiserver::ServerHandle;
use serde_json::{Value, json};

use super::child::ChildProc;
use super::writer::Writer;
use super::{CHILD_TIMEOUT, Scale, alternate, seed_churn_of, server, spec};
use crate::proto::{ChildSpec, Command, Job, SubSpec, Variant};
use crate::report::{Bar, Section, Table, fmt_summary, ratio};
use crate::stats::Summary;

const NS: &str = "churn";

/// A measurement at a steady write rate.
pub struct Paced {
    /// The informer.
    pub variant: Variant,
    /// Its subscribers.
    pub subscribers: Vec<SubSpec>,
    /// Objects in the watched namespace.
    pub objects: usize,
    /// Writes per second.
    pub rate: f64,
    /// How long the writer writes.
    pub duration: Duration,
    /// How long the child may take to deliver everything afterwards.
    pub drain_timeout: Duration,
    /// Run a control watch beside the informer (see [`ChildSpec::control_watch`]).
    pub control_watch: bool,
    /// kinformer only: persist its cache here (see [`ChildSpec::persist`]).
    pub persist: Option<String>,
}

/// One paced run: returns the child's report.
pub fn paced_run(
    server: &ServerHandle,
    namespace: &str,
    writer: &mut Writer,
    run: Paced,
) -> anyhow::Result<Value> {
    let Paced {
        variant,
        subscribers,
        objects,
        rate,
        duration,
        drain_timeout,
        control_watch,
        persist,
    } = run;
    let s = ChildSpec {
        control_watch,
        persist,
        ..spec(
            Job::Deliver,
            variant,
            writer.kind(),
            &server.url(),
            namespace,
            objects,
            subscribers,
        )
    };
    let mut child = ChildProc::spawn(&s)?;
    child.expect("ready", CHILD_TIMEOUT)?;
    child.send(&Command::Begin)?;
    child.expect("begun", Duration::from_secs(30))?;
    let written = writer.paced(rate, duration);
    child.send(&Command::End {
        stamped: written,
        timeout_ms: drain_timeout.as_millis() as u64,
    })?;
    let mut report = child.expect("report", drain_timeout + Duration::from_secs(60))?;
    child.finish(Duration::from_secs(30))?;
    report["written"] = json!(written);
    report["rate"] = json!(rate);
    Ok(report)
}

/// One drain run: the watch stalls while `count` updates are written, then
/// resumes; the child measures first-to-last delivery.
fn drain_run(
    server: &ServerHandle,
    writer: &mut Writer,
    variant: Variant,
    subscribers: usize,
    objects: usize,
    count: u64,
) -> anyhow::Result<Value> {
    let subs = vec![SubSpec::default(); subscribers];
    let s = ChildSpec {
        count_to: count,
        ..spec(
            Job::Deliver,
            variant,
            writer.kind(),
            &server.url(),
            NS,
            objects,
            subs,
        )
    };
    let mut child = ChildProc::spawn(&s)?;
    child.expect("ready", CHILD_TIMEOUT)?;
    child.send(&Command::Begin)?;
    child.expect("begun", Duration::from_secs(30))?;
    server.faults().stall_watches(true);
    let written = writer.burst(count);
    // The parent only serves the watch from here on: its CPU is the server's.
    let server_cpu0 = crate::mem::cpu_time();
    server.faults().stall_watches(false);
    child.send(&Command::End {
        stamped: written,
        timeout_ms: 600_000,
    })?;
    let mut report = child.expect("report", Duration::from_secs(700))?;
    let server_cpu = crate::mem::cpu_time().saturating_sub(server_cpu0);
    report["server_cpu_us_per_event"] =
        json!(server_cpu.as_secs_f64() * 1e6 / written.max(1) as f64);
    child.finish(Duration::from_secs(30))?;
    let secs = report["first_to_last_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    // A drain in which some subscriber missed an update has no rate.
    let complete = report["complete"] == true;
    report["drain_events_per_s"] = if complete && secs > 0.0 {
        json!(written as f64 / secs)
    } else {
        Value::Null
    };
    Ok(report)
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// Runs the workload.
pub fn run(scale: &Scale) -> anyhow::Result<Section> {
    let server = server()?;
    let templates = seed_churn_of(&server, scale.churn_kind, NS, scale.churn_objects)?;
    let mut writer = Writer::new(server.clone(), NS, templates);
    let variants = [
        Variant::KINFORMER,
        Variant::KINFORMER.pipelined(),
        Variant::KINFORMER.batched(),
        Variant::KUBE_RUNTIME,
        // One event per call of a function the listener calls in place.
        Variant::KINFORMER.inline(),
        // Issue 24: subscribers spread over cores as kube-runtime's are
        // (streams read by tasks of a 2-worker tokio runtime).
        Variant::KINFORMER.tokio_streams(),
        Variant::KINFORMER.batched().tokio_streams(),
        // Closures (`subscribe_fn`) read a feed on the same runtime.
        Variant::KINFORMER.closures(),
        // Actors reading streams in their own context: on the informer's
        // thread, and spread over 2 arbiters.
        Variant::KINFORMER.stream_actors(0),
        Variant::KINFORMER.batched().stream_actors(0),
        Variant::KINFORMER.stream_actors(2),
        Variant::KINFORMER.batched().stream_actors(2),
        // Decoding on a second core (`reflector_thread`).
        Variant::KINFORMER.reflector_thread(),
        Variant::KINFORMER.batched().reflector_thread(),
        // Issue 26: delivery from a compact cache (each update encodes the
        // new state; the old one is decoded only if a subscriber reads it).
        Variant::KINFORMER.compact(),
        Variant::KINFORMER.batched().compact(),
        // Every update's old state compressed (none kept decoded).
        Variant::KINFORMER.compact_recent(0),
        Variant::KINFORMER.batched().compact_recent(0),
    ];
    let mut paced: BTreeMap<(usize, String), Vec<Value>> = BTreeMap::new();
    let mut drain: BTreeMap<(usize, String), Vec<Value>> = BTreeMap::new();
    for &subs in &scale.churn_subscribers {
        for rep in 0..scale.reps {
            for v in alternate(&variants, rep)
                .into_iter()
                .filter(|v| scale.runs(v))
            {
                let r = paced_run(
                    &server,
                    NS,
                    &mut writer,
                    Paced {
                        variant: v,
                        subscribers: vec![SubSpec::default(); subs],
                        objects: scale.churn_objects,
                        rate: scale.rate,
                        duration: Duration::from_secs_f64(scale.churn_secs),
                        drain_timeout: Duration::from_secs(120),
                        control_watch: true,
                        persist: None,
                    },
                )?;
                tracing::info!(subs, variant = %v.label(), p99 = %r["latency_all"]["p99_us"], "paced");
                paced.entry((subs, v.label())).or_default().push(r);
                let r = drain_run(
                    &server,
                    &mut writer,
                    v,
                    subs,
                    scale.churn_objects,
                    scale.drain_events,
                )?;
                tracing::info!(subs, variant = %v.label(), rate = %r["drain_events_per_s"], "drain");
                drain.entry((subs, v.label())).or_default().push(r);
            }
        }
    }
    let mut table = Table::new(
        &format!(
            "At {:.0} events/s for {:.0} s ({} ConfigMaps updated round-robin; latency over all subscribers):",
            scale.rate, scale.churn_secs, scale.churn_objects
        ),
        &[
            "Subscribers",
            "Informer",
            "p50 latency (µs)",
            "p99 latency (µs)",
            "p99.9 (µs)",
            "Control watch p99 (µs)",
            "CPU per event (µs)",
            "CPU per delivery (µs)",
            "Complete",
        ],
    );
    let mut max_table = Table::new(
        &format!(
            "Maximum sustainable rate: {} updates written while the watch is stalled, then drained; rate = updates / (last delivery − first delivery), counted only when every subscriber received every update (Complete: runs that did). This is the peak drain throughput of a backlog: the writer is idle while it is read. During a drain every subscriber of both informers only counts updates, reading the clock at its first and last one (a clock read, a parse and a histogram per delivery were a third of the CPU at 100 subscribers):",
            scale.drain_events
        ),
        &[
            "Subscribers",
            "Informer",
            "Events/s",
            "Deliveries/s",
            "CPU per event (µs)",
            "Informer cores",
            "Server CPU per event (µs)",
            "kinformer / kube-runtime",
            "Complete",
        ],
    );
    let (mut rate_ok, mut rate_d) = (true, Vec::new());
    let (mut compact_ok, mut compact_d) = (true, Vec::new());
    let mut p99_10 = None;
    for &subs in &scale.churn_subscribers {
        let drain_median = |v: Variant| {
            Summary::of(
                drain
                    .get(&(subs, v.label()))
                    .into_iter()
                    .flatten()
                    .map(|r| f(r, "drain_events_per_s")),
            )
            .median
        };
        let krt = drain_median(Variant::KUBE_RUNTIME);
        for v in variants {
            let key = (subs, v.label());
            let rs = paced.get(&key).cloned().unwrap_or_default();
            if rs.is_empty() && !drain.contains_key(&key) {
                continue; // not run (`--only`)
            }
            let p = |k: &str| {
                Summary::of(
                    rs.iter()
                        .map(|r| r["latency_all"][k].as_f64().unwrap_or(f64::NAN)),
                )
            };
            let p99 = p("p99_us");
            let control_p99 = Summary::of(rs.iter().map(|r| {
                r["control"]["latency_all"]["p99_us"]
                    .as_f64()
                    .unwrap_or(f64::NAN)
            }));
            if subs == 10 && v == Variant::KINFORMER {
                p99_10 = Some((p99.median, control_p99.median));
            }
            table.row(vec![
                subs.to_string(),
                v.label(),
                fmt_summary(&p("p50_us"), 0),
                fmt_summary(&p99, 0),
                fmt_summary(&p("p999_us"), 0),
                fmt_summary(&control_p99, 0),
                fmt_summary(&Summary::of(rs.iter().map(|r| f(r, "cpu_us_per_event"))), 1),
                fmt_summary(
                    &Summary::of(rs.iter().map(|r| f(r, "cpu_us_per_delivery"))),
                    2,
                ),
                rs.iter().all(|r| r["complete"] == true).to_string(),
            ]);
            let ds = drain.get(&key).cloned().unwrap_or_default();
            let rate = Summary::of(ds.iter().map(|r| f(r, "drain_events_per_s")));
            let kinformer = v.lib == crate::proto::Lib::Kinformer;
            max_table.row(vec![
                subs.to_string(),
                v.label(),
                fmt_summary(&rate, 0),
                format!("{:.0}", rate.median * subs as f64),
                fmt_summary(&Summary::of(ds.iter().map(|r| f(r, "cpu_us_per_event"))), 1),
                // CPU per event × events per second: the cores the informer kept busy.
                fmt_summary(
                    &Summary::of(
                        ds.iter()
                            .map(|r| f(r, "cpu_us_per_event") * f(r, "drain_events_per_s") / 1e6),
                    ),
                    2,
                ),
                fmt_summary(
                    &Summary::of(ds.iter().map(|r| f(r, "server_cpu_us_per_event"))),
                    1,
                ),
                if kinformer {
                    ratio(rate.median, krt)
                } else {
                    String::new()
                },
                format!(
                    "{} of {}",
                    ds.iter().filter(|r| r["complete"] == true).count(),
                    ds.len()
                ),
            ]);
            // NaN (no complete kube-runtime drain) is not a rate to compare with.
            let krt_known = krt.is_finite() && krt > 0.0;
            if v.compact {
                // Issue 26's bar: against the decoded cache, same delivery.
                let decoded = drain_median(Variant {
                    compact: false,
                    compact_recent: None,
                    indexed: false,
                    ..v
                });
                if !ds.is_empty() && decoded.is_finite() {
                    // The bar is the default's; a non-default window is reported.
                    let judged = v.compact_recent.is_none();
                    compact_ok &= !judged || rate.median * 1.2 >= decoded;
                    compact_d.push(format!(
                        "{subs} subscribers, {}: {} of the decoded cache's{}",
                        v.label(),
                        ratio(rate.median, decoded),
                        if judged {
                            ""
                        } else {
                            " (reported, not judged)"
                        }
                    ));
                }
            } else if kinformer && !ds.is_empty() && !krt_known {
                rate_ok = false;
                rate_d.push(format!(
                    "{subs} subscribers, {}: no complete kube-runtime drain to compare with",
                    v.label()
                ));
            } else if kinformer && !ds.is_empty() {
                rate_ok &= rate.median >= 2.0 * krt;
                rate_d.push(format!(
                    "{subs} subscribers, {}: {}",
                    v.label(),
                    ratio(rate.median, krt)
                ));
            }
        }
    }
    let p99_bar = match p99_10 {
        Some((p, control)) => Bar {
            bar: format!(
                "p99 write-to-delivery < 1 ms at {:.0} events/s with 10 subscribers",
                scale.rate
            ),
            met: Some(p < 1000.0),
            detail: format!(
                "kinformer p99 = {p:.0} µs; the control watch (a bare kube watch in the same process) {control:.0} µs"
            ),
        },
        None => Bar {
            bar: "p99 write-to-delivery < 1 ms at 1k events/s with 10 subscribers".into(),
            met: None,
            detail: "not run at this scale".into(),
        },
    };
    Ok(Section {
        workload: "churn".into(),
        title: "Workload 2: steady churn and maximum sustainable rate".into(),
        issue: 6,
        method: vec![
            "The parent updates ConfigMaps in-process on the embedded server, each update carrying its wall-clock write time in an \
             annotation; every subscriber computes write-to-delivery latency when it handles the update (same machine, same clock). \
             kinformer: `Informer` with N actix subscriber actors (`Block`, capacity 1024) on one actix system. kube-runtime: \
             `reflector::store_shared(1024)` + N `subscribe()` handles, each polled by its own task on a 2-worker tokio runtime; \
             the reflector stream is driven by a task. CPU per event: the child's utime+stime (from /proc/self/stat) over the \
             measurement divided by the updates written (per delivery: divided by updates × subscribers). The API server and writer \
             run in the parent and share the 2 cores with the child. Control watch: in every paced run, beside the informer \
             under test and in its process, a bare kube watch on a thread of its own records the same write-to-receipt \
             latencies; its p99 is what the server, loopback HTTP, one decode and the OS scheduler cost without any informer, \
             the floor under both informers' figures in that run. It counts in the child's CPU (one more decode per event)."
                .into(),
        ],
        tables: vec![table, max_table],
        bars: vec![
            Bar::compared(
                "maximum sustainable rate ≥ 2× kube-runtime's shared store, same subscribers",
                rate_ok,
                &rate_d,
            ),
            p99_bar,
            Bar::compared(
                "compact cache (issue 26): maximum rate within 1.2× of the decoded cache's, same delivery",
                compact_ok,
                &compact_d,
            ),
        ],
        raw: paced
            .into_iter()
            .map(|((s, v), r)| json!({"subscribers": s, "variant": v, "paced": r}))
            .chain(drain.into_iter().map(|((s, v), r)| json!({"subscribers": s, "variant": v, "drain": strip_samples(r)})))
            .collect(),
    })
}

/// Drops the time series from reports kept as raw data.
pub fn strip_samples(mut reports: Vec<Value>) -> Vec<Value> {
    for r in &mut reports {
        if let Some(o) = r.as_object_mut() {
            o.remove("samples");
        }
    }
    reports
}
