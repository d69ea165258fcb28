//! A backend connection that its session gives back while the driver's
//! relay still reads it through a receive that stays armed between reads
//! (ring mode's multishot receive). The driver reports what is left of that
//! receive as typed facts ([`ReceiveLeft`]); the decision is the pool's: a
//! connection is reusable only if nothing is left of the relay's receive
//! (no bytes queued, no end but its cancel's), and a receive still armed is
//! cancelled first, or, at a park that keeps the connection as it is, left
//! armed as the pool's close watch.
//!
//! While the cancelled receive ends, the pool holds what the give-back
//! asked for ([`Pool::defer_give_back`]: a release, a relet, a park, a
//! statement, a lease); at its last completion the driver says whether the
//! connection is still clean ([`clean_after_cancel`]) and
//! [`Pool::finish_give_back`] carries it out.

use super::*;
use crate::prepared::StmtKey;

/// How the relay's receive on a backend has ended so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiveEnd {
    /// No end yet.
    Open,
    /// Ended by a cancel (or taken as cancelled): the server said nothing.
    Cancelled,
    /// Ended otherwise: an EOF, an error, or bytes the server sent between
    /// commands.
    Other,
}

/// What is left of the relay's receive on a backend at a give-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveLeft {
    /// The receive is still armed.
    pub armed: bool,
    /// Bytes were queued on it that no read took (the server spoke).
    pub bytes_queued: bool,
    pub end: ReceiveEnd,
    /// A chunk of it is still being sent (it cannot go back to the ring
    /// yet).
    pub chunk_in_flight: bool,
}

/// What the driver does with a backend given back ([`give_back`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveBack {
    /// A park that keeps the connection as it is: the receive stays armed,
    /// the pool's close watch while the connection is idle.
    KeepArmed,
    /// Cancel the receive; the give-back is carried out at its last
    /// completion, clean as [`clean_after_cancel`] says.
    CancelFirst,
    /// Carry out the give-back now, the connection clean or not.
    Now { clean: bool },
}

/// The give-back of a backend whose session says it is `clean`, and whose
/// give-back `keeps_as_is` (a park without a reset or a question to ask),
/// with `left` of the relay's receive.
pub fn give_back(clean: bool, keeps_as_is: bool, left: ReceiveLeft) -> GiveBack {
    let leftover = left.bytes_queued || left.end == ReceiveEnd::Other;
    let quiet = left.end == ReceiveEnd::Open && !left.chunk_in_flight;
    if left.armed && clean && !leftover && keeps_as_is && quiet {
        return GiveBack::KeepArmed;
    }
    if left.armed && clean && !leftover {
        return GiveBack::CancelFirst;
    }
    GiveBack::Now {
        clean: clean && !leftover && !left.armed,
    }
}

/// At the last completion of a receive cancelled at a give-back: reusable
/// only if the cancel ended it (no bytes and no EOF beat the cancel).
pub fn clean_after_cancel(bytes_queued: bool, end: ReceiveEnd) -> bool {
    !bytes_queued && end == ReceiveEnd::Cancelled
}

impl ReceiveEnd {
    /// The end of a receive as its last completion said it (None: it has
    /// not ended).
    pub fn of(end: Option<Completion>) -> ReceiveEnd {
        match end {
            None => ReceiveEnd::Open,
            Some(Completion::Cancelled) => ReceiveEnd::Cancelled,
            Some(_) => ReceiveEnd::Other,
        }
    }
}

/// A park's give-back (transaction pooling): [`Pool::release_kept`] with
/// what the connection carries, or [`Pool::release`] with a reset, after
/// [`Pool::park_asking`] for `ask`'s LAST_INSERT_ID().
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Park {
    /// The session's schema and settings fingerprint (None: unchanged).
    pub kept: Option<(Option<String>, Settings)>,
    pub reset: bool,
    /// The session that wants LAST_INSERT_ID() read first.
    pub ask: Option<SessionId>,
}

impl Park {
    /// Goes back as it is: no reset, no question to ask on it first.
    pub fn keeps_as_is(&self) -> bool {
        !self.reset && self.ask.is_none()
    }
}

/// What a give-back asked for, held while the receive it cancelled ends.
#[derive(Clone, Debug)]
pub enum PendingGiveBack {
    /// [`Pool::release`]: the relay ended.
    Release,
    /// [`Pool::relet`]: COM_CHANGE_USER resets it in place.
    Relet,
    /// [`Pool::park`].
    Park(Park),
    /// [`Pool::statement`] (transaction pooling: a prepared statement is
    /// looked up, or prepared, on the session's connection).
    Statement {
        key: Arc<StmtKey>,
        want_response: bool,
        types: Option<Vec<u8>>,
    },
    /// [`Pool::replay`] (transaction replay on the session's new
    /// connection to the writer).
    Replay {
        statements: Vec<crate::tx_replay::Recorded>,
        then: Option<Vec<u8>>,
    },
    /// A lease of a connection whose receive a park left armed, to a
    /// session that reads its backend into the connection's own buffer
    /// (where that receive would take the answer): [`PoolEvent::Leased`]
    /// again once the receive has ended.
    Lease(SessionId),
}

impl PendingGiveBack {
    /// A park that keeps the connection as it is ([`give_back`]'s
    /// `keeps_as_is`).
    pub fn keeps_as_is(&self) -> bool {
        matches!(self, PendingGiveBack::Park(park) if park.keeps_as_is())
    }
}

impl Pool {
    /// Connection `id`'s give-back waits for the relay's receive, which the
    /// driver cancelled: hold what it asked for until
    /// [`Pool::finish_give_back`].
    pub fn defer_give_back(&mut self, id: BackendId, asked: PendingGiveBack) {
        self.give_backs.insert(id, asked);
    }

    /// The receive a give-back cancelled on connection `id` has ended, the
    /// connection `clean` or not ([`clean_after_cancel`]): carry out what
    /// the give-back asked for (a release when nothing was held), as
    /// [`Pool::carry_out_give_back`] does.
    pub fn finish_give_back(
        &mut self,
        id: BackendId,
        clean: bool,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) -> bool {
        let asked = self
            .give_backs
            .remove(&id)
            .unwrap_or(PendingGiveBack::Release);
        self.carry_out_give_back(id, clean, asked, now, out)
    }

    /// Carry out what a give-back of connection `id` asked for, the
    /// connection `clean` or not. True: the driver shuts the socket first,
    /// because the server spoke or closed while the connection was idle and
    /// what runs on it next (the session's relay, a reset, a prepare) must
    /// fail on a shut socket, so that the pool's failure path answers the
    /// session; a release or a park closes it itself. A flat match: one arm
    /// per give-back.
    pub fn carry_out_give_back(
        &mut self,
        id: BackendId,
        clean: bool,
        asked: PendingGiveBack,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) -> bool {
        let shut = !clean && !matches!(asked, PendingGiveBack::Release | PendingGiveBack::Park(_));
        match asked {
            PendingGiveBack::Release => self.release(id, clean, now, out),
            PendingGiveBack::Relet => self.relet(id, now, out),
            PendingGiveBack::Park(park) => self.park(id, clean, park, now, out),
            PendingGiveBack::Statement {
                key,
                want_response,
                types,
            } => self.statement(id, key, want_response, types, now, out),
            PendingGiveBack::Replay { statements, then } => {
                self.replay(id, &statements, then, now, out)
            }
            PendingGiveBack::Lease(session) => out.push(PoolEvent::Leased {
                session,
                backend: id,
            }),
        }
        shut
    }

    /// Transaction pooling: the session parked and its connection is free
    /// to go back. Clean: asked for LAST_INSERT_ID() first
    /// ([`Pool::park_asking`]), reset ([`Pool::release`]), or idle as it is
    /// ([`Pool::release_kept`]). Not clean: closed, and a session that
    /// asked gets no value.
    pub fn park(
        &mut self,
        id: BackendId,
        clean: bool,
        park: Park,
        now: Instant,
        out: &mut Vec<PoolEvent>,
    ) {
        let Park { kept, reset, ask } = park;
        match ask {
            Some(session) if clean => self.park_asking(id, session, kept, reset, now, out),
            Some(session) => {
                out.push(PoolEvent::LastInsertId {
                    session,
                    value: None,
                });
                self.release(id, false, now, out);
            }
            // Reset, then idle with no settings (a session with its own
            // gets them replayed).
            None if clean && reset => self.release(id, true, now, out),
            None if clean => self.release_kept(id, kept, now, out),
            None => self.release(id, false, now, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARMED: ReceiveLeft = ReceiveLeft {
        armed: true,
        bytes_queued: false,
        end: ReceiveEnd::Open,
        chunk_in_flight: false,
    };

    #[test]
    fn a_park_that_keeps_the_connection_leaves_the_receive_armed() {
        assert_eq!(give_back(true, true, ARMED), GiveBack::KeepArmed);
    }

    #[test]
    fn a_clean_release_with_the_receive_armed_cancels_it_first() {
        assert_eq!(give_back(true, false, ARMED), GiveBack::CancelFirst);
        let sending = ReceiveLeft {
            chunk_in_flight: true,
            ..ARMED
        };
        assert_eq!(give_back(true, true, sending), GiveBack::CancelFirst);
    }

    #[test]
    fn bytes_or_an_end_left_on_the_receive_make_the_connection_dirty() {
        let spoke = ReceiveLeft {
            bytes_queued: true,
            ..ARMED
        };
        assert_eq!(give_back(true, true, spoke), GiveBack::Now { clean: false });
        let closed = ReceiveLeft {
            armed: false,
            end: ReceiveEnd::Other,
            ..ARMED
        };
        assert_eq!(
            give_back(true, false, closed),
            GiveBack::Now { clean: false }
        );
    }

    #[test]
    fn a_receive_that_its_cancel_ended_leaves_the_connection_clean() {
        let cancelled = ReceiveLeft {
            armed: false,
            end: ReceiveEnd::Cancelled,
            ..ARMED
        };
        assert_eq!(
            give_back(true, false, cancelled),
            GiveBack::Now { clean: true }
        );
        let idle = ReceiveLeft {
            armed: false,
            ..ARMED
        };
        assert_eq!(give_back(true, true, idle), GiveBack::Now { clean: true });
    }

    #[test]
    fn a_session_that_says_dirty_is_dirty_whatever_the_receive() {
        assert_eq!(
            give_back(false, true, ARMED),
            GiveBack::Now { clean: false }
        );
        let idle = ReceiveLeft {
            armed: false,
            ..ARMED
        };
        assert_eq!(
            give_back(false, false, idle),
            GiveBack::Now { clean: false }
        );
    }

    #[test]
    fn only_the_cancels_own_end_is_clean_after_it() {
        assert!(clean_after_cancel(false, ReceiveEnd::Cancelled));
        assert!(!clean_after_cancel(true, ReceiveEnd::Cancelled));
        assert!(!clean_after_cancel(false, ReceiveEnd::Other));
        assert!(!clean_after_cancel(false, ReceiveEnd::Open));
    }
}
