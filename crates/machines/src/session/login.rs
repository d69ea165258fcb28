//! The login phase of a session: the client's HandshakeResponse (or its
//! SSLRequest, or its answer to an AuthSwitchRequest), the credentials
//! check, and the first lease, which the login OK waits for. The plugins'
//! own exchanges live in `session/sha2.rs` and `session/clear.rs`; a
//! COM_CHANGE_USER logs in again through `session/change_user_flow.rs`.

use super::*;

impl Session {
    pub(super) fn login_failed(
        &mut self,
        reason: RejectReason,
        code: u16,
        msg: &str,
        out: &mut Vec<SessionAction>,
    ) {
        out.push(SessionAction::Reject(reason));
        out.push(SessionAction::Log(format!(
            "login refused (ERR {code}): {msg}"
        )));
        self.send_err(code, msg, State::SendErrThenClose, out);
    }

    /// A login-phase packet may arrive in pieces; wait until it is whole.
    pub(super) fn on_login_bytes(
        &mut self,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        // A login packet can never be longer than the session buffer
        // (e.g. an HTTP request sent to the MySQL port): refuse it now
        // rather than at --handshake-timeout.
        let login_packet_max = ctx.read_buffer_size.saturating_sub(HEADER_LEN);
        let header = parse_header(data);
        if let Some((_, seq)) = header {
            // Errors answer the client's packet: its sequence id + 1.
            self.seq = seq.wrapping_add(1);
        }
        let too_long = header.is_some_and(|(len, _)| len > login_packet_max);
        let Some((pkt, consumed)) = split_packet(data).filter(|_| !too_long) else {
            if too_long || data.len() >= ctx.read_buffer_size {
                return self.login_failed(
                    RejectReason::Handshake,
                    ER_HANDSHAKE_ERROR,
                    "Bad handshake: packet too large",
                    out,
                );
            }
            out.push(SessionAction::ReadClient);
            return;
        };
        if pkt.has_continuation() {
            return self.login_failed(
                RejectReason::Handshake,
                ER_HANDSHAKE_ERROR,
                "Bad handshake: packet too large",
                out,
            );
        }
        self.seq = pkt.seq.wrapping_add(1);
        // A full authentication's answer is the cleartext password:
        // overwritten when dropped.
        let payload = zeroize::Zeroizing::new(pkt.payload.to_vec());
        // Whatever follows the packet is the client's first command,
        // pipelined: it stays in the buffer for the relay.
        out.push(SessionAction::Consume(consumed));
        if matches!(self.state, State::ReadSwitchResponse) {
            if self.sha2 != Sha2Phase::Off {
                return self.sha2_on_packet(&payload, ctx, out);
            }
            return self.verify(&payload, ctx, out);
        }
        self.on_handshake_response(&payload, ctx, out)
    }

    /// The client's first login packet: an SSLRequest, or the handshake
    /// response with its credentials.
    fn on_handshake_response(
        &mut self,
        payload: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        match handshake::parse_handshake_response(payload) {
            Err(e) => {
                // The client gets the generic text; the log gets the reason.
                out.push(SessionAction::Log(format!(
                    "login refused (ERR 1043): bad handshake response: {e}"
                )));
                out.push(SessionAction::Reject(RejectReason::Handshake));
                self.send_err(ER_HANDSHAKE_ERROR, "Bad handshake", State::SendErrThenClose, out)
            }
            Ok(ClientHello::SslRequest { .. }) if self.capabilities & CLIENT_SSL == 0 => self
                .login_failed(
                    RejectReason::Handshake,
                    ER_HANDSHAKE_ERROR,
                    "Bad handshake: ringgate does not offer TLS (start it with --tls-cert and --tls-key); connect with TLS disabled (e.g. --ssl=0 / ssl-mode=DISABLED)",
                    out,
                ),
            Ok(ClientHello::SslRequest { .. }) if self.tls_started => self.login_failed(
                RejectReason::Handshake,
                ER_HANDSHAKE_ERROR,
                "Bad handshake: a second SSLRequest inside TLS",
                out,
            ),
            Ok(ClientHello::SslRequest { .. }) => {
                // The handshake response comes next, inside TLS.
                self.tls_started = true;
                self.secure = true;
                out.push(SessionAction::StartTls);
                out.push(SessionAction::ReadClient);
            }
            Ok(ClientHello::Response(_)) if self.require_secure_transport && !self.secure => {
                // Refused before the credentials are looked at, so the
                // answer says nothing about the account (as MySQL).
                self.login_failed(
                    RejectReason::InsecureTransport,
                    ER_SECURE_TRANSPORT_REQUIRED,
                    "Connections using insecure transport are prohibited while --require_secure_transport=ON.",
                    out,
                )
            }
            Ok(ClientHello::Response(hello)) => {
                let ext = handshake::response_ext_capabilities(payload);
                self.on_hello(hello, ext, ctx, out)
            }
        }
    }

    pub(super) fn on_hello(
        &mut self,
        mut hello: HandshakeResponse,
        hello_ext: u32,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        // mysql_clear_password's is the cleartext: overwritten when dropped.
        let token = zeroize::Zeroizing::new(std::mem::take(&mut hello.auth_response));
        let caps = hello.capabilities & self.capabilities;
        // Compression runs between the client and the proxy only: it is not
        // in the pool key, and backend connections never ask for it.
        if caps & CLIENT_COMPRESS != 0 {
            self.client_leg = Some(LegKind::Compress);
        }
        // The extended capabilities the client chose, read as MariaDB reads
        // them; they change what the server sends, so they are part of the key.
        let ext = if self.capabilities & CLIENT_MYSQL == 0 {
            hello_ext & self.ext_capabilities
        } else {
            0
        };
        self.key = PoolKey {
            caps: caps & SESSION_KEY_CAPS,
            collation: hello.charset,
            ext_caps: ext,
            identity: IdentityId::SHARED,
            // The pool stamps its --backend-tls on every key it is given.
            tls: Default::default(),
            // The writer; the driver names a replica for a read's lease.
            server: None,
        };
        self.client_caps = caps;
        self.tracker = Some(self.new_tracker(ctx));
        self.login = Some(Login {
            user: hello.username,
            database: hello.database,
            used_password: !token.is_empty(),
            connect_attrs: hello.connect_attrs,
        });
        if self.clear_on_hello(caps, hello.auth_plugin.as_deref(), &token, ctx, out) {
            return;
        }
        if self.sha2_on_hello(caps, hello.auth_plugin.as_deref(), &token, ctx, out) {
            return;
        }
        let plugin_ok = caps & CLIENT_PLUGIN_AUTH == 0
            || hello
                .auth_plugin
                .as_deref()
                .is_none_or(|p| p == NATIVE_PASSWORD || p.is_empty());
        if plugin_ok {
            return self.verify(&token, ctx, out);
        }
        // A MySQL 8 client proposes caching_sha2_password; ask it to use
        // mysql_native_password with the scramble it already has.
        let switch = handshake::build_auth_switch_request(NATIVE_PASSWORD, &self.scramble);
        let (bytes, next) = packet(self.seq, &switch);
        self.seq = next;
        self.state = State::AuthSwitch;
        out.push(SessionAction::SendClient(bytes));
    }

    pub(super) fn verify(&mut self, token: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let Some(login) = self.login.as_mut() else {
            return self.close(out);
        };
        if !token.is_empty() {
            login.used_password = true;
        }
        if let Some(auth) = ctx.users.authenticate(&login.user, &self.scramble, token) {
            self.state = State::WaitBackend;
            out.push(SessionAction::Auth(AuthPath::Native));
            out.push(SessionAction::Authenticated(Box::new(auth)));
            return;
        }
        self.access_denied(ctx, out);
    }

    /// The backend identity of this login is known: ask for a connection
    /// of it.
    pub fn on_identity(&mut self, identity: IdentityId, out: &mut Vec<SessionAction>) {
        if matches!(self.state, State::ChangeUser(_)) {
            return self.change_user_identity(identity, out);
        }
        let Some(login) = self.login.as_ref() else {
            return;
        };
        if !matches!(self.state, State::WaitBackend) || self.leasing {
            return;
        }
        self.key.identity = identity;
        self.leasing = true;
        out.push(SessionAction::LoggedIn { key: self.key });
        out.push(SessionAction::Lease {
            key: self.key,
            schema: login.database.clone(),
            any_settings: self.transaction_pooling,
        });
    }

    /// The pool leased a connection (with the client's schema selected).
    /// `buffered`: what the session buffer holds (transaction pooling: the
    /// command the connection was leased for).
    pub fn on_leased(&mut self, buffered: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        if matches!(self.state, State::Resuming { .. }) && self.leasing {
            return self.resume_relay(buffered, ctx, out);
        }
        if matches!(self.state, State::ChangeUser(_)) && self.leasing {
            return self.change_user_leased(out);
        }
        if matches!(self.state, State::ReplayingTx(_)) && self.leasing {
            return self.replay_leased(out);
        }
        if !matches!(self.state, State::WaitBackend) || !self.leasing {
            // Not waiting any more: give it straight back.
            out.push(SessionAction::Release { clean: true });
            return;
        }
        self.leasing = false;
        self.has_backend = true;
        // After a caching_sha2 fast auth, its 0x01 0x03 goes first.
        let mut bytes = self.sha2_ok_prefix();
        let (ok, next) = packet(self.seq, &ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0));
        bytes.extend_from_slice(&ok);
        self.seq = next;
        self.state = State::SendAuthOk;
        out.push(SessionAction::SendClient(bytes));
    }

    /// The pool could not lease a connection; `payload` is the ERR to send
    /// (the server's own, e.g. for an unknown schema or a refused account,
    /// or the proxy's), `reject` the refusal to count, if any.
    pub fn on_lease_failed(
        &mut self,
        payload: &[u8],
        reject: Option<RejectReason>,
        out: &mut Vec<SessionAction>,
    ) {
        if matches!(self.state, State::ChangeUser(_)) {
            return self.change_user_lease_failed(payload, reject, out);
        }
        if matches!(self.state, State::ReplayingTx(_)) {
            return self.replay_lease_failed(out);
        }
        if matches!(self.state, State::Statement(_)) {
            // The connection failed under a statement exchange: the pool
            // has closed it, and the session's state on it is lost.
            self.has_backend = false;
            out.push(SessionAction::Log(
                "backend connection lost while preparing a statement; closed".into(),
            ));
            return self.close(out);
        }
        if matches!(self.state, State::Resuming { .. }) {
            // The ERR answers the command: sequence id 1. The session then
            // ends, as a login that found no connection does; but with no
            // writer it held nothing and goes on (its next command waits
            // for a writer again).
            self.seq = 1;
            if reject == Some(RejectReason::NoWriter) {
                let State::Resuming { tracker } = std::mem::replace(&mut self.state, State::Closed)
                else {
                    return;
                };
                self.leasing = false;
                out.push(SessionAction::Reject(RejectReason::NoWriter));
                return self.send_payload(payload, State::ParkedReply { tracker }, out);
            }
        } else if !matches!(self.state, State::WaitBackend) {
            return;
        }
        self.leasing = false;
        if let Some(reason) = reject {
            out.push(SessionAction::Reject(reason));
        }
        self.send_payload(payload, State::SendErrThenClose, out)
    }
}
