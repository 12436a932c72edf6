//! Running `kinformer` in a cluster (docs/deploy.md): the Dockerfile's
//! conventions (no Docker engine here: the image itself is not built), the
//! `deploy/` manifests' content and their server-side dry run with kubectl,
//! the ClusterRole against what the configured informers need, and
//! `kinformer run` in in-cluster mode (service-account token and CA over
//! TLS) with exactly the ClusterRole's permissions.
//!
//! The in-cluster test needs `unshare` (util-linux) and user namespaces:
//! kube-client reads the service account from the fixed path
//! `/var/run/secrets/kubernetes.io/serviceaccount/`, so the program runs in
//! a private mount namespace where that path is a tmpfs. It fails, never
//! skips, without them, as the kubectl tests do without kubectl.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kinformer_apiserver::{
    ApiServer, AuthConfig, Authorization, ResourceType, Rule, ServerConfig, TlsConfig, TokenUser,
    UserInfo,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A directory of this test process's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kinformer-deploy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------- Dockerfile

/// One Dockerfile instruction, continuation lines joined.
#[derive(Debug, Clone)]
struct Instruction {
    keyword: String,
    args: String,
}

/// One `FROM` and what follows it.
#[derive(Debug)]
struct Stage {
    image: String,
    name: Option<String>,
    body: Vec<Instruction>,
}

impl Stage {
    fn all<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.body
            .iter()
            .filter(move |i| i.keyword == keyword)
            .map(|i| i.args.as_str())
    }
}

/// The Dockerfile's global `ARG` defaults and its stages, `${ARG}`s replaced.
fn dockerfile() -> (BTreeMap<String, String>, Vec<Stage>) {
    let mut instructions = Vec::new();
    let mut pending = String::new();
    for line in read("Dockerfile").lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (keyword, args) = pending.split_once(' ').unwrap_or((&pending, ""));
                instructions.push(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    args: args.trim().to_owned(),
                });
                pending.clear();
            }
        }
    }
    let mut args = BTreeMap::new();
    let mut stages: Vec<Stage> = Vec::new();
    for i in instructions {
        match (i.keyword.as_str(), stages.last_mut()) {
            ("ARG", None) => {
                let (k, v) = i.args.split_once('=').expect("global ARG with a default");
                args.insert(k.to_owned(), v.to_owned());
            }
            ("FROM", _) => {
                let mut image = i.args.clone();
                for (k, v) in &args {
                    image = image.replace(&format!("${{{k}}}"), v);
                }
                let words: Vec<&str> = image.split_whitespace().collect();
                let name = match words.as_slice() {
                    [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                    [_] => None,
                    other => panic!("FROM {other:?}"),
                };
                stages.push(Stage {
                    image: words[0].to_owned(),
                    name,
                    body: Vec::new(),
                });
            }
            (_, Some(stage)) => stage.body.push(i),
            (k, None) => panic!("{k} before the first FROM"),
        }
    }
    (args, stages)
}

/// `major.minor` as numbers.
fn version(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().expect(text));
    (parts.next().unwrap(), parts.next().unwrap_or(0))
}

/// The port of `--metrics IP:PORT` in the Deployment's container arguments.
fn metrics_port_of(container: &Container) -> u16 {
    let args = container.args.clone().unwrap_or_default();
    let at = args
        .iter()
        .position(|a| a == "--metrics")
        .expect("the container runs with --metrics");
    let addr: SocketAddr = args[at + 1]
        .parse()
        .expect("--metrics IP:PORT, an address other pods reach");
    assert!(
        addr.ip().is_unspecified(),
        "--metrics {addr}: the kubelet's probes and Prometheus come from outside the pod"
    );
    addr.port()
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_as_a_numeric_non_root_user() {
    let (args, stages) = dockerfile();
    assert!(stages.len() >= 2, "a multi-stage build");
    let stage_names: Vec<&str> = stages.iter().filter_map(|s| s.name.as_deref()).collect();
    for stage in &stages {
        if stage_names.contains(&stage.image.as_str()) {
            continue;
        }
        // A tag (or digest) that says which image: never `latest`, never none.
        let (repository, tag) = match stage.image.split_once('@') {
            Some((repo, digest)) => (repo, digest),
            None => {
                let after_slash = stage.image.rsplit('/').next().unwrap();
                let (_, tag) = after_slash
                    .split_once(':')
                    .unwrap_or_else(|| panic!("{}: no tag", stage.image));
                (stage.image.as_str(), tag)
            }
        };
        assert!(
            !tag.is_empty() && tag != "latest",
            "{}: pin a tag",
            stage.image
        );
        if let Some(rust) = repository.strip_prefix("rust:") {
            let wanted = read("Cargo.toml")
                .lines()
                .find_map(|l| l.strip_prefix("rust-version = "))
                .map(|v| v.trim_matches('"').to_owned())
                .expect("rust-version in Cargo.toml");
            let toolchain = rust.split('-').next().unwrap();
            assert!(
                version(toolchain) >= version(&wanted),
                "builder Rust {toolchain} is older than rust-version {wanted}"
            );
        }
    }
    assert!(args.contains_key("RUST_VERSION"), "{args:?}");

    // The build: locked, release, only the program.
    let (builder, runtime) = stages.split_at(stages.len() - 1);
    let runtime = &runtime[0];
    let build = builder
        .iter()
        .find(|s| {
            s.all("RUN").any(|r| {
                r.contains("cargo build --release --locked") && r.contains("--bin kinformer")
            })
        })
        .expect("a stage runs `cargo build --release --locked ... --bin kinformer`");
    let build_name = build.name.as_deref().expect("the build stage is named");
    assert!(
        build.all("RUN").any(|r| r.contains("cargo fetch --locked")),
        "dependencies fetched in a layer of their own"
    );

    // The runtime: the binary from the build, the config, a numeric user.
    assert!(
        runtime
            .all("COPY")
            .any(|c| c.starts_with(&format!("--from={build_name} "))
                && c.ends_with(" /usr/local/bin/kinformer")),
        "the binary comes from the {build_name} stage"
    );
    assert_eq!(
        runtime.all("RUN").count(),
        0,
        "the runtime image has no shell"
    );
    assert_eq!(
        runtime.all("HEALTHCHECK").count(),
        0,
        "Kubernetes ignores HEALTHCHECK: the Deployment's probes do that job"
    );
    let user = runtime
        .all("USER")
        .last()
        .expect("USER in the runtime stage");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let uid: u32 = uid
        .parse()
        .expect("a numeric uid: the kubelet cannot check runAsNonRoot against a name");
    let gid: u32 = gid.parse().expect("a numeric gid");
    assert!(uid != 0 && gid != 0, "USER {user}: not root");
    assert_eq!(
        runtime.all("ENTRYPOINT").last(),
        Some(r#"["/usr/local/bin/kinformer"]"#)
    );
    let config_at = runtime
        .all("COPY")
        .find_map(|c| c.strip_prefix("config.toml "))
        .expect("the repository's config.toml is copied into the image");
    assert!(
        runtime
            .all("ENV")
            .any(|e| e == format!("KINFORMER_CONFIG={config_at}")),
        "KINFORMER_CONFIG points at {config_at}"
    );
    let exposed: Vec<u16> = runtime
        .all("EXPOSE")
        .flat_map(|e| e.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().unwrap())
        .collect();

    // The image and the Deployment agree: port, user, where the config goes.
    let deployment: Deployment = only(&manifests("deploy"), "Deployment");
    let pod = deployment.spec.template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(exposed, [metrics_port_of(container)]);
    let security = pod.security_context.unwrap();
    assert_eq!(security.run_as_user, Some(i64::from(uid)));
    let mount = container.volume_mounts.as_ref().unwrap()[0]
        .mount_path
        .clone();
    assert_eq!(
        config_at,
        format!("{mount}/config.toml"),
        "the ConfigMap is mounted where the image reads its config"
    );

    let ignored = docker_ignored();
    for must in ["target", ".git"] {
        assert!(
            ignored.iter().any(|(name, _)| name == must),
            "{must} in .dockerignore"
        );
    }
}

/// `.dockerignore`'s patterns as (name, anywhere): `name` matches the
/// context's top level, `**/name` any depth (all this repository uses).
fn docker_ignored() -> Vec<(String, bool)> {
    read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.strip_prefix("**/") {
            Some(name) => (name.to_owned(), true),
            None => (l.trim_end_matches('/').to_owned(), false),
        })
        .collect()
}

/// Runs the Dockerfile's build stages on this machine, as a Docker engine
/// would (COPY from the context less `.dockerignore`, keeping modification
/// times; RUN with `sh -c` in the WORKDIR), each stage's `/` a directory of
/// its own; then runs the binary the runtime stage would copy. Several
/// minutes (a release build from scratch, twice: stubs, then sources):
/// `cargo test --test deploy -- --ignored dockerfile_build_stages`.
#[test]
#[ignore = "a release build from scratch: several minutes"]
fn dockerfile_build_stages_run_on_this_machine() {
    let (_, stages) = dockerfile();
    let root = scratch("docker");
    let context = repo();
    let ignored = docker_ignored();
    let skip = |p: &Path| {
        p.strip_prefix(context).is_ok_and(|rel| {
            rel.components().enumerate().any(|(depth, c)| {
                ignored.iter().any(|(name, anywhere)| {
                    (*anywhere || depth == 0) && c.as_os_str() == name.as_str()
                })
            })
        })
    };
    // A path in stage `name`'s file system, on the host.
    let in_stage = |name: &str, p: &Path| root.join(name).join(p.strip_prefix("/").unwrap_or(p));
    let (runtime, builds) = stages.split_last().unwrap();
    for stage in builds {
        let name = stage.name.clone().expect("named build stages");
        let mut workdir = PathBuf::from("/");
        for i in &stage.body {
            match i.keyword.as_str() {
                "WORKDIR" => {
                    workdir = workdir.join(&i.args);
                    std::fs::create_dir_all(in_stage(&name, &workdir)).unwrap();
                }
                "COPY" => {
                    let words: Vec<&str> = i.args.split_whitespace().collect();
                    let (src, dst) = match words.as_slice() {
                        [from, src, dst] => {
                            let other = from.strip_prefix("--from=").expect(&i.args);
                            (in_stage(other, Path::new(src)), *dst)
                        }
                        [src, dst] => (context.join(src), *dst),
                        _ => panic!("COPY {}", i.args),
                    };
                    copy_tree(&src, &in_stage(&name, &workdir.join(dst)), &skip);
                }
                "RUN" => {
                    let status = Command::new("sh")
                        .arg("-c")
                        .arg(&i.args)
                        .current_dir(in_stage(&name, &workdir))
                        .env_remove("CARGO_TARGET_DIR")
                        .env("CARGO_TERM_COLOR", "never")
                        .status()
                        .expect("sh");
                    assert!(status.success(), "RUN {} in stage {name}", i.args);
                }
                other => panic!("{other} is not interpreted here: extend this test"),
            }
        }
    }
    // The binary the runtime stage copies is the program, not a stub.
    let binary = runtime
        .all("COPY")
        .find_map(|c| {
            let words: Vec<&str> = c.split_whitespace().collect();
            match words.as_slice() {
                [from, src, "/usr/local/bin/kinformer"] => {
                    Some(in_stage(from.strip_prefix("--from=")?, Path::new(src)))
                }
                _ => None,
            }
        })
        .expect("the runtime stage copies the binary from a build stage");
    let out = Command::new(&binary)
        .args(["config", "--config"])
        .arg(repo().join("config.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config: Value = serde_json::from_slice(&out.stdout).expect("the real program's JSON");
    assert!(config["informers"].is_array(), "{config}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `cp -a`-like: directories made, files copied with their modification times.
fn copy_tree(src: &Path, dst: &Path, skip: &dyn Fn(&Path) -> bool) {
    if skip(src) {
        return;
    }
    let meta = std::fs::symlink_metadata(src).unwrap_or_else(|e| panic!("{src:?}: {e}"));
    if meta.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for entry in std::fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &dst.join(entry.file_name()), skip);
        }
    } else if meta.is_file() {
        std::fs::copy(src, dst).unwrap();
        let file = std::fs::File::options().write(true).open(dst).unwrap();
        file.set_modified(meta.modified().unwrap()).unwrap();
    }
}

// ---------------------------------------------------------------- manifests

/// Every document of `dir`'s `.yaml` files (not its subdirectories, as
/// `kubectl apply -f DIR`), in the order kubectl applies them: by file name.
fn manifests(dir: &str) -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        out.extend(
            docs.into_iter()
                .filter(|d| !d.is_null())
                .map(|d| (name.clone(), d)),
        );
    }
    out
}

/// The one object of `kind`, typed.
fn only<T: DeserializeOwned>(docs: &[(String, Value)], kind: &str) -> T {
    let mut found = docs.iter().filter(|(_, d)| d["kind"] == kind);
    let (_, doc) = found.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(found.next().is_none(), "one {kind}");
    serde_json::from_value(doc.clone()).unwrap()
}

/// The first JSON pointer where `a` and `b` differ.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => first_difference(l, r, format!("{at}/{k}")),
                    _ => Some(format!("{at}/{k}")),
                })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (l, r))| first_difference(l, r, format!("{at}/{i}"))),
        _ => (a != b).then_some(at),
    }
}

/// `doc` reads as k8s-openapi's `T` and writes back unchanged: a misspelt or
/// misplaced field (dropped by the typed read) fails, naming where.
fn schema_check<T: DeserializeOwned + Serialize>(file: &str, doc: &Value) {
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{file}: {} does not read: {e}", doc["kind"]));
    let back = serde_json::to_value(&typed).unwrap();
    if let Some(at) = first_difference(doc, &back, String::new()) {
        panic!("{file}: {} field {at} is not in its schema", doc["kind"]);
    }
}

fn check_schemas(docs: &[(String, Value)]) {
    for (file, doc) in docs {
        match doc["kind"].as_str().unwrap_or_default() {
            "Namespace" => schema_check::<Namespace>(file, doc),
            "ServiceAccount" => schema_check::<ServiceAccount>(file, doc),
            "ClusterRole" => schema_check::<ClusterRole>(file, doc),
            "ClusterRoleBinding" => schema_check::<ClusterRoleBinding>(file, doc),
            "Role" => schema_check::<Role>(file, doc),
            "RoleBinding" => schema_check::<RoleBinding>(file, doc),
            "ConfigMap" => schema_check::<ConfigMap>(file, doc),
            "Deployment" => schema_check::<Deployment>(file, doc),
            "Service" => schema_check::<Service>(file, doc),
            other => panic!("{file}: {other:?} is not checked here: add it"),
        }
    }
}

/// The config.toml the ConfigMap carries.
fn deployed_config() -> String {
    let cm: ConfigMap = only(&manifests("deploy"), "ConfigMap");
    cm.data
        .unwrap()
        .remove("config.toml")
        .expect("the ConfigMap's config.toml")
}

#[test]
fn the_manifests_follow_the_schemas_and_run_a_locked_down_pod() {
    let docs = manifests("deploy");
    check_schemas(&docs);
    check_schemas(&manifests("deploy/leader-election"));

    // Applied in file order: each namespace exists before objects in it.
    let mut namespaces = BTreeSet::new();
    for (file, doc) in &docs {
        if doc["kind"] == "Namespace" {
            namespaces.insert(doc["metadata"]["name"].as_str().unwrap().to_owned());
        } else if let Some(ns) = doc["metadata"]["namespace"].as_str() {
            assert!(
                namespaces.contains(ns),
                "{file}: namespace {ns} is created by a file applied before it"
            );
        }
    }

    let deployment: Deployment = only(&docs, "Deployment");
    let namespace = deployment.metadata.namespace.clone().unwrap();
    let spec = deployment.spec;
    assert_eq!(spec.replicas, Some(1), "one replica until leader election");
    let template = spec.template;
    let pod_labels = template.metadata.unwrap().labels.unwrap();
    let selector = spec.selector.match_labels.unwrap();
    assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
    let pod = template.spec.unwrap();

    // Runs as its service account, which the ClusterRoleBinding binds.
    let sa: ServiceAccount = only(&docs, "ServiceAccount");
    assert_eq!(pod.service_account_name, sa.metadata.name);
    assert_eq!(sa.metadata.namespace.as_deref(), Some(namespace.as_str()));
    let role: ClusterRole = only(&docs, "ClusterRole");
    let binding: ClusterRoleBinding = only(&docs, "ClusterRoleBinding");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(binding.role_ref.name), role.metadata.name);
    let subjects = binding.subjects.unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(Some(&subjects[0].name), sa.metadata.name.as_ref());
    assert_eq!(subjects[0].namespace.as_deref(), Some(namespace.as_str()));

    // Non-root, read-only, nothing to escalate with.
    let pod_security = pod.security_context.clone().unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert!(pod_security.run_as_user.is_some_and(|u| u > 0));
    assert_eq!(pod.containers.len(), 1);
    let container = &pod.containers[0];
    let security = container.security_context.clone().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.unwrap().drop,
        Some(vec!["ALL".to_owned()])
    );
    let resources = container.resources.clone().unwrap();
    let requests = resources.requests.unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
    assert!(resources.limits.unwrap().contains_key("memory"));
    let image = container.image.clone().unwrap();
    assert!(
        image.contains(':') && !image.ends_with(":latest"),
        "{image}: a pinned tag"
    );

    // The probes and the Service reach the metrics port.
    let port = metrics_port_of(container);
    let ports = container.ports.clone().unwrap();
    let named = |p: &IntOrString| match p {
        IntOrString::Int(n) => *n == i32::from(port),
        IntOrString::String(name) => ports
            .iter()
            .any(|cp| cp.name.as_ref() == Some(name) && cp.container_port == i32::from(port)),
    };
    let probe = |which: &str, p: Option<&k8s_openapi::api::core::v1::Probe>| {
        let get = p
            .and_then(|p| p.http_get.clone())
            .unwrap_or_else(|| panic!("{which}: an HTTP GET probe"));
        assert!(named(&get.port), "{which} on the metrics port {port}");
        get.path.unwrap()
    };
    assert_eq!(
        probe("liveness", container.liveness_probe.as_ref()),
        "/healthz"
    );
    assert_eq!(
        probe("readiness", container.readiness_probe.as_ref()),
        "/readyz"
    );
    assert_eq!(
        probe("startup", container.startup_probe.as_ref()),
        "/healthz"
    );
    let service: Service = only(&docs, "Service");
    let service = service.spec.unwrap();
    assert!(
        service
            .selector
            .unwrap()
            .iter()
            .all(|(k, v)| pod_labels.get(k) == Some(v)),
        "the Service selects the pod"
    );
    assert!(named(
        service.ports.unwrap()[0]
            .target_port
            .as_ref()
            .expect("targetPort")
    ));

    // Who and where the pod is, from the downward API.
    let env = container.env.clone().unwrap();
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env.iter().find(|e| e.name == name).expect(name);
        let field = var.value_from.clone().unwrap().field_ref.unwrap();
        assert_eq!(field.field_path, path);
    }

    // The configuration comes from the ConfigMap, mounted read-only.
    let cm: ConfigMap = only(&docs, "ConfigMap");
    let volume = pod.volumes.unwrap().into_iter().next().unwrap();
    assert_eq!(volume.config_map.unwrap().name, cm.metadata.name.unwrap());
    let mount = &container.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.name, volume.name);
    assert_eq!(mount.read_only, Some(true));

    // The leader-election Role: Leases in the pod's namespace only, bound to its account.
    let election = manifests("deploy/leader-election");
    let role: Role = only(&election, "Role");
    assert_eq!(role.metadata.namespace.as_deref(), Some(namespace.as_str()));
    let rules = role.rules.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].api_groups,
        Some(vec!["coordination.k8s.io".into()])
    );
    assert_eq!(rules[0].resources, Some(vec!["leases".into()]));
    assert_eq!(rules[0].verbs, ["get", "create", "update"]);
    let rb: RoleBinding = only(&election, "RoleBinding");
    assert_eq!(Some(rb.role_ref.name), role.metadata.name);
    assert_eq!(rb.subjects.unwrap()[0].name, sa.metadata.name.unwrap());
}

/// `(api group, plural)` of each informer of the deployed config, read by
/// the program itself (`kinformer config`); the config names them as RBAC
/// does, `plural` or `plural.group`, so that the ClusterRole reads the same.
fn configured_resources() -> BTreeSet<(String, String)> {
    let dir = scratch("config");
    let file = dir.join("config.toml");
    std::fs::write(&file, deployed_config()).unwrap();
    let out = common::kinformer_command()
        .args(["config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the ConfigMap's config.toml does not load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    let served = ResourceType::defaults();
    let informers = config["informers"].as_array().unwrap();
    assert!(!informers.is_empty());
    informers
        .iter()
        .map(|inf| {
            let name = inf["resource"]
                .as_str()
                .unwrap_or_else(|| panic!("{inf}: name the resource, not the kind"));
            assert!(
                inf["namespace"].is_null(),
                "{inf}: a namespaced informer needs a Role in its namespace, not the ClusterRole"
            );
            let (plural, group) = name.split_once('.').unwrap_or((name, ""));
            assert!(
                served
                    .iter()
                    .any(|t| t.plural == plural && t.group == group),
                "{name}: not `plural` or `plural.group` of a served type"
            );
            (group.to_owned(), plural.to_owned())
        })
        .collect()
}

fn cluster_role_rules() -> Vec<PolicyRule> {
    let role: ClusterRole = only(&manifests("deploy"), "ClusterRole");
    role.rules.unwrap()
}

#[test]
fn the_cluster_role_allows_exactly_list_and_watch_on_the_configured_resources() {
    let wanted = configured_resources();
    let mut granted = BTreeSet::new();
    for rule in cluster_role_rules() {
        assert_eq!(
            rule.verbs,
            ["list", "watch"],
            "{rule:?}: kinformer run lists and watches, nothing more"
        );
        assert!(rule.resource_names.is_none(), "{rule:?}: every object");
        assert!(
            rule.non_resource_urls.is_none(),
            "{rule:?}: discovery is every authenticated user's (system:discovery)"
        );
        for group in rule.api_groups.unwrap() {
            for resource in rule.resources.clone().unwrap() {
                granted.insert((group.clone(), resource));
            }
        }
    }
    assert_eq!(granted, wanted, "ClusterRole vs the ConfigMap's informers");
}

// ---------------------------------------------------------------- kubectl

/// kubectl against `server` with no kubeconfig and no user preferences.
fn kubectl(server: &str, cache: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .env("KUBECONFIG", "/nonexistent/kinformer-kubeconfig")
        .env("KUBERC", "off")
        .args(["--server", server, "--request-timeout=10s", "--cache-dir"])
        .arg(cache)
        .args(args)
        .current_dir(repo())
        .output()
        .expect("kubectl is required for this test: install kubectl")
}

fn kubectl_ok(server: &str, cache: &Path, args: &[&str]) -> Vec<String> {
    let out = kubectl(server, cache, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn kubectl_applies_the_manifests_with_a_server_side_dry_run() {
    let server = ApiServer::start_in_thread(ServerConfig::default()).unwrap();
    let url = server.url();
    let cache = scratch("kubectl-cache");
    let documents = manifests("deploy").len();
    // A real server refuses objects in a namespace that does not exist, dry
    // run or not: the namespace is created first, as docs/deploy.md says.
    kubectl_ok(&url, &cache, &["apply", "-f", "deploy/00-namespace.yaml"]);

    let dry = kubectl_ok(
        &url,
        &cache,
        &["apply", "--dry-run=server", "-f", "deploy/"],
    );
    assert_eq!(dry.len(), documents, "{dry:?}");
    assert!(
        dry.iter().all(|l| l.ends_with("(server dry run)")),
        "{dry:?}"
    );
    assert!(
        dry.contains(
            &"clusterrole.rbac.authorization.k8s.io/kinformer created (server dry run)".to_owned()
        ),
        "{dry:?}"
    );
    assert_eq!(
        server.count("rbac.authorization.k8s.io", "clusterroles"),
        0,
        "a dry run stores nothing"
    );
    let election = kubectl_ok(
        &url,
        &cache,
        &["apply", "--dry-run=server", "-f", "deploy/leader-election/"],
    );
    assert_eq!(election.len(), 2, "{election:?}");

    // Applied for real, what is stored is what the files say; a second apply changes nothing.
    kubectl_ok(&url, &cache, &["apply", "-f", "deploy/"]);
    let stored = server
        .get(
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            "kinformer",
        )
        .unwrap();
    let rules: Vec<PolicyRule> = serde_json::from_value(stored["rules"].clone()).unwrap();
    assert_eq!(rules, cluster_role_rules());
    let again = kubectl_ok(&url, &cache, &["apply", "-f", "deploy/"]);
    assert!(again.iter().all(|l| l.ends_with(" unchanged")), "{again:?}");
    let _ = std::fs::remove_dir_all(&cache);
    server.shutdown();
}

// ---------------------------------------------------------------- in cluster

/// The value of the series `name{labels...}` in a Prometheus text page.
fn metric(page: &str, name: &str, label: &str) -> Option<f64> {
    page.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .find_map(|l| l.rsplit_once(' ')?.1.parse().ok())
}

/// The server's authorizer rules that grant `user` what the ClusterRole grants.
fn rules_for(user: &str) -> Vec<Rule> {
    cluster_role_rules()
        .into_iter()
        .map(|r| {
            Rule::user(user)
                .verbs(r.verbs)
                .api_groups(r.api_groups.unwrap_or_default())
                .resources(r.resources.unwrap_or_default())
        })
        .collect()
}

/// Shell run inside `unshare --user --map-root-user --mount`: a tmpfs over
/// `/var/run` (or what it links to) holding the service-account files from
/// `$SA_DIR`, then the program, exec'd (the child's pid stays the program's).
const IN_CLUSTER_SHELL: &str = r#"set -e
run=$(readlink -f /var/run)
mount -t tmpfs tmpfs "$run"
mkdir -p /var/run/secrets/kubernetes.io/serviceaccount
cp "$SA_DIR"/token "$SA_DIR"/ca.crt "$SA_DIR"/namespace /var/run/secrets/kubernetes.io/serviceaccount/
exec "$@""#;

#[test]
fn kinformer_runs_in_cluster_with_its_service_account_and_only_the_cluster_roles_rights() {
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "true"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "this test needs `unshare` (util-linux) and user namespaces, to give the program \
         kube-client's fixed service-account path: {probe:?}"
    );

    // The cluster: TLS, tokens, and for kinformer's account only the ClusterRole's rights.
    let account = "system:serviceaccount:kinformer:kinformer";
    let token = "kinformer-sa-token";
    let server = ApiServer::start_in_thread(ServerConfig {
        tls: Some(TlsConfig::default()),
        auth: Some(AuthConfig {
            tokens: vec![TokenUser {
                token: token.into(),
                user: UserInfo::new(
                    account,
                    ["system:serviceaccounts", "system:serviceaccounts:kinformer"],
                ),
            }],
            anonymous: false,
            authorization: Authorization::Rules(rules_for(account)),
        }),
        ..ServerConfig::default()
    })
    .unwrap();
    server.seed_configmaps("default", 30).unwrap();
    for name in ["web", "api"] {
        let labels = json!({"app": name});
        server
            .create(
                "apps",
                "deployments",
                Some("default"),
                json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": labels}, "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]}}}
                }),
            )
            .unwrap();
    }
    let configmaps = server.count("", "configmaps");

    // What the kubelet mounts, and the deployed config.
    let dir = scratch("in-cluster");
    let sa_dir = dir.join("serviceaccount");
    std::fs::create_dir_all(&sa_dir).unwrap();
    std::fs::write(sa_dir.join("token"), token).unwrap();
    std::fs::write(sa_dir.join("ca.crt"), server.ca_pem().unwrap()).unwrap();
    std::fs::write(sa_dir.join("namespace"), "kinformer").unwrap();
    let config = dir.join("config.toml");
    std::fs::write(&config, deployed_config()).unwrap();

    // The program, isolated as the other CLI tests (no kubeconfig, no
    // KINFORMER_ variables), plus the in-cluster environment.
    let template = common::kinformer_command();
    let mut cmd = Command::new("unshare");
    for (k, v) in template.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(cwd) = template.get_current_dir() {
        cmd.current_dir(cwd);
    }
    let port = server.addr().port().to_string();
    let mut child = cmd
        .args(["--user", "--map-root-user", "--mount", "sh", "-c"])
        .arg(IN_CLUSTER_SHELL)
        .arg("sh")
        .arg(template.get_program())
        .args(["run", "--config"])
        .arg(&config)
        .args(["--metrics", "127.0.0.1:0", "--for", "60s"])
        .env("SA_DIR", &sa_dir)
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", &port)
        .stdout(Stdio::piped())
        // A file, not a pipe nobody reads while it runs.
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .expect("spawn unshare");
    let logs = || std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    let rx = common::stdout_lines(&mut child);
    let (addr, seen) = match common::metrics_address(&rx, Duration::from_secs(30)) {
        Ok(found) => found,
        Err(seen) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no metrics address printed: {seen:?}\n{}", logs());
        }
    };
    assert_eq!(
        seen.first().map(String::as_str),
        Some(
            format!("kinformer: using the configured cluster at https://127.0.0.1:{port}/")
                .as_str()
        ),
        "in-cluster configuration from KUBERNETES_SERVICE_HOST/PORT: {seen:?}"
    );

    // Ready once both informers have synced, with everything the account may see.
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        let ready = common::http_get(addr, "/readyz")
            .map(|(s, _)| s)
            .unwrap_or(0);
        let page = common::http_get(addr, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let counted = |informer: &str| {
            metric(
                &page,
                "kinformer_objects",
                &format!(r#"informer="{informer}""#),
            )
        };
        if ready == 200
            && counted("configmaps") == Some(configmaps as f64)
            && counted("deployments") == Some(2.0)
        {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "not ready with every object within 30s: /readyz {ready}\n{page}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(page.contains("kinformer_synced"), "{page}");

    // Every request was the account's, over TLS with its token, and allowed:
    // the ClusterRole is enough for `kinformer run`, and it asked for no more.
    // Both informers' watches too: the server records a watch once its
    // answer starts, which may follow the sync readiness waited for.
    let watching = |path: &str| {
        server
            .requests()
            .records()
            .iter()
            .any(|r| r.verb == "watch" && r.path.contains(path))
    };
    while !(watching("/configmaps") && watching("/deployments")) {
        assert!(
            Instant::now() < deadline,
            "both watches not started within 30s\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let records = server.requests().records();
    assert!(!records.is_empty());
    let refused: Vec<_> = records.iter().filter(|r| r.status >= 400).collect();
    assert!(refused.is_empty(), "refused: {refused:#?}\n{}", logs());
    assert!(records.iter().all(|r| r.user.as_deref() == Some(account)));
    let resource_verbs: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.path.contains("/configmaps") || r.path.contains("/deployments"))
        .map(|r| r.verb.as_str())
        .collect();
    assert_eq!(resource_verbs, BTreeSet::from(["list", "watch"]));

    common::expect_graceful_stop(child, "-TERM", "terminated", &rx);
    let _ = std::fs::remove_dir_all(&dir);
    server.shutdown();
}
