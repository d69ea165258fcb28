//! The listening sockets: the TCP one each worker binds with SO_REUSEPORT,
//! and the one unix socket that every worker accepts on through a dup.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ListenError {
    #[error("cannot listen on {addr}: {source}")]
    Tcp { addr: SocketAddr, source: io::Error },
    #[error("cannot listen on unix socket {}: {source}", path.display())]
    Unix { path: PathBuf, source: io::Error },
    #[error(
        "unix socket {} is in use by a running server; stop it or choose another --socket",
        path.display()
    )]
    UnixInUse { path: PathBuf },
    #[error("{} exists and is not a socket; refusing to replace it", path.display())]
    UnixNotSocket { path: PathBuf },
}

/// One worker's TCP listener. Every worker binds the same address with
/// SO_REUSEPORT and the kernel spreads connections across them.
pub fn tcp(addr: SocketAddr) -> Result<Socket, ListenError> {
    let bind = || -> io::Result<Socket> {
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        sock.set_reuse_port(true)?;
        sock.bind(&addr.into())?;
        sock.listen(4096)?;
        Ok(sock)
    };
    bind().map_err(|source| ListenError::Tcp { addr, source })
}

/// Bind `--socket`. A socket file left by a crashed run (nothing accepts on
/// it) is replaced; one that a live server answers on is refused, and a path
/// that is not a socket is never deleted.
pub fn unix(path: &Path) -> Result<Socket, ListenError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let err = |source| ListenError::Unix {
        path: path.to_path_buf(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(ListenError::UnixNotSocket {
                path: path.to_path_buf(),
            });
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(ListenError::UnixInUse {
                    path: path.to_path_buf(),
                })
            }
            Err(_) => {
                tracing::info!("replacing stale unix socket {}", path.display());
                std::fs::remove_file(path).map_err(err)?;
            }
        }
    }
    let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(err)?;
    sock.bind(&SockAddr::unix(path).map_err(err)?)
        .map_err(err)?;
    sock.listen(4096).map_err(err)?;
    // Like mysqld's socket: anyone may connect; ringgate's login decides.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).map_err(err)?;
    Ok(sock)
}
