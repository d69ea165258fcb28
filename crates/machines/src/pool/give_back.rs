//! Whether a backend connection that its session gives back is still
//! clean, when the driver's relay read it through a receive that stays
//! armed between reads (ring mode's multishot receive). The driver reports
//! what is left of that receive as typed facts ([`ReceiveLeft`]); the
//! decision is the pool's: a connection is reusable only if nothing is left
//! of the relay's receive (no bytes queued, no end but its cancel's), and a
//! receive still armed is cancelled first, or, at a park that keeps the
//! connection as it is, left armed as the pool's close watch.

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
