//! The benchmark's objects, generated deterministically: ~6.8 KB Pods with
//! managedFields, and the write timestamp that measures write-to-delivery
//! latency across processes.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// The annotation carrying the wall-clock nanoseconds at which the parent wrote the object.
pub const TS_ANNOTATION: &str = "bench.kinformer.dev/written-at";
/// The write counter of a churn object that has no `data` (a Pod).
pub const COUNTER_ANNOTATION: &str = "bench.kinformer.dev/counter";

/// Wall-clock nanoseconds since the Unix epoch. Parent and child are on the
/// same machine, so their clocks agree; only differences are used.
pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Name of the i-th seeded object (the server's ConfigMap seeder uses the same).
pub fn seed_name(index: usize) -> String {
    format!("seed-{index:06}")
}

/// The index back from a seeded name (`seed-000042` → 42).
pub fn seed_index(name: &str) -> Option<usize> {
    name.strip_prefix("seed-")?.parse().ok()
}

/// A deterministic Pod of about 6.8 KB once the server has filled its metadata,
/// about half of it `metadata.managedFields` (as on a real cluster).
pub fn pod(index: usize, namespace: &str) -> Value {
    let name = seed_name(index);
    let app = format!("app-{}", index % 50);
    let hash = format!(
        "{:010x}",
        (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24
    );
    let node = format!("node-{:03}", index % 100);
    let tier = ["web", "api", "db", "cache"][index % 4];
    let ip = format!(
        "10.{}.{}.{}",
        (index >> 16) & 255,
        (index >> 8) & 255,
        index & 255
    );
    let env: Vec<Value> = (0..8)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{index}-{i}")}))
        .collect();
    let container = |cname: &str, port: u16| {
        json!({
            "name": cname,
            "image": format!("registry.example.com/team/{app}/{cname}:1.{}.{}", index % 7, index % 13),
            "imagePullPolicy": "IfNotPresent",
            "args": ["--port", port.to_string(), "--log-level=info", "--metrics"],
            "env": env,
            "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
            "resources": {
                "limits": {"cpu": "500m", "memory": "256Mi"},
                "requests": {"cpu": "100m", "memory": "128Mi"}
            },
            "readinessProbe": {
                "httpGet": {"path": "/ready", "port": port, "scheme": "HTTP"},
                "periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3
            },
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/config", "readOnly": true},
                {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}
            ],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"
        })
    };
    let fields_spec = json!({
        "f:metadata": {
            "f:generateName": {},
            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}},
            "f:ownerReferences": {".": {}, "k:{\"uid\":\"owner\"}": {}}
        },
        "f:spec": {
            "f:containers": {
                "k:{\"name\":\"main\"}": {
                    ".": {}, "f:args": {}, "f:env": {".": {}, "k:{\"name\":\"SETTING_0\"}": {".": {}, "f:name": {}, "f:value": {}},
                        "k:{\"name\":\"SETTING_1\"}": {".": {}, "f:name": {}, "f:value": {}}},
                    "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                    "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                    "f:readinessProbe": {".": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}},
                    "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                    "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {}
                },
                "k:{\"name\":\"sidecar\"}": {
                    ".": {}, "f:args": {}, "f:image": {}, "f:name": {}, "f:resources": {".": {}, "f:limits": {}, "f:requests": {}}
                }
            },
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
            "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
            "f:volumes": {".": {}, "k:{\"name\":\"config\"}": {".": {}, "f:configMap": {".": {}, "f:defaultMode": {}, "f:name": {}}, "f:name": {}}}
        }
    });
    let fields_status = json!({
        "f:status": {
            "f:conditions": {
                "k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
            },
            "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
            "f:podIPs": {".": {}, "k:{\"ip\":\"10.0.0.1\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}
        }
    });
    let condition = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2024-05-01T10:00:00Z"});
    let container_status = |cname: &str| {
        json!({
            "name": cname, "ready": true, "restartCount": index % 3, "started": true,
            "image": format!("registry.example.com/team/{app}/{cname}:1.{}.{}", index % 7, index % 13),
            "imageID": format!("registry.example.com/team/{app}/{cname}@sha256:{hash}{hash}{hash}{hash}{hash}{hash}abcd"),
            "containerID": format!("containerd://{hash}{hash}{hash}{hash}{hash}{hash}abcd"),
            "lastState": {},
            "state": {"running": {"startedAt": "2024-05-01T10:00:05Z"}}
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generateName": format!("{app}-{hash}-"),
            "labels": {"app": app, "pod-template-hash": hash, "tier": tier},
            "annotations": {"kubernetes.io/psp": "restricted", "prometheus.io/scrape": "true"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{hash}"),
                "uid": format!("{hash}-0000-4000-8000-{hash}00"), "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields_spec},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                 "time": "2024-05-01T10:00:06Z", "fieldsType": "FieldsV1", "fieldsV1": fields_status}
            ]
        },
        "spec": {
            "containers": [container("main", 8080), container("sidecar", 9090)],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "nodeName": node,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
            ],
            "volumes": [
                {"name": "config", "configMap": {"name": format!("{app}-config"), "defaultMode": 420}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
                ]}}
            ]
        },
        "status": {
            "phase": "Running",
            "hostIP": format!("192.168.{}.{}", (index >> 8) & 255, index & 255),
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "qosClass": "Burstable",
            "startTime": "2024-05-01T10:00:00Z",
            "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "containerStatuses": [container_status("main"), container_status("sidecar")]
        }
    })
}

/// A ConfigMap for the churn workloads (`churn-00042`), about 1.3 KB.
pub fn churn_configmap(index: usize) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("churn-{index:05}"),
            "labels": {"app": "churn", "shard": (index % 10).to_string()},
            "annotations": {TS_ANNOTATION: "0"}
        },
        "data": {
            "counter": "0",
            "alpha": "a".repeat(300),
            "beta": "b".repeat(300),
            "gamma": "c".repeat(300),
        }
    })
}

/// A Pod for the churn workloads (`churn-00042`, `pod`'s 6.8 KB Pod
/// renamed), for `--churn-kind pod`.
pub fn churn_pod(index: usize, namespace: &str) -> Value {
    let mut p = pod(index, namespace);
    p["metadata"]["name"] = Value::String(format!("churn-{index:05}"));
    p["metadata"]["annotations"][TS_ANNOTATION] = Value::String("0".into());
    p
}

/// Sets the write timestamp (now) and bumps the counter of a churn object:
/// `data.counter` of a ConfigMap, an annotation of a Pod.
pub fn stamp(object: &mut Value, counter: u64) {
    object["metadata"]["annotations"][TS_ANNOTATION] = Value::String(now_nanos().to_string());
    let counter = Value::String(counter.to_string());
    if object.get("data").is_some() {
        object["data"]["counter"] = counter;
    } else {
        object["metadata"]["annotations"][COUNTER_ANNOTATION] = counter;
    }
}

/// The write timestamp of an object's annotations, if it has one.
pub fn written_at(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<u64> {
    annotations?
        .get(TS_ANNOTATION)?
        .parse()
        .ok()
        .filter(|t| *t > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_deterministic_and_about_6_8_kb() {
        assert_eq!(pod(7, "ns"), pod(7, "ns"));
        assert_ne!(pod(7, "ns"), pod(8, "ns"));
        // The server adds uid, resourceVersion and creationTimestamp (~150 bytes).
        let len = pod(12_345, "bench").to_string().len();
        assert!((6_300..7_000).contains(&len), "{len}");
        let managed = pod(12_345, "bench")["metadata"]["managedFields"]
            .to_string()
            .len();
        assert!(managed > 2_000, "{managed}");
        let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod(3, "x")).unwrap();
        assert_eq!(typed.metadata.managed_fields.map(|m| m.len()), Some(2));
    }

    #[test]
    fn names_round_trip_and_stamps_parse() {
        assert_eq!(seed_index(&seed_name(42)), Some(42));
        let mut cm = churn_configmap(3);
        stamp(&mut cm, 9);
        let typed: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(cm).unwrap();
        let ts = written_at(typed.metadata.annotations.as_ref()).unwrap();
        assert!(ts <= now_nanos());
        assert_eq!(typed.data.unwrap()["counter"], "9");
    }
}
