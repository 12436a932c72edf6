//! Log output: `tracing` to stderr, filtered by `RUST_LOG`, as text or JSON.

use tracing_subscriber::EnvFilter;

use super::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG` filters (default `warn`); stdout
/// stays free for the program's own output.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) is not an error worth failing for.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}
