//! Shared helpers for the integration tests: a fast-configured server, a raw HTTP client
//! and a line reader for watch streams.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};
use serde_json::Value;

/// A config with short timings so tests run fast.
pub fn fast_config() -> ServerConfig {
    ServerConfig {
        bookmark_interval: Duration::from_millis(100),
        too_large_rv_wait: Duration::from_millis(300),
        ..ServerConfig::default()
    }
}

/// Start a server on the test's runtime.
pub async fn start() -> ServerHandle {
    ApiServer::start(fast_config()).await.unwrap()
}

/// Start a server with a custom config.
pub async fn start_with(config: ServerConfig) -> ServerHandle {
    ApiServer::start(config).await.unwrap()
}

/// A kube client for the server.
pub fn kube_client(server: &ServerHandle) -> kube::Client {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// A raw HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Send a raw request and read the whole answer.
pub async fn request(
    method: &str,
    url: &str,
    content_type: Option<&str>,
    body: impl Into<Bytes>,
) -> Answer {
    let headers: Vec<(&str, &str)> = content_type
        .map(|ct| ("content-type", ct))
        .into_iter()
        .collect();
    request_with(method, url, &headers, body).await
}

/// Send a raw request with these headers and read the whole answer.
pub async fn request_with(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Answer {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body.into())).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("request timed out")
        .expect("request failed");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(20), resp.into_body().collect())
        .await
        .expect("body timed out")
        .expect("body failed")
        .to_bytes();
    Answer {
        status,
        headers,
        body,
    }
}

pub async fn get(url: &str) -> Answer {
    request("GET", url, None, Bytes::new()).await
}

pub async fn post_json(url: &str, body: &Value) -> Answer {
    request("POST", url, Some("application/json"), body.to_string()).await
}

pub async fn put_json(url: &str, body: &Value) -> Answer {
    request("PUT", url, Some("application/json"), body.to_string()).await
}

pub async fn merge_patch(url: &str, body: &Value) -> Answer {
    request(
        "PATCH",
        url,
        Some("application/merge-patch+json"),
        body.to_string(),
    )
    .await
}

pub async fn delete(url: &str) -> Answer {
    request("DELETE", url, None, Bytes::new()).await
}

/// A namespaced CRD `gadgets.example.org` (kind Gadget, short name `gd`, category `all`)
/// with a status subresource, a scale subresource, and two versions: `v1` (storage) and
/// `v2` (served, same storage). The schema wants an integer `spec.size`.
pub fn gadget_crd() -> Value {
    let schema = serde_json::json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer"},
            "replicas": {"type": "integer"},
            "color": {"type": "string", "enum": ["red", "blue"]}
        }},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }}});
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList", "shortNames": ["gd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema,
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}},
                {"name": "v2", "served": true, "storage": false, "schema": schema}
            ]
        }
    })
}

/// An open watch stream read line by line.
pub struct WatchLines {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
    pub status: u16,
    ended: bool,
}

/// One line of a watch stream.
#[derive(Debug, Clone)]
pub enum Line {
    Event(Value),
    Malformed(String),
}

impl Line {
    pub fn event(&self) -> &Value {
        match self {
            Line::Event(v) => v,
            Line::Malformed(s) => panic!("malformed line: {s}"),
        }
    }
    pub fn kind(&self) -> &str {
        self.event()["type"].as_str().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.event()["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
    }
    pub fn rv(&self) -> u64 {
        self.event()["object"]["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }
}

impl WatchLines {
    pub async fn open(url: &str) -> WatchLines {
        Self::open_with_accept(url, None).await
    }

    pub async fn open_with_accept(url: &str, accept: Option<&str>) -> WatchLines {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let mut req = http::Request::builder().method("GET").uri(url);
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let resp = tokio::time::timeout(
            Duration::from_secs(10),
            client.request(req.body(Full::new(Bytes::new())).unwrap()),
        )
        .await
        .expect("watch open timed out")
        .expect("watch open failed");
        WatchLines {
            status: resp.status().as_u16(),
            body: resp.into_body(),
            buf: Vec::new(),
            ended: false,
        }
    }

    /// Next line, `None` when the server ended the stream; panics after `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<Line> {
        tokio::time::timeout(within, self.next_line())
            .await
            .unwrap_or_else(|_| panic!("no watch line within {within:?}"))
    }

    /// Next line or `None` at end of stream (no deadline: callers wrap it).
    pub async fn next_line(&mut self) -> Option<Line> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]).to_string();
                return Some(match serde_json::from_str::<Value>(&text) {
                    Ok(v) => Line::Event(v),
                    Err(_) => Line::Malformed(text),
                });
            }
            if self.ended {
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                _ => self.ended = true,
            }
        }
    }

    /// Read lines until `pred` matches one, skipping BOOKMARKs unless asked for; panics on timeout.
    pub async fn until(&mut self, within: Duration, mut pred: impl FnMut(&Line) -> bool) -> Line {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await {
                Some(l) if pred(&l) => return l,
                Some(_) => {}
                None => panic!("watch ended before the expected line"),
            }
        }
    }

    /// Collect non-BOOKMARK events until `n` were seen.
    pub async fn events(&mut self, n: usize, within: Duration) -> Vec<Line> {
        let deadline = tokio::time::Instant::now() + within;
        let mut out = Vec::new();
        while out.len() < n {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await {
                Some(l) => {
                    if !matches!(&l, Line::Event(v) if v["type"] == "BOOKMARK") {
                        out.push(l);
                    }
                }
                None => panic!("watch ended after {} of {n} events", out.len()),
            }
        }
        out
    }

    /// Wait for the end of the stream; panics on timeout. Returns the remaining lines.
    pub async fn until_end(&mut self, within: Duration) -> Vec<Line> {
        let deadline = tokio::time::Instant::now() + within;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(left).await {
                Some(l) => out.push(l),
                None => return out,
            }
        }
    }
}

/// A ConfigMap body.
pub fn cm(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"key": name},
    })
}

/// Poll `cond` until true, panicking after `within`.
pub async fn eventually(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
