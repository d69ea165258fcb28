//! Opening a backend connection: the TCP connect (or the probe that only
//! reads the greeting), the TLS handshake `--backend-tls` asks for, and
//! the login as the pool key's backend identity through
//! `wire::client_login::ClientLogin`.

use super::*;
use wire::handshake::Greeting;

impl BackendConn {
    /// The TCP connect completed. Without credentials the connection is a
    /// probe: it reads the greeting, reports it and closes (passthrough
    /// identity has no account to log in as before a client has come).
    pub fn on_connect(
        &mut self,
        res: Completion,
        creds: Option<&BackendCredentials>,
        connect_timeout: Duration,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        if !matches!(self.state, State::Connecting) {
            return;
        }
        if res.is_error() {
            let cause = if res == Completion::Cancelled {
                format!("connect timed out after {connect_timeout:?} (--backend-connect-timeout)")
            } else {
                format!("connect: {}", res.error())
            };
            return self.fail(cause, out);
        }
        self.since = now;
        let Some(creds) = creds else {
            self.state = State::Probing;
            out.push(BackendOut::Op(BackendOp::Read));
            return;
        };
        let login = ClientLogin::new(LoginParams {
            user: creds.user.to_string(),
            credential: creds.credential.clone(),
            database: None,
            // Session tracking whatever the client chose: the server's
            // SESSION_STATE_CHANGED is transaction pooling's net for state
            // no lexer sees, and a connection without the capability never
            // raises it. The relay strips it for a client that did not ask.
            capabilities: NATIVE_LOGIN_CAPS | self.key.caps | CLIENT_SESSION_TRACK,
            collation: self.key.collation,
            max_packet_size: BACKEND_MAX_PACKET,
        })
        // Negotiated as the client chose them: they are in the pool key.
        .with_ext_capabilities(self.key.ext_caps)
        .with_connect_attrs(std::mem::take(&mut self.connect_attrs))
        .with_full_auth_transport(creds.transport.clone())
        // As the pool stamped its --backend-tls on the key.
        .with_tls(self.key.tls);
        self.state = State::LoggingIn {
            login: Box::new(login),
            writing: false,
            answered: false,
            consumed: 0,
        };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Read));
    }

    /// Login packets from `consumed` on: each is fed to the login until it
    /// sends something, finishes or fails; a partial packet waits for the
    /// next read.
    pub(super) fn on_login_packets(
        &mut self,
        data: &[u8],
        mut consumed: usize,
        capacity: usize,
        now: Instant,
        out: &mut Vec<BackendOut>,
    ) {
        loop {
            let State::LoggingIn {
                login,
                writing,
                answered,
                consumed: seen,
            } = &mut self.state
            else {
                return;
            };
            let Some((pkt, used)) = split_packet(data.get(consumed..).unwrap_or_default()) else {
                *seen = consumed;
                if data.len() >= capacity {
                    return self.fail("reply larger than the read buffer".into(), out);
                }
                out.push(BackendOut::Op(BackendOp::Read));
                return;
            };
            consumed += used;
            match login.on_packet(pkt.seq, pkt.payload) {
                Ok(LoginStep::Wait) => continue,
                Ok(LoginStep::StartTls(bytes)) => self.start_login_tls(bytes, now, out),
                Ok(LoginStep::Send(bytes)) => {
                    if !*answered && self.key.tls == TlsWish::Preferred {
                        // The answer to the greeting, in plain.
                        out.push(BackendOut::Event(BackendEvent::Tls(TlsNote::PlainFallback)));
                    }
                    *writing = true;
                    *answered = true;
                    self.since = now;
                    out.push(BackendOut::Op(BackendOp::Send(bytes)));
                }
                Ok(LoginStep::Done {
                    greeting, status, ..
                }) => self.logged_in(greeting, status, out),
                Err(e) => {
                    let answered = *answered;
                    self.login_failed(e, answered, out)
                }
            }
            return;
        }
    }

    /// The login asks for TLS: its SSLRequest goes out, then the handshake.
    fn start_login_tls(&mut self, ssl_request: Vec<u8>, now: Instant, out: &mut Vec<BackendOut>) {
        let State::LoggingIn { login, .. } = std::mem::replace(&mut self.state, State::Closed)
        else {
            return;
        };
        self.state = State::TlsHandshake {
            login,
            writing: true,
        };
        self.since = now;
        out.push(BackendOut::Op(BackendOp::Send(ssl_request)));
    }

    fn logged_in(&mut self, greeting: Greeting, status: u16, out: &mut Vec<BackendOut>) {
        self.state = State::Leased;
        self.thread_id = greeting.connection_id;
        self.mariadb = greeting.capabilities & CLIENT_MYSQL == 0;
        out.push(BackendOut::Op(BackendOp::Clear));
        out.push(BackendOut::Event(BackendEvent::Ready {
            server_version: greeting.server_version,
            capabilities: greeting.capabilities,
            ext_capabilities: greeting.ext_capabilities,
            status,
        }));
    }

    /// The login failed; `answered`: the greeting was answered, so a
    /// server's ERR refuses the credentials.
    fn login_failed(&mut self, error: LoginError, answered: bool, out: &mut Vec<BackendOut>) {
        match error {
            LoginError::Server {
                code,
                sqlstate,
                message,
            } => {
                // After the greeting it is the credentials it refused
                // (1045, 1044, 1698, an expired or locked account).
                let refused = answered.then(|| err_payload_with_state(code, &sqlstate, &message));
                let cause = format!("the server refused the login: {code} ({sqlstate}) {message}");
                self.fail_with(cause, refused, false, out)
            }
            e @ LoginError::TlsUnavailable(_) => {
                out.push(BackendOut::Event(BackendEvent::Tls(TlsNote::Unavailable)));
                let cause = format!(
                    "{e}; turn TLS on in the server (ssl-cert/ssl-key) or run ringgate \
                     with --backend-tls preferred or disabled"
                );
                self.fail(cause, out)
            }
            e => self.fail(format!("login: {e}"), out),
        }
    }

    /// The TLS handshake that [`BackendOp::StartTls`] asked for ended:
    /// with `Ok`, the login's HandshakeResponse goes out through TLS;
    /// `Err` names the cause (and its fix) and fails the open.
    pub fn on_tls(&mut self, result: Result<(), String>, now: Instant, out: &mut Vec<BackendOut>) {
        let State::TlsHandshake { writing: false, .. } = self.state else {
            return self.fail("TLS handshake outside the login".into(), out);
        };
        if let Err(cause) = result {
            return self.fail(cause, out);
        }
        let State::TlsHandshake { mut login, .. } =
            std::mem::replace(&mut self.state, State::Closed)
        else {
            return;
        };
        match login.on_tls_established() {
            Ok(LoginStep::Send(bytes)) => {
                self.tls = true;
                self.state = State::LoggingIn {
                    login,
                    writing: true,
                    answered: true,
                    consumed: 0,
                };
                self.since = now;
                out.push(BackendOut::Op(BackendOp::Send(bytes)));
            }
            Ok(step) => self.fail(format!("login after TLS: unexpected {step:?}"), out),
            Err(e) => self.fail(format!("login: {e}"), out),
        }
    }
}
