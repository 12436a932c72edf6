//! Decode paths in isolation, for profiling (`valgrind --tool=callgrind
//! kinformer-bench profile ...` gives repeatable instruction counts) and for
//! the decode table of the report.
//!
//! The "kube" paths do what kube-client does: a watch line is copied into a
//! new `String` (its `LinesCodec`) and decoded as `WatchEvent<K>`; a list
//! body is copied into a `String` and decoded as `ObjectList<K>`. The other
//! paths are kinformer's decoder (`kinformer_actors::reflector::decode`).

use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kinformer_actors::reflector::SourceEvent;
use kinformer_actors::reflector::decode::{DecodeOptions, LineDecoder, PageDecoder, WatchLine};
use kube::core::{ObjectList, WatchEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::objects::pod;
use crate::proto::Kind;

/// A decode path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
pub enum DecodePath {
    /// Watch lines as kube-client decodes them.
    WatchKube,
    /// Watch lines through kinformer's envelope.
    WatchEnvelope,
    /// The same, skipping managedFields.
    WatchSkip,
    /// List pages as kube-client decodes them.
    PageKube,
    /// List pages through kinformer's page decoder.
    PageDecode,
    /// The same, skipping managedFields.
    PageSkip,
}

impl DecodePath {
    /// Every path.
    pub const ALL: [DecodePath; 6] = [
        DecodePath::WatchKube,
        DecodePath::WatchEnvelope,
        DecodePath::WatchSkip,
        DecodePath::PageKube,
        DecodePath::PageDecode,
        DecodePath::PageSkip,
    ];
}

/// One object as the server sends it (with server-filled metadata).
pub fn server_object(kind: Kind, index: usize) -> Value {
    let mut v = match kind {
        Kind::Pod => pod(index, "bench"),
        Kind::ConfigMap => {
            let mut cm = kinformer_apiserver::load::seed_configmap(index);
            cm["metadata"]["namespace"] = "bench".into();
            cm
        }
    };
    v["metadata"]["uid"] = format!("0000{index:08}-0000-4000-8000-000000000000").into();
    v["metadata"]["resourceVersion"] = (1000 + index).to_string().into();
    v["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00Z".into();
    v
}

/// `n` watch lines (`MODIFIED`), without their newlines, `type` first as servers send them.
pub fn watch_lines(kind: Kind, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
            line.extend(serde_json::to_vec(&server_object(kind, i)).unwrap_or_default());
            line.push(b'}');
            line
        })
        .collect()
}

/// List pages of `page_size` objects holding `n` objects in all.
pub fn pages(kind: Kind, n: usize, page_size: usize) -> Vec<Vec<u8>> {
    let list_kind = match kind {
        Kind::Pod => "PodList",
        Kind::ConfigMap => "ConfigMapList",
    };
    (0..n)
        .step_by(page_size.max(1))
        .map(|start| {
            let items: Vec<Value> = (start..(start + page_size).min(n))
                .map(|i| server_object(kind, i))
                .collect();
            // Field order as servers send it: kind, apiVersion, metadata, items.
            let mut page = format!(
                r#"{{"kind":"{list_kind}","apiVersion":"v1","metadata":{{"resourceVersion":"1000","continue":"token"}},"items":"#
            )
            .into_bytes();
            page.extend(serde_json::to_vec(&items).unwrap_or_default());
            page.push(b'}');
            page
        })
        .collect()
}

/// Decodes `inputs` once along `path`; returns the objects decoded.
pub fn decode_once<K: DeserializeOwned + Clone>(
    path: DecodePath,
    inputs: &[Vec<u8>],
) -> anyhow::Result<usize> {
    let skip = DecodeOptions {
        skip_managed_fields: true,
    };
    let mut n = 0;
    let mut decoder = PageDecoder::default();
    let mut lines = LineDecoder::default();
    // kinformer's page decoder parses in place: each page is copied first
    // (the informer decodes the body it read; the copy is charged to it here).
    let mut page = Vec::new();
    for input in inputs {
        n += match path {
            DecodePath::WatchKube => {
                let line = String::from_utf8(input.clone())?;
                match serde_json::from_str::<WatchEvent<K>>(&line)? {
                    WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_) => 1,
                    _ => 0,
                }
            }
            DecodePath::WatchEnvelope | DecodePath::WatchSkip => {
                let options = if path == DecodePath::WatchSkip {
                    skip
                } else {
                    DecodeOptions::default()
                };
                match lines.decode::<K>(input, options)? {
                    WatchLine::Event(SourceEvent::Modified(_)) => 1,
                    _ => 0,
                }
            }
            DecodePath::PageKube => {
                let text = String::from_utf8(input.clone())?;
                serde_json::from_str::<ObjectList<K>>(&text)?.items.len()
            }
            DecodePath::PageDecode | DecodePath::PageSkip => {
                let options = if path == DecodePath::PageSkip {
                    skip
                } else {
                    DecodeOptions::default()
                };
                page.clear();
                page.extend_from_slice(input);
                decoder.decode::<K>(&mut page, options)?.items.len()
            }
        };
    }
    Ok(n)
}

/// Objects per second along `path` (best of `reps` passes over `inputs`).
pub fn throughput(
    kind: Kind,
    path: DecodePath,
    inputs: &[Vec<u8>],
    reps: usize,
) -> anyhow::Result<f64> {
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        n = match kind {
            Kind::Pod => decode_once::<Pod>(path, inputs)?,
            Kind::ConfigMap => decode_once::<ConfigMap>(path, inputs)?,
        };
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(n as f64 / best)
}

/// Inputs for `path`: watch lines or pages of 500 holding `n` objects.
pub fn inputs_for(kind: Kind, path: DecodePath, n: usize) -> Vec<Vec<u8>> {
    match path {
        DecodePath::WatchKube | DecodePath::WatchEnvelope | DecodePath::WatchSkip => {
            watch_lines(kind, n)
        }
        _ => pages(kind, n, 500),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_decodes_every_object() {
        for kind in [Kind::ConfigMap, Kind::Pod] {
            for path in DecodePath::ALL {
                let inputs = inputs_for(kind, path, 7);
                let n = match kind {
                    Kind::Pod => decode_once::<Pod>(path, &inputs).unwrap(),
                    Kind::ConfigMap => decode_once::<ConfigMap>(path, &inputs).unwrap(),
                };
                assert_eq!(n, 7, "{kind:?} {path:?}");
            }
        }
    }
}
