//! Decode-only throughput: the same list pages an informer would fetch, held
//! as text, then only decoded (as kube-client's `Api::list` decodes them).

use std::time::Instant;

use anyhow::Context as _;
use kube::api::ListParams;
use kube::core::{ObjectList, Request};
use serde_json::{Value, json};

use super::KrtObject;
use crate::proto::ChildSpec;

/// A list page's `metadata` alone (its items skipped by the parser).
#[derive(serde::Deserialize)]
struct ListHead {
    metadata: kube::core::ListMeta,
}

/// Fetches every page of the namespace's list, then times decoding them.
pub async fn run<K>(client: &kube::Client, spec: &ChildSpec) -> anyhow::Result<Value>
where
    K: KrtObject + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let url = kube::Api::<K>::namespaced(client.clone(), &spec.namespace)
        .resource_url()
        .to_owned();
    let request = Request::new(url);
    let mut pages: Vec<String> = Vec::new();
    let fetch_start = Instant::now();
    let mut lp = ListParams {
        limit: Some(spec.page_size),
        ..ListParams::default()
    };
    loop {
        let text = client
            .request_text(request.list(&lp).context("list request")?)
            .await?;
        // Only the list's metadata: its items are skipped, not decoded (a
        // decode here ran on cold memory and was over-subtracted below).
        let head: ListHead = serde_json::from_str(&text)?;
        pages.push(text);
        match head.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp.continue_token = Some(token),
            None => break,
        }
    }
    let fetched = fetch_start.elapsed().as_secs_f64();
    let bytes: usize = pages.iter().map(String::len).sum();
    // Two passes; the faster one counts (the first may pay for page faults).
    let mut best = f64::MAX;
    let mut objects = 0;
    for _ in 0..2 {
        let start = Instant::now();
        objects = 0;
        for text in &pages {
            let page: ObjectList<K> = serde_json::from_str(text)?;
            objects += page.items.len();
            drop(std::hint::black_box(page));
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    let fetch_only = fetched.max(1e-9);
    Ok(json!({
        "objects": objects,
        "fetch_ms": fetch_only * 1000.0,
        "fetch_objects_per_s": objects as f64 / fetch_only,
        "bytes": bytes,
        "decode_ms": best * 1000.0,
        "objects_per_s": objects as f64 / best,
        "mb_per_s": bytes as f64 / best / 1e6,
    }))
}
