//! Log output: `tracing` to stderr, filtered by `RUST_LOG`, as text or JSON.
//!
//! - Colour only when stderr is a terminal and `NO_COLOR` is unset or
//!   empty (<https://no-color.org>): a log written to a file or a pipe
//!   carries no escape codes.
//! - kube-client's own `ERROR failed with error …` for a failed request is
//!   left out: the engine logs the same failure once, with what it does
//!   next. `RUST_LOG` naming `kube_client` (e.g. `warn,kube_client=error`)
//!   brings it back.

use std::io::IsTerminal;

use tracing::Level;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::{FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use super::config::LogFormat;

/// Where kube-client logs each failed request (its HTTP trace layer).
const KUBE_CLIENT_REQUESTS: &str = "kube_client::client::builder";

/// Whether to colour log lines.
pub fn use_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Whether kube-client's per-request error events are shown: only when
/// `RUST_LOG` mentions kube-client.
pub fn shows_kube_client_errors(rust_log: Option<&str>) -> bool {
    rust_log.is_some_and(|l| l.contains("kube_client"))
}

/// Installs the global subscriber. `RUST_LOG` filters (default `warn`); stdout
/// stays free for the program's own output.
pub fn init(format: LogFormat) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let kube_errors = shows_kube_client_errors(rust_log.as_deref());
    let no_duplicates = filter_fn(move |meta| {
        kube_errors
            || !(meta.is_event()
                && *meta.level() == Level::ERROR
                && meta.target() == KUBE_CLIENT_REQUESTS)
    });
    let filter = env.and(no_duplicates);
    let ansi = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    // A second init (tests) is not an error worth failing for.
    let _ = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(tracing_subscriber::Layer::with_filter(layer, filter))
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(tracing_subscriber::Layer::with_filter(
                layer.json().with_current_span(true).with_span_list(true),
                filter,
            ))
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(use_colour(true, Some(OsStr::new(""))));
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }

    #[test]
    fn kube_client_errors_only_when_rust_log_names_it() {
        assert!(!shows_kube_client_errors(None));
        assert!(!shows_kube_client_errors(Some("trace")));
        assert!(shows_kube_client_errors(Some("warn,kube_client=error")));
    }
}
