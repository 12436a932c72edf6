//! Running one child process: this same binary, re-executed with the `child`
//! sub-command, one measured informer inside.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command as Process, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::proto::{ChildSpec, Command, MSG_PREFIX, Message};

/// The environment variable naming a command to run children under.
pub const CHILD_PREFIX: &str = "KINFORMER_BENCH_CHILD_PREFIX";

static CHILDREN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A running child and its message stream.
pub struct ChildProc {
    proc: Child,
    stdin: Option<ChildStdin>,
    messages: mpsc::Receiver<Message>,
    label: String,
}

impl ChildProc {
    /// Starts a child for `spec`. With `KINFORMER_BENCH_CHILD_PREFIX` set
    /// (e.g. `perf record -g -o /tmp/child-{n}.perf --`; `{n}` numbers the
    /// children), the child runs under that command: the way to profile one
    /// measured informer.
    pub fn spawn(spec: &ChildSpec) -> anyhow::Result<ChildProc> {
        let exe = std::env::current_exe().context("own executable")?;
        let n = CHILDREN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = std::env::var(CHILD_PREFIX)
            .unwrap_or_default()
            .replace("{n}", &n.to_string());
        let mut words = prefix.split_whitespace();
        let mut command = match words.next() {
            Some(program) => {
                let mut c = Process::new(program);
                c.args(words).arg(exe);
                c
            }
            None => Process::new(exe),
        };
        let mut proc = command
            .arg("child")
            .arg("--spec")
            .arg(serde_json::to_string(spec)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning the child")?;
        let stdout = proc.stdout.take().context("child stdout")?;
        let stdin = proc.stdin.take();
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Some(json) = line.strip_prefix(MSG_PREFIX) else {
                    continue;
                };
                match serde_json::from_str::<Message>(json) {
                    Ok(m) => {
                        if tx.send(m).is_err() {
                            break;
                        }
                    }
                    Err(e) => tracing::warn!(%e, "unreadable child message"),
                }
            }
        });
        Ok(ChildProc {
            proc,
            stdin,
            messages,
            label: format!("{} {:?} {:?}", spec.variant.label(), spec.kind, spec.job),
        })
    }

    /// The next message, which must be `event`.
    pub fn expect(&mut self, event: &str, timeout: Duration) -> anyhow::Result<Value> {
        let msg = self
            .messages
            .recv_timeout(timeout)
            .with_context(|| format!("{}: no `{event}` within {timeout:?}", self.label))?;
        if msg.event == "error" {
            bail!("{}: child failed: {}", self.label, msg.data);
        }
        if msg.event != event {
            bail!("{}: expected `{event}`, got `{}`", self.label, msg.event);
        }
        Ok(msg.data)
    }

    /// Sends a command.
    pub fn send(&mut self, cmd: &Command) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("child stdin closed")?;
        writeln!(stdin, "{}", serde_json::to_string(cmd)?)?;
        stdin.flush()?;
        Ok(())
    }

    /// Waits for the child to exit (killing it after `timeout`).
    pub fn finish(mut self, timeout: Duration) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.try_wait()? {
                if !status.success() {
                    bail!("{}: child exited with {status}", self.label);
                }
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.proc.kill();
                let _ = self.proc.wait();
                bail!("{}: child did not exit; killed", self.label);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Ok(None) = self.proc.try_wait() {
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
    }
}

/// Runs a child whose job reports once (sync, decode) and returns the report.
pub fn run_once(spec: &ChildSpec, timeout: Duration) -> anyhow::Result<Value> {
    let mut child = ChildProc::spawn(spec)?;
    let report = child.expect("report", timeout)?;
    child.finish(Duration::from_secs(30))?;
    Ok(report)
}
