//! Configuration errors stop the program before anything starts, with a
//! message naming the key and where its value came from; the environment
//! overrides the file and flags override the environment.

mod common;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

/// A config file in a directory of its own, removed on drop.
struct ConfigFile {
    dir: PathBuf,
    path: PathBuf,
}

impl ConfigFile {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "kinformer-config-test-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kinformer.toml");
        std::fs::write(&path, text).unwrap();
        ConfigFile { dir, path }
    }

    fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kinformer(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = common::kinformer_command();
    cmd.args(args).envs(env.iter().copied());
    cmd.output().expect("run kinformer")
}

/// Runs `kinformer run --config FILE ...` and expects a configuration error naming `key` and `origin`.
fn expect_error(
    file: &ConfigFile,
    extra: &[&str],
    env: &[(&str, &str)],
    key: &str,
    origin: &str,
) -> String {
    let mut args = vec!["run", "--config", file.arg(), "--for", "1s"];
    args.extend_from_slice(extra);
    let out = kinformer(&args, env);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stderr.contains(&format!("`{key}`")),
        "error does not name {key}: {stderr}"
    );
    assert!(
        stderr.contains(origin),
        "error does not name {origin}: {stderr}"
    );
    // Nothing started: no progress, no status, no summary.
    assert!(
        !stdout.contains("synced") && !stdout.contains("summary"),
        "{stdout}"
    );
    stderr
}

#[test]
fn unknown_key() {
    let f = ConfigFile::new("unknown", "[engine]\npage_sise = 100\n");
    let e = expect_error(&f, &[], &[], "engine.page_sise", f.arg());
    assert!(e.contains("unknown field"), "{e}");
}

#[test]
fn unknown_key_of_a_subscriber() {
    let f = ConfigFile::new(
        "unknown-sub",
        "[[informers]]\nresource = \"configmaps\"\n[[informers.subscribers]]\nname = \"a\"\nresink = \"5s\"\n",
    );
    expect_error(&f, &[], &[], "informers[0].subscribers[0].resink", f.arg());
}

#[test]
fn bad_duration() {
    let f = ConfigFile::new(
        "duration",
        "[[informers]]\nresource = \"configmaps\"\n[[informers.subscribers]]\nname = \"a\"\nresync = \"every minute\"\n",
    );
    let e = expect_error(&f, &[], &[], "informers[0].subscribers[0].resync", f.arg());
    assert!(e.contains("every minute"), "{e}");
}

#[test]
fn bad_duration_from_the_environment() {
    let f = ConfigFile::new("env-duration", "");
    expect_error(
        &f,
        &[],
        &[("KINFORMER__ENGINE__BACKOFF__CAP", "forever")],
        "engine.backoff.cap",
        "the environment",
    );
}

#[test]
fn bad_value_type() {
    let f = ConfigFile::new("type", "[engine]\npage_size = \"many\"\n");
    expect_error(&f, &[], &[], "engine.page_size", f.arg());
}

#[test]
fn unknown_overflow_policy() {
    let f = ConfigFile::new("policy", "[engine]\noverflow_policy = \"drop\"\n");
    expect_error(&f, &[], &[], "engine.overflow_policy", f.arg());
}

#[test]
fn invalid_toml() {
    let f = ConfigFile::new("toml", "[engine\npage_size = 1\n");
    let e = kinformer(&["run", "--config", f.arg()], &[]);
    let stderr = String::from_utf8_lossy(&e.stderr);
    assert_eq!(e.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(f.arg()) && stderr.contains("TOML"),
        "{stderr}"
    );
}

#[test]
fn missing_config_file() {
    let out = kinformer(&["run", "--config", "/nonexistent/kinformer.toml"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/kinformer.toml"), "{stderr}");
}

#[test]
fn unknown_resource_starts_nothing() {
    // The first informer is fine, the second is not: neither starts.
    let f = ConfigFile::new(
        "resource",
        "[embedded]\nseed = 10\nchurn_per_sec = 0.0\n\
         [[informers]]\nresource = \"configmaps\"\n\
         [[informers]]\nname = \"frobs\"\nresource = \"frobnicators\"\n",
    );
    let e = expect_error(&f, &["--embedded"], &[], "informers[1].resource", f.arg());
    assert!(e.contains("unknown resource \"frobnicators\""), "{e}");
}

#[test]
fn unknown_kind() {
    let f = ConfigFile::new(
        "kind",
        "[embedded]\nseed = 0\nchurn_per_sec = 0.0\n\
         [[informers]]\ngroup = \"apps\"\nversion = \"v1\"\nkind = \"Frobnicator\"\n",
    );
    expect_error(&f, &["--embedded"], &[], "informers[0].kind", f.arg());
}

#[test]
fn namespace_of_a_cluster_scoped_resource() {
    let f = ConfigFile::new(
        "scope",
        "[embedded]\nseed = 0\nchurn_per_sec = 0.0\n\
         [[informers]]\nresource = \"namespaces\"\nnamespace = \"default\"\n",
    );
    expect_error(&f, &["--embedded"], &[], "informers[0].namespace", f.arg());
}

#[test]
fn resource_and_kind_contradict() {
    let f = ConfigFile::new(
        "both",
        "[[informers]]\nresource = \"configmaps\"\nkind = \"ConfigMap\"\n",
    );
    expect_error(&f, &[], &[], "informers[0].kind", f.arg());
}

#[test]
fn neither_resource_nor_kind() {
    let f = ConfigFile::new("neither", "[[informers]]\nnamespace = \"default\"\n");
    expect_error(&f, &[], &[], "informers[0].resource", f.arg());
}

#[test]
fn backoff_initial_above_cap_contradicts() {
    let f = ConfigFile::new(
        "backoff",
        "[engine.backoff]\ninitial = \"1m\"\ncap = \"10s\"\n",
    );
    expect_error(&f, &[], &[], "engine.backoff.initial", f.arg());
}

#[test]
fn resync_below_one_second() {
    let f = ConfigFile::new("resync", "[engine]\ndefault_resync = \"200ms\"\n");
    expect_error(&f, &[], &[], "engine.default_resync", f.arg());
}

#[test]
fn duplicate_subscriber_names() {
    let f = ConfigFile::new(
        "dup",
        "[[informers]]\nresource = \"configmaps\"\n\
         [[informers.subscribers]]\nname = \"a\"\n[[informers.subscribers]]\nname = \"a\"\n",
    );
    expect_error(&f, &[], &[], "informers[0].subscribers[1].name", f.arg());
}

#[test]
fn zero_capacity() {
    let f = ConfigFile::new("capacity", "[engine]\nqueue_capacity = 0\n");
    expect_error(&f, &[], &[], "engine.queue_capacity", f.arg());
}

#[test]
fn embedded_and_a_context_contradict() {
    let f = ConfigFile::new("embedded", "");
    expect_error(
        &f,
        &["--embedded", "--context", "prod"],
        &[],
        "cluster.context",
        "the command line",
    );
    let f = ConfigFile::new(
        "embedded-file",
        "[cluster]\nembedded = true\ncontext = \"prod\"\n",
    );
    expect_error(&f, &[], &[], "cluster.context", f.arg());
}

/// A flag's way to reach the cluster replaces the file's (the documented
/// layering), instead of contradicting it.
#[test]
fn a_flag_chooses_the_cluster_over_the_file() {
    let f = ConfigFile::new(
        "cluster-choice",
        "[cluster]\ncontext = \"prod\"\nkubeconfig = \"/k\"\n",
    );
    let out = kinformer(&["--config", f.arg(), "config", "--embedded"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cluster = &effective["cluster"];
    assert_eq!(cluster["embedded"], true, "{cluster}");
    assert!(
        cluster["context"].is_null() && cluster["kubeconfig"].is_null(),
        "{cluster}"
    );
}

#[test]
fn bad_metrics_address_from_a_flag() {
    let f = ConfigFile::new("metrics", "");
    expect_error(
        &f,
        &["--metrics", "localhost"],
        &[],
        "observability.metrics_addr",
        "the command line",
    );
}

fn effective(args: &[&str], env: &[(&str, &str)]) -> Value {
    let out = kinformer(args, env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("config prints JSON")
}

#[test]
fn environment_overrides_the_file_and_flags_override_the_environment() {
    let f = ConfigFile::new(
        "layers",
        "[engine]\npage_size = 100\n[engine.backoff]\ncap = \"20s\"\n[cluster]\ncontext = \"from-file\"\n",
    );
    let v = effective(&["config", "--config", f.arg()], &[]);
    assert_eq!(v["engine"]["page_size"], 100);
    assert_eq!(v["engine"]["backoff"]["cap"], "20s");
    assert_eq!(
        v["engine"]["queue_capacity"], 1024,
        "defaults fill the rest"
    );

    let env = [
        ("KINFORMER__ENGINE__PAGE_SIZE", "42"),
        ("KINFORMER__ENGINE__BACKOFF__CAP", "1m"),
        ("KINFORMER__CLUSTER__CONTEXT", "from-env"),
    ];
    let v = effective(&["config", "--config", f.arg()], &env);
    assert_eq!(v["engine"]["page_size"], 42);
    assert_eq!(v["engine"]["backoff"]["cap"], "1m");
    assert_eq!(v["cluster"]["context"], "from-env");

    let v = effective(
        &["config", "--config", f.arg(), "--context", "from-flag"],
        &env,
    );
    assert_eq!(v["cluster"]["context"], "from-flag");
    assert_eq!(v["engine"]["page_size"], 42);
}

#[test]
fn config_file_from_the_environment_variable() {
    let f = ConfigFile::new("envfile", "[engine]\npage_size = 7\n");
    let v = effective(&["config"], &[("KINFORMER_CONFIG", f.arg())]);
    assert_eq!(v["engine"]["page_size"], 7);
}

/// A config file is TOML whatever its name ends in; the Lease's namespace
/// defaults to the pod's own (`POD_NAMESPACE`, which the RBAC grants).
#[test]
fn a_config_file_without_a_toml_extension_and_the_lease_namespace() {
    let f = ConfigFile::new("conf", "[engine]\npage_size = 9\n[leader_election]\n");
    let conf = f.path.with_file_name("kinformer.conf");
    std::fs::copy(&f.path, &conf).unwrap();
    let v = effective(&["config", "--config", conf.to_str().unwrap()], &[]);
    assert_eq!(v["engine"]["page_size"], 9);
    assert_eq!(v["leader_election"]["namespace"], "default");
    let v = effective(
        &["config", "--config", conf.to_str().unwrap()],
        &[("POD_NAMESPACE", "kinformer")],
    );
    assert_eq!(v["leader_election"]["namespace"], "kinformer");
}

#[test]
fn leader_election_timings_are_checked() {
    let f = ConfigFile::new(
        "leader-election",
        "[leader_election]\nlease_duration = \"10s\"\nrenew_deadline = \"10s\"\n",
    );
    let e = expect_error(&f, &[], &[], "leader_election.renew_deadline", f.arg());
    assert!(e.contains("shorter than the lease duration"), "{e}");
    let f = ConfigFile::new(
        "leader-election-name",
        "[leader_election]\nlease_name = \" \"\n",
    );
    expect_error(&f, &[], &[], "leader_election.lease_name", f.arg());
    let f = ConfigFile::new(
        "leader-election-env",
        "[leader_election]\nidentity = \"a\"\n",
    );
    let e = expect_error(
        &f,
        &[],
        &[("KINFORMER__LEADER_ELECTION__LEASE_DURATION", "1500ms")],
        "leader_election.lease_duration",
        "the environment",
    );
    assert!(e.contains("whole number of seconds"), "{e}");
}
