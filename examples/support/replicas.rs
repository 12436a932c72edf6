//! What the multi-replica examples share: the cluster their replica
//! processes run against (the embedded API server, or a kubeconfig's), the
//! replica processes (killed if still running when dropped), and their
//! stdout lines, stamped as they are read.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context;
use kinformer_apiserver::{ApiServer, ServerConfig, ServerHandle};

/// What an example's command line asks for.
pub enum Mode {
    /// The demo: replica processes against `Target`.
    Demo(Target),
    /// One replica; `fast`: the demo's short timings.
    Replica { fast: bool },
}

/// The command line: nothing, `--kubeconfig [PATH]`, or `replica [--fast]`.
pub fn mode() -> anyhow::Result<Mode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match args.as_slice() {
        [] => Mode::Demo(Target::Embedded),
        ["--kubeconfig"] => Mode::Demo(Target::Kubeconfig(None)),
        ["--kubeconfig", path] => Mode::Demo(Target::Kubeconfig(Some(PathBuf::from(path)))),
        ["replica"] => Mode::Replica { fast: false },
        ["replica", "--fast"] => Mode::Replica { fast: true },
        other => anyhow::bail!(
            "unexpected arguments {other:?}: run without arguments, with \
             `--kubeconfig [PATH]`, or `replica`"
        ),
    })
}

/// Where the replicas run.
pub enum Target {
    /// The embedded API server, started here.
    Embedded,
    /// The cluster of this kubeconfig (`None`: the replicas' default).
    Kubeconfig(Option<PathBuf>),
}

/// The embedded server (with its kubeconfig in a temporary file) or a
/// kubeconfig, kept while the demo runs.
pub struct Cluster {
    pub server: Option<ServerHandle>,
    pub kubeconfig: Option<PathBuf>,
    temporary: bool,
}

impl Cluster {
    pub fn connect(target: Target, demo: &str) -> anyhow::Result<Cluster> {
        if let Target::Kubeconfig(kubeconfig) = target {
            return Ok(Cluster {
                server: None,
                kubeconfig,
                temporary: false,
            });
        }
        let server = ApiServer::start_in_thread(ServerConfig::default())?;
        println!("embedded API server at {}", server.url());
        let path = std::env::temp_dir().join(format!(
            "kinformer-{demo}-{}.kubeconfig",
            std::process::id()
        ));
        server
            .write_kubeconfig(&path, "admin")
            .context("write the embedded server's kubeconfig")?;
        Ok(Cluster {
            server: Some(server),
            kubeconfig: Some(path),
            temporary: true,
        })
    }

    /// A replica process (this example run with `args`) named `name`
    /// (`POD_NAME`), in this cluster; its stdout is piped.
    pub fn replica(&self, name: &str, args: &[&str]) -> anyhow::Result<Child> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .args(args)
            .env("POD_NAME", name)
            .stdout(Stdio::piped());
        if let Some(path) = &self.kubeconfig {
            command.env("KUBECONFIG", path);
        }
        command.spawn().context("start a replica")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        if let (true, Some(path)) = (self.temporary, &self.kubeconfig) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The replica processes; any still running when dropped are killed, so an
/// error ends none of them orphaned.
pub struct Replicas {
    pub children: Vec<(String, Child)>,
    tx: Option<mpsc::Sender<(Instant, String)>>,
}

impl Replicas {
    /// No replicas yet; their lines will arrive on the returned receiver.
    pub fn new() -> (Replicas, mpsc::Receiver<(Instant, String)>) {
        let (tx, rx) = mpsc::channel();
        (
            Replicas {
                children: Vec::new(),
                tx: Some(tx),
            },
            rx,
        )
    }

    /// Starts replica `name` and reads its lines on a thread.
    pub fn start(&mut self, cluster: &Cluster, name: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut child = cluster.replica(name, args)?;
        let out = BufReader::new(child.stdout.take().context("replica stdout")?);
        let tx = self.tx.clone().context("replicas closed")?;
        std::thread::spawn(move || {
            out.lines()
                .map_while(Result::ok)
                .try_for_each(|l| tx.send((Instant::now(), l)))
        });
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// No more replicas will start: the receiver ends once they all exited.
    pub fn close(&mut self) {
        self.tx = None;
    }

    pub fn get(&mut self, name: &str) -> anyhow::Result<&mut Child> {
        self.children
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
            .with_context(|| format!("no replica {name}"))
    }

    /// SIGTERM (a graceful stop).
    pub fn terminate(&mut self, name: &str) -> anyhow::Result<()> {
        let pid = self.get(name)?.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status()?;
        anyhow::ensure!(status.success(), "kill -TERM {pid}: {status}");
        Ok(())
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}
