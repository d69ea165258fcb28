//! COM_CHANGE_USER: the session logs in again, as another user or the same
//! one, on the same client connection.
//!
//! The relay stops at the command (once every earlier answer is relayed)
//! and leaves its packet in the session buffer. Then:
//!
//! 1. The packet is read whole and parsed with the capabilities of the
//!    connection's login (`wire::change_user`). A malformed one gets what
//!    MariaDB answers, ERR 1047 "Unknown command".
//! 2. The credentials are checked against the users file exactly as at
//!    login, with the greeting's scramble. A caching_sha2_password response
//!    for a user with caching_sha2 entries runs that plugin's exchange as
//!    the login does (`session/sha2.rs`): fast authentication (0x01 0x03
//!    before the OK), or 0x01 0x04 and the cleartext password over TLS or
//!    the unix socket (RSA-encrypted with `--rsa-key`); a native token for
//!    a user with only caching_sha2 verifiers is switched to
//!    caching_sha2_password; a response for any other plugin is switched to
//!    mysql_native_password (AuthSwitchRequest with the same scramble).
//!    Passthrough identity recovers the new user's backend credential from
//!    what the exchange proved.
//! 3. The current backend is reset in place (COM_RESET_CONNECTION, through
//!    the pool: [`SessionAction::ResetBackend`]): the old session's state
//!    is gone whatever the verdict, as on MariaDB, and the reset tells the
//!    schema it kept.
//! 4. Refused (wrong password, unknown user, malformed packet): the ERR is
//!    sent on that reset connection: the client stays logged in as the old
//!    user, in the old schema, with a fresh session, as on MariaDB.
//!    Accepted: the reset connection goes back to the pool and one of the
//!    new user's key (backend identity, the packet's collation, the same
//!    capabilities) is leased with the packet's schema
//!    ([`Session::switch_backend`]); the OK is sent only once it is here.
//!    When that lease fails (an unknown schema, the server refusing the
//!    account), the old user's connection is leased back with the old
//!    schema and the client gets the error, again as on MariaDB.
//! 5. The relay restarts with a fresh tracker and whatever the client sent
//!    behind.
//!
//! When the relay's end was not clean (the packet's header was split
//! across reads and its first bytes reached the server, or the session had
//! sent COM_SET_OPTION, which a reset does not undo) the backend is
//! discarded at once: an accepted change leases as above, but a refusal
//! (or a failed lease) cannot restore the old session and closes the
//! connection after the ERR.

use super::*;
use wire::caching_sha2::{
    CACHING_SHA2_PASSWORD, FAST_AUTH_SUCCESS, PERFORM_FULL_AUTHENTICATION, REQUEST_PUBLIC_KEY,
};
use wire::change_user::{parse_change_user, ChangeUser};
use wire::users::Sha2Fast;

/// AuthMoreData's header byte.
const AUTH_MORE_DATA: u8 = 0x01;

/// Where a COM_CHANGE_USER stands.
#[derive(Clone, Copy)]
pub(super) enum Phase {
    /// Reading the rest of the packet: the session buffer starts with the
    /// last `skip` bytes of `header`, then the payload.
    ReadPacket { header: [u8; 4], skip: usize },
    /// Writing an AuthSwitchRequest to mysql_native_password.
    AuthSwitch,
    /// Reading the client's answer to it.
    ReadSwitchResponse,
    /// Accepted; the driver finds the new user's backend identity.
    Identity,
    /// The current backend is being reset in place.
    Resetting,
    /// Waiting for a connection of the new user's key.
    Leasing,
    /// The new user's lease failed: the old user's connection is leased
    /// back, then the failure is sent.
    Restoring,
    /// Writing the reply on the session's connection; then the relay
    /// restarts.
    Replying,
}

/// What the credentials decided.
pub(super) enum Verdict {
    Pending,
    /// The login and key to switch to (the key's identity is filled in by
    /// [`Session::change_user_identity`]).
    Accepted {
        login: Login,
        key: PoolKey,
    },
    /// This ERR payload goes to the client once the old session is reset.
    Refused {
        err: Vec<u8>,
    },
}

pub(super) struct Flow {
    phase: Phase,
    verdict: Verdict,
    request: Option<ChangeUser>,
    /// When the command arrived: the client must finish it (the packet and
    /// an AuthSwitch answer) within `--handshake-timeout`.
    since: Instant,
    /// The old login, key and schema (as the reset reported it), kept to
    /// go back to when the new user's lease fails.
    old: Option<(Login, PoolKey, Option<String>)>,
    /// caching_sha2_password's exchange, when the change runs it
    /// (`FastOk`: 0x01 0x03 goes out before the OK).
    sha2: Sha2Phase,
}

impl Flow {
    /// Why the session must close now, if the client has not sent what it
    /// owes within `--handshake-timeout` or the proxy is draining.
    pub(super) fn expired(&self, ctx: &SessionCtx) -> Option<&'static str> {
        let client_owes = matches!(
            self.phase,
            Phase::ReadPacket { .. } | Phase::ReadSwitchResponse
        );
        if !client_owes {
            return None;
        }
        if ctx.now.duration_since(self.since) >= ctx.handshake_timeout {
            return Some("COM_CHANGE_USER not completed within --handshake-timeout; closed");
        }
        ctx.draining
            .then_some("COM_CHANGE_USER interrupted by the drain; closed")
    }
}

/// ER_UNKNOWN_COM_ERROR's text, as MariaDB answers a malformed COM_CHANGE_USER.
const UNKNOWN_COMMAND: &str = "Unknown command";

impl Session {
    fn flow(&mut self) -> Option<&mut Flow> {
        match &mut self.state {
            State::ChangeUser(flow) => Some(flow),
            _ => None,
        }
    }

    /// The relay stopped at a COM_CHANGE_USER and nothing names the backend
    /// any more.
    pub(super) fn change_user_begin(
        &mut self,
        header: [u8; 4],
        header_buffered: usize,
        clean: bool,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if !clean {
            self.has_backend = false;
            out.push(SessionAction::Release { clean: false });
        }
        self.state = State::ChangeUser(Box::new(Flow {
            phase: Phase::ReadPacket {
                header,
                skip: header_buffered,
            },
            verdict: Verdict::Pending,
            request: None,
            since: ctx.now,
            old: None,
            sha2: Sha2Phase::Off,
        }));
        out.push(SessionAction::ExamineBuffer);
    }

    /// Client bytes while reading the packet or the AuthSwitch answer;
    /// `data` is all the session buffer holds.
    pub(super) fn change_user_bytes(
        &mut self,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(flow) = self.flow() else {
            return;
        };
        match flow.phase {
            Phase::ReadPacket { header, skip } => self.read_packet(header, skip, data, ctx, out),
            Phase::ReadSwitchResponse => self.read_switch_response(data, ctx, out),
            _ => {
                out.push(SessionAction::Log(
                    "client bytes during COM_CHANGE_USER before its answer; closed".into(),
                ));
                self.close(out)
            }
        }
    }

    fn read_packet(
        &mut self,
        header: [u8; 4],
        skip: usize,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        // Answers go after the client's packet (sequence id 0 → 1).
        self.seq = header[3].wrapping_add(1);
        if len >= 0xFF_FFFF || skip + len > ctx.read_buffer_size {
            // The packet can never be held whole; its rest cannot be skipped
            // reliably either, so refuse it and close (lingering, so that
            // the client reads the ERR before the connection goes).
            out.push(SessionAction::Log(format!(
                "COM_CHANGE_USER of {len} bytes does not fit a read buffer; ERR 1047, closed"
            )));
            return self.send_err(
                ER_UNKNOWN_COM_ERROR,
                UNKNOWN_COMMAND,
                State::SendErrThenLinger,
                out,
            );
        }
        if data.len() < skip + len {
            out.push(SessionAction::ReadClient);
            return;
        }
        let payload = &data[skip..skip + len];
        let parsed = parse_change_user(payload, self.client_caps);
        out.push(SessionAction::Consume(skip + len));
        let request = match parsed {
            Ok(r) => r,
            Err(e) => {
                out.push(SessionAction::Log(format!(
                    "COM_CHANGE_USER refused (ERR 1047): {e}"
                )));
                return self.refuse(err_payload(ER_UNKNOWN_COM_ERROR, UNKNOWN_COMMAND), out);
            }
        };
        self.change_user_authenticate(request, ctx, out)
    }

    /// The request is whole: verify its token as sent, or ask the client
    /// for one computed for another plugin (or for caching_sha2's fast path).
    fn change_user_authenticate(
        &mut self,
        request: ChangeUser,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let plugin_auth = self.client_caps & CLIENT_PLUGIN_AUTH != 0;
        let plugin = request
            .auth_plugin
            .as_deref()
            .filter(|_| plugin_auth)
            .unwrap_or("");
        // An empty caching_sha2 response (MySQL 8 clients before 8.0.25
        // send one first) is switched like another plugin's.
        let sha2 = plugin == CACHING_SHA2_PASSWORD
            && !request.auth_response.is_empty()
            && ctx.users.sha2_capable(&request.user);
        let to_sha2 = !sha2 && plugin_auth && ctx.users.sha2_only(&request.user);
        let switch = !sha2 && !to_sha2 && plugin != NATIVE_PASSWORD && !plugin.is_empty();
        let token = request.auth_response.clone();
        if let Some(flow) = self.flow() {
            flow.request = Some(request);
        }
        if sha2 {
            return self.change_user_sha2_fast(&token, ctx, out);
        }
        if to_sha2 {
            // Only caching_sha2 verifiers: switch to that plugin, as MySQL
            // switches to the account's (the answer is a fast-auth scramble).
            let switch =
                handshake::build_auth_switch_request(CACHING_SHA2_PASSWORD, &self.scramble);
            return self.change_user_ask(&switch, Sha2Phase::Switched, out);
        }
        if !switch {
            return self.change_user_verify(&token, ctx, out);
        }
        // A response computed for another plugin: ask for
        // mysql_native_password with the scramble it already has.
        let switch = handshake::build_auth_switch_request(NATIVE_PASSWORD, &self.scramble);
        self.change_user_ask(&switch, Sha2Phase::Off, out)
    }

    /// Send a packet the client answers (an AuthSwitchRequest, 0x01 0x04,
    /// the public key); `sha2` says how the answer is read.
    fn change_user_ask(&mut self, payload: &[u8], sha2: Sha2Phase, out: &mut Vec<SessionAction>) {
        let (bytes, next) = packet(self.seq, payload);
        self.seq = next;
        if let Some(flow) = self.flow() {
            flow.phase = Phase::AuthSwitch;
            flow.sha2 = sha2;
        }
        out.push(SessionAction::SendClient(bytes));
    }

    /// caching_sha2 fast authentication of the change's response (or of
    /// the answer to the switch to caching_sha2).
    fn change_user_sha2_fast(
        &mut self,
        token: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(user) = self
            .flow()
            .and_then(|f| f.request.as_ref())
            .map(|r| r.user.clone())
        else {
            return self.close(out);
        };
        match ctx.users.sha2_fast(&user, &self.scramble, token) {
            Sha2Fast::Accepted(auth) => {
                if let Some(flow) = self.flow() {
                    flow.sha2 = Sha2Phase::FastOk;
                }
                self.change_user_accept(auth, !token.is_empty(), out)
            }
            Sha2Fast::FullAuth if !self.full_auth_possible(ctx) => {
                self.no_full_auth(&user, "COM_CHANGE_USER ", ctx, out);
                self.change_user_denied(true, out)
            }
            Sha2Fast::FullAuth => self.change_user_ask(
                &[AUTH_MORE_DATA, PERFORM_FULL_AUTHENTICATION],
                Sha2Phase::FullAuth,
                out,
            ),
            Sha2Fast::Refused => self.change_user_denied(!token.is_empty(), out),
        }
    }

    /// caching_sha2 full authentication: the answer to 0x01 0x04 (or to
    /// the public key).
    fn change_user_sha2_full(
        &mut self,
        payload: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(flow) = self.flow() else {
            return self.close(out);
        };
        let phase = flow.sha2;
        let Some(user) = flow.request.as_ref().map(|r| r.user.clone()) else {
            return self.close(out);
        };
        let decrypted;
        let password = if self.secure {
            // TLS or the unix socket: the password, NUL-terminated.
            payload.strip_suffix(&[0]).unwrap_or(payload)
        } else if let Some(key) = ctx.rsa_key {
            if payload == [REQUEST_PUBLIC_KEY] && phase == Sha2Phase::FullAuth {
                let mut more = vec![AUTH_MORE_DATA];
                more.extend_from_slice(key.public_pem().as_bytes());
                return self.change_user_ask(&more, Sha2Phase::KeySent, out);
            }
            match key.decrypt_password(payload, &self.scramble) {
                Ok(p) => {
                    decrypted = p;
                    &decrypted[..]
                }
                Err(e) => {
                    out.push(SessionAction::Log(format!(
                        "COM_CHANGE_USER caching_sha2_password full authentication: {e}"
                    )));
                    return self.change_user_denied(true, out);
                }
            }
        } else {
            // Not asked for on such a connection (`full_auth_possible`).
            return self.change_user_denied(true, out);
        };
        match ctx.users.authenticate_cleartext(&user, password) {
            Some(auth) => self.change_user_accept(auth, true, out),
            None => self.change_user_denied(true, out),
        }
    }

    fn read_switch_response(
        &mut self,
        data: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        let Some((pkt, consumed)) = split_packet(data) else {
            if data.len() >= ctx.read_buffer_size {
                out.push(SessionAction::Log(
                    "AuthSwitch answer to COM_CHANGE_USER too large; closed".into(),
                ));
                return self.close(out);
            }
            out.push(SessionAction::ReadClient);
            return;
        };
        self.seq = pkt.seq.wrapping_add(1);
        // A full authentication's answer is the cleartext: overwritten
        // when dropped.
        let token = zeroize::Zeroizing::new(pkt.payload.to_vec());
        out.push(SessionAction::Consume(consumed));
        match self.flow().map(|f| f.sha2) {
            Some(Sha2Phase::Switched) => self.change_user_sha2_fast(&token, ctx, out),
            Some(Sha2Phase::FullAuth | Sha2Phase::KeySent) => {
                self.change_user_sha2_full(&token, ctx, out)
            }
            _ => self.change_user_verify(&token, ctx, out),
        }
    }

    /// Check the credentials, as at login.
    fn change_user_verify(&mut self, token: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let Some((user, empty)) = self
            .flow()
            .and_then(|f| f.request.as_ref())
            .map(|r| (r.user.clone(), r.auth_response.is_empty()))
        else {
            return self.close(out);
        };
        let used_password = !token.is_empty() || !empty;
        match ctx.users.authenticate(&user, &self.scramble, token) {
            Some(auth) => self.change_user_accept(auth, used_password, out),
            None => self.change_user_denied(used_password, out),
        }
    }

    /// The credentials failed: 1045 once the old session is reset.
    fn change_user_denied(&mut self, used_password: bool, out: &mut Vec<SessionAction>) {
        let Some(request) = self.flow().and_then(|f| f.request.take()) else {
            return self.close(out);
        };
        // The server's wording; the same for an unknown user, so the
        // answer does not reveal which users exist.
        let msg = format!(
            "Access denied for user '{}'@'{}' (using password: {})",
            request.user,
            self.peer_host,
            if used_password { "YES" } else { "NO" }
        );
        out.push(SessionAction::Log(format!(
            "COM_CHANGE_USER refused (ERR 1045): {msg}"
        )));
        self.refuse(err_payload(ER_ACCESS_DENIED_ERROR, &msg), out)
    }

    /// The credentials passed: find the new user's backend identity.
    fn change_user_accept(
        &mut self,
        auth: Authenticated,
        used_password: bool,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(request) = self.flow().and_then(|f| f.request.take()) else {
            return self.close(out);
        };
        let old_attrs = self.connect_attrs().to_vec();
        let login = Login {
            user: request.user,
            database: request.database,
            used_password,
            // New attributes replace the login's; none keeps them.
            connect_attrs: if request.connect_attrs.is_empty() {
                old_attrs
            } else {
                request.connect_attrs
            },
        };
        let key = PoolKey {
            // Collation ids above 255 do not fit the handshake's byte either.
            collation: request
                .charset
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(self.key.collation),
            ..self.key
        };
        if let Some(flow) = self.flow() {
            flow.verdict = Verdict::Accepted { login, key };
            flow.phase = Phase::Identity;
        }
        out.push(SessionAction::Authenticated(Box::new(auth)));
    }

    /// The proxy user an `Authenticated` action is for: the new user of an
    /// accepted COM_CHANGE_USER (not yet the session's), else the login's.
    pub fn authenticated_user(&self) -> Option<&str> {
        if let State::ChangeUser(flow) = &self.state {
            if let Verdict::Accepted { login, .. } = &flow.verdict {
                return Some(&login.user);
            }
        }
        self.user()
    }

    /// The new user's backend identity is known.
    pub(super) fn change_user_identity(
        &mut self,
        identity: IdentityId,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(flow) = self.flow() else {
            return;
        };
        if !matches!(flow.phase, Phase::Identity) {
            return;
        }
        if let Verdict::Accepted { key, .. } = &mut flow.verdict {
            key.identity = identity;
        }
        self.reset_backend(out)
    }

    fn refuse(&mut self, err: Vec<u8>, out: &mut Vec<SessionAction>) {
        if let Some(flow) = self.flow() {
            flow.verdict = Verdict::Refused { err };
        }
        self.reset_backend(out)
    }

    /// Step 3: reset the current backend in place (or go on without one).
    fn reset_backend(&mut self, out: &mut Vec<SessionAction>) {
        if self.has_backend {
            if let Some(flow) = self.flow() {
                flow.phase = Phase::Resetting;
            }
            out.push(SessionAction::ResetBackend);
        } else {
            self.after_reset(None, out)
        }
    }

    /// The reset connection is back (`schema`: the one it kept), or there
    /// is none (None: the old session cannot be restored).
    pub fn on_relet(&mut self, schema: Option<String>, out: &mut Vec<SessionAction>) {
        match self.flow() {
            Some(flow) if matches!(flow.phase, Phase::Resetting) => {}
            // Not waiting for it any more: give it straight back.
            _ => return out.push(SessionAction::Release { clean: true }),
        }
        self.after_reset(Some(schema), out)
    }

    /// Step 4.
    fn after_reset(&mut self, old_schema: Option<Option<String>>, out: &mut Vec<SessionAction>) {
        let Some(flow) = self.flow() else {
            return;
        };
        match std::mem::replace(&mut flow.verdict, Verdict::Pending) {
            Verdict::Pending => self.close(out),
            Verdict::Refused { err } => self.reply_err(&err, out),
            Verdict::Accepted { login, key } => {
                let old_login = self.login.replace(login);
                let old_key = std::mem::replace(&mut self.key, key);
                let schema = self.login.as_ref().and_then(|l| l.database.clone());
                if let Some(flow) = self.flow() {
                    flow.phase = Phase::Leasing;
                    flow.old = old_login.zip(old_schema).map(|(l, s)| (l, old_key, s));
                }
                self.switch_backend(schema, out)
            }
        }
    }

    /// Send a refusal: on the (reset) connection the session keeps, or,
    /// without one, before closing.
    fn reply_err(&mut self, err: &[u8], out: &mut Vec<SessionAction>) {
        if !self.has_backend {
            out.push(SessionAction::Log(
                "COM_CHANGE_USER failed and the old session cannot be restored; closed after the ERR"
                    .into(),
            ));
            return self.send_payload(err, State::SendErrThenClose, out);
        }
        let (bytes, next) = packet(self.seq, err);
        self.seq = next;
        if let Some(flow) = self.flow() {
            flow.phase = Phase::Replying;
        }
        out.push(SessionAction::SendClient(bytes));
    }

    /// Hand the current backend back to the pool, reset for reuse, and
    /// lease one of the session's key with `schema`; the session hears
    /// [`Session::on_leased`] or [`Session::on_lease_failed`]. Used by
    /// COM_CHANGE_USER, whose key (identity, collation) changes mid-session.
    fn switch_backend(&mut self, schema: Option<String>, out: &mut Vec<SessionAction>) {
        if self.has_backend {
            self.has_backend = false;
            out.push(SessionAction::Release { clean: true });
        }
        self.leasing = true;
        // The KILL registry's user and the pool's warm key follow the key.
        out.push(SessionAction::LoggedIn { key: self.key });
        out.push(SessionAction::Lease {
            key: self.key,
            schema,
            any_settings: false,
        });
    }

    /// A lease the flow asked for arrived.
    pub(super) fn change_user_leased(&mut self, out: &mut Vec<SessionAction>) {
        self.leasing = false;
        self.has_backend = true;
        let Some(flow) = self.flow() else {
            return;
        };
        match std::mem::replace(&mut flow.phase, Phase::Replying) {
            Phase::Leasing => {
                flow.old = None;
                // After a caching_sha2 fast authentication, 0x01 0x03 first.
                let mut bytes = Vec::new();
                if std::mem::take(&mut flow.sha2) == Sha2Phase::FastOk {
                    let (fast, next) = packet(self.seq, &[AUTH_MORE_DATA, FAST_AUTH_SUCCESS]);
                    self.seq = next;
                    bytes = fast;
                }
                let ok = ok_payload(0, 0, SERVER_STATUS_AUTOCOMMIT, 0);
                let (ok, next) = packet(self.seq, &ok);
                self.seq = next;
                bytes.extend_from_slice(&ok);
                out.push(SessionAction::SendClient(bytes));
            }
            Phase::Restoring => match std::mem::replace(&mut flow.verdict, Verdict::Pending) {
                Verdict::Refused { err } => self.reply_err(&err, out),
                _ => self.close(out),
            },
            _ => self.close(out),
        }
    }

    /// The pool could not reset the connection, or lease the new user's
    /// (or, falling back, the old user's) connection.
    pub(super) fn change_user_lease_failed(
        &mut self,
        payload: &[u8],
        reject: Option<RejectReason>,
        out: &mut Vec<SessionAction>,
    ) {
        let Some(phase) = self.flow().map(|f| f.phase) else {
            return;
        };
        match phase {
            Phase::Resetting => {
                // The pool closed the connection; the driver still names it.
                self.has_backend = false;
                out.push(SessionAction::Release { clean: false });
                out.push(SessionAction::Log(format!(
                    "the reset for COM_CHANGE_USER failed: {}",
                    String::from_utf8_lossy(payload.get(9..).unwrap_or_default())
                )));
                self.after_reset(None, out)
            }
            Phase::Leasing => {
                self.leasing = false;
                if let Some(reason) = reject {
                    out.push(SessionAction::Reject(reason));
                }
                match self.flow().and_then(|f| f.old.take()) {
                    Some((login, key, schema)) => {
                        if let Some(flow) = self.flow() {
                            flow.verdict = Verdict::Refused {
                                err: payload.to_vec(),
                            };
                            flow.phase = Phase::Restoring;
                        }
                        self.login = Some(login);
                        self.key = key;
                        self.switch_backend(schema, out)
                    }
                    None => self.reply_err(payload, out),
                }
            }
            Phase::Restoring => {
                self.leasing = false;
                self.has_backend = false;
                self.reply_err(payload, out)
            }
            _ => {}
        }
    }

    /// A packet of the flow was written.
    pub(super) fn change_user_written(
        &mut self,
        mut flow: Box<Flow>,
        buffered: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        match flow.phase {
            Phase::AuthSwitch => {
                flow.phase = Phase::ReadSwitchResponse;
                self.state = State::ChangeUser(flow);
                if buffered.is_empty() {
                    out.push(SessionAction::ReadClient);
                } else {
                    self.change_user_bytes(buffered, ctx, out);
                }
            }
            Phase::Replying if self.has_backend => {
                // A fresh session: a new tracker, the relay from scratch.
                self.tracker = None;
                self.start_relay(buffered, ctx, out)
            }
            _ => {
                self.state = State::ChangeUser(flow);
                self.close(out)
            }
        }
    }
}
