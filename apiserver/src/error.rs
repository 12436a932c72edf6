//! Why the server could not start or be commanded.

use std::net::SocketAddr;

use crate::persist::PersistError;
use crate::tls::TlsError;

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The dedicated runtime or thread could not be created.
    #[error("cannot start the server runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The server thread ended before reporting its address.
    #[error("the server thread ended before it was ready")]
    ThreadDied,
    /// The TLS certificates could not be made or loaded.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The data directory could not be used.
    #[error(transparent)]
    Data(#[from] PersistError),
    /// The server has stopped (a restart or command came too late).
    #[error("the server has stopped")]
    Stopped,
}
