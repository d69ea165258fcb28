//! The write side that both TLS legs share: the client leg (`tls_io`) and
//! the backend leg (`backend_tls_io`).
//!
//! Every write of the layers above (a session's packet, a relay write, a
//! backend connection's own packet) is sealed into records that queue in
//! [`TlsOutbox::next`]. One socket write at a time goes out from `out`.
//! The write the records stand for completes, with its *plain* length, once
//! its last record's bytes are written. Writes complete in order, so the
//! layers above see the same completions as without TLS. Handshake records,
//! tickets and alerts join the same queue: the leg writes them into `next`.
//!
//! A failed socket write fails every write still waiting, and every later
//! one: a TLS stream cannot skip a record, so nothing after a lost byte
//! can be sent.

use std::collections::VecDeque;
use uring::ring::SockRef;

use machines::completion::{Completion, Fault};
use uring::buffers::WriteBuf;
use uring::ring::Sqe;

/// A ciphertext `Vec` keeps its capacity between writes, up to this (a
/// large result passes; an idle connection does not keep its peak).
const KEEP_CAPACITY: usize = 64 * 1024;

struct Waiting<U> {
    upper: U,
    /// The result the write reports: the plain bytes it covered.
    plain: usize,
    /// Done once this many ciphertext bytes are written.
    end: u64,
}

/// Sealed records on their way to one socket; `U` names the writes of the
/// layers above.
pub(super) struct TlsOutbox<U> {
    /// The ciphertext being written (at most one write in flight).
    out: WriteBuf,
    out_pos: usize,
    /// Ciphertext made meanwhile; written next. The leg writes handshake
    /// records here directly.
    pub(super) next: Vec<u8>,
    /// Ciphertext bytes written so far.
    written: u64,
    waiting: VecDeque<Waiting<U>>,
    /// The socket failed a write: every later write fails with this.
    failed: Option<Completion>,
}

/// What a completed socket write leads to.
pub(super) enum Written<U> {
    /// Part of `out` is still unwritten: submit this for the rest.
    Again(Sqe),
    /// The writes of the layers above that are now complete, in order,
    /// with their results (plain length, or the error).
    Done(Vec<(U, Completion)>),
}

impl<U: Copy> TlsOutbox<U> {
    pub(super) fn new() -> Self {
        TlsOutbox {
            out: WriteBuf::default(),
            out_pos: 0,
            next: Vec::new(),
            written: 0,
            waiting: VecDeque::new(),
            failed: None,
        }
    }

    /// A socket write is in flight (the fd and `out` are named by an SQE).
    pub(super) fn in_flight(&self) -> bool {
        self.out.in_flight()
    }

    /// Seal a write of `plain_len` plain bytes for `upper`: `encrypt`
    /// appends its records to the queue. Err is the result to complete
    /// `upper` with at once (the socket failed earlier, or sealing did).
    pub(super) fn seal<E>(
        &mut self,
        upper: U,
        plain_len: usize,
        encrypt: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), Completion> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        encrypt(&mut self.next).map_err(|_| Completion::Fault(Fault::Tls))?;
        // Every byte queued so far, handshake records included.
        let unwritten = self.out.len() - self.out_pos.min(self.out.len()) + self.next.len();
        self.waiting.push_back(Waiting {
            upper,
            plain: plain_len,
            end: self.written + unwritten as u64,
        });
        Ok(())
    }

    /// The next socket write, if none is in flight and records wait.
    pub(super) fn start(&mut self, fd: SockRef, user_data: u64) -> Option<Sqe> {
        if self.out.in_flight() || self.next.is_empty() || self.failed.is_some() {
            return None;
        }
        let out = self.out.bytes_mut();
        out.clear();
        std::mem::swap(out, &mut self.next);
        if self.next.capacity() > KEEP_CAPACITY {
            self.next = Vec::new();
        }
        self.out_pos = 0;
        Some(self.out.write_sqe(fd, 0, user_data))
    }

    /// A socket write completed with `res`. `stop`: the connection is
    /// closing, so a short write is not continued and what waits fails.
    pub(super) fn on_written(
        &mut self,
        res: Completion,
        stop: bool,
        fd: SockRef,
        user_data: u64,
    ) -> Written<U> {
        self.out.complete();
        if let Completion::Done(n @ 1..) = res {
            self.out_pos += n;
            self.written += n as u64;
            if self.out_pos < self.out.len() && !stop {
                return Written::Again(self.out.write_sqe(fd, self.out_pos, user_data));
            }
        }
        let failure = match res {
            Completion::Done(0) => Some(Completion::Fault(Fault::WroteNothing)),
            Completion::Done(_) if stop => Some(Completion::Fault(Fault::Closing)),
            Completion::Done(_) => None,
            res => Some(res),
        };
        if let Some(failure) = failure {
            self.failed.get_or_insert(failure);
        }
        let mut done = Vec::new();
        while let Some(w) = self.waiting.front() {
            let result = match self.failed {
                Some(e) => e,
                None if w.end <= self.written => Completion::Done(w.plain),
                None => break,
            };
            done.push((w.upper, result));
            self.waiting.pop_front();
        }
        if self.out_pos >= self.out.len() {
            let out = self.out.bytes_mut();
            out.clear();
            if out.capacity() > KEEP_CAPACITY {
                *out = Vec::new();
            }
        }
        Written::Done(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESET: Completion = Completion::Failed(libc::ECONNRESET);

    fn seal(
        o: &mut TlsOutbox<u8>,
        upper: u8,
        plain: usize,
        sealed: &[u8],
    ) -> Result<(), Completion> {
        o.seal(upper, plain, |next: &mut Vec<u8>| {
            next.extend_from_slice(sealed);
            Ok::<(), ()>(())
        })
    }

    fn done(w: Written<u8>) -> Vec<(u8, Completion)> {
        match w {
            Written::Done(d) => d,
            Written::Again(_) => panic!("expected Done"),
        }
    }

    /// Writes complete with their plain lengths, in order, only once their
    /// last ciphertext byte is written; a short write continues.
    #[test]
    fn writes_complete_in_order_after_their_last_record() {
        let mut o = TlsOutbox::new();
        seal(&mut o, 1, 3, &[0; 10]).unwrap();
        assert!(o.start(SockRef::Fd(-1), 7).is_some());
        assert!(o.in_flight());
        // Sealed while the first write is in flight: queued behind it.
        seal(&mut o, 2, 5, &[0; 20]).unwrap();
        assert!(o.start(SockRef::Fd(-1), 7).is_none());
        assert!(matches!(
            o.on_written(Completion::Done(4), false, SockRef::Fd(-1), 7),
            Written::Again(_)
        ));
        assert_eq!(
            done(o.on_written(Completion::Done(6), false, SockRef::Fd(-1), 7)),
            vec![(1, Completion::Done(3))]
        );
        assert!(o.start(SockRef::Fd(-1), 7).is_some());
        assert_eq!(
            done(o.on_written(Completion::Done(20), false, SockRef::Fd(-1), 7)),
            vec![(2, Completion::Done(5))]
        );
        assert!(
            o.start(SockRef::Fd(-1), 7).is_none(),
            "nothing left to write"
        );
    }

    /// A failed write fails everything waiting and every later seal.
    #[test]
    fn a_failed_write_fails_what_waits_and_what_comes() {
        let mut o = TlsOutbox::new();
        seal(&mut o, 1, 3, &[0; 10]).unwrap();
        o.start(SockRef::Fd(-1), 7).unwrap();
        seal(&mut o, 2, 5, &[0; 10]).unwrap();
        let d = done(o.on_written(RESET, false, SockRef::Fd(-1), 7));
        assert_eq!(d, vec![(1, RESET), (2, RESET)]);
        assert_eq!(seal(&mut o, 3, 1, &[0; 4]), Err(RESET));
        assert!(o.start(SockRef::Fd(-1), 7).is_none());
    }

    /// Closing: a short write is not continued and what waits fails.
    #[test]
    fn stop_ends_a_short_write() {
        let mut o = TlsOutbox::new();
        seal(&mut o, 1, 3, &[0; 10]).unwrap();
        o.start(SockRef::Fd(-1), 7).unwrap();
        assert_eq!(
            done(o.on_written(Completion::Done(4), true, SockRef::Fd(-1), 7)),
            vec![(1, Completion::Fault(Fault::Closing))]
        );
    }

    /// A write of no byte fails what waits: the peer accepts nothing.
    #[test]
    fn a_write_of_nothing_fails_what_waits() {
        let mut o = TlsOutbox::new();
        seal(&mut o, 1, 3, &[0; 10]).unwrap();
        o.start(SockRef::Fd(-1), 7).unwrap();
        assert_eq!(
            done(o.on_written(Completion::Done(0), false, SockRef::Fd(-1), 7)),
            vec![(1, Completion::Fault(Fault::WroteNothing))]
        );
    }

    /// Sealing that fails completes the write with a TLS fault, queueing
    /// nothing.
    #[test]
    fn a_sealing_error_is_a_tls_fault() {
        let mut o: TlsOutbox<u8> = TlsOutbox::new();
        let r = o.seal(1, 3, |_: &mut Vec<u8>| Err(()));
        assert_eq!(r, Err(Completion::Fault(Fault::Tls)));
        assert!(o.start(SockRef::Fd(-1), 7).is_none());
    }
}
