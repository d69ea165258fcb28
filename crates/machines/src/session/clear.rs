//! mysql_clear_password on the front end: a client that proposes it sends
//! its password in clear as the login's auth data (NUL-terminated). It is
//! taken only where nobody can read it on the way: over TLS or the unix
//! socket. Over plain TCP the login gets 1045 whatever the password (and
//! the log says why), so a client misconfigured to send it is refused
//! the same way every time. MySQL's own server accepts the plugin only for
//! accounts whose plugin needs it (PAM, LDAP); ringgate checks the password
//! against every kind of users-file entry, as a caching_sha2 full
//! authentication does.

use super::*;

/// The client-side plugin that sends the password in clear.
pub const CLEAR_PASSWORD: &str = "mysql_clear_password";

impl Session {
    /// The client proposed mysql_clear_password: authenticate it here
    /// (true), or leave the login to the other plugins (false).
    pub(super) fn clear_on_hello(
        &mut self,
        caps: u32,
        plugin: Option<&str>,
        token: &[u8],
        ctx: &SessionCtx,
        out: &mut Vec<SessionAction>,
    ) -> bool {
        if caps & CLIENT_PLUGIN_AUTH == 0 || plugin != Some(CLEAR_PASSWORD) {
            return false;
        }
        let Some(login) = self.login.as_mut() else {
            return false;
        };
        login.used_password = !token.is_empty();
        if !self.secure {
            out.push(SessionAction::Log(
                "mysql_clear_password refused over TCP without TLS (connect with TLS, or over the unix socket)"
                    .into(),
            ));
            self.access_denied(ctx, out);
            return true;
        }
        let password = token.strip_suffix(&[0]).unwrap_or(token);
        match ctx.users.authenticate_cleartext(&login.user, password) {
            Some(auth) => {
                self.state = State::WaitBackend;
                out.push(SessionAction::Auth(AuthPath::Clear));
                out.push(SessionAction::Authenticated(Box::new(auth)));
            }
            None => self.access_denied(ctx, out),
        }
        true
    }
}
