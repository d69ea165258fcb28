//! caching_sha2_password on the client side of the proxy (the front end).
//!
//! ```text
//! client                                  ringgate
//! HandshakeResponse (plugin caching_sha2,
//!   32-byte scramble of the greeting's nonce) ->
//!                                         <- 0x01 0x03 (fast auth: cache hit
//!                                            or a `Password` entry), then OK
//!                                         <- 0x01 0x04 (no match: perform
//!                                            full auth), for every user
//!                                         <- ERR 1045 instead, at once, where
//!                                            the cleartext cannot come (plain
//!                                            TCP without --rsa-key)
//! cleartext password NUL               ->    over TLS or the unix socket
//! 0x02 (public key, please)            ->    with --rsa-key
//!                                         <- 0x01 PEM public key
//! RSA-OAEP(password NUL XOR nonce)     ->
//!                                         <- OK | ERR 1045
//! ```
//!
//! A client that answers with a native token for a user whose entries are
//! all caching_sha2 verifiers gets an AuthSwitchRequest to
//! caching_sha2_password with the same nonce, as MySQL switches a client
//! to the account's plugin. Over TCP without TLS the cleartext is refused.
//! With `--rsa-key`, a client may ask for the public key (0x02, answered
//! with 0x01 and the PEM) and send its password RSA-encrypted instead
//! (`wire::sha2_rsa`); a client that has the key already sends the
//! ciphertext at once. Without it, MySQL without RSA keys asks for the
//! cleartext anyway and answers whatever comes with ERR 1045; ringgate
//! answers 1045 at once instead, so no client sends its password over
//! plain TCP for nothing. The answers never depend on which entries a user
//! has, or whether it exists (an unknown name takes a decoy's path, see
//! `wire::users::decoy`). Follows MySQL 8.0/8.4's sql/auth/sha2_password.cc.

use super::*;
use metrics::AuthPath;
use wire::caching_sha2::{
    CACHING_SHA2_PASSWORD, FAST_AUTH_SUCCESS, PERFORM_FULL_AUTHENTICATION, REQUEST_PUBLIC_KEY,
};
use wire::users::Sha2Fast;

/// AuthMoreData's header byte.
const AUTH_MORE_DATA: u8 = 0x01;

/// Where a caching_sha2_password login is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Sha2Phase {
    /// Not a caching_sha2 login.
    #[default]
    Off,
    /// An AuthSwitchRequest to caching_sha2_password is out: the answer is
    /// a fast-auth scramble.
    Switched,
    /// 0x01 0x04 is out: the answer is the cleartext password (or, with
    /// `--rsa-key`, a public-key request or the encrypted password).
    FullAuth,
    /// The public key is out (`--rsa-key`): the answer is the encrypted
    /// password; a second request is refused.
    KeySent,
    /// Fast auth succeeded: 0x01 0x03 goes out just before the login OK.
    FastOk,
}

impl Session {
    /// The HandshakeResponse is read (the login recorded): take the login
    /// over if it is a caching_sha2 one. `plugin`: the client's plugin,
    /// `None` without CLIENT_PLUGIN_AUTH.
    pub(super) fn sha2_on_hello(
        &mut self,
        caps: u32,
        plugin: Option<&str>,
        token: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) -> bool {
        let Some(user) = self.login.as_ref().map(|l| l.user.clone()) else {
            return false;
        };
        let plugin = if caps & CLIENT_PLUGIN_AUTH != 0 {
            plugin
        } else {
            None
        };
        if plugin == Some(CACHING_SHA2_PASSWORD) && ctx.users.sha2_capable(&user) {
            self.sha2_fast(token, ctx, out);
            return true;
        }
        if caps & CLIENT_PLUGIN_AUTH != 0 && ctx.users.sha2_only(&user) {
            let switch =
                handshake::build_auth_switch_request(CACHING_SHA2_PASSWORD, &self.scramble);
            self.sha2 = Sha2Phase::Switched;
            self.send_login_packet(&switch, out);
            return true;
        }
        false
    }

    /// The client's answer to the AuthSwitchRequest or to 0x01 0x04.
    pub(super) fn sha2_on_packet(
        &mut self,
        payload: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        match self.sha2 {
            Sha2Phase::Switched => self.sha2_fast(payload, ctx, out),
            Sha2Phase::FullAuth | Sha2Phase::KeySent => self.sha2_full(payload, ctx, out),
            Sha2Phase::Off | Sha2Phase::FastOk => self.close(out),
        }
    }

    fn sha2_fast(&mut self, token: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let Some(login) = self.login.as_mut() else {
            return self.close(out);
        };
        login.used_password = !token.is_empty();
        let user = login.user.clone();
        match ctx.users.sha2_fast(&user, &self.scramble, token) {
            Sha2Fast::Accepted(auth) => {
                self.sha2 = Sha2Phase::FastOk;
                out.push(SessionAction::Auth(AuthPath::Sha2Fast));
                self.state = State::WaitBackend;
                out.push(SessionAction::Authenticated(Box::new(auth)));
            }
            Sha2Fast::FullAuth if !self.full_auth_possible(ctx) => {
                self.no_full_auth(&user, "", ctx, out);
                self.access_denied(ctx, out)
            }
            Sha2Fast::FullAuth => {
                self.sha2 = Sha2Phase::FullAuth;
                self.send_login_packet(&[AUTH_MORE_DATA, PERFORM_FULL_AUTHENTICATION], out);
            }
            Sha2Fast::Refused => self.access_denied(ctx, out),
        }
    }

    /// Whether this connection can carry a full authentication's password:
    /// TLS or the unix socket, or plain TCP with `--rsa-key`. Without one,
    /// a fast auth that did not match is refused at once, whoever the user
    /// (so the answer does not tell users apart) and without asking for a
    /// cleartext that some clients would send over plain TCP
    /// (mysql-connector-python does) only to be refused.
    pub(super) fn full_auth_possible(&self, ctx: &SessionCtx) -> bool {
        self.secure || ctx.rsa_key.is_some()
    }

    /// The log line for a fast auth refused because the transport cannot
    /// carry the full authentication it may have needed: only for a user
    /// whose entries need the cleartext (a cache miss is likely, and the
    /// operator can fix it); a wrong password of another user is just that.
    pub(super) fn no_full_auth(
        &self,
        user: &str,
        what: &str,
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) {
        if ctx.users.needs_cleartext(user) {
            out.push(SessionAction::Log(format!(
                "{what}caching_sha2_password full authentication over TCP needs TLS or RSA keys: \
                 start ringgate with --rsa-key or --tls-cert/--tls-key (or use the unix socket, or a cached fast auth)"
            )));
        }
    }

    fn sha2_full(&mut self, payload: &[u8], ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let Some(login) = self.login.as_mut() else {
            return self.close(out);
        };
        login.used_password = true;
        let user = login.user.clone();
        let decrypted;
        let password = if self.secure {
            // TLS or the unix socket.
            // The client sends the password NUL-terminated.
            payload.strip_suffix(&[0]).unwrap_or(payload)
        } else if let Some(key) = ctx.rsa_key {
            if payload == [REQUEST_PUBLIC_KEY] && self.sha2 == Sha2Phase::FullAuth {
                // The answer is the RSA-encrypted password, read again here.
                self.sha2 = Sha2Phase::KeySent;
                let mut more = vec![AUTH_MORE_DATA];
                more.extend_from_slice(key.public_pem().as_bytes());
                return self.send_login_packet(&more, out);
            }
            match key.decrypt_password(payload, &self.scramble) {
                Ok(p) => {
                    decrypted = p;
                    &decrypted
                }
                Err(e) => {
                    out.push(SessionAction::Log(format!(
                        "caching_sha2_password full authentication: {e}"
                    )));
                    return self.access_denied(ctx, out);
                }
            }
        } else {
            // Not asked for on such a connection (see `full_auth_possible`);
            // refused whatever comes.
            return self.access_denied(ctx, out);
        };
        match ctx.users.authenticate_cleartext(&user, password) {
            Some(auth) => {
                self.sha2 = Sha2Phase::Off;
                out.push(SessionAction::Auth(AuthPath::Sha2Full));
                self.state = State::WaitBackend;
                out.push(SessionAction::Authenticated(Box::new(auth)));
            }
            None => self.access_denied(ctx, out),
        }
    }

    /// A login-phase packet that the client answers: written in
    /// `State::AuthSwitch`, its answer read in `State::ReadSwitchResponse`.
    fn send_login_packet(&mut self, payload: &[u8], out: &mut Vec<SessionAction>) {
        let (bytes, next) = packet(self.seq, payload);
        self.seq = next;
        self.state = State::AuthSwitch;
        out.push(SessionAction::SendClient(bytes));
    }

    /// After a fast auth, the 0x01 0x03 that precedes the login OK (empty
    /// otherwise); advances the sequence id.
    pub(super) fn sha2_ok_prefix(&mut self) -> Vec<u8> {
        if self.sha2 != Sha2Phase::FastOk {
            return Vec::new();
        }
        self.sha2 = Sha2Phase::Off;
        let (bytes, next) = packet(self.seq, &[AUTH_MORE_DATA, FAST_AUTH_SUCCESS]);
        self.seq = next;
        bytes
    }

    /// The refusal the server gives for a bad password or unknown user.
    pub(super) fn access_denied(&mut self, _ctx: &SessionCtx, out: &mut Vec<SessionAction>) {
        let Some(login) = self.login.as_ref() else {
            return self.close(out);
        };
        // Same message for an unknown user and a wrong password, so the
        // answer does not reveal which users exist.
        let msg = format!(
            "Access denied for user '{}'@'{}' (using password: {})",
            login.user,
            self.peer_host,
            if login.used_password { "YES" } else { "NO" }
        );
        self.login_failed(RejectReason::Auth, ER_ACCESS_DENIED_ERROR, &msg, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::auth::native_token;
    use wire::caching_sha2::scramble;
    use wire::handshake::build_handshake_response;
    use wire::packet::split_packet;

    const NONCE: [u8; 20] = *b"0123456789abcdefghij";
    /// MySQL 8's verifier for `foobar` (caching_sha2.rs's vector).
    const FOOBAR: &str = "24412430303524031A69251C34295C4B35167C7F1E5A7B63091349503974624D34504B5A424679354856336868686F52485A736E4A733368786E427575516C73446469496537";

    fn users() -> Users {
        Users::parse(&format!(
            r#"{{"erin": [{{"MysqlCachingSha2Password": "{FOOBAR}"}}],
                "fay": [{{"Password": "pw"}}]}}"#
        ))
        .unwrap()
    }

    fn ctx(users: &Users) -> SessionCtx<'_> {
        crate::session::tests::ctx(users, Instant::now())
    }

    /// A session past its greeting, from `peer_host` ("localhost": the
    /// unix socket).
    fn session(u: &Users, peer_host: &str) -> Session {
        let mut out = Vec::new();
        let mut s = Session::new(
            NewSession {
                scramble: NONCE,
                connection_id: 1,
                capabilities: PROXY_CAPS,
                ext_capabilities: 0,
                server_version: "8.4.0-ringgate".into(),
                peer_host: peer_host.into(),
                now: Instant::now(),
                over_limit: false,
                transaction_pooling: false,
                require_secure_transport: false,
            },
            &mut out,
        );
        out.clear();
        s.on_client_write(Completion::Done(100), &[], &ctx(u), &mut out);
        s
    }

    fn hello(user: &str, plugin: &str, token: Vec<u8>) -> Vec<u8> {
        let payload = build_handshake_response(&HandshakeResponse {
            capabilities: PROXY_CAPS,
            max_packet_size: 1 << 24,
            charset: UTF8MB4_GENERAL_CI,
            username: user.into(),
            auth_response: token,
            database: None,
            auth_plugin: Some(plugin.into()),
            connect_attrs: Vec::new(),
        });
        let mut v = Vec::new();
        write_packet(&mut v, 1, &payload);
        v
    }

    /// Feeds client bytes; returns the actions and the one packet sent
    /// (seq, payload), written at once.
    fn feed(
        s: &mut Session,
        u: &Users,
        bytes: &[u8],
    ) -> (Vec<SessionAction>, Option<(u8, Vec<u8>)>) {
        let mut out = Vec::new();
        s.on_client_read(Completion::Done(bytes.len()), bytes, &ctx(u), &mut out);
        let sent = out.iter().find_map(|a| match a {
            SessionAction::SendClient(b) => {
                let p = split_packet(b).unwrap().0;
                Some((p.seq, p.payload.to_vec()))
            }
            _ => None,
        });
        if let Some((_, ref p)) = sent {
            let mut more = Vec::new();
            s.on_client_write(Completion::Done(p.len() + 4), &[], &ctx(u), &mut more);
            out.extend(more);
        }
        (out, sent)
    }

    fn packet_of(seq: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        write_packet(&mut v, seq, payload);
        v
    }

    fn authenticated(out: &[SessionAction]) -> Option<Authenticated> {
        out.iter().find_map(|a| match a {
            SessionAction::Authenticated(a) => Some((**a).clone()),
            _ => None,
        })
    }

    /// The lease: the bytes before the OK.
    fn ok_bytes(s: &mut Session) -> Vec<u8> {
        s.on_identity(IdentityId(7), &mut Vec::new());
        let mut out = Vec::new();
        let u = users();
        s.on_leased(&[], &ctx(&u), &mut out);
        match &out[..] {
            [SessionAction::SendClient(b)] => b.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn full_auth_over_the_unix_socket_then_fast_auth() {
        let u = users();
        let mut s = session(&u, "localhost");
        let (_, sent) = feed(
            &mut s,
            &u,
            &hello("erin", CACHING_SHA2_PASSWORD, scramble(b"foobar", &NONCE)),
        );
        assert_eq!(sent, Some((2, vec![0x01, 0x04])), "cache miss: full auth");
        let (out, _) = feed(&mut s, &u, &packet_of(3, b"foobar\0"));
        assert!(out.contains(&SessionAction::Auth(AuthPath::Sha2Full)));
        let auth = authenticated(&out).expect("accepted");
        assert_eq!(auth.backend_user, "erin");
        let ok = ok_bytes(&mut s);
        assert_eq!((ok[3], ok[4]), (4, 0x00), "OK with sequence id 4");

        // A second connection (another nonce would do as well): fast auth.
        let mut s = session(&u, "127.0.0.1");
        let (out, sent) = feed(
            &mut s,
            &u,
            &hello("erin", CACHING_SHA2_PASSWORD, scramble(b"foobar", &NONCE)),
        );
        assert_eq!(sent, None);
        assert!(out.contains(&SessionAction::Auth(AuthPath::Sha2Fast)));
        assert_eq!(authenticated(&out), Some(auth));
        let ok = ok_bytes(&mut s);
        assert_eq!(
            &ok[..6],
            &[2, 0, 0, 2, 0x01, 0x03],
            "0x01 0x03 first, seq 2"
        );
        assert_eq!((ok[9], ok[10]), (3, 0x00), "then the OK, seq 3");
    }

    #[test]
    fn full_auth_over_tcp_is_refused_with_1045() {
        // Without TLS or --rsa-key the cleartext is never asked for: a
        // fast auth that missed is refused at once, for every kind of user.
        let u = users();
        for user in ["erin", "fay", "nobody"] {
            let mut s = session(&u, "127.0.0.1");
            let (out, sent) = feed(
                &mut s,
                &u,
                &hello(user, CACHING_SHA2_PASSWORD, scramble(b"foobar", &NONCE)),
            );
            let (seq, err) = sent.unwrap();
            assert_eq!(
                (seq, err[0], u16::from_le_bytes([err[1], err[2]])),
                (2, 0xff, 1045)
            );
            let text = String::from_utf8_lossy(&err);
            let want = format!("Access denied for user '{user}'@'127.0.0.1' (using password: YES)");
            assert!(text.ends_with(&want), "{text}");
            assert!(out.contains(&SessionAction::Reject(RejectReason::Auth)));
            assert!(authenticated(&out).is_none());
            // The hint is for the operator of a verifier account only.
            let hint = format!("{out:?}").contains("needs TLS or RSA keys");
            assert_eq!(hint, user == "erin", "{user}");
        }
    }

    /// Like `feed`, with `--rsa-key`.
    fn feed_rsa(
        s: &mut Session,
        u: &Users,
        key: &RsaPrivate,
        bytes: &[u8],
    ) -> (Vec<SessionAction>, Option<(u8, Vec<u8>)>) {
        let c = SessionCtx {
            rsa_key: Some(key),
            ..ctx(u)
        };
        let mut out = Vec::new();
        s.on_client_read(Completion::Done(bytes.len()), bytes, &c, &mut out);
        let sent = out.iter().find_map(|a| match a {
            SessionAction::SendClient(b) => {
                let p = split_packet(b).unwrap().0;
                Some((p.seq, p.payload.to_vec()))
            }
            _ => None,
        });
        if let Some((_, ref p)) = sent {
            s.on_client_write(Completion::Done(p.len() + 4), &[], &c, &mut out);
        }
        (out, sent)
    }

    #[test]
    fn rsa_key_full_auth_over_tcp_sends_the_key_and_takes_the_ciphertext() {
        let u = users();
        let key = RsaPrivate::parse(
            include_str!("../../../wire/src/testdata/rsa_test_key.pem"),
            "t",
        )
        .unwrap();
        let mut s = session(&u, "127.0.0.1");
        let hello = hello("erin", CACHING_SHA2_PASSWORD, scramble(b"foobar", &NONCE));
        let (_, sent) = feed_rsa(&mut s, &u, &key, &hello);
        assert_eq!(sent, Some((2, vec![0x01, 0x04])));
        let (_, sent) = feed_rsa(&mut s, &u, &key, &packet_of(3, &[0x02]));
        let (seq, pem) = sent.unwrap();
        assert_eq!((seq, pem[0]), (4, 0x01));
        assert_eq!(&pem[1..], key.public_pem().as_bytes());
        let public = wire::sha2_rsa::RsaPublic::parse(&pem[1..], "ringgate").unwrap();
        let cipher = public.encrypt_password(b"foobar", &NONCE).unwrap();
        let (out, _) = feed_rsa(&mut s, &u, &key, &packet_of(5, &cipher));
        assert!(out.contains(&SessionAction::Auth(AuthPath::Sha2Full)));
        let auth = authenticated(&out).expect("accepted");
        // The cleartext is what a caching_sha2 backend's full auth needs.
        assert_eq!(auth.credential.cleartext(), Some(&b"foobar"[..]));

        // A client that has the key sends the ciphertext at once; a wrong
        // password gets 1045, and a second key request is refused.
        let mut s = session(&u, "127.0.0.1");
        let hello2 = hello_for("erin", b"nope");
        feed_rsa(&mut s, &u, &key, &hello2);
        let cipher = public.encrypt_password(b"nope", &NONCE).unwrap();
        let (out, sent) = feed_rsa(&mut s, &u, &key, &packet_of(3, &cipher));
        assert_eq!(
            u16::from_le_bytes([sent.as_ref().unwrap().1[1], sent.unwrap().1[2]]),
            1045
        );
        assert!(authenticated(&out).is_none());
        assert!(!format!("{out:?}").contains("nope"));
        let mut s = session(&u, "127.0.0.1");
        feed_rsa(&mut s, &u, &key, &hello2);
        feed_rsa(&mut s, &u, &key, &packet_of(3, &[0x02]));
        let (_, sent) = feed_rsa(&mut s, &u, &key, &packet_of(5, &[0x02]));
        assert_eq!(
            u16::from_le_bytes([sent.as_ref().unwrap().1[1], sent.unwrap().1[2]]),
            1045
        );
    }

    fn hello_for(user: &str, password: &[u8]) -> Vec<u8> {
        hello(user, CACHING_SHA2_PASSWORD, scramble(password, &NONCE))
    }

    #[test]
    fn a_wrong_cleartext_password_gets_1045_and_is_not_cached() {
        let u = users();
        let mut s = session(&u, "localhost");
        feed(
            &mut s,
            &u,
            &hello("erin", CACHING_SHA2_PASSWORD, scramble(b"nope", &NONCE)),
        );
        let (out, sent) = feed(&mut s, &u, &packet_of(3, b"nope\0"));
        assert_eq!(
            u16::from_le_bytes([sent.as_ref().unwrap().1[1], sent.unwrap().1[2]]),
            1045
        );
        assert!(authenticated(&out).is_none());
        let text = format!("{out:?}");
        assert!(!text.contains("nope"), "{text}");
        let mut s = session(&u, "localhost");
        let (_, sent) = feed(
            &mut s,
            &u,
            &hello("erin", CACHING_SHA2_PASSWORD, scramble(b"nope", &NONCE)),
        );
        assert_eq!(sent, Some((2, vec![0x01, 0x04])));
    }

    #[test]
    fn a_native_answer_for_a_sha2_only_user_is_switched() {
        let u = users();
        let mut s = session(&u, "localhost");
        let (_, sent) = feed(
            &mut s,
            &u,
            &hello("erin", NATIVE_PASSWORD, native_token(b"foobar", &NONCE)),
        );
        let (seq, switch) = sent.unwrap();
        assert_eq!(seq, 2);
        let mut want = vec![0xfe];
        want.extend_from_slice(b"caching_sha2_password\0");
        want.extend_from_slice(&NONCE);
        want.push(0);
        assert_eq!(switch, want);
        let (_, sent) = feed(&mut s, &u, &packet_of(3, &scramble(b"foobar", &NONCE)));
        assert_eq!(sent, Some((4, vec![0x01, 0x04])));
        let (out, _) = feed(&mut s, &u, &packet_of(5, b"foobar\0"));
        assert!(authenticated(&out).is_some());
    }

    #[test]
    fn a_password_entry_takes_fast_auth_at_once_and_native_still_works() {
        let u = users();
        let mut s = session(&u, "127.0.0.1");
        let (out, sent) = feed(
            &mut s,
            &u,
            &hello("fay", CACHING_SHA2_PASSWORD, scramble(b"pw", &NONCE)),
        );
        assert_eq!(sent, None);
        assert!(out.contains(&SessionAction::Auth(AuthPath::Sha2Fast)));
        let mut s = session(&u, "127.0.0.1");
        let (out, _) = feed(
            &mut s,
            &u,
            &hello("fay", NATIVE_PASSWORD, native_token(b"pw", &NONCE)),
        );
        assert!(out.contains(&SessionAction::Auth(AuthPath::Native)));
    }
}
