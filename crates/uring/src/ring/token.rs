//! `user_data` encoding. A completion names the object it belongs to by
//! slab index *and* generation, so a completion that arrives after its
//! connection was torn down and the slab entry reused can never be delivered
//! to the new occupant.

/// What kind of operation a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpTag {
    Accept = 1,
    Tick = 2,
    ClientRead = 3,
    ClientWrite = 4,
    BackendConnect = 5,
    BackendRead = 6,
    BackendWrite = 7,
    /// Completions of cancel requests and link timeouts: nothing to do.
    Ignore = 8,
    /// Relay: the session's buffer written to the backend's socket.
    UpWrite = 9,
    /// Relay: the backend's socket read into the backend's buffer.
    DownRead = 10,
    /// Relay: the backend's buffer written to the client's socket.
    DownWrite = 11,
    /// Relay: the cancel of the idle backend read at a clean end.
    DownCancel = 12,
    /// Ring mode: the client socket's multishot receive (session token).
    ClientRecv = 13,
    /// Ring mode: a backend socket's multishot receive (backend token).
    BackendRecv = 14,
    /// Ring mode: the cancel of a backend's receive at a clean release.
    BackendRecvCancel = 15,
    /// Front-end TLS: the session's ciphertext written to the client.
    TlsWrite = 16,
    /// Fixed mode: an idle client's readability poll (it holds no slot).
    ClientPoll = 17,
    /// Backend TLS: a backend connection's ciphertext written to the
    /// server (backend token).
    BackendTlsWrite = 18,
    /// A backend connection's close watch (backend token).
    BackendWatch = 19,
    /// Fixed mode: a backend connection's readability poll, which the
    /// relay's read waits on between commands without a slot (backend
    /// token).
    BackendPoll = 21,
    /// Fixed mode: the cancel of a client read still pending on an empty
    /// buffer 10 ms after it was submitted (the client went idle: it gives
    /// its slot back and waits on a poll; `worker/hot_read.rs`).
    ClientReadCool = 23,
    /// Fixed mode: the same for the relay's read of the backend.
    DownReadCool = 24,
    /// A one-shot accept into a direct descriptor; the index is its lane
    /// (`worker/direct.rs`).
    DirectAccept = 25,
    /// IORING_OP_CLOSE of a direct descriptor; the index is its slot.
    DirectClose = 26,
    /// IORING_OP_SHUTDOWN of a client's direct descriptor (session token).
    ClientShutdown = 27,
    /// Posted by another worker's MSG_RING (or this worker itself): KILL
    /// CONNECTION marked this session (session token); shut its client down.
    KillWake = 28,
    /// This ring's own completion of a MSG_RING it sent.
    MsgRingSent = 29,
    /// Another worker shut down the client this session's KILL named: its
    /// answer may go out.
    KillAnswer = 30,
}

impl OpTag {
    fn from_u8(v: u8) -> Option<OpTag> {
        Some(match v {
            1 => OpTag::Accept,
            2 => OpTag::Tick,
            3 => OpTag::ClientRead,
            4 => OpTag::ClientWrite,
            5 => OpTag::BackendConnect,
            6 => OpTag::BackendRead,
            7 => OpTag::BackendWrite,
            8 => OpTag::Ignore,
            9 => OpTag::UpWrite,
            10 => OpTag::DownRead,
            11 => OpTag::DownWrite,
            12 => OpTag::DownCancel,
            13 => OpTag::ClientRecv,
            14 => OpTag::BackendRecv,
            15 => OpTag::BackendRecvCancel,
            16 => OpTag::TlsWrite,
            17 => OpTag::ClientPoll,
            18 => OpTag::BackendTlsWrite,
            19 => OpTag::BackendWatch,
            21 => OpTag::BackendPoll,
            23 => OpTag::ClientReadCool,
            24 => OpTag::DownReadCool,
            25 => OpTag::DirectAccept,
            26 => OpTag::DirectClose,
            27 => OpTag::ClientShutdown,
            28 => OpTag::KillWake,
            29 => OpTag::MsgRingSent,
            30 => OpTag::KillAnswer,
            _ => return None,
        })
    }
}

/// `index:32 | generation:24 | tag:8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    pub index: u32,
    pub generation: u32,
    pub tag: OpTag,
}

pub const GENERATION_MASK: u32 = 0x00FF_FFFF;

impl Token {
    pub fn new(tag: OpTag, index: u32, generation: u32) -> Token {
        Token {
            index,
            generation: generation & GENERATION_MASK,
            tag,
        }
    }

    pub fn decode(user_data: u64) -> Option<Token> {
        let tag = OpTag::from_u8((user_data & 0xFF) as u8)?;
        Some(Token {
            index: (user_data >> 32) as u32,
            generation: ((user_data >> 8) as u32) & GENERATION_MASK,
            tag,
        })
    }
}

impl From<Token> for u64 {
    fn from(t: Token) -> u64 {
        (u64::from(t.index) << 32) | (u64::from(t.generation & GENERATION_MASK) << 8) | t.tag as u64
    }
}

/// Bumps a generation so it stays inside the 24 bits the token carries.
pub fn next_generation(g: u32) -> u32 {
    g.wrapping_add(1) & GENERATION_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Token::new(OpTag::BackendRead, 70_000, 0x12_3456);
        assert_eq!(Token::decode(t.into()), Some(t));
        assert_eq!(Token::decode(0), None);
    }

    #[test]
    fn generation_wraps_in_24_bits() {
        assert_eq!(next_generation(GENERATION_MASK), 0);
    }
}
