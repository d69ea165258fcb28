//! How one I/O operation ended, as the driver read it from its completion
//! queue entry: the typed event every machine takes instead of a raw
//! `-errno` result, so that no machine needs the kernel's error numbers.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// It succeeded. For a read or a write, the bytes it moved; a read of
    /// 0 bytes is the peer's end of stream. For a connect, 0. For a poll,
    /// the events it saw.
    Done(usize),
    /// It was cancelled before it completed: the driver cancelled it, or
    /// its linked timeout fired (the kernel's ECANCELED).
    Cancelled,
    /// It failed with this errno (positive), as the kernel said.
    Failed(i32),
    /// The kernel's part succeeded, but the proxy found the operation
    /// failed: what it found, in its own words rather than an errno.
    Fault(Fault),
}

/// What the proxy itself finds wrong with an operation the kernel
/// completed. Every one is a failure, as a failed errno is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The TLS record layer failed: a record did not decode, or sealing one
    /// did.
    Tls,
    /// The compression leg could not decode what the client sent.
    Compression,
    /// A message does not fit the read buffer, so it can never be read
    /// whole.
    TooLarge,
    /// A write moved no byte: the peer accepts nothing more.
    WroteNothing,
    /// The write was cut short because the connection is closing.
    Closing,
    /// The bytes a write names are not in the buffer it writes from.
    OutOfRange,
    /// Bytes the ring received could not be kept for the reader (a
    /// receive without its buffer, or no room behind kept bytes).
    BytesLost,
    /// A connection given back received bytes, or its peer's end, before
    /// the cancel of its receive: the server spoke unasked.
    Unsolicited,
}

impl Fault {
    /// The log's words for it.
    pub fn text(self) -> &'static str {
        match self {
            Fault::Tls => "TLS error",
            Fault::Compression => "compression error",
            Fault::TooLarge => "message too large for the read buffer",
            Fault::WroteNothing => "the peer accepted no bytes",
            Fault::Closing => "the connection is closing",
            Fault::OutOfRange => "the bytes to write are not in the buffer",
            Fault::BytesLost => "received bytes were lost",
            Fault::Unsolicited => "the server spoke unasked",
        }
    }
}

impl Completion {
    /// Bytes moved: the count of a successful read or write, 0 otherwise.
    pub fn bytes(self) -> usize {
        match self {
            Completion::Done(n) => n,
            _ => 0,
        }
    }

    /// A read that brought bytes (not EOF, not an error).
    pub fn brought_bytes(self) -> bool {
        self.bytes() > 0
    }

    /// A read that found the peer's end of stream.
    pub fn is_eof(self) -> bool {
        self == Completion::Done(0)
    }

    /// It did not succeed (failed, cancelled, or found faulty).
    pub fn is_error(self) -> bool {
        !matches!(self, Completion::Done(_))
    }

    /// Why it did not succeed, for a log line ("" when it succeeded).
    pub fn error(self) -> ErrorText {
        ErrorText(self)
    }
}

/// [`Completion::error`]'s text: the operating system's message for a
/// kernel's errno, as `std::io::Error` words it, or the proxy's own words
/// for a fault it found.
pub struct ErrorText(Completion);

impl fmt::Display for ErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Completion::Done(_) => Ok(()),
            Completion::Cancelled => f.write_str("operation cancelled"),
            Completion::Failed(errno) => std::io::Error::from_raw_os_error(errno).fmt(f),
            Completion::Fault(fault) => f.write_str(fault.text()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_of_nothing_is_eof_and_brings_no_bytes() {
        assert!(Completion::Done(0).is_eof());
        assert!(!Completion::Done(0).brought_bytes());
        assert!(!Completion::Done(0).is_error());
        assert_eq!(Completion::Done(7).bytes(), 7);
        assert!(Completion::Cancelled.is_error());
        assert_eq!(Completion::Failed(32).bytes(), 0);
    }

    #[test]
    fn a_fault_is_a_failure_in_the_proxys_words() {
        let tls = Completion::Fault(Fault::Tls);
        assert!(tls.is_error());
        assert!(!tls.is_eof());
        assert!(!tls.brought_bytes());
        assert_eq!(tls.bytes(), 0);
        assert_eq!(tls.error().to_string(), "TLS error");
        assert_eq!(
            Completion::Fault(Fault::WroteNothing).error().to_string(),
            "the peer accepted no bytes"
        );
    }

    #[test]
    fn the_error_text_is_the_systems_message() {
        let text = Completion::Failed(32).error().to_string();
        assert_eq!(text, std::io::Error::from_raw_os_error(32).to_string());
        assert_eq!(
            Completion::Cancelled.error().to_string(),
            "operation cancelled"
        );
    }
}
