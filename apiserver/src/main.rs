//! `kinformer-apiserver`: run the embedded API server as a standalone process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kinformer_apiserver::auth::{MASTERS, parse_token_file};
use kinformer_apiserver::{
    ApiServer, AuthConfig, Authorization, ChurnSpec, Rule, ServerConfig, TlsConfig, TokenUser,
    UserInfo,
};

/// An embedded Kubernetes-compatible API server for tests, demos and benchmarks.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(
        long,
        default_value = "127.0.0.1:0",
        env = "KINFORMER_APISERVER_LISTEN"
    )]
    listen: SocketAddr,
    /// Seed this many ~1.3 KB ConfigMaps at start-up.
    #[arg(long, default_value_t = 0)]
    seed: usize,
    /// Namespace for seeded ConfigMaps.
    #[arg(long, default_value = "default")]
    seed_namespace: String,
    /// Churn ConfigMaps in namespace `churn` at this many operations per second.
    #[arg(long)]
    churn: Option<f64>,
    /// Number of distinct objects the churn cycles through.
    #[arg(long, default_value_t = 100)]
    churn_objects: usize,
    /// RNG seed for the churn.
    #[arg(long, default_value_t = 1)]
    churn_seed: u64,
    /// Retained history (events) for watch replay and continue tokens.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Interval between watch BOOKMARKs, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    bookmark_interval_ms: u64,
    /// Keep objects and the resourceVersion counter in this directory across restarts
    /// (and the generated CA with `--tls`).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Serve HTTPS with a generated CA (kept in `--data` if given).
    #[arg(long)]
    tls: bool,
    /// Write the CA certificate (PEM) here (with `--tls`).
    #[arg(long, value_name = "FILE", requires = "tls")]
    ca_out: Option<PathBuf>,
    /// Authenticate requests: with no token given, a random token for user `admin`
    /// (group system:masters) goes into `--kubeconfig-out`.
    #[arg(long)]
    auth: bool,
    /// A token for user `admin` in group system:masters (turns authentication on).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "KINFORMER_APISERVER_ADMIN_TOKEN",
        hide_env_values = true
    )]
    admin_token: Option<String>,
    /// Bearer tokens in kube-apiserver's format, `token,user,uid,"group1,group2"` per line
    /// (turns authentication on).
    #[arg(long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// Let requests without credentials through as system:anonymous.
    #[arg(long)]
    anonymous_auth: bool,
    /// Authorization rules, a JSON list of {users, groups, verbs, apiGroups, resources,
    /// namespaces, names, nonResourceURLs} (turns authentication on; without it every
    /// authenticated user may do anything).
    #[arg(long, value_name = "FILE")]
    authorization_rules: Option<PathBuf>,
    /// Write a kubeconfig for this server here (its URL, CA and a user's credentials).
    #[arg(long, value_name = "FILE")]
    kubeconfig_out: Option<PathBuf>,
    /// The user of `--kubeconfig-out`: its token, else a client certificate naming it.
    #[arg(long, default_value = "admin")]
    kubeconfig_user: String,
}

/// The authentication the flags ask for, if any.
fn auth_config(args: &Args) -> anyhow::Result<Option<AuthConfig>> {
    let wanted = args.auth
        || args.admin_token.is_some()
        || args.token_auth_file.is_some()
        || args.authorization_rules.is_some();
    if !wanted {
        return Ok(None);
    }
    let mut tokens = Vec::new();
    if let Some(path) = &args.token_auth_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        tokens = parse_token_file(&text).with_context(|| format!("in {}", path.display()))?;
    }
    let admin = args.admin_token.clone().or_else(|| {
        tokens
            .is_empty()
            .then(|| uuid::Uuid::new_v4().simple().to_string())
    });
    if let Some(token) = admin {
        tokens.push(TokenUser {
            token,
            user: UserInfo::new("admin", [MASTERS]),
        });
    }
    let authorization = match &args.authorization_rules {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let rules: Vec<Rule> = serde_json::from_str(&text)
                .with_context(|| format!("parsing the rules in {}", path.display()))?;
            Authorization::Rules(rules)
        }
        None => Authorization::AlwaysAllow,
    };
    Ok(Some(AuthConfig {
        tokens,
        anonymous: args.anonymous_auth,
        authorization,
    }))
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = ServerConfig {
        listen: args.listen,
        history_limit: args.history,
        bookmark_interval: Duration::from_millis(args.bookmark_interval_ms),
        tls: args.tls.then(TlsConfig::default),
        auth: auth_config(&args)?,
        data_dir: args.data.clone(),
        ..ServerConfig::default()
    };
    let server = ApiServer::start(config)
        .await
        .context("starting the server")?;
    if args.seed > 0 {
        server
            .seed_configmaps(&args.seed_namespace, args.seed)
            .map_err(|e| anyhow::anyhow!("seeding: {e}"))?;
    }
    let churn = match args.churn {
        Some(rate) => Some(
            server
                .try_start_churn(ChurnSpec {
                    ops_per_sec: rate,
                    objects: args.churn_objects,
                    seed: args.churn_seed,
                    ..ChurnSpec::default()
                })
                .map_err(|e| anyhow::anyhow!("starting churn: {e}"))?,
        ),
        None => None,
    };
    // Install the Ctrl-C handler before announcing the address (a signal
    // registers on first poll): a SIGINT right after the announcement must
    // stop the server cleanly, not kill it.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut interrupted = false;
    tokio::select! {
        biased;
        r = &mut ctrl_c => {
            r.context("waiting for Ctrl-C")?;
            interrupted = true;
        }
        _ = std::future::ready(()) => {}
    }
    if let (Some(path), Some(ca)) = (&args.ca_out, server.ca_pem()) {
        std::fs::write(path, ca).with_context(|| format!("writing {}", path.display()))?;
    }
    let url = server.url();
    println!("listening on {url}");
    match &args.kubeconfig_out {
        Some(path) => {
            server
                .write_kubeconfig(path, &args.kubeconfig_user)
                .context("writing the kubeconfig")?;
            println!("kubeconfig: {}", path.display());
            println!(
                "try: KUBECONFIG={} kubectl get configmaps -A",
                path.display()
            );
        }
        None => println!("try: kubectl --server {url} get configmaps -A"),
    }
    println!("faults: curl -X POST {url}/admin/faults/close-watches");
    if !interrupted {
        ctrl_c.await.context("waiting for Ctrl-C")?;
    }
    if let Some(c) = churn {
        let stats = c.stop();
        println!(
            "churn: {} created, {} updated, {} deleted",
            stats.created, stats.updated, stats.deleted
        );
    }
    server.shutdown_and_wait().await;
    println!("stopped");
    Ok(())
}
