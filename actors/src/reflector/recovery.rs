//! Recovery from a server that does not answer: how long it has been gone,
//! when to probe it, and when it is back. Pure: time and jitter are inputs.
//!
//! Rules, and where they differ from client-go on purpose:
//! - A watch that fails without an answer from the server (connection
//!   refused, reset or closed, a timeout: [`Failure::unreachable`]) is
//!   watched again from the last resourceVersion after a backoff, not
//!   relisted. client-go does so only for refused and 429 and
//!   relists after any other error; but a re-watch from the last
//!   resourceVersion costs the server nothing, and one too old for it is
//!   answered with a 410, which relists then.
//! - After [`MAX_UNREACHABLE_REWATCHES`] such failures in a row (no event and
//!   no successful list between them) it relists instead: if watches keep
//!   failing while lists work (a proxy that drops long requests), relists at
//!   the backoff's pace still refresh the cache.
//! - While a backoff after such a failure runs, the server is probed (a
//!   cheap request: `GET /version`) at a cadence of 1/60 of the outage so
//!   far, between [`PROBE_INTERVAL_MIN`] and [`PROBE_INTERVAL_MAX`], each wait
//!   jittered into `[d, 2d)`, but not in the last [`PROBE_INTERVAL_MIN`] of
//!   the backoff (the request itself comes then). A probe answered after one
//!   of the same outage went unanswered ends the backoff: the server is back.
//!   A probe answered with an error, or answered before any went unanswered
//!   (the server answers, only our request failed), ends the probing of that
//!   backoff, which runs its course. List and watch requests thus keep the
//!   backoff's pace while the server is away (a server that is down never
//!   sees the probes); only the wait after its return is cut.
//! - A 410 that is the server's first answer after a probe found it away
//!   relists at once, not after the backoff built up meanwhile: a restart
//!   that lost the watch history answers the first re-watch so.

use std::time::{Duration, Instant};

use super::failure::Failure;

/// Watch failures without an answer in a row after which a relist is made
/// instead of a re-watch. With the default backoff the eighth comes after
/// at least 80 s without an answer.
pub const MAX_UNREACHABLE_REWATCHES: u32 = 8;

/// The shortest wait between two probes (before jitter), kept for the first
/// 30 s of an outage: the server's return is then seen within 1.5 s (at most
/// two intervals from the last probe to the request).
pub const PROBE_INTERVAL_MIN: Duration = Duration::from_millis(500);

/// The longest wait between two probes (before jitter), reached after a
/// five-minute outage.
pub const PROBE_INTERVAL_MAX: Duration = Duration::from_secs(5);

/// What to do after a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// No answer: probe again at the next interval.
    Again,
    /// The server is back: end the wait.
    Back,
    /// The server answers: stop probing, let the wait run its course.
    Stop,
}

/// What the Reflector knows of an outage.
#[derive(Debug, Clone, Default)]
pub struct Outage {
    /// When the server stopped answering (the first failure without an
    /// answer since its last answer); `None` while it answers.
    since: Option<Instant>,
    /// A probe of this outage went unanswered, so an answered one means the
    /// server came back. Cleared with `since`.
    probe_missed: bool,
    /// A probe saw the server come back: its next answer is its first since
    /// it was seen away. Cleared by that answer, an event or a list.
    returned: bool,
    /// Watch failures without an answer in a row, since the last event or
    /// successful list.
    rewatches: u32,
}

impl Outage {
    /// A request failed with `failure` at `now`. Returns whether this is the
    /// server's first answer since a probe found it away.
    pub fn failed(&mut self, failure: &Failure, now: Instant) -> bool {
        if failure.unreachable() {
            self.since.get_or_insert(now);
            return false;
        }
        // Both read (no short-circuit): `returned` applies to one answer.
        let back = std::mem::take(&mut self.returned) | self.probe_missed;
        self.answered();
        back
    }

    /// The server answered (an error status or a clean close included).
    pub fn answered(&mut self) {
        self.since = None;
        self.probe_missed = false;
    }

    /// A list succeeded or a watch event arrived: the outage is over.
    pub fn healthy(&mut self) {
        self.answered();
        self.returned = false;
        self.rewatches = 0;
    }

    /// After a watch failure without an answer: `true` to re-watch, `false`
    /// to relist (the [`MAX_UNREACHABLE_REWATCHES`]th in a row).
    pub fn rewatch(&mut self) -> bool {
        self.rewatches += 1;
        if self.rewatches >= MAX_UNREACHABLE_REWATCHES {
            self.rewatches = 0;
            return false;
        }
        true
    }

    /// How long until the next probe, if the server is to be probed (it has
    /// not answered since `since`) during a backoff of which `remaining` is
    /// left. `jitter` is uniform in `[0, 1)`.
    pub fn probe_interval(
        &self,
        now: Instant,
        remaining: Duration,
        jitter: f64,
    ) -> Option<Duration> {
        let outage = now.saturating_duration_since(self.since?);
        let base = (outage / 60).clamp(PROBE_INTERVAL_MIN, PROBE_INTERVAL_MAX);
        let interval = base.mul_f64(1.0 + jitter.clamp(0.0, 1.0));
        (interval + PROBE_INTERVAL_MIN <= remaining).then_some(interval)
    }

    /// A probe ended with `result`.
    pub fn probed(&mut self, result: &Result<(), Failure>) -> ProbeVerdict {
        match result {
            Err(failure) if failure.unreachable() => {
                self.probe_missed = true;
                ProbeVerdict::Again
            }
            Ok(()) if self.probe_missed => {
                self.answered();
                self.returned = true;
                ProbeVerdict::Back
            }
            _ => ProbeVerdict::Stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFUSED: Failure = Failure::ConnectionRefused;

    #[test]
    fn the_probe_cadence_grows_with_the_outage_between_its_bounds() {
        let t = Instant::now();
        let long = Duration::from_secs(60);
        let mut o = Outage::default();
        assert_eq!(o.probe_interval(t, long, 0.0), None, "no outage, no probe");
        o.failed(&REFUSED, t);
        o.failed(&Failure::Transport, t + Duration::from_secs(9));
        let at = |secs| o.probe_interval(t + Duration::from_secs(secs), long, 0.0);
        assert_eq!(at(0), Some(PROBE_INTERVAL_MIN));
        assert_eq!(at(30), Some(PROBE_INTERVAL_MIN));
        assert_eq!(at(90), Some(Duration::from_millis(1500)));
        assert_eq!(at(600), Some(PROBE_INTERVAL_MAX));
        let jittered = o.probe_interval(t + Duration::from_secs(90), long, 0.5);
        assert_eq!(jittered, Some(Duration::from_millis(2250)));
        // Not in the backoff's last interval: the request itself comes then.
        let remaining = |ms| o.probe_interval(t, Duration::from_millis(ms), 0.0);
        assert_eq!(remaining(1000), Some(PROBE_INTERVAL_MIN));
        assert_eq!(remaining(999), None);
        o.failed(&Failure::Other, t);
        let after = o.probe_interval(t, long, 0.0);
        assert_eq!(after, None, "an answer ends the outage");
    }

    #[test]
    fn only_a_probe_answered_after_a_missed_one_means_the_server_is_back() {
        let t = Instant::now();
        let mut o = Outage::default();
        o.failed(&Failure::Transport, t);
        // Answered at once: the server is there, only the request failed.
        assert_eq!(o.probed(&Ok(())), ProbeVerdict::Stop);
        assert_eq!(o.probed(&Err(REFUSED)), ProbeVerdict::Again);
        assert_eq!(o.probed(&Err(Failure::Transport)), ProbeVerdict::Again);
        assert_eq!(o.probed(&Ok(())), ProbeVerdict::Back);
        assert_eq!(o.probe_interval(t, Duration::MAX, 0.0), None);
        // An error answer: the server is up but failing.
        o.failed(&REFUSED, t);
        o.probed(&Err(REFUSED));
        let throttled = Failure::TooManyRequests { retry_after: None };
        assert_eq!(o.probed(&Err(throttled)), ProbeVerdict::Stop);
    }

    #[test]
    fn the_first_answer_after_an_outage_is_known_as_such() {
        let t = Instant::now();
        let mut o = Outage::default();
        assert!(!o.failed(&Failure::Expired, t), "no outage before");
        // Seen by a probe, then answered.
        o.failed(&REFUSED, t);
        o.probed(&Err(REFUSED));
        o.probed(&Ok(()));
        assert!(o.failed(&Failure::Expired, t));
        assert!(!o.failed(&Failure::Expired, t), "only the first answer");
        // Found away by a probe, and the request itself got the first answer.
        assert!(!o.failed(&Failure::Transport, t));
        o.probed(&Err(Failure::Transport));
        assert!(o.failed(&Failure::Expired, t));
        // Seen back, away again before an answer, found away: one first answer.
        o.failed(&REFUSED, t);
        o.probed(&Err(REFUSED));
        o.probed(&Ok(()));
        o.failed(&REFUSED, t);
        o.probed(&Err(REFUSED));
        assert!(o.failed(&Failure::Expired, t));
        assert!(!o.failed(&Failure::Expired, t), "one answer, not two");
        // Never probed (the waits were too short): an answer as any other.
        o.failed(&REFUSED, t);
        assert!(!o.failed(&Failure::Expired, t));
        // An event in between: the outage is over.
        o.failed(&REFUSED, t);
        o.healthy();
        assert!(!o.failed(&Failure::Expired, t));
    }

    #[test]
    fn the_eighth_unanswered_watch_failure_in_a_row_relists() {
        let mut o = Outage::default();
        let rewatched: Vec<bool> = (0..9).map(|_| o.rewatch()).collect();
        assert_eq!(rewatched[..7], [true; 7]);
        assert!(!rewatched[7]);
        assert!(rewatched[8], "counted again after the relist");
        for _ in 0..5 {
            o.rewatch();
        }
        o.healthy();
        assert!(
            (0..7).all(|_| o.rewatch()),
            "an event starts the count over"
        );
    }
}
