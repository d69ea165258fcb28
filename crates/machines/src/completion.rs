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
    /// It failed with this errno (positive).
    Failed(i32),
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

    /// It did not succeed (failed or cancelled).
    pub fn is_error(self) -> bool {
        !matches!(self, Completion::Done(_))
    }

    /// Why it did not succeed, for a log line ("" when it succeeded).
    pub fn error(self) -> ErrorText {
        ErrorText(self)
    }
}

/// [`Completion::error`]'s text: the operating system's message for the
/// errno, as `std::io::Error` words it.
pub struct ErrorText(Completion);

impl fmt::Display for ErrorText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Completion::Done(_) => Ok(()),
            Completion::Cancelled => f.write_str("operation cancelled"),
            Completion::Failed(errno) => std::io::Error::from_raw_os_error(errno).fmt(f),
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
    fn the_error_text_is_the_systems_message() {
        let text = Completion::Failed(32).error().to_string();
        assert_eq!(text, std::io::Error::from_raw_os_error(32).to_string());
        assert_eq!(
            Completion::Cancelled.error().to_string(),
            "operation cancelled"
        );
    }
}
