//! ringgate's io_uring layer: the ring (set-up, submission, completion
//! tokens, direct descriptors) and the read buffers registered with it
//! (fixed slots, the provided-buffer ring, the heap fallback), with the rules
//! for how long the kernel may hold each buffer (see [`buffers`]).
//!
//! Every `unsafe` block of ringgate lives in this crate, each with a
//! `// SAFETY:` note; the crates above it forbid unsafe code (wire denies
//! it, allowing it in one test that reads a dropped value's memory).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod buffers;
pub mod ring;
pub mod sys;
