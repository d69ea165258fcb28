//! The client side of the MySQL login, as a machine with no I/O inside.
//!
//! ringgate logs into its backend in two places: the proxy's pooled backend
//! connections and `ringgate check`. Both drive one [`ClientLogin`]: feed it
//! each whole packet the server sends, write out every
//! [`LoginStep::Send`] it returns, stop at [`LoginStep::Done`] or an error.
//! The caller owns the socket, the buffers and the deadline, so the same code
//! runs under io_uring and over a blocking `TcpStream`.
//!
//! The exchange it speaks (mysql_native_password, and
//! caching_sha2_password when the greeting or a switch names it):
//!
//! ```text
//! server                          client
//! HandshakeV10 (seq 0)       ->
//!                            <-   HandshakeResponse41 (seq 1): a native
//!                                 token, or a caching_sha2 scramble if the
//!                                 greeting names that plugin
//! OK | ERR (seq 2)           ->   done | LoginError::Server
//! AuthSwitchRequest (seq 2)  ->
//!                            <-   token of the named plugin for the new
//!                                 scramble (seq 3)
//! OK | ERR (seq 4)           ->   done | LoginError::Server
//! AuthMoreData (0x01)        ->   caching_sha2: see `client_sha2`
//! ```

use std::fmt;

use crate::auth::{Credential, NATIVE_PASSWORD, SCRAMBLE_LEN};
use crate::caching_sha2::CACHING_SHA2_PASSWORD;
use crate::client_sha2::{FullAuthTransport, Sha2Exchange, Sha2Next};
use crate::constants::*;
use crate::handshake::{self, Greeting, HandshakeResponse, SSL_REQUEST_LEN};
pub use crate::login_error::LoginError;
use crate::packet::write_packet;
use crate::reply::{parse_auth_reply, ServerReply};
use crate::ProtocolError;

/// Capabilities ringgate never asks a backend for, whatever the caller
/// wants: it does not speak the compressed protocol to the backend, and
/// CLIENT_SSL is set only by [`ClientLogin::with_tls`] (a response with it
/// makes the server expect a TLS handshake next).
const NEVER_ASKED: u32 = CLIENT_SSL | CLIENT_COMPRESS | CLIENT_ZSTD_COMPRESSION_ALGORITHM;

/// What to log in with.
#[derive(Clone)]
pub struct LoginParams {
    pub user: String,
    /// The password, or only its SHA1 (all mysql_native_password needs):
    /// with per-user identity the proxy logs in as a client whose password
    /// it never saw.
    pub credential: Credential,
    /// Initial schema, sent with CLIENT_CONNECT_WITH_DB.
    pub database: Option<String>,
    /// Capabilities wanted, before masking with the server's.
    pub capabilities: u32,
    /// Collation id for the session (the HandshakeResponse's charset byte).
    pub collation: u8,
    pub max_packet_size: u32,
}

/// The credential stays out of logs.
impl fmt::Debug for LoginParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginParams")
            .field("user", &self.user)
            .field("credential", &self.credential)
            .field("database", &self.database)
            .field("capabilities", &format_args!("{:#010x}", self.capabilities))
            .field("collation", &self.collation)
            .field("max_packet_size", &self.max_packet_size)
            .finish()
    }
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginStep {
    /// Send this packet (already framed with its sequence id, ready to write as-is).
    Send(Vec<u8>),
    /// Nothing to send: feed the next packet (caching_sha2's 0x01 0x03
    /// comes just before the OK).
    Wait,
    /// Send this SSLRequest (framed), then run the TLS handshake as a
    /// client, then call [`ClientLogin::on_tls_established`]; every packet
    /// after it goes through TLS.
    StartTls(Vec<u8>),
    /// Logged in. `greeting` is the server's parsed HandshakeV10 (version, capabilities,
    /// connection id, ...), `capabilities` what was negotiated, `status` the OK's status flags.
    Done {
        greeting: Greeting,
        capabilities: u32,
        status: u16,
    },
}

/// Where the exchange is.
#[derive(Debug)]
enum State {
    /// Waiting for the server's first packet (sequence id 0).
    Greeting,
    /// The HandshakeResponse (or the AuthSwitch answer) is out; waiting for
    /// the server's verdict with sequence id `expect_seq`.
    Auth {
        greeting: Greeting,
        capabilities: u32,
        expect_seq: u8,
        /// An AuthSwitchRequest was answered already; a second one is not
        /// something a server ever sends.
        switched: bool,
        /// caching_sha2_password's exchange, when that plugin is in use.
        sha2: Option<Sha2Exchange>,
    },
    /// The SSLRequest is out: the TLS handshake runs, then the
    /// HandshakeResponse (already made, `seq` its sequence id) goes out.
    TlsPending {
        greeting: Greeting,
        capabilities: u32,
        response: Vec<u8>,
        seq: u8,
        sha2: Option<Sha2Exchange>,
    },
    /// Logged in, or failed: nothing more is expected.
    Finished,
}

/// Whether the login asks for TLS (`--backend-tls`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TlsWish {
    /// Never (`disabled`).
    #[default]
    Off,
    /// When the greeting offers it (`preferred`).
    Preferred,
    /// Always; a server without it is an error (`required` and stricter).
    Required,
}

/// A client login in progress. See the module documentation.
#[derive(Debug)]
pub struct ClientLogin {
    params: LoginParams,
    /// MariaDB extended capabilities wanted, before masking with the
    /// server's (see [`ClientLogin::with_ext_capabilities`]).
    ext_wanted: u32,
    /// Connection attributes to send if the server takes them (see
    /// [`ClientLogin::with_connect_attrs`]).
    connect_attrs: Vec<(String, String)>,
    /// How caching_sha2 full authentication may send the password (see
    /// [`ClientLogin::with_full_auth_transport`]).
    transport: FullAuthTransport,
    tls: TlsWish,
    state: State,
}

impl ClientLogin {
    pub fn new(params: LoginParams) -> ClientLogin {
        ClientLogin {
            params,
            ext_wanted: 0,
            connect_attrs: Vec::new(),
            transport: FullAuthTransport::default(),
            tls: TlsWish::Off,
            state: State::Greeting,
        }
    }

    /// Ask for TLS after the greeting (see [`LoginStep::StartTls`]).
    pub fn with_tls(mut self, tls: TlsWish) -> ClientLogin {
        self.tls = tls;
        self
    }

    /// The TLS handshake after [`LoginStep::StartTls`] completed: the
    /// HandshakeResponse to send (through TLS). caching_sha2 full
    /// authentication may now send the cleartext.
    pub fn on_tls_established(&mut self) -> Result<LoginStep, LoginError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::TlsPending {
                greeting,
                capabilities,
                response,
                seq,
                sha2,
            } => {
                self.transport.secure = true;
                let mut out = Vec::with_capacity(response.len() + 4);
                let expect_seq = write_packet(&mut out, seq, &response);
                self.state = State::Auth {
                    greeting,
                    capabilities,
                    expect_seq,
                    switched: false,
                    sha2,
                };
                Ok(LoginStep::Send(out))
            }
            _ => Err(protocol("TLS", "no TLS handshake was asked for")),
        }
    }

    /// How caching_sha2_password full authentication may send the password:
    /// as is over a secure transport, else RSA-encrypted (with the
    /// server's key given here, or asked for). Default: plain TCP, no key.
    pub fn with_full_auth_transport(mut self, transport: FullAuthTransport) -> ClientLogin {
        self.transport = transport;
        self
    }

    /// Ask a MariaDB server for these extended capabilities
    /// (`MARIADB_CLIENT_*` >> 32), as far as its greeting offers them. The
    /// proxy asks for exactly what its client chose, so the server sends
    /// what the client expects. A server that announces none (MySQL) gets a
    /// response without them.
    pub fn with_ext_capabilities(mut self, ext: u32) -> ClientLogin {
        self.ext_wanted = ext;
        self
    }

    /// Send these connection attributes (CLIENT_CONNECT_ATTRS) if the
    /// server's greeting offers the capability; without it, none are sent.
    /// The caller bounds their size.
    pub fn with_connect_attrs(mut self, attrs: Vec<(String, String)>) -> ClientLogin {
        self.connect_attrs = attrs;
        self
    }

    /// Feed one whole packet from the server (sequence id + payload, as split by
    /// [`crate::packet::split_packet`]). The first is the greeting.
    pub fn on_packet(&mut self, seq: u8, payload: &[u8]) -> Result<LoginStep, LoginError> {
        // Any error finishes the login, so take the state out first and put
        // the next one back only on success.
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Greeting => self.on_greeting(seq, payload),
            State::Auth {
                greeting,
                capabilities,
                expect_seq,
                switched,
                sha2,
            } => {
                check_seq("auth reply", expect_seq, seq)?;
                let auth = Auth {
                    greeting,
                    capabilities,
                    switched,
                    sha2,
                };
                self.on_auth_reply(auth, seq, payload)
            }
            State::TlsPending { .. } => Err(protocol(
                "packet",
                "a packet during the TLS handshake, before the HandshakeResponse",
            )),
            State::Finished => Err(protocol(
                "packet",
                "the login is already over, nothing more was expected",
            )),
        }
    }

    fn on_greeting(&mut self, seq: u8, payload: &[u8]) -> Result<LoginStep, LoginError> {
        let greeting = match handshake::parse_greeting(payload) {
            Ok(g) => g,
            // A refusal before any handshake (1040, 1129): the server's words.
            Err(ProtocolError::ServerError {
                code,
                sqlstate,
                message,
            }) => {
                return Err(LoginError::Server {
                    code,
                    sqlstate,
                    message,
                })
            }
            Err(e) => return Err(protocol("greeting", e)),
        };
        check_seq("greeting", 0, seq)?;
        let needed = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION;
        if greeting.capabilities & needed != needed {
            return Err(protocol(
                "greeting",
                format!(
                    "capabilities {:#010x} lack the 4.1 protocol with secure authentication \
                     (server {})",
                    greeting.capabilities, greeting.server_version
                ),
            ));
        }
        if greeting.scramble.len() != SCRAMBLE_LEN {
            return Err(protocol(
                "greeting",
                format!(
                    "a {}-byte scramble, mysql_native_password needs {SCRAMBLE_LEN}",
                    greeting.scramble.len()
                ),
            ));
        }
        let mut capabilities = self.negotiate(greeting.capabilities);
        // parse_greeting reads no extended capabilities from a MySQL server.
        let ext = self.ext_wanted & greeting.ext_capabilities;
        if ext != 0 {
            // MariaDB only reads them from a response without CLIENT_MYSQL.
            capabilities &= !CLIENT_MYSQL;
        }
        let connect_attrs = if greeting.capabilities & CLIENT_CONNECT_ATTRS != 0 {
            std::mem::take(&mut self.connect_attrs)
        } else {
            Vec::new()
        };
        if !connect_attrs.is_empty() {
            capabilities |= CLIENT_CONNECT_ATTRS;
        }
        let offered = greeting.capabilities & CLIENT_SSL != 0;
        let tls = match self.tls {
            TlsWish::Off => false,
            TlsWish::Preferred => offered,
            TlsWish::Required if offered => true,
            TlsWish::Required => return Err(LoginError::TlsUnavailable(greeting.server_version)),
        };
        if tls {
            capabilities |= CLIENT_SSL;
        }
        // The greeting's plugin when it is caching_sha2_password and the
        // credential can scramble for it (MySQL 8's default), else a
        // native token: a server whose account uses another plugin answers
        // with an AuthSwitchRequest, handled below.
        let sha2_token = (greeting.auth_plugin == CACHING_SHA2_PASSWORD)
            .then(|| self.params.credential.sha2_scramble(&greeting.scramble))
            .flatten();
        let (plugin, auth_response, sha2) = match sha2_token {
            Some(token) => (
                CACHING_SHA2_PASSWORD,
                token,
                Some(Sha2Exchange::new(&greeting.scramble)),
            ),
            None => (
                NATIVE_PASSWORD,
                self.params.credential.token(&greeting.scramble),
                None,
            ),
        };
        let response = HandshakeResponse {
            capabilities,
            max_packet_size: self.params.max_packet_size,
            charset: self.params.collation,
            username: self.params.user.clone(),
            auth_response,
            database: self.params.database.clone(),
            auth_plugin: Some(plugin.into()),
            connect_attrs,
        };
        let mut payload = handshake::build_handshake_response(&response);
        handshake::set_response_ext_capabilities(&mut payload, ext);
        let mut out = Vec::new();
        if tls {
            // The SSLRequest is the response's first 32 bytes (capabilities,
            // max packet, charset, filler with MariaDB's extended
            // capabilities); the whole response follows through TLS.
            let seq = write_packet(&mut out, seq.wrapping_add(1), &payload[..SSL_REQUEST_LEN]);
            self.state = State::TlsPending {
                greeting,
                capabilities,
                response: payload,
                seq,
                sha2,
            };
            return Ok(LoginStep::StartTls(out));
        }
        let expect_seq = write_packet(&mut out, seq.wrapping_add(1), &payload);
        self.state = State::Auth {
            greeting,
            capabilities,
            expect_seq,
            switched: false,
            sha2,
        };
        Ok(LoginStep::Send(out))
    }

    /// The capability word of the HandshakeResponse, which is also what is
    /// in effect for the session: what the caller wants and the server
    /// offers, plus what this login itself relies on.
    fn negotiate(&self, server: u32) -> u32 {
        // MariaDB clears bit 0 in its greeting (it reads it as CLIENT_MYSQL,
        // "not MariaDB") yet accepts it from a client as CLIENT_LONG_PASSWORD,
        // which every 4.1 client sends: keep it if the caller wants it.
        let offered = server | CLIENT_LONG_PASSWORD;
        let mut caps = self.params.capabilities & offered & !NEVER_ASKED;
        caps |= CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;
        // The flag says whether the field is in the packet: set it exactly
        // when there is a schema to send.
        if self.params.database.is_some() {
            caps |= CLIENT_CONNECT_WITH_DB;
        } else {
            caps &= !CLIENT_CONNECT_WITH_DB;
        }
        // Announced by on_greeting exactly when attributes are sent.
        caps & !CLIENT_CONNECT_ATTRS
    }

    fn on_auth_reply(
        &mut self,
        mut auth: Auth,
        seq: u8,
        payload: &[u8],
    ) -> Result<LoginStep, LoginError> {
        let reply = parse_auth_reply(payload).map_err(|e| protocol("auth reply", e))?;
        if auth.sha2.as_ref().is_some_and(Sha2Exchange::fast_ok)
            && !matches!(reply, ServerReply::Ok { .. } | ServerReply::Err { .. })
        {
            return Err(protocol(
                "auth reply",
                "only OK or ERR may follow caching_sha2_password's fast-auth success",
            ));
        }
        match reply {
            ServerReply::Ok { status, .. } => Ok(LoginStep::Done {
                greeting: auth.greeting,
                capabilities: auth.capabilities,
                status,
            }),
            ServerReply::Err {
                code,
                sqlstate,
                message,
            } => Err(LoginError::Server {
                code,
                sqlstate,
                message,
            }),
            ServerReply::AuthSwitch { .. } if auth.switched => Err(protocol(
                "auth switch request",
                "a second switch after answering one",
            )),
            ServerReply::AuthSwitch { plugin, data } => {
                // libmysqlclient refuses anything but a 20-byte scramble here
                // too: a token computed from another length can only fail.
                let known = plugin == NATIVE_PASSWORD || plugin == CACHING_SHA2_PASSWORD;
                if known && data.len() != SCRAMBLE_LEN {
                    return Err(protocol(
                        "auth switch request",
                        format!(
                            "a {}-byte scramble for {plugin}, expected {SCRAMBLE_LEN}",
                            data.len()
                        ),
                    ));
                }
                let token = if plugin == NATIVE_PASSWORD {
                    auth.sha2 = None;
                    self.params.credential.token(&data)
                } else if plugin == CACHING_SHA2_PASSWORD {
                    let token = self
                        .params
                        .credential
                        .sha2_scramble(&data)
                        .ok_or(LoginError::Sha2WithoutSha2Hash)?;
                    auth.sha2 = Some(Sha2Exchange::new(&data));
                    token
                } else {
                    return Err(LoginError::UnsupportedPlugin(plugin));
                };
                auth.switched = true;
                self.send(auth, seq, &token)
            }
            ServerReply::AuthMoreData(data) => {
                let Some(exchange) = auth.sha2.as_mut() else {
                    // Only caching_sha2_password and sha256_password send
                    // these, and this login is not speaking either.
                    return Err(protocol(
                        "auth reply",
                        "AuthMoreData (0x01), which mysql_native_password never sends",
                    ));
                };
                match exchange.on_more_data(&data, &self.params.credential, &self.transport)? {
                    Sha2Next::Send(mut bytes) => {
                        let step = self.send(auth, seq, &bytes);
                        // Over TLS the payload is the cleartext password.
                        zeroize::Zeroize::zeroize(&mut bytes);
                        step
                    }
                    Sha2Next::Wait => {
                        self.state = auth.into_state(seq.wrapping_add(1));
                        Ok(LoginStep::Wait)
                    }
                }
            }
            other => Err(protocol(
                "auth reply",
                format!("unexpected {other:?} during authentication"),
            )),
        }
    }

    /// Answers the server's packet `seq` with `payload`; its verdict (or
    /// next request) comes with the sequence id after that.
    fn send(&mut self, auth: Auth, seq: u8, payload: &[u8]) -> Result<LoginStep, LoginError> {
        let mut out = Vec::with_capacity(4 + payload.len());
        let expect_seq = write_packet(&mut out, seq.wrapping_add(1), payload);
        self.state = auth.into_state(expect_seq);
        Ok(LoginStep::Send(out))
    }
}

/// `State::Auth`'s fields while a reply is handled.
struct Auth {
    greeting: Greeting,
    capabilities: u32,
    switched: bool,
    sha2: Option<Sha2Exchange>,
}

impl Auth {
    fn into_state(self, expect_seq: u8) -> State {
        State::Auth {
            greeting: self.greeting,
            capabilities: self.capabilities,
            expect_seq,
            switched: self.switched,
            sha2: self.sha2,
        }
    }
}

fn protocol(what: &'static str, detail: impl ToString) -> LoginError {
    LoginError::Protocol {
        what,
        detail: detail.to_string(),
    }
}

fn check_seq(what: &'static str, expected: u8, got: u8) -> Result<(), LoginError> {
    if expected == got {
        Ok(())
    } else {
        Err(protocol(what, ProtocolError::OutOfOrder { expected, got }))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tls_tests;
