//! Issue 24's protobuf evaluation: decoding the benchmark's Pods from
//! protobuf (k8s-pb/prost, then moved into k8s-openapi types) against
//! kinformer's simd-json path, one thread, per Pod. BENCHMARKS.md,
//! "Protobuf evaluation", has the figures and the decision.
//!
//! Run: `cargo run --release -p kinformer-bench --example protobuf_decode`
//!
//! The conversions cover the fields the benchmark's Pods use (checked by a
//! round trip), not every field of a Pod: they measure, they are not a codec.
use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1 as oa;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as OQ;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as om;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString as OI;
use k8s_openapi::jiff::Timestamp;
use k8s_pb::api::core::v1 as pb;
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PQ;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pm;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString as PI;
use kinformer_actors::reflector::decode::{DecodeOptions, ObjectDecoder};
use prost::Message;

// ---------- openapi -> pb (only to make the bytes) ----------
fn t2p(t: &om::Time) -> pm::Time {
    pm::Time {
        seconds: Some(t.0.as_second()),
        nanos: Some(t.0.subsec_nanosecond()),
    }
}
fn q2p(m: &BTreeMap<String, OQ>) -> BTreeMap<String, PQ> {
    m.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                PQ {
                    string: Some(v.0.clone()),
                },
            )
        })
        .collect()
}
fn meta2p(m: &om::ObjectMeta) -> pm::ObjectMeta {
    pm::ObjectMeta {
        name: m.name.clone(),
        generate_name: m.generate_name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        creation_timestamp: m.creation_timestamp.as_ref().map(t2p),
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        owner_references: m
            .owner_references
            .iter()
            .flatten()
            .map(|o| pm::OwnerReference {
                api_version: Some(o.api_version.clone()),
                kind: Some(o.kind.clone()),
                name: Some(o.name.clone()),
                uid: Some(o.uid.clone()),
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
        managed_fields: m
            .managed_fields
            .iter()
            .flatten()
            .map(|f| pm::ManagedFieldsEntry {
                manager: f.manager.clone(),
                operation: f.operation.clone(),
                api_version: f.api_version.clone(),
                time: f.time.as_ref().map(t2p),
                fields_type: f.fields_type.clone(),
                fields_v1: f.fields_v1.as_ref().map(|v| pm::FieldsV1 {
                    raw: Some(serde_json::to_vec(&v.0).unwrap()),
                }),
                subresource: f.subresource.clone(),
            })
            .collect(),
        ..Default::default()
    }
}
fn container2p(c: &oa::Container) -> pb::Container {
    pb::Container {
        name: Some(c.name.clone()),
        image: c.image.clone(),
        args: c.args.clone().unwrap_or_default(),
        image_pull_policy: c.image_pull_policy.clone(),
        env: c
            .env
            .iter()
            .flatten()
            .map(|e| pb::EnvVar {
                name: Some(e.name.clone()),
                value: e.value.clone(),
                value_from: None,
            })
            .collect(),
        ports: c
            .ports
            .iter()
            .flatten()
            .map(|p| pb::ContainerPort {
                name: p.name.clone(),
                container_port: Some(p.container_port),
                protocol: p.protocol.clone(),
                ..Default::default()
            })
            .collect(),
        resources: c.resources.as_ref().map(|r| pb::ResourceRequirements {
            limits: r.limits.as_ref().map(q2p).unwrap_or_default(),
            requests: r.requests.as_ref().map(q2p).unwrap_or_default(),
            claims: vec![],
        }),
        readiness_probe: c.readiness_probe.as_ref().map(|p| pb::Probe {
            handler: Some(pb::ProbeHandler {
                http_get: p.http_get.as_ref().map(|h| pb::HttpGetAction {
                    path: h.path.clone(),
                    port: Some(match &h.port {
                        OI::Int(i) => PI {
                            r#type: Some(0),
                            int_val: Some(*i),
                            str_val: None,
                        },
                        OI::String(s) => PI {
                            r#type: Some(1),
                            int_val: None,
                            str_val: Some(s.clone()),
                        },
                    }),
                    scheme: h.scheme.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            period_seconds: p.period_seconds,
            timeout_seconds: p.timeout_seconds,
            success_threshold: p.success_threshold,
            failure_threshold: p.failure_threshold,
            ..Default::default()
        }),
        volume_mounts: c
            .volume_mounts
            .iter()
            .flatten()
            .map(|v| pb::VolumeMount {
                name: Some(v.name.clone()),
                mount_path: Some(v.mount_path.clone()),
                read_only: v.read_only,
                ..Default::default()
            })
            .collect(),
        termination_message_path: c.termination_message_path.clone(),
        termination_message_policy: c.termination_message_policy.clone(),
        ..Default::default()
    }
}
fn to_pb(p: &oa::Pod) -> pb::Pod {
    let s = p.spec.as_ref().unwrap();
    let st = p.status.as_ref().unwrap();
    pb::Pod {
        metadata: Some(meta2p(&p.metadata)),
        spec: Some(pb::PodSpec {
            containers: s.containers.iter().map(container2p).collect(),
            dns_policy: s.dns_policy.clone(),
            enable_service_links: s.enable_service_links,
            node_name: s.node_name.clone(),
            restart_policy: s.restart_policy.clone(),
            scheduler_name: s.scheduler_name.clone(),
            security_context: s
                .security_context
                .as_ref()
                .map(|_| pb::PodSecurityContext::default()),
            service_account_name: s.service_account_name.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s
                .tolerations
                .iter()
                .flatten()
                .map(|t| pb::Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    toleration_seconds: t.toleration_seconds,
                })
                .collect(),
            volumes: s
                .volumes
                .iter()
                .flatten()
                .map(|v| pb::Volume {
                    name: Some(v.name.clone()),
                    volume_source: Some(pb::VolumeSource {
                        config_map: v.config_map.as_ref().map(|c| pb::ConfigMapVolumeSource {
                            local_object_reference: Some(pb::LocalObjectReference {
                                name: Some(c.name.clone()),
                            }),
                            default_mode: c.default_mode,
                            ..Default::default()
                        }),
                        projected: v.projected.as_ref().map(|pr| pb::ProjectedVolumeSource {
                            default_mode: pr.default_mode,
                            sources: pr
                                .sources
                                .iter()
                                .flatten()
                                .map(|src| pb::VolumeProjection {
                                    service_account_token: src.service_account_token.as_ref().map(
                                        |t| pb::ServiceAccountTokenProjection {
                                            audience: t.audience.clone(),
                                            expiration_seconds: t.expiration_seconds,
                                            path: Some(t.path.clone()),
                                        },
                                    ),
                                    config_map: src.config_map.as_ref().map(|c| {
                                        pb::ConfigMapProjection {
                                            local_object_reference: Some(
                                                pb::LocalObjectReference {
                                                    name: Some(c.name.clone()),
                                                },
                                            ),
                                            items: c
                                                .items
                                                .iter()
                                                .flatten()
                                                .map(|k| pb::KeyToPath {
                                                    key: Some(k.key.clone()),
                                                    path: Some(k.path.clone()),
                                                    mode: k.mode,
                                                })
                                                .collect(),
                                            optional: c.optional,
                                        }
                                    }),
                                    ..Default::default()
                                })
                                .collect(),
                        }),
                        ..Default::default()
                    }),
                })
                .collect(),
            ..Default::default()
        }),
        status: Some(pb::PodStatus {
            phase: st.phase.clone(),
            host_ip: st.host_ip.clone(),
            pod_ip: st.pod_ip.clone(),
            qos_class: st.qos_class.clone(),
            start_time: st.start_time.as_ref().map(t2p),
            pod_ips: st
                .pod_ips
                .iter()
                .flatten()
                .map(|i| pb::PodIp {
                    ip: Some(i.ip.clone()),
                })
                .collect(),
            conditions: st
                .conditions
                .iter()
                .flatten()
                .map(|c| pb::PodCondition {
                    r#type: Some(c.type_.clone()),
                    status: Some(c.status.clone()),
                    last_probe_time: c.last_probe_time.as_ref().map(t2p),
                    last_transition_time: c.last_transition_time.as_ref().map(t2p),
                    ..Default::default()
                })
                .collect(),
            container_statuses: st
                .container_statuses
                .iter()
                .flatten()
                .map(|c| pb::ContainerStatus {
                    name: Some(c.name.clone()),
                    ready: Some(c.ready),
                    restart_count: Some(c.restart_count),
                    started: c.started,
                    image: Some(c.image.clone()),
                    image_id: Some(c.image_id.clone()),
                    container_id: c.container_id.clone(),
                    last_state: c.last_state.as_ref().map(|_| pb::ContainerState::default()),
                    state: c.state.as_ref().map(|s| pb::ContainerState {
                        running: s.running.as_ref().map(|r| pb::ContainerStateRunning {
                            started_at: r.started_at.as_ref().map(t2p),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
    }
}

// ---------- pb -> openapi, moving every field (the cost to measure) ----------
fn t2o(t: pm::Time) -> om::Time {
    om::Time(Timestamp::new(t.seconds.unwrap_or(0), t.nanos.unwrap_or(0)).unwrap_or_default())
}
fn q2o(m: BTreeMap<String, PQ>) -> Option<BTreeMap<String, OQ>> {
    if m.is_empty() {
        None
    } else {
        Some(
            m.into_iter()
                .map(|(k, v)| (k, OQ(v.string.unwrap_or_default())))
                .collect(),
        )
    }
}
fn opt_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    if v.is_empty() { None } else { Some(v) }
}
fn opt_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if m.is_empty() { None } else { Some(m) }
}
fn meta2o(m: pm::ObjectMeta, managed: bool) -> om::ObjectMeta {
    om::ObjectMeta {
        name: m.name,
        generate_name: m.generate_name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        creation_timestamp: m.creation_timestamp.map(t2o),
        labels: opt_map(m.labels),
        annotations: opt_map(m.annotations),
        owner_references: opt_vec(
            m.owner_references
                .into_iter()
                .map(|o| om::OwnerReference {
                    api_version: o.api_version.unwrap_or_default(),
                    kind: o.kind.unwrap_or_default(),
                    name: o.name.unwrap_or_default(),
                    uid: o.uid.unwrap_or_default(),
                    controller: o.controller,
                    block_owner_deletion: o.block_owner_deletion,
                })
                .collect(),
        ),
        managed_fields: if managed {
            opt_vec(
                m.managed_fields
                    .into_iter()
                    .map(|f| om::ManagedFieldsEntry {
                        manager: f.manager,
                        operation: f.operation,
                        api_version: f.api_version,
                        time: f.time.map(t2o),
                        fields_type: f.fields_type,
                        fields_v1: f
                            .fields_v1
                            .and_then(|v| v.raw)
                            .map(|raw| om::FieldsV1(serde_json::from_slice(&raw).unwrap())),
                        subresource: f.subresource,
                    })
                    .collect(),
            )
        } else {
            None
        },
        ..Default::default()
    }
}
fn container2o(c: pb::Container) -> oa::Container {
    oa::Container {
        name: c.name.unwrap_or_default(),
        image: c.image,
        args: opt_vec(c.args),
        image_pull_policy: c.image_pull_policy,
        env: opt_vec(
            c.env
                .into_iter()
                .map(|e| oa::EnvVar {
                    name: e.name.unwrap_or_default(),
                    value: e.value,
                    value_from: None,
                })
                .collect(),
        ),
        ports: opt_vec(
            c.ports
                .into_iter()
                .map(|p| oa::ContainerPort {
                    name: p.name,
                    container_port: p.container_port.unwrap_or_default(),
                    protocol: p.protocol,
                    ..Default::default()
                })
                .collect(),
        ),
        resources: c.resources.map(|r| oa::ResourceRequirements {
            limits: q2o(r.limits),
            requests: q2o(r.requests),
            claims: None,
        }),
        readiness_probe: c.readiness_probe.map(|p| {
            let h = p.handler.unwrap_or_default();
            oa::Probe {
                http_get: h.http_get.map(|h| oa::HTTPGetAction {
                    path: h.path,
                    port: match h.port.unwrap_or_default() {
                        PI {
                            r#type: Some(1),
                            str_val,
                            ..
                        } => OI::String(str_val.unwrap_or_default()),
                        PI { int_val, .. } => OI::Int(int_val.unwrap_or_default()),
                    },
                    scheme: h.scheme,
                    ..Default::default()
                }),
                period_seconds: p.period_seconds,
                timeout_seconds: p.timeout_seconds,
                success_threshold: p.success_threshold,
                failure_threshold: p.failure_threshold,
                ..Default::default()
            }
        }),
        volume_mounts: opt_vec(
            c.volume_mounts
                .into_iter()
                .map(|v| oa::VolumeMount {
                    name: v.name.unwrap_or_default(),
                    mount_path: v.mount_path.unwrap_or_default(),
                    read_only: v.read_only,
                    ..Default::default()
                })
                .collect(),
        ),
        termination_message_path: c.termination_message_path,
        termination_message_policy: c.termination_message_policy,
        ..Default::default()
    }
}
fn from_pb(p: pb::Pod, managed: bool) -> oa::Pod {
    let s = p.spec.unwrap_or_default();
    let st = p.status.unwrap_or_default();
    oa::Pod {
        metadata: meta2o(p.metadata.unwrap_or_default(), managed),
        spec: Some(oa::PodSpec {
            containers: s.containers.into_iter().map(container2o).collect(),
            dns_policy: s.dns_policy,
            enable_service_links: s.enable_service_links,
            node_name: s.node_name,
            restart_policy: s.restart_policy,
            scheduler_name: s.scheduler_name,
            security_context: s
                .security_context
                .map(|_| oa::PodSecurityContext::default()),
            service_account_name: s.service_account_name,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: opt_vec(
                s.tolerations
                    .into_iter()
                    .map(|t| oa::Toleration {
                        key: t.key,
                        operator: t.operator,
                        value: t.value,
                        effect: t.effect,
                        toleration_seconds: t.toleration_seconds,
                    })
                    .collect(),
            ),
            volumes: opt_vec(
                s.volumes
                    .into_iter()
                    .map(|v| {
                        let src = v.volume_source.unwrap_or_default();
                        oa::Volume {
                            name: v.name.unwrap_or_default(),
                            config_map: src.config_map.map(|c| oa::ConfigMapVolumeSource {
                                name: c
                                    .local_object_reference
                                    .and_then(|r| r.name)
                                    .unwrap_or_default(),
                                default_mode: c.default_mode,
                                ..Default::default()
                            }),
                            projected: src.projected.map(|pr| oa::ProjectedVolumeSource {
                                default_mode: pr.default_mode,
                                default_user: None,
                                sources: opt_vec(
                                    pr.sources
                                        .into_iter()
                                        .map(|x| oa::VolumeProjection {
                                            service_account_token: x.service_account_token.map(
                                                |t| oa::ServiceAccountTokenProjection {
                                                    audience: t.audience,
                                                    expiration_seconds: t.expiration_seconds,
                                                    path: t.path.unwrap_or_default(),
                                                    ..Default::default()
                                                },
                                            ),
                                            config_map: x.config_map.map(|c| {
                                                oa::ConfigMapProjection {
                                                    name: c
                                                        .local_object_reference
                                                        .and_then(|r| r.name)
                                                        .unwrap_or_default(),
                                                    items: opt_vec(
                                                        c.items
                                                            .into_iter()
                                                            .map(|k| oa::KeyToPath {
                                                                key: k.key.unwrap_or_default(),
                                                                path: k.path.unwrap_or_default(),
                                                                mode: k.mode,
                                                                ..Default::default()
                                                            })
                                                            .collect(),
                                                    ),
                                                    optional: c.optional,
                                                }
                                            }),
                                            ..Default::default()
                                        })
                                        .collect(),
                                ),
                            }),
                            ..Default::default()
                        }
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: Some(oa::PodStatus {
            phase: st.phase,
            host_ip: st.host_ip,
            pod_ip: st.pod_ip,
            qos_class: st.qos_class,
            start_time: st.start_time.map(t2o),
            pod_ips: opt_vec(
                st.pod_ips
                    .into_iter()
                    .map(|i| oa::PodIP {
                        ip: i.ip.unwrap_or_default(),
                    })
                    .collect(),
            ),
            conditions: opt_vec(
                st.conditions
                    .into_iter()
                    .map(|c| oa::PodCondition {
                        type_: c.r#type.unwrap_or_default(),
                        status: c.status.unwrap_or_default(),
                        last_probe_time: c.last_probe_time.map(t2o),
                        last_transition_time: c.last_transition_time.map(t2o),
                        ..Default::default()
                    })
                    .collect(),
            ),
            container_statuses: opt_vec(
                st.container_statuses
                    .into_iter()
                    .map(|c| oa::ContainerStatus {
                        name: c.name.unwrap_or_default(),
                        ready: c.ready.unwrap_or_default(),
                        restart_count: c.restart_count.unwrap_or_default(),
                        started: c.started,
                        image: c.image.unwrap_or_default(),
                        image_id: c.image_id.unwrap_or_default(),
                        container_id: c.container_id,
                        last_state: c.last_state.map(|_| oa::ContainerState::default()),
                        state: c.state.map(|s| oa::ContainerState {
                            running: s.running.map(|r| oa::ContainerStateRunning {
                                started_at: r.started_at.map(t2o),
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}

fn main() {
    let n = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut pods = Vec::with_capacity(n);
    for i in 0..n {
        let mut v = kinformer_bench::objects::pod(i, "bench");
        v["metadata"]["uid"] = format!("{i:08}-0000-4000-8000-000000000000").into();
        v["metadata"]["resourceVersion"] = (1000 + i).to_string().into();
        v["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00Z".into();
        let p: oa::Pod = serde_json::from_value(v).unwrap();
        pods.push(p);
    }
    let json: Vec<Vec<u8>> = pods
        .iter()
        .map(|p| serde_json::to_vec(p).unwrap())
        .collect();
    let proto: Vec<Vec<u8>> = pods.iter().map(|p| to_pb(p).encode_to_vec()).collect();
    // Sanity: the protobuf round trip gives the same Pod.
    for (p, b) in pods.iter().zip(&proto).take(50) {
        let back = from_pb(pb::Pod::decode(b.as_slice()).unwrap(), true);
        assert_eq!(&back, p, "round trip");
    }
    let jb: usize = json.iter().map(Vec::len).sum();
    let pbb: usize = proto.iter().map(Vec::len).sum();
    println!("bytes per Pod: JSON {} protobuf {}", jb / n, pbb / n);
    let mut dec = ObjectDecoder::default();
    let skip = DecodeOptions {
        skip_managed_fields: true,
    };
    for round in 0..3 {
        let t = Instant::now();
        let mut k = 0usize;
        for b in &json {
            let p: oa::Pod = dec.decode(b, DecodeOptions::default()).unwrap();
            k += p.metadata.name.map_or(0, |s| s.len());
        }
        let a = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for b in &json {
            let p: oa::Pod = dec.decode(b, skip).unwrap();
            k += p.metadata.name.map_or(0, |s| s.len());
        }
        let a2 = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for b in &proto {
            let p = pb::Pod::decode(b.as_slice()).unwrap();
            k += p.metadata.and_then(|m| m.name).map_or(0, |s| s.len());
        }
        let c = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for b in &proto {
            let p = from_pb(pb::Pod::decode(b.as_slice()).unwrap(), true);
            k += p.metadata.name.map_or(0, |s| s.len());
        }
        let d = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for b in &proto {
            let p = from_pb(pb::Pod::decode(b.as_slice()).unwrap(), false);
            k += p.metadata.name.map_or(0, |s| s.len());
        }
        let e = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!(
            "round {round}: µs per Pod: simd-json {a:.1}, simd-json skipping managedFields {a2:.1}, prost decode only {c:.1}, prost + conversion {d:.1}, prost + conversion without managedFields {e:.1} ({k})"
        );
    }
}
