//! Why a backend login failed: the error both the login machine
//! (`client_login.rs`) and its caching_sha2_password exchange
//! (`client_sha2.rs`) return. It has its own module so that neither of the
//! two imports the other's (the exchange is a step of the login).

/// Why the login failed. After any error the machine is finished: every
/// further packet is a [`LoginError::Protocol`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// The server refused: its own ERR, to be passed on as-is (code, SQLSTATE, message).
    /// Sent instead of a greeting (1040 too many connections, 1129 host
    /// blocked) or in answer to the credentials (1045, 1049 unknown database).
    #[error("{code} ({sqlstate}): {message}")]
    Server {
        code: u16,
        sqlstate: String,
        message: String,
    },
    #[error(
        "the server wants auth plugin '{0}'; ringgate logs in with mysql_native_password \
         or caching_sha2_password"
    )]
    UnsupportedPlugin(String),
    /// caching_sha2_password with only SHA1(password) known (a client that
    /// logged in to ringgate with mysql_native_password against a
    /// `MysqlNativePassword` hash).
    #[error(
        "the server wants caching_sha2_password and ringgate knows only the \
         mysql_native_password hash of this account's password (the client logged in \
         with mysql_native_password against a MysqlNativePassword entry)"
    )]
    Sha2WithoutSha2Hash,
    /// caching_sha2_password full authentication (the server's cache does
    /// not hold the account) with only hashes known.
    #[error(
        "the server asks for caching_sha2_password full authentication, which needs the \
         cleartext password, and ringgate knows only hashes of it (the client's own login \
         was a fast auth or mysql_native_password); a login of this user to ringgate by \
         full authentication, a BackendPassword in the users file, or the account in the \
         server's cache (after any full authentication on it) lets it through"
    )]
    FullAuthWithoutPassword,
    /// The RSA step of full authentication failed (bad key, password too
    /// long for it).
    #[error("caching_sha2_password RSA exchange: {0}")]
    Rsa(String),
    /// TLS is required (`--backend-tls required` or stricter) and the
    /// server's greeting does not offer it.
    #[error(
        "the server does not offer TLS (no CLIENT_SSL in its greeting; server {0}) and \
         --backend-tls requires it"
    )]
    TlsUnavailable(String),
    #[error("malformed {what} from the server: {detail}")]
    Protocol { what: &'static str, detail: String },
}
