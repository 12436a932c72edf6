//! kinformer-bench: end-to-end benchmarks of kinformer against kube-runtime 5,
//! in the same run, on the same embedded API server and the same objects.
//!
//! ```text
//! cargo run --release -p kinformer-bench -- all            # full scale, every workload
//! cargo run --release -p kinformer-bench -- run sync churn # some workloads
//! cargo run --release -p kinformer-bench -- profile        # decode paths only
//! cargo run -p kinformer-bench -- --quick all              # reduced scale (CI)
//! ```
//!
//! The parent process runs the API server and the writer; every measured
//! informer runs alone in a child process (this binary, `child` sub-command),
//! so its heap, RSS and CPU time are its own. Results: Markdown on stdout and
//! in `--out` (`report.md`, `report.json`).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kinformer_bench::{child, parent, profile, report};

#[derive(Parser)]
#[command(
    name = "kinformer-bench",
    about = "kinformer vs kube-runtime, end to end"
)]
struct Cli {
    /// Reduced scale (small N, short runs): what CI runs.
    #[arg(long, global = true)]
    quick: bool,
    /// Repetitions per measurement (default: 3 full, 1 quick).
    #[arg(long, global = true)]
    reps: Option<usize>,
    /// Object counts of the sync workload (comma-separated), overriding the scale's.
    #[arg(long, global = true, value_delimiter = ',')]
    sync_sizes: Option<Vec<usize>>,
    /// Subscriber counts of the churn workload (comma-separated).
    #[arg(long, global = true, value_delimiter = ',')]
    subscribers: Option<Vec<usize>>,
    /// Object kinds of the sync workload (comma-separated: configmap, pod).
    #[arg(long, global = true, value_enum, value_delimiter = ',')]
    kinds: Option<Vec<KindArg>>,
    /// What the churn workload updates (default: configmap).
    #[arg(long, global = true, value_enum)]
    churn_kind: Option<KindArg>,
    /// Steady write rate in events per second.
    #[arg(long, global = true, value_parser = positive_finite)]
    rate: Option<f64>,
    /// Seconds of steady writing per churn measurement.
    #[arg(long, global = true, value_parser = positive_finite)]
    churn_secs: Option<f64>,
    /// Objects of the relist and resync workloads.
    #[arg(long, global = true)]
    objects: Option<usize>,
    /// Seconds of writing in the controller workload's churn part.
    #[arg(long, global = true, value_parser = positive_finite)]
    controller_secs: Option<f64>,
    /// Write rate of the controller workload's churn part (per second).
    #[arg(long, global = true, value_parser = positive_finite)]
    controller_rate: Option<f64>,
    /// Objects at start-up in the controller workload.
    #[arg(long, global = true)]
    controller_objects: Option<usize>,
    /// Run only the informer variants with these labels, separated by `|`,
    /// e.g. `kinformer|kube-runtime` (profiling, or one comparison at scale).
    #[arg(long, global = true)]
    only: Option<String>,
    /// Where to write report.md and report.json.
    #[arg(long, global = true, default_value = "target/kinformer-bench")]
    out: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every workload.
    All,
    /// Some workloads: sync, churn, slow, relist, resync, controller.
    Run {
        /// Workload names.
        #[arg(required = true)]
        workloads: Vec<String>,
    },
    /// Decode paths alone: objects per second (or one pass, for callgrind).
    Profile {
        /// Object kind.
        #[arg(long, value_enum, default_value = "pod")]
        kind: KindArg,
        /// Decode paths (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        path: Vec<profile::DecodePath>,
        /// Objects per pass.
        #[arg(long, default_value_t = 2_000)]
        n: usize,
        /// Passes (the best counts); 1 under callgrind.
        #[arg(long, default_value_t = 5)]
        passes: usize,
    },
    /// Internal: one measured informer (started by the parent).
    #[command(hide = true)]
    Child {
        /// The job, as JSON.
        #[arg(long)]
        spec: String,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum KindArg {
    Pod,
    Configmap,
}

impl KindArg {
    fn kind(self) -> kinformer_bench::proto::Kind {
        match self {
            KindArg::Pod => kinformer_bench::proto::Kind::Pod,
            KindArg::Configmap => kinformer_bench::proto::Kind::ConfigMap,
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,kinformer_bench=info")
            }),
        )
        .init();
    let workloads: Vec<String> = match cli.command {
        Cmd::Child { spec } => {
            let spec = serde_json::from_str(&spec).context("child spec")?;
            return child::run(spec);
        }
        Cmd::Profile {
            kind,
            path,
            n,
            passes,
        } => {
            let kind = kind.kind();
            let paths = if path.is_empty() {
                profile::DecodePath::ALL.to_vec()
            } else {
                path
            };
            for p in paths {
                let inputs = profile::inputs_for(kind, p, n);
                let rate = profile::throughput(kind, p, &inputs, passes)?;
                println!(
                    "{kind:?} {p:?}: {rate:.0} objects/s ({:.2} µs/object)",
                    1e6 / rate
                );
            }
            return Ok(());
        }
        Cmd::All => parent::WORKLOADS.iter().map(|w| w.to_string()).collect(),
        Cmd::Run { workloads } => workloads,
    };
    let mut scale = if cli.quick {
        parent::Scale::quick()
    } else {
        parent::Scale::full()
    };
    if let Some(r) = cli.reps {
        scale.reps = r.max(1);
    }
    if let Some(s) = cli.sync_sizes {
        scale.sync_sizes = s;
    }
    if let Some(k) = cli.kinds {
        scale.sync_kinds = k.into_iter().map(KindArg::kind).collect();
    }
    if let Some(s) = cli.subscribers {
        scale.churn_subscribers = s;
    }
    if let Some(k) = cli.churn_kind {
        scale.churn_kind = k.kind();
    }
    if let Some(r) = cli.rate {
        scale.rate = r;
    }
    if let Some(s) = cli.churn_secs {
        scale.churn_secs = s;
    }
    if let Some(s) = cli.controller_secs {
        scale.ctl_secs = s;
    }
    if let Some(r) = cli.controller_rate {
        scale.ctl_rate = r;
    }
    if let Some(n) = cli.controller_objects {
        scale.ctl_startup_objects = n.max(1);
    }
    scale.only = cli.only;
    if let Some(n) = cli.objects {
        scale.relist_objects = n;
        scale.resync_objects = n;
    }
    let command = format!(
        "cargo run --release -p kinformer-bench --{} {}",
        if cli.quick { " --quick" } else { "" },
        if workloads.len() == parent::WORKLOADS.len() {
            "all".to_string()
        } else {
            format!("run {}", workloads.join(" "))
        }
    );
    std::fs::create_dir_all(&cli.out).with_context(|| format!("creating {}", cli.out.display()))?;
    let mut sections = Vec::new();
    let mut md = String::new();
    for w in &workloads {
        let started = std::time::Instant::now();
        let section = parent::run_workload(w, &scale)?;
        tracing::info!(workload = %w, secs = started.elapsed().as_secs_f64(), "workload done");
        let text = section.markdown(&command, scale.name);
        print!("{text}");
        md.push_str(&text);
        sections.push(section);
        // Written after each workload, so a long run leaves what it finished.
        std::fs::write(cli.out.join("report.md"), &md)?;
        std::fs::write(
            cli.out.join("report.json"),
            serde_json::to_string_pretty(&serde_json::json!({
                "scale": scale,
                "machine": report::machine(),
                "command": command,
                "sections": sections,
            }))?,
        )?;
    }
    Ok(())
}

/// A number above 0 and finite (a rate, a duration in seconds).
fn positive_finite(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{s:?}: must be a finite number above 0"))
    }
}
