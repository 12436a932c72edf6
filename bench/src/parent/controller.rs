//! Workload 6: kinformer's `Controller` against kube-runtime 5's, the same
//! reconcile on the same ConfigMaps with the same number of reconciles at
//! once (issue 22): (a) steady churn over a few keys, (b) start-up over many
//! objects with real changes made during the initial reconciles, (c) the
//! maximum reconcile rate.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Context as _;
use kinformer_apiserver::ServerHandle;
use serde_json::{Value, json};

use super::child::ChildProc;
use super::writer::Writer;
use super::{CHILD_TIMEOUT, Scale, alternate, seed_churn, server, spec};
use crate::objects::stamp;
use crate::proto::{ChildSpec, Command, CtlSpec, Job, Kind, Lib, Variant};
use crate::report::{Bar, Section, Table, fmt_summary, ratio};
use crate::stats::Summary;

const NS_CHURN: &str = "ctl-churn";
const NS_START: &str = "ctl-start";
const VARIANTS: [Variant; 2] = [Variant::KINFORMER, Variant::KUBE_RUNTIME];

fn controller_spec(url: &str, v: Variant, ns: &str, objects: usize, ctl: CtlSpec) -> ChildSpec {
    ChildSpec {
        controller: ctl,
        ..spec(
            Job::Controller,
            v,
            Kind::ConfigMap,
            url,
            ns,
            objects,
            Vec::new(),
        )
    }
}

/// (a) One churn run: every key reconciled once, then `rate` writes per
/// second round-robin for `secs`, then until every key's last write is reconciled.
fn churn_run(
    server: &ServerHandle,
    writer: &mut Writer,
    scale: &Scale,
    v: Variant,
) -> anyhow::Result<Value> {
    let s = controller_spec(
        &server.url(),
        v,
        NS_CHURN,
        scale.ctl_keys,
        ctl(scale, scale.ctl_reconcile_us, false),
    );
    let mut child = ChildProc::spawn(&s)?;
    child.expect("ready", CHILD_TIMEOUT)?;
    child.send(&Command::Begin)?;
    child.expect("begun", Duration::from_secs(30))?;
    let written = writer.paced(scale.ctl_rate, Duration::from_secs_f64(scale.ctl_secs));
    child.send(&Command::AwaitReconciled {
        counters: writer.counters(),
        keys: 0,
        timeout_ms: 120_000,
    })?;
    let mut report = child.expect("report", Duration::from_secs(180))?;
    child.finish(Duration::from_secs(30))?;
    report["written"] = json!(written);
    Ok(report)
}

/// (b) and (c): one start-up run over the `NS_START` objects; with
/// `changes` > 0, that many objects spread over the namespace are updated
/// once a tenth of the objects were reconciled.
fn startup_run(
    server: &ServerHandle,
    scale: &Scale,
    v: Variant,
    reconcile_us: u64,
    changes: usize,
    counter: &mut u64,
) -> anyhow::Result<Value> {
    let n = scale.ctl_startup_objects;
    let s = controller_spec(
        &server.url(),
        v,
        NS_START,
        n,
        ctl(scale, reconcile_us, true),
    );
    let mut child = ChildProc::spawn(&s)?;
    child.expect("reconciling", CHILD_TIMEOUT)?;
    let mut counters = BTreeMap::new();
    for j in 0..changes.min(n) {
        let index = j * n / changes + n / (2 * changes);
        let name = crate::objects::seed_name(index);
        let mut obj = server
            .get("", "configmaps", Some(NS_START), &name)
            .with_context(|| format!("reading {name}"))?;
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
        *counter += 1;
        stamp(&mut obj, *counter);
        server.update("", "configmaps", Some(NS_START), obj)?;
        counters.insert(name, *counter);
    }
    child.send(&Command::AwaitReconciled {
        counters,
        keys: n,
        timeout_ms: 600_000,
    })?;
    let mut report = child.expect("report", Duration::from_secs(700))?;
    child.finish(Duration::from_secs(30))?;
    report["changes_written"] = json!(changes.min(n));
    Ok(report)
}

fn ctl(scale: &Scale, reconcile_us: u64, record_from_start: bool) -> CtlSpec {
    CtlSpec {
        workers: scale.ctl_workers,
        reconcile_us,
        record_from_start,
    }
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// The `q` quantile (nearest rank) of `v`, NaN when empty.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// What a start-up report says, in milliseconds and per second.
struct Startup {
    /// Child start to every object reconciled once (s).
    startup_s: f64,
    /// Distinct objects over first reconcile start to the last first reconcile.
    rate: f64,
    /// Changes whose write a reconcile read.
    reconciled: usize,
    /// Write-to-reconcile-start of each change (ms).
    latencies: Vec<f64>,
    /// First change written to last change reconciled (ms).
    all_changes_ms: f64,
    /// In FIFO order (behind every object queued before it), each change is
    /// reconciled when the initial objects are: their end minus its write (ms).
    fifo: Vec<f64>,
    /// First change written to the end of the initial reconciles (ms).
    fifo_all_ms: f64,
    cpu_us_per_reconcile: f64,
}

impl Startup {
    fn of(r: &Value) -> Startup {
        let ns = |k: &str| r[k].as_u64().unwrap_or(0) as f64;
        let changes: Vec<(f64, f64)> = r["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((c[0].as_u64()? as f64, c[1].as_u64()? as f64)))
            .collect();
        let all_keys = ns("all_keys_ns");
        let first_write = changes.iter().map(|c| c.0).fold(f64::NAN, f64::min);
        let last_start = changes.iter().map(|c| c.1).fold(f64::NAN, f64::max);
        let keys = r["keys"].as_f64().unwrap_or(0.0);
        Startup {
            startup_s: (all_keys - ns("start_ns")) / 1e9,
            rate: keys / ((all_keys - ns("first_ns")) / 1e9),
            reconciled: changes.len(),
            latencies: changes.iter().map(|c| (c.1 - c.0) / 1e6).collect(),
            all_changes_ms: (last_start - first_write) / 1e6,
            fifo: changes.iter().map(|c| (all_keys - c.0) / 1e6).collect(),
            fifo_all_ms: (all_keys - first_write) / 1e6,
            cpu_us_per_reconcile: f(r, "cpu_us_per_reconcile"),
        }
    }
}

/// Runs the workload.
pub fn run(scale: &Scale) -> anyhow::Result<Section> {
    let server = server()?;
    let templates = seed_churn(&server, NS_CHURN, scale.ctl_keys)?;
    let mut writer = Writer::new(server.clone(), NS_CHURN, templates);
    server.seed_configmaps(NS_START, scale.ctl_startup_objects)?;
    let mut churn: HashMap<String, Vec<Value>> = HashMap::new();
    let mut startup: HashMap<String, Vec<Value>> = HashMap::new();
    let mut max_rate: HashMap<String, Vec<Value>> = HashMap::new();
    let mut counter = 0;
    for rep in 0..scale.reps {
        for v in alternate(&VARIANTS, rep)
            .into_iter()
            .filter(|v| scale.runs(v))
        {
            let r = churn_run(&server, &mut writer, scale, v)?;
            tracing::info!(variant = %v.label(), p99 = %r["latency"]["p99_us"], per_key = %r["reconciles_per_key"], "controller churn");
            churn.entry(v.label()).or_default().push(r);
            let r = startup_run(
                &server,
                scale,
                v,
                scale.ctl_reconcile_us,
                scale.ctl_changes,
                &mut counter,
            )?;
            let s = Startup::of(&r);
            tracing::info!(variant = %v.label(), all_changes_ms = s.all_changes_ms, fifo_ms = s.fifo_all_ms, "controller start-up");
            startup.entry(v.label()).or_default().push(r);
            let r = startup_run(&server, scale, v, 0, 0, &mut counter)?;
            tracing::info!(variant = %v.label(), rate = Startup::of(&r).rate, "controller maximum rate");
            max_rate.entry(v.label()).or_default().push(r);
        }
    }
    let runs = |m: &HashMap<String, Vec<Value>>, v: Variant| {
        m.get(&v.label()).cloned().unwrap_or_default()
    };

    let mut churn_table = Table::new(
        &format!(
            "(a) Churn: {:.0} updates/s round-robin over {} ConfigMaps for {:.0} s; the reconcile awaits a {} µs timer; {} reconciles at once. \
             Latency: from the write's timestamp to the start of the first reconcile that read it:",
            scale.ctl_rate,
            scale.ctl_keys,
            scale.ctl_secs,
            scale.ctl_reconcile_us,
            scale.ctl_workers
        ),
        &[
            "Controller",
            "Writes per key",
            "Reconciles per key",
            "Reconciles that read no new write",
            "p50 latency (µs)",
            "p99 latency (µs)",
            "p99.9 (µs)",
            "CPU per write (µs)",
            "Complete",
        ],
    );
    let mut medians: Vec<(Lib, (f64, f64))> = Vec::new();
    for v in VARIANTS {
        let rs = runs(&churn, v);
        if rs.is_empty() {
            continue;
        }
        let lat = |k: &str| {
            Summary::of(
                rs.iter()
                    .map(|r| r["latency"][k].as_f64().unwrap_or(f64::NAN)),
            )
        };
        let per_key = Summary::of(rs.iter().map(|r| f(r, "reconciles_per_key")));
        let p99 = lat("p99_us");
        medians.push((v.lib, (p99.median, per_key.median)));
        churn_table.row(vec![
            v.label(),
            fmt_summary(
                &Summary::of(rs.iter().map(|r| f(r, "written") / scale.ctl_keys as f64)),
                0,
            ),
            fmt_summary(&per_key, 1),
            fmt_summary(&Summary::of(rs.iter().map(|r| f(r, "stale"))), 0),
            fmt_summary(&lat("p50_us"), 0),
            fmt_summary(&p99, 0),
            fmt_summary(&lat("p999_us"), 0),
            fmt_summary(
                &Summary::of(rs.iter().map(|r| f(r, "cpu_ms") * 1000.0 / f(r, "written"))),
                1,
            ),
            format!(
                "{} of {}",
                rs.iter().filter(|r| r["complete"] == true).count(),
                rs.len()
            ),
        ]);
    }

    let mut startup_table = Table::new(
        &format!(
            "(b) Start-up: {} ConfigMaps; once a tenth of them were reconciled, {} of them (spread over the namespace) are updated. \
             The reconcile awaits a {} µs timer; {} reconciles at once. \"All changes reconciled\": first change written to the last \
             change's reconcile start. \"In FIFO order\": first change written to the end of the initial reconciles in the same run, \
             when a change queued behind every object would be reconciled:",
            scale.ctl_startup_objects, scale.ctl_changes, scale.ctl_reconcile_us, scale.ctl_workers
        ),
        &[
            "Controller",
            "Start to all reconciled (s)",
            "Initial reconciles/s",
            "Runs with every change reconciled",
            "Change latency p50 (ms)",
            "p99 (ms)",
            "All changes reconciled (ms)",
            "In FIFO order (ms)",
            "FIFO / all changes",
        ],
    );
    let mut fifo_bar = (true, Vec::new());
    for v in VARIANTS {
        let rs: Vec<Startup> = runs(&startup, v).iter().map(Startup::of).collect();
        if rs.is_empty() {
            continue;
        }
        let sum = |g: &dyn Fn(&Startup) -> f64| Summary::of(rs.iter().map(g));
        let all = sum(&|s| s.all_changes_ms);
        let fifo = sum(&|s| s.fifo_all_ms);
        let complete = rs
            .iter()
            .filter(|s| s.reconciled == scale.ctl_changes)
            .count();
        startup_table.row(vec![
            v.label(),
            fmt_summary(&sum(&|s| s.startup_s), 2),
            fmt_summary(&sum(&|s| s.rate), 0),
            format!("{} of {}", complete, rs.len()),
            fmt_summary(&sum(&|s| quantile(&s.latencies, 0.5)), 1),
            fmt_summary(&sum(&|s| quantile(&s.latencies, 0.99)), 1),
            fmt_summary(&all, 1),
            fmt_summary(&fifo, 1),
            ratio(fifo.median, all.median),
        ]);
        if v.lib == Lib::Kinformer {
            let p50_fifo = Summary::of(rs.iter().map(|s| quantile(&s.fifo, 0.5))).median;
            let p50 = Summary::of(rs.iter().map(|s| quantile(&s.latencies, 0.5))).median;
            fifo_bar.0 = complete == rs.len() && all.median * 10.0 <= fifo.median;
            fifo_bar.1.push(format!(
                "all {} changes reconciled {:.1} ms after the first was written, {} sooner than in FIFO order ({:.0} ms); \
                 per change p50 {:.1} ms against {:.0} ms in FIFO order",
                scale.ctl_changes,
                all.median,
                ratio(fifo.median, all.median),
                fifo.median,
                p50,
                p50_fifo
            ));
        } else {
            fifo_bar.1.push(format!(
                "kube-runtime (no priority): all changes reconciled after {:.0} ms, FIFO order {:.0} ms",
                all.median, fifo.median
            ));
        }
    }

    let mut rate_table = Table::new(
        &format!(
            "(c) Maximum reconcile rate: the initial reconciles of the {} start-up ConfigMaps (both controllers reconcile only once their \
             store is synced, so every key is queued), {} reconciles at once; rate = objects / (first reconcile start to the last \
             object's first reconcile start). CPU per reconcile: the child's CPU over the reconcile phase divided by the reconciles:",
            scale.ctl_startup_objects, scale.ctl_workers
        ),
        &[
            "Controller",
            "Reconcile",
            "Reconciles/s",
            "CPU per reconcile (µs)",
            "kinformer / kube-runtime",
        ],
    );
    let rate_of = |m: &HashMap<String, Vec<Value>>, v: Variant| {
        Summary::of(runs(m, v).iter().map(|r| Startup::of(r).rate))
    };
    for (label, m) in [
        (format!("awaits {} µs", scale.ctl_reconcile_us), &startup),
        ("returns at once".to_string(), &max_rate),
    ] {
        let krt = rate_of(m, Variant::KUBE_RUNTIME).median;
        for v in VARIANTS {
            let rs = runs(m, v);
            if rs.is_empty() {
                continue;
            }
            let rate = rate_of(m, v);
            rate_table.row(vec![
                v.label(),
                label.clone(),
                fmt_summary(&rate, 0),
                fmt_summary(
                    &Summary::of(rs.iter().map(|r| Startup::of(r).cpu_us_per_reconcile)),
                    1,
                ),
                if v.lib == Lib::Kinformer {
                    ratio(rate.median, krt)
                } else {
                    String::new()
                },
            ]);
        }
    }

    let of = |lib: Lib| medians.iter().find(|m| m.0 == lib).map(|m| &m.1);
    let pair = of(Lib::Kinformer).zip(of(Lib::KubeRuntime));
    let (p99_bar, reconciles_bar) = match pair {
        Some((&(kp99, kper), &(rp99, rper))) => (
            Bar::compared(
                "churn: p99 change-to-reconcile latency ≤ kube-runtime's",
                kp99 <= rp99,
                &[format!(
                    "kinformer {kp99:.0} µs, kube-runtime {rp99:.0} µs ({})",
                    ratio(kp99, rp99)
                )],
            ),
            Bar::compared(
                "churn: reconciles ≤ kube-runtime's",
                kper <= rper,
                &[format!(
                    "kinformer {kper:.1} per key, kube-runtime {rper:.1} per key"
                )],
            ),
        ),
        None => (
            Bar::compared(
                "churn: p99 change-to-reconcile latency ≤ kube-runtime's",
                true,
                &[],
            ),
            Bar::compared("churn: reconciles ≤ kube-runtime's", true, &[]),
        ),
    };
    let fifo_details = if runs(&startup, Variant::KINFORMER).is_empty() {
        Vec::new()
    } else {
        fifo_bar.1
    };
    Ok(Section {
        workload: "controller".into(),
        title: "Workload 6: controller against kube-runtime".into(),
        issue: 22,
        method: vec![
            "Both controllers reconcile the namespace's ConfigMaps in a child process with the same reconcile: it notes the time, the \
             object's write timestamp (an annotation the parent's writer sets) and its `data.counter`, then awaits a tokio timer (or \
             returns at once in (c)). kinformer: `Informer` (page size 500) and `kinformer::controller::Controller` with \
             `workers(8)`, answering `Action::Done`, on one actix system (its workers are tasks on that thread). kube-runtime: \
             `kube_runtime::Controller::new` (page size 500) with `Config::concurrency(8)`, answering `Action::await_change()`, on a \
             2-worker tokio runtime. The API server and writer run in the parent and share the 2 cores with the child."
                .into(),
        ],
        tables: vec![churn_table, startup_table, rate_table],
        bars: vec![
            p99_bar,
            reconciles_bar,
            Bar::compared(
                "start-up: real changes reconciled ≥ 10× sooner than in FIFO order",
                fifo_bar.0,
                &fifo_details,
            ),
        ],
        raw: churn
            .into_iter()
            .map(|(v, r)| json!({"variant": v, "churn": r}))
            .chain(startup.into_iter().map(|(v, r)| json!({"variant": v, "startup": r})))
            .chain(max_rate.into_iter().map(|(v, r)| json!({"variant": v, "max_rate": r})))
            .collect(),
    })
}
