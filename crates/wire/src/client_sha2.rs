//! caching_sha2_password, client side: what [`super::client_login`] does
//! after its fast-auth scramble went out, when the server answers with
//! AuthMoreData (0x01).
//!
//! Follows MySQL 8.0/8.4's client (`sql-common/client_authentication.cc`,
//! `caching_sha2_password_auth_client`):
//!
//! ```text
//! server                          client
//! 0x01 0x03 (fast auth ok)   ->   wait for the OK (or an ERR)
//! 0x01 0x04 (full auth)      ->
//!                            <-   password NUL   over TLS or a unix socket
//!                            <-   RSA(password)  with the server's key known
//!                                                (--backend-rsa-public-key)
//!                            <-   0x02           otherwise: ask for the key
//! 0x01 PEM public key        ->
//!                            <-   RSA(password)
//! OK | ERR                   ->
//! ```
//!
//! Full authentication needs the cleartext password. The proxy has it for
//! `--backend-password`, a users-file `BackendPassword` and clients that
//! logged in to it by full authentication; for a client that proved only a
//! hash (a fast auth or a native login), the server's cache must already
//! hold the account (fast auth), else the login fails with a message that
//! says so.

use std::sync::Arc;

use crate::auth::Credential;
use crate::caching_sha2::{FAST_AUTH_SUCCESS, PERFORM_FULL_AUTHENTICATION, REQUEST_PUBLIC_KEY};
use crate::login_error::LoginError;
use crate::sha2_rsa::RsaPublic;

/// How full authentication may send the password on this connection.
#[derive(Clone, Debug, Default)]
pub struct FullAuthTransport {
    /// TLS or a unix socket: the cleartext may go as is.
    pub secure: bool,
    /// The server's RSA public key, if configured
    /// (`--backend-rsa-public-key`): no 0x02 round trip.
    pub server_key: Option<Arc<RsaPublic>>,
}

/// Where the exchange is after the scramble went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The scramble is out: OK, ERR or AuthMoreData next.
    Scrambled,
    /// 0x01 0x03 came: only OK or ERR may follow.
    FastOk,
    /// 0x02 is out: the server's PEM key comes next.
    KeyRequested,
    /// The password is out (cleartext or RSA): OK or ERR next.
    PasswordSent,
}

/// One caching_sha2 exchange: the nonce the scramble was for (the RSA
/// step XORs the password with it too) and the step.
#[derive(Debug)]
pub struct Sha2Exchange {
    nonce: Vec<u8>,
    step: Step,
}

/// What the login does after an AuthMoreData.
#[derive(Debug, PartialEq, Eq)]
pub enum Sha2Next {
    /// Send this payload (the next sequence id).
    Send(Vec<u8>),
    /// Nothing to send: the server's next packet is the verdict.
    Wait,
}

impl Sha2Exchange {
    pub fn new(nonce: &[u8]) -> Sha2Exchange {
        Sha2Exchange {
            nonce: nonce.to_vec(),
            step: Step::Scrambled,
        }
    }

    /// Whether the server said fast auth succeeded (only OK or ERR may
    /// follow): for the caller's bookkeeping and tests.
    pub fn fast_ok(&self) -> bool {
        self.step == Step::FastOk
    }

    /// An AuthMoreData packet's data (after the 0x01).
    pub fn on_more_data(
        &mut self,
        data: &[u8],
        credential: &Credential,
        transport: &FullAuthTransport,
    ) -> Result<Sha2Next, LoginError> {
        match (self.step, data) {
            (Step::Scrambled, [FAST_AUTH_SUCCESS]) => {
                self.step = Step::FastOk;
                Ok(Sha2Next::Wait)
            }
            (Step::Scrambled, [PERFORM_FULL_AUTHENTICATION]) => {
                let Some(password) = credential.cleartext() else {
                    return Err(LoginError::FullAuthWithoutPassword);
                };
                self.step = Step::PasswordSent;
                if transport.secure {
                    let mut p = Vec::with_capacity(password.len() + 1);
                    p.extend_from_slice(password);
                    p.push(0);
                    return Ok(Sha2Next::Send(p));
                }
                if let Some(key) = &transport.server_key {
                    return self.encrypt(key, password);
                }
                self.step = Step::KeyRequested;
                Ok(Sha2Next::Send(vec![REQUEST_PUBLIC_KEY]))
            }
            (Step::KeyRequested, pem) => {
                let key = RsaPublic::parse(pem, "the server's public key")
                    .map_err(|e| LoginError::Rsa(e.to_string()))?;
                let password = credential.cleartext().unwrap_or_default();
                self.step = Step::PasswordSent;
                self.encrypt(&key, password)
            }
            (step, data) => Err(LoginError::Protocol {
                what: "caching_sha2_password exchange",
                detail: format!(
                    "unexpected AuthMoreData ({} bytes, first {:#04x?}) after {step:?}",
                    data.len(),
                    data.first()
                ),
            }),
        }
    }

    fn encrypt(&self, key: &RsaPublic, password: &[u8]) -> Result<Sha2Next, LoginError> {
        key.encrypt_password(password, &self.nonce)
            .map(Sha2Next::Send)
            .map_err(|e| LoginError::Rsa(e.to_string()))
    }
}

#[cfg(test)]
mod tests;
