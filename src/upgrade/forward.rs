//! A local PostgreSQL socket that is really the old primary over TCP: every
//! connection to `<dir>/.s.PGSQL.<port>` is forwarded to `host:port`, bytes
//! both ways, so that pg_upgrade (which reaches a live old server only
//! through a socket directory) can check a server in another pod.

use std::path::{Path, PathBuf};

use tokio::net::{TcpStream, UnixListener};
use tokio::task::JoinHandle;

use super::Error;

/// The forwarder; stops (and removes its socket) when dropped.
pub struct Forwarder {
    task: JoinHandle<()>,
    socket: PathBuf,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The socket file PostgreSQL clients look for in `dir` for `port`.
pub fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

/// Listens on the socket for `local_port` in `dir` and forwards each
/// connection to `host:port`.
pub fn start(dir: &Path, local_port: u16, host: &str, port: u16) -> Result<Forwarder, Error> {
    let socket = socket_path(dir, local_port);
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(Error::io("listen on", &socket))?;
    let target = (host.to_owned(), port);
    let task = tokio::spawn(async move {
        loop {
            let (mut local, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "the forwarder cannot accept a connection");
                    continue;
                }
            };
            let target = target.clone();
            tokio::spawn(async move {
                match TcpStream::connect((target.0.as_str(), target.1)).await {
                    Ok(mut remote) => {
                        let _ = remote.set_nodelay(true);
                        if let Err(error) =
                            tokio::io::copy_bidirectional(&mut local, &mut remote).await
                        {
                            tracing::debug!(%error, "a forwarded connection ended");
                        }
                    }
                    // Dropping the local end tells the client; pg_upgrade
                    // then reports it cannot connect.
                    Err(error) => tracing::warn!(
                        %error, host = %target.0, port = target.1,
                        "cannot reach the old primary"
                    ),
                }
            });
        }
    });
    Ok(Forwarder { task, socket })
}
