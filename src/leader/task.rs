//! The elector's task: feeds the [`Election`] time, the server's answers and
//! the stop, performs the requests it asks for through kube-client, and
//! publishes what it decided. Nothing more: the rules live in `election.rs`.
//!
//! A tokio task rather than an actix actor: it needs no actor runtime, so it
//! runs the same in `#[tokio::main]` and `#[actix::main]` services, and a
//! controller gates its workers on the `watch` channel it publishes.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::{broadcast, oneshot, watch};

use super::election::{Answer, Effects, Election, Request};
use super::messages::{Finished, LeaderEvent, StepDownReason, StopMode};

/// Where the task publishes leadership.
pub(super) struct Outputs {
    /// Whether this elector leads; set to `false` when the task ends in any
    /// way (drop guard), so a gate never stays open after a panic or abort.
    pub leading: watch::Sender<bool>,
    /// The holder the Lease named when last observed.
    pub holder: watch::Sender<Option<String>>,
    /// Leadership events (LE-10); sent only while someone listens.
    pub events: broadcast::Sender<LeaderEvent>,
}

impl Drop for Outputs {
    fn drop(&mut self) {
        self.leading.send_replace(false);
    }
}

type InFlight = Pin<Box<dyn Future<Output = Answer> + Send>>;

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Runs `election` until it finishes.
pub(super) async fn run(
    mut election: Election,
    api: Api<Lease>,
    lease_name: String,
    mut stop: oneshot::Receiver<StopMode>,
    outputs: Outputs,
) -> Finished {
    let timeout = election.timings().request_timeout();
    let mut in_flight: Option<InFlight> = None;
    let mut wake = Some(now());
    let mut stop_pending = true;
    loop {
        let fx = tokio::select! {
            mode = &mut stop, if stop_pending => {
                stop_pending = false;
                // A dropped handle stops gracefully, releasing.
                election.stop(now(), Timestamp::now(), mode.unwrap_or(StopMode::Release))
            }
            answer = answer_of(&mut in_flight), if in_flight.is_some() => {
                in_flight = None;
                if let Answer::Failed(reason) = &answer {
                    tracing::warn!(%reason, "Lease request failed");
                }
                election.answer(now(), Timestamp::now(), answer)
            }
            () = sleep_until(wake), if wake.is_some() => election.tick(now(), Timestamp::now()),
        };
        publish(&election, &fx, &outputs);
        let Effects {
            request,
            wake_at,
            finished,
            ..
        } = fx;
        if let Some(finished) = finished {
            return finished;
        }
        if let Some(request) = request {
            in_flight = Some(perform(api.clone(), lease_name.clone(), request, timeout));
        }
        wake = wake_at;
    }
}

async fn answer_of(in_flight: &mut Option<InFlight>) -> Answer {
    match in_flight {
        Some(request) => request.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn publish(election: &Election, fx: &Effects, outputs: &Outputs) {
    let leading = election.is_leader();
    outputs
        .leading
        .send_if_modified(|v| std::mem::replace(v, leading) != leading);
    let holder = election.holder().map(str::to_owned);
    outputs
        .holder
        .send_if_modified(|v| std::mem::replace(v, holder.clone()) != holder);
    for event in &fx.events {
        match event {
            LeaderEvent::BecameLeader { .. } => tracing::info!("became leader"),
            LeaderEvent::SteppedDown { reason, .. } => match reason {
                StepDownReason::Stopped | StepDownReason::Abandoned => {
                    tracing::info!(?reason, "stepped down")
                }
                _ => tracing::warn!(?reason, "lost leadership"),
            },
            LeaderEvent::NewLeader { identity, .. } => tracing::info!(%identity, "new leader"),
        }
        // No receiver is not an error: the watch channels carry the state.
        let _ = outputs.events.send(event.clone());
    }
}

fn answered(lease: Lease) -> Answer {
    Answer::Lease(Box::new(lease))
}

/// A 404: the Lease is missing (create it), except for a create, where its
/// namespace or the Lease API is: a failure, retried at the retry period
/// and logged (answered `Missing`, it was created again at once, forever).
fn not_found(creating: bool, status: &kube::core::Status) -> Answer {
    if creating {
        Answer::Failed(format!("cannot create the Lease: {}", status.message))
    } else {
        Answer::Missing
    }
}

/// One request, bounded by `timeout`, its outcome classified (LE-3).
fn perform(api: Api<Lease>, name: String, request: Request, timeout: Duration) -> InFlight {
    Box::pin(async move {
        let params = PostParams::default();
        let creating = matches!(request, Request::Create(_));
        let call = async {
            match request {
                Request::Get => api
                    .get_opt(&name)
                    .await
                    .map(|lease| lease.map_or(Answer::Missing, answered)),
                Request::Create(lease) => api.create(&params, &lease).await.map(answered),
                Request::Update(lease) => api.replace(&name, &params, &lease).await.map(answered),
            }
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => Answer::Conflict,
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => not_found(creating, &status),
            Ok(Err(error)) => Answer::Failed(error.to_string()),
            Err(_) => Answer::Failed(format!("no answer within {timeout:?}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 404 answers a missing Lease, except to a create: there it says the
    /// namespace (or the API) is missing, a failure retried later.
    #[test]
    fn a_404_to_a_create_is_a_failure_not_a_missing_lease() {
        let status = kube::core::Status::failure("namespaces \"nowhere\" not found", "NotFound")
            .with_code(404);
        assert!(matches!(not_found(false, &status), Answer::Missing));
        match not_found(true, &status) {
            Answer::Failed(why) => assert!(why.contains("nowhere"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
