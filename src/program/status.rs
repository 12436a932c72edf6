//! What `kinformer run` shows: a progress bar per informer during the initial
//! sync (indicatif), then a compact live status per informer, and the final
//! summary. When stdout is not a terminal, plain lines instead of bars.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::metrics::{InformerView, InitialSync, Registry, SubscriberView};

/// Per-informer state of the display.
struct Row {
    bar: Option<ProgressBar>,
    sub_bars: Vec<ProgressBar>,
    synced_at: Option<Duration>,
    last_events: u64,
    last_progress: u64,
}

/// The live display.
pub struct Display {
    multi: Option<MultiProgress>,
    rows: Vec<Row>,
    started: Instant,
    last_tick: Instant,
    /// The leadership line last shown (shown again when it changes).
    last_leader: Option<String>,
}

fn sync_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix:>14} [{bar:30}] {pos}/{len} objects ({per_sec}, {elapsed}) {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// Before the server announces a total (streaming lists never do, nor
/// lists with selectors mostly): a count, not `N/0`.
fn count_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:>14} {pos} objects ({per_sec}, {elapsed}) {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

fn status_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:>14} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// Writes a line to stdout; false when stdout is gone (e.g. piped into `head`).
pub fn say(line: &str) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|_| out.flush()).is_ok()
}

impl Display {
    /// A display for `registry`'s informers: bars on a terminal, lines otherwise.
    pub fn new(registry: &Registry) -> Self {
        let multi = std::io::stdout()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stdout()));
        let rows = registry
            .informers
            .iter()
            .map(|view| Row {
                bar: multi.as_ref().map(|m| {
                    let bar = m.add(ProgressBar::new(0));
                    bar.set_style(count_style());
                    bar.set_prefix(view.name.clone());
                    bar
                }),
                sub_bars: Vec::new(),
                synced_at: None,
                last_events: 0,
                last_progress: 0,
            })
            .collect();
        let now = Instant::now();
        Display {
            multi,
            rows,
            started: now,
            last_tick: now,
            last_leader: None,
        }
    }

    /// True when drawing bars (a terminal).
    pub fn is_terminal(&self) -> bool {
        self.multi.is_some()
    }

    /// Updates the bars, or prints the status lines; call periodically.
    /// False when stdout is gone.
    pub fn tick(&mut self, registry: &Registry) -> bool {
        let now = Instant::now();
        let dt = now.duration_since(self.last_tick).as_secs_f64().max(1e-3);
        self.last_tick = now;
        let mut lines = Vec::new();
        for (row, view) in self.rows.iter_mut().zip(&registry.informers) {
            let s = view.informer.stats();
            let rate = (s.events.saturating_sub(row.last_events)) as f64 / dt;
            row.last_events = s.events;
            if row.synced_at.is_none() {
                if view.informer.has_synced() {
                    // The counts of the moment it synced (the watch has
                    // moved on since); this tick's if that is not recorded yet.
                    let sync = view.synced.get().cloned().unwrap_or_else(|| InitialSync {
                        took: self.started.elapsed(),
                        objects: s.objects,
                        resource_version: view.informer.last_sync_resource_version(),
                    });
                    row.synced_at = Some(sync.took);
                    let msg = format!(
                        "synced {} objects in {:.2?} at resourceVersion {}",
                        sync.objects, sync.took, sync.resource_version
                    );
                    match (&row.bar, &self.multi) {
                        (Some(bar), Some(multi)) => {
                            bar.set_style(status_style());
                            bar.set_message(msg);
                            // One row per subscriber under the informer's.
                            let mut after = bar.clone();
                            for sub in &view.subscribers {
                                let sb = multi.insert_after(&after, ProgressBar::new(0));
                                sb.set_style(status_style());
                                sb.set_prefix(format!("└ {}", sub.name));
                                after = sb.clone();
                                row.sub_bars.push(sb);
                            }
                        }
                        _ => lines.push(format!("{}: {msg}", view.name)),
                    }
                    continue;
                }
                let (done, total) = s.list_progress;
                // Why it is not syncing, while it retries.
                let failing = view
                    .informer
                    .last_failure()
                    .map(|f| {
                        let text = f.to_string();
                        let short: String = text.chars().take(120).collect();
                        let more = if short.len() < text.len() { "…" } else { "" };
                        format!("retrying: last {short}{more}")
                    })
                    .unwrap_or_default();
                match &row.bar {
                    Some(bar) => {
                        if total > 0 && bar.length() != Some(total) {
                            bar.set_style(sync_style());
                            bar.set_length(total);
                        }
                        bar.set_position(done);
                        bar.set_message(failing);
                    }
                    None => {
                        let speed = done.saturating_sub(row.last_progress) as f64 / dt;
                        let failing = if failing.is_empty() {
                            failing
                        } else {
                            format!("; {failing}")
                        };
                        lines.push(format!(
                            "{}: initial sync {done}/{} objects ({speed:.0}/s){failing}",
                            view.name,
                            if total > 0 {
                                total.to_string()
                            } else {
                                "?".into()
                            }
                        ));
                    }
                }
                row.last_progress = done;
                continue;
            }
            match &row.bar {
                Some(bar) => {
                    bar.set_message(informer_status(view, rate));
                    for (sb, sub) in row.sub_bars.iter().zip(&view.subscribers) {
                        sb.set_message(subscriber_status(sub));
                    }
                }
                None => lines.push(format!("{}: {}", view.name, status_line(view, rate))),
            }
        }
        if let Some(leader) = &registry.leader {
            let status = format!("leader election: {}", leader.status());
            match &self.multi {
                // On a terminal, a line above the bars when it changes.
                Some(multi) if self.last_leader.as_ref() != Some(&status) => {
                    let _ = multi.println(&status);
                }
                Some(_) => {}
                None => lines.push(status.clone()),
            }
            self.last_leader = Some(status);
        }
        lines.iter().all(|line| say(line))
    }

    /// Removes the bars (before the summary).
    pub fn finish(self) {
        for row in self.rows {
            for bar in row.bar.into_iter().chain(row.sub_bars) {
                bar.abandon();
            }
        }
        if self.multi.is_some() {
            // The bars stay on screen; what follows starts on a line of its own.
            say("");
        }
    }
}

/// `cached N | E events/s | relists R | watch restarts W`, then the warm
/// restart's path (`| resumed: restored N in T ms`) when the informer persists.
fn informer_status(view: &InformerView, events_per_sec: f64) -> String {
    let s = view.informer.stats();
    let line = format!(
        "cached {} | {:.0} events/s | relists {} | watch restarts {}",
        s.objects, events_per_sec, s.relists, s.watch_restarts
    );
    match view.informer.persistence() {
        Some(p) => format!("{line} | {}", persist_status(&s, &p)),
        None => line,
    }
}

/// The warm restart's path and the snapshot's state, for the status line.
pub fn persist_status(s: &kinformer::InformerStats, p: &kinformer::PersistStatus) -> String {
    let (n, ms) = (s.restored_objects, s.restore_ms);
    let path = match s.warm_start {
        kinformer::WarmStart::Cold if p.discarded > 0 => "snapshot discarded, listed".to_string(),
        kinformer::WarmStart::Cold => "no snapshot, listed".to_string(),
        kinformer::WarmStart::Restored => {
            format!("restored {n} in {ms} ms, not confirmed by the server yet")
        }
        kinformer::WarmStart::Resumed => format!("resumed: restored {n} in {ms} ms, no list"),
        kinformer::WarmStart::Relisted => {
            format!("relisted: restored {n} in {ms} ms, then one list (410)")
        }
    };
    match &p.error {
        Some(e) => format!("{path} | persistence stopped: {e}"),
        None => format!("{path} | snapshot at rv {:?}", p.resource_version),
    }
}

/// `name[resync 10s: pending P, in flight F, delivered D, resyncs R, coalesced C]`.
fn subscriber_status(sub: &SubscriberView) -> String {
    let guard = sub.subscription();
    match guard.as_ref() {
        Some(subscription) => {
            let ls = subscription.stats();
            format!(
                "resync {}: pending {}, in flight {}, delivered {}, resyncs {}, coalesced {}",
                humantime::format_duration(subscription.resync_period()),
                ls.pending,
                ls.in_flight,
                ls.delivered,
                ls.resyncs,
                ls.coalesced,
            )
        }
        None => "stopped".into(),
    }
}

/// The informer's status and every subscriber's, on one line (plain output).
pub fn status_line(view: &InformerView, events_per_sec: f64) -> String {
    let subs: Vec<String> = view
        .subscribers
        .iter()
        .map(|sub| format!("{}[{}]", sub.name, subscriber_status(sub)))
        .collect();
    format!(
        "{} | {}",
        informer_status(view, events_per_sec),
        subs.join(" ")
    )
}

/// The closing summary, one line per informer and subscriber, under a `summary:` line.
pub fn summary(registry: &Registry, ran: Duration) -> Vec<String> {
    let mut out = vec![format!(
        "summary: ran {:.1?}; {} informer(s)",
        ran,
        registry.informers.len()
    )];
    if let Some(leader) = &registry.leader {
        out.push(format!(
            "  leader election: {}; {} leadership transition(s)",
            leader.status(),
            leader.transitions()
        ));
    }
    for view in &registry.informers {
        let s = view.informer.stats();
        out.push(format!(
            "  {} ({}): synced {}; cached {} objects; {} watch events; {} adds, {} updates, {} deletes ({} tombstones); {} relists; {} watch restarts; {} failures; last resourceVersion {}",
            view.name,
            view.resource,
            view.informer.has_synced(),
            s.objects,
            s.events,
            s.added,
            s.updated,
            s.deleted,
            s.tombstones,
            s.relists,
            s.watch_restarts,
            s.failures,
            view.informer.last_sync_resource_version(),
        ));
        if let Some(p) = view.informer.persistence() {
            out.push(format!("    warm start: {}", persist_status(&s, &p)));
        }
        for sub in &view.subscribers {
            let n = &sub.notifications;
            out.push(format!(
                "    {}: {} notifications handled ({} initial, {} restored, {} watch, {} relist, {} resync; {} tombstones)",
                sub.name,
                n.total(),
                (0..3).map(|t| n.get(t, 0)).sum::<u64>(),
                (0..3).map(|t| n.get(t, 4)).sum::<u64>(),
                (0..3).map(|t| n.get(t, 1)).sum::<u64>(),
                (0..3).map(|t| n.get(t, 2)).sum::<u64>(),
                n.resyncs(),
                n.tombstones(),
            ));
        }
    }
    out
}
